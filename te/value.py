"""Operator sugar shared by every kind of kiln value (the autograd Tensor, the
exporter's traced values, the test suite's evaluator): each Python operator or
method is one registered op, applied through a checked reference
(``oprefs.op_ref``), so gradients can be written as arithmetic. Subclasses
provide ``shape`` and ``ndim``."""
from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from ..errors import AttrError, ShapeError
from .oprefs import OpRef, op_ref


class _Binary(NamedTuple):
    """A binary op's references: for two values, for a number second, and for a
    number first (None where the operator never puts the number first)."""

    values: OpRef
    scalar: OpRef
    rscalar: OpRef | None


def _binary_op(name: str, reversible: bool) -> _Binary:
    rscalar = op_ref("r" + name + "_scalar") if reversible else None
    return _Binary(op_ref(name), op_ref(name + "_scalar"), rscalar)


_ADD, _MULTIPLY = _binary_op("add", False), _binary_op("multiply", False)
_SUBTRACT, _DIVIDE = _binary_op("subtract", True), _binary_op("divide", True)
_POWER, _EQUAL = _binary_op("power", False), _binary_op("equal", False)
_GREATER, _GREATER_EQUAL = _binary_op("greater", True), _binary_op("greater_equal", True)
_matmul, _getitem, _reshape = (op_ref(n) for n in ("matmul", "getitem", "reshape"))
_transpose, _broadcast_to, _cast, _flip = (op_ref(n) for n in ("transpose", "broadcast_to", "cast", "flip"))
_sum, _mean, _max, _logsumexp = (op_ref(n) for n in ("sum", "mean", "max", "logsumexp"))
_softmax, _log_softmax, _masked_select = (op_ref(n) for n in ("softmax", "log_softmax", "masked_select"))


def _method(name: str):
    """A method that applies the op ``name`` to the value alone."""
    ref = op_ref(name)
    return lambda self: ref(self)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _swap(ndim: int, axes, dim1) -> tuple:
    """The permutation that swaps two axes: the last two when ``axes`` is None,
    else ``axes`` as a pair, or ``(axes, dim1)`` given as two ints."""
    pair = (-2, -1) if axes is None and dim1 is None else (axes, dim1) if dim1 is not None else axes
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(map(_is_int, pair))):
        raise AttrError(f"got {pair!r}, expected two axes to swap (transpose(i, j) or transpose((i, j))); "
                        "permute(...) takes a full permutation", op="transpose", arg="axes")
    if not all(-ndim <= a < ndim for a in pair):
        raise ShapeError(f"got axes {tuple(pair)} for a {ndim}-D value, expected axes in [{-ndim}, {ndim})",
                         op="transpose", arg="axes")
    perm = list(range(ndim))
    i, j = (a % ndim for a in pair)
    perm[i], perm[j] = perm[j], perm[i]
    return tuple(perm)


def pick_alias(op: str, **aliases):
    """The one value among ``aliases`` that is not None (None if none is)."""
    given = {k: v for k, v in aliases.items() if v is not None}
    if len(given) > 1:
        raise AttrError(f"got {' and '.join(given)}, which mean the same: pass one", op=op, arg=next(iter(given)))
    return next(iter(given.values()), None)


def _reduction(op: str, axis, axes, dim, keepdims, keepdim) -> dict:
    """A reduction's attrs from numpy's, needle's or PyTorch's argument names."""
    keep = keepdims if keepdim is None else pick_alias(op, keepdims=keepdims or None, keepdim=keepdim)
    return {"axis": pick_alias(op, axis=axis, axes=axes, dim=dim), "keepdims": keep}


def _one_axis(op: str, axis, dim):
    """numpy's ``axis`` (default -1) or PyTorch's ``dim``."""
    return axis if dim is None else pick_alias(op, axis=None if axis == -1 else axis, dim=dim)


class ValueOps:
    """``a + b``, ``a @ b``, ``a[1:, ::2]``, ``a.sum(axis=1)``... as registered ops."""

    __array_priority__ = 1000  # numpy defers ``ndarray + value`` to the value
    __hash__ = object.__hash__

    def _binary(self, other, op: _Binary, reverse: bool = False):
        kind = type(self)
        if type(other) is kind and hasattr(kind, "_kiln_apply"):  # one backend: ``call`` would pick it
            return kind._kiln_apply(op.values.op, (other, self) if reverse else (self, other), {})
        if isinstance(other, (ValueOps, np.ndarray)):
            a, b = (other, self) if reverse else (self, other)
            return op.values(a, b)
        if isinstance(other, numbers.Number):
            return (op.rscalar if reverse else op.scalar)(self, scalar=other)
        return NotImplemented

    __add__ = lambda self, o: self._binary(o, _ADD)  # noqa: E731
    __radd__ = __add__
    __sub__ = lambda self, o: self._binary(o, _SUBTRACT)  # noqa: E731
    __rsub__ = lambda self, o: self._binary(o, _SUBTRACT, reverse=True)  # noqa: E731
    __mul__ = lambda self, o: self._binary(o, _MULTIPLY)  # noqa: E731
    __rmul__ = __mul__
    __truediv__ = lambda self, o: self._binary(o, _DIVIDE)  # noqa: E731
    __rtruediv__ = lambda self, o: self._binary(o, _DIVIDE, reverse=True)  # noqa: E731
    __pow__ = lambda self, o: self._binary(o, _POWER)  # noqa: E731
    __eq__ = lambda self, o: self._binary(o, _EQUAL)  # noqa: E731

    def __ne__(self, other):
        # without this, Python's default negates the truth value of ``==``'s result
        eq = self._binary(other, _EQUAL)
        return eq if eq is NotImplemented else _EQUAL.scalar(eq, scalar=0)

    __ge__ = lambda self, o: self._binary(o, _GREATER_EQUAL)  # noqa: E731
    __gt__ = lambda self, o: self._binary(o, _GREATER)  # noqa: E731
    __le__ = lambda self, o: self._binary(o, _GREATER_EQUAL, reverse=True)  # noqa: E731
    __lt__ = lambda self, o: self._binary(o, _GREATER, reverse=True)  # noqa: E731
    __neg__ = _method("negate")
    __matmul__ = lambda self, o: _matmul(self, o)  # noqa: E731
    __rmatmul__ = lambda self, o: _matmul(o, self)  # noqa: E731

    def __getitem__(self, index):
        return _getitem(self, index=index)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _reshape(self, shape=tuple(shape))

    def transpose(self, axes=None, dim1=None):
        """Swap two axes, as needle and PyTorch do: ``x.transpose()`` swaps the
        last two, ``x.transpose((i, j))`` (needle) and ``x.transpose(i, j)``
        (PyTorch) swap axes i and j. ``permute`` takes a full permutation."""
        return _transpose(self, axes=_swap(len(self.shape), axes, dim1))

    def permute(self, *dims):
        """Reorder all axes: ``x.permute(1, 0, 2)`` or ``x.permute((1, 0, 2))``."""
        return _transpose(self, axes=tuple(dims[0] if len(dims) == 1 else dims))

    @property
    def T(self):
        """The transpose of a 2-D value (other ranks: ``transpose(i, j)`` or ``permute``)."""
        if len(self.shape) != 2:
            raise ShapeError(f"got a {len(self.shape)}-D value, expected 2-D; use transpose(i, j) or permute(...)",
                             op="transpose", arg="T")
        return _transpose(self, axes=(1, 0))

    def broadcast_to(self, shape):
        return _broadcast_to(self, shape=tuple(shape))

    # Reductions take numpy's ``axis``/``keepdims``, needle's ``axes`` and
    # PyTorch's ``dim``/``keepdim``, one of each.
    def sum(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return _sum(self, **_reduction("sum", axis, axes, dim, keepdims, keepdim))

    def mean(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return _mean(self, **_reduction("mean", axis, axes, dim, keepdims, keepdim))

    def max(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return _max(self, **_reduction("max", axis, axes, dim, keepdims, keepdim))

    def logsumexp(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        """``log(sum(exp(x)))`` over the axes, computed without overflow."""
        return _logsumexp(self, **_reduction("logsumexp", axis, axes, dim, keepdims, keepdim))

    def softmax(self, axis=-1, *, dim=None):
        return _softmax(self, axis=_one_axis("softmax", axis, dim))

    def log_softmax(self, axis=-1, *, dim=None):
        return _log_softmax(self, axis=_one_axis("log_softmax", axis, dim))

    def flip(self, axis=None, *, axes=None, dims=None):
        """Reverse the order of elements along the axes (all of them by default)."""
        return _flip(self, axis=pick_alias("flip", axis=axis, axes=axes, dims=dims))

    def astype(self, dtype):
        return _cast(self, dtype=dtype)

    def masked_select(self, mask):
        """The elements where ``mask`` is true (1-D; its length depends on the data)."""
        return _masked_select(self, mask)

    nonzero, unique = _method("nonzero"), _method("unique")
    abs = __abs__ = _method("abs")
    exp, log, sqrt = _method("exp"), _method("log"), _method("sqrt")
    relu, tanh, sigmoid = _method("relu"), _method("tanh"), _method("sigmoid")
