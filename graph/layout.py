"""Carry a channel-blocked layout (NCHW[c]c) from convolution to convolution.

Condition: a convolution that reads and writes its weight's channel blocks
(``Op.channel_blocked``: ``conv2d_packed`` and ``conv2d_winograd``, made by
``graph.implement``) whose every reader can take its output in those blocks:
the data input of another such convolution, an NCHW pooling that can run
blocked (``Op.pools_blocked``: ``global_avg_pool2d``), a max pool nothing
is fused into whose own readers all take blocks (``Op.passes_blocks``:
ResNet's stem pool), or the residual operand of a convolution that is itself
blocked with the same block width (its fused ``add``). Rewrite: the
convolution writes (N, ceil(O / oc), OH, OW, oc) (``out_block``), a
contiguous vector per output pixel instead of a strided transpose; a
convolution reading it takes ``in_block``; a pooling reading it runs in the
blocked layout and is followed by ``from_blocked`` (on its 1x1 output); a
max pool reading it pools the blocks and writes blocks; the per-channel
constants of a blocked convolution's epilogue (bias, an unfolded BatchNorm
affine) are blocked once, at export. Values the graph returns and every
other reader stay NCHW, so layout conversions happen only at the edges of a
blocked region — none inside it.
"""
from __future__ import annotations

import numpy as np

from ..te import get_op
from ..te.shapes import static
from .fold import evaluate
from .ir import Graph, Node, Value

TO_BLOCKED = get_op("to_blocked")


def _block(node: Node) -> int:
    """The channel block a convolution's output would have: its weight's."""
    return int(static(node.inputs[1].shape[4]))


def _epilogue_blockable(node: Node) -> bool:
    """Every operand of the convolution's epilogue can be blocked: a constant
    that is per channel (1, O, 1, 1) or a scalar, or a same-shaped value."""
    out = node.outputs[0].shape
    for _, _, others in node.epilogue:
        for v in others:
            if v.is_const:
                shape = tuple(v.data.shape)
                if not (v.data.size == 1 or (len(shape) == 4 and shape[0] == shape[2] == shape[3] == 1
                                             and shape[1] == out[1])):
                    return False
            elif tuple(v.shape) != tuple(out):
                return False
    return True


def _reader_takes(graph: Graph, reader: Node, value: Value, block: int, blocked: dict) -> bool:
    if reader.op.passes_blocks and reader.inputs[0] is value and reader.attrs["layout"] == "NCHW" \
            and not reader.epilogue and reader.prologue is None:
        out = reader.outputs[0]  # its readers come later in the graph: decided already
        return not graph.is_output(out) and all(_reader_takes(graph, r, out, block, blocked)
                                                for r in graph.users(out))
    if reader.op.channel_blocked and reader.inputs[0] is value and not any(v is value for v in reader.operands()[1:]):
        return True
    if reader.op.pools_blocked and reader.attrs["layout"] == "NCHW" and reader.attrs["keepdims"] \
            and not any(others for _, _, others in reader.epilogue):  # an epilogue of no operand (quantize)
        return True
    in_epilogue = any(v is value for _, _, others in reader.epilogue for v in others)
    return in_epilogue and blocked.get(id(reader)) == block and reader.inputs[0] is not value


def _plan(graph: Graph) -> dict:
    """``{id(conv node): block}`` for every convolution to block, decided from
    the last node back (a reader is decided before its producer)."""
    blocked: dict = {}
    for node in reversed(graph.nodes):
        if not node.op.channel_blocked or node.attrs["out_block"] or not _epilogue_blockable(node):
            continue
        out, block = node.outputs[0], _block(node)
        readers = graph.users(out)
        if readers and not graph.is_output(out) and all(_reader_takes(graph, r, out, block, blocked) for r in readers):
            blocked[id(node)] = block
    return blocked


def _block_constant(v: Value, block: int) -> Value:
    """A per-channel (1, O, 1, 1) constant as (1, B, 1, 1, block); a scalar as a 5-D one."""
    if v.data.size == 1:
        data = v.data.reshape((1,) * 5)
    else:
        data = evaluate("to_blocked", np.ascontiguousarray(v.data), block=block)
    return Value(data.shape, v.dtype, data=data, name=v.name + "@blocked")


def block_layouts(graph: Graph) -> int:
    """Carry blocked layouts through ``graph`` in place; return the convolutions that write blocks."""
    plan, converted = _plan(graph), {}
    for node in list(graph.nodes):
        x = node.inputs[0] if node.inputs else None
        if node.op.channel_blocked and x is not None and len(x.shape) == 5:
            node.attrs = {**node.attrs, "in_block": int(static(x.shape[4]))}
        if id(node) in plan:
            block = plan[id(node)]
            node.attrs = {**node.attrs, "out_block": True}
            node.epilogue = [(op, attrs, [_block_operand(graph, node, v, block, converted) for v in others])
                             for op, attrs, others in node.epilogue]
            node.outputs[0].shape = TO_BLOCKED.infer_shape(node.outputs[0].shape, block)
        elif node.op.pools_blocked and node.attrs["layout"] == "NCHW" and x is not None and len(x.shape) == 5:
            _pool_blocked(graph, node, int(node.outputs[0].shape[1]))
        elif node.op.passes_blocks and node.attrs["layout"] == "NCHW" and x is not None and len(x.shape) == 5:
            node.attrs = {**node.attrs, "layout": "NCHWc"}  # its producer was blocked only if its readers take blocks
            node.outputs[0].shape = node.op.infer_shape(x.shape, **node.attrs)
    return len(plan)


def _block_operand(graph: Graph, node: Node, v: Value, block: int, converted: dict) -> Value:
    """An epilogue operand of a blocked convolution, blocked: a constant once,
    at export; a value computed blocked as it is; any other value (a graph
    input, an NCHW op's output) through a ``to_blocked`` node placed just
    before ``node``, made once per value."""
    if v.is_const:
        return _block_constant(v, block)
    if len(v.shape) == 5:
        return v
    if id(v) not in converted:
        converted[id(v)] = graph.insert(node, TO_BLOCKED, {"block": block}, v, v.name + "@blocked")
    return converted[id(v)]


def _pool_blocked(graph: Graph, node: Node, channels: int) -> None:
    """Pool in the blocked layout, then ``from_blocked`` its 1x1 output back to NCHW."""
    x, nchw = node.inputs[0], node.outputs[0]
    node.attrs = {**node.attrs, "layout": "NCHWc"}
    pooled = Value(node.op.infer_shape(x.shape, **node.attrs), nchw.dtype, node=node, name=nchw.name + "@blocked")
    node.outputs = [pooled]
    back = Node(get_op("from_blocked"), {"channels": channels}, [pooled], [nchw])
    nchw.node = back
    graph.nodes.insert(graph.nodes.index(node) + 1, back)
