"""conv2d with a constant weight packed once (NCHW), for inference.

``pack_conv2d_weight`` copies w (O, I, KH, KW) once into channel blocks
``(ceil(O / oc), I, KH, KW, oc)``, the layout the CPU template reads (zeros
past channel O), and ``conv2d_packed`` takes x (N, I, H, W) and those blocks
-> (N, O, OH, OW) with ``O`` the attr ``out_channels``; its kernel has no pack
stage. ``oc`` is the template's channel tile,
``kiln.schedules.cpu.conv2d_defaults.packed_channels``.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .conv import (DILATION, OUT_BLOCK, PADDING, STRIDE, _conv_nchw, _direct, _flops, _inside, _out_shape,
                   check_rank4, pad_spatial, skips_padding)
from .layout import blocked_array, blocks, plain_array
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, same_dim, shape_str, static

#: the attributes of a conv reading packed weight blocks (``conv2d_packed``, ``conv2d_winograd``)
OUT_CHANNELS = A.Attr(A.positive_int, doc="O, the output channels (the blocks may pad past it)")
IN_BLOCK = A.Attr(A.non_negative_int, default=0, doc="0: x is NCHW; c: x is NCHW[c]c")
WRITE_BLOCKS = A.Attr(A.boolean, default=False, doc="write NCHW[oc]c blocks instead of NCHW")


@register
class PackConv2dWeight(Op):
    """An OIHW conv2d weight (O, I, KH, KW) as channel blocks
    (ceil(O / oc), I, KH, KW, oc): each tap's ``oc`` output channels are
    contiguous, so a micro-kernel loads them as vectors. Channels past O are 0."""

    name = "pack_conv2d_weight"
    differentiable = False
    dtypes = FLOATS
    attrs = {"oc": OUT_BLOCK}

    def infer_shape(self, w, oc):
        check_rank4(self.name, w, "w", "OIHW")
        return (blocks(w[0], oc), *w[1:], oc)

    def compute(self, w, oc):
        o = w.shape[0]

        def body(b, i, y, x, j):  # the clamped index keeps the padded lanes' read in bounds
            inside = b * oc + j < o
            return tirx.if_then_else(inside, w[tirx.min(b * oc + j, o - 1), i, y, x], tirx.const(0, w.dtype))

        return te.compute(self.infer_shape(tuple(w.shape), oc), body, name=self.name, tag="injective")

    def reference(self, w, oc):
        return output_channel_blocks(w, oc)


def output_channel_blocks(w: np.ndarray, oc: int) -> np.ndarray:
    """A 4-D array (O, A, B, C) as blocks of ``oc`` along O, innermost:
    (ceil(O / oc), A, B, C, oc), zeros past O."""
    o = w.shape[0]
    padded = np.zeros((blocks(o, oc) * oc, *w.shape[1:]), w.dtype)
    padded[:o] = w
    return np.ascontiguousarray(padded.reshape(-1, oc, *w.shape[1:]).transpose(0, 2, 3, 4, 1))


@register
class Conv2dPacked(Op):
    """``conv2d(x, w)`` (NCHW) with w given as ``pack_conv2d_weight``'s blocks
    (B, I, KH, KW, oc) -> (N, out_channels, OH, OW); the blocks' channels past
    ``out_channels`` are never read.

    Channel-blocked layouts (``te.layout``): ``in_block=c`` reads x as
    (N, ceil(I / c), H, W, c); ``out_block=True`` writes the output as
    (N, B, OH, OW, oc), the weight's own blocks, its channels past
    ``out_channels`` zero (their weights are)."""

    name = "conv2d_packed"
    compute_bound = True
    channel_blocked = True
    in_task_prologue = True
    differentiable = False
    arity = 2
    family = "conv2d"
    dtypes = FLOATS
    attrs = {"out_channels": OUT_CHANNELS, "stride": STRIDE, "padding": PADDING, "dilation": DILATION,
             "in_block": IN_BLOCK, "out_block": WRITE_BLOCKS}

    def infer_shape(self, x, w, out_channels, stride, padding, dilation, in_block, out_block):
        x = _plain_input(self.name, x, w[1] if len(w) == 5 else None, in_block)
        check_rank4(self.name, x, "x", "NCHW")
        oc = weight_blocks(self.name, w, out_channels, "(ceil(O / oc), I, KH, KW, oc)", "O = out_channels")
        n, _, oh, ow = _out_shape(self.name, x, w, (out_channels, *w[1:4]), "NCHW", stride, padding, dilation)
        return (n, w[0], oh, ow, oc) if out_block else (n, out_channels, oh, ow)

    def infer_dtype(self, x, w, **attrs):
        return promote(self.name, x, w)

    def compute(self, x, w, out_channels, stride, padding, dilation, in_block, out_block):
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), out_channels, stride, padding, dilation, in_block,
                               out_block)
        oc = static(w.shape[4])
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), "conv2d_pad")
        # a blocked input's padding channels are never read: the reduction runs over the weight's I
        read = (lambda n, c, y, z: xp[n, c // in_block, y, z, c % in_block]) if in_block else \
            (lambda n, c, y, z: xp[n, c, y, z])
        # an output channel is (block, lane): the output's own axes 1 and 4 when blocked
        split = (lambda i: (i[0], (i[1], i[4]), i[2], i[3])) if out_block else \
            (lambda i: (i[0], (i[1] // oc, i[1] % oc), i[2], i[3]))
        keep = _inside(tuple(x.shape), padding) if skips_padding("NCHW", tuple(x.shape), out, padding,
                                                                       tuple(w.shape[2:4])) else None
        return _direct(self, read, lambda o, c, y, z: w[o[0], c, y, z, o[1]], tuple(w.shape[1:4]), out,
                       promote(self.name, dtype_of(x), dtype_of(w)), split, stride, dilation, keep)

    def reference(self, x, w, out_channels, stride, padding, dilation, in_block, out_block):
        x = plain_array(x, w.shape[1]) if in_block else x
        oihw = w.transpose(0, 4, 1, 2, 3).reshape(-1, *w.shape[1:4])  # every channel of the blocks
        if out_block:
            return blocked_array(_conv_nchw(x, oihw, stride, padding, dilation), w.shape[4])
        return _conv_nchw(x, oihw[:out_channels], stride, padding, dilation)

    def flops(self, shapes, **attrs):
        x, w = shapes
        return _flops(self.infer_shape(x, w, **attrs), w[1:4])


def _plain_input(op: str, x, channels, in_block: int) -> tuple:
    """The NCHW shape a blocked input (N, ceil(C / c), H, W, c) stands for,
    C being ``channels`` (None: unknown, a malformed weight's; the last
    block's padding is not read)."""
    if not in_block:
        return tuple(x)
    if len(x) != 5 or static(x[4]) != in_block or channels is None or not same_dim(x[1], blocks(channels, in_block)):
        raise ShapeError(f"got x {shape_str(x)}, expected a 5-D NCHW[{in_block}]c tensor holding the "
                         f"{'weight' if channels is None else static(channels)} input channels in blocks of "
                         f"in_block={in_block}", op=op, arg="x")
    return (x[0], channels, x[2], x[3])


def weight_blocks(op: str, w, channels, layout: str, holding: str) -> int:
    """The block width oc of a weight in channel blocks ``layout``
    (ceil(channels / oc) first, oc last); a ShapeError saying so where ``w``
    is no such blocks (``holding`` names the attribute giving ``channels``)."""
    oc = static(w[4]) if len(w) == 5 else None
    if not isinstance(oc, int) or not same_dim(w[0], blocks(channels, oc)):
        raise ShapeError(f"got w {shape_str(w)}, expected {layout} blocks of a constant width oc holding "
                         f"{holding} = {channels} channels", op=op, arg="w")
    return oc
