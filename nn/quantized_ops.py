"""The ops ``kiln.quantize`` rewrites, and what each becomes: the products
with a weight parameter it finds (``find``: ``dense``, a 2-D ``matmul`` with
a weight as ``b``, an NCHW ``conv2d`` of one group or depthwise), which values are weight
parameters (``Weights``), and their int8 replacements (``QuantizedDense``:
``quantize`` then ``dense_int8``; ``QuantizedConv``: ``conv2d_int8`` or
``depthwise_conv2d_int8``, which quantize their input themselves).

Weights are int8, symmetric (zero point 0, -127..127) per output channel or
per tensor; inputs uint8 with the scale and zero point an observer chose.
With ``x ~ sx (xq - zx)`` and ``w[k] ~ sw[k] wq[k]``, a product's output
channel ``k`` is ``sx sw[k] (sum xq wq[k]) - sx sw[k] zx sum(wq[k]) + b[k]``:
the kernels take ``scale[k] = sx sw[k]`` and that ``offset[k]``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import KilnError
from ..te import call, get_op
from ..te.quantize import pack_int8_weight
from ..te.quantize_conv import pack_conv_int8_weight
from ..te.quantize_depthwise import depthwise_weight, pack_depthwise_int8_weight
from ..te.registry import intercept
from .module import Parameter
from .tensor import Tensor

#: output channels per weight panel (16 int32 lanes: one ``vpdpbusd``)
PANEL = 16


class Found(NamedTuple):
    """A product ``find`` can quantize: the weight value it reads, its input,
    its bias (dense), whether it reads the weight transposed, and a conv's
    ``stride``, ``padding`` and ``groups`` (None for a dense product)."""

    weight: object
    x: object
    bias: object
    transposed: bool
    window: dict | None


def find(op, inputs, attrs) -> Found | None:
    """The product an op application is, if ``kiln.quantize`` can take it."""
    window = None
    if op.name == "dense":
        x, w, b = inputs
        transposed = False
    elif op.name == "matmul" and len(inputs) == 2 and not attrs.get("transpose_a"):
        (x, w), b = inputs, None
        transposed = bool(attrs.get("transpose_b"))
    elif op.name == "conv2d":
        try:
            parsed = op.parse_attrs(attrs)
        except KilnError:
            return None  # the op refuses them itself
        (x, w), b, transposed = inputs, None, False
        groups = parsed["groups"]
        if parsed["layout"] != "NCHW" or tuple(parsed["dilation"]) != (1, 1) or not (
                groups == 1 or (depthwise_weight(w.shape, groups) and x.shape[1:2] == (groups,))):
            return None
        window = {"stride": tuple(parsed["stride"]), "padding": tuple(parsed["padding"]), "groups": groups}
    else:
        return None
    rank = 2 if window is None else 4
    if len(x.shape) != rank or len(w.shape) != rank or str(x.dtype) != "float32" or str(w.dtype) != "float32":
        return None
    return Found(w, x, b, transposed, window)


def unsupported(op, inputs, attrs) -> str | None:
    """Why a product that reads a weight Parameter but that ``find`` does
    not take stays float; None for any other op application."""
    if op.name not in ("dense", "matmul", "conv2d") or len(inputs) < 2 or not isinstance(inputs[1], Parameter):
        return None
    if str(inputs[0].dtype) != "float32" or str(inputs[1].dtype) != "float32":
        return f"a {inputs[1].dtype} product (int8 replaces float32 ones)"
    if op.name == "conv2d":
        try:
            parsed = op.parse_attrs(attrs)
        except KilnError:
            return None
        if parsed["groups"] != 1:
            return "a grouped convolution of more than one channel per group (no int8 kernel for it)"
        if tuple(parsed["dilation"]) != (1, 1):
            return "a dilated convolution (no int8 kernel for it)"
        return "an NHWC convolution (conv2d_int8 is NCHW)"
    return "a product of more than 2 dims or with its input transposed (no int8 kernel for it)"


class Weights:
    """Which values a product reads are weight parameters: a Parameter read
    as it is, or its transpose made in the graph (an imported ``Gemm`` with
    ``transB``), kept for one run of the model."""

    def __init__(self):
        self._transposes: dict = {}  # id(transposed value) -> (the value, kept so its id stays its own; Parameter)

    def transpose(self, op, inputs, attrs):
        """A 2-D Parameter's transpose, applied here and remembered; None for any other op."""
        if op.name != "transpose" or not isinstance(inputs[0], Parameter) or len(inputs[0].shape) != 2:
            return None
        with intercept(None):
            out = call("transpose", *inputs, **attrs)
        self._transposes[id(out)] = (out, inputs[0])
        return out

    def resolve(self, found: Found):
        """``(Parameter, transposed)`` for the weight ``found`` reads, or None."""
        kept = self._transposes.get(id(found.weight))
        if kept is not None:
            return kept[1], not found.transposed
        return (found.weight, found.transposed) if isinstance(found.weight, Parameter) else None


def _int8(w: np.ndarray, axis, per_channel: bool, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """``(wq int8, scales)``: ``w`` symmetric in ``bits`` bits (8: -127..127,
    7: -63..63), one scale per output channel (the max over ``axis``) or one for all."""
    top = np.abs(w).max(axis=axis) if per_channel else np.full(w.shape[0 if axis != 0 else 1], np.abs(w).max())
    limit = 2 ** (bits - 1) - 1
    scales = np.where(top > 0, top / limit, 1.0)
    shaped = scales if axis == 0 else scales.reshape((-1,) + (1,) * (w.ndim - 1))
    return np.clip(np.rint(w / shaped), -limit, limit).astype(np.int8), scales


def offset(step: np.ndarray, zero_point: int, wq: np.ndarray, axes, bias=None) -> np.ndarray:
    """``b - step * zp * sum(wq)`` per output channel (the module docstring's derivation; ``axes``: the
    weight's axes other than the output channel's)."""
    b = np.zeros(step.shape) if bias is None else np.asarray(bias, np.float64)
    return (b - step * zero_point * wq.astype(np.int64).sum(axis=axes)).astype(np.float32)


class QuantizedDense:
    """A (K, N) product in int8: ``x`` quantized to uint8, times the int8
    weight in ``pack_int8_weight``'s panels, the int32 sums times ``scale``
    plus ``offset`` per output column (float32; the bias is in ``offset``)."""

    def __init__(self, weight: np.ndarray, bias, in_scale: float, in_zero_point: int, per_channel: bool = True,
                 weight_bits: int = 8):
        w = np.asarray(weight, np.float64)
        self.in_scale, self.in_zero_point, self.weight_bits = float(in_scale), int(in_zero_point), weight_bits
        wq, self.weight_scale = _int8(w, 0, per_channel, weight_bits)
        step = self.in_scale * self.weight_scale
        self.weight = Tensor(pack_int8_weight(wq, PANEL))
        self.scale = Tensor(step.astype(np.float32))
        self.offset = Tensor(offset(step, self.in_zero_point, wq, 0, bias))

    def __call__(self, x, relu: bool = False):
        q = call("quantize", x, scale=self.in_scale, zero_point=self.in_zero_point, dtype="uint8", reciprocal=True)
        return call("dense_int8", q, self.weight, self.scale, self.offset, relu=relu, weight_bits=self.weight_bits)

    def reference(self, x: np.ndarray) -> np.ndarray:
        """What the int8 kernels compute on ``x`` (their numpy references: no kernel is built)."""
        q = get_op("quantize").reference(x, scale=self.in_scale, zero_point=self.in_zero_point, dtype="uint8",
                                         reciprocal=True)
        return get_op("dense_int8").reference(q, self.weight.numpy(), self.scale.numpy(), self.offset.numpy(),
                                              relu=False, weight_bits=self.weight_bits)


class QuantizedConv:
    """An OIHW convolution in int8 (``conv2d_int8``, or ``depthwise_conv2d_int8``
    where ``window`` has a group per channel: the input quantized inside the
    op); per output channel ``scale`` and ``offset``. A depthwise weight
    keeps 8 bits: its taps are not summed in pairs of bytes (``weight_bits``
    is AVX2's ``vpmaddubsw``'s)."""

    def __init__(self, weight: np.ndarray, in_scale: float, in_zero_point: int, per_channel: bool, window: dict,
                 weight_bits: int = 8):
        w = np.asarray(weight, np.float64)
        self.in_scale, self.in_zero_point = float(in_scale), int(in_zero_point)
        self.window = {"stride": tuple(window["stride"]), "padding": tuple(window["padding"])}
        self.channels = w.shape[0] if window.get("groups", 1) > 1 else None
        self.weight_bits = 8 if self.channels else weight_bits
        wq, self.weight_scale = _int8(w, (1, 2, 3), per_channel, self.weight_bits)
        step = self.in_scale * self.weight_scale
        packed = pack_depthwise_int8_weight(wq, PANEL) if self.channels else pack_conv_int8_weight(wq, PANEL)
        self.weight = Tensor(packed)
        self.scale = Tensor(step.astype(np.float32))
        self.offset = Tensor(offset(step, self.in_zero_point, wq, (1, 2, 3)))

    def _op_attrs(self, relu: bool) -> tuple:
        """The int8 op and its attributes."""
        attrs = dict(in_scale=self.in_scale, in_zero_point=self.in_zero_point, relu=relu, **self.window)
        if self.channels:
            return "depthwise_conv2d_int8", dict(attrs, channels=self.channels)
        return "conv2d_int8", dict(attrs, weight_bits=self.weight_bits)

    def __call__(self, x, relu: bool = False):
        op, attrs = self._op_attrs(relu)
        return call(op, x, self.weight, self.scale, self.offset, **attrs)

    def reference(self, x: np.ndarray) -> np.ndarray:
        """What the int8 op computes on ``x`` (its numpy reference: no kernel is built)."""
        op, attrs = self._op_attrs(False)
        return get_op(op).reference(x, self.weight.numpy(), self.scale.numpy(), self.offset.numpy(), in_block=0,
                                    out_block=False, **attrs)


def quantized(weight: np.ndarray, bias, window, in_scale: float, in_zero_point: int, per_channel: bool,
              weight_bits: int = 8):
    """The int8 replacement of a product (``window`` None: dense, with ``weight`` as (K, N)),
    its weights in ``weight_bits`` bits."""
    if window is None:
        return QuantizedDense(weight, bias, in_scale, in_zero_point, per_channel, weight_bits)
    return QuantizedConv(weight, in_scale, in_zero_point, per_channel, window, weight_bits)


def float_output(weight: np.ndarray, bias, window, x: np.ndarray) -> np.ndarray:
    """The float product's output on ``x`` (float64; the report's reference)."""
    if window is None:
        return x.astype(np.float64) @ weight + (0.0 if bias is None else bias)
    return get_op("conv2d").reference(x.astype(np.float64), weight.astype(np.float64), layout="NCHW",
                                      dilation=(1, 1), **window)
