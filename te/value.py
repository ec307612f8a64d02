"""Operator sugar shared by every kind of kiln value (the autograd Tensor, the
exporter's traced values): each Python operator or method is one registered op,
applied through ``kiln.te.call``. Subclasses provide ``shape`` and ``ndim``."""
from __future__ import annotations

import numbers

import numpy as np

from .registry import call


class ValueOps:
    """``a + b``, ``a @ b``, ``a[1:, ::2]``, ``a.sum(axis=1)``... as registered ops."""

    __array_priority__ = 1000  # numpy defers ``ndarray + value`` to the value
    __hash__ = object.__hash__

    def _binary(self, other, name: str, reverse: bool = False):
        if isinstance(other, (ValueOps, np.ndarray)):
            a, b = (other, self) if reverse else (self, other)
            return call(name, a, b)
        if isinstance(other, numbers.Number):
            if reverse and name in ("subtract", "divide"):
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
    __ge__ = lambda self, o: self._binary(o, "greater_equal")  # noqa: E731
    __gt__ = lambda self, o: self._binary(o, "greater")  # noqa: E731
    __neg__ = lambda self: call("negate", self)  # noqa: E731
    __matmul__ = lambda self, o: call("matmul", self, o)  # noqa: E731
    __rmatmul__ = lambda self, o: call("matmul", o, self)  # noqa: E731

    def __getitem__(self, index):
        return call("getitem", self, index=index)

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return call("reshape", self, shape=tuple(shape))

    def transpose(self, axes=None):
        return call("transpose", self, axes=axes)

    def permute(self, *axes):
        return call("transpose", self, axes=tuple(axes[0] if len(axes) == 1 else axes))

    def broadcast_to(self, shape):
        return call("broadcast_to", self, shape=tuple(shape))

    def sum(self, axis=None, keepdims=False):
        return call("sum", self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return call("mean", self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return call("max", self, axis=axis, keepdims=keepdims)

    def astype(self, dtype):
        return call("cast", self, dtype=dtype)

    def masked_select(self, mask):
        """The elements where ``mask`` is true (1-D; its length depends on the data)."""
        return call("masked_select", self, mask)

    nonzero = lambda self: call("nonzero", self)  # noqa: E731
    unique = lambda self: call("unique", self)  # noqa: E731
    exp = lambda self: call("exp", self)  # noqa: E731
    log = lambda self: call("log", self)  # noqa: E731
    relu = lambda self: call("relu", self)  # noqa: E731
    tanh = lambda self: call("tanh", self)  # noqa: E731
    sigmoid = lambda self: call("sigmoid", self)  # noqa: E731
    sqrt = lambda self: call("sqrt", self)  # noqa: E731
