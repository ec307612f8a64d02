"""The operations both frontends translate into: each takes kiln or static
values (``frontend/values.py``) and returns one, running kiln ops on kiln
values and numpy on static ones, so shape arithmetic folds as the model runs.

ONNX's and ATen's ops differ in names and attribute spellings, rarely in
meaning; their converters (``onnx_ops*.py``, ``aten_ops.py``) parse their
own spellings and call these.
"""
from __future__ import annotations

import numpy as np

from ..errors import FrontendError
from ..te import call
from .values import (anchored, broadcast_static, dim, is_kiln, kiln_dtype, materialize, resolve_reshape,
                     shape_of, static_array)

#: binary kiln op -> (numpy function, scalar op for ``x op s``, scalar op for ``s op x``)
_BINARY = {
    "add": (np.add, "add_scalar", "add_scalar"),
    "subtract": (np.subtract, "subtract_scalar", "rsubtract_scalar"),
    "multiply": (np.multiply, "multiply_scalar", "multiply_scalar"),
    "divide": (None, "divide_scalar", "rdivide_scalar"),
    "power": (np.power, "power_scalar", None),
    "maximum": (np.maximum, "maximum_scalar", "maximum_scalar"),
    "minimum": (np.minimum, None, None),
    "equal": (np.equal, "equal_scalar", "equal_scalar"),
    "greater": (np.greater, "greater_scalar", "rgreater_scalar"),
    "greater_equal": (np.greater_equal, "greater_equal_scalar", "rgreater_equal_scalar"),
    "less": (np.less, "rgreater_scalar", "greater_scalar"),
    "less_equal": (np.less_equal, "rgreater_equal_scalar", "greater_equal_scalar"),
    "logical_and": (np.logical_and, None, None),
    "logical_or": (np.logical_or, None, None),
    "logical_xor": (np.logical_xor, None, None),
}
_COMPARISONS = {"equal", "greater", "greater_equal", "less", "less_equal"}


def _static_divide(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        return a // b  # sizes: positive, so floor is truncation
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b)).astype(np.result_type(a, b))  # C (ONNX, torch.div trunc) semantics
    return np.divide(a, b).astype(np.result_type(a, b))


def _static_compare(fn, a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != object and b.dtype != object:
        return fn(a, b)
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape, dtype=bool)
    for i in np.ndindex(a.shape):
        x, y = dim(a[i]), dim(b[i])
        if isinstance(x, int) and isinstance(y, int):
            out[i] = fn(x, y)
        elif fn is np.equal and (isinstance(x, int) and x < 1 or isinstance(y, int) and y < 1):
            out[i] = False  # a symbolic size is at least 1
        else:
            raise FrontendError(f"comparing the symbolic size {a[i]} with {b[i]} depends on the batch; export with "
                                "a static batch (dynamic_batch=False)", where="kiln.frontend")
    return out


def _scalar_of(value, like):
    """``value`` as a Python scalar of ``like``'s kind when it is one number, else None."""
    if is_kiln(value):
        return None
    array = np.asarray(value)
    if array.dtype == object or array.size != 1 or array.ndim > len(like.shape):
        return None
    kind = np.dtype(kiln_dtype(like)).kind
    if kind == "b" or array.dtype.kind == "b":
        return None
    item = array.reshape(-1)[0]
    return float(item) if kind == "f" else int(item) if array.dtype.kind in "iu" else None


def _integral(value) -> bool:
    dtype = kiln_dtype(value) if is_kiln(value) else np.asarray(value).dtype
    return np.dtype(dtype).kind in "iu"


def binary(name: str, a, b):
    """The broadcasting binary op ``name`` (a key of ``_BINARY``)."""
    fn, scalar_op, rscalar_op = _BINARY[name]
    if not is_kiln(a) and not is_kiln(b):
        if name == "divide":
            return _static_divide(a, b)
        if name in _COMPARISONS:
            return _static_compare(fn, a, b)
        return fn(np.asarray(a), np.asarray(b))
    if name == "divide" and _integral(a) and _integral(b):  # C (ONNX, torch.div trunc): toward zero
        dtype = kiln_dtype(a if is_kiln(a) else b)
        q = call("divide", materialize(a, name), materialize(b, name))  # float64 for integers
        return call("cast", call("where", call("rgreater_scalar", q, scalar=0.0), call("ceil", q), call("floor", q)),
                    dtype=dtype)
    if is_kiln(a) and scalar_op is not None and (s := _scalar_of(b, a)) is not None:
        return call(scalar_op, a, scalar=s)
    if is_kiln(b) and rscalar_op is not None and (s := _scalar_of(a, b)) is not None:
        return call(rscalar_op, b, scalar=s)
    a, b = materialize(a, name), materialize(b, name)
    if name == "less":
        return call("greater", b, a)
    if name == "less_equal":
        return call("greater_equal", b, a)
    return call(name, a, b)


def unary(name: str, x, numpy_fn=None, **attrs):
    """The elementwise op ``name``; ``numpy_fn`` folds a static input."""
    if not is_kiln(x):
        if numpy_fn is None:
            x = materialize(x, name)
            from ..nn.tensor import Tensor
            return call(name, Tensor(x), **attrs).numpy()
        return numpy_fn(np.asarray(x))
    return call(name, x, **attrs)


def where(cond, a, b):
    if not any(is_kiln(v) for v in (cond, a, b)):
        return np.where(np.asarray(cond), a, b)
    if not is_kiln(cond):
        cond = materialize(np.asarray(cond, dtype=bool), "where")
    return call("where", cond, materialize(a, "where"), materialize(b, "where"))


def cast(x, dtype: str):
    if not is_kiln(x):
        array = np.asarray(x)
        return array if array.dtype == object and dtype in ("int32", "int64") else array.astype(dtype)
    return x if kiln_dtype(x) == dtype else call("cast", x, dtype=dtype)


def reshape(x, target, allow_zero: bool = False):
    shape = resolve_reshape(shape_of(x), target, allow_zero)
    if not is_kiln(x):
        return np.reshape(np.asarray(x), tuple(shape))
    return x if shape_of(x) == tuple(shape) else call("reshape", anchored(x, shape), shape=tuple(shape))


def transpose(x, perm=None):
    if perm is None:
        perm = tuple(reversed(range(len(x.shape))))
    perm = tuple(int(p) % max(len(x.shape), 1) for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    if not is_kiln(x):
        return np.transpose(np.asarray(x), perm)
    return call("transpose", x, axes=perm)


def expand(x, target):
    """ONNX Expand / torch expand: numpy broadcasting of ``x`` with ``target``."""
    shape = broadcast_static(shape_of(x), [dim(d) for d in target])
    if not is_kiln(x):
        if any(not isinstance(d, int) for d in shape):
            x = materialize(x, "expand")
        else:
            return np.broadcast_to(np.asarray(x), shape).copy()
    return x if shape_of(x) == shape else call("broadcast_to", anchored(x, shape), shape=shape)


def full(dims, value, dtype: str):
    """An array of ``dims`` holding ``value``: static when the dims are, else
    the value broadcast to the symbolic shape."""
    dims = [dim(d) for d in dims]
    if all(isinstance(d, int) for d in dims):
        return np.full(dims, value, dtype=dtype)
    return expand(np.asarray(value, dtype=dtype), dims)


def concat(values, axis: int):
    if not any(is_kiln(v) for v in values):
        arrays = [np.asarray(v) for v in values]
        if any(a.dtype == object for a in arrays):
            arrays = [a.astype(object) for a in arrays]
        return np.concatenate(arrays, axis=axis)
    values = [materialize(v, "concat") for v in values]
    values = [v for v in values if 0 not in shape_of(v)] or values[:1]
    return values[0] if len(values) == 1 else call("concatenate", *values, axis=axis)


def slice_(x, starts, ends, axes, steps):
    """ONNX Slice / aten.slice: python slicing per axis, indices clamped."""
    rank = len(x.shape)
    index = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = int(axis) % rank
        size = dim(x.shape[axis])
        if not isinstance(size, int):
            if (start, end, step) in ((0, None, 1),) or (start == 0 and step == 1 and end >= 2**31 - 1):
                continue
            raise FrontendError("slicing a symbolic dim; export with a static batch (dynamic_batch=False)",
                                where="kiln.frontend")
        index[axis] = slice(*slice(int(start), int(end), int(step)).indices(size)) if end is not None else \
            slice(int(start), None, int(step))
    index = tuple(index)
    if not is_kiln(x):
        return np.asarray(x)[index]
    if all(s == slice(None) for s in index):
        return x
    return call("getitem", x, index=index)


def squeeze(x, axes=None):
    shape = shape_of(x)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if isinstance(d, int) and d == 1]
    axes = {int(a) % len(shape) for a in axes}
    return reshape(x, [d for i, d in enumerate(shape) if i not in axes], allow_zero=True)


def unsqueeze(x, axes):
    shape = list(shape_of(x))
    rank = len(shape) + len(axes)
    for a in sorted(int(a) % rank for a in axes):
        shape.insert(a, 1)
    return reshape(x, shape, allow_zero=True)


def flatten(x, axis: int):
    """``x`` as a matrix: the dims before ``axis`` (negative: counted from the
    last dim, as ONNX Flatten's) make its rows."""
    shape = shape_of(x)
    axis = axis + len(shape) if axis < 0 else axis
    head, tail = 1, 1
    for d in shape[:axis]:
        head = head * d
    for d in shape[axis:]:
        tail = tail * d
    return reshape(x, [dim(head), dim(tail)], allow_zero=True)


def shape(x):
    return static_array(shape_of(x))


def take(x, indices, axis: int):
    if not is_kiln(x) and not is_kiln(indices):
        array, idx = np.asarray(x), np.asarray(indices)
        size = array.shape[axis]
        return np.take(array, np.where(idx < 0, idx + size, idx), axis=axis)
    if not is_kiln(indices) and np.asarray(indices).ndim == 0:  # one index: a slice and a reshape
        i = int(np.asarray(indices)) % dim(x.shape[axis])
        index = [slice(None)] * len(x.shape)
        index[axis] = i
        return call("getitem", x, index=tuple(index))
    return call("take", materialize(x, "take"), materialize(indices, "take"), axis=axis)


def split(x, sizes, axis: int):
    if not is_kiln(x):
        bounds = np.cumsum(sizes)[:-1]
        return list(np.split(np.asarray(x), bounds, axis=axis))
    if len(sizes) == 1:
        return [x]
    if len(set(sizes)) == 1:
        return list(call("split", x, axis=axis, sections=len(sizes)))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [slice_(x, [int(lo)], [int(hi)], [axis], [1]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def pad(x, pads, mode: str = "constant", value=0.0):
    """``pads``: (before, after) per axis."""
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    if not any(lo or hi for lo, hi in pads):
        return x
    if any(lo < 0 or hi < 0 for lo, hi in pads):  # negative padding crops
        x = slice_(x, [max(-lo, 0) for lo, _ in pads],
                   [dim(d) - max(-hi, 0) for d, (_, hi) in zip(x.shape, pads)], range(len(pads)), [1] * len(pads))
        pads = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pads)
    if not is_kiln(x):
        kw = {"constant_values": value} if mode == "constant" else {}
        return np.pad(np.asarray(x), pads, mode={"edge": "edge", "reflect": "reflect"}.get(mode, "constant"), **kw)
    attrs = {"pad_width": pads}
    if mode == "constant":
        attrs["value"] = value
    else:
        attrs["mode"] = mode
    return call("pad", x, **attrs)


def reduce(name: str, x, axes, keepdims: bool):
    """``sum``, ``mean``, ``max``, ``min``, ``logsumexp`` over ``axes`` (None: all)."""
    axes = None if axes is None else tuple(int(a) % max(len(x.shape), 1) for a in axes)
    if not is_kiln(x):
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[name]
        return fn(np.asarray(x), axis=axes, keepdims=keepdims)
    if axes == ():
        return x
    return call(name, x, axis=axes, keepdims=keepdims)


def matmul(a, b):
    """numpy.matmul. A product with a matrix (a layer's weight: ONNX's
    ``MatMul`` before its bias ``Add``) runs as ``dense`` on the rows of
    ``a``: an export packs its constant weight once, where ``matmul`` would
    copy it into panels in every call, and the bias add after it joins the
    dense's write-back."""
    a, b = materialize(a, "matmul"), materialize(b, "matmul")
    sa, sb = shape_of(a), shape_of(b)
    if len(sb) != 2 or len(sa) < 2 or not isinstance(sb[1], (int, np.integer)) \
            or kiln_dtype(a) != kiln_dtype(b) or kiln_dtype(b) not in ("float32", "float64"):
        return call("matmul", a, b)
    rows = sa[0]
    for d in sa[1:-1]:
        rows = rows * d
    flat = a if len(sa) == 2 else reshape(a, [rows, sa[-1]])
    y = call("dense", flat, b, materialize(np.zeros(int(sb[1]), kiln_dtype(b)), "matmul"))
    return y if len(sa) == 2 else reshape(y, [*sa[:-1], sb[1]])


def conv2d(x, w, b, stride, pads, dilation, groups: int):
    """NCHW convolution; ``pads`` (top, left, bottom, right); a 1-D conv
    (N, C, L) runs as a 2-D one of height 1."""
    rank = len(x.shape)
    if rank == 3:
        x, w = unsqueeze(x, [2]), unsqueeze(w, [2])
        stride, dilation = (1, *stride), (1, *dilation)
        pads = (0, pads[0], 0, pads[1])
        return squeeze(conv2d(x, w, b, stride, pads, dilation, groups), [2])
    if rank != 4:
        raise FrontendError(f"a convolution of a rank-{rank} input; kiln has 1-D and 2-D convolutions",
                            where="conv")
    top, left, bottom, right = (int(p) for p in pads)
    if (top, left) != (bottom, right):
        x = pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)])
        top = left = 0
    attrs = {"stride": tuple(int(s) for s in stride), "padding": (top, left),
             "dilation": tuple(int(d) for d in dilation)}
    if groups != 1:
        attrs["groups"] = int(groups)
    y = call("conv2d", x, materialize(w, "conv"), **attrs)
    if b is not None:
        y = binary("add", y, reshape(b, [1, -1, 1, 1]))
    return y


def arange(start, end, step, dtype: str):
    """numpy.arange; over a symbolic length (an exported model's batch) an
    exclusive cumulative sum of ones, since no kernel input has that length."""
    if all(isinstance(v, (int, float, np.integer, np.floating)) for v in (start, end, step)):
        return np.arange(start, end, step).astype(dtype)
    if not all(isinstance(v, (int, np.integer)) or not isinstance(v, float) for v in (start, end, step)) \
            or not isinstance(step, (int, np.integer)) or step <= 0:
        raise FrontendError(f"arange({start}, {end}, {step}) over a symbolic length needs integer bounds and a "
                            "positive integer step", where="kiln.frontend")
    count = dim((end - start + step - 1) // step)
    ones = expand(np.ones((), dtype), [count])
    out = call("cumsum", ones, axis=0, exclusive=True)
    if step != 1:
        out = call("multiply_scalar", out, scalar=int(step))
    return out if start == 0 else call("add_scalar", out, scalar=int(start))
