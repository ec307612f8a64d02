"""NaN-propagating ``max``/``min`` and ``relu`` for TIR, as numpy computes them.

TIR's ``max(a, b)`` lowers to a compare and select that returns ``b`` when
``a`` is NaN, so ``relu(NaN)`` came out 0 and a max reduction skipped NaN.
numpy (and PyTorch) propagate NaN through ``maximum``, ``max``, ``relu`` and
``sign``; these helpers do too, for float dtypes (other dtypes have no NaN and
keep TIR's ``max``/``min``).

NaN is tested with ``isnan`` below: TIR's float ``!=`` is an ordered compare
(``NaN != 0`` is false) and ``x != x`` is folded to false.

Reductions use ``max_reducer``/``min_reducer``: a ``te.comm_reducer`` whose
combiner keeps a NaN operand and whose identity is -inf (+inf), so a slice of
only -inf reduces to -inf rather than to the lowest finite value. Its pattern
is registered with TVM's schedule (once, when first used), so ``rfactor`` and
the CUDA cross-thread reduction recognize it like the built-in ``max``.
"""
from __future__ import annotations

import ctypes

import tvm
import tvm_ffi
from tvm import te, tirx

from .shapes import FLOATS, dtype_of

_registered = False


def _is_float(value) -> bool:
    return dtype_of(value) in FLOATS


def isnan(v):
    """``tirx.isnan(v)``, which TVM's loop vectorizer is told it may vectorize
    (without that it scalarizes every loop that tests for NaN)."""
    _register()
    return tirx.isnan(v)


def maximum(a, b):
    """``a`` if it is NaN or not below ``b``, else ``b`` (NaN in either gives NaN)."""
    if not _is_float(a):
        return tirx.max(a, b)
    return tirx.Select(tirx.Or(a >= b, isnan(a)), a, b)


def minimum(a, b):
    """``a`` if it is NaN or not above ``b``, else ``b`` (NaN in either gives NaN)."""
    if not _is_float(a):
        return tirx.min(a, b)
    return tirx.Select(tirx.Or(a <= b, isnan(a)), a, b)


def relu(v):
    """``max(v, 0)``, keeping NaN: one compare, which vectorizes."""
    zero = tirx.const(0, dtype_of(v))
    return tirx.Select(v < zero, zero, v)


def nonzero(v):
    """``v != 0`` as numpy means it: NaN is nonzero (TIR's ``!=`` on floats is
    an ordered compare, false for NaN)."""
    ne = v != tirx.const(0, dtype_of(v))
    return tirx.Or(ne, isnan(v)) if _is_float(v) else ne


def lowest(dtype: str):
    """The identity of a max: -inf for floats, the least value otherwise."""
    return tirx.const(float("-inf"), dtype) if dtype in FLOATS else tirx.min_value(dtype)


def highest(dtype: str):
    """The identity of a min: +inf for floats, the greatest value otherwise."""
    return tirx.const(float("inf"), dtype) if dtype in FLOATS else tirx.max_value(dtype)


def _combiners():
    """(combine, identity) pairs for TVM's reducer registry, max then min."""
    return ((maximum, lowest), (minimum, highest))


def _register() -> None:
    """Once per process: mark ``isnan`` vectorizable, and teach TVM's schedule
    the NaN-aware max/min patterns (rfactor and the cross-thread reduction only
    accept reducers they can match)."""
    global _registered
    if _registered:
        return
    _registered = True
    if not tvm.ir.Op.get("tirx.isnan").get_attr("TVectorizable"):
        tvm.ir.register_op_attr("tirx.isnan", "TVectorizable", True)
    register = tvm.get_global_func("s_tir.schedule.RegisterReducer")
    for combine, identity in _combiners():
        functions = (tvm_ffi.convert(lambda x, y, combine=combine: [combine(x[0], y[0])]),
                     tvm_ffi.convert(lambda values, identity=identity: [identity(dtype_of(values[0]))]))
        for fn in functions:
            # TVM keeps registered reducers in a C++ static that is destroyed after
            # Python has shut down; releasing a Python callback then aborts the
            # process ("double free"). One reference is kept for good instead.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(fn))
        register(1, *functions)


def _reducer(combine, identity, name: str):
    _register()
    return te.comm_reducer(lambda x, y: combine(x, y), lambda dtype: identity(str(dtype)), name=name)


def max_reducer():
    """``te.max`` that propagates NaN (for a float expression; ints are unchanged)."""
    return _reducer(maximum, lowest, "nan_max")


def min_reducer():
    """``te.min`` that propagates NaN (for a float expression; ints are unchanged)."""
    return _reducer(minimum, highest, "nan_min")
