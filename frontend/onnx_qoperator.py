"""Quantized ONNX models in the QOperator form: ``QLinearConv``,
``QLinearMatMul``, ``MatMulInteger``, ``ConvInteger`` and
``DynamicQuantizeLinear`` (what ONNX Runtime's ``quantize_static`` writes
with ``QuantFormat.QOperator``, and ``quantize_dynamic`` with the last three).

A ``QLinearConv`` or ``QLinearMatMul`` whose input is uint8 and whose weight
is an int8 initializer with zero point 0 (one scale, or one per output
channel; a ``QLinearConv`` 2-D, of one group or depthwise, dilation 1,
padded alike on both sides, its bias an int32 initializer) runs as kiln's
int8 kernels on the codes as they come: ``conv2d_int8`` or
``depthwise_conv2d_int8`` (which take uint8 codes) or ``dense_int8``, then
``quantize`` to the output's scale and zero point (in the kernel's
write-back once exported). A ``QLinearMatMul`` of two uint8
activations with one scale each (attention's products) runs as
``matmul_int8``. ``fuse_qoperator`` decides, before
the nodes become steps, and reports each op with the reason where it does
not (as ``fuse_qdq`` does for the QDQ form). Every other one runs what the
file says on the dequantized float path: inputs dequantized, the float op,
the output quantized.

``MatMulInteger`` and ``ConvInteger`` give int32 sums of ``(a - a_zero_point)
(b - b_zero_point)``: computed in float64 (every integer sum below 2**53 is
exact there) and cast to int32. ``DynamicQuantizeLinear`` computes its scale
and zero point from the data's range, as the ONNX operator defines them.
"""
from __future__ import annotations

import numpy as np

from ..te import call
from ..te.quantize import pack_int8_weight
from ..nn.quantized_ops import PANEL, offset
from . import ops
from .onnx_nn import _conv_geometry
from ..te.quantize_depthwise import depthwise_weight
from .onnx_qdq import NO_VNNI
from .onnx_quant import _fused, _scalar, activation_product, conv_int8
from .onnx_table import converter
from .values import is_kiln, kiln_dtype, known, materialize, shape_of

#: QOperator ops that can run as int8 kernels: where their inputs are
#: (input, its scale, zero point, weight, its scale, zero point, output scale, zero point, bias)
FUSABLE = {"QLinearConv": (0, 1, 2, 3, 4, 5, 6, 7, 8), "QLinearMatMul": (0, 1, 2, 3, 4, 5, 6, 7, None),
           "com.microsoft.QGemm": (0, 1, 2, 3, 4, 5, 7, 8, 6)}


def op_name(node) -> str:
    """A node's op type, prefixed with its domain outside ONNX's own (``com.microsoft.QGemm``)."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def int8_reason(node, arrays: dict, dot: bool) -> str | None:
    """Why a ``FUSABLE`` node (an ONNX NodeProto) stays on the float path, or
    None where it runs as int8 kernels; ``arrays``: the initializers by name."""
    from onnx import helper

    if not dot:
        return NO_VNNI
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    const = [arrays.get(name) if name else None for name in node.input]
    get = [None if i is None or i >= len(const) else const[i] for i in FUSABLE[op_name(node)]]
    _, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = get
    if any(v is None for v in (x_scale, x_zp, w_scale, w_zp)) or (y_scale is None) != (y_zp is None):
        return "its scales and zero points are not initializers"
    if x_zp.dtype != np.uint8 or x_scale.size != 1:
        return "its input is not uint8 with one scale"
    if node.op_type == "QLinearMatMul" and w is None:  # a product of two activations (attention's)
        return None if w_zp.dtype == np.uint8 and w_zp.size == 1 and w_scale.size == 1 else \
            "its second operand is an activation not uint8 with one scale"
    if w is None or w.dtype != np.int8 or np.any(w_zp != 0):
        return "its weight is not an int8 initializer with zero point 0"
    if node.op_type == "QGemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0):
        return "a QGemm with transA or alpha"
    if node.op_type == "QLinearConv":
        pads, auto_pad = list(attrs.get("pads", [0] * 4)), attrs.get("auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad  # a file's strings are bytes
        group = attrs.get("group", 1)
        if w.ndim != 4 or (group != 1 and not depthwise_weight(w.shape, group)) \
                or any(d != 1 for d in attrs.get("dilations", [])) \
                or auto_pad != "NOTSET" or pads[:2] != pads[2:]:
            return "a grouped (other than depthwise), dilated, non-2-D or unevenly padded convolution"
    elif w.ndim != 2:
        return "its second operand is not a matrix"
    has_bias = len(node.input) > 8 if node.op_type == "QLinearConv" else node.op_type == "QGemm" and \
        len(node.input) > 6 and bool(node.input[6])
    if has_bias and (bias is None or bias.dtype != np.int32):
        return "its bias is not an int32 initializer"
    return None


def fuse_qoperator(nodes, arrays: dict, dot: bool) -> tuple[list, list]:
    """``(nodes, report)``: each ``QLinearConv``/``QLinearMatMul``/``QGemm`` that runs as
    int8 kernels moved to kiln's domain (``onnx_quant.FUSED`` converts it);
    the report a ``(node name, op type, "int8" or "float", why)`` per such op."""
    from onnx import helper
    out, report = [], []
    for node in nodes:
        if op_name(node) not in FUSABLE:
            out.append(node)
            continue
        why = int8_reason(node, arrays, dot)
        report.append((node.name, node.op_type, "float" if why else "int8", why or ""))
        if why is None:
            node = helper.make_node(node.op_type, list(node.input), list(node.output), name=node.name,
                                    domain="kiln", **{a.name: helper.get_attribute_value(a) for a in node.attribute})
        out.append(node)
    return out, report


#: ops that move values without computing on them: a quantized model's codes
#: pass through them as floats, exactly (``through_floats``)
MOVES_VALUES = {"Gather", "Transpose", "Concat", "Slice", "Squeeze", "Unsqueeze", "Split", "Expand", "Flatten",
                "Identity", "Tile"}


def _codes_dtype(value) -> str | None:
    dtype = kiln_dtype(value) if is_kiln(value) else str(np.asarray(value).dtype) if value is not None else None
    return dtype if dtype in ("uint8", "int8") else None


def through_floats(converter, node, *values):
    """``converter`` (of a ``MOVES_VALUES`` op) on uint8/int8 codes: each as
    float32 (every such integer is one), each output as codes again; other
    values (indices, shapes) as they are."""
    if node.op_type not in MOVES_VALUES:  # every other op (this runs for each node of each eager call)
        return converter(node, *values)
    dtypes = {d for d in map(_codes_dtype, values) if d}
    if len(dtypes) != 1:
        return converter(node, *values)
    (dtype,) = dtypes
    result = converter(node, *(floats(v) if _codes_dtype(v) else v for v in values))
    back = [_bytes_of(r, dtype) for r in (result if isinstance(result, (list, tuple)) else [result])]
    return back if isinstance(result, (list, tuple)) else back[0]


def _bytes_of(v, dtype: str):
    if not is_kiln(v):
        return np.asarray(v).astype(dtype)
    return call("quantize", v, scale=1.0, zero_point=0, dtype=dtype)


def _step(x_scale, w_scale, channels: int) -> np.ndarray:
    return float(x_scale) * np.broadcast_to(np.asarray(w_scale, np.float64).reshape(-1), (channels,))


def requantized(node, y, y_scale, y_zero_point):
    """A float result quantized to the output's scale and zero point (its dtype theirs)."""
    zp = _scalar(y_zero_point, node, "y_zero_point")
    return call("quantize", y, scale=float(_scalar(y_scale, node, "y_scale")), zero_point=int(zp), dtype=str(zp.dtype))


@_fused("QLinearConv")
def qlinear_conv_int8(node, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias=None):
    wq = np.asarray(w)
    strides, _, (top, left, _, _) = _conv_geometry(node, x.shape, wq.shape[2:])
    step = _step(x_scale, w_scale, wq.shape[0])
    shift = offset(step, int(x_zp), wq, (1, 2, 3), None if bias is None else np.asarray(bias, np.float64) * step)
    y = conv_int8(node, x, wq, step, shift, float(x_scale), int(x_zp), strides, (top, left))
    return requantized(node, y, y_scale, y_zp)


@_fused("QLinearMatMul")
def qlinear_matmul_int8(node, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    if is_kiln(b):  # a second activation's codes: matmul_int8
        scalars = [_scalar(v, node, what) for v, what in ((a_scale, "a_scale"), (a_zp, "a_zero_point"),
                                                           (b_scale, "b_scale"), (b_zp, "b_zero_point"))]
        return requantized(node, activation_product(node, a, b, *scalars), y_scale, y_zp)
    return _dense_int8(node, a, a_scale, a_zp, np.asarray(b), b_scale, None, y_scale, y_zp)


@_fused("QGemm")
def qgemm_int8(node, a, a_scale, a_zp, b, b_scale, b_zp, bias=None, y_scale=None, y_zp=None):
    wq = np.asarray(b).T if node.attr("transB", 0) else np.asarray(b)
    return _dense_int8(node, a, a_scale, a_zp, wq, b_scale, bias, y_scale, y_zp)


def _dense_int8(node, a, a_scale, a_zp, wq, b_scale, bias, y_scale, y_zp):
    """``dense_int8`` of uint8 rows by an int8 (K, N) weight, its int32 bias
    (None: none) in the epilogue; quantized to ``y_scale`` (None: float out)."""
    step = _step(a_scale, b_scale, wq.shape[1])
    shift = offset(step, int(a_zp), wq, 0, None if bias is None else np.asarray(bias, np.float64) * step)
    sa = shape_of(a)
    rows = sa[0]
    for d in sa[1:-1]:
        rows = rows * d
    flat = a if len(sa) == 2 else ops.reshape(a, [rows, sa[-1]])
    y = call("dense_int8", flat, materialize(pack_int8_weight(wq, PANEL), node.op_type),
             materialize(step.astype(np.float32), node.op_type), materialize(shift, node.op_type))
    y = y if len(sa) == 2 else ops.reshape(y, [*sa[:-1], wq.shape[1]])
    return y if y_scale is None else requantized(node, y, y_scale, y_zp)


def floats(x, dtype: str = "float32"):
    """Integer codes as floats (exact: every uint8/int8 is a float32)."""
    if not is_kiln(x):
        return np.asarray(x).astype(dtype)
    if kiln_dtype(x) in ("uint8", "int8"):
        x = call("dequantize", x, scale=1.0, zero_point=0, dtype=kiln_dtype(x))
    return ops.cast(x, dtype)


def _along(v, axis: int, ndim: int) -> np.ndarray:
    """Scales or zero points (known before the kernel runs: ``values.known``),
    one or a vector shaped to broadcast along ``axis`` of an ``ndim``-D value."""
    v = known(v, "a scale or zero point", "from_onnx")
    if v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.size
    return v.reshape(shape)


def dequantized(x, scale, zero_point, axis: int, dtype: str = "float32"):
    """``(x - zero_point) * scale`` in ``dtype``; a vector of scales (and zero points) along ``axis``."""
    ndim = len(shape_of(x))
    if is_kiln(x) and kiln_dtype(x) in ("uint8", "int8") and dtype == "float32" and scale is not None:
        s, z = _along(scale, axis, ndim), _along(0 if zero_point is None else zero_point, axis, ndim)
        if s.size == 1 and z.size == 1:  # one scale: the dequantize op, which fuses into its producer
            return call("dequantize", x, scale=float(s), zero_point=int(z), dtype=kiln_dtype(x))
    v = floats(x, dtype)
    if zero_point is not None:
        v = ops.binary("subtract", v, floats(_along(zero_point, axis, ndim), dtype))
    return v if scale is None else ops.binary("multiply", v, floats(_along(scale, axis, ndim), dtype))


@converter("QLinearConv")
def qlinear_conv(node, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias=None):
    xs = _scalar(x_scale, node, "x_scale")
    xf = dequantized(x, xs, x_zp, 1)
    wf = dequantized(w, w_scale, w_zp, 0)
    # the int32 bias's step: the input's times each output channel's
    bf = None if bias is None else ops.binary("multiply", floats(bias), known(w_scale, "w_scale", node.where)
                                              .astype(np.float32).reshape(-1) * np.float32(xs))
    kernel = tuple(shape_of(w)[2:])
    if len(kernel) != 2:
        raise node.fail(f"a {len(kernel)}-D QLinearConv; kiln's are 2-D")
    strides, dilations, pads = _conv_geometry(node, x.shape, kernel)
    y = ops.conv2d(xf, wf, bf, strides, tuple(pads), dilations, int(node.attr("group", 1)))
    return requantized(node, y, y_scale, y_zp)


@converter("QLinearMatMul")
def qlinear_matmul(node, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    af = dequantized(a, _scalar(a_scale, node, "a_scale"), a_zp, -1)
    bf = dequantized(b, b_scale, b_zp, -1)  # one scale, or one per column
    return requantized(node, ops.matmul(af, bf), y_scale, y_zp)


@converter("MatMulInteger")
def matmul_integer(node, a, b, a_zp=None, b_zp=None):
    # a's zero point: one, or one per row (axis -2); b's: one, or one per column
    af = dequantized(a, None, a_zp, -2 if len(shape_of(a)) > 1 else -1, "float64")
    bf = dequantized(b, None, b_zp, -1, "float64")
    return ops.cast(ops.matmul(af, bf), "int32")


@converter("ConvInteger")
def conv_integer(node, x, w, x_zp=None, w_zp=None):
    kernel = tuple(shape_of(w)[2:])
    if len(kernel) != 2:
        raise node.fail(f"a {len(kernel)}-D ConvInteger; kiln's are 2-D")
    strides, dilations, pads = _conv_geometry(node, x.shape, kernel)
    xf = dequantized(x, None, None if x_zp is None else _scalar(x_zp, node, "x_zero_point"), 1, "float64")
    wf = dequantized(w, None, w_zp, 0, "float64")
    y = ops.conv2d(xf, wf, None, strides, tuple(pads), dilations, int(node.attr("group", 1)))
    return ops.cast(y, "int32")


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node, x):
    """y, y_scale, y_zero_point: the range widened to hold 0, split in 255 steps."""
    low = ops.binary("minimum", ops.reduce("min", x, None, False), np.float32(0))
    high = ops.binary("maximum", ops.reduce("max", x, None, False), np.float32(0))
    scale = ops.binary("divide", ops.binary("subtract", high, low), np.float32(255))
    zero = _clipped(ops.unary("round", ops.binary("subtract", np.float32(0), ops.binary("divide", low, scale)),
                              np.round))
    y = _clipped(ops.binary("add", ops.unary("round", ops.binary("divide", x, scale), np.round), zero))
    return [_bytes_of(y, "uint8"), scale, _bytes_of(zero, "uint8")]


def _clipped(v):
    return ops.unary("clip", v, lambda a: np.clip(a, 0, 255), min=0.0, max=255.0)
