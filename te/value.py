"""Operator sugar shared by every kind of kiln value (the autograd Tensor, the
exporter's traced values): each Python operator or method is one registered op,
applied through ``kiln.te.call``. Subclasses provide ``shape`` and ``ndim``."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import AttrError, ShapeError
from .registry import call


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

    def _binary(self, other, name: str, reverse: bool = False):
        if isinstance(other, (ValueOps, np.ndarray)):
            a, b = (other, self) if reverse else (self, other)
            return call(name, a, b)
        if isinstance(other, numbers.Number):
            if reverse and name in ("subtract", "divide", "greater", "greater_equal"):
                return call("r" + name + "_scalar", self, scalar=other)
            return call(name + "_scalar", self, scalar=other)
        return NotImplemented

    __add__ = lambda self, o: self._binary(o, "add")  # noqa: E731
    __radd__ = __add__
    __sub__ = lambda self, o: self._binary(o, "subtract")  # noqa: E731
    __rsub__ = lambda self, o: self._binary(o, "subtract", reverse=True)  # noqa: E731
    __mul__ = lambda self, o: self._binary(o, "multiply")  # noqa: E731
    __rmul__ = __mul__
    __truediv__ = lambda self, o: self._binary(o, "divide")  # noqa: E731
    __rtruediv__ = lambda self, o: self._binary(o, "divide", reverse=True)  # noqa: E731
    __pow__ = lambda self, o: self._binary(o, "power")  # noqa: E731
    __eq__ = lambda self, o: self._binary(o, "equal")  # noqa: E731

    def __ne__(self, other):
        # without this, Python's default negates the truth value of ``==``'s result
        eq = self._binary(other, "equal")
        return eq if eq is NotImplemented else call("equal_scalar", eq, scalar=0)

    __ge__ = lambda self, o: self._binary(o, "greater_equal")  # noqa: E731
    __gt__ = lambda self, o: self._binary(o, "greater")  # noqa: E731
    __le__ = lambda self, o: self._binary(o, "greater_equal", reverse=True)  # noqa: E731
    __lt__ = lambda self, o: self._binary(o, "greater", reverse=True)  # noqa: E731
    __neg__ = lambda self: call("negate", self)  # noqa: E731
    __matmul__ = lambda self, o: call("matmul", self, o)  # noqa: E731
    __rmatmul__ = lambda self, o: call("matmul", o, self)  # noqa: E731

    def __getitem__(self, index):
        return call("getitem", self, index=index)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return call("reshape", self, shape=tuple(shape))

    def transpose(self, axes=None, dim1=None):
        """Swap two axes, as needle and PyTorch do: ``x.transpose()`` swaps the
        last two, ``x.transpose((i, j))`` (needle) and ``x.transpose(i, j)``
        (PyTorch) swap axes i and j. ``permute`` takes a full permutation."""
        return call("transpose", self, axes=_swap(len(self.shape), axes, dim1))

    def permute(self, *dims):
        """Reorder all axes: ``x.permute(1, 0, 2)`` or ``x.permute((1, 0, 2))``."""
        return call("transpose", self, axes=tuple(dims[0] if len(dims) == 1 else dims))

    @property
    def T(self):
        """The transpose of a 2-D value (other ranks: ``transpose(i, j)`` or ``permute``)."""
        if len(self.shape) != 2:
            raise ShapeError(f"got a {len(self.shape)}-D value, expected 2-D; use transpose(i, j) or permute(...)",
                             op="transpose", arg="T")
        return call("transpose", self, axes=(1, 0))

    def broadcast_to(self, shape):
        return call("broadcast_to", self, shape=tuple(shape))

    # Reductions take numpy's ``axis``/``keepdims``, needle's ``axes`` and
    # PyTorch's ``dim``/``keepdim``, one of each.
    def sum(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return call("sum", self, **_reduction("sum", axis, axes, dim, keepdims, keepdim))

    def mean(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return call("mean", self, **_reduction("mean", axis, axes, dim, keepdims, keepdim))

    def max(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        return call("max", self, **_reduction("max", axis, axes, dim, keepdims, keepdim))

    def logsumexp(self, axis=None, keepdims=False, *, axes=None, dim=None, keepdim=None):
        """``log(sum(exp(x)))`` over the axes, computed without overflow."""
        return call("logsumexp", self, **_reduction("logsumexp", axis, axes, dim, keepdims, keepdim))

    def softmax(self, axis=-1, *, dim=None):
        return call("softmax", self, axis=_one_axis("softmax", axis, dim))

    def log_softmax(self, axis=-1, *, dim=None):
        return call("log_softmax", self, axis=_one_axis("log_softmax", axis, dim))

    def flip(self, axis=None, *, axes=None, dims=None):
        """Reverse the order of elements along the axes (all of them by default)."""
        return call("flip", self, axis=pick_alias("flip", axis=axis, axes=axes, dims=dims))

    def astype(self, dtype):
        return call("cast", self, dtype=dtype)

    def masked_select(self, mask):
        """The elements where ``mask`` is true (1-D; its length depends on the data)."""
        return call("masked_select", self, mask)

    nonzero = lambda self: call("nonzero", self)  # noqa: E731
    unique = lambda self: call("unique", self)  # noqa: E731
    abs = __abs__ = lambda self: call("abs", self)  # noqa: E731
    exp = lambda self: call("exp", self)  # noqa: E731
    log = lambda self: call("log", self)  # noqa: E731
    relu = lambda self: call("relu", self)  # noqa: E731
    tanh = lambda self: call("tanh", self)  # noqa: E731
    sigmoid = lambda self: call("sigmoid", self)  # noqa: E731
    sqrt = lambda self: call("sqrt", self)  # noqa: E731
