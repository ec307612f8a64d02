"""The values an imported graph computes with, and the arithmetic of shapes.

A value is either a kiln value (an ``nn.Tensor`` when the model runs, the
exporter's traced value when it is exported: anything ``kiln.te.call``
takes) or a *static* value: a numpy array known without running a kernel
(an integer initializer, a ``Constant`` node, the ``Shape`` of a tensor and
whatever arithmetic follows it). Static values are computed with numpy as the
model runs, so shape arithmetic costs no kernel; a dim that is symbolic (the
exported model's batch) makes an object array of TVM expressions, which the
same numpy arithmetic carries through to the ``reshape`` or ``broadcast_to``
that uses it, where it stays symbolic.
"""
from __future__ import annotations

import contextvars
import numbers

import numpy as np
from tvm import tirx
from tvm.sym.analyzer import Analyzer

from ..errors import FrontendError
from ..te import call
from ..te.quantize import QUANTIZED
from ..te.shapes import DTYPES

_ANALYZER = Analyzer()


def is_kiln(value) -> bool:
    """True for a value ops run on (not a static array)."""
    return hasattr(type(value), "_kiln_apply")


#: a traced input of the model being exported (``ImportedModel`` sets it while it runs), which an op on
#: weights alone with a symbolic output shape is traced beside (``anchored``); None when running eagerly
ANCHOR: contextvars.ContextVar = contextvars.ContextVar("kiln_frontend_anchor", default=None)


def anchored(value, dims):
    """``value`` made a traced constant when ``dims`` hold a symbolic size and
    the model is being traced: such an op cannot run on the weights eagerly."""
    anchor = ANCHOR.get()
    if anchor is None or not any(is_symbolic(d) for d in dims):
        return value
    from ..graph.trace import lift
    return lift(value, anchor)


def is_symbolic(dim) -> bool:
    return isinstance(dim, tirx.Expr) and not isinstance(dim, tirx.IntImm)


def dim(d):
    """A dim as an int where it is constant, else the simplified expression."""
    if isinstance(d, tirx.IntImm):
        return int(d.value)
    if isinstance(d, (numbers.Integral, np.integer)):
        return int(d)
    if isinstance(d, tirx.Expr):
        d = _ANALYZER.simplify(d)
        return int(d.value) if isinstance(d, tirx.IntImm) else d
    raise FrontendError(f"got {d!r}, expected a dim (an int or a symbolic size)", where="kiln.frontend")


def shape_of(value) -> tuple:
    """The shape of a kiln or static value, dims as ``dim`` gives them."""
    return tuple(dim(d) for d in value.shape)


def static_array(dims) -> np.ndarray:
    """A 1-D static value of dims: int64 when all are constant, else an object array."""
    dims = [dim(d) for d in dims]
    if all(isinstance(d, int) for d in dims):
        return np.asarray(dims, dtype=np.int64).reshape(len(dims))
    out = np.empty(len(dims), dtype=object)
    out[:] = dims
    return out


def known(value, what: str, node: str) -> np.ndarray:
    """The numbers of a value a converter needs before its kernel runs (axes,
    pads, a shape, a bound): a static value as it is, a tensor's values when
    the model runs eagerly (read then, as ONNX Runtime reads such an input);
    a traced one (an export, ``kiln.compile``) is refused, naming ``what``
    and the ``node``."""
    if not is_kiln(value):
        return np.asarray(value)
    from ..nn.tensor import Tensor
    if isinstance(value, Tensor):
        return value.numpy()
    raise FrontendError(f"{what} is computed from the data, expected a value known before the model runs "
                        "(a constant or shape arithmetic) to export or compile it", where=node)


def ints(value, what: str, node: str) -> list:
    """A static value as a list of dims (ints or symbolic sizes); ``what`` and
    ``node`` name it in the error when it is a tensor only known at run time."""
    array = known(value, what, node)
    return [dim(d) for d in array.reshape(-1)]


def scalar(value, what: str, node: str):
    """A static value holding one number, as a Python int or float."""
    array = known(value, what, node).reshape(-1)
    if array.size != 1:
        raise FrontendError(f"{what} has {array.size} values, expected one", where=node)
    item = array[0]
    return item.item() if isinstance(item, np.generic) else item


def to_kiln_dtype(dtype, node: str) -> str:
    name = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    if name not in DTYPES + QUANTIZED:
        raise FrontendError(f"dtype {name} is not supported; kiln computes in {', '.join(DTYPES + QUANTIZED)}",
                            where=node)
    return name


def as_value(value):
    """A converter's result with a bare number or size (what numpy gives for
    an element of an object array, or arithmetic on 0-d ones) made a 0-d
    static array, so every static value has a shape and a dtype."""
    if value is None or is_kiln(value) or isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        return [as_value(v) for v in value]
    if isinstance(value, tirx.Expr) and is_symbolic(value):
        out = np.empty((), dtype=object)
        out[()] = value
        return out
    return np.asarray(dim(value) if isinstance(value, tirx.Expr) else value)


def tensor_or_static(array, dtype=None) -> np.ndarray:
    """A static array in a kiln dtype (float64 constants stay float64)."""
    array = np.asarray(array)
    if array.dtype == object:
        return array
    if dtype is not None:
        return array.astype(dtype)
    if array.dtype.kind == "f" and array.dtype != np.float64:
        return array.astype(np.float32)
    if array.dtype.kind in "iu" and str(array.dtype) not in DTYPES + QUANTIZED:
        return array.astype(np.int64)
    return array


def kiln_dtype(value) -> str:
    return str(value.dtype)


def materialize(value, where: str):
    """A static value made usable as a kernel's operand (a numpy array the
    backend turns into a constant); symbolic dims cannot be."""
    if is_kiln(value):
        return value
    array = np.asarray(value)
    if array.dtype == object:
        return _sizes_as_data(array, where)
    return tensor_or_static(array)


def _sizes_as_data(array: np.ndarray, where: str):
    """An array of sizes, some symbolic (an exported model's batch), as an
    int64 tensor computed when the model runs: a symbolic size ``e`` is the
    sum of ``e`` ones (a kernel of a few elements), the rest constants."""
    anchor = ANCHOR.get()
    if anchor is None:
        raise FrontendError("a symbolic size is used as data outside a trace", where=where)
    items = []
    for item in array.reshape(-1):
        item = dim(item)
        if isinstance(item, int):
            items.append(np.asarray([item], np.int64))
        else:
            ones = anchored(np.ones((), np.int64), [item])
            items.append(call("reshape", call("sum", call("broadcast_to", ones, shape=(item,))), shape=(1,)))
    if all(isinstance(i, np.ndarray) for i in items):
        return np.concatenate(items).reshape(array.shape)
    from ..graph.trace import lift
    items = [lift(i, anchor) for i in items]
    flat = items[0] if len(items) == 1 else call("concatenate", *items, axis=0)
    return call("reshape", flat, shape=array.shape)


def resolve_reshape(in_shape, target, allow_zero: bool = False) -> tuple:
    """ONNX/PyTorch reshape target dims: ``0`` copies the input's dim (unless
    ``allow_zero``), one ``-1`` takes what is left; symbolic sizes allowed."""
    target = [dim(d) for d in target]
    out = []
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allow_zero:
            out.append(dim(in_shape[i]))
        else:
            out.append(d)
    if sum(1 for d in out if isinstance(d, int) and d == -1) == 1:
        total = 1
        for d in in_shape:
            total = total * d
        known = 1
        for d in out:
            if not (isinstance(d, int) and d == -1):
                known = known * d
        if isinstance(total, int) and isinstance(known, int):
            rest = total // known if known else 0
        else:
            rest = dim(tirx.floordiv(tirx.const(total, "int64") if isinstance(total, int) else total,
                                     tirx.const(known, "int64") if isinstance(known, int) else known))
        out[out.index(-1)] = rest
    return tuple(out)


def broadcast_static(a, b) -> tuple:
    """numpy's broadcast of two shapes whose dims may be symbolic."""
    a, b = list(a), list(b)
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int) and x != y:
            raise FrontendError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast", where="kiln.frontend")
        else:
            out.append(x if isinstance(y, int) or not isinstance(x, int) else y)
    return tuple(out)
