"""Winograd convolutions in a training step, whose weights change every call.

Condition: on the CPU, an NCHW ``conv2d`` whose weight is no constant (a
parameter), or a stride-1 ``conv2d_backward_data`` (a stride-1 convolution
of ``gy`` with the kernel flipped and its channels swapped, padding ``2 -
p``), that ``prepack.winograd_tile`` would run as Winograd at export: a 3x3
kernel at stride and dilation 1, 16 or more input channels, tiles within
``WINOGRAD_TILE_BYTES``. Rewrite: a ``winograd_conv2d_weight`` node
transforms the weight (``flip`` for the data gradient) in every call, and the
convolution becomes ``conv2d_winograd``, its epilogue kept, reading its
input in blocks of a vector's channels (a ``to_blocked`` node: its input
transform reads a vector of channels at a time) where the channels are whole
vectors, and writing NCHW. The weight transform is small next to the
convolution (O x I x 36 values where the convolution reads the whole
batch). znver4, at 64 images, direct against blocking + Winograd F(4x4)
(``benchmarks/winograd_vs_direct.py``, interleaved): 16 -> 32 channels on
28x28 2.32 ms against 0.07 + 1.04; its data gradient 32 -> 16 2.33 against
0.14 + 0.98; 16 -> 32 on 8x8 157 us against 9 + 80; 64 -> 64 on 16x16 at 32
images 2.49 ms against 0.05 + 1.04. Reading the NCHW input as it lies, the
last took 3.69 ms.

Rounding differs from the direct kernel's as at export (``te/winograd.py``:
about 1e-6 of the output's magnitude for F(2x2), 1e-5 for F(4x4));
``kiln.compile(..., winograd=False)`` keeps every convolution direct.
"""
from __future__ import annotations

from ..schedules.cpu.conv2d_defaults import packed_channels
from ..te import get_op
from ..te.shapes import static
from .ir import Graph, Node, Value
from .prepack import winograd_tile


def _as_conv(node: Node):
    """The stride-1 convolution ``node`` computes, as ``(x, w shape, padding,
    flip)``, or None: a forward conv2d, or a data gradient that is one."""
    a = node.attrs
    if node.op.name not in ("conv2d", "conv2d_backward_data") or tuple(a["stride"]) != (1, 1) \
            or tuple(a["dilation"]) != (1, 1):
        return None
    if node.op.name == "conv2d":
        if a["layout"] != "NCHW" or node.inputs[1].is_const:
            return None
        return node.inputs[0], tuple(node.inputs[1].shape), tuple(a["padding"]), False
    o, c, kh, kw = (static(d) for d in node.inputs[1].shape)
    padding = tuple(k - 1 - p for k, p in zip((kh, kw), a["padding"]))
    if min(padding) < 0:  # a padding wider than the kernel: no convolution of gy with zero padding
        return None
    return node.inputs[0], (c, o, kh, kw), padding, True


def winograd_convs(graph: Graph, target) -> int:
    """Rewrite every convolution the module docstring names; return how many."""
    if target.kind != "cpu":
        return 0
    count, blocked = 0, {}  # a value blocked once, whichever convolutions read it
    for node in list(graph.nodes):
        found = _as_conv(node)
        if found is None:
            continue
        x, w_shape, padding, flip = found
        weight = node.inputs[1]
        workload = get_op("conv2d").check([x.shape, w_shape], [x.dtype, weight.dtype], {"padding": padding})
        tile = winograd_tile(workload)
        if not tile:
            continue
        weights = _insert(graph, node, get_op("winograd_conv2d_weight"),
                          {"oc": packed_channels(workload, target), "tile": tile, "flip": flip}, weight,
                          f"{weight.name}@winograd")
        lanes, channels = target.lanes(x.dtype), static(x.shape[1])
        in_block = lanes if channels % lanes == 0 else 0
        if in_block:
            if id(x) not in blocked:
                blocked[id(x)] = _insert(graph, node, get_op("to_blocked"), {"block": in_block}, x,
                                         f"{x.name}@blocked")
            x = blocked[id(x)]
        node.op = get_op("conv2d_winograd")
        node.attrs = node.op.parse_attrs({"out_channels": w_shape[0], "padding": padding, "in_block": in_block})
        node.inputs = [x, weights]
        count += 1
    return count


def _insert(graph: Graph, before: Node, op, attrs: dict, value: Value, name: str) -> Value:
    """``op(value)`` as a node of its own placed right before ``before``; its output."""
    attrs = op.parse_attrs(attrs)
    check = op.check([value.shape], [value.dtype], attrs)
    node = Node(op, attrs, [value])
    node.outputs = [Value(tuple(check.out_shapes[0]), check.out_dtypes[0], node=node, name=name)]
    graph.nodes.insert(graph.nodes.index(before), node)
    return node.outputs[0]
