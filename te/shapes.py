"""Shapes, dims and dtypes: the rules every op's ``infer_shape``/``infer_dtype`` use.

A dim is an ``int`` or a symbolic TVM expression (``tvm.tirx.Var``), so one
compiled kernel can serve every size of that dim (see ``sym``).
"""
from __future__ import annotations

import numbers
from typing import Iterable, Sequence

import numpy as np
from tvm import tirx

from ..errors import DTypeError, ShapeError

Dim = "int | tirx.Expr"
Shape = tuple

#: dtypes kiln kernels accept and produce.
DTYPES = ("float32", "float64", "int32", "int64", "bool")
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
NUMERIC = FLOATS + INTS


def sym(name: str) -> tirx.Var:
    """A symbolic dim, e.g. ``kiln.te.sym("n")`` for a batch of any size."""
    return tirx.Var(name, "int32")


class Bounded:
    """A dim known only when the op runs (a data-dependent length), with bounds:
    ``Bounded(0, n)`` is what ``masked_select`` of ``n`` elements returns."""

    __slots__ = ("low", "high")

    def __init__(self, low: int, high: int):
        self.low, self.high = int(low), int(high)

    def __eq__(self, other) -> bool:
        return isinstance(other, Bounded) and (self.low, self.high) == (other.low, other.high)

    def __hash__(self) -> int:
        return hash((self.low, self.high))

    def __repr__(self) -> str:
        return f"?[{self.low}..{self.high}]"


def upper_bounds(shape: Sequence) -> tuple:
    """``shape`` with each ``Bounded`` dim at its maximum (the storage a kernel writes)."""
    return tuple(d.high if isinstance(d, Bounded) else d for d in shape)


def is_static(dim) -> bool:
    return isinstance(dim, numbers.Integral) or isinstance(dim, tirx.IntImm)


def static(dim):
    """``dim`` as a Python int when it is constant, else unchanged."""
    if isinstance(dim, tirx.IntImm):
        return int(dim.value)
    if isinstance(dim, numbers.Integral):
        return int(dim)
    return dim


#: the largest dim, and the most elements of one tensor (past 2**31 - 1 elements a kernel indexes with int64:
#: ``kiln.runtime.lower``).
INT64_MAX = 2**63 - 1


def canonical(shape: Iterable, op: str = "?", arg: str = "shape") -> Shape:
    """A tuple of dims (ints >= 0, numpy ints accepted, or symbolic expressions)
    whose static dims multiply to a count that fits int64."""
    try:
        raw = tuple(shape)
    except TypeError:
        raise ShapeError(f"got {shape!r}, expected a sequence of dims", op=op, arg=arg) from None
    dims = tuple(static(d) for d in raw)
    for k, (r, d) in enumerate(zip(raw, dims)):
        if isinstance(r, (bool, np.bool_)) or not isinstance(d, (int, tirx.Expr)):
            raise ShapeError(f"got {shape!r}, expected ints or symbolic dims", op=op, arg=arg)
        if isinstance(d, int) and not 0 <= d <= INT64_MAX:
            raise ShapeError(f"got {shape!r}: dim {k} is {d}, expected 0 <= dim <= 2**63 - 1", op=op, arg=arg)
    total = 1
    for d in dims:
        total *= d if isinstance(d, int) else 1
    if total > INT64_MAX:
        raise ShapeError(f"got {shape!r}: {total} elements, more than 2**63 - 1", op=op, arg=arg)
    return dims


def same_dim(a, b) -> bool:
    if is_static(a) and is_static(b):
        return static(a) == static(b)
    if is_static(a) or is_static(b):
        return False
    return a.same_as(b) or str(a) == str(b)


def index_dim(dim):
    """``dim`` for index arithmetic (``floormod(i, dim)``): a zero dim as 1. A
    tensor with a zero dim is never indexed, but TVM folds ``i % 0`` at once."""
    return 1 if is_static(dim) and static(dim) == 0 else dim


def size(shape: Sequence):
    """Product of dims (an int when all are static)."""
    total = 1
    for d in shape:
        total = total * static(d)
    return total


def shape_str(shape: Sequence) -> str:
    dims = [repr(d) if isinstance(d, Bounded) else str(static(d)) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """numpy broadcasting. Two symbolic dims broadcast only when identical; a
    symbolic dim against 1 keeps the symbolic dim."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dim = 1
        for s in shapes:
            j = i - (ndim - len(s))
            if j < 0:
                continue
            d = static(s[j])
            if is_static(d) and d == 1:
                continue
            if is_static(dim) and dim == 1:
                dim = d
            elif not same_dim(dim, d):
                given = " and ".join(shape_str(x) for x in shapes)
                raise ShapeError(f"cannot broadcast {given}", op=op, arg="shapes")
        out.append(dim)
    return tuple(out)


def broadcast_index(indices: Sequence, in_shape: Shape, out_ndim: int) -> list:
    """Index into an input of ``in_shape`` from output ``indices`` (numpy broadcasting)."""
    lead = out_ndim - len(in_shape)
    return [0 if is_static(d) and static(d) == 1 else indices[lead + k] for k, d in enumerate(in_shape)]


def normalize_axes(op: str, axes, ndim: int, arg: str = "axis") -> tuple[int, ...]:
    """Axes made non-negative and sorted; None means all axes."""
    if axes is None:
        return tuple(range(ndim))
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for an input of rank {ndim}", op=op, arg=arg)
        a = a % ndim
        if a in out:
            raise ShapeError(f"axis {a} is repeated in {tuple(axes)}", op=op, arg=arg)
        out.append(a)
    return tuple(sorted(out))


def normalize_axis(op: str, axis: int, ndim: int, arg: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for an input of rank {ndim}", op=op, arg=arg)
    return axis % ndim


def check_dtype(op: str, dtype: str, allowed: Sequence[str], arg: str = "dtype") -> str:
    if dtype not in allowed:
        raise DTypeError(f"got {dtype}, expected one of {', '.join(allowed)}", op=op, arg=arg)
    return dtype


def result_type(*dtypes_or_scalars) -> str:
    """numpy's promotion (NEP 50: a Python scalar does not widen an array's dtype).

    Python ints are treated as 64-bit, never as unsigned: kiln has no unsigned dtypes.
    """
    args = [a if isinstance(a, (bool, int, float)) else np.dtype(str(a)) for a in dtypes_or_scalars]
    return str(np.result_type(*args))


def promote(op: str, *dtypes: str, allowed: Sequence[str] | None = None) -> str:
    """The dtype an op of several inputs computes in and returns: numpy's
    ``result_type`` of its inputs' dtypes. This is the one promotion rule of
    kiln's multi-input ops (binary elementwise ops, comparisons' operands,
    matmul, dense, conv2d, power, stack/concatenate). ``allowed``: the result
    dtypes the op can compute; another raises DTypeError.
    """
    out = result_type(*dtypes)
    if allowed is not None and out not in allowed:
        raise DTypeError(f"got {', '.join(dtypes)}, which promote to {out}; expected a result in "
                         f"{', '.join(allowed)} (cast an input)", op=op, arg="dtypes")
    return out


def dtype_of(value) -> str:
    """The dtype of a TVM tensor or expression, as a numpy-style name."""
    dtype = getattr(value, "dtype", None)
    return str(dtype if dtype is not None else value.ty)


def float_of(dtype: str) -> str:
    """The floating dtype numpy computes ``exp``/``sqrt``/``/`` of ``dtype`` in."""
    return dtype if dtype in FLOATS else "float64"
