"""Resizing NCHW images: ``resize2d`` and its gradient ``resize2d_grad``.

``resize2d(x, size=(OH, OW))``: x (N, C, H, W) -> (N, C, OH, OW), with ONNX
Resize's semantics. Each output index ``o`` of an axis of ``n`` inputs and
``m`` outputs reads the input coordinate given by
``coordinate_transformation_mode``:

- ``half_pixel`` (default; PyTorch's ``align_corners=False``): ``(o + 0.5) n / m - 0.5``;
- ``pytorch_half_pixel``: the same, but 0 when ``m == 1``;
- ``align_corners``: ``o (n - 1) / (m - 1)`` (0 when ``m == 1``);
- ``asymmetric``: ``o n / m`` (PyTorch's ``mode="nearest"``).

``mode="nearest"`` takes the element at that coordinate rounded by
``nearest_mode``: ``round_prefer_floor`` (default), ``round_prefer_ceil``,
``floor`` (PyTorch's nearest: asymmetric + floor) or ``ceil``.
``mode="linear"`` interpolates between the two neighbours along W, then
along H (bilinear), the coordinate clamped to [0, n - 1] (ONNX's edge
padding, PyTorch's clamp). The scale is always ``m / n`` from the sizes.

Coordinates are computed exactly, as integer ratios ``(a o + b) / q``, so a
coordinate that is an integer or half-integer in exact arithmetic rounds as
the mode says, whatever the float type. The gradient scatters ``g`` back
onto the input grid: ``resize2d_grad(g, in_size=(H, W))``, for each input
element a sum over the few outputs that read it.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from tvm import te, tirx

from ..errors import DTypeError, ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import DTYPES, FLOATS, dtype_of, is_static, shape_str, static

resize2d, resize2d_grad = op_ref("resize2d"), op_ref("resize2d_grad")

TRANSFORMS = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")
ROUNDINGS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
MODE_ATTRS = {
    "mode": A.Attr(A.one_of("nearest", "linear"), default="nearest", doc="nearest or linear (bilinear)"),
    "coordinate_transformation_mode": A.Attr(A.one_of(*TRANSFORMS), default="half_pixel",
                                             doc="output index -> input coordinate, as ONNX Resize"),
    "nearest_mode": A.Attr(A.one_of(*ROUNDINGS), default="round_prefer_floor",
                           doc="how mode nearest rounds the coordinate"),
}


def _ints(*values) -> bool:
    return all(isinstance(v, int) for v in values)


def _fdiv(a, b):
    return a // b if _ints(a, b) else tirx.floordiv(a, b)


def _clamp(v, low, high):
    return min(max(v, low), high) if _ints(v, low, high) else tirx.min(tirx.max(v, low), high)


class _Axis:
    """How output index ``o`` of one axis (``n`` inputs, ``m`` outputs) reads
    the input: coordinate ``(a o + b) / q``, then the mode's rounding or
    neighbours. The same code runs on Python ints (window sizes, at compile
    time) and on TIR expressions (in ``idx``, the kernel's index type)."""

    def __init__(self, n, m, transform: str, rounding: str, idx: str | None = None):
        n, m = static(n), static(m)
        if idx is not None:  # symbolic sizes in the kernel's index type
            n, m = (v if isinstance(v, int) else tirx.Cast(idx, v) for v in (n, m))
        self.n, self.m, self.rounding, self.idx = n, m, rounding, idx
        one = m > 1 if isinstance(m, int) else None  # None: known at run time only
        if transform == "asymmetric":
            self.a, self.b, self.q = n, 0, m
        elif transform == "align_corners":
            self.a, self.b, self.q = self._when(one, m > 1, (n - 1, 0, m - 1), (0, 0, 1))
        elif transform == "pytorch_half_pixel":
            self.a, self.b, self.q = self._when(one, m > 1, (2 * n, n - m, 2 * m), (0, 0, 1))
        else:  # half_pixel: ((2 o + 1) n - m) / (2 m)
            self.a, self.b, self.q = 2 * n, n - m, 2 * m

    def _when(self, known, cond, yes, no):
        if known is not None:
            return yes if known else no
        return tuple(tirx.Select(cond, self._in(y), self._in(z)) for y, z in zip(yes, no))

    def _in(self, v):
        """``v`` in the index type (ints stay Python ints: compile-time arithmetic)."""
        if isinstance(v, int):
            return v if self.idx is None else tirx.const(v, self.idx)
        return v if dtype_of(v) == self.idx else v.astype(self.idx)

    def _p(self, o):
        return self.a * (o if isinstance(o, int) else self._in(o)) + self.b

    @staticmethod
    def _out(v):
        return v if isinstance(v, int) or dtype_of(v) == "int32" else v.astype("int32")

    def nearest(self, o):
        p, q = self._p(o), self.q
        if self.rounding == "floor":
            r = _fdiv(p, q)
        elif self.rounding == "ceil":
            r = -_fdiv(-p, q)
        elif self.rounding == "round_prefer_ceil":  # floor(c + 1/2)
            r = _fdiv(2 * p + q, 2 * q)
        else:  # round_prefer_floor: ceil(c - 1/2)
            r = -_fdiv(q - 2 * p, 2 * q)
        return self._out(_clamp(r, 0, self.n - 1))

    def linear(self, o, dtype: str | None = None):
        """(left neighbour, right neighbour, weight of the right one); in the
        kernel also whether the coordinate is exactly the left one's."""
        p = _clamp(self._p(o), 0, (self.n - 1) * self.q)
        left = _fdiv(p, self.q)
        right, num = _clamp(left + 1, 0, self.n - 1), p - left * self.q
        if dtype is None:
            return left, right, Fraction(num, self.q)
        return self._out(left), self._out(right), tirx.Cast(dtype, num) / tirx.Cast(dtype, self.q), num == 0

    def first(self, w):
        """The first output that reads input ``w`` > ``self.low`` (the reads are monotone in o)."""
        a, b, q = self.a, self.b, self.q
        if self.rounding is None:  # linear: its right neighbour reaches w
            need, scale = (w - 1) * q, 1
        else:
            need, scale = {"floor": (w * q, 1), "ceil": ((w - 1) * q + 1, 1),
                           "round_prefer_ceil": ((2 * w - 1) * q, 2),
                           "round_prefer_floor": ((2 * w - 1) * q + 1, 2)}[self.rounding]
        return -_fdiv(scale * b - need, scale * a)  # ceil((need - scale b) / (scale a))

    @property
    def low(self) -> int:
        """The inputs read from output 0 on, as the coordinate is clamped at 0: the
        first (nearest), the first two (linear: the right neighbour of 0 is 1)."""
        return 0 if self.rounding else 1

    def window(self):
        """``(first(w), outputs to look at from there)``, or (0, m) where the sizes are symbolic."""
        if not _ints(self.n, self.m, self.a) or self.a == 0:
            return (lambda w: 0), self.m
        reads = [self.nearest(o) for o in range(self.m)] if self.rounding else [
            k for o in range(self.m) for k in self.linear(o)[:2]]
        per = 1 if self.rounding else 2
        span = 1
        for w in range(self.n):
            hits = [k // per for k, r in enumerate(reads) if r == w]
            start = 0 if w <= self.low else max(0, self.first(w))
            if hits and hits[0] < start:  # the bound failed: look at every output
                return (lambda w: 0), self.m
            span = max(span, hits[-1] - start + 1) if hits else span
        return (lambda w: tirx.Select(w <= self.low, 0, self._out(tirx.max(self.first(self._in(w)), 0)))), span


def _index_type(n, m) -> str:
    """int32 where the coordinates' integer arithmetic fits it."""
    return "int32" if is_static(n) and is_static(m) and 8 * max(static(n), static(m), 1) ** 2 < 2**31 else "int64"


def _check_image(op: str, shape, arg: str) -> None:
    if len(shape) != 4 or any(is_static(d) and static(d) < 1 for d in shape[2:]):
        raise ShapeError(f"got {shape_str(shape)}, expected (N, C, H, W) with H, W >= 1", op=op, arg=arg)


def _check_dtype(op: str, dtype: str, mode: str) -> str:
    if mode == "linear" and dtype not in FLOATS:
        raise DTypeError(f"got {dtype}, expected float32 or float64 for mode 'linear'", op=op, arg="x")
    return dtype


@register
class Resize2d(Op):
    name = "resize2d"
    dtypes = DTYPES
    grad_inputs = ()
    grad_output = False
    attrs = {"size": A.Attr(A.int_tuple(2, minimum=1), doc="(out_h, out_w)"), **MODE_ATTRS}

    def infer_shape(self, x, size, **attrs):
        _check_image(self.name, x, "x")
        return tuple(x[:2]) + size

    def infer_dtype(self, x, mode, **attrs):
        return _check_dtype(self.name, x, mode)

    def compute(self, x, size, mode, coordinate_transformation_mode, nearest_mode):
        out = self.infer_shape(tuple(x.shape), size)
        dt, (h, w) = dtype_of(x), x.shape[2:]
        ay, ax = (_Axis(n, m, coordinate_transformation_mode, nearest_mode, _index_type(n, m))
                  for n, m in zip((h, w), size))
        if mode == "nearest":
            return te.compute(out, lambda b, c, i, j: x(b, c, ay.nearest(i), ax.nearest(j)), name=self.name,
                              tag="injective")
        one = tirx.const(1, dt)

        def lerp(a, b, f, exact):  # on a grid point, that point alone: a zero weight never meets an inf
            return tirx.Select(exact, a, a * (one - f) + b * f)

        def body(b, c, i, j):
            y0, y1, fy, ey = ay.linear(i, dt)
            x0, x1, fx, ex = ax.linear(j, dt)
            row0, row1 = (lerp(x(b, c, y, x0), x(b, c, y, x1), fx, ex) for y in (y0, y1))
            return lerp(row0, row1, fy, ey)

        return te.compute(out, body, name=self.name, tag="injective")

    def reference(self, x, size, mode, coordinate_transformation_mode, nearest_mode):
        ys, xs = (_reads_np(n, m, mode, coordinate_transformation_mode, nearest_mode, x.dtype)
                  for n, m in zip(x.shape[2:], size))
        if mode == "nearest":
            return x[:, :, ys[0]][:, :, :, xs[0]]
        (y0, y1, fy), (x0, x1, fx) = ys, xs
        rows = _lerp_np(x[..., x0], x[..., x1], fx)
        return _lerp_np(rows[:, :, y0], rows[:, :, y1], fy[:, None])

    def gradient(self, g, node):
        in_size = tuple(int(static(d)) for d in node.inputs[0].shape[2:])
        return (resize2d_grad(g, in_size=in_size, **{k: v for k, v in node.attrs.items() if k != "size"}),)


def _lerp_np(a, b, f):
    return np.where(f == 0, a, a * (1 - f) + b * f)


def _reads_np(n: int, m: int, mode: str, transform: str, rounding: str, dtype):
    """Per output index, with exact fractions: (index,) for nearest, (left, right, right weight) for linear."""
    if transform == "align_corners" or (transform == "pytorch_half_pixel" and m == 1):
        coords = [Fraction(o * (n - 1), m - 1) if m > 1 else Fraction(0) for o in range(m)]
    elif transform == "asymmetric":
        coords = [Fraction(o * n, m) for o in range(m)]
    else:
        coords = [(o + Fraction(1, 2)) * n / m - Fraction(1, 2) for o in range(m)]
    if mode == "nearest":
        def rnd(c):
            down, frac = c.__floor__(), c - c.__floor__()
            up = {"floor": False, "ceil": frac > 0, "round_prefer_ceil": frac >= Fraction(1, 2),
                  "round_prefer_floor": frac > Fraction(1, 2)}[rounding]
            return min(max(down + up, 0), n - 1)
        return (np.array([rnd(c) for c in coords], int),)
    coords = [min(max(c, Fraction(0)), Fraction(n - 1)) for c in coords]
    left = np.array([c.__floor__() for c in coords], int)
    frac = np.array([float(c - c.__floor__()) for c in coords]).astype(dtype)
    return left, np.minimum(left + 1, n - 1), frac


@register
class Resize2dGrad(Op):
    """Gradient of resize2d w.r.t. its input: g (N, C, OH, OW) -> (N, C, *in_size).
    Linear, the adjoint of resize2d, so its own gradient is resize2d."""

    name = "resize2d_grad"
    family = "pool"
    dtypes = FLOATS
    grad_inputs = ()
    grad_output = False
    attrs = {"in_size": A.Attr(A.int_tuple(2, minimum=1), doc="(H, W) of resize2d's input"), **MODE_ATTRS}

    def infer_shape(self, g, in_size, **attrs):
        _check_image(self.name, g, "g")
        return tuple(g[:2]) + in_size

    def compute(self, g, in_size, mode, coordinate_transformation_mode, nearest_mode):
        rounding = nearest_mode if mode == "nearest" else None
        axes = [_Axis(n, m, coordinate_transformation_mode, rounding, _index_type(n, m))
                for n, m in zip(in_size, g.shape[2:])]
        cols = _fold(g, 3, axes[1], self.name + "_w", self.family)
        return _fold(cols, 2, axes[0], self.name, self.family)

    def reference(self, g, in_size, mode, coordinate_transformation_mode, nearest_mode):
        for axis, n in ((3, in_size[1]), (2, in_size[0])):
            reads = _reads_np(n, g.shape[axis], mode, coordinate_transformation_mode, nearest_mode, g.dtype)
            g = np.moveaxis(g, axis, -1)
            out = np.zeros(g.shape[:-1] + (n,), g.dtype)
            if mode == "nearest":
                np.add.at(out, (..., reads[0]), g)
            else:
                left, right, frac = reads
                np.add.at(out, (..., left), g * (1 - frac))
                np.add.at(out, (..., right[frac != 0]), (g * frac)[..., frac != 0])
            g = np.moveaxis(out, -1, axis)
        return g

    def gradient(self, g, node):
        size = tuple(int(static(d)) for d in node.inputs[0].shape[2:])
        return (resize2d(g, size=size, **{k: v for k, v in node.attrs.items() if k != "in_size"}),)


def _fold(g, axis: int, ax: _Axis, name: str, tag: str):
    """``g`` with its output ``axis`` summed back onto the input positions that each output read."""
    first, span = ax.window()
    r = te.reduce_axis((0, span), f"r{axis}")
    m, dt = g.shape[axis], dtype_of(g)
    zero, one = tirx.const(0, dt), tirx.const(1, dt)

    def body(*i):
        w = i[axis]
        o = first(w) + r
        safe = tirx.min(o, m - 1)  # TIR's select may read both sides: stay in bounds
        val = g(*[safe if k == axis else v for k, v in enumerate(i)])
        if ax.rounding is not None:
            return te.sum(tirx.if_then_else(tirx.all(o < m, ax.nearest(safe) == w), val, zero), axis=r)
        left, right, frac, exact = ax.linear(safe, dt)
        part = (tirx.if_then_else(tirx.all(o < m, left == w), val * (one - frac), zero)
                + tirx.if_then_else(tirx.all(o < m, right == w, tirx.Not(exact)), val * frac, zero))
        return te.sum(part, axis=r)

    shape = tuple(ax.n if k == axis else d for k, d in enumerate(g.shape))
    return te.compute(shape, body, name=name, tag=tag)
