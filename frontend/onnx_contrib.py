"""ONNX Runtime's quantized contrib ops (domain ``com.microsoft``) that its
``quantize_static`` writes in the QOperator form beside ``QLinearConv`` and
``QLinearMatMul``: ``QGemm``, ``QLinearAdd``, ``QLinearMul``,
``QLinearGlobalAveragePool``, ``QLinearSoftmax``, ``QLinearSigmoid`` and
``QLinearLeakyRelu``. A ``QGemm`` with a uint8 input and an int8
initializer weight (``onnx_qoperator.int8_reason``) runs as ``dense_int8``;
the rest compute what the op defines on the dequantized float path: the
inputs dequantized, the float op, the output quantized.
"""
from __future__ import annotations

import numpy as np

from ..te import call
from . import ops
from .onnx_qoperator import dequantized, floats, requantized
from .onnx_quant import _scalar
from .onnx_table import converter
from .values import is_kiln, kiln_dtype, known, shape_of

MS = "com.microsoft."


@converter(MS + "QGemm")
def qgemm(node, a, a_scale, a_zp, b, b_scale, b_zp, bias=None, y_scale=None, y_zp=None):
    """``alpha * A' B' + C`` of quantized A and B (C an int32 bias of step
    ``a_scale * b_scale``), quantized where ``y_scale`` is given, else float."""
    if node.attr("transA", 0):
        a = ops.transpose(a)
    transposed = bool(node.attr("transB", 0))
    af = dequantized(a, _scalar(a_scale, node, "a_scale"), a_zp, -1)
    bf = dequantized(b, b_scale, b_zp, 0 if transposed else -1)  # one scale, or one per output column
    y = ops.matmul(af, ops.transpose(bf) if transposed else bf)
    alpha = float(node.attr("alpha", 1.0))
    if alpha != 1.0:
        y = ops.binary("multiply", y, np.float32(alpha))
    if bias is not None:
        step = known(b_scale, "b_scale", node.where).astype(np.float32).reshape(-1) * \
            np.float32(_scalar(a_scale, node, "a_scale"))
        y = ops.binary("add", y, ops.binary("multiply", floats(bias), step))
    return y if y_scale is None else requantized(node, y, y_scale, y_zp)


@converter(MS + "QLinearAdd")
def qlinear_add(node, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    af = dequantized(a, _scalar(a_scale, node, "A_scale"), a_zp, -1)
    sb = _scalar(b_scale, node, "B_scale")
    if is_kiln(b) and shape_of(a) == shape_of(b):  # b's codes taken back to floats inside the add (a residual)
        zb = np.zeros((), kiln_dtype(b)) if b_zp is None else _scalar(b_zp, node, "B_zero_point")
        y = call("dequantize_add", af, b, scale=float(sb), zero_point=int(zb), dtype=kiln_dtype(b))
    else:
        y = ops.binary("add", af, dequantized(b, sb, b_zp, -1))
    return requantized(node, y, y_scale, y_zp)


@converter(MS + "QLinearMul")
def qlinear_mul(node, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    af = dequantized(a, _scalar(a_scale, node, "A_scale"), a_zp, -1)
    bf = dequantized(b, _scalar(b_scale, node, "B_scale"), b_zp, -1)
    return requantized(node, ops.binary("multiply", af, bf), y_scale, y_zp)


@converter(MS + "QLinearSoftmax")
def qlinear_softmax(node, x, x_scale, x_zp, y_scale, y_zp):
    """Softmax of the dequantized input over ``axis``, with the semantics of
    the ``opset`` the op records (before 13: over the dims from ``axis`` on)."""
    xf = dequantized(x, _scalar(x_scale, node, "X_scale"), x_zp, -1)
    rank = len(shape_of(x))
    if int(node.attr("opset", 13)) >= 13:
        y = call("softmax", xf, axis=int(node.attr("axis", -1)) % rank)
    else:
        axis = int(node.attr("axis", 1)) % rank
        y = ops.reshape(call("softmax", ops.flatten(xf, axis), axis=1), shape_of(x))
    return requantized(node, y, y_scale, y_zp)


@converter(MS + "QLinearSigmoid", MS + "QLinearLeakyRelu")
def qlinear_activation(node, x, x_scale, x_zp, y_scale, y_zp):
    xf = dequantized(x, _scalar(x_scale, node, "X_scale"), x_zp, -1)
    if node.op_type == "QLinearSigmoid":
        y = call("sigmoid", xf)
    else:
        y = call("leaky_relu", xf, alpha=float(node.attr("alpha", 0.01)))
    return requantized(node, y, y_scale, y_zp)


@converter(MS + "QLinearGlobalAveragePool")
def qlinear_global_average_pool(node, x, x_scale, x_zp, y_scale, y_zp):
    xf = dequantized(x, _scalar(x_scale, node, "x_scale"), x_zp, 1)
    last = bool(node.attr("channels_last", 0))
    if len(shape_of(x)) == 4 and not last:
        y = call("global_avg_pool2d", xf)
    else:
        axes = tuple(range(1, len(shape_of(x)) - 1)) if last else tuple(range(2, len(shape_of(x))))
        y = ops.reduce("mean", xf, axes, True)
    return requantized(node, y, y_scale, y_zp)
