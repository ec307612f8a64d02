"""``conv2d_int8``: a convolution of a float NCHW input by an int8 weight,
the input quantized to uint8 inside the op, the products summed in int32,
the dequantizing epilogue fused, float32 NCHW out — the int8 counterpart of
``conv2d`` that ``kiln.quantize`` puts in its place.

Inside, three stages: ``conv2d_int8_quantize`` writes the input quantized
(``in_scale``, ``in_zero_point``; ``quantize`` with ``reciprocal=True``), padded with the zero point and laid out
(N, H, W, C) with C rounded up to 4, so that the 4 channels one dot product
reads are adjacent; ``conv2d_int8_acc`` sums, per output position and block
of ``bn`` output channels, the products over the taps and channels;
``conv2d_int8`` writes ``acc * scale[k] + offset[k]`` (ReLU optional) back in
NCHW. Like ``conv2d_packed`` it is ``channel_blocked``: ``in_block=c`` reads x
as (N, ceil(C / c), H, W, c), so the 4 channels of a dot product are adjacent
in the float input too; ``out_block`` writes (N, ceil(K / bn), OH, OW, bn),
one ``bn``-wide vector per output position and block (the channels past K
zero), and the layout pass (``graph.layout``) carries those blocks from one
convolution to the next. It is ``quantized_input``: x may come as uint8, the
codes of ``in_scale`` and ``in_zero_point`` (a producer that wrote them,
``graph.requantize``), which the first stage then only pads and lays out
(and which, in channel blocks and unpadded, the sums read as they are: no
first stage). The weight comes as ``pack_conv_int8_weight`` blocks (P, KH, KW, C4,
bn, 4). Padding with the zero point makes a padded tap add ``zp * w``, which
``offset`` (``b - s_x s_w zp sum(w)``, over every tap) takes away again: the
padding stands for 0.0 exactly as ``conv2d``'s zeros do.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from . import nanmath
from .conv import PADDING, STRIDE, _conv_nchw, window_out
from .conv_packed import IN_BLOCK, WRITE_BLOCKS
from .layout import blocked_array, plain_array
from .quantize import WEIGHT_BITS, Int8Product, quantized, quantized_ref
from .registry import register
from .shapes import shape_str, static


def pack_conv_int8_weight(wq: np.ndarray, bn: int) -> np.ndarray:
    """An int8 OIHW weight (K, C, KH, KW) as ``conv2d_int8``'s blocks
    ``(ceil(K / bn), KH, KW, ceil(C / 4), bn, 4)``, zeros past K and C."""
    k, c, kh, kw = wq.shape
    c4, panels = -(-c // 4), -(-k // bn)
    padded = np.zeros((panels * bn, c4 * 4, kh, kw), np.int8)
    padded[:k, :c] = wq
    return np.ascontiguousarray(padded.reshape(panels, bn, c4, 4, kh, kw).transpose(0, 4, 5, 2, 1, 3))


class Int8Conv(Int8Product):
    """What the int8 convolutions share: a float32 input (or its uint8 codes,
    ``quantized_input``) in NCHW or channel blocks, the input's quantization
    and the window as attributes (``WINDOW_ATTRS``), the output in NCHW or blocks."""

    channel_blocked = True
    quantized_input = True
    dtypes = ("float32", "uint8", "int8")
    operand_dtypes = (("float32", "uint8"), "int8", "float32", "float32")


WINDOW_ATTRS = {"in_scale": A.Attr(A.positive_float, doc="the input's quantization step"),
                "in_zero_point": A.Attr(A.integer, default=0, doc="the uint8 that stands for 0.0 in the input"),
                "stride": STRIDE, "padding": PADDING,
                "relu": A.Attr(A.boolean, default=False, doc="apply relu after the epilogue"),
                "in_block": IN_BLOCK, "out_block": WRITE_BLOCKS}


@register
class Conv2dInt8(Int8Conv):
    """``relu?(float(conv(quantize(x), w)) * scale[k] + offset[k])``: x float32
    NCHW (N, C, H, W) (or uint8: ``quantize(x)`` already), w int8 in ``pack_conv_int8_weight``'s blocks, ``scale``
    and ``offset`` (K,) float32 per output channel."""

    name = "conv2d_int8"
    attrs = {**WINDOW_ATTRS, "weight_bits": WEIGHT_BITS}

    def infer_shape(self, x, w, scale, offset, in_scale, in_zero_point, stride, padding, relu, in_block,
                    out_block, weight_bits):
        if not 0 <= in_zero_point <= 255:
            raise AttrError(f"got {in_zero_point}, expected a uint8 (0..255)", op=self.name, arg="in_zero_point")
        layout = f"(N, ceil(C / {in_block}), H, W, {in_block})" if in_block else "(N, C, H, W)"
        if len(x) != (5 if in_block else 4) or len(w) != 6 or len(scale) != 1 or len(offset) != 1 or (
                in_block and static(x[4]) != in_block):
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, scale {shape_str(scale)}, offset "
                             f"{shape_str(offset)}, expected {layout}, (P, KH, KW, C4, bn, 4), (K,), (K,)",
                             op=self.name, arg="shapes")
        c, (panels, kh, kw, c4, bn, four), k = _channels(x, in_block), (static(d) for d in w), static(scale[0])
        if four != 4 or not all(isinstance(v, int) for v in (c, c4, bn, k, panels, kh, kw)) or not _fits(
                c, c4, in_block) or not (
                bn * (panels - 1) < k <= bn * panels) or k != static(offset[0]):
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, scale {shape_str(scale)}, offset "
                             f"{shape_str(offset)}: expected w to hold C = {c} in blocks of 4 and K = {k} in "
                             "panels of bn (pack_conv_int8_weight), and one scale and offset per channel",
                             op=self.name, arg="shapes")
        oh = window_out(self.name, x[2], kh, stride[0], padding[0], 1)
        ow = window_out(self.name, x[3], kw, stride[1], padding[1], 1)
        return (x[0], panels, oh, ow, bn) if out_block else (x[0], scale[0], oh, ow)

    def infer_dtype(self, *shapes, **attrs):
        return "float32"

    def compute(self, x, w, scale, offset, in_scale, in_zero_point, stride, padding, relu, in_block, out_block,
                weight_bits):
        n, h, wd = x.shape[0], x.shape[2], x.shape[3]
        c = _channels(tuple(x.shape), in_block)
        panels, kh, kw, c4, bn, _ = (static(d) for d in w.shape)
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), tuple(scale.shape), tuple(offset.shape),
                               in_scale, in_zero_point, stride, padding, relu, in_block, out_block, weight_bits)
        oh, ow, k_out = out[2], out[3], static(scale.shape[0])
        (sh, sw), (ph, pw), zero = stride, padding, tirx.const(in_zero_point, "uint8")

        def read(b, ch, y, z):
            return x[b, ch // in_block, y, z, ch % in_block] if in_block else x[b, ch, y, z]

        every = isinstance(c, int) and c4 * 4 <= c  # each of the C4 blocks' channels is one of x's

        def quantize(b, y, z, ch):
            conditions = [y >= ph, y < h + ph, z >= pw, z < wd + pw] if ph or pw else []
            if not every:
                conditions.append(ch < c)
            # where every channel is x's, a run of channels reads contiguous memory: a vector load
            v = read(b, ch if every else tirx.min(ch, c - 1), tirx.max(tirx.min(y - ph, h - 1), 0) if ph else y,
                     tirx.max(tirx.min(z - pw, wd - 1), 0) if pw else z)
            code = v if x.dtype == "uint8" else quantized(v, in_scale, in_zero_point, "uint8", reciprocal=True)
            return tirx.if_then_else(tirx.all(*conditions), code, zero) if conditions else code
        ry, rx = te.reduce_axis((0, kh), "ky"), te.reduce_axis((0, kw), "kx")
        rc, rr = te.reduce_axis((0, c4), "c4"), te.reduce_axis((0, 4), "r")
        if x.dtype == "uint8" and in_block and in_block % 4 == 0 and not (ph or pw):
            # codes in channel blocks, unpadded: each 4 channels a dot product reads are adjacent already
            quads = in_block // 4

            def code(b, y, z, c, r):
                return x[b, c // quads, y, z, c % quads * 4 + r]
        else:
            xq = te.compute((n, h + 2 * ph, wd + 2 * pw, c4 * 4), quantize, name="conv2d_int8_quantize",
                            tag="injective")

            def code(b, y, z, c, r):
                return xq[b, y, z, c * 4 + r]
        acc = te.compute((n, oh, ow, panels, bn), lambda b, y, z, p, j: te.sum(
            code(b, y * sh + ry, z * sw + rx, rc, rr).astype("int32") * w[p, ry, rx, rc, j, rr].astype("int32"),
            axis=[ry, rx, rc, rr]), name="conv2d_int8_acc", tag="conv2d")

        return write_back(out, lambda b, p, j, y, z: acc[b, y, z, p, j], scale, offset, k_out, bn, relu, out_block,
                          self.name, "conv2d")

    def reference(self, x, w, scale, offset, in_scale, in_zero_point, stride, padding, relu, in_block, out_block,
                  weight_bits):
        panels, kh, kw, c4, bn, _ = w.shape
        if in_block:
            x = plain_array(x, min(x.shape[1] * in_block, c4 * 4))
        c, k = x.shape[1], scale.shape[0]
        wq = w.transpose(0, 4, 3, 5, 1, 2).reshape(panels * bn, c4 * 4, kh, kw)[:k, :c].astype(np.float64)
        xq = (x if x.dtype == np.uint8 else quantized_ref(x, in_scale, in_zero_point, "uint8", reciprocal=True)
              ).astype(np.float64)
        (ph, pw) = padding
        xq = np.pad(xq, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=in_zero_point)
        acc = _conv_nchw(xq, wq, stride, (0, 0), (1, 1), 1)  # integers below 2**53: exact in float64
        out = (acc.astype(np.float32) * scale[:, None, None] + offset[:, None, None]).astype(np.float32)
        out = np.maximum(out, 0) if relu else out
        return blocked_array(out, bn) if out_block else out

    def flops(self, shapes, **attrs):
        x, w, scale, offset = shapes
        out = self.infer_shape(x, w, scale, offset, **attrs)
        dims = [static(d) for d in (*out[:4], x[1], w[1], w[2])]
        if not all(isinstance(d, int) for d in dims):
            return 0.0
        n, _, oh, ow, _, kh, kw = dims
        c = 4 * static(w[3]) if attrs["in_block"] else static(x[1])  # a blocked input's C: the weight's
        return 2.0 * n * static(scale[0]) * oh * ow * c * kh * kw


def write_back(out: tuple, sums, scale, offset, channels: int, block: int, relu: bool, out_block: bool, name: str,
               tag: str):
    """An int8 product's output: ``sums(image, block, lane, y, x)`` (int32)
    times ``scale[c]`` plus ``offset[c]`` for channel ``c = block * width + lane``,
    ReLU optional, written in NCHW or (``out_block``) in blocks of ``block``
    channels, the lanes past ``channels`` zero."""
    whole = channels % block == 0 or not out_block  # an NCHW output has no lane past the channels

    def value(b, p, j, y, z):
        c = p * block + j
        cc = c if whole else tirx.min(c, channels - 1)
        v = sums(b, p, j, y, z).astype("float32") * scale[cc] + offset[cc]
        v = nanmath.relu(v) if relu else v
        return v if whole else tirx.if_then_else(c < channels, v, tirx.const(0.0, "float32"))
    if out_block:
        return te.compute(out, lambda b, p, y, z, j: value(b, p, j, y, z), name=name, tag=tag)
    return te.compute(out, lambda b, c, y, z: value(b, c // block, c % block, y, z), name=name, tag=tag)


def _fits(c: int, c4: int, in_block: int) -> bool:
    """Whether x's C channels are what the weight's C4 blocks of 4 hold; a
    blocked input holds C rounded up to its block, for some such C."""
    if not in_block:
        return 4 * (c4 - 1) < c <= 4 * c4
    return -(-(4 * c4 - 3) // in_block) * in_block <= c <= -(-4 * c4 // in_block) * in_block


def _channels(x: tuple, in_block: int):
    """The channels x holds: C of NCHW; a blocked input's blocks times their
    width (its last block's padding included: the weight's zeros meet it)."""
    if not in_block:
        return static(x[1])
    b = static(x[1])
    return b * in_block if isinstance(b, int) else b
