"""The strategies of a 2-D convolution: Winograd, packed, direct.

``conv2d`` (NCHW, on the CPU):

* ``winograd`` (priority 20): a 3x3 kernel at stride and dilation 1 with
  ``WINOGRAD_MIN_CHANNELS`` or more input channels whose transformed tiles
  fit ``WINOGRAD_TILE_BYTES`` and whose multiplies are at most
  ``WINOGRAD_MAX_SHARE`` of the direct kernel's (``winograd_tile``) runs as
  ``conv2d_winograd``, its weight transformed by
  ``winograd_conv2d_weight``. A constant weight is transformed once and the
  input read as it lies (the layout pass blocks it where a region allows).
  A weight that changes every call (a training step's, an eager layer's)
  is transformed in every call, so it needs static shapes and a batch
  holding at least as many tiles as the layer has output channels (fewer,
  and the weight's transform costs more than the products save); the input
  is then read in blocks of a vector's channels (``to_blocked``: the input
  transform reads a vector of channels at a time) where the channels are
  whole vectors.
* ``packed`` (priority 10): a constant weight packed once
  (``pack_conv2d_weight``) in the channel blocks of the template's register
  tile (``packed_channels``), read by ``conv2d_packed``: no pack stage per
  call.

``conv2d_backward_data`` (the data gradient) at stride 1 is a stride-1
convolution of the output gradient with the kernel flipped and its channels
swapped, padding ``k - 1 - p``: ``winograd`` applies to it as to a
``conv2d`` whose weight changes every call, the flip done by the transform.

* ``depthwise`` (priority 15): a depthwise convolution (``groups`` = its
  input channels = its output channels) with a constant weight, packed once
  in blocks of ``oc`` channels, read by ``depthwise_conv2d_packed``, which
  vectorizes over a block's channels (``te/depthwise.py``). ``oc`` is the
  block a 1x1 convolution writing its input would have
  (``packed_channels`` of that conv), so the layout pass carries the
  blocks through it from the expansion convolution before it to the
  projection after it (MobileNetV2's inverted residual).

Other grouped convolutions (``groups`` > 1), a depthwise one whose weight
changes every call, and the data gradients run directly: neither the
Winograd kernel nor ``conv2d_packed`` reads groups (the direct kernel's
grouped template, ``schedules/cpu/conv2d_grouped.py``, schedules them).

Rounding of a Winograd convolution differs from the direct kernel's
(``te/winograd.py``: about 1e-6 of the output's magnitude for F(2x2), 1e-5
for F(4x4)). The measurements behind every threshold here:
``benchmarks/winograd_vs_direct.py`` (``--training`` for weights that
change), figures in ``benchmarks/RESULTS.md``, "Convolution strategies".
"""
from __future__ import annotations

import numpy as np

from ..schedules.cpu.conv2d_defaults import packed_channels
from ..te import get_op
from ..te.layout import blocks
from ..te.shapes import static
from .base import Packed, Winograd, register

#: the fewest input channels (the matrix products' depth) for a Winograd convolution
WINOGRAD_MIN_CHANNELS = 16

#: the most bytes of transformed input tiles (positions x tiles x input
#: channels) one ``conv2d_winograd`` task (an image and channel block) may
#: hold: past it the stages stream through memory (ResNet-18's 56x56 maps
#: fit, its 112x112 ones not)
WINOGRAD_TILE_BYTES = 4 << 20

#: the largest share of the direct convolution's multiplies a Winograd
#: convolution may keep: its transforms, and a transformed weight 16/9 (F(2x2))
#: the weight's size read for few tiles, cost more than the rest saves. F(2x2)
#: on a 7 x 7 map (16 tiles for 49 outputs: 0.58 of the multiplies) ran slower
#: than direct at batch 1 and 8 (ResNet-50's 512-channel layers: 1.34-1.42 ->
#: 1.02 ms each in the call at batch 1; the model 0.96 -> 0.99x ONNX Runtime at
#: batch 1, 1.00 -> 1.01 at batch 8); 14 x 14 (0.44) ran faster as Winograd.
#: Measured on those layers only: a 5 x 5 map (0.64) goes direct by the rule
WINOGRAD_MAX_SHARE = 1 / 2

#: the most input channels for F(4x4, 3x3): its rounding grows with its
#: products' depth, where F(2x2, 3x3)'s stays near the direct kernel's
WINOGRAD_F4_MAX_CHANNELS = 128


def _products(oh: int, ow: int, step: int) -> int:
    """Multiplies per output channel and input channel of F(step x step, 3x3) on an oh x ow map."""
    return blocks(oh, step) * blocks(ow, step) * (step + 2) ** 2


def winograd_tile(workload) -> int:
    """The output tile m with which an NCHW ``conv2d`` runs as
    ``conv2d_winograd`` F(m x m, 3x3), 0 to keep it direct: a 3x3 kernel,
    stride and dilation 1, a static map, at least ``WINOGRAD_MIN_CHANNELS``
    input channels, transformed tiles within ``WINOGRAD_TILE_BYTES``, at most
    ``WINOGRAD_MAX_SHARE`` of the direct kernel's multiplies. m is 4
    with at most ``WINOGRAD_F4_MAX_CHANNELS`` inputs, at least 4 tiles of
    4 x 4 per image (a register tile of one tile starves the products) and
    at most 3/4 of F(2x2)'s multiplies (where they tie, F(2x2) wins); else 2."""
    a, (_, i, kh, kw) = workload.attrs, (static(d) for d in workload.shapes[1])
    _, o, oh, ow = (static(d) for d in workload.out_shapes[0])
    if (kh, kw) != (3, 3) or tuple(a["stride"]) != (1, 1) or tuple(a["dilation"]) != (1, 1):
        return 0
    if not all(isinstance(d, int) for d in (i, o, oh, ow)) or i < WINOGRAD_MIN_CHANNELS:
        return 0
    step = 4 if (i <= WINOGRAD_F4_MAX_CHANNELS and blocks(oh, 4) * blocks(ow, 4) >= 4
                 and 4 * _products(oh, ow, 4) <= 3 * _products(oh, ow, 2)) else 2
    if _products(oh, ow, step) > WINOGRAD_MAX_SHARE * oh * ow * 9:
        return 0
    return step if _products(oh, ow, step) * i * np.dtype(workload.dtypes[0]).itemsize <= WINOGRAD_TILE_BYTES else 0


def _grouped(workload) -> bool:
    """Whether the convolution has more than one channel group (runs directly)."""
    return workload.attrs.get("groups", 1) > 1


def _every_call(conv, target, flip: bool) -> Winograd | None:
    """The Winograd implementation of the NCHW ``conv2d`` workload ``conv``
    whose weight is transformed in every call (``flip``: a data gradient's,
    read flipped with its channels swapped), or None where it would not pay."""
    if not all(isinstance(static(d), int) for s in conv.shapes for d in s):
        return None
    tile = winograd_tile(conv)
    x, w = conv.shapes
    _, _, oh, ow = conv.out_shapes[0]
    if not tile or x[0] * blocks(oh, tile) * blocks(ow, tile) < w[0]:  # the weight's transform would not pay
        return None
    lanes = target.lanes(str(conv.dtypes[0]))
    in_block = lanes if x[1] % lanes == 0 else 0
    padding = tuple(conv.attrs["padding"])
    return Winograd("conv2d_winograd", {"out_channels": w[0], "padding": padding, "in_block": in_block},
                    "winograd_conv2d_weight", {"oc": packed_channels(conv, target), "tile": tile, "flip": flip},
                    in_block, tile=tile)


@register("conv2d", "winograd", priority=20)
def _conv2d_winograd(workload, target, constant_weight: bool) -> Winograd | None:
    if target.kind != "cpu" or workload.attrs["layout"] != "NCHW" or _grouped(workload):
        return None
    if not constant_weight:
        return _every_call(workload, target, flip=False)
    tile = winograd_tile(workload)
    if not tile:
        return None
    return Winograd("conv2d_winograd", {"out_channels": static(workload.shapes[1][0]),
                                        "padding": tuple(workload.attrs["padding"])},
                    "winograd_conv2d_weight", {"oc": packed_channels(workload, target), "tile": tile}, tile=tile)


@register("conv2d", "packed", priority=10)
def _conv2d_packed(workload, target, constant_weight: bool) -> Packed | None:
    if target.kind != "cpu" or not constant_weight or workload.attrs["layout"] != "NCHW" or _grouped(workload):
        return None
    attrs = {k: v for k, v in workload.attrs.items() if k not in ("layout", "groups")}
    return Packed("conv2d_packed", {**attrs, "out_channels": static(workload.shapes[1][0])},
                  "pack_conv2d_weight", {"oc": packed_channels(workload, target)})


@register("conv2d", "depthwise", priority=15)
def _conv2d_depthwise(workload, target, constant_weight: bool) -> Packed | None:
    if target.kind != "cpu" or not constant_weight or workload.attrs["layout"] != "NCHW":
        return None
    x, w = workload.shapes
    channels = static(x[1])
    if not isinstance(channels, int) or workload.attrs["groups"] != channels or static(w[0]) != channels:
        return None
    expansion = get_op("conv2d").check([x, (channels, channels, 1, 1)], list(workload.dtypes), {})
    attrs = {k: workload.attrs[k] for k in ("stride", "padding", "dilation")}
    return Packed("depthwise_conv2d_packed", {**attrs, "channels": channels}, "pack_conv2d_weight",
                  {"oc": packed_channels(expansion, target)})


@register("conv2d_backward_data", "winograd", priority=20)
def _data_gradient_winograd(workload, target, constant_weight: bool) -> Winograd | None:  # noqa: ARG001
    a = workload.attrs
    if target.kind != "cpu" or tuple(a["stride"]) != (1, 1) or tuple(a["dilation"]) != (1, 1) or _grouped(workload):
        return None
    (gy, w) = (tuple(static(d) for d in s) for s in workload.shapes)
    o, c, kh, kw = w
    padding = tuple(k - 1 - p for k, p in zip((kh, kw), a["padding"]))
    if min(padding) < 0:  # a padding wider than the kernel: no convolution of gy with zero padding
        return None
    conv = get_op("conv2d").check([gy, (c, o, kh, kw)], list(workload.dtypes), {"padding": padding})
    return _every_call(conv, target, flip=True)
