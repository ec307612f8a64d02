"""Reductions over any axes, with ``keepdims``: sum, max, mean, logsumexp.

dtypes follow numpy on Linux: ``sum`` of int32 is int64, ``mean`` of ints is
float64, ``max`` keeps the dtype. ``max`` over a zero-length axis is an error,
as in numpy; ``sum`` over one is 0. NaN propagates through all four (``max``
of a slice holding NaN is NaN, as ``np.max``).

float32 sums accumulate in float64 (``accumulator``) and round once at the
end: a float32 accumulator loses about one bit per doubling of the terms it
adds in a row, where numpy adds pairwise; in float64 the error over 1e4-1e7
terms is float32's last rounding (``benchmarks/reduction_accuracy.py``
measures both and the speed).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import fastmath, nanmath
from .registry import Op, register
from .shapes import NUMERIC, dtype_of, float_of, is_static, normalize_axes, size, static

REDUCE_ATTRS = {
    "axis": A.Attr(A.axes, default=None, doc="axes to reduce (None: all)"),
    "keepdims": A.Attr(A.boolean, default=False, doc="keep reduced axes as size 1"),
}


def accumulator(dtype: str) -> str:
    """The dtype a sum of ``dtype`` terms accumulates in: float64 for float32."""
    return "float64" if dtype == "float32" else dtype


def reduced_shape(shape, axes, keepdims):
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


class Reduction(Op):
    family = "reduction"
    dtypes = NUMERIC
    attrs = REDUCE_ATTRS

    def axes_of(self, shape, axis):
        return normalize_axes(self.name, axis, len(shape))

    def infer_shape(self, x, axis, keepdims):
        return reduced_shape(x, self.axes_of(x, axis), keepdims)

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return float(n) if isinstance(n, int) else 0.0

    def reduce_loops(self, x, axis, keepdims):
        """(output shape, reduce axes, index function out_idx, r_idx -> x indices)."""
        shape = tuple(x.shape)
        axes = self.axes_of(shape, axis)
        out_shape = reduced_shape(shape, axes, keepdims)
        raxes = [te.reduce_axis((0, shape[a]), f"r{a}") for a in axes]

        def index(out_idx):
            it_out, it_r, idx = iter(out_idx), iter(raxes), []
            for i in range(len(shape)):
                if i in axes:
                    if keepdims:
                        next(it_out)
                    idx.append(next(it_r))
                else:
                    idx.append(next(it_out))
            return idx

        return out_shape, raxes, index

    def expand_back(self, value, node):
        """``value`` (the reduced shape) broadcast back to the input's shape."""
        x = node.inputs[0]
        axes = self.axes_of(x.shape, node.attrs["axis"])
        kept = reduced_shape(x.shape, axes, True)
        if tuple(value.shape) != kept:
            value = value.reshape(kept)
        return value.broadcast_to(x.shape)


@register
class Sum(Reduction):
    name = "sum"
    grad_inputs = ()
    grad_output = False

    def infer_dtype(self, x, axis, keepdims):
        return "int64" if x in ("int32", "int64") else x

    def compute(self, x, axis, keepdims):
        out_shape, raxes, index = self.reduce_loops(x, axis, keepdims)
        dt = self.infer_dtype(dtype_of(x), axis, keepdims)
        if not raxes:
            return te.compute(out_shape, lambda *i: x(*index(i)).astype(dt), name=self.name, tag=self.family)
        acc = accumulator(dt)
        if acc == dt:
            return te.compute(out_shape, lambda *i: te.sum(x(*index(i)).astype(dt), axis=raxes), name=self.name,
                              tag=self.family)
        total = te.compute(out_shape, lambda *i: te.sum(x(*index(i)).astype(acc), axis=raxes), name="sum_acc",
                           tag=self.family)
        return te.compute(out_shape, lambda *i: total(*i).astype(dt), name=self.name, tag=self.family)

    def reference(self, x, axis, keepdims):
        return np.sum(x, axis=axis, keepdims=keepdims)

    def gradient(self, g, node):
        return (self.expand_back(g, node),)


@register
class Max(Reduction):
    name = "max"

    def infer_shape(self, x, axis, keepdims):
        axes = self.axes_of(x, axis)
        if any(is_static(x[a]) and static(x[a]) == 0 for a in axes):
            raise ShapeError("cannot take the max over a zero-length axis", op=self.name, arg="axis")
        return reduced_shape(x, axes, keepdims)

    def compute(self, x, axis, keepdims):
        out_shape, raxes, index = self.reduce_loops(x, axis, keepdims)
        return te.compute(out_shape, lambda *i: nanmath.max_reducer()(x(*index(i)), axis=raxes) if raxes
                          else x(*index(i)), name=self.name, tag=self.family)

    def reference(self, x, axis, keepdims):
        return np.max(x, axis=axis, keepdims=keepdims)

    def gradient(self, g, node):
        # Every element equal to the max receives the gradient (ties all get it).
        x = node.inputs[0]
        mask = (x == self.expand_back(node, node)).astype(x.dtype)  # elementwise: the op ``equal``
        return (mask * self.expand_back(g, node),)


@register
class Mean(Reduction):
    name = "mean"
    grad_inputs = ()
    grad_output = False

    def infer_dtype(self, x, axis, keepdims):
        return float_of(x)

    def compute(self, x, axis, keepdims):
        shape = tuple(x.shape)
        count = size([shape[a] for a in self.axes_of(shape, axis)])
        dt = self.infer_dtype(dtype_of(x), axis, keepdims)
        out_shape, raxes, index = self.reduce_loops(x, axis, keepdims)
        ad = accumulator(dt)
        acc = te.compute(out_shape, lambda *i: te.sum(x(*index(i)).astype(ad), axis=raxes) if raxes
                         else x(*index(i)).astype(ad), name="mean_sum", tag=self.family)
        if is_static(count) and static(count) == 0:  # the mean of nothing is NaN, as numpy's
            return te.compute(out_shape, lambda *i: tirx.const(float("nan"), dt), name=self.name, tag=self.family)
        return te.compute(out_shape, lambda *i: (acc(*i) / tirx.Cast(ad, count)).astype(dt), name=self.name,
                          tag=self.family)

    def reference(self, x, axis, keepdims):
        return np.mean(x, axis=axis, keepdims=keepdims)

    def gradient(self, g, node):
        x = node.inputs[0]
        count = size([x.shape[a] for a in self.axes_of(x.shape, node.attrs["axis"])])
        return (self.expand_back(g, node) / float(count),)


@register
class LogSumExp(Reduction):
    name = "logsumexp"

    def infer_shape(self, x, axis, keepdims):
        return Max.infer_shape(self, x, axis, keepdims)

    def infer_dtype(self, x, axis, keepdims):
        return float_of(x)

    def compute(self, x, axis, keepdims):
        """m + log(sum(exp(x - m))) with m the max: no overflow. An all -inf
        slice gives -inf (m is replaced by 0 where it is not finite)."""
        dt = self.infer_dtype(dtype_of(x), axis, keepdims)
        out_shape, raxes, index = self.reduce_loops(x, axis, keepdims)
        if not raxes:
            return te.compute(out_shape, lambda *i: x(*index(i)).astype(dt), name=self.name, tag=self.family)
        _, raxes2, index2 = self.reduce_loops(x, axis, keepdims)  # each stage needs its own reduce axes
        mx = te.compute(out_shape, lambda *i: nanmath.max_reducer()(x(*index(i)).astype(dt), axis=raxes),
                        name="lse_max", tag=self.family)

        def shift(*i):
            return tirx.Select(tirx.isfinite(mx(*i)), mx(*i), tirx.const(0, dt))

        ad = accumulator(dt)
        total = te.compute(out_shape, lambda *i: te.sum(fastmath.exp(x(*index2(i)).astype(dt) - shift(*i)).astype(ad),
                                                        axis=raxes2), name="lse_sum", tag=self.family)
        return te.compute(out_shape, lambda *i: tirx.log(total(*i)).astype(dt) + shift(*i), name=self.name,
                          tag=self.family)

    def reference(self, x, axis, keepdims):
        x = x.astype(float_of(str(x.dtype)))
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
        return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())

    def gradient(self, g, node):
        x = node.inputs[0]
        return ((x - self.expand_back(node, node)).exp() * self.expand_back(g, node),)
