"""Layer normalization as one kernel, and its gradient as one more.

``layer_norm(x, weight, bias, axis=-1, eps=1e-5)`` normalizes ``x`` over its
trailing dims ``x.shape[axis:]`` (ONNX LayerNormalization's ``axis``;
PyTorch's ``normalized_shape`` is ``x.shape[axis:]``): with a row the
elements sharing the leading indices ``x.shape[:axis]``,
``y = (x - mean) / sqrt(var + eps) * weight + bias``; ``weight`` and
``bias`` have the shape ``x.shape[axis:]``. Each row's mean is summed in
float64 for float32 and its biased variance in the input's dtype, of the
centered values (two passes over the row, which a schedule keeps in
cache), not as E[x^2] - E[x]^2, so a row far from zero keeps its digits.

Its gradient is ``layer_norm_grad(gy, x, weight)`` -> ``(dx, dweight,
dbias)``, which computes the statistics of ``x`` again (a gradient sees the
op's inputs, not its internals); with ``xhat = (x - mean) * rstd``,
``rstd = 1 / sqrt(var + eps)`` and means over a row,
``dx = rstd * (gy w - mean(gy w) - xhat mean(gy w xhat))``,
``dweight = sum(gy xhat)`` and ``dbias = sum(gy)`` over the rows (summed in
float64 for float32, as kiln's reductions do). A gradient that is itself
recorded (``create_graph``) is the same formula written with registered ops,
which can be differentiated again.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .grad import as_dtype
from .oprefs import op_ref
from .reduction import accumulator
from .registry import Op, register
from .shapes import FLOATS, dtype_of, normalize_axis, promote, same_dim, shape_str, size, static

layer_norm_grad = op_ref("layer_norm_grad")  # the forward's gradient: one kernel

ATTRS = {"axis": A.Attr(A.integer, default=-1, doc="the first normalized axis: rows normalize over x.shape[axis:]"),
         "eps": A.Attr(A.positive_float, default=1e-5, doc="added to the variance")}


def _split(name: str, x, axis: int) -> int:
    """The first normalized axis of ``x`` (a shape), checked: at least one value per row."""
    if len(x) == 0:
        raise ShapeError("got a 0-d x, expected at least one axis to normalize over", op=name, arg="x")
    ax = normalize_axis(name, axis, len(x))
    if any(static(d) == 0 for d in x[ax:]):
        raise ShapeError(f"got x of shape {shape_str(x)}: rows of no values over axes {ax}.., expected at least one",
                         op=name, arg="x")
    return ax


def _check_like(name: str, arg: str, got, want) -> None:
    if len(got) != len(want) or not all(same_dim(a, b) for a, b in zip(got, want)):
        raise ShapeError(f"got {arg} of shape {shape_str(got)}, expected {shape_str(want)}", op=name, arg=arg)


class _Rows:
    """Index helpers for a tensor of ``shape`` normalized over its axes from ``ax``."""

    def __init__(self, shape, ax: int, dt: str):
        self.shape, self.ax, self.dt = tuple(shape), ax, dt
        self.rows, self.cols = self.shape[:ax], self.shape[ax:]
        self.count = size(self.cols)

    def inv(self, dtype: str):
        """1 / the values in a row, in ``dtype``."""
        n = self.count
        return tirx.const(1.0 / n, dtype) if isinstance(n, int) else tirx.const(1.0, dtype) / tirx.Cast(dtype, n)

    def over_row(self, tag: str) -> list:
        """Reduce axes over a row's values."""
        return [te.reduce_axis((0, d), f"{tag}{k}") for k, d in enumerate(self.cols)]

    def mean(self, value, name: str, acc: str | None = None):
        """Per row: the mean of ``value(index)`` over the row (``index``: a full
        index of the input), summed in ``acc`` (default the row's dtype)."""
        acc = acc or self.dt
        inv = self.inv(acc)

        def body(*i):
            r = self.over_row("r")
            return te.sum(value(tuple(i) + tuple(r)).astype(acc) * inv, axis=r)
        return te.compute(self.rows, lambda *i: body(*i), name=name, tag="norm")

    def statistics(self, x, eps: float, name: str) -> tuple:
        """``(mean, rstd)`` of ``x`` per row: the mean, then 1 / sqrt(mean((x - mean)^2) + eps).

        The mean is summed in float64 for float32: a row 10 from zero loses
        about 1e-6 of its mean in a float32 sum of 4096 values, which shifts
        every output by that over the row's deviation times the weight."""
        dt, ax = self.dt, self.ax
        wide = self.mean(lambda i: x(*i), f"{name}_mean", accumulator(dt))
        mean = wide if dt == accumulator(dt) else te.compute(
            self.rows, lambda *i: wide(*i).astype(dt), name=f"{name}_center", tag="norm")

        def centered_square(i):
            d = x(*i).astype(dt) - mean(*i[:ax])
            return d * d
        var = self.mean(centered_square, f"{name}_var")
        rstd = te.compute(self.rows, lambda *i: te.rsqrt(var(*i) + tirx.const(eps, dt)), name=f"{name}_rstd",
                          tag="norm")
        return mean, rstd


@register
class LayerNorm(Op):
    """See the module docstring."""

    name = "layer_norm"
    family = "norm"
    arity = 3
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False
    attrs = ATTRS

    def infer_shape(self, x, weight, bias, axis, eps):
        ax = _split(self.name, x, axis)
        _check_like(self.name, "weight", weight, x[ax:])
        _check_like(self.name, "bias", bias, x[ax:])
        return tuple(x)

    def infer_dtype(self, x, weight, bias, axis, eps):
        return promote(self.name, x, weight, bias)

    def compute(self, x, weight, bias, axis, eps):
        dt = promote(self.name, dtype_of(x), dtype_of(weight), dtype_of(bias))
        ax = normalize_axis(self.name, axis, len(x.shape))
        rows = _Rows(x.shape, ax, dt)
        mean, rstd = rows.statistics(x, eps, self.name)

        def body(*i):
            xhat = (x(*i).astype(dt) - mean(*i[:ax])) * rstd(*i[:ax])
            return xhat * weight(*i[ax:]).astype(dt) + bias(*i[ax:]).astype(dt)
        return te.compute(rows.shape, body, name=self.name, tag="norm")

    def reference(self, x, weight, bias, axis, eps):
        dt = np.result_type(x, weight, bias)
        ax = axis % x.ndim
        xhat, _ = _ref_xhat(x.astype(np.float64), ax, eps)
        return (xhat * weight + bias).astype(dt)

    def gradient(self, g, node):
        x, weight, bias = node.inputs
        if getattr(type(g), "_kiln_recording", lambda: False)():  # create_graph: a differentiable graph
            dx, dweight, dbias = _composed_grad(g, x, weight, **node.attrs)
        else:
            dx, dweight, dbias = layer_norm_grad(g, x, weight, **node.attrs)
        return as_dtype(dx, x.dtype), as_dtype(dweight, weight.dtype), as_dtype(dbias, bias.dtype)

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 8.0 * n if isinstance(n, int) else 0.0


@register
class LayerNormGrad(Op):
    """See the module docstring. Not differentiable itself: ``layer_norm``
    records its composed form instead when a gradient is recorded."""

    name = "layer_norm_grad"
    family = "norm"
    arity = 3
    multi_output = True
    differentiable = False
    dtypes = FLOATS
    grad_inputs = ()
    grad_output = False
    attrs = ATTRS

    def infer_shape(self, g, x, weight, axis, eps):
        ax = _split(self.name, x, axis)
        _check_like(self.name, "g", g, x)
        _check_like(self.name, "weight", weight, x[ax:])
        return [tuple(x), tuple(x[ax:]), tuple(x[ax:])]

    def infer_dtype(self, g, x, weight, axis, eps):
        return [promote(self.name, g, x, weight)] * 3

    def compute(self, g, x, weight, axis, eps):
        dt = promote(self.name, dtype_of(g), dtype_of(x), dtype_of(weight))
        ax = normalize_axis(self.name, axis, len(x.shape))
        rows = _Rows(x.shape, ax, dt)
        mean, rstd = rows.statistics(x, eps, self.name)

        def xhat(i):
            return (x(*i).astype(dt) - mean(*i[:ax])) * rstd(*i[:ax])

        def gw(i):
            return g(*i).astype(dt) * weight(*i[ax:]).astype(dt)

        gw_mean = rows.mean(gw, f"{self.name}_gw_mean")
        gwx_mean = rows.mean(lambda i: gw(i) * xhat(i), f"{self.name}_gwx_mean")
        dx = te.compute(rows.shape, lambda *i: rstd(*i[:ax]) * (gw(i) - gw_mean(*i[:ax]) - xhat(i) * gwx_mean(*i[:ax])),
                        name=self.name, tag="norm")
        dweight, dbias = _sums_over_rows(rows, g, xhat, self.name)
        return [dx, dweight, dbias]

    def reference(self, g, x, weight, axis, eps):
        dt = np.result_type(g, x, weight)
        ax = axis % x.ndim
        g, x, weight = (a.astype(np.float64) for a in (g, x, weight))
        xhat, rstd = _ref_xhat(x, ax, eps)
        cols, lead = tuple(range(ax, x.ndim)), tuple(range(ax))
        gw = g * weight
        dx = rstd * (gw - gw.mean(axis=cols, keepdims=True) - xhat * (gw * xhat).mean(axis=cols, keepdims=True))
        return [dx.astype(dt), (g * xhat).sum(axis=lead).astype(dt), g.sum(axis=lead).astype(dt)]

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 14.0 * n if isinstance(n, int) else 0.0


def _sums_over_rows(rows: _Rows, g, xhat, name: str) -> tuple:
    """``(dweight, dbias)``: the sums over the rows of ``gy xhat`` and ``gy``, one
    stage ``{name}_sums`` of shape (2, ...) accumulated in float64 for float32
    (so a schedule adds both up in one pass over the rows), each rounded to
    the row's dtype."""
    dt = rows.dt
    if not rows.rows:  # one row (axis 0): nothing to add up
        return (te.compute(rows.cols, lambda *c: g(*c).astype(dt) * xhat(c), name=f"{name}_weight", tag="norm"),
                te.compute(rows.cols, lambda *c: g(*c).astype(dt), name=f"{name}_bias", tag="norm"))
    acc = accumulator(dt)
    r = [te.reduce_axis((0, d), f"n{k}") for k, d in enumerate(rows.rows)]

    def term(k, c):
        i = tuple(r) + tuple(c)
        return tirx.Select(k == 0, g(*i).astype(dt) * xhat(i), g(*i).astype(dt)).astype(acc)
    sums = te.compute((2,) + rows.cols, lambda k, *c: te.sum(term(k, c), axis=r), name=f"{name}_sums", tag="norm")
    return (te.compute(rows.cols, lambda *c: sums(0, *c).astype(dt), name=f"{name}_weight", tag="norm"),
            te.compute(rows.cols, lambda *c: sums(1, *c).astype(dt), name=f"{name}_bias", tag="norm"))


def _ref_xhat(x, ax: int, eps: float) -> tuple:
    """numpy: ``(xhat, rstd)`` of ``x`` normalized over its axes from ``ax``."""
    cols = tuple(range(ax, x.ndim))
    centered = x - x.mean(axis=cols, keepdims=True)
    rstd = 1.0 / np.sqrt((centered * centered).mean(axis=cols, keepdims=True) + eps)
    return centered * rstd, rstd


def _composed_grad(g, x, weight, axis: int, eps: float) -> tuple:
    """``layer_norm_grad``'s formulas as registered ops on values (differentiable again)."""
    ax = normalize_axis("layer_norm", axis, len(x.shape))
    cols, lead = tuple(range(ax, len(x.shape))), tuple(range(ax))
    centered = x - x.mean(cols, keepdims=True)
    rstd = 1.0 / ((centered * centered).mean(cols, keepdims=True) + eps).sqrt()
    xhat = centered * rstd
    gw = g * weight
    dx = rstd * (gw - gw.mean(cols, keepdims=True) - xhat * (gw * xhat).mean(cols, keepdims=True))
    gx = g * xhat
    return dx, (gx.sum(lead) if lead else gx), (g.sum(lead) if lead else g)
