"""Fuse elementwise consumers into their producer's write-back.

Condition: a node's only output is read by exactly one node, an elementwise
op (``Op.elementwise``: relu, bias and residual adds, the BatchNorm affine
that could not fold, casts...) that reads it as its first operand (or as
either operand of a commutative op) and produces the same shape. Rewrite:
the consumer joins the producer's ``epilogue`` and the pair takes the
consumer's place in the graph (where the consumer's other operands exist,
such as a bias reshaped after the producer), so the pair is one kernel and
the intermediate is never written to memory (``graph.lower`` inlines the
epilogue into the producer's last block). An op with ``Op.relu_attr``
(``dense``) takes a following relu as its own ``relu`` attribute, the
epilogue its template already computes. Views (``Op.view``: reshapes) are
left alone: they lower to views, not kernels; but a reshape between a
producer and an elementwise consumer (a transformer's dense layer writes
``(batch * 128, 3072)`` rows that a ``(batch, 128, 3072)`` GELU reads) is
moved after the consumer (``_sink_view``), its other operands reshaped
alike where they have the view's shape, so the consumer joins the producer.

``fuse_pools`` (after the layout pass) gives a reduction the same treatment
where the producer's schedule allows it: a channel-blocked pooling
(``Op.pools_blocked``: the global average pool) reading a convolution whose
tasks write whole maps of an image's channel block (``Op.image_block_tasks``:
the Winograd one) joins it as the last entry of its epilogue, and
``graph.lower`` computes it inside the convolution's parallel task (an
image's channel block), from the tile of output the task has just written
to its cache, so the convolution's output is never written to memory
and the pool is not a kernel of its own.

``fuse_prologues`` does the same for a producer: a direct convolution
(``Op.in_task_prologue``) whose output only such a convolution of one output
channel block reads, an image of it small enough for the task's cache,
becomes that convolution's ``prologue``, computed image by image inside
its tasks (the digits CNN's first conv: its output never leaves the core
that reads it, and one launch fewer).
"""
from __future__ import annotations

import numpy as np
import tvm_ffi

from ..te import get_op
from .ir import Graph, Node, Value

RELU = get_op("relu")
RESHAPE = get_op("reshape")
#: the most saturating ops (``Op.saturates``: ``quantize``) one epilogue chains: each is a clamp of a
#: rounding of what came before, and TVM's simplifier takes time exponential in how many are nested (a QDQ
#: model's GELU, every op of it between QuantizeLinear and DequantizeLinear, would not compile)
MAX_SATURATING = 2
#: the most bytes of a prologue's output per image (``fuse_prologues``)
PROLOGUE_BYTES = 16 << 10


def _same_dims(a, b) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b) or \
        (not isinstance(a, int) and not isinstance(b, int) and tvm_ffi.structural_equal(a, b))


def _sink_view(graph: Graph, out) -> bool:
    """Where ``out``'s sole reader is a view (a reshape) whose sole reader is an
    elementwise op (reading it first, or either operand of a commutative
    op), apply that op to ``out`` and reshape its result instead; return
    whether it did. Each other operand of the op of the view's shape is
    reshaped to ``out``'s (a view); one of lower rank must broadcast the same
    against either shape (its dims among their shared trailing dims)."""
    view = graph.sole_user(out)
    if view is None or not view.op.view or len(view.outputs) != 1 or view.epilogue:
        return False
    viewed = view.outputs[0]
    user = graph.sole_user(viewed)
    if user is None or not user.op.elementwise or user.epilogue or user.outputs[0].shape != viewed.shape:
        return False
    if user.inputs[0] is not viewed and not (user.op.commutative and user.inputs[1] is viewed):
        return False
    trailing = 0
    while trailing < min(len(out.shape), len(viewed.shape)) and \
            _same_dims(out.shape[-1 - trailing], viewed.shape[-1 - trailing]):
        trailing += 1
    others = [v for v in user.inputs if v is not viewed]
    if not all(v.shape == viewed.shape or len(v.shape) <= trailing for v in others):
        return False
    if user.inputs[0] is not viewed:
        user.inputs = [user.inputs[1], user.inputs[0]]
    user.inputs = [out] + [graph.insert(user, RESHAPE, {"shape": out.shape}, v, f"{v.name}.as_rows")
                           if v.shape == viewed.shape and len(v.shape) > trailing else v for v in user.inputs[1:]]
    result = user.outputs[0]
    moved = Value(out.shape, result.dtype, node=user, name=f"{result.name}.rows")
    user.outputs = [moved]
    view.inputs, view.outputs, result.node = [moved], [result], view
    graph.nodes.remove(view)
    graph.nodes.insert(graph.nodes.index(user) + 1, view)
    return True


def _absorbable(graph: Graph, node: Node) -> Node | None:
    """The consumer ``node``'s output can take as its epilogue, if any."""
    if len(node.outputs) != 1 or node.op.data_dependent or node.op.view:
        return None
    out = node.outputs[0]
    _sink_view(graph, out)
    user = graph.sole_user(out)
    if user is None or not user.op.elementwise or user.epilogue or user.outputs[0].shape != out.shape:
        return None
    if user.inputs[0] is not out:
        if not user.op.commutative or user.inputs[1] is not out:
            return None
        user.inputs = [user.inputs[1], user.inputs[0]]
    return user if _movable(graph, node, user) else None


def _movable(graph: Graph, node: Node, user: Node) -> bool:
    """Whether ``node`` can move to its consumer ``user``'s place: no update
    between the two overwrites what ``node`` reads."""
    reads = {id(v) for v in node.operands()}
    between = graph.nodes[graph.nodes.index(node) + 1:graph.nodes.index(user)]
    return not any(m.inplace and any(id(m.inputs[m.op.inplace[k]]) in reads for k in range(len(m.outputs)))
                   for m in between)


def _absorb(graph: Graph, node: Node, user: Node) -> None:
    """``node`` takes the consumer ``user``'s output and place (its other
    operands, such as a bias reshaped after the producer, exist there, and
    nothing between the two read the producer's output, its sole reader)."""
    node.outputs = [user.outputs[0]]
    user.outputs[0].node = node
    graph.nodes.remove(node)
    graph.nodes[graph.nodes.index(user)] = node


def fuse_epilogues(graph: Graph) -> int:
    """Fuse every elementwise chain into its producer; return how many ops were absorbed."""
    absorbed = 0
    for node in list(graph.nodes):
        while node in graph.nodes:
            user = _absorbable(graph, node)
            if user is None or user.op.saturates and sum(op.saturates for op, _, _ in node.epilogue) >= \
                    MAX_SATURATING:
                break
            if node.op.relu_attr and user.op is RELU and not node.attrs["relu"] and not node.epilogue:
                node.attrs = {**node.attrs, "relu": True}
            else:
                node.epilogue.append((user.op, dict(user.attrs), list(user.inputs[1:])))
            _absorb(graph, node, user)
            absorbed += 1
    return absorbed


def fuse_pools(graph: Graph) -> int:
    """Fuse each channel-blocked pooling into the ``image_block_tasks``
    convolution it alone reads; return how many were fused."""
    fused = 0
    for node in list(graph.nodes):
        if not node.op.image_block_tasks or len(node.outputs) != 1 or not node.attrs["out_block"]:
            continue
        user = graph.sole_user(node.outputs[0])
        if user is None or not user.op.pools_blocked or user.attrs["layout"] != "NCHWc" \
                or not _movable(graph, node, user):
            continue
        node.epilogue.append((user.op, dict(user.attrs), []))
        _absorb(graph, node, user)
        fused += 1
    return fused


def _one_block(node: Node) -> bool:
    """Whether the Winograd conv writes one output channel block: a task per
    image, so a prologue computed in it runs once per image."""
    return -(-int(node.attrs["out_channels"]) // int(node.inputs[1].shape[4])) == 1


def _image_bytes(value) -> int | None:
    """Bytes of one image of ``value`` (None for a symbolic dim past the batch)."""
    total = np.dtype(value.dtype).itemsize
    for d in value.shape[1:]:
        if not isinstance(d, int):
            return None
        total *= d
    return total


def _prologue(graph: Graph, node: Node) -> Node | None:
    """The ``in_task_prologue`` convolution ``node`` (an ``image_block_tasks``
    convolution of one output channel block) can compute in its tasks, if
    any: the producer of its first input, read by it alone, at most
    ``PROLOGUE_BYTES`` an image."""
    if not node.op.image_block_tasks or node.prologue is not None or not _one_block(node):
        return None
    x = node.inputs[0]
    producer = x.node
    if (producer is None or producer not in graph.nodes or not producer.op.in_task_prologue
            or not producer.attrs["out_block"] or len(producer.outputs) != 1 or graph.sole_user(x) is not node):
        return None
    small = (_image_bytes(x) or PROLOGUE_BYTES + 1) <= PROLOGUE_BYTES
    return producer if small and _movable(graph, producer, node) else None


def fuse_prologues(graph: Graph) -> int:
    """Make each ``in_task_prologue`` convolution read only by an
    ``image_block_tasks`` (Winograd) convolution of one output channel
    block the prologue of that convolution, where one image of its output
    is at most ``PROLOGUE_BYTES``; return how many were fused."""
    fused = 0
    for node in list(graph.nodes):
        producer = _prologue(graph, node)
        if producer is None:
            continue
        node.prologue = producer
        graph.nodes.remove(producer)
        fused += 1
    return fused
