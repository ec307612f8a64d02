"""matmul (numpy semantics, batch broadcasting) and the fused ``dense``
(x @ W + b, optional relu) computed as one kernel.

Shapes: ``matmul`` takes (..., M, K) @ (..., K, N) -> (..., M, N) with the
batch dims broadcast; a 1-D left operand is a row (its M dim is dropped from
the result), a 1-D right operand a column (its N dim is dropped), as numpy
does. ``dense`` takes x (M, K), w (K, N), b (N,) -> (M, N).

Inference with a constant weight: ``pack_dense_weight`` copies w (K, N) once
into the panels ``(ceil(N / bn), K, bn)`` the CPU template reads (zeros past
column N), and ``dense_packed`` takes x (M, K), those panels and b (N,) ->
(M, N), with no pack stage in its kernel. ``bn`` is the template's panel
width, ``kiln.schedules.cpu.matmul.panel_width``.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from . import nanmath
from .grad import as_dtype, unbroadcast, wants_grad
from .oprefs import op_ref
from .registry import Op, register
from .shapes import (FLOATS, NUMERIC, broadcast_index, broadcast_shapes, dtype_of, promote, same_dim,
                     shape_str, size, static)

# matmul of transposed operands (the transpose_a/transpose_b attrs), for which ``@`` has no spelling
matmul, relu_grad = op_ref("matmul"), op_ref("relu_grad")


def _swap(shape):
    return tuple(shape[:-2]) + (shape[-1], shape[-2])


def _matmul_shapes(op: str, a, b, transpose_a=False, transpose_b=False):
    """(batch shape, M, K, N, a is 1-D, b is 1-D), validating the operands."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"got {shape_str(a)} @ {shape_str(b)}, expected operands of rank >= 1", op=op,
                         arg="shapes")
    a_vec, b_vec = len(a) == 1, len(b) == 1
    if (transpose_a and a_vec) or (transpose_b and b_vec):
        raise AttrError("a 1-D operand cannot be transposed", op=op, arg="transpose_a" if a_vec else "transpose_b")
    a2 = (1,) + tuple(a) if a_vec else (_swap(a) if transpose_a else tuple(a))
    b2 = tuple(b) + (1,) if b_vec else (_swap(b) if transpose_b else tuple(b))
    if not same_dim(a2[-1], b2[-2]):
        raise ShapeError(f"got {shape_str(a)} @ {shape_str(b)}: inner dims {static(a2[-1])} and {static(b2[-2])} "
                         "differ", op=op, arg="shapes")
    batch = broadcast_shapes(op, a2[:-2], b2[:-2])
    return batch, a2[-2], a2[-1], b2[-1], a_vec, b_vec


def matmul_expr(a, b, dt, name: str, transpose_a=False, transpose_b=False):
    """The (batched) matmul tensor expression, before dropping 1-D dims; a
    transposed operand is read with its last two indices swapped."""
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    batch, m, k, n, a_vec, b_vec = _matmul_shapes(name, a_shape, b_shape, transpose_a, transpose_b)
    nb = len(batch)
    rk = te.reduce_axis((0, k), "k")

    def body(*i):
        bi, mi, ni = i[:nb], i[nb], i[nb + 1]
        ai = ([rk] if a_vec else broadcast_index(bi, a_shape[:-2], nb) + ([rk, mi] if transpose_a else [mi, rk]))
        bj = ([rk] if b_vec else broadcast_index(bi, b_shape[:-2], nb) + ([ni, rk] if transpose_b else [rk, ni]))
        return te.sum(a(*ai).astype(dt) * b(*bj).astype(dt), axis=rk)

    return te.compute(tuple(batch) + (m, n), body, name=name, tag="matmul")


@register
class Matmul(Op):
    """numpy's matmul, optionally of an operand's transpose (its last two axes
    swapped), which gradients use instead of materializing a transpose."""

    name = "matmul"
    transposed_operands = True
    compute_bound = True
    grad_inputs = (0, 1)
    grad_output = False
    arity = 2
    family = "matmul"
    dtypes = NUMERIC
    attrs = {"transpose_a": A.Attr(A.boolean, default=False, doc="use a's last two axes swapped"),
             "transpose_b": A.Attr(A.boolean, default=False, doc="use b's last two axes swapped")}

    def infer_shape(self, a, b, transpose_a, transpose_b):
        batch, m, _, n, a_vec, b_vec = _matmul_shapes(self.name, a, b, transpose_a, transpose_b)
        return tuple(batch) + (() if a_vec else (m,)) + (() if b_vec else (n,))

    def infer_dtype(self, a, b, **attrs):
        return promote(self.name, a, b)

    def compute(self, a, b, transpose_a, transpose_b):
        dt = promote(self.name, dtype_of(a), dtype_of(b))
        a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
        if not (a_vec or b_vec):
            return matmul_expr(a, b, dt, self.name, transpose_a, transpose_b)
        full = matmul_expr(a, b, dt, "matmul_full")
        out = self.infer_shape(tuple(a.shape), tuple(b.shape), False, False)
        nb = len(full.shape) - 2

        def drop(*i):
            bi, rest = list(i[:nb]), list(i[nb:])
            mi = 0 if a_vec else rest.pop(0)
            ni = 0 if b_vec else rest.pop(0)
            return full(*bi, mi, ni)

        return te.compute(out, drop, name=self.name, tag="injective")

    def reference(self, a, b, transpose_a, transpose_b):
        return np.matmul(np.swapaxes(a, -1, -2) if transpose_a else a, np.swapaxes(b, -1, -2) if transpose_b else b)

    def flops(self, shapes, **attrs):
        batch, m, k, n, _, _ = _matmul_shapes(self.name, *shapes, attrs.get("transpose_a", False),
                                              attrs.get("transpose_b", False))
        return _gemm_flops(m, k, n, size(batch))

    def gradient(self, g, node):
        a, b = node.inputs
        if len(a.shape) == 1 or len(b.shape) == 1:
            return self._vector_gradient(g, a, b)
        ta, tb = node.attrs["transpose_a"], node.attrs["transpose_b"]
        # C = op(A) op(B): each adjoint is one more matmul with transposed operands (computed only when wanted)
        ga = gb = None
        if wants_grad(a):
            ga = matmul(g, b, transpose_b=not tb) if not ta else matmul(b, g, transpose_a=tb, transpose_b=True)
            ga = unbroadcast(ga, a.shape, a.dtype)
        if wants_grad(b):
            gb = matmul(a, g, transpose_a=not ta) if not tb else matmul(g, a, transpose_a=True, transpose_b=ta)
            gb = unbroadcast(gb, b.shape, b.dtype)
        return ga, gb

    @staticmethod
    def _vector_gradient(g, a, b):
        """1-D operands: lift them to matrices, reuse the matrix rule, drop the dims again."""
        a2 = a.reshape((1,) + tuple(a.shape)) if len(a.shape) == 1 else a
        b2 = b.reshape(tuple(b.shape) + (1,)) if len(b.shape) == 1 else b
        shape = tuple(g.shape)  # the output with the lifted dims put back: (..., m, n)
        if len(b.shape) == 1:
            shape = shape + (1,)
        if len(a.shape) == 1:
            shape = shape[:-1] + (1,) + shape[-1:]
        g2 = g.reshape(shape)
        ga = matmul(g2, b2, transpose_b=True)
        gb = matmul(a2, g2, transpose_a=True)
        return (unbroadcast(ga, a2.shape, a.dtype).reshape(a.shape),
                unbroadcast(gb, b2.shape, b.dtype).reshape(b.shape))


def _gemm_flops(m, k, n, batch=1) -> float:
    """``2 * batch * M * K * N``; 0 when a dim is symbolic."""
    total = 2 * batch * static(m) * static(k) * static(n)
    return float(total) if isinstance(total, int) else 0.0


@register
class Dense(Op):
    """``relu?(x @ w + b)`` as one kernel: the bias and relu are an epilogue the
    schedule computes where the accumulator is written back."""

    name = "dense"
    dense_layer = True
    compute_bound = True
    relu_attr = True
    fold_weight_axis = 1  # w is (K, N)
    grad_inputs = (0, 1)
    grad_output = True

    def grad_saves(self, attrs):
        return (0, 1), bool(attrs["relu"])  # the relu's mask is read from the output
    arity = 3
    family = "matmul"
    dtypes = FLOATS
    attrs = {"relu": A.Attr(A.boolean, default=False, doc="apply relu after the bias")}

    def infer_shape(self, x, w, b, relu):
        if len(x) != 2 or len(w) != 2 or len(b) != 1:
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, b {shape_str(b)}, expected (M, K), (K, N), (N,)",
                             op=self.name, arg="shapes")
        if not same_dim(x[1], w[0]) or not same_dim(w[1], b[0]):
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, b {shape_str(b)}: K or N disagree",
                             op=self.name, arg="shapes")
        return (x[0], w[1])

    def infer_dtype(self, x, w, b, relu):
        return promote(self.name, x, w, b)

    def compute(self, x, w, b, relu):
        dt = promote(self.name, dtype_of(x), dtype_of(w), dtype_of(b))
        acc = matmul_expr(x, w, dt, "dense_matmul")

        def epilogue(i, j):
            v = acc[i, j] + b[j].astype(dt)
            return nanmath.relu(v) if relu else v

        return te.compute(acc.shape, epilogue, name=self.name, tag="matmul")

    def reference(self, x, w, b, relu):
        out = x @ w + b
        return np.maximum(out, 0).astype(out.dtype) if relu else out

    def flops(self, shapes, **attrs):
        (m, k), (_, n), _ = shapes
        return _gemm_flops(m, k, n)

    def gradient(self, g, node):
        x, w, b = node.inputs
        if node.attrs["relu"]:
            g = relu_grad(g, node)
        gx = as_dtype(matmul(g, w, transpose_b=True), x.dtype) if wants_grad(x) else None
        gw = as_dtype(matmul(x, g, transpose_a=True), w.dtype) if wants_grad(w) else None
        return gx, gw, as_dtype(g.sum(axis=0), b.dtype) if wants_grad(b) else None


def _panels(n, bn: int):
    """Panels of ``bn`` columns that hold ``n`` columns (the last one zero-padded)."""
    value = static(n)
    return -(-value // bn) if isinstance(value, int) else (n + bn - 1) // bn


@register
class PackDenseWeight(Op):
    """A dense weight w (K, N) as panels (ceil(N / bn), K, bn): panel p holds
    columns ``p * bn ...``, each row of a panel contiguous, so a micro-kernel
    reads a ``bn``-wide register tile with one stream. Columns past N are 0."""

    name = "pack_dense_weight"
    differentiable = False
    dtypes = FLOATS
    attrs = {"bn": A.Attr(A.positive_int, doc="panel width (columns per panel)")}

    def infer_shape(self, w, bn):
        if len(w) != 2:
            raise ShapeError(f"got w {shape_str(w)}, expected (K, N)", op=self.name, arg="shapes")
        return (_panels(w[1], bn), w[0], bn)

    def compute(self, w, bn):
        n = w.shape[1]
        zero = tirx.const(0, w.dtype)
        return te.compute(self.infer_shape(tuple(w.shape), bn),
                          lambda p, k, j: tirx.if_then_else(p * bn + j < n, w[k, tirx.min(p * bn + j, n - 1)], zero),
                          name=self.name, tag="injective")

    def reference(self, w, bn):
        k, n = w.shape
        panels = _panels(n, bn)
        padded = np.zeros((k, panels * bn), w.dtype)
        padded[:, :n] = w
        return np.ascontiguousarray(padded.reshape(k, panels, bn).transpose(1, 0, 2))


@register
class DensePacked(Op):
    """``relu?(x @ w + b)`` with w given as ``pack_dense_weight``'s panels
    (P, K, bn); N is the bias's length, so panels padded past N are ignored."""

    name = "dense_packed"
    compute_bound = True
    relu_attr = True
    differentiable = False
    arity = 3
    family = "matmul"
    dtypes = FLOATS
    attrs = {"relu": A.Attr(A.boolean, default=False, doc="apply relu after the bias")}

    def infer_shape(self, x, w, b, relu):
        if len(x) != 2 or len(w) != 3 or len(b) != 1:
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, b {shape_str(b)}, expected (M, K), "
                             "(P, K, bn), (N,)", op=self.name, arg="shapes")
        bn = static(w[2])
        if not same_dim(x[1], w[1]) or not isinstance(bn, int) or not same_dim(w[0], _panels(b[0], bn)):
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, b {shape_str(b)}: K disagrees, or the "
                             f"panels do not hold N = {static(b[0])} columns (expected ceil(N / bn) panels of a "
                             "constant width bn)", op=self.name, arg="shapes")
        return (x[0], b[0])

    def infer_dtype(self, x, w, b, relu):
        return promote(self.name, x, w, b)

    def compute(self, x, w, b, relu):
        dt = promote(self.name, dtype_of(x), dtype_of(w), dtype_of(b))
        (m, k), (panels, _, bn) = x.shape, w.shape
        rk = te.reduce_axis((0, k), "k")
        # (M, panel, lane): the template's loops over the panels, with no layout to undo
        acc = te.compute((m, panels, bn), lambda i, p, j: te.sum(x[i, rk].astype(dt) * w[p, rk, j].astype(dt), axis=rk),
                         name="dense_packed_matmul", tag="matmul")

        def epilogue(i, j):
            v = acc[i, j // bn, j % bn] + b[j].astype(dt)
            return nanmath.relu(v) if relu else v

        return te.compute((m, b.shape[0]), epilogue, name=self.name, tag="matmul")

    def reference(self, x, w, b, relu):
        panels, k, bn = w.shape
        out = x @ w.transpose(1, 0, 2).reshape(k, panels * bn)[:, :b.shape[0]] + b
        return np.maximum(out, 0).astype(out.dtype) if relu else out

    def flops(self, shapes, **attrs):
        (m, k), _, (n,) = shapes
        return _gemm_flops(m, k, n)
