"""``min``, ``argmax``/``argmin`` and ``cumsum``: reductions along axes beside
those of ``reduction``, with its machinery.

``min`` is ``max``'s mirror (NaN propagates, a zero-length axis is an error).
``argmax``/``argmin`` follow ONNX (one ``axis``, default 0, ``keepdims``
default True, ``select_last_index``) and return int64; NaN counts as the
extreme value, so the first NaN's index comes back, as numpy's (the last with
``select_last_index``). They run in two reductions, the extreme value and
then the first (or last) index holding it, each a plain max/min reducer that
the CPU rfactor and CUDA cross-thread schedules know.

``cumsum`` follows ONNX's CumSum (``exclusive``, ``reverse``) and numpy's
dtypes (int32 sums in int64). Each output is a sum over a masked reduce axis
of the whole length: O(n^2) in the axis length n, scheduled as a reduction.
That is fine for the axes models scan (sequence positions, a few thousand at
most); a long axis wants a blocked or serial scan, which needs a template of
its own.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import nanmath
from .oprefs import op_ref
from .reduction import Max, Reduction, accumulator, reduced_shape
from .registry import Op, register
from .shapes import FLOATS, NUMERIC, dtype_of, is_static, normalize_axis, size, static

cumsum = op_ref("cumsum")  # cumsum's gradient (see oprefs)


@register
class Min(Reduction):
    name = "min"

    def infer_shape(self, x, axis, keepdims):
        axes = self.axes_of(x, axis)
        if any(is_static(x[a]) and static(x[a]) == 0 for a in axes):
            raise ShapeError("cannot take the min over a zero-length axis", op=self.name, arg="axis")
        return reduced_shape(x, axes, keepdims)

    def compute(self, x, axis, keepdims):
        out_shape, raxes, index = self.reduce_loops(x, axis, keepdims)
        return te.compute(out_shape, lambda *i: nanmath.min_reducer()(x(*index(i)), axis=raxes) if raxes
                          else x(*index(i)), name=self.name, tag=self.family)

    def reference(self, x, axis, keepdims):
        return np.min(x, axis=axis, keepdims=keepdims)

    def gradient(self, g, node):
        return Max.gradient(self, g, node)  # every element equal to the min receives the gradient


def _one_axis(op, shape, axis) -> int:
    if len(shape) == 0:
        raise ShapeError("got a 0-d input, expected at least one axis", op=op, arg="x")
    return normalize_axis(op, axis, len(shape))


class ArgExtreme(Op):
    """The index of the extreme value along ``axis`` (int64)."""

    family = "reduction"
    dtypes = NUMERIC
    differentiable = False
    attrs = {"axis": A.Attr(A.integer, default=0, doc="the axis to search"),
             "keepdims": A.Attr(A.boolean, default=True, doc="keep the axis as size 1 (ONNX's default)"),
             "select_last_index": A.Attr(A.boolean, default=False, doc="the last index of a tie, not the first")}
    #: the extreme value's reducer, and numpy's function
    reducer = staticmethod(nanmath.max_reducer)
    numpy_arg = staticmethod(np.argmax)

    def infer_shape(self, x, axis, keepdims, select_last_index):
        axis = _one_axis(self.name, x, axis)
        if is_static(x[axis]) and static(x[axis]) == 0:
            raise ShapeError(f"cannot take the {self.name} over a zero-length axis", op=self.name, arg="axis")
        return reduced_shape(x, (axis,), keepdims)

    def infer_dtype(self, x, axis, keepdims, select_last_index):
        return "int64"

    def compute(self, x, axis, keepdims, select_last_index):
        shape = tuple(x.shape)
        axis = _one_axis(self.name, shape, axis)
        out_shape = reduced_shape(shape, (axis,), keepdims)
        r1, r2 = te.reduce_axis((0, shape[axis]), "r1"), te.reduce_axis((0, shape[axis]), "r2")

        def at(i, r):
            i = list(i) if keepdims else [*i[:axis], 0, *i[axis:]]
            return [r if k == axis else v for k, v in enumerate(i)]

        best = te.compute(out_shape, lambda *i: self.reducer()(x(*at(i, r1)), axis=r1), name=self.name + "_value",
                          tag=self.family)

        def holds_best(i, r):
            v = x(*at(i, r))
            hit = v == best(*i)
            return tirx.Or(hit, nanmath.isnan(v)) if dtype_of(x) in FLOATS else hit  # the best is NaN if any is

        # the first index holding it (the least index, others at int64's max), or the last (the greatest, -1)
        reduce, none = (te.max, tirx.const(-1, "int64")) if select_last_index else (te.min, tirx.max_value("int64"))
        r64 = r2.var.astype("int64")
        return te.compute(out_shape, lambda *i: reduce(tirx.Select(holds_best(i, r2), r64, none), axis=r2),
                          name=self.name, tag=self.family)

    def reference(self, x, axis, keepdims, select_last_index):
        if select_last_index:  # the first index in the reversed axis is the last one
            n = x.shape[axis]
            out = n - 1 - self.numpy_arg(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            out = self.numpy_arg(x, axis=axis, keepdims=keepdims)
        return out.astype("int64")

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 2.0 * n if isinstance(n, int) else 0.0


@register
class ArgMax(ArgExtreme):
    name = "argmax"


@register
class ArgMin(ArgExtreme):
    name = "argmin"
    reducer = staticmethod(nanmath.min_reducer)
    numpy_arg = staticmethod(np.argmin)


@register
class CumSum(Op):
    """Running sums along ``axis``: ``out[i] = sum(x[k] for k <= i)``; with
    ``exclusive`` ``k < i``, with ``reverse`` from the other end (``k >= i``)."""

    name = "cumsum"
    family = "reduction"
    dtypes = NUMERIC
    grad_inputs = ()
    grad_output = False
    attrs = {"axis": A.Attr(A.integer, doc="the axis to sum along"),
             "exclusive": A.Attr(A.boolean, default=False, doc="leave out the element itself"),
             "reverse": A.Attr(A.boolean, default=False, doc="sum from the end of the axis")}

    def infer_shape(self, x, axis, exclusive, reverse):
        _one_axis(self.name, x, axis)
        return x

    def infer_dtype(self, x, axis, exclusive, reverse):
        return "int64" if x in ("int32", "int64") else x

    def compute(self, x, axis, exclusive, reverse):
        shape = tuple(x.shape)
        axis = _one_axis(self.name, shape, axis)
        dt = self.infer_dtype(dtype_of(x), axis, exclusive, reverse)
        acc = accumulator(dt)
        r = te.reduce_axis((0, shape[axis]), "r")

        def summed(*i):
            k, j = (i[axis], r) if reverse else (r, i[axis])  # terms where k < j (or <=)
            keep = k < j if exclusive else k <= j
            term = x(*[r if d == axis else v for d, v in enumerate(i)]).astype(acc)
            return te.sum(tirx.Select(keep, term, tirx.const(0, acc)), axis=r)

        if acc == dt:
            return te.compute(shape, summed, name=self.name, tag=self.family)
        total = te.compute(shape, summed, name="cumsum_acc", tag=self.family)
        return te.compute(shape, lambda *i: total(*i).astype(dt), name=self.name, tag=self.family)

    def reference(self, x, axis, exclusive, reverse):
        dt = self.infer_dtype(str(x.dtype), axis, exclusive, reverse)
        x = np.flip(x, axis) if reverse else x
        out = np.cumsum(x.astype(accumulator(dt)), axis=axis)
        if exclusive:  # shifted one place along the axis, a 0 first
            out = np.moveaxis(out, axis, 0)
            out = np.moveaxis(np.concatenate([np.zeros_like(out[:1]), out[:-1]]), 0, axis)
        return (np.flip(out, axis) if reverse else out).astype(dt)

    def gradient(self, g, node):
        # the transpose of a running sum is the running sum from the other end
        attrs = node.attrs
        return (cumsum(g, axis=attrs["axis"], exclusive=attrs["exclusive"], reverse=not attrs["reverse"]),)

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return float(n) if isinstance(n, int) else 0.0

    def kernel_flops(self, shapes, **attrs):
        """The masked sums add the whole axis for each output: n times the flops."""
        length = static(shapes[0][attrs["axis"] % len(shapes[0])]) if shapes[0] else 1
        flops = self.flops(shapes, **attrs)
        return flops * length if isinstance(length, int) else 0.0
