"""Activation functions and unary math: ``erf``, ``gelu``, ``silu``,
``hardswish``, ``hardsigmoid``, ``clip``, ``leaky_relu``, ``elu``,
``softplus``; ``sin``, ``cos``, ``reciprocal``, ``floor``, ``ceil``, ``round``
(the binary and logical ones are in ``logic``).

The activations take float inputs and compute in float (an int input gives
float64, as ``exp`` does); their attributes follow ONNX and PyTorch
(``hardsigmoid``'s ``alpha=0.2`` is ONNX's, PyTorch's is ``1/6``). NaN
propagates through all of them, as in numpy and PyTorch. ``erf`` and the
``tanh`` in ``gelu`` are ``te.fastmath``'s vectorized rational approximations
in float32 (within 4e-7 relative; libm's, one call per lane, in float64).

Gradients at a kink (``clip`` at a bound, ``hardswish`` at +-3, ``leaky_relu``
at 0) take PyTorch's side.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from tvm import te, tirx

from ..errors import AttrError
from . import attrs as A
from . import fastmath, nanmath
from .elementwise import Unary
from .grad import cast_like
from .oprefs import op_ref
from .registry import register
from .shapes import FLOATS, INTS, NUMERIC, dtype_of, float_of, result_type

# the gradients' ops that have no operator (see oprefs)
erf, sin, cos, sigmoid = op_ref("erf"), op_ref("sin"), op_ref("cos"), op_ref("sigmoid")
hardsigmoid = op_ref("hardsigmoid")

_SQRT1_2 = 1 / math.sqrt(2)
_TANH_K, _TANH_C = math.sqrt(2 / math.pi), 0.044715  # gelu's tanh form (PyTorch's, Hendrycks & Gimpel)


def _real(op: str, name: str, value) -> float:
    """A finite real number, as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise AttrError(f"got {value!r}, expected a finite number", op=op, arg=name)
    return float(value)


def _bound(op: str, name: str, value):
    """None (unbounded) or a number, int or float as given (NEP 50: an int
    bound keeps an int input's dtype, a float one makes it float64)."""
    if value is None:
        return None
    value = A.scalar(op, name, value)
    if isinstance(value, bool) or math.isnan(value):
        raise AttrError(f"got {value!r}, expected None or a number that is not NaN", op=op, arg=name)
    return value


def _c(value, like):
    return tirx.const(value, dtype_of(like))


def _float(x: np.ndarray) -> np.ndarray:
    return x.astype(float_of(str(x.dtype)))


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


class Pointwise(Unary):
    """A unary op with attributes: ``expr(v, **attrs)``; ``floating`` by default."""

    floating = True
    grad_inputs = (0,)
    grad_output = False

    def infer_shape(self, x, **attrs):
        return x

    def infer_dtype(self, x, **attrs):
        return float_of(x) if self.floating else x

    def compute(self, x, **attrs):
        dt = self.infer_dtype(dtype_of(x), **attrs)
        return te.compute(x.shape, lambda *i: self.expr(x(*i).astype(dt), **attrs), name=self.name, tag="injective")


@register
class Erf(Pointwise):
    name = "erf"
    expr = staticmethod(fastmath.erf)

    def reference(self, x):
        return _np_erf(_float(x))

    def gradient(self, g, node):
        x = node.inputs[0]
        return (g * ((x * x * -1.0).exp() * (2 / math.sqrt(math.pi))),)


@register
class Gelu(Pointwise):
    """``x * Phi(x)``; ``approximate="tanh"`` is PyTorch's
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""

    name = "gelu"
    attrs = {"approximate": A.Attr(A.one_of("none", "tanh"), default="none", doc="'none' (erf) or 'tanh'")}

    def expr(self, v, approximate):
        half, one = _c(0.5, v), _c(1.0, v)
        if approximate == "tanh":
            return half * v * (one + fastmath.tanh(_c(_TANH_K, v) * (v + _c(_TANH_C, v) * v * v * v)))
        return half * v * (one + fastmath.erf(v * _c(_SQRT1_2, v)))

    def reference(self, x, approximate):
        x = _float(x)
        if approximate == "tanh":
            return 0.5 * x * (1 + np.tanh(_TANH_K * (x + _TANH_C * x ** 3)))
        return 0.5 * x * (1 + _np_erf(x * _SQRT1_2))

    def gradient(self, g, node):
        x = node.inputs[0]
        if node.attrs["approximate"] == "tanh":
            t = ((x + x * x * x * _TANH_C) * _TANH_K).tanh()
            inner = (x * x * (3 * _TANH_C) + 1.0) * _TANH_K  # d/dx of tanh's argument
            return (g * ((t + 1.0) * 0.5 + x * (1.0 - t * t) * inner * 0.5),)
        cdf = (erf(x * _SQRT1_2) + 1.0) * 0.5
        pdf = (x * x * -0.5).exp() * (1 / math.sqrt(2 * math.pi))
        return (g * (cdf + x * pdf),)


@register
class Silu(Pointwise):
    """``x * sigmoid(x)`` (swish)."""

    name = "silu"

    def expr(self, v):
        return v / (_c(1.0, v) + fastmath.exp(-v))

    def reference(self, x):
        x = _float(x)
        with np.errstate(over="ignore"):
            return x / (1 + np.exp(-x))

    def gradient(self, g, node):
        x = node.inputs[0]
        s = sigmoid(x)
        return (g * (s * (x * (1.0 - s) + 1.0)),)


def _times(v, c: float):
    """``v * c`` as IEEE computes it for an attribute ``c`` of 0 too: NaN for
    a NaN or infinite v (TVM's simplifier folds ``v * 0`` to 0)."""
    if c == 0:
        return tirx.Select(tirx.isfinite(v), _c(0.0, v), _c(float("nan"), v))
    return v * _c(c, v)


def _hardsigmoid(v, alpha, beta):
    """``max(0, min(1, alpha v + beta))``, NaN kept."""
    return nanmath.maximum(nanmath.minimum(_times(v, alpha) + _c(beta, v), _c(1.0, v)), _c(0.0, v))


@register
class HardSigmoid(Pointwise):
    """``max(0, min(1, alpha x + beta))`` (ONNX's defaults; PyTorch's is ``alpha=1/6``)."""

    name = "hardsigmoid"
    attrs = {"alpha": A.Attr(_real, default=0.2, doc="slope"), "beta": A.Attr(_real, default=0.5, doc="offset")}
    expr = staticmethod(_hardsigmoid)

    def reference(self, x, alpha, beta):
        return np.clip(_float(x) * alpha + beta, 0, 1)

    def gradient(self, g, node):
        alpha, beta = node.attrs["alpha"], node.attrs["beta"]
        inside = abs(node.inputs[0] * alpha + (beta - 0.5)) < 0.5  # 0 < alpha x + beta < 1
        return (g * (cast_like(inside, g) * alpha),)


@register
class HardSwish(Pointwise):
    """``x * relu6(x + 3) / 6`` (PyTorch's)."""

    name = "hardswish"

    def expr(self, v):
        return v * _hardsigmoid(v, 1 / 6, 0.5)

    def reference(self, x):
        x = _float(x)
        return x * np.clip(x + 3, 0, 6) / 6

    def gradient(self, g, node):
        x = node.inputs[0]  # hardsigmoid(x) + x * hardsigmoid'(x), the latter 1/6 inside (-3, 3)
        return (g * (hardsigmoid(x, alpha=1 / 6, beta=0.5) + x * cast_like(abs(x) < 3.0, g) * (1 / 6)),)


@register
class Clip(Pointwise):
    """``min(max(x, min), max)``, a bound of None left open (``relu6`` is
    ``clip(x, 0, 6)``). Bounds promote as numpy's Python scalars do: an int
    input with int bounds stays int, with a float bound it is float64."""

    name = "clip"
    floating = False
    dtypes = NUMERIC
    attrs = {"min": A.Attr(_bound, default=None, doc="lower bound (None: none)"),
             "max": A.Attr(_bound, default=None, doc="upper bound (None: none)")}

    def infer_dtype(self, x, min, max):
        out = result_type(np.dtype(x), *(b for b in (min, max) if b is not None))
        for name, bound in (("min", min), ("max", max)):
            if out in INTS and bound is not None and not np.iinfo(out).min <= bound <= np.iinfo(out).max:
                raise AttrError(f"got {bound!r}, which does not fit in {out}", op=self.name, arg=name)
        return out

    def expr(self, v, min, max):
        if min is not None:
            v = nanmath.maximum(v, _c(min, v))
        if max is not None:
            v = nanmath.minimum(v, _c(max, v))
        return v

    def reference(self, x, min, max):
        out = x
        if min is not None:
            out = np.maximum(out, min)
        if max is not None:
            out = np.minimum(out, max)
        return np.asarray(out, self.infer_dtype(str(x.dtype), min, max))

    def gradient(self, g, node):
        x, lo, hi = node.inputs[0], node.attrs["min"], node.attrs["max"]
        if lo is not None:  # PyTorch's: the gradient passes at a bound, inclusive
            g = g * cast_like(x >= lo, g)
        if hi is not None:
            g = g * cast_like(x <= hi, g)
        return (g,)


@register
class LeakyRelu(Pointwise):
    """``x`` where ``x >= 0``, else ``alpha * x``."""

    name = "leaky_relu"
    attrs = {"alpha": A.Attr(_real, default=0.01, doc="slope below 0")}

    def expr(self, v, alpha):
        return tirx.Select(v < _c(0.0, v), _times(v, alpha), v)

    def reference(self, x, alpha):
        x = _float(x)
        return np.where(x < 0, x * alpha, x)

    def gradient(self, g, node):
        alpha = node.attrs["alpha"]
        return (g * (cast_like(node.inputs[0] > 0.0, g) * (1.0 - alpha) + alpha),)


@register
class Elu(Pointwise):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""

    name = "elu"
    grad_output = True
    attrs = {"alpha": A.Attr(_real, default=1.0, doc="scale of the negative part")}

    def expr(self, v, alpha):
        zero = _c(0.0, v)
        return tirx.Select(v > zero, v, _times(fastmath.exp(nanmath.minimum(v, zero)) - _c(1.0, v), alpha))

    def reference(self, x, alpha):
        x = _float(x)
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))

    def gradient(self, g, node):
        # below 0 the slope alpha exp(x) is y + alpha: finite where exp(x) of a large x would not be
        positive = cast_like(node.inputs[0] > 0.0, g)
        return (g * (positive + (1.0 - positive) * (node + node.attrs["alpha"])),)


@register
class Softplus(Pointwise):
    """``log(1 + exp(x))``, as ``max(x, 0) + log1p(exp(-|x|))``: no overflow."""

    name = "softplus"

    def expr(self, v):
        return nanmath.relu(v) + tirx.log1p(fastmath.exp(-tirx.abs(v)))

    def reference(self, x):
        return np.logaddexp(_float(x), 0)

    def gradient(self, g, node):
        return (g * sigmoid(node.inputs[0]),)


# -- math without attributes ---------------------------------------------------------
@register
class Sin(Pointwise):
    name = "sin"
    expr = staticmethod(tirx.sin)

    def reference(self, x):
        return np.sin(_float(x))

    def gradient(self, g, node):
        return (g * cos(node.inputs[0]),)


@register
class Cos(Pointwise):
    name = "cos"
    expr = staticmethod(tirx.cos)

    def reference(self, x):
        return np.cos(_float(x))

    def gradient(self, g, node):
        return (-(g * sin(node.inputs[0])),)


@register
class Reciprocal(Pointwise):
    """``1 / x`` as true division (an int input gives float64, where
    ``np.reciprocal`` would divide in ints)."""

    name = "reciprocal"
    grad_inputs = ()
    grad_output = True

    def expr(self, v):
        return _c(1.0, v) / v

    def reference(self, x):
        with np.errstate(divide="ignore"):
            return 1 / _float(x)

    def gradient(self, g, node):
        return (-(g * node * node),)


class Rounding(Pointwise):
    """floor/ceil/round: ints pass through unchanged (numpy's dtype rule), and
    there is no gradient (zero almost everywhere), as for ``sign``."""

    floating = False
    differentiable = False

    def expr(self, v):
        return self.rounding(v) if dtype_of(v) in FLOATS else v


@register
class Floor(Rounding):
    name = "floor"
    rounding = staticmethod(tirx.floor)
    reference = staticmethod(np.floor)


@register
class Ceil(Rounding):
    name = "ceil"
    rounding = staticmethod(tirx.ceil)
    reference = staticmethod(np.ceil)


@register
class Round(Rounding):
    """Half to even, as numpy's (``nearbyint`` in the default rounding mode)."""

    name = "round"
    rounding = staticmethod(tirx.nearbyint)
    reference = staticmethod(np.round)
