"""Gathers by integer indices and their scatter-add gradients: ``take``
(ONNX Gather, ``numpy.take``; an embedding lookup is ``take(weight, ids)``)
and ``gather_elements`` (ONNX GatherElements, ``torch.gather``).

Indices are int32 or int64. A negative index counts from the end of the
axis (ONNX); an index still outside ``[0, n)`` is clamped to it (the first
or the last element: ``numpy.take(..., mode="clip")`` after the negative
ones are wrapped once) — a kernel cannot raise, and it never reads outside
its input. The gradients add up what each index read: an index given twice
(a word twice in a batch) gets the sum of both gradients.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import DTypeError, ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import DTYPES, INTS, dtype_of, is_static, normalize_axis, same_dim, shape_str, size, static

# the gradients' ops, which have no operator (see oprefs)
take_grad, gather_elements_grad = op_ref("take_grad"), op_ref("gather_elements_grad")
take, gather_elements = op_ref("take"), op_ref("gather_elements")

AXIS = {"axis": A.Attr(A.integer, default=0, doc="the axis the indices select along")}
SHAPE = {"shape": A.Attr(A.int_tuple(minimum=0), doc="the shape of the gathered input")}


def clamped(index, n, dtype: str):
    """``index`` (an int expression) counted from the end when negative and
    clamped to ``[0, n)``, in the index ``dtype`` of the dim it selects on."""
    idt = dtype_of(index)
    n = tirx.const(n, idt) if isinstance(n, int) else tirx.Cast(idt, n)
    wrapped = tirx.Select(index < tirx.const(0, idt), index + n, index)
    return tirx.Cast(dtype, tirx.max(tirx.min(wrapped, n - tirx.const(1, idt)), tirx.const(0, idt)))


def ref_clamped(indices: np.ndarray, n: int) -> np.ndarray:
    """numpy: the indices as the kernels read them (see the module docstring)."""
    return np.clip(np.where(indices < 0, indices + n, indices), 0, n - 1)


def _check_indices(op: str, dtype: str) -> None:
    if dtype not in INTS:
        raise DTypeError(f"got {dtype} indices, expected one of {', '.join(INTS)}", op=op, arg="indices")


def _check_axis_len(op: str, x, ax: int, indices) -> None:
    """An axis of length 0 has nothing to clamp to: refused unless no index reads it."""
    count = size(indices)
    if is_static(x[ax]) and static(x[ax]) == 0 and not (isinstance(count, int) and count == 0):
        raise ShapeError(f"got x of shape {shape_str(x)}: axis {ax} is empty, so no index can select along it",
                         op=op, arg="x")


def _index_dtype(t) -> str:
    """The dtype TVM indexes the tensor ``t`` with (int64 past 2**31 elements)."""
    return dtype_of(t.shape[0]) if len(t.shape) else "int32"


@register
class Take(Op):
    """``out[a, j, b] = x[a, indices[j], b]``: ``x.shape[:axis] + indices.shape +
    x.shape[axis + 1:]``. On the CPU the generic injective schedule copies
    the rows vectorized: the index is the same across a vector wherever the
    rows after ``axis`` are whole vectors (an embedding's width)."""

    name = "take"
    arity = 2
    dtypes = DTYPES
    grad_inputs = (1,)
    grad_output = False
    attrs = AXIS

    def infer_shape(self, x, indices, axis):
        if len(x) == 0:
            raise ShapeError("got a 0-d x, expected at least one axis to take along", op=self.name, arg="x")
        ax = normalize_axis(self.name, axis, len(x))
        _check_axis_len(self.name, x, ax, indices)
        return tuple(x[:ax]) + tuple(indices) + tuple(x[ax + 1:])

    def infer_dtype(self, x, indices, axis):
        _check_indices(self.name, indices)
        return x

    def compute(self, x, indices, axis):
        ax = normalize_axis(self.name, axis, len(x.shape))
        k, n, dtype = len(indices.shape), static(x.shape[ax]), _index_dtype(x)
        out = self.infer_shape(tuple(x.shape), tuple(indices.shape), axis)

        def body(*i):
            return x(*i[:ax], clamped(indices(*i[ax:ax + k]), n, dtype), *i[ax + k:])
        return te.compute(out, body, name=self.name, tag="injective")

    def reference(self, x, indices, axis):
        ax = axis % x.ndim
        return np.take(x, ref_clamped(indices, x.shape[ax]), axis=ax)

    def gradient(self, g, node):
        x, indices = node.inputs
        return take_grad(g, indices, axis=node.attrs["axis"], shape=tuple(static(d) for d in x.shape)), None


@register
class TakeGrad(Op):
    """Zeros of ``shape`` into which ``g[a, j, b]`` is added at ``[a, indices[j], b]``
    (``take``'s gradient; a repeated index sums its gradients).

    Two stages: one pass over the indices (``take_grad_acc``, a serial loop:
    ``te.extern``) finds, for each position of ``axis``, the first index
    that selects it (``slot``, -1 for none) and adds every later one's rows
    of ``g`` into that one's (``acc``, laid out as ``g``); then each output
    row copies its ``acc`` row or writes zeros (an injective stage, which
    the templates parallelize and vectorize). The serial work is that of
    ``g``; the output's rows, an embedding table's worth, are written in
    parallel."""

    name = "take_grad"
    family = "dynamic"  # an opaque serial stage, as masked_scatter's: schedules.generic.schedule_serial
    arity = 2
    dtypes = DTYPES
    grad_inputs = (1,)
    grad_output = False
    attrs = {**AXIS, **SHAPE}

    def infer_shape(self, g, indices, axis, shape):
        want = Take.infer_shape(self, shape, indices, axis)
        if len(want) != len(g) or not all(same_dim(a, b) for a, b in zip(want, g)):
            raise ShapeError(f"got g of shape {shape_str(g)}, expected {shape_str(want)} (take's output)",
                             op=self.name, arg="g")
        return tuple(shape)

    def infer_dtype(self, g, indices, axis, shape):
        _check_indices(self.name, indices)
        return g

    def compute(self, g, indices, axis, shape):
        ax = normalize_axis(self.name, axis, len(shape))
        n, k, dt = shape[ax], len(indices.shape), dtype_of(g)
        pre, post, ishape = tuple(g.shape[:ax]), tuple(g.shape[ax + k:]), tuple(indices.shape)
        idt = _index_dtype(g)
        count = size(ishape)

        def fcompute(ins, outs):
            gb, ib = ins
            slot, acc = outs

            def row(j, flat, into):  # acc[a, into, b] (+)= g[a, j, b] for every a, b
                def store(i):
                    a, b = i[:len(pre)], i[len(pre):]
                    value = tirx.BufferLoad(gb, [*a, *j, *b])
                    if into is not None:
                        value = tirx.BufferLoad(acc, [*a, into, *b]) + value
                    return tirx.BufferStore(acc, value, [*a, flat if into is None else into, *b])
                return _nest(pre + post, store, idt, "e")

            def each_index(j):
                flat = _flat(j, ishape)
                v = tirx.Var("v", idt)
                first = tirx.BufferLoad(slot, [v]) < tirx.const(0, "int32")
                new = tirx.SeqStmt([tirx.BufferStore(slot, tirx.Cast("int32", flat), [v]), row(j, flat, None)])
                again = row(j, flat, tirx.Cast(idt, tirx.BufferLoad(slot, [v])))
                return tirx.SeqStmt([tirx.Bind(v, clamped(tirx.BufferLoad(ib, list(j)), n, idt)),
                                     tirx.IfThenElse(first, new, again)])

            unset = _nest((n,), lambda i: tirx.BufferStore(slot, tirx.const(-1, "int32"), list(i)), idt, "v")
            return tirx.SeqStmt([unset, _nest(ishape, each_index, idt, "j")])

        slot, acc = te.extern([(n,), pre + (count,) + post], [g, indices], fcompute, name=f"{self.name}_acc",
                              dtype=["int32", dt])
        zero = tirx.const(0, dt)

        def body(*i):
            s = slot[i[ax]]
            at = tirx.Cast(idt, tirx.max(s, tirx.const(0, "int32")))
            return tirx.if_then_else(s >= tirx.const(0, "int32"), acc(*i[:ax], at, *i[ax + 1:]), zero)
        return te.compute(tuple(shape), body, name=self.name, tag=self.family)

    def reference(self, g, indices, axis, shape):
        ax = axis % len(shape)
        out = np.zeros(shape, g.dtype)
        idx = ref_clamped(indices, shape[ax])
        moved = np.moveaxis(out, ax, 0)  # a view: (n, pre..., post...)
        gm = np.moveaxis(g.reshape(shape[:ax] + (indices.size,) + shape[ax + 1:]), ax, 0)
        np.add.at(moved, idx.reshape(-1), gm)
        return out

    def gradient(self, g, node):
        return take(g, node.inputs[1], axis=node.attrs["axis"]), None


def _nest(extents, body, dtype: str, prefix: str):
    """``for i0 < extents[0]: for i1 ...: body((i0, i1, ...))`` (serial loops)."""
    loop_vars = [tirx.Var(f"{prefix}{k}", dtype) for k in range(len(extents))]
    stmt = body(tuple(loop_vars))
    for var, extent in reversed(list(zip(loop_vars, extents))):
        extent = tirx.const(extent, dtype) if isinstance(extent, int) else tirx.Cast(dtype, extent)
        stmt = tirx.For(var, tirx.const(0, dtype), extent, tirx.ForKind.SERIAL, stmt)
    return stmt


def _flat(index, shape):
    """The row-major position of the multi-index ``index`` in ``shape``."""
    flat = tirx.const(0, dtype_of(index[0])) if index else tirx.const(0, "int32")
    for i, d in zip(index, shape):
        flat = flat * (tirx.const(d, dtype_of(i)) if isinstance(d, int) else tirx.Cast(dtype_of(i), d)) + i
    return flat


@register
class GatherElements(Op):
    """``out[i] = x[i with i[axis] replaced by indices[i]]``: the output has the
    indices' shape, whose dims other than ``axis`` are at most x's (ONNX
    GatherElements, ``torch.gather``)."""

    name = "gather_elements"
    arity = 2
    dtypes = DTYPES
    grad_inputs = (1,)
    grad_output = False
    attrs = AXIS

    def infer_shape(self, x, indices, axis):
        if len(x) == 0 or len(indices) != len(x):
            raise ShapeError(f"got x {shape_str(x)} and indices {shape_str(indices)}, expected the same rank, "
                             "at least 1", op=self.name, arg="indices")
        ax = normalize_axis(self.name, axis, len(x))
        for d, (a, b) in enumerate(zip(indices, x)):
            fits = static(a) <= static(b) if is_static(a) and is_static(b) else same_dim(a, b)
            if d != ax and not fits:
                raise ShapeError(f"got indices {shape_str(indices)} for x {shape_str(x)}: dim {d} of the indices "
                                 "must not exceed x's", op=self.name, arg="indices")
        _check_axis_len(self.name, x, ax, indices)
        return tuple(indices)

    def infer_dtype(self, x, indices, axis):
        _check_indices(self.name, indices)
        return x

    def compute(self, x, indices, axis):
        ax = normalize_axis(self.name, axis, len(x.shape))
        n, dtype = static(x.shape[ax]), _index_dtype(x)

        def body(*i):
            return x(*i[:ax], clamped(indices(*i), n, dtype), *i[ax + 1:])
        return te.compute(tuple(indices.shape), body, name=self.name, tag="injective")

    def reference(self, x, indices, axis):
        ax = axis % x.ndim
        grid = list(np.indices(indices.shape, sparse=True))
        grid[ax] = ref_clamped(indices, x.shape[ax])
        return x[tuple(grid)]

    def gradient(self, g, node):
        x, indices = node.inputs
        return gather_elements_grad(g, indices, axis=node.attrs["axis"],
                                    shape=tuple(static(d) for d in x.shape)), None


@register
class GatherElementsGrad(Op):
    """Zeros of ``shape`` into which each ``g[i]`` is added at ``i`` with
    ``i[axis]`` replaced by ``indices[i]`` (``gather_elements``' gradient;
    repeated positions add up). One serial pass over ``g`` (``te.extern``)
    after zeroing the output: linear in both sizes, where a gather of the
    output would be quadratic in the axis."""

    name = "gather_elements_grad"
    family = "dynamic"
    arity = 2
    dtypes = DTYPES
    grad_inputs = (1,)
    grad_output = False
    attrs = {**AXIS, **SHAPE}

    def infer_shape(self, g, indices, axis, shape):
        GatherElements.infer_shape(self, shape, indices, axis)
        if len(g) != len(indices) or not all(same_dim(a, b) for a, b in zip(g, indices)):
            raise ShapeError(f"got g of shape {shape_str(g)}, expected the indices' {shape_str(indices)}",
                             op=self.name, arg="g")
        return tuple(shape)

    def infer_dtype(self, g, indices, axis, shape):
        _check_indices(self.name, indices)
        return g

    def compute(self, g, indices, axis, shape):
        ax = normalize_axis(self.name, axis, len(shape))
        dt, n, idt = dtype_of(g), shape[ax], _index_dtype(g)
        gshape = tuple(g.shape)

        def fcompute(ins, outs):
            gb, ib = ins
            (out,) = outs
            zero = _nest(shape, lambda i: tirx.BufferStore(out, tirx.const(0, dt), list(i)), idt, "z")

            def add(i):
                at = list(i)
                at[ax] = clamped(tirx.BufferLoad(ib, list(i)), n, idt)
                return tirx.BufferStore(out, tirx.BufferLoad(out, at) + tirx.BufferLoad(gb, list(i)), at)
            return tirx.SeqStmt([zero, _nest(gshape, add, idt, "i")])

        return te.extern([tuple(shape)], [g, indices], fcompute, name=self.name, dtype=[dt], tag=self.family)

    def reference(self, g, indices, axis, shape):
        ax = axis % len(shape)
        out = np.zeros(shape, g.dtype)
        grid = list(np.broadcast_arrays(*np.indices(indices.shape, sparse=True)))
        grid[ax] = ref_clamped(indices, shape[ax])
        np.add.at(out, tuple(grid), g)
        return out

    def gradient(self, g, node):
        return gather_elements(g, node.inputs[1], axis=node.attrs["axis"]), None
