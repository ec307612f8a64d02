"""Scalar variants of the binary elementwise ops: the same math with a Python
number as the second (or, reversed, the first) operand, ``add_scalar``,
``rdivide_scalar``... The scalar follows numpy's NEP 50 promotion."""
from __future__ import annotations

from types import MappingProxyType

import numpy as np
from tvm import te, tirx

from ..errors import AttrError
from . import attrs as A
from .elementwise import Add, Binary, Divide, Equal, Greater, GreaterEqual, Maximum, Multiply, Power, Subtract
from .grad import cast_like
from .registry import Op, get_op, register
from .shapes import dtype_of, result_type


class ScalarOp(Op):
    """``y = f(x, scalar)``: the math of the binary op ``binary``, with a Python
    number as the second (or, reversed, the first) operand. The scalar follows
    numpy's NEP 50 promotion: it does not widen the array's dtype."""

    elementwise = True
    attrs = {"scalar": A.Attr(A.scalar, doc="the Python number operand")}
    binary: str = ""
    reverse: bool = False
    inplace = MappingProxyType({0: 0})

    @property
    def _bin(self) -> Binary:
        return get_op(self.binary)

    def _work(self, x, scalar) -> str:
        try:
            return result_type(np.dtype(x), scalar)
        except OverflowError:
            raise AttrError(f"got {scalar!r}, which does not fit in {x}", op=self.name, arg="scalar") from None

    def infer_shape(self, x, scalar):
        return x

    def infer_dtype(self, x, scalar):
        work = self._work(x, scalar)
        return self._bin.infer_dtype(work, work)

    def compute(self, x, scalar):
        out = self.infer_dtype(dtype_of(x), scalar)
        work = self._work(dtype_of(x), scalar)
        work = self._bin.work_dtype(out, work, work)
        c = tirx.const(scalar, work)
        if self.reverse:
            body = lambda *i: self._bin.expr(c, x(*i).astype(work))  # noqa: E731
        else:
            body = lambda *i: self._bin.expr(x(*i).astype(work), c)  # noqa: E731
        return te.compute(x.shape, body, name=self.name, tag="injective")

    def reference(self, x, scalar):
        return self._bin.reference(scalar, x) if self.reverse else self._bin.reference(x, scalar)


def _scalar_op(binary: type[Binary], grad=None, *, reverse=False, reads=((), False)):
    """Declare ``<binary>_scalar`` (or ``r<binary>_scalar``, the scalar first);
    ``reads``: (the inputs, whether the output) its gradient reads."""
    name = ("r" if reverse else "") + binary.name + "_scalar"
    body = {"name": name, "binary": binary.name, "reverse": reverse, "dtypes": binary.dtypes,
            "differentiable": grad is not None, "grad_inputs": reads[0], "grad_output": reads[1]}
    if grad is not None:
        body["gradient"] = grad
    return register(type(binary.__name__ + ("R" if reverse else "") + "Scalar", (ScalarOp,), body))


def _same_grad(self, g, node):
    return (g,)


def _scalar_attr(node):
    return node.attrs["scalar"]


AddScalar = _scalar_op(Add, _same_grad)
SubtractScalar = _scalar_op(Subtract, _same_grad)
RSubtractScalar = _scalar_op(Subtract, lambda self, g, node: (-g,), reverse=True)
MultiplyScalar = _scalar_op(Multiply, lambda self, g, node: (g * _scalar_attr(node),))
DivideScalar = _scalar_op(Divide, lambda self, g, node: (g / _scalar_attr(node),))
RDivideScalar = _scalar_op(Divide, lambda self, g, node: (-(g * node / node.inputs[0]),), reverse=True,
                           reads=((0,), True))
PowerScalar = _scalar_op(Power, lambda self, g, node: (
    g * (node.inputs[0] ** (_scalar_attr(node) - 1) * _scalar_attr(node)),), reads=((0,), False))
MaximumScalar = _scalar_op(Maximum, lambda self, g, node: (
    g * cast_like(node.inputs[0] >= _scalar_attr(node), g),), reads=((0,), False))
EqualScalar = _scalar_op(Equal)
GreaterEqualScalar = _scalar_op(GreaterEqual)
GreaterScalar = _scalar_op(Greater)
# ``scalar >= x`` and ``scalar > x``: what ``x <= scalar`` and ``x < scalar`` are
RGreaterEqualScalar = _scalar_op(GreaterEqual, reverse=True)
RGreaterScalar = _scalar_op(Greater, reverse=True)
