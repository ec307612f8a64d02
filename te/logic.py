"""Selection, comparisons and logic: ``minimum``, ``where``, ``less``,
``less_equal``, ``logical_not``, ``logical_and``, ``logical_or``,
``logical_xor``.

``minimum`` propagates NaN as ``maximum`` does; comparisons with NaN are false.
The logical ops take any dtype as its truth value (nonzero, NaN true: numpy's
and PyTorch's rule) and return bool; like the comparisons, they have no
gradient.
``where``'s condition is bool; its result dtype is ``promote(a, b)``.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import DTypeError
from . import nanmath
from .elementwise import Binary, Compare, Unary
from .grad import cast_like, unbroadcast
from .oprefs import op_ref
from .registry import Op, register
from .shapes import DTYPES, broadcast_index, broadcast_shapes, dtype_of, promote

logical_not = op_ref("logical_not")  # where's gradient: an op with no operator (see oprefs)


def _truth(v):
    """``v`` as a bool: nonzero, NaN included (numpy's truth value)."""
    return v if dtype_of(v) == "bool" else nanmath.nonzero(v)


def _at(t, i, shape):
    return t(*broadcast_index(i, t.shape, len(shape)))


@register
class LogicalNot(Unary):
    name = "logical_not"
    dtypes = DTYPES
    differentiable = False
    reference = staticmethod(np.logical_not)

    def infer_dtype(self, x):
        return "bool"

    def compute(self, x):
        return te.compute(x.shape, lambda *i: tirx.Not(_truth(x(*i))), name=self.name, tag="injective")


# -- binary ops ------------------------------------------------------------------------
@register
class Minimum(Binary):
    name = "minimum"
    grad_inputs = (0, 1)
    grad_output = False
    expr = staticmethod(nanmath.minimum)
    reference = staticmethod(np.minimum)

    def gradient(self, g, node):
        a, b = node.inputs
        ga = g * cast_like(a <= b, g)  # ties to ``a``, as ``maximum``
        return unbroadcast(ga, a.shape, a.dtype), unbroadcast(g - ga, b.shape, b.dtype)


@register
class Less(Compare):
    name = "less"
    expr = staticmethod(lambda a, b: a < b)
    reference = staticmethod(np.less)


@register
class LessEqual(Compare):
    name = "less_equal"
    expr = staticmethod(lambda a, b: a <= b)
    reference = staticmethod(np.less_equal)


class Logical(Binary):
    """Of the operands' truth values (numpy's: nonzero, NaN true), with numpy broadcasting."""

    dtypes = DTYPES
    differentiable = False

    def infer_dtype(self, a, b):
        return "bool"

    def compute(self, a, b):
        shape = broadcast_shapes(self.name, tuple(a.shape), tuple(b.shape))
        return te.compute(shape, lambda *i: self.expr(_truth(_at(a, i, shape)), _truth(_at(b, i, shape))),
                          name=self.name, tag="injective")


@register
class LogicalAnd(Logical):
    name = "logical_and"
    expr = staticmethod(tirx.And)
    reference = staticmethod(np.logical_and)


@register
class LogicalOr(Logical):
    name = "logical_or"
    expr = staticmethod(tirx.Or)
    reference = staticmethod(np.logical_or)


@register
class LogicalXor(Logical):
    name = "logical_xor"
    reference = staticmethod(np.logical_xor)

    @staticmethod
    def expr(a, b):
        return tirx.Or(tirx.And(a, tirx.Not(b)), tirx.And(tirx.Not(a), b))


@register
class Where(Op):
    """``a`` where ``cond`` else ``b``: ``cond`` bool, numpy broadcasting of all
    three, the result in ``promote(a, b)``."""

    name = "where"
    arity = 3
    elementwise = True
    dtypes = DTYPES
    grad_inputs = (0,)
    grad_output = False

    def infer_shape(self, cond, a, b):
        return broadcast_shapes(self.name, cond, a, b)

    def infer_dtype(self, cond, a, b):
        if cond != "bool":
            raise DTypeError(f"got condition dtype {cond}, expected bool", op=self.name, arg="cond")
        return promote(self.name, a, b)

    def compute(self, cond, a, b):
        shape = broadcast_shapes(self.name, *(tuple(t.shape) for t in (cond, a, b)))
        dt = self.infer_dtype(*(dtype_of(t) for t in (cond, a, b)))
        return te.compute(shape, lambda *i: tirx.Select(_at(cond, i, shape), _at(a, i, shape).astype(dt),
                                                        _at(b, i, shape).astype(dt)), name=self.name, tag="injective")

    def reference(self, cond, a, b):
        return np.where(cond, a, b)

    def gradient(self, g, node):
        cond, a, b = node.inputs
        ga, gb = g * cast_like(cond, g), g * cast_like(logical_not(cond), g)  # not g - ga: inf - inf is NaN
        return None, unbroadcast(ga, a.shape, a.dtype), unbroadcast(gb, b.shape, b.dtype)
