"""A depthwise convolution in channel blocks, for inference: ``depthwise_conv2d_packed``.

A depthwise ``conv2d`` (``groups`` = its C input channels, one output each)
whose constant weight (C, 1, KH, KW) is packed once by
``pack_conv2d_weight`` into blocks (ceil(C / oc), 1, KH, KW, oc). Output
channel c reads input channel c alone, so with ``oc`` adjacent channels in a
vector each tap is one vector multiply-add of an input vector by a weight
vector, with no broadcast and no gather (TVM's legacy x86
``depthwise_conv2d_NCHWc``). The NCHW template (``conv2d_grouped.py``)
vectorizes along a row instead, which a column stride breaks up.

``in_block=c`` reads x as (N, ceil(C / c), H, W, c) (0: NCHW);
``out_block`` writes (N, ceil(C / oc), OH, OW, oc), the channels past C zero
(False: NCHW). The layout pass (``graph.layout``) carries blocks through it
between the 1x1 convolutions of an inverted-residual block (MobileNetV2's),
which write and read them.
"""
from __future__ import annotations

from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .conv import DILATION, PADDING, STRIDE, _conv_nchw, _flops, _out_shape, check_rank4, pad_spatial
from .conv_packed import IN_BLOCK, WRITE_BLOCKS, _plain_input, weight_blocks
from .layout import blocked_array, plain_array
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, shape_str, static


@register
class DepthwiseConv2dPacked(Op):
    """``conv2d(x, w, groups=channels)`` with w (channels, 1, KH, KW) given as
    ``pack_conv2d_weight``'s blocks (ceil(channels / oc), 1, KH, KW, oc)."""

    name = "depthwise_conv2d_packed"
    channel_blocked = True
    differentiable = False
    arity = 2
    family = "depthwise"
    dtypes = FLOATS
    attrs = {"channels": A.Attr(A.positive_int, doc="C, the input and output channels"),
             "stride": STRIDE, "padding": PADDING, "dilation": DILATION, "in_block": IN_BLOCK,
             "out_block": WRITE_BLOCKS}

    def infer_shape(self, x, w, channels, stride, padding, dilation, in_block, out_block):
        x = _plain_input(self.name, x, channels, in_block)
        check_rank4(self.name, x, "x", "NCHW")
        oc = weight_blocks(self.name, w, channels, "(ceil(C / oc), 1, KH, KW, oc)", "C = channels")
        if static(w[1]) != 1:
            raise ShapeError(f"got w {shape_str(w)}, expected one input channel per block row (a depthwise "
                             "weight's)", op=self.name, arg="w")
        n, _, oh, ow = _out_shape(self.name, x, w, (channels, 1, *w[2:4]), "NCHW", stride, padding, dilation,
                                  groups=channels)
        return (n, w[0], oh, ow, oc) if out_block else (n, channels, oh, ow)

    def infer_dtype(self, x, w, **attrs):
        return promote(self.name, x, w)

    def compute(self, x, w, channels, stride, padding, dilation, in_block, out_block):
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), channels, stride, padding, dilation, in_block,
                               out_block)
        dt = promote(self.name, dtype_of(x), dtype_of(w))
        oc, (sh, sw), (dh, dw) = static(w.shape[4]), stride, dilation
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), "conv2d_pad")
        rh, rw = te.reduce_axis((0, w.shape[2]), "rh"), te.reduce_axis((0, w.shape[3]), "rw")
        # channels past C (the last block's padding) multiply a zero weight; where the blocks are whole there are none
        whole = channels % oc == 0 and (not in_block or channels % in_block == 0)

        def tap(n, b, lane, y, z):
            c = b * oc + lane
            c = c if whole else tirx.min(c, channels - 1)  # a padded lane reads a real channel, times zero
            v = xp[n, c // in_block, y, z, c % in_block] if in_block else xp[n, c, y, z]
            prod = v.astype(dt) * w[b, 0, rh, rw, lane].astype(dt)
            return prod if whole else tirx.if_then_else(b * oc + lane < channels, prod, tirx.const(0, dt))

        if out_block:
            def body(n, b, y, z, lane):
                return te.sum(tap(n, b, lane, y * sh + rh * dh, z * sw + rw * dw), axis=[rh, rw])
        else:
            def body(n, c, y, z):
                return te.sum(tap(n, c // oc, c % oc, y * sh + rh * dh, z * sw + rw * dw), axis=[rh, rw])
        return te.compute(out, body, name=self.name, tag=self.family)

    def reference(self, x, w, channels, stride, padding, dilation, in_block, out_block):
        x = plain_array(x, channels) if in_block else x
        kernel = w.transpose(0, 4, 1, 2, 3).reshape(-1, 1, *w.shape[2:4])[:channels]
        y = _conv_nchw(x, kernel, stride, padding, dilation, groups=channels)
        return blocked_array(y, w.shape[4]) if out_block else y

    def flops(self, shapes, **attrs):
        x, w = shapes
        return _flops(self.infer_shape(x, w, **attrs), (1, *w[2:4]))

