"""Pre-pack constant weights into the layout their kernel's template reads.

Condition: on the CPU, a ``dense`` whose weight is a constant, or an NCHW
``conv2d`` whose weight is a constant. Rewrite: the weight is packed once, at
export, into the blocks the template would copy it into on every call —
``pack_dense_weight`` at ``panel_width`` (panels of columns),
``pack_conv2d_weight`` at ``packed_channels`` (blocks of output channels) —
run by their own kernels; the node becomes ``dense_packed`` or
``conv2d_packed``, whose kernel reads the packed constant as it is: no pack
stage per call.

A small 3x3 stride-1 conv2d (``winograd_fits``) becomes ``conv2d_winograd``
instead, its weight transformed once (``winograd_conv2d_weight``, the same
channel blocks): 1.3-1.7x the direct kernel on the digits models' layers.
"""
from __future__ import annotations

import numpy as np

from ..schedules.cpu.conv2d import packed_channels
from ..schedules.cpu.matmul import panel_width
from ..te import get_op
from ..te.layout import blocks
from ..te.shapes import static
from ..te.winograd import OUT, TILE
from .fold import evaluate
from .ir import Graph, Node, Value


def _set_weight(node: Node, data, tag: str) -> None:
    """``node``'s weight replaced by the constant ``data`` (named ``weight@tag``)."""
    weight = node.inputs[1]
    node.inputs[1] = Value(data.shape, weight.dtype, data=data, name=f"{weight.name}@{tag}")


def _pack_dense(node: Node, target) -> None:
    weight = node.inputs[1]
    data = evaluate("pack_dense_weight", weight.data, bn=panel_width(int(weight.shape[1]), weight.dtype, target))
    node.op = get_op("dense_packed")
    _set_weight(node, data, "packed")


#: the most bytes of input tiles (16 positions x tiles x input channels) a
#: ``conv2d_winograd`` task may transform: the task's stages then stay in
#: L2. 16 -> 32 channels on an 8x8 map (16 KB): 118 us at 64 images where
#: the direct kernel takes 175; 64 -> 64 on 56x56 (3.2 MB): a tie; 256 ->
#: 256 on 14x14 (800 KB) 0.85x, 512 -> 512 on 7x7 (16 blocks, each
#: transforming the tiles again) 0.6x (znver4, interleaved)
WINOGRAD_TILE_BYTES = 64 << 10

#: the fewest input channels (the matrix products' depth) and the most output channel blocks
WINOGRAD_MIN_CHANNELS, WINOGRAD_MAX_BLOCKS = 16, 2


def winograd_fits(workload, oc: int) -> bool:
    """Whether an NCHW ``conv2d`` runs as ``conv2d_winograd`` at export: a
    3x3 kernel, stride and dilation 1, a static map whose tiles' transform
    fits ``WINOGRAD_TILE_BYTES``, at least ``WINOGRAD_MIN_CHANNELS`` input
    channels and at most ``WINOGRAD_MAX_BLOCKS`` blocks of ``oc`` outputs."""
    a, (_, i, kh, kw) = workload.attrs, (static(d) for d in workload.shapes[1])
    _, o, oh, ow = (static(d) for d in workload.out_shapes[0])
    if (kh, kw) != (3, 3) or tuple(a["stride"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        return False
    if not all(isinstance(d, int) for d in (i, o, oh, ow)):
        return False
    tiles = blocks(oh, OUT) * blocks(ow, OUT)
    tile_bytes = TILE * TILE * tiles * i * np.dtype(workload.dtypes[0]).itemsize
    return i >= WINOGRAD_MIN_CHANNELS and blocks(o, oc) <= WINOGRAD_MAX_BLOCKS and tile_bytes <= WINOGRAD_TILE_BYTES


def _pack_conv2d(node: Node, target, winograd: bool) -> None:
    x, weight = node.inputs
    workload = node.op.check([x.shape, weight.shape], [x.dtype, weight.dtype], node.attrs)
    oc = packed_channels(workload, target)
    if winograd and winograd_fits(workload, oc):
        data = evaluate("winograd_conv2d_weight", weight.data, oc=oc)
        node.op = get_op("conv2d_winograd")
        node.attrs = node.op.parse_attrs({"out_channels": int(weight.shape[0]), "padding": node.attrs["padding"]})
        _set_weight(node, data, "winograd")
        return
    data = evaluate("pack_conv2d_weight", weight.data, oc=oc)
    attrs = {k: v for k, v in node.attrs.items() if k != "layout"}
    node.op = get_op("conv2d_packed")
    node.attrs = node.op.parse_attrs({**attrs, "out_channels": int(weight.shape[0])})
    _set_weight(node, data, "packed")


def prepack_weights(graph: Graph, target, winograd: bool = True) -> int:
    """Pack every constant dense and NCHW conv2d weight; return how many were
    packed. ``winograd=False`` keeps every conv direct."""
    if target.kind != "cpu":
        return 0
    packed = 0
    for node in graph.nodes:
        if len(node.inputs) < 2 or not node.inputs[1].is_const:
            continue
        if node.op.name == "dense":
            _pack_dense(node, target)
        elif node.op.name == "conv2d" and node.attrs["layout"] == "NCHW":
            _pack_conv2d(node, target, winograd)
        else:
            continue
        packed += 1
    return packed
