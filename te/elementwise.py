"""Elementwise ops: unary math, binary ops with numpy broadcasting, comparisons,
and ``cast`` (the scalar variants are in ``scalar_ops``).

dtypes follow numpy: ``exp`` of an int32 array is float64, ``divide`` is true
division, comparisons return bool, and a Python scalar does not widen an
array's dtype (NEP 50).
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np
from tvm import te, tirx

from ..errors import AttrError
from . import attrs as A
from . import fastmath, nanmath
from .grad import cast_like, unbroadcast
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, NUMERIC, broadcast_index, broadcast_shapes, dtype_of, float_of, promote, size

sign = op_ref("sign")  # abs's gradient: an op with no operator (see oprefs)
relu_grad = op_ref("relu_grad")


def _map(x, fn, name, dtype):
    return te.compute(x.shape, lambda *i: fn(x(*i).astype(dtype)), name=name, tag="injective")


class Unary(Op):
    """``y = f(x)``; ``floating`` ops compute in float (int inputs give float64)."""

    elementwise = True
    dtypes = NUMERIC
    floating = False
    inplace = MappingProxyType({0: 0})

    def infer_shape(self, x):
        return x

    def infer_dtype(self, x):
        return float_of(x) if self.floating else x

    def compute(self, x):
        return _map(x, self.expr, self.name, self.infer_dtype(dtype_of(x)))

    def expr(self, v):
        raise NotImplementedError


@register
class Negate(Unary):
    name = "negate"
    grad_inputs = ()
    grad_output = False
    expr = staticmethod(lambda v: -v)
    reference = staticmethod(np.negative)

    def gradient(self, g, node):
        return (-g,)


@register
class Abs(Unary):
    name = "abs"
    grad_inputs = (0,)
    grad_output = False
    expr = staticmethod(tirx.abs)
    reference = staticmethod(np.abs)

    def gradient(self, g, node):
        return (g * sign(node.inputs[0]),)


@register
class Sign(Unary):
    name = "sign"
    differentiable = False
    reference = staticmethod(np.sign)

    def expr(self, v):
        zero, one = tirx.const(0, dtype_of(v)), tirx.const(1, dtype_of(v))
        return tirx.Select(v > zero, one, tirx.Select(v < zero, -one, v))  # v: 0 or NaN, kept


@register
class Relu(Unary):
    """``max(x, 0)``; NaN stays NaN (numpy, PyTorch). Its gradient at NaN is 0,
    where PyTorch passes the incoming gradient through: the loss is NaN either way."""

    name = "relu"
    grad_inputs = ()
    grad_output = True  # y > 0 exactly where x > 0: the output alone masks the gradient
    expr = staticmethod(nanmath.relu)

    def reference(self, x):
        return np.maximum(x, np.zeros((), x.dtype))

    def gradient(self, g, node):
        return (relu_grad(g, node),)


@register
class Exp(Unary):
    name = "exp"
    grad_inputs = ()
    grad_output = True
    floating = True
    expr = staticmethod(fastmath.exp)
    reference = staticmethod(np.exp)

    def gradient(self, g, node):
        return (g * node,)


@register
class Log(Unary):
    name = "log"
    grad_inputs = (0,)
    grad_output = False
    floating = True
    expr = staticmethod(tirx.log)
    reference = staticmethod(np.log)

    def gradient(self, g, node):
        return (g / node.inputs[0],)


@register
class Sqrt(Unary):
    name = "sqrt"
    grad_inputs = ()
    grad_output = True
    floating = True
    expr = staticmethod(tirx.sqrt)
    reference = staticmethod(np.sqrt)

    def gradient(self, g, node):
        return (g / (node * 2.0),)


@register
class Tanh(Unary):
    name = "tanh"
    grad_inputs = ()
    grad_output = True
    floating = True
    expr = staticmethod(fastmath.tanh)
    reference = staticmethod(np.tanh)

    def gradient(self, g, node):
        return (g * (1.0 - node * node),)


@register
class Sigmoid(Unary):
    name = "sigmoid"
    grad_inputs = ()
    grad_output = True
    floating = True

    expr = staticmethod(fastmath.sigmoid)

    def reference(self, x):
        x = x.astype(float_of(str(x.dtype)))
        return 1 / (1 + np.exp(-x))

    def gradient(self, g, node):
        return (g * (node * (1.0 - node)),)


@register
class Cast(Op):
    elementwise = True
    name = "cast"
    grad_inputs = ()
    grad_output = False
    attrs = {"dtype": A.Attr(A.dtype_name, doc="the output dtype")}

    def infer_shape(self, x, dtype):
        return x

    def infer_dtype(self, x, dtype):
        if dtype not in self.dtypes:
            raise AttrError(f"got {dtype}, expected one of {', '.join(self.dtypes)}", op=self.name, arg="dtype")
        return dtype

    def compute(self, x, dtype):
        if dtype == "bool":
            return te.compute(x.shape, lambda *i: nanmath.nonzero(x(*i)), name=self.name, tag="injective")
        return _map(x, lambda v: v, self.name, dtype)

    def reference(self, x, dtype):
        return x.astype(dtype)

    def gradient(self, g, node):
        x = node.inputs[0]
        return (g.astype(x.dtype) if x.dtype in FLOATS else None,)


# -- binary ops with numpy broadcasting ---------------------------------------------
class Binary(Op):
    elementwise = True
    arity = 2
    dtypes = NUMERIC
    inplace = MappingProxyType({0: 0})  # into ``a`` when it has the output's shape

    def infer_shape(self, a, b):
        return broadcast_shapes(self.name, a, b)

    def infer_dtype(self, a, b):
        return promote(self.name, a, b)

    def compute(self, a, b):
        shape = broadcast_shapes(self.name, tuple(a.shape), tuple(b.shape))
        dt = self.infer_dtype(dtype_of(a), dtype_of(b))
        work = self.work_dtype(dt, dtype_of(a), dtype_of(b))

        def body(*i):
            va = a(*broadcast_index(i, a.shape, len(shape))).astype(work)
            vb = b(*broadcast_index(i, b.shape, len(shape))).astype(work)
            return self.expr(va, vb)

        return te.compute(shape, body, name=self.name, tag="injective")

    def work_dtype(self, out, a, b):
        return out

    def flops(self, shapes, **attrs):
        return float(size(broadcast_shapes(self.name, *shapes))) if all(
            isinstance(size(s), int) for s in shapes) else 0.0


@register
class Add(Binary):
    name = "add"
    commutative = True
    sums_operands = True
    affine_operands = (0, 1)
    grad_inputs = ()
    grad_output = False
    expr = staticmethod(lambda a, b: a + b)
    reference = staticmethod(np.add)

    def gradient(self, g, node):
        a, b = node.inputs
        return unbroadcast(g, a.shape, a.dtype), unbroadcast(g, b.shape, b.dtype)


@register
class ReluGrad(Binary):
    """``relu_grad(g, y)``: ``g`` where ``y > 0``, else 0 — relu's gradient
    from its output in one pass (PyTorch's ``threshold_backward``; a
    multiply by the mask would need three, and turn an infinite ``g`` into
    NaN where the mask is 0)."""

    name = "relu_grad"
    grad_inputs = (1,)
    grad_output = False
    dtypes = FLOATS

    @staticmethod
    def expr(g, y):
        return tirx.Select(y > tirx.const(0, dtype_of(y)), g, tirx.const(0, dtype_of(g)))

    @staticmethod
    def reference(g, y):
        dt = np.result_type(g, y)
        return np.where(y > 0, g, 0).astype(dt)

    def gradient(self, gg, node):
        g, y = node.inputs
        return unbroadcast(relu_grad(gg, y), g.shape, g.dtype), None


@register
class Subtract(Binary):
    name = "subtract"
    affine_operands = (0, 1)
    grad_inputs = ()
    grad_output = False
    expr = staticmethod(lambda a, b: a - b)
    reference = staticmethod(np.subtract)

    def gradient(self, g, node):
        a, b = node.inputs
        return unbroadcast(g, a.shape, a.dtype), unbroadcast(-g, b.shape, b.dtype)


@register
class Multiply(Binary):
    name = "multiply"
    commutative = True
    affine_operands = (0, 1)
    grad_inputs = (0, 1)
    grad_output = False
    expr = staticmethod(lambda a, b: a * b)
    reference = staticmethod(np.multiply)

    def gradient(self, g, node):
        a, b = node.inputs
        return unbroadcast(g * b, a.shape, a.dtype), unbroadcast(g * a, b.shape, b.dtype)


@register
class Divide(Binary):
    name = "divide"
    affine_operands = (0,)  # z / c is affine in z, c / z is not
    grad_inputs = (1,)
    grad_output = True
    reference = staticmethod(np.true_divide)

    def infer_dtype(self, a, b):
        return float_of(promote(self.name, a, b))

    def expr(self, a, b):
        return a / b

    def gradient(self, g, node):
        a, b = node.inputs
        ga = g / b
        gb = -(g * node / b)
        return unbroadcast(ga, a.shape, a.dtype), unbroadcast(gb, b.shape, b.dtype)


@register
class Power(Binary):
    name = "power"
    grad_inputs = (0, 1)
    grad_output = True
    reference = staticmethod(np.power)

    def infer_dtype(self, a, b):
        return promote(self.name, a, b, allowed=FLOATS)  # pow of two ints is not computed

    expr = staticmethod(fastmath.power)

    def gradient(self, g, node):
        a, b = node.inputs
        ga = g * (b * a ** (b - 1.0))
        gb = g * (node * a.log())
        return unbroadcast(ga, a.shape, a.dtype), unbroadcast(gb, b.shape, b.dtype)


@register
class Maximum(Binary):
    name = "maximum"
    commutative = True
    grad_inputs = (0, 1)
    grad_output = False
    expr = staticmethod(nanmath.maximum)
    reference = staticmethod(np.maximum)

    def gradient(self, g, node):
        a, b = node.inputs
        ga = g * cast_like(a >= b, g)
        gb = g - ga
        return unbroadcast(ga, a.shape, a.dtype), unbroadcast(gb, b.shape, b.dtype)


class Compare(Binary):
    dtypes = NUMERIC + ("bool",)
    differentiable = False

    def infer_dtype(self, a, b):
        return "bool"

    def work_dtype(self, out, a, b):
        work = promote(self.name, a, b)
        return "int8" if work == "bool" else work  # LLVM compares i1 values only as integers


@register
class Equal(Compare):
    name = "equal"
    commutative = True
    expr = staticmethod(lambda a, b: a == b)
    reference = staticmethod(np.equal)


@register
class GreaterEqual(Compare):
    name = "greater_equal"
    expr = staticmethod(lambda a, b: a >= b)
    reference = staticmethod(np.greater_equal)


@register
class Greater(Compare):
    name = "greater"
    expr = staticmethod(lambda a, b: a > b)
    reference = staticmethod(np.greater)
