"""Quantized inference: ``quantize`` (float to uint8/int8 with a scale and a
zero point: ONNX's ``QuantizeLinear``), ``dequantize`` (its inverse,
``DequantizeLinear``) and ``dense_int8`` (a layer's product of uint8
activations and int8 weights accumulated in int32, its dequantizing epilogue
``acc * scale[n] + offset[n]`` fused, float32 out).

``dense_int8``'s weight comes in blocks of 4 along K and ``bn`` output
columns, ``(P, K4, bn, 4)`` (``pack_int8_weight``): one ``vpdpbusd`` adds 4
products to each of 16 int32 lanes, reading one block row. Its epilogue holds
what the quantization of ``x @ w + b`` leaves once the integer product is
known: with ``x ~ sx (xq - zx)`` and ``w[:, n] ~ sw[n] wq[:, n]``,
``scale[n] = sx sw[n]`` and ``offset[n] = b[n] - sx sw[n] zx sum_k wq[k, n]``
(``kiln.quantize`` computes both).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import AttrError, DTypeError, ShapeError
from . import attrs as A
from . import nanmath
from .registry import Op, register
from .shapes import FLOATS, is_static, same_dim, shape_str, static

#: the integer dtypes of quantized tensors
QUANTIZED = ("uint8", "int8")
#: ``dense_int8``'s accumulators cover a symbolic M padded to a multiple of this
ROW_BLOCK = 8


def _range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _zero_point(op: str, attrs: dict) -> None:
    low, high = _range(attrs["dtype"])
    if not low <= attrs["zero_point"] <= high:
        raise AttrError(f"got {attrs['zero_point']}, expected a {attrs['dtype']} ({low}..{high})", op=op,
                        arg="zero_point")


_QUANT_ATTRS = {"scale": A.Attr(A.positive_float, doc="the real value of one quantization step"),
                "zero_point": A.Attr(A.integer, default=0, doc="the integer that stands for 0.0"),
                "dtype": A.Attr(A.one_of(*QUANTIZED), default="uint8", doc="the quantized dtype")}


def quantized(v, scale: float, zero_point: int, dtype: str, reciprocal: bool = False):
    """The expression ``quantize`` computes of one float value ``v``."""
    return tirx.Cast(dtype, _codes(v, scale, zero_point, dtype, reciprocal))


def fake_quantized(x: te.Tensor, quantize: dict, dequantize: dict) -> te.Tensor:
    """``dequantize(quantize(x))`` on one grid as one stage, the same numbers
    (a zero may keep the sign of ``x``): the codes stay floats (whole numbers
    within the dtype's range), without the two conversions to ``dtype`` and
    back (``graph.lower`` computes a fused pair so: ONNX Runtime's QOperator
    ResNet-50 at batch 8, its kernels 71.9 -> 70.0 ms)."""
    zero, scale = tirx.const(dequantize["zero_point"], "float32"), tirx.const(dequantize["scale"], "float32")
    return te.compute(x.shape, lambda *i: (_codes(x[i], **quantize).astype("float32") - zero) * scale,
                      name="fake_quantize", tag="injective")


def _codes(v, scale: float, zero_point: int, dtype: str, reciprocal: bool = False):
    """``quantize``'s codes of ``v``, as floats of ``v``'s dtype."""
    low, high = _range(dtype)
    dt = v.dtype
    step = v * tirx.const(1.0 / scale, dt) if reciprocal else v / tirx.const(scale, dt)
    # clamped before rounding (the same codes: the bounds are whole numbers). While TVM scalarized loops
    # calling ``nearbyint`` (until ``te/__init__`` registered it vectorizable), LLVM vectorized a kernel's
    # write-back across the wrong loop (gathers), and rounding first made a convolution writing codes
    # 1.4-3.5x slower still
    step = tirx.max(tirx.min(step, tirx.const(high - zero_point, dt)), tirx.const(low - zero_point, dt))
    q = tirx.nearbyint(step) + tirx.const(zero_point, dt)
    return tirx.Select(tirx.isnan(v), tirx.const(zero_point, dt), q)  # NaN stands for nothing: the zero point


def quantized_ref(x: np.ndarray, scale: float, zero_point: int, dtype: str, reciprocal: bool = False) -> np.ndarray:
    """``quantize``'s numpy reference."""
    low, high = _range(dtype)
    with np.errstate(invalid="ignore"):
        step = x * x.dtype.type(1.0 / scale) if reciprocal else x / x.dtype.type(scale)
        q = np.clip(np.rint(step) + zero_point, low, high)
    return np.where(np.isnan(x), zero_point, q).astype(dtype)


class _Conversion(Op):
    """An elementwise change between float and quantized values: the shape
    kept, the zero point checked against the quantized dtype."""

    differentiable = False
    elementwise = True  # fused into its producer's write-back: a layer writing codes
    attrs = _QUANT_ATTRS

    def infer_shape(self, x, **attrs):
        _zero_point(self.name, attrs)
        return x


@register
class Quantize(_Conversion):
    """``clamp(round(x / scale) + zero_point)`` in ``dtype`` (ties to even, as
    ONNX; infinities saturate, NaN gives the zero point). ``reciprocal=True``
    multiplies by ``1 / scale`` instead, as a fused requantization does (ONNX
    Runtime's and oneDNN's int8 kernels): a vector division costs more than an
    int8 layer's whole write-back, and the product can differ from the
    quotient by one code where ``x / scale`` lies within a rounding error of a
    tie. ``kiln.quantize``'s models and the int8 ops' own quantizing stages
    use it; ONNX's ``QuantizeLinear`` divides."""

    name = "quantize"
    dtypes = FLOATS
    saturates = True
    attrs = {**_QUANT_ATTRS, "reciprocal": A.Attr(A.boolean, default=False, doc="multiply by 1 / scale")}

    def infer_dtype(self, x, scale, zero_point, dtype, reciprocal):
        return dtype

    def compute(self, x, scale, zero_point, dtype, reciprocal):
        return te.compute(x.shape, lambda *i: quantized(x[i], scale, zero_point, dtype, reciprocal), name=self.name,
                          tag="injective")

    def reference(self, x, scale, zero_point, dtype, reciprocal=False):
        return quantized_ref(x, scale, zero_point, dtype, reciprocal)


@register
class Dequantize(_Conversion):
    """``(x - zero_point) * scale`` as float32 (``quantize``'s inverse up to rounding)."""

    name = "dequantize"
    dtypes = QUANTIZED

    def infer_dtype(self, x, scale, zero_point, dtype):
        return "float32"

    def compute(self, x, scale, zero_point, dtype):
        return te.compute(x.shape, lambda *i: (x(*i).astype("float32") - tirx.const(zero_point, "float32"))
                          * tirx.const(scale, "float32"), name=self.name, tag="injective")

    def reference(self, x, scale, zero_point, dtype):
        return ((x.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)).astype(np.float32)


@register
class DequantizeAdd(Op):
    """``x + dequantize(codes)``: float32 x plus quantized ``codes`` of the
    same shape taken back to floats, ``(codes - zero_point) * scale`` — the
    residual add of an int8 layer whose residual comes as the uint8 codes
    its producer wrote (``graph.requantize``), in the layer's write-back."""

    name = "dequantize_add"
    differentiable = False
    elementwise = True
    arity = 2
    dtypes = ("float32", *QUANTIZED)
    attrs = _QUANT_ATTRS

    def infer_shape(self, x, codes, scale, zero_point, dtype):
        _zero_point(self.name, {"zero_point": zero_point, "dtype": dtype})
        if len(x) != len(codes) or not all(same_dim(a, b) for a, b in zip(x, codes)):
            raise ShapeError(f"got x {shape_str(x)} and codes {shape_str(codes)}, expected the same shape",
                             op=self.name, arg="codes")
        return tuple(x)

    def infer_dtype(self, x, codes, scale, zero_point, dtype):
        if x != "float32" or codes != dtype:
            raise DTypeError(f"got x {x} and codes {codes}, expected float32 and {dtype} (the dtype attribute)",
                             op=self.name, arg="codes")
        return "float32"

    def compute(self, x, codes, scale, zero_point, dtype):
        def value(*i):
            residual = (codes(*i).astype("float32") - tirx.const(zero_point, "float32")) * tirx.const(scale, "float32")
            return x(*i) + residual
        return te.compute(x.shape, value, name=self.name, tag="injective")

    def reference(self, x, codes, scale, zero_point, dtype):
        return (x + Dequantize().reference(codes, scale, zero_point, dtype)).astype(np.float32)


def pack_int8_weight(wq: np.ndarray, bn: int) -> np.ndarray:
    """An int8 (K, N) weight as ``dense_int8``'s blocks ``(ceil(N / bn),
    ceil(K / 4), bn, 4)``, zeros past K and N."""
    k, n = wq.shape
    k4, panels = -(-k // 4), -(-n // bn)
    padded = np.zeros((k4 * 4, panels * bn), np.int8)
    padded[:k, :n] = wq
    return np.ascontiguousarray(padded.reshape(k4, 4, panels, bn).transpose(2, 0, 3, 1))


def _weight_bits(op: str, name: str, value) -> int:
    bits = A.integer(op, name, value)
    if bits not in (7, 8):
        raise AttrError(f"got {value!r}, expected 7 or 8", op=op, arg=name)
    return bits


#: what an int8 product's weights promise: 8 (any int8) or 7 (within -63..63, so
#: that AVX2's ``vpmaddubsw`` sums a pair of products without saturating)
WEIGHT_BITS = A.Attr(_weight_bits, default=8, doc="7: the weights lie in -63..63 (AVX2's 8-bit dot product needs it)")


class Int8Product(Op):
    """An int8 product with its dequantizing epilogue: four operands of fixed
    dtypes (``operand_dtypes``: x, the packed int8 weight, scale, offset),
    float32 out, an optional ReLU, its own templates (family ``int8``)."""

    compute_bound = True
    relu_attr = True
    differentiable = False
    arity = 4
    family = "int8"  # its own templates (schedules/cpu/int8*.py), not the float products'
    operand_dtypes: tuple = ()  # per operand a dtype, or a tuple of the dtypes it may have
    affine_output = (2, 3)  # sums * scale + offset: a bias add or a BatchNorm after it folds in (graph.fold)

    def check(self, shapes, dtypes=None, attrs=None):
        workload = super().check(shapes, dtypes, attrs)
        want = [w if isinstance(w, tuple) else (w,) for w in self.operand_dtypes]  # each: its dtypes allowed
        if len(workload.dtypes) != len(want) or not all(d in w for d, w in zip(workload.dtypes, want)):
            raise AttrError(f"got dtypes {', '.join(workload.dtypes)}, expected "
                            f"{', '.join(' or '.join(w) for w in want)} (x, w, scale, offset)", op=self.name,
                            arg="dtypes")
        return workload


@register
class DenseInt8(Int8Product):
    """``relu?(float(x @ w) * scale + offset)``: uint8 rows (M, K) times an
    int8 weight in ``pack_int8_weight``'s blocks (P, K4, bn, 4), the products
    summed in int32; ``scale`` and ``offset`` (N,) float32 per output column."""

    name = "dense_int8"
    dtypes = ("uint8", "int8", "float32")
    operand_dtypes = ("uint8", "int8", "float32", "float32")
    attrs = {"relu": A.Attr(A.boolean, default=False, doc="apply relu after the epilogue"),
             "weight_bits": WEIGHT_BITS}

    def infer_shape(self, x, w, scale, offset, relu, weight_bits):
        if len(x) != 2 or len(w) != 4 or len(scale) != 1 or len(offset) != 1:
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, scale {shape_str(scale)}, offset "
                             f"{shape_str(offset)}, expected (M, K), (P, K4, bn, 4), (N,), (N,)", op=self.name,
                             arg="shapes")
        k, (panels, k4, bn, four), n = static(x[1]), (static(d) for d in w), static(scale[0])
        if four != 4 or not all(isinstance(v, int) for v in (k, k4, bn, n, panels)) or not (
                4 * (k4 - 1) < k <= 4 * k4) or not (bn * (panels - 1) < n <= bn * panels) or not same_dim(
                scale[0], offset[0]):
            raise ShapeError(f"got x {shape_str(x)}, w {shape_str(w)}, scale {shape_str(scale)}, offset "
                             f"{shape_str(offset)}: expected w to hold K = {k} in blocks of 4 and N = {n} in "
                             "panels of bn (pack_int8_weight), and one scale and offset per column", op=self.name,
                             arg="shapes")
        return (x[0], scale[0])

    def infer_dtype(self, x, w, scale, offset, relu, weight_bits):
        return "float32"

    def compute(self, x, w, scale, offset, relu, weight_bits):
        m, k = x.shape
        panels, k4, bn, _ = w.shape
        rk, rr = te.reduce_axis((0, k4), "k4"), te.reduce_axis((0, 4), "r")
        # a symbolic M (a batch) is padded to ROW_BLOCK rows, the padding rows reading the last row again,
        # so a register tile of rows divides it (no predicate: the dot instruction's block must be whole)
        rows = m if is_static(m) else tirx.floordiv(m + ROW_BLOCK - 1, ROW_BLOCK) * ROW_BLOCK

        def xv(i, kk):
            i = i if rows is m else tirx.min(i, m - 1)
            return x[i, kk] if static(k) % 4 == 0 else tirx.if_then_else(kk < k, x[i, kk], tirx.const(0, "uint8"))
        acc = te.compute((rows, panels, bn), lambda i, p, j: te.sum(
            xv(i, rk * 4 + rr).astype("int32") * w[p, rk, j, rr].astype("int32"), axis=[rk, rr]),
            name="dense_int8_acc", tag="matmul")

        def epilogue(i, n):
            v = acc[i, n // bn, n % bn].astype("float32") * scale[n] + offset[n]
            return nanmath.relu(v) if relu else v
        return te.compute((m, scale.shape[0]), epilogue, name=self.name, tag="matmul")

    def reference(self, x, w, scale, offset, relu, weight_bits):
        panels, k4, bn, _ = w.shape
        wq = w.transpose(1, 3, 0, 2).reshape(k4 * 4, panels * bn)[:x.shape[1], :scale.shape[0]]
        # integers whose sums stay below 2**53: exact in float64, where numpy's matmul is BLAS's (an int64
        # matmul is numpy's own loop: kiln.quantize's error report on BERT-base took 78 s in it)
        acc = x.astype(np.float64) @ wq.astype(np.float64)
        out = (acc.astype(np.float32) * scale + offset).astype(np.float32)
        return np.maximum(out, 0) if relu else out

    def flops(self, shapes, **attrs):
        (m, k), _, (n,), _ = shapes
        return 2.0 * static(m) * static(k) * static(n) if all(isinstance(static(v), int) for v in (m, k, n)) else 0.0
