"""Core ATen ops (what ``torch.export`` leaves after ``run_decompositions``)
and the Python arithmetic on symbolic sizes, converted to kiln ops.

``@aten("add.Tensor")`` registers ``fn(*args, **kwargs)`` for
``torch.ops.aten.add.Tensor``; arguments arrive as values
(``frontend/values.py``), Python numbers and lists, a ``torch.dtype`` as
kiln's dtype name.
"""
from __future__ import annotations

import operator

import numpy as np

from ..errors import FrontendError
from ..te import call
from . import ops
from .values import dim, is_kiln, materialize, shape_of

#: "aten.add.Tensor" (or a Python function's name) -> converter
ATEN: dict = {}


def aten(*names: str):
    def register(fn):
        for name in names:
            ATEN[name if name.startswith("<") else f"aten.{name}"] = fn
        return fn
    return register


def _rank(x):
    return len(x.shape)


def _dtype_of(x):
    return str(x.dtype) if hasattr(x, "dtype") else "float32" if isinstance(x, float) else "int64"


def _scalar_array(value, like):
    """A Python number as a 0-d array of the other operand's dtype (PyTorch's type promotion of scalars)."""
    if isinstance(value, (bool, int, float)) and hasattr(like, "dtype"):
        kind = np.dtype(str(like.dtype)).kind
        if kind == "f" or not isinstance(value, float):
            return np.asarray(value, dtype=str(like.dtype))
        return np.asarray(value, dtype=np.float32)
    return value


def _binary(name):
    def convert(a, b, alpha=1, rounding_mode=None):
        a, b = _scalar_array(a, b), _scalar_array(b, a)
        if alpha != 1:
            b = ops.binary("multiply", b, _scalar_array(alpha, b))
        if name == "divide" and rounding_mode is not None:
            q = ops.binary("divide", ops.cast(a, "float32") if _dtype_of(a) in ("int32", "int64") else a, b)
            q = ops.unary("floor" if rounding_mode == "floor" else "round", q, np.floor)
            return ops.cast(q, _dtype_of(a)) if rounding_mode == "floor" else q
        if name == "divide" and _dtype_of(a) in ("int32", "int64") and _dtype_of(b) in ("int32", "int64"):
            a = ops.cast(a, "float32")  # true division, as torch.div
        return ops.binary(name, a, b)
    return convert


for _names, _op in ((("add.Tensor", "add.Scalar"), "add"), (("sub.Tensor", "sub.Scalar"), "subtract"),
                    (("mul.Tensor", "mul.Scalar"), "multiply"),
                    (("div.Tensor", "div.Scalar", "div.Tensor_mode"), "divide"),
                    (("pow.Tensor_Tensor", "pow.Tensor_Scalar"), "power"), (("maximum.default",), "maximum"),
                    (("minimum.default",), "minimum"), (("eq.Tensor", "eq.Scalar"), "equal"),
                    (("gt.Tensor", "gt.Scalar"), "greater"), (("ge.Tensor", "ge.Scalar"), "greater_equal"),
                    (("lt.Tensor", "lt.Scalar"), "less"), (("le.Tensor", "le.Scalar"), "less_equal"),
                    (("logical_and.default", "bitwise_and.Tensor"), "logical_and"),
                    (("logical_or.default", "bitwise_or.Tensor"), "logical_or"),
                    (("logical_xor.default", "bitwise_xor.Tensor"), "logical_xor")):
    aten(*_names)(_binary(_op))


@aten("ne.Tensor", "ne.Scalar")
def ne(a, b):
    return ops.unary("logical_not", ops.binary("equal", _scalar_array(a, b), _scalar_array(b, a)), np.logical_not)


@aten("rsub.Scalar", "rsub.Tensor")
def rsub(a, b, alpha=1):
    return _binary("subtract")(_scalar_array(b, a), a if alpha == 1 else ops.binary("multiply", a, alpha))


@aten("pow.Scalar")
def pow_scalar(base, x):
    return ops.unary("exp", ops.binary("multiply", x, np.asarray(np.log(base), dtype=_dtype_of(x))), np.exp)


_UNARY = {"neg": ("negate", np.negative), "exp": ("exp", np.exp), "log": ("log", np.log), "sqrt": ("sqrt", np.sqrt),
          "tanh": ("tanh", np.tanh), "sigmoid": ("sigmoid", None), "relu": ("relu", None), "erf": ("erf", None),
          "abs": ("abs", np.abs), "sin": ("sin", np.sin), "cos": ("cos", np.cos), "floor": ("floor", np.floor),
          "ceil": ("ceil", np.ceil), "round": ("round", np.round), "reciprocal": ("reciprocal", np.reciprocal),
          "sign": ("sign", np.sign), "logical_not": ("logical_not", np.logical_not),
          "bitwise_not": ("logical_not", np.logical_not), "silu": ("silu", None), "hardswish": ("hardswish", None)}
for _name, (_op, _fn) in _UNARY.items():
    aten(f"{_name}.default")(lambda x, _op=_op, _fn=_fn: ops.unary(_op, x, _fn))


@aten("rsqrt.default")
def rsqrt(x):
    return ops.unary("reciprocal", ops.unary("sqrt", x, np.sqrt), np.reciprocal)


@aten("gelu.default")
def gelu(x, approximate="none"):
    return call("gelu", x, approximate=approximate)


@aten("hardtanh.default", "clamp.default")
def clamp(x, min=None, max=None):
    if not is_kiln(x):
        return np.clip(np.asarray(x), min, max)
    if str(x.dtype) not in ("float32", "float64"):
        y = x if min is None else call("maximum_scalar", x, scalar=min)
        return y if max is None else ops.binary("minimum", y, np.asarray(max, dtype=str(x.dtype)))
    if min == 0 and max is None:
        return call("relu", x)
    return call("clip", x, **{k: float(v) for k, v in (("min", min), ("max", max)) if v is not None})


@aten("clamp_min.default")
def clamp_min(x, min):
    return clamp(x, min, None)


@aten("clamp_max.default")
def clamp_max(x, max):
    return clamp(x, None, max)


@aten("hardsigmoid.default")
def hardsigmoid(x):
    return call("hardsigmoid", x, alpha=1 / 6, beta=0.5)


@aten("leaky_relu.default")
def leaky_relu(x, negative_slope=0.01):
    return call("leaky_relu", x, alpha=float(negative_slope))


@aten("elu.default")
def elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1.0 or input_scale != 1.0:
        raise FrontendError("elu with scale or input_scale (selu) is not supported", where="aten.elu")
    return call("elu", x, alpha=float(alpha))


@aten("softplus.default")
def softplus(x, beta=1, threshold=20):
    if beta != 1:
        return call("softplus", x * float(beta)) * (1.0 / beta)
    return call("softplus", x)


@aten("where.self")
def where(cond, a, b):
    a, b = _scalar_array(a, b), _scalar_array(b, a)
    return ops.where(cond, a, b)


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(x, mask, value):
    return ops.where(mask, _scalar_array(value, x) if not is_kiln(value) else value, x)


@aten("_to_copy.default", "to.dtype")
def to_copy(x, dtype=None, **_):
    return x if dtype is None else ops.cast(x, dtype)


@aten("clone.default", "alias.default", "lift_fresh_copy.default", "contiguous.default", "detach.default")
def identity(x, **_):
    return x


@aten("_assert_tensor_metadata.default", "_assert_scalar.default", "sym_constrain_range_for_size.default")
def assertion(*args, **kwargs):
    return None


# -- shapes -----------------------------------------------------------------------------------------------
@aten("sym_size.int")
def sym_size(x, d):
    return dim(x.shape[d])


@aten("view.default", "_unsafe_view.default", "reshape.default")
def view(x, shape):
    return ops.reshape(x, shape, allow_zero=True)


@aten("permute.default")
def permute(x, dims):
    return ops.transpose(x, [d % _rank(x) for d in dims])


@aten("t.default")
def t(x):
    return ops.transpose(x) if _rank(x) == 2 else x


@aten("transpose.int")
def transpose(x, d0, d1):
    perm = list(range(_rank(x)))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ops.transpose(x, perm)


@aten("expand.default")
def expand(x, size, implicit=False):
    shape = shape_of(x)
    lead = len(size) - len(shape)
    target = [shape[i - lead] if (isinstance(s, int) and s == -1) else s for i, s in enumerate(size)]
    return ops.expand(x, target)


@aten("unsqueeze.default")
def unsqueeze(x, d):
    return ops.unsqueeze(x, [d])


@aten("squeeze.dim", "squeeze.dims", "squeeze.default")
def squeeze(x, dims=None):
    dims = None if dims is None else [dims] if isinstance(dims, int) else list(dims)
    shape = shape_of(x)
    if dims is not None:
        dims = [d for d in dims if isinstance(shape[d], int) and shape[d] == 1]
    return ops.squeeze(x, dims)


@aten("slice.Tensor")
def slice_(x, d=0, start=None, end=None, step=1):
    start = 0 if start is None else start
    size = dim(x.shape[d])
    if end is None or (isinstance(end, int) and isinstance(size, int) and end >= size) or \
            (not isinstance(end, int) and not isinstance(size, int) and str(end) == str(size)):
        end = size
    if isinstance(size, int):
        return ops.slice_(x, [start], [end], [d], [step])
    if start == 0 and step == 1 and (not isinstance(end, int) or end >= 2**62):
        return x
    return ops.slice_(x, [start], [end], [d], [step])


@aten("select.int")
def select(x, d, index):
    return ops.take(x, np.asarray(index), d % _rank(x))


@aten("cat.default")
def cat(tensors, d=0):
    tensors = [v for v in tensors if not (hasattr(v, "shape") and len(v.shape) == 1 and shape_of(v)[0] == 0)] \
        or tensors[:1]
    return ops.concat(tensors, d % _rank(tensors[0]))


@aten("split_with_sizes.default")
def split_with_sizes(x, sizes, d=0):
    return ops.split(x, list(sizes), d % _rank(x))


@aten("split.Tensor")
def split(x, size, d=0):
    d = d % _rank(x)
    length = dim(x.shape[d])
    return ops.split(x, [min(size, length - k) for k in range(0, length, size)], d)


@aten("embedding.default")
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return ops.take(weight, indices, 0)


@aten("gather.default")
def gather(x, d, index, sparse_grad=False):
    if not is_kiln(x) and not is_kiln(index):
        return np.take_along_axis(np.asarray(x), np.asarray(index), d)
    return call("gather_elements", materialize(x, "gather"), materialize(index, "gather"), axis=d % _rank(x))


@aten("index.Tensor")
def index(x, indices):
    """Advanced indexing by index tensors on consecutive leading dims (None: the dim whole)."""
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    picked = [i for i in indices[lead:] if i is not None]
    if len(picked) != len(indices) - lead:
        raise FrontendError("indexing with index tensors on dims that are not consecutive", where="aten.index")
    shape = shape_of(x)
    if len(picked) == 1:
        return ops.take(x, picked[0], lead)
    flat = None
    for k, idx in enumerate(picked):
        size = shape[lead + k]
        if not is_kiln(idx) and (np.asarray(idx) < 0).any():  # negative indices count from the end
            idx = np.where(np.asarray(idx) < 0, np.asarray(idx) + size, idx)
        flat = idx if flat is None else ops.binary("add", ops.binary("multiply", flat, np.asarray(size, "int64")),
                                                   idx)
    merged = 1
    for d in shape[lead:lead + len(picked)]:
        merged = merged * d
    x = ops.reshape(x, list(shape[:lead]) + [merged] + list(shape[lead + len(picked):]), allow_zero=True)
    return ops.take(x, flat, lead)


def _static_fill(size, value, dtype):
    dtype = dtype or ("float32" if isinstance(value, float) else "bool" if isinstance(value, bool) else "int64")
    return ops.full(size, value, dtype)


@aten("full.default")
def full(size, fill_value, dtype=None, **_):
    return _static_fill(size, fill_value, dtype)


@aten("full_like.default")
def full_like(x, fill_value, dtype=None, **_):
    return _static_fill(shape_of(x), fill_value, dtype or str(x.dtype))


@aten("zeros.default", "ones.default")
def zeros(size, dtype=None, **_):
    return _static_fill(size, 0, dtype or "float32")


@aten("scalar_tensor.default")
def scalar_tensor(value, dtype=None, **_):
    return np.asarray(value, dtype=dtype or "float32")


@aten("arange.start_step", "arange.start", "arange.default")
def arange(start, end=None, step=1, dtype=None, **_):
    if end is None:
        start, end = 0, start
    kind = "float32" if any(isinstance(v, float) for v in (start, end, step)) else "int64"
    return ops.arange(start, end, step, dtype or kind)


def _band(x, diagonal, upper):
    rows, cols = shape_of(x)[-2:]
    keep = np.triu(np.ones((rows, cols), bool), diagonal) if upper else np.tril(np.ones((rows, cols), bool),
                                                                                  diagonal)
    zero = np.zeros((), str(x.dtype))
    return np.where(keep, np.asarray(x), zero) if not is_kiln(x) else ops.where(keep, x, zero)


ATEN["aten.triu.default"] = lambda x, diagonal=0: _band(x, diagonal, True)
ATEN["aten.tril.default"] = lambda x, diagonal=0: _band(x, diagonal, False)


@aten("constant_pad_nd.default")
def constant_pad(x, pad, value=0):
    width = [(0, 0)] * _rank(x)
    for k in range(len(pad) // 2):
        width[_rank(x) - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return ops.pad(x, width, "constant", value)


def _mode_pad(x, pad, mode):
    width = [(0, 0)] * _rank(x)
    for k in range(len(pad) // 2):
        width[_rank(x) - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return ops.pad(x, width, mode)


for _name, _mode in (("reflection_pad2d", "reflect"), ("reflection_pad1d", "reflect"),
                     ("replication_pad2d", "edge"), ("replication_pad1d", "edge")):
    ATEN[f"aten.{_name}.default"] = lambda x, pad, _mode=_mode: _mode_pad(x, pad, _mode)


# -- Python arithmetic on sizes ------------------------------------------------------------------------------
for _fn in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
            operator.neg, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
    ATEN[str(_fn)] = lambda *args, _fn=_fn: _fn(*args)
ATEN[str(operator.getitem)] = lambda seq, i: seq[i]
