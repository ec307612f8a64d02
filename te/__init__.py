"""Operators declared once, as TVM tensor expressions, with their shape, dtype
and gradient rules. ``get_op(name)`` and ``list_ops()`` expose the registry.

Rules every op follows (numpy's, so the numpy references in the tests agree):

- Promotion: an op of several inputs computes in and returns numpy's
  ``result_type`` of their dtypes (``shapes.promote``): float32 with float64
  is float64, int32 with float32 is float64, bool with int32 is int32. An op
  that only computes floats refuses an integer result (``power`` of two int
  tensors) with DTypeError. Python scalars follow NEP 50 (they do not widen).
  Gradients come back in each input's own dtype.
- NaN propagates wherever numpy's does (``relu``, ``maximum``, ``sign``,
  ``max``, max pooling, softmax...; ``nanmath``); comparisons with NaN are
  false and NaN is nonzero, as in numpy.
- Dims are ints >= 0 (numpy ints accepted) or symbolic, and a tensor's element
  count fits int64; anything else is a ShapeError naming the op and input.
- Zero-size dims compute numpy's result (an empty array, a sum of nothing is
  0, a mean NaN) on the CPU. They are refused with ShapeError where numpy
  raises (a max or softmax over a zero-length axis), where an op needs an
  element (windows of conv2d and pooling, the cross-entropy's N and C,
  training-mode BatchNorm's values per channel, the data-dependent ops'
  input) and on CUDA.
"""
from tvm import ir as _ir

from .attrs import Attr
from .registry import Op, call, get_op, list_ops, register
from .shapes import DTYPES, Bounded, sym
from .workload import Workload

# TVM's vectorizer scalarizes a loop that calls an op without the ``TVectorizable`` attribute, which
# ``tirx.nearbyint`` (rounding half to even: ``quantize``'s codes, ``round``) lacks in TVM 0.27, though what
# it lowers to, ``llvm.nearbyint``, takes vectors. Scalarized, the write-back of a softmax writing codes was
# vectorized by LLVM across rows, with gathers (BERT-base's in ONNX Runtime's QDQ file: see RESULTS.md).
if _ir.Op.get("tirx.nearbyint").get_attr("TVectorizable") is None:
    _ir.register_op_attr("tirx.nearbyint", "TVectorizable", True)

# Importing the op families registers their ops.
from . import activations, attention, conv, conv_grad, conv_packed, depthwise, dynamic, elementwise, gather, indexing, layer_norm, layout, logic, lrn, matmul, norm, optim, pad, pool, pool_grad, quantize, quantize_conv, quantize_depthwise, quantize_matmul, recurrent, reduction, resize, scalar_ops, scan, shape_ops, softmax, winograd  # noqa: E402,F401
from .oprefs import check_op_refs  # noqa: E402

check_op_refs()  # every op is registered now: a misspelled op_ref in an op module fails here

__all__ = ["Attr", "Bounded", "DTYPES", "Op", "call", "get_op", "list_ops", "register", "sym", "Workload"]
