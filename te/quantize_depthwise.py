"""``depthwise_conv2d_int8``: a depthwise convolution of a float or uint8
NCHW input by an int8 weight in channel blocks, the products summed in
int32, the dequantizing epilogue fused — the int8 counterpart of
``depthwise_conv2d_packed`` that ``kiln.quantize`` and the quantized ONNX
imports put in place of a ``conv2d`` with ``groups`` = its channels.

Output channel c reads input channel c alone, so there is no dot product
over channels to hand a ``vpdpbusd``: with ``oc`` adjacent channels in a
vector, each tap is one vector multiply-add of an input vector (the codes
widened to int32) by the tap's weight vector, as in the float template.
What int8 saves here is memory: between an inverted-residual block's 1x1
layers (MobileNetV2's), whose int8 kernels read and write uint8 codes
(``graph.requantize``), the widest activations move as bytes.

Inside, up to three stages: ``depthwise_conv2d_int8_quantize`` writes the
input as padded uint8 codes in the weight's channel blocks (N, ceil(C / oc),
H + 2 ph, W + 2 pw, oc) (``quantize`` with ``reciprocal=True``), unless x
comes as uint8 codes in those blocks already (``quantized_input``), which
the sums then read in place through the padding's condition;
``depthwise_conv2d_int8_acc`` sums the taps; ``depthwise_conv2d_int8``
writes ``acc * scale[c] + offset[c]`` (ReLU optional) in NCHW or, with
``out_block``, in the weight's blocks (channels past C zero). Padding with
the zero point makes a padded tap add ``zp * w``, which ``offset``
(``b - s_x s_w zp sum(w)``, over every tap) takes away again.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from .conv import _conv_nchw, check_rank4, pad_spatial, window_out
from .conv_packed import _plain_input, weight_blocks
from .layout import blocked_array, plain_array
from .quantize import quantized, quantized_ref
from .quantize_conv import WINDOW_ATTRS, Int8Conv, write_back
from .registry import register
from .shapes import shape_str, static


def pack_depthwise_int8_weight(wq: np.ndarray, oc: int) -> np.ndarray:
    """An int8 depthwise weight (C, 1, KH, KW) as ``depthwise_conv2d_int8``'s
    blocks ``(ceil(C / oc), 1, KH, KW, oc)``, zeros past C."""
    c, one, kh, kw = wq.shape
    blocks = -(-c // oc)
    padded = np.zeros((blocks * oc, one, kh, kw), np.int8)
    padded[:c] = wq
    return np.ascontiguousarray(padded.reshape(blocks, oc, one, kh, kw).transpose(0, 2, 3, 4, 1))


def depthwise_weight(w_shape, groups: int) -> bool:
    """Whether an OIHW ``conv2d`` weight of ``w_shape`` in ``groups`` groups
    is a depthwise one: a group per channel, one output each (what this op runs)."""
    return groups > 1 and len(w_shape) == 4 and w_shape[0] == groups and w_shape[1] == 1


@register
class DepthwiseConv2dInt8(Int8Conv):
    """``relu?(float(dwconv(quantize(x), w)) * scale[c] + offset[c])``: x float32
    (or uint8: ``quantize(x)`` already) NCHW (N, C, H, W) or in blocks, w int8
    in ``pack_depthwise_int8_weight``'s blocks, ``scale`` and ``offset`` (C,)
    float32 per channel."""

    name = "depthwise_conv2d_int8"
    attrs = {"channels": A.Attr(A.positive_int, doc="C, the input and output channels"), **WINDOW_ATTRS}

    def infer_shape(self, x, w, scale, offset, channels, in_scale, in_zero_point, stride, padding, relu, in_block,
                    out_block):
        if not 0 <= in_zero_point <= 255:
            raise AttrError(f"got {in_zero_point}, expected a uint8 (0..255)", op=self.name, arg="in_zero_point")
        plain = _plain_input(self.name, x, channels, in_block)
        check_rank4(self.name, plain, "x", "NCHW")
        if static(plain[1]) != channels:
            raise ShapeError(f"got x {shape_str(x)} with {static(plain[1])} channels, expected channels = "
                             f"{channels}", op=self.name, arg="x")
        oc = weight_blocks(self.name, w, channels, "(ceil(C / oc), 1, KH, KW, oc)", "C = channels")
        kh, kw = static(w[2]), static(w[3])
        if static(w[1]) != 1 or not isinstance(kh, int) or not isinstance(kw, int):
            raise ShapeError(f"got w {shape_str(w)}, expected one input channel per block row and a static "
                             "kernel (pack_depthwise_int8_weight)", op=self.name, arg="w")
        if len(scale) != 1 or len(offset) != 1 or static(scale[0]) != channels or static(offset[0]) != channels:
            raise ShapeError(f"got scale {shape_str(scale)} and offset {shape_str(offset)}, expected ({channels},) "
                             "each: one per channel", op=self.name, arg="shapes")
        oh = window_out(self.name, plain[2], kh, stride[0], padding[0], 1)
        ow = window_out(self.name, plain[3], kw, stride[1], padding[1], 1)
        return (plain[0], w[0], oh, ow, oc) if out_block else (plain[0], channels, oh, ow)

    def infer_dtype(self, *shapes, **attrs):
        return "float32"

    def compute(self, x, w, scale, offset, channels, in_scale, in_zero_point, stride, padding, relu, in_block,
                out_block):
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), tuple(scale.shape), tuple(offset.shape), channels,
                               in_scale, in_zero_point, stride, padding, relu, in_block, out_block)
        n, h, wd = x.shape[0], x.shape[2], x.shape[3]
        cb, _, kh, kw, oc = (static(d) for d in w.shape)
        (sh, sw), (ph, pw), zero = stride, padding, tirx.const(in_zero_point, "uint8")
        if x.dtype == "uint8" and in_block == oc:  # codes in the weight's blocks: read in place
            xq = pad_spatial(x, "NCHW", padding, zero, "depthwise_conv2d_int8_pad")
        else:
            def code(b, blk, y, z, lane):
                c = tirx.min(blk * oc + lane, channels - 1)  # a lane past C reads a real channel, times zero
                yy = tirx.max(tirx.min(y - ph, h - 1), 0) if ph else y
                zz = tirx.max(tirx.min(z - pw, wd - 1), 0) if pw else z
                v = x[b, c // in_block, yy, zz, c % in_block] if in_block else x[b, c, yy, zz]
                v = v if x.dtype == "uint8" else quantized(v, in_scale, in_zero_point, "uint8", reciprocal=True)
                inside = [y >= ph, y < h + ph, z >= pw, z < wd + pw] if ph or pw else []
                return tirx.if_then_else(tirx.all(*inside), v, zero) if inside else v
            xq = te.compute((n, cb, h + 2 * ph, wd + 2 * pw, oc), code, name="depthwise_conv2d_int8_quantize",
                            tag="injective")
        ry, rx = te.reduce_axis((0, kh), "ky"), te.reduce_axis((0, kw), "kx")
        acc = te.compute((n, cb, out[2], out[3], oc), lambda b, blk, y, z, j: te.sum(
            xq[b, blk, y * sh + ry, z * sw + rx, j].astype("int32") * w[blk, 0, ry, rx, j].astype("int32"),
            axis=[ry, rx]), name="depthwise_conv2d_int8_acc", tag="depthwise")
        return write_back(out, lambda b, blk, j, y, z: acc[b, blk, y, z, j], scale, offset, channels, oc, relu,
                          out_block, self.name, "depthwise")

    def reference(self, x, w, scale, offset, channels, in_scale, in_zero_point, stride, padding, relu, in_block,
                  out_block):
        x = plain_array(x, channels) if in_block else x
        xq = (x if x.dtype == np.uint8 else quantized_ref(x, in_scale, in_zero_point, "uint8", reciprocal=True)
              ).astype(np.float64)
        (ph, pw), oc = padding, w.shape[4]
        xq = np.pad(xq, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=in_zero_point)
        kernel = w.transpose(0, 4, 1, 2, 3).reshape(-1, 1, *w.shape[2:4])[:channels].astype(np.float64)
        acc = _conv_nchw(xq, kernel, stride, (0, 0), (1, 1), groups=channels)  # integers: exact in float64
        out = (acc.astype(np.float32) * scale[:, None, None] + offset[:, None, None]).astype(np.float32)
        out = np.maximum(out, 0) if relu else out
        return blocked_array(out, oc) if out_block else out

    def flops(self, shapes, **attrs):
        x, w, _, _ = shapes
        out = self.infer_shape(x, w, *shapes[2:], **attrs)
        dims = [static(d) for d in (out[0], out[2], out[3], w[2], w[3])]
        if not all(isinstance(d, int) for d in dims):
            return 0.0
        n, oh, ow, kh, kw = dims
        return 2.0 * n * attrs["channels"] * oh * ow * kh * kw
