"""ONNX elementwise math, activations and reductions."""
from __future__ import annotations

import math

import numpy as np

from ..te import call
from . import ops
from .onnx_table import converter
from .values import is_kiln, ints, materialize, scalar, shape_of, to_kiln_dtype

_erf = np.vectorize(math.erf, otypes=[np.float64])

#: ONNX op type -> (kiln op, numpy function folding a static input)
_UNARY = {
    "Abs": ("abs", np.abs), "Neg": ("negate", np.negative), "Exp": ("exp", np.exp), "Log": ("log", np.log),
    "Sqrt": ("sqrt", np.sqrt), "Relu": ("relu", lambda a: np.maximum(a, 0).astype(a.dtype)),
    "Sigmoid": ("sigmoid", lambda a: (1 / (1 + np.exp(-a))).astype(a.dtype)), "Tanh": ("tanh", np.tanh),
    "Erf": ("erf", lambda a: _erf(a).astype(a.dtype)), "Sign": ("sign", np.sign), "Floor": ("floor", np.floor),
    "Ceil": ("ceil", np.ceil), "Round": ("round", np.round), "Sin": ("sin", np.sin), "Cos": ("cos", np.cos),
    "Reciprocal": ("reciprocal", np.reciprocal), "Not": ("logical_not", np.logical_not),
    "Softplus": ("softplus", lambda a: np.logaddexp(0, a).astype(a.dtype)),
    "HardSwish": ("hardswish", lambda a: (a * np.clip(a + 3, 0, 6) / 6).astype(a.dtype)),
}


@converter(*_UNARY)
def unary(node, x):
    name, fn = _UNARY[node.op_type]
    return ops.unary(name, x, fn)


@converter("Identity")
def identity(node, x):
    return x


@converter("Dropout")
def dropout(node, x, ratio=None, training_mode=None):
    ratio = node.attr("ratio", 0.5) if node.opset < 12 else 0.5 if ratio is None else \
        scalar(ratio, "ratio", node.where)
    training = training_mode is not None and scalar(training_mode, "training_mode", node.where)
    if training and ratio != 0:
        raise node.fail("training-mode Dropout (training_mode true, ratio > 0) is not supported: its mask is "
                        "random; import the model for inference")
    if node.n_outputs > 1:  # the mask: all kept
        return [x, ops.expand(np.ones((), dtype=bool), shape_of(x))]
    return x


@converter("Elu", "LeakyRelu")
def alpha_unary(node, x):
    name = {"Elu": "elu", "LeakyRelu": "leaky_relu"}[node.op_type]
    return call(name, x, alpha=float(node.attr("alpha", 1.0 if name == "elu" else 0.01)))


@converter("Selu")
def selu(node, x):
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), node.attr("gamma", 1.05070102214813232421875)
    return call("elu", x, alpha=float(alpha)) * float(gamma)


@converter("HardSigmoid")
def hardsigmoid(node, x):
    return call("hardsigmoid", x, alpha=float(node.attr("alpha", 0.2)), beta=float(node.attr("beta", 0.5)))


@converter("Gelu")
def gelu(node, x):
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.refuse("approximate", approximate, "'none' or 'tanh'")
    return call("gelu", x, approximate=approximate)


@converter("Mish")
def mish(node, x):
    return x * call("tanh", call("softplus", x))


@converter("Softsign")
def softsign(node, x):
    return x / (call("abs", x) + 1.0)


@converter("PRelu")
def prelu(node, x, slope):
    return ops.where(ops.binary("less", x, np.zeros((), np.dtype(str(x.dtype)))), ops.binary("multiply", x, slope), x)


@converter("ThresholdedRelu")
def thresholded_relu(node, x):
    alpha = float(node.attr("alpha", 1.0))
    return ops.where(call("greater_scalar", x, scalar=alpha), x, np.zeros((), np.dtype(str(x.dtype))))


_BINARY = {"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide",
           "Equal": "equal", "Greater": "greater", "Less": "less", "GreaterOrEqual": "greater_equal",
           "LessOrEqual": "less_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor"}


@converter(*_BINARY)
def binary(node, a, b):
    return ops.binary(_BINARY[node.op_type], a, b)


@converter("Pow")
def power(node, a, b):
    """Pow(T, T1) -> T: the exponent takes the base's dtype; an integer power
    is computed in float64 and rounded (exact up to 2**53)."""
    dtype = str(a.dtype) if is_kiln(a) else str(np.asarray(a).dtype)
    if not is_kiln(a) and not is_kiln(b):
        return np.power(np.asarray(a), np.asarray(b)).astype(dtype)
    if dtype in ("float32", "float64"):
        return ops.binary("power", a, ops.cast(b, dtype))
    y = ops.binary("power", ops.cast(a, "float64"), ops.cast(b, "float64"))
    return ops.cast(ops.unary("round", y, np.round), dtype)


@converter("Max", "Min", "Sum", "Mean")
def variadic(node, *xs):
    name = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    out = xs[0]
    for x in xs[1:]:
        out = ops.binary(name, out, x)
    if node.op_type == "Mean" and len(xs) > 1:
        out = ops.binary("divide", out, np.asarray(len(xs), dtype=np.dtype(str(out.dtype))))
    return out


@converter("Where")
def where(node, cond, a, b):
    return ops.where(cond, a, b)


@converter("Cast")
def cast(node, x):
    from onnx import helper
    dtype = to_kiln_dtype(helper.tensor_dtype_to_np_dtype(node.attr("to")), node.where)
    return ops.cast(x, dtype)


@converter("CastLike")
def cast_like(node, x, like):
    return ops.cast(x, str(like.dtype))


@converter("Clip")
def clip(node, x, low=None, high=None):
    if node.opset < 11:
        low, high = node.attr("min"), node.attr("max")
    low = None if low is None else scalar(low, "min", node.where)
    high = None if high is None else scalar(high, "max", node.where)
    if not is_kiln(x):
        return np.clip(np.asarray(x), low, high)
    if low is None and high is None:
        return x
    if str(x.dtype) not in ("float32", "float64"):
        if low is not None:
            x = call("maximum_scalar", x, scalar=int(low))
        return x if high is None else ops.binary("minimum", x, np.asarray(high, dtype=np.dtype(str(x.dtype))))
    if low == 0 and high is None:
        return call("relu", x)
    attrs = {k: float(v) for k, v in (("min", low), ("max", high)) if v is not None}
    return call("clip", x, **attrs)


def _axes(node, x, axes_input):
    """The axes of a reduction: an attribute before opset 13 (18 for all but
    ReduceSum), an input after; None: every axis (or none, with noop_with_empty_axes)."""
    axes = node.attr("axes") if axes_input is None else ints(axes_input, "axes", node.where)
    if axes is None or len(axes) == 0:
        return () if node.attr("noop_with_empty_axes", 0) else None
    return tuple(int(a) for a in axes)


_REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceLogSumExp": "logsumexp"}


#: what a reduction over no values gives (ONNX's empty-set cases)
_EMPTY = {"ReduceSum": 0.0, "ReduceMean": np.nan, "ReduceMax": -np.inf, "ReduceMin": np.inf,
          "ReduceLogSumExp": -np.inf, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceSumSquare": 0.0,
          "ReduceLogSum": -np.inf, "ReduceProd": 1.0}


def _empty_reduction(node, x, axes, keep):
    """The result of reducing ``x`` over ``axes`` that hold no values, known without a kernel."""
    shape = shape_of(x)
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]
    dtype = np.dtype(str(x.dtype))
    fill = _EMPTY[node.op_type]
    if dtype.kind == "b":
        fill = fill > 0  # max: any, min: all
    elif dtype.kind in "iu" and not np.isfinite(fill):
        fill = np.iinfo(dtype).min if fill < 0 else np.iinfo(dtype).max
    return np.full(out, fill, dtype=dtype)


@converter(*_REDUCE, "ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceProd")
def reduce(node, x, axes_input=None):
    axes, keep = _axes(node, x, axes_input), bool(node.attr("keepdims", 1))
    kind = node.op_type
    shape = shape_of(x)
    if axes != () and any(shape[a] == 0 for a in (range(len(shape)) if axes is None else axes)):
        return _empty_reduction(node, x, axes, keep)
    if kind == "ReduceProd":
        if is_kiln(x):
            raise node.fail("ReduceProd of data computed by the model is not supported (only of shapes): "
                            "kiln has no product reduction")
        return np.prod(np.asarray(x), axis=axes, keepdims=keep)
    if kind in ("ReduceMax", "ReduceMin") and str(x.dtype) == "bool":  # any / all
        return ops.cast(ops.reduce(_REDUCE[kind], ops.cast(x, "int32"), axes, keep), "bool")
    if kind in _REDUCE:
        return ops.reduce(_REDUCE[kind], x, axes, keep)
    if kind == "ReduceL1":
        return ops.reduce("sum", ops.unary("abs", x, np.abs), axes, keep)
    squares = ops.reduce("sum", ops.binary("multiply", x, x), axes, keep)
    if kind == "ReduceSumSquare":
        return squares
    if kind == "ReduceL2":
        return ops.unary("sqrt", squares, np.sqrt)
    return ops.unary("log", ops.reduce("sum", x, axes, keep), np.log)  # ReduceLogSum


@converter("ArgMax", "ArgMin")
def arg_extreme(node, x):
    axis, keep, last = node.attr("axis", 0), node.attr("keepdims", 1), node.attr("select_last_index", 0)
    name = "argmax" if node.op_type == "ArgMax" else "argmin"
    if not is_kiln(x):
        array = np.asarray(x)
        fn = getattr(np, name)
        out = (array.shape[axis] - 1 - fn(np.flip(array, axis), axis=axis)) if last else fn(array, axis=axis)
        return np.expand_dims(out, axis) if keep else out
    return call(name, x, axis=int(axis), keepdims=bool(keep), select_last_index=bool(last))


@converter("CumSum")
def cumsum(node, x, axis):
    axis = int(scalar(axis, "axis", node.where))
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))
    y = call("cumsum", materialize(x, "CumSum"), axis=axis, exclusive=exclusive, reverse=reverse)
    return ops.cast(y, str(x.dtype))  # an int32 sum comes back as int64
