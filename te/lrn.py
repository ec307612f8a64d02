"""Local response normalization across channels (AlexNet's; ONNX LRN,
PyTorch ``LocalResponseNorm``).

``lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0)``: x (N, C, ...) -> like x,

    y[n, c] = x[n, c] / (bias + alpha / size * square_sum[n, c]) ** beta

where ``square_sum[n, c]`` sums ``x[n, j] ** 2`` over the ``size`` channels
``c - (size - 1) / 2 <= j <= c + (size - 1) / 2`` that exist (``size`` is odd).

Its gradient is composed of registered ops: the channel window's sum is an
``avg_pool2d`` over channels with the padding counted (so it divides by
``size`` everywhere), and with ``s`` the denominator's base,
``dx = g * s ** -beta - 2 alpha beta x * window_mean(g * y / s)``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, shape_str

avg_pool2d = op_ref("avg_pool2d")


def _odd(op: str, name: str, value) -> int:
    value = A.positive_int(op, name, value)
    if value % 2 == 0:
        raise A.AttrError(f"got {value}, expected an odd window (1, 3, 5...)", op=op, arg=name)
    return value


def _real(op: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise A.AttrError(f"got {value!r}, expected a finite number", op=op, arg=name)
    return float(value)


@register
class Lrn(Op):
    name = "lrn"
    family = "norm"
    dtypes = FLOATS
    grad_inputs = (0,)
    grad_output = True
    attrs = {"size": A.Attr(_odd, doc="channels in the window (odd)"),
             "alpha": A.Attr(_real, default=1e-4, doc="scale of the window's mean square"),
             "beta": A.Attr(_real, default=0.75, doc="exponent of the denominator"),
             "bias": A.Attr(_real, default=1.0, doc="added to the scaled square sum")}

    def infer_shape(self, x, **attrs):
        if len(x) < 2:
            raise ShapeError(f"got {shape_str(x)}, expected (N, C, ...)", op=self.name, arg="x")
        return x

    def compute(self, x, size, alpha, beta, bias):
        dt, half = dtype_of(x), (size - 1) // 2
        channels = x.shape[1]
        r = te.reduce_axis((0, size), "rc")

        def square_sum(n, c, *rest):
            j = c + r - half
            v = x(n, tirx.min(tirx.max(j, 0), channels - 1), *rest)  # clamped: both sides may be read
            return te.sum(tirx.if_then_else(tirx.all(j >= 0, j < channels), v * v, tirx.const(0, dt)), axis=r)

        sums = te.compute(x.shape, square_sum, name="lrn_square_sum", tag=self.family)
        scale, b, p = tirx.const(alpha / size, dt), tirx.const(bias, dt), tirx.const(beta, dt)
        return te.compute(x.shape, lambda *i: x(*i) / tirx.power(b + scale * sums(*i), p), name=self.name,
                          tag=self.family)

    def reference(self, x, size, alpha, beta, bias):
        half = (size - 1) // 2
        padded = np.pad(x * x, [(0, 0), (half, half)] + [(0, 0)] * (x.ndim - 2))
        sums = np.lib.stride_tricks.sliding_window_view(padded, size, axis=1).sum(axis=-1)
        return x / (x.dtype.type(bias) + x.dtype.type(alpha / size) * sums) ** x.dtype.type(beta)

    def gradient(self, g, node):
        x, (size, alpha, beta, bias) = node.inputs[0], (node.attrs[k] for k in ("size", "alpha", "beta", "bias"))
        s = bias + alpha * _window_mean(x * x, size)
        return (g * s ** -beta - (2 * alpha * beta) * x * _window_mean(g * node / s, size),)


def _window_mean(t, size: int):
    """The mean of ``t`` over each channel's window of ``size`` (missing channels count as 0)."""
    shape = tuple(t.shape)
    rows = shape[0], 1, shape[1], math.prod(shape[2:])
    pooled = avg_pool2d(t.reshape(rows), kernel=(size, 1), stride=1, padding=((size - 1) // 2, 0),
                        count_include_pad=True)
    return pooled.reshape(shape)
