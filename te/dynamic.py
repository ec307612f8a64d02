"""Ops whose output length depends on the values: ``masked_select``,
``nonzero``, ``unique`` (MindSpore's dynamic-shape ops), and
``masked_scatter``, the gradient of ``masked_select``.

A data-dependent op's ``infer_shape`` returns its output with a ``Bounded``
dim (``?[0..n]``); its kernel fills storage of the upper bound and writes
the actual length as a second output, and callers (``Kernel``, the autograd
``Tensor``) hand out the first ``length`` rows. The compaction is a serial
loop with a running count (``te.extern``): each element's position in the
output is the number of kept elements before it.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import DTypeError, ShapeError
from . import nanmath
from .oprefs import op_ref
from .registry import Op, register
from .shapes import DTYPES, FLOATS, Bounded, NUMERIC, dtype_of, index_dim, same_dim, shape_str, size, static

# the gradients' ops that have no operator (see oprefs)
masked_scatter, pad = op_ref("masked_scatter"), op_ref("pad")


def _flat(x, name: str):
    """``x`` as a 1-D tensor (row-major)."""
    shape = tuple(x.shape)
    if len(shape) == 1:
        return x

    def at(i):
        idx = []
        for d in reversed(shape):
            idx.append(tirx.floormod(i, index_dim(d)))
            i = tirx.floordiv(i, index_dim(d))
        return x(*reversed(idx))

    return te.compute((size(shape),), at, name=name, tag="injective")


def _loop(n, body_fn, name: str = "i"):
    i = tirx.Var(name, "int32")
    return tirx.For(i, 0, n, tirx.ForKind.SERIAL, body_fn(i))


def _load(buf, *idx):
    return tirx.BufferLoad(buf, list(idx))


def _store(buf, value, *idx):
    return tirx.BufferStore(buf, value, list(idx))


def _count_nans(flat, n: int):
    """The number of NaNs in the 1-D float tensor ``flat``, as an int32 tensor of shape (1,)."""
    r = te.reduce_axis((0, n), "r")
    one, zero = tirx.const(1, "int32"), tirx.const(0, "int32")
    return te.compute((1,), lambda _: te.sum(tirx.Select(nanmath.isnan(flat[r]), one, zero), axis=r), name="nan_count",
                      tag="dynamic")


def _compact(n, keep, write, count):
    """``count = 0; for i < n: if keep(i): write(i, count); count += 1``."""

    def body(i):
        k = _load(count, 0)
        return tirx.IfThenElse(keep(i), tirx.SeqStmt([write(i, k), _store(count, k + 1, 0)]), None)

    return tirx.SeqStmt([_store(count, tirx.const(0, "int32"), 0), _loop(n, body)])


class DataDependent(Op):
    data_dependent = True
    differentiable = False
    family = "dynamic"

    def bound(self, x) -> int:
        """The elements of ``x``: the most the output can hold (``x`` must be static)."""
        n = size(x)
        if not isinstance(n, int):
            raise ShapeError(f"got x {shape_str(x)}, expected static dims (the output's bound)", op=self.name,
                             arg="x")
        if n == 0:  # the compaction's kernel cannot run on no storage: say so rather than return garbage
            dim = next(k for k, d in enumerate(x) if static(d) == 0)
            raise ShapeError(f"got x {shape_str(x)}: dim {dim} is 0, expected at least one element", op=self.name,
                             arg="x")
        return n


@register
class MaskedSelect(DataDependent):
    """``x[mask]``: the elements of ``x`` where ``mask`` is true, in row-major
    order, as a 1-D tensor of data-dependent length (numpy's boolean indexing)."""

    name = "masked_select"
    arity = 2
    dtypes = DTYPES
    differentiable = True
    grad_inputs = (1,)
    grad_output = False

    def infer_shape(self, x, mask):
        if len(x) != len(mask) or not all(same_dim(a, b) for a, b in zip(x, mask)):
            raise ShapeError(f"got x {shape_str(x)} and mask {shape_str(mask)}, expected the same shape",
                             op=self.name, arg="mask")
        return (Bounded(0, self.bound(x)),)

    def infer_dtype(self, x, mask):
        if mask != "bool":
            raise DTypeError(f"got a {mask} mask, expected bool", op=self.name, arg="mask")
        return x

    def compute(self, x, mask):
        n = size(tuple(x.shape))
        fx, fm = _flat(x, "masked_select_x"), _flat(mask, "masked_select_mask")

        def fcompute(ins, outs):
            xs, ms = ins
            out, count = outs
            return _compact(n, lambda i: _load(ms, i), lambda i, k: _store(out, _load(xs, i), k), count)

        return te.extern([(n,), (1,)], [fx, fm], fcompute, name=self.name, dtype=[dtype_of(x), "int32"])

    def reference(self, x, mask):
        return x[mask]

    def gradient(self, g, node):
        return masked_scatter(g, node.inputs[1]), None


@register
class MaskedScatter(Op):
    """``out[mask] = values`` into zeros of ``mask``'s shape: the ``i``-th true
    position of ``mask`` (row-major) takes ``values[i]`` (the gradient of
    ``masked_select``). True positions beyond the last of ``values`` stay zero
    (the kernel cannot raise, and reading past ``values`` would be reading
    garbage); numpy and PyTorch refuse such a call instead."""

    name = "masked_scatter"
    arity = 2
    dtypes = DTYPES
    family = "dynamic"
    grad_inputs = (1,)
    grad_output = False

    def infer_shape(self, values, mask):
        if len(values) != 1:
            raise ShapeError(f"got values {shape_str(values)}, expected a 1-D tensor", op=self.name, arg="values")
        return tuple(mask)

    def infer_dtype(self, values, mask):
        return values

    def compute(self, values, mask):
        shape = tuple(mask.shape)
        n = size(shape)
        fm = _flat(mask, "masked_scatter_mask")
        dt = dtype_of(values)

        def fcompute(ins, outs):
            vals, ms = ins
            out, taken = outs  # ``taken``: the running count, a scratch output
            zero = _loop(n, lambda i: _store(out, tirx.const(0, dt), i), "z")
            have = values.shape[0]

            def write(i, k):  # a guarded load: no read past the last value
                return _store(out, tirx.if_then_else(k < have, _load(vals, k), tirx.const(0, dt)), i)

            return tirx.SeqStmt([zero, _compact(n, lambda i: _load(ms, i), write, taken)])

        flat_out, _ = te.extern([(n,), (1,)], [values, fm], fcompute, name="masked_scatter_flat", dtype=[dt, "int32"])
        if len(shape) == 1:
            return te.compute(shape, lambda i: flat_out[i], name=self.name, tag="injective")
        strides = [size(shape[k + 1:]) for k in range(len(shape))]
        return te.compute(shape, lambda *i: flat_out[sum(a * s for a, s in zip(i, strides))], name=self.name,
                          tag="injective")

    def reference(self, values, mask):
        out = np.zeros(mask.size, values.dtype)  # row-major: the flat order (a 0-d mask is one position)
        where = np.flatnonzero(mask)[:len(values)]
        out[where] = values[:len(where)]
        return out.reshape(mask.shape)

    def gradient(self, g, node):
        values, mask = node.inputs
        taken = g.masked_select(mask)  # values beyond the mask's count were not used: zero
        extra = static(values.shape[0]) - taken.shape[0]
        return (pad(taken, pad_width=((0, extra),)) if extra else taken), None


@register
class Nonzero(DataDependent):
    """The indices of the nonzero elements of ``x`` as a ``(count, ndim)``
    int32 tensor, in row-major order (``torch.nonzero``, ``np.argwhere``)."""

    name = "nonzero"
    dtypes = DTYPES

    def infer_shape(self, x):
        return (Bounded(0, self.bound(x)), len(x))

    def infer_dtype(self, x):
        return "int32"

    def compute(self, x):
        shape = tuple(static(d) for d in x.shape)
        n, ndim = size(shape), len(shape)
        fx = _flat(x, "nonzero_x")
        is_bool = dtype_of(x) == "bool"

        def fcompute(ins, outs):
            (xs,) = ins
            out, count = outs

            def write(i, k):
                stores, rest = [], i
                for axis in reversed(range(ndim)):
                    stores.append(_store(out, tirx.floormod(rest, index_dim(shape[axis])), k, axis))
                    rest = tirx.floordiv(rest, index_dim(shape[axis]))
                return tirx.SeqStmt(stores) if len(stores) > 1 else stores[0]

            keep = (lambda i: _load(xs, i)) if is_bool else (lambda i: nanmath.nonzero(_load(xs, i)))
            return _compact(n, keep, write, count)

        return te.extern([(n, ndim), (1,)], [fx], fcompute, name=self.name, dtype=["int32", "int32"])

    def reference(self, x):
        return np.argwhere(x).astype("int32")


@register
class Unique(DataDependent):
    """The sorted distinct values of ``x`` (flattened), as a 1-D tensor of
    data-dependent length (``np.unique``)."""

    name = "unique"
    dtypes = NUMERIC

    def infer_shape(self, x):
        n = self.bound(x)
        return (Bounded(min(n, 1), n),)

    def compute(self, x):
        n = size(tuple(x.shape))
        fx = _flat(x, "unique_x")
        dt = dtype_of(x)
        nans = None
        if dt in FLOATS:  # NaN has no place in a sort: sorted as +inf, counted apart, one NaN appended (numpy)
            nans = _count_nans(fx, n)
            fx = te.compute((n,), lambda i: tirx.Select(nanmath.isnan(fx[i]), tirx.const(float("inf"), dt), fx[i]),
                            name="unique_keys", tag="injective")
        # TVM's runtime sort, on buffers at offset 0 (the packed call passes them as DLTensors)
        ordered = te.extern([fx.shape], [fx], lambda ins, outs: tirx.call_packed(
            "tvm.contrib.sort.sort", ins[0], outs[0], 0, True), name="unique_sorted", dtype=[dt],
            in_buffers=[tirx.decl_buffer(fx.shape, dt, "unique_in")], out_buffers=[tirx.decl_buffer(fx.shape, dt, "unique_out")])

        def fcompute(ins, outs):
            s, out, count = ins[0], outs[0], outs[1]
            first = lambda i: tirx.Or(i == 0, _load(s, i) != _load(s, tirx.max(i - 1, 0)))  # noqa: E731
            if nans is None:
                return _compact(n, first, lambda i, k: _store(out, _load(s, i), k), count)
            # the NaNs' +inf stand-ins sort last: compact the rest, then append one NaN
            k, n_nan = _load(count, 0), _load(ins[1], 0)
            append = tirx.IfThenElse(n_nan > 0, tirx.SeqStmt([_store(out, tirx.const(float("nan"), dt), k),
                                                              _store(count, k + 1, 0)]), None)
            return tirx.SeqStmt([_compact(n - n_nan, first, lambda i, j: _store(out, _load(s, i), j), count), append])

        inputs = [ordered] if nans is None else [ordered, nans]
        return te.extern([(n,), (1,)], inputs, fcompute, name=self.name, dtype=[dt, "int32"])

    def reference(self, x):
        return np.unique(x)
