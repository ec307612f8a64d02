"""The weight gradient of an NCHW convolution as an op of its own.

``conv2d_backward_weight(x, gy, kernel, stride, padding, dilation)``: ``x``
(N, C, H, W) is the forward input, ``gy`` (N, O, OH, OW) the gradient of the
forward output; the result is dw (O, C, KH, KW) with

    dw[o, c, i, j] = sum_{n, y, z} gy[n, o, y, z] * xpad[n, c, y*sh + i*dh, z*sw + j*dw]

a reduction over batch and output pixels for each output channel and each
(input channel, kernel row, kernel column). Expressed as the ordinary
convolution the gradient used to run (the batch as channels, ``gy`` as a
kernel as large as the output map), its template had a tile that suits
neither. The TE body computes it channels-last, ``(C, KH, KW, O)``, against
``gy`` transposed to (N, OH, OW, O), so a vector of output channels is
contiguous in both, then transposes the small result to OIHW; the CPU
template (``schedules/cpu/conv2d_grad.py``) register-tiles output channels x
(C, KH, KW) and runs the (C, KH, KW) blocks in parallel.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .conv import DILATION, PADDING, STRIDE, _grad_x, check_rank4, conv2d, pad_spatial, window_out
from .grad import as_dtype, wants_grad
from .registry import Op, register
from .shapes import dtype_of, is_static, promote, same_dim, shape_str, size, static

FLOATS = ("float32", "float64")


@register
class Conv2dBackwardWeight(Op):
    """See the module docstring."""

    name = "conv2d_backward_weight"
    family = "conv2d_backward_weight"
    arity = 2
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False
    attrs = {
        "kernel": A.Attr(A.int_tuple(2, minimum=1), doc="the forward weight's (KH, KW) (int or pair)"),
        "stride": STRIDE, "padding": PADDING, "dilation": DILATION,
    }

    def infer_shape(self, x, gy, kernel, stride, padding, dilation):
        check_rank4(self.name, x, "x", "NCHW")
        check_rank4(self.name, gy, "gy", "NCHW")
        want = tuple(window_out(self.name, x[2 + a], kernel[a], stride[a], padding[a], dilation[a]) for a in (0, 1))
        if not same_dim(gy[0], x[0]) or any(is_static(d) and static(d) != w for d, w in zip(gy[2:], want)):
            raise ShapeError(f"got gy {shape_str(gy)} for x {shape_str(x)}, expected (N, O, {want[0]}, {want[1]}): "
                             "the forward output's shape for these kernel, stride, padding and dilation",
                             op=self.name, arg="gy")
        return (gy[1], x[1], kernel[0], kernel[1])

    def infer_dtype(self, x, gy, **attrs):
        return promote(self.name, x, gy)

    def compute(self, x, gy, kernel, stride, padding, dilation):
        dt = promote(self.name, dtype_of(x), dtype_of(gy))
        n, c, _, _ = x.shape
        _, o, oh, ow = gy.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), f"{self.name}_pad")
        gyt = te.compute((n, oh, ow, o), lambda b, y, z, k: gy[b, k, y, z], name=f"{self.name}_gyt",
                         tag="injective")
        rn, ry, rz = te.reduce_axis((0, n), "rn"), te.reduce_axis((0, oh), "ry"), te.reduce_axis((0, ow), "rz")
        acc = te.compute((c, kh, kw, o), lambda ci, i, j, k: te.sum(
            xp[rn, ci, ry * sh + i * dh, rz * sw + j * dw].astype(dt) * gyt[rn, ry, rz, k].astype(dt),
            axis=[rn, ry, rz]), name=f"{self.name}_cl", tag=self.family)
        return te.compute((o, c, kh, kw), lambda k, ci, i, j: acc[ci, i, j, k], name=self.name, tag="injective")

    def reference(self, x, gy, kernel, stride, padding, dilation):
        (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        span = (dh * (kernel[0] - 1) + 1, dw * (kernel[1] - 1) + 1)
        win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
        win = win[:, :, :gy.shape[2], :gy.shape[3]]
        return np.einsum("nchwyx,nohw->ocyx", win, gy).astype(np.result_type(x, gy))

    def gradient(self, g, node):
        """dw is bilinear in (x, gy): dx is gy convolved back through ``g``
        (the data gradient of a conv with weight ``g``), dgy the forward conv of x with ``g``."""
        x, gy = node.inputs
        attrs = {k: node.attrs[k] for k in ("stride", "padding", "dilation")}
        gx = as_dtype(_grad_x(gy, x, g, "NCHW", **attrs), x.dtype) if wants_grad(x) else None
        ggy = as_dtype(conv2d(x, g, **attrs), gy.dtype) if wants_grad(gy) else None
        return gx, ggy

    def flops(self, shapes, **attrs):
        x, gy = shapes
        total = 2 * size(gy) * static(x[1]) * attrs["kernel"][0] * attrs["kernel"][1]
        return float(total) if isinstance(total, int) else 0.0
