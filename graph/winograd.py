"""Winograd convolutions where the weights change every call: compiled
training steps (``winograd_convs``, a graph pass) and eager ops
(``runtime/winograd.py``), both from one ``plan``.

Condition: on the CPU, an NCHW ``conv2d`` whose weight is no constant (a
parameter), or a stride-1 ``conv2d_backward_data`` (a stride-1 convolution
of ``gy`` with the kernel flipped and its channels swapped, padding ``2 -
p``), that ``prepack.winograd_tile`` would run as Winograd at export (a 3x3
kernel at stride and dilation 1, 16 or more input channels, static shapes,
tiles within ``WINOGRAD_TILE_BYTES``), whose batch holds at least as many
tiles as it has output channels; and ``KILN_WINOGRAD`` on (the default).

Rewrite: a ``winograd_conv2d_weight`` kernel transforms the weight (``flip``
for the data gradient) in every call, and the convolution becomes
``conv2d_winograd`` (a graph node keeps its epilogue), reading its input in
blocks of a vector's channels (``to_blocked``: the input transform reads a
vector of channels at a time) where the channels are whole vectors, and
writing NCHW. znver4, the direct ``conv2d`` (packing its weight in each
call) against blocking + weight transform + Winograd F(4x4), interleaved
(``python benchmarks/winograd_vs_direct.py --training``): 16 -> 32 channels
on 28x28 at 64 images 2.38 ms against 0.07 + 0.02 + 1.04; that layer's data
gradient (32 -> 16) 2.35 against 0.14 + 0.02 + 0.98; ResNet-18's 64x56x56
at 8 images 8.41 against 0.14 + 0.02 + 3.45. Reading the NCHW input as it
lies instead of blocking it, 64 -> 64 on 16x16 at 32 images took 3.69 ms
against the direct 2.49 (1.09 blocked).

The transformed weight is O x I x (m + 2)^2 values, the transformed input N
x tiles x I x (m + 2)^2: where the batch holds fewer tiles than output
channels, the weight's transform costs more than the products save
(ResNet-18's 512x7x7 at 8 images, 128 tiles of F(2x2) for 512 channels:
direct 8.48 ms against 0.03 + 2.15 + 7.48; its 256x14x14, 392 tiles for 256
channels, 7.63 against 0.04 + 0.20 + 4.53).

Rounding differs from the direct kernel's as at export (``te/winograd.py``:
about 1e-6 of the output's magnitude for F(2x2), 1e-5 for F(4x4));
``KILN_WINOGRAD=0`` or ``kiln.compile(..., winograd=False)`` keeps the
convolutions direct.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..schedules.cpu.conv2d_defaults import packed_channels
from ..te import get_op
from ..te.layout import blocks
from ..te.shapes import static
from .ir import Graph
from .prepack import winograd_tile


@dataclass(frozen=True)
class Plan:
    """How one convolution runs as Winograd: the attributes of its weight
    transform (``winograd_conv2d_weight``), of its input's blocking
    (``in_block``: 0 to read NCHW as it lies) and of ``conv2d_winograd``."""

    weight_attrs: dict
    in_block: int
    conv_attrs: dict


def plan(op: str, shapes, dtypes, attrs: dict, target) -> Plan | None:
    """The ``Plan`` of ``op`` (its name) on inputs of ``shapes`` and
    ``dtypes`` with its parsed ``attrs``, or None where the module
    docstring's condition does not hold (a constant weight is the caller's
    to exclude)."""
    if target.kind != "cpu" or op not in ("conv2d", "conv2d_backward_data") or tuple(attrs["stride"]) != (1, 1) \
            or tuple(attrs["dilation"]) != (1, 1) or not all(isinstance(static(d), int) for s in shapes for d in s):
        return None
    x, w = (tuple(static(d) for d in s) for s in shapes)
    if op == "conv2d":
        if attrs["layout"] != "NCHW":
            return None
        padding, flip = tuple(attrs["padding"]), False
    else:  # the data gradient: gy convolved with the kernel flipped, its channels swapped
        o, c, kh, kw = w
        padding, flip, w = tuple(k - 1 - p for k, p in zip((kh, kw), attrs["padding"])), True, (c, o, kh, kw)
        if min(padding) < 0:  # a padding wider than the kernel: no convolution of gy with zero padding
            return None
    workload = get_op("conv2d").check([x, w], list(dtypes), {"padding": padding})
    tile = winograd_tile(workload)
    _, _, oh, ow = workload.out_shapes[0]
    if not tile or x[0] * blocks(oh, tile) * blocks(ow, tile) < w[0]:  # the weight's transform would not pay
        return None
    lanes = target.lanes(str(dtypes[0]))
    in_block = lanes if x[1] % lanes == 0 else 0
    return Plan({"oc": packed_channels(workload, target), "tile": tile, "flip": flip}, in_block,
                {"out_channels": w[0], "padding": padding, "in_block": in_block})


def winograd_convs(graph: Graph, target) -> int:
    """Rewrite every convolution the module docstring names; return how many."""
    count, blocked = 0, {}  # a value blocked once, whichever convolutions read it
    for node in list(graph.nodes):
        x, weight = (node.inputs + [None, None])[:2]
        if weight is None or weight.is_const:
            continue
        found = plan(node.op.name, [x.shape, weight.shape], [x.dtype, weight.dtype], node.attrs, target)
        if found is None:
            continue
        weights = graph.insert(node, get_op("winograd_conv2d_weight"), found.weight_attrs, weight,
                               f"{weight.name}@winograd")
        if found.in_block:
            if id(x) not in blocked:
                blocked[id(x)] = graph.insert(node, get_op("to_blocked"), {"block": found.in_block}, x,
                                              f"{x.name}@blocked")
            x = blocked[id(x)]
        node.op = get_op("conv2d_winograd")
        node.attrs = node.op.parse_attrs(found.conv_attrs)
        node.inputs = [x, weights]
        count += 1
    return count
