"""Quantized ONNX models: the QDQ form (``QuantizeLinear`` and
``DequantizeLinear`` around the ops, what ONNX Runtime's ``quantize_static``
writes) into kiln's int8 kernels.

``QuantizeLinear`` and ``DequantizeLinear`` convert to the ``quantize`` and
``dequantize`` ops (per tensor; a dequantized constant — an int8 weight with
per-channel scales — folds into a float constant at import), so every QDQ
model imports and computes what the file says. Before the nodes become steps,
``fuse_qdq`` finds each ``Conv``, ``MatMul`` and ``Gemm`` that reads
``DequantizeLinear(QuantizeLinear(x))`` and an int8 weight initializer
through ``DequantizeLinear`` (zero point 0), with a bias that is a float
initializer or ``DequantizeLinear`` of an int32 one, and replaces it by one
node that runs ``conv2d_int8`` (``depthwise_conv2d_int8`` for a depthwise
``Conv``; or ``quantize`` then ``dense_int8``) on the
float ``x`` with the file's scales, zero point and int8 weights. A ``MatMul``
of two such activations (attention's ``Q @ K^T`` and ``P @ V``) runs as
``quantize`` of each, then ``matmul_int8``. The
``QuantizeLinear``/``DequantizeLinear`` pairs no one reads any more are
dropped. ``fuse_qdq`` reports each such op: fused, or left on the
dequantized (float) path and why.
"""
from __future__ import annotations

import numpy as np

from ..te import call
from ..te.quantize import pack_int8_weight
from ..te.quantize_conv import pack_conv_int8_weight
from ..te.quantize_depthwise import pack_depthwise_int8_weight
from ..nn.quantized_ops import PANEL, offset
from . import ops
from .onnx_nn import _conv_geometry
from .onnx_table import converter
from .values import broadcast_static, is_kiln, known, materialize, shape_of

#: the fused nodes' op types (converters in ``FUSED``, not among the ONNX ops kiln lists)
FUSED: dict = {}


def _scalar(value, node, what: str):
    """A scale or zero point: one number known before the kernel runs (``values.known``)."""
    array = known(value, what, node.where)
    if array.size != 1:
        raise node.fail(f"{what} must be one number (per-tensor quantization of an activation); got shape "
                        f"{tuple(array.shape)}")
    return array.reshape(())


@converter("QuantizeLinear")
def quantize_linear(node, x, scale, zero_point=None):
    s = float(_scalar(scale, node, "y_scale"))
    zp = np.asarray(0, np.uint8) if zero_point is None else _scalar(zero_point, node, "y_zero_point")
    dtype = str(zp.dtype)
    if dtype not in ("uint8", "int8"):
        raise node.fail(f"quantizing to {dtype}; kiln quantizes to uint8 and int8")
    if not is_kiln(x):
        from ..te import get_op
        return get_op("quantize").reference(np.asarray(x, np.float32), scale=s, zero_point=int(zp), dtype=dtype)
    return call("quantize", x, scale=s, zero_point=int(zp), dtype=dtype)


@converter("DequantizeLinear")
def dequantize_linear(node, x, scale, zero_point=None):
    if not is_kiln(x):  # a constant (an int8 weight): folded, per channel along ``axis`` where the scale is a vector
        q, s = np.asarray(x), np.asarray(scale, np.float32)
        zp = np.zeros((), q.dtype) if zero_point is None else np.asarray(zero_point)
        if s.ndim == 1 and s.size > 1:
            shape = [1] * q.ndim
            shape[int(node.attr("axis", 1)) % q.ndim] = s.size
            s, zp = s.reshape(shape), zp.reshape(shape) if zp.ndim == 1 else zp
        return ((q.astype(np.float64) - zp.astype(np.float64)) * s).astype(np.float32)
    s = float(_scalar(scale, node, "x_scale"))
    zp = np.asarray(0, np.uint8) if zero_point is None else _scalar(zero_point, node, "x_zero_point")
    return call("dequantize", x, scale=s, zero_point=int(zp), dtype=str(zp.dtype))


def _fused(op_type: str):
    def register(fn):
        FUSED[op_type] = fn
        return fn
    return register


def conv_int8(node, x, wq: np.ndarray, step: np.ndarray, shift: np.ndarray, x_scale: float, x_zp: int, strides,
              padding):
    """The int8 convolution of ``x`` by the OIHW int8 ``wq`` (``node`` a
    ``Conv`` of one group, or depthwise: ``group`` = its channels, one output
    each): ``conv2d_int8`` or ``depthwise_conv2d_int8``, per output channel
    ``step`` and ``shift`` (``nn.quantized_ops.offset``)."""
    window = dict(in_scale=x_scale, in_zero_point=x_zp, stride=tuple(strides), padding=tuple(padding))
    if int(node.attr("group", 1)) > 1:
        op, packed, window = "depthwise_conv2d_int8", pack_depthwise_int8_weight(wq, PANEL), \
            dict(window, channels=wq.shape[0])
    else:
        op, packed = "conv2d_int8", pack_conv_int8_weight(wq, PANEL)
    return call(op, x, materialize(packed, node.op_type), materialize(step.astype(np.float32), node.op_type),
                materialize(shift, node.op_type), **window)


@_fused("QDQConv")
def qdq_conv(node, x, wq, w_scale, bias=None):
    wq, kernel = np.asarray(wq), tuple(np.asarray(wq).shape[2:])
    strides, _, pads = _conv_geometry(node, x.shape, kernel)
    top, left, bottom, right = pads
    if (top, left) != (bottom, right):
        x = ops.pad(x, [(0, 0), (0, 0), (top - min(top, bottom), bottom - min(top, bottom)),
                        (left - min(left, right), right - min(left, right))])
        top, left = min(top, bottom), min(left, right)
    x_scale, x_zp = float(node.attr("x_scale")), int(node.attr("x_zero_point"))
    step = x_scale * np.broadcast_to(np.asarray(w_scale, np.float64).reshape(-1), (wq.shape[0],))
    shift = offset(step, x_zp, wq, (1, 2, 3), bias)
    return conv_int8(node, x, wq, step, shift, x_scale, x_zp, strides, (top, left))


def activation_product(node, a, b, a_scale: float, a_zp: int, b_scale: float, b_zp: int):
    """``a @ b`` of two uint8 activations' codes (attention's products) as one
    ``matmul_int8``, float out: leading dims broadcast as numpy's matmul
    does. A 1-D operand, or a symbolic N (``matmul_int8`` packs B in panels
    of a static N), runs the dequantized operands' float product: the same
    numbers, not the int8 kernel."""
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) < 2 or len(sb) < 2 or not isinstance(sb[-1], (int, np.integer)):
        return ops.matmul(*(call("dequantize", v, scale=float(s), zero_point=int(z), dtype="uint8")
                            for v, s, z in ((a, a_scale, a_zp), (b, b_scale, b_zp))))
    lead = broadcast_static(list(sa[:-2]), list(sb[:-2]))
    a, b = (v if list(shape[:-2]) == list(lead) else ops.expand(v, [*lead, *shape[-2:]])
            for v, shape in ((a, sa), (b, sb)))
    return call("matmul_int8", a, b, a_zero_point=int(a_zp), b_zero_point=int(b_zp),
                scale=float(a_scale) * float(b_scale))


@_fused("QDQMatMulInt8")
def qdq_activation_matmul(node, a, b):
    params = [(node.attr(f"{side}_scale"), node.attr(f"{side}_zero_point")) for side in ("a", "b")]
    codes = [call("quantize", v, scale=float(s), zero_point=int(z), dtype="uint8") for v, (s, z) in zip((a, b), params)]
    return activation_product(node, *codes, *params[0], *params[1])


@_fused("QDQMatMul")
def qdq_matmul(node, x, wq, w_scale, bias=None):
    wq = np.asarray(wq)
    if node.attr("transB", 0):
        wq = wq.T
    x_scale, x_zp = float(node.attr("x_scale")), int(node.attr("x_zero_point"))
    step = x_scale * np.broadcast_to(np.asarray(w_scale, np.float64).reshape(-1), (wq.shape[1],))
    shift = offset(step, x_zp, wq, 0, bias)
    sa = shape_of(x)
    rows = sa[0]
    for d in sa[1:-1]:
        rows = rows * d
    flat = x if len(sa) == 2 else ops.reshape(x, [rows, sa[-1]])
    q = call("quantize", flat, scale=x_scale, zero_point=x_zp, dtype="uint8")
    y = call("dense_int8", q, materialize(pack_int8_weight(wq, PANEL), "QDQMatMul"),
             materialize(step.astype(np.float32), "QDQMatMul"), materialize(shift, "QDQMatMul"))
    return y if len(sa) == 2 else ops.reshape(y, [*sa[:-1], wq.shape[1]])
