"""Pre-pack constant weights into the layout their kernel's template reads.

Condition: on the CPU, a ``dense`` whose weight is a constant, or an NCHW
``conv2d`` whose weight is a constant. Rewrite: the weight is packed once, at
export, into the blocks the template would copy it into on every call —
``pack_dense_weight`` at ``panel_width`` (panels of columns),
``pack_conv2d_weight`` at ``packed_channels`` (blocks of output channels) —
run by their own kernels; the node becomes ``dense_packed`` or
``conv2d_packed``, whose kernel reads the packed constant as it is: no pack
stage per call.

A 3x3 stride-1 conv2d with 16 or more input channels whose transformed
tiles fit ``WINOGRAD_TILE_BYTES`` (ResNet-18's 56x56 maps do, 112x112 ones
not) becomes ``conv2d_winograd`` instead, its weight transformed once
(``winograd_conv2d_weight``, the same channel blocks), in output tiles of
4 x 4 or 2 x 2 (``winograd_tile``): 1.3-3x the direct kernel.
"""
from __future__ import annotations

import numpy as np

from ..schedules.cpu.conv2d_defaults import packed_channels
from ..schedules.cpu.matmul import panel_width
from ..te import get_op
from ..te.layout import blocks
from ..te.shapes import static
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


#: the fewest input channels (the matrix products' depth) for a Winograd convolution
WINOGRAD_MIN_CHANNELS = 16

#: the most bytes of transformed input tiles (positions x tiles x input
#: channels) one ``conv2d_winograd`` task (an image and channel block) may
#: hold: past it the stages stream through memory. 64 -> 64 channels on
#: 56x56 (1.8 MB in F(4x4), 3.2 in F(2x2)): 3.1x and 1.8x the direct
#: kernel; on 112x112 (7.2 MB in F(4x4)) 1.16x; 32 -> 32 on 224x224 (14 MB,
#: one task) 0.72x (znver4, one image, interleaved)
WINOGRAD_TILE_BYTES = 4 << 20

#: the most input channels for F(4x4, 3x3): its rounding grows with its
#: products' depth (float32, the largest error over the output's largest
#: magnitude: 64 channels 5e-6, 256 1.2e-5, 512 2.8e-5, where F(2x2, 3x3)
#: stays under 1e-6 and the direct conv 2e-6)
WINOGRAD_F4_MAX_CHANNELS = 128


def _products(oh: int, ow: int, step: int) -> int:
    """Multiplies per output channel and input channel of F(step x step, 3x3) on an oh x ow map."""
    return blocks(oh, step) * blocks(ow, step) * (step + 2) ** 2


def winograd_tile(workload) -> int:
    """The output tile m with which an NCHW ``conv2d`` runs as
    ``conv2d_winograd`` F(m x m, 3x3) at export, 0 to keep it direct: a 3x3
    kernel, stride and dilation 1, a static map, at least
    ``WINOGRAD_MIN_CHANNELS`` input channels, transformed tiles within
    ``WINOGRAD_TILE_BYTES``. m is 4 with at most
    ``WINOGRAD_F4_MAX_CHANNELS`` inputs, at least 4 tiles of 4 x 4 per image
    (a register tile of one tile starves the products: 32 -> 32 channels on
    4x4 at 64 images 56 us against F(2x2)'s 47) and at most 3/4 of F(2x2)'s
    multiplies (6x6 maps tie on them and F(2x2) wins, 18 against 21 us);
    else 2.

    Measured against the direct ``conv2d_packed`` (znver4, interleaved,
    ``benchmarks/winograd_vs_direct.py``): F(4x4) 16 -> 32 channels on 8x8
    at 16 images 19 us, F(2x2) 28, direct 47; 64 -> 64 on 56x56 at one
    image 341, 600, 1068; 128 -> 128 on 28x28 at 8 images 2.8, 4.5, 8.7 ms;
    F(2x2) 512 -> 512 on 7x7 at 8 images 6.5 against 8.3 ms."""
    a, (_, i, kh, kw) = workload.attrs, (static(d) for d in workload.shapes[1])
    _, o, oh, ow = (static(d) for d in workload.out_shapes[0])
    if (kh, kw) != (3, 3) or tuple(a["stride"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        return 0
    if not all(isinstance(d, int) for d in (i, o, oh, ow)) or i < WINOGRAD_MIN_CHANNELS:
        return 0
    step = 4 if (i <= WINOGRAD_F4_MAX_CHANNELS and blocks(oh, 4) * blocks(ow, 4) >= 4
                 and 4 * _products(oh, ow, 4) <= 3 * _products(oh, ow, 2)) else 2
    return step if _products(oh, ow, step) * i * np.dtype(workload.dtypes[0]).itemsize <= WINOGRAD_TILE_BYTES else 0


def _pack_conv2d(node: Node, target, winograd: bool) -> None:
    x, weight = node.inputs
    workload = node.op.check([x.shape, weight.shape], [x.dtype, weight.dtype], node.attrs)
    oc = packed_channels(workload, target)
    tile = winograd_tile(workload) if winograd else 0
    if tile:
        data = evaluate("winograd_conv2d_weight", weight.data, oc=oc, tile=tile)
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
