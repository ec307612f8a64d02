"""``fuse_qdq``: the QDQ patterns of an ONNX graph that run as kiln's int8
kernels (``frontend/onnx_quant.py`` converts the fused nodes).

A ``Conv``, ``MatMul`` or ``Gemm`` fuses when its input is
``DequantizeLinear(QuantizeLinear(x))`` with one uint8 scale and zero point
(the same on both), its weight ``DequantizeLinear`` of an int8 initializer
with zero point 0 (one scale, or one per output channel), and its bias (if
any) a float initializer or ``DequantizeLinear`` of an int32 one; a ``Conv``
must be 2-D, of one group or depthwise (a group per channel, one output
each), and of dilation 1; a ``Gemm`` plain (``alpha`` =
``beta`` = 1, no ``transA``). Every other one stays on the dequantized float
path, computing what the file says, and the report says why. A ``MatMul``
whose second operand is an activation quantized the same way (attention's
products) fuses into one ``matmul_int8`` of the two operands' codes.
"""
from __future__ import annotations

import numpy as np

from ..te.quantize_depthwise import depthwise_weight

#: why a file's int8 products stay float on a CPU without AVX-512 VNNI
NO_VNNI = ("the target has no AVX-512 VNNI: the file's 8-bit weights would saturate AVX2's vpmaddubsw (kiln.quantize "
           "gives it 7-bit ones), and int8 in int32 arithmetic runs about 5x slower than float")
#: ops whose QDQ form runs as an int8 kernel, and the fused op type each becomes
FUSABLE = {"Conv": "QDQConv", "MatMul": "QDQMatMul", "Gemm": "QDQMatMul"}


#: the inputs of quantized ops that are scales or zero points
SCALE_INPUTS = {"QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2), "QLinearConv": (1, 2, 4, 5, 6, 7),
                "QLinearMatMul": (1, 2, 4, 5, 6, 7), "QGemm": (1, 2, 4, 5, 7, 8), "QLinearAdd": (1, 2, 4, 5, 6, 7),
                "QLinearMul": (1, 2, 4, 5, 6, 7), "QLinearGlobalAveragePool": (1, 2, 3, 4),
                "QLinearSoftmax": (1, 2, 3, 4), "QLinearSigmoid": (1, 2, 3, 4), "QLinearLeakyRelu": (1, 2, 3, 4)}


def scale_inputs(nodes) -> set:
    """Initializer names read as a quantized op's scale or zero point:
    constants, not trained weights."""
    return {n.input[i] for n in nodes for i in SCALE_INPUTS.get(n.op_type, ()) if len(n.input) > i and n.input[i]}


class _Graph:
    def __init__(self, nodes, arrays: dict):
        self.producer = {out: n for n in nodes for out in n.output}
        self.arrays = arrays  # initializer name -> numpy

    def const(self, name: str):
        return self.arrays.get(name)

    def made_by(self, name: str, op_type: str):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def activation(self, name: str) -> bool:
        """Whether ``name`` is computed from the model's inputs: neither an
        initializer nor ``DequantizeLinear`` of one (a weight)."""
        dq = self.made_by(name, "DequantizeLinear")
        return self.const(name) is None and (dq is None or self.const(dq.input[0]) is None)

    def qparams(self, node):
        """``(scale array, zero point array)`` of a Q/DQ node, or None when not constants."""
        scale = self.const(node.input[1])
        zp = self.const(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
        return None if scale is None or zp is None else (np.asarray(scale), np.asarray(zp))


def _activation(graph: _Graph, name: str):
    """``(float input name, scale, zero point)`` of ``DequantizeLinear(QuantizeLinear(x))``, or a reason."""
    dq = graph.made_by(name, "DequantizeLinear")
    q = graph.made_by(dq.input[0], "QuantizeLinear") if dq is not None else None
    if q is None:
        return "its input is not QuantizeLinear -> DequantizeLinear"
    a, b = graph.qparams(q), graph.qparams(dq)
    if a is None or b is None or a[0].size != 1 or a[1].size != 1:
        return "its input's scale or zero point is not one constant"
    if a[1].dtype != np.uint8 or float(a[0]) != float(b[0]) or int(a[1]) != int(b[1]):
        return "its input is not quantized to uint8 with one scale and zero point on both sides"
    return q.input[0], float(a[0]), int(a[1])


def _weight(graph: _Graph, name: str, channel_axis: int):
    """``(int8 initializer name, scales)`` of a weight read through DequantizeLinear, or a reason."""
    dq = graph.made_by(name, "DequantizeLinear")
    wq = graph.const(dq.input[0]) if dq is not None else None
    params = graph.qparams(dq) if dq is not None else None
    if wq is None or params is None or wq.dtype != np.int8:
        return "its weight is not DequantizeLinear of an int8 initializer"
    scale, zp = params
    if np.any(zp != 0):
        return "its weight's zero point is not 0 (kiln's int8 weights are symmetric)"
    axis = int(next((a.i for a in dq.attribute if a.name == "axis"), 1)) % wq.ndim
    if scale.size > 1 and axis != channel_axis:
        return f"its weight is quantized along axis {axis}, not per output channel"
    return dq.input[0], scale


def _bias(graph: _Graph, node, index: int):
    """The bias as a float array (None: none), or a reason."""
    if len(node.input) <= index or not node.input[index]:
        return None
    name = node.input[index]
    if graph.const(name) is not None and graph.const(name).dtype.kind == "f":
        return np.asarray(graph.const(name), np.float64)
    dq = graph.made_by(name, "DequantizeLinear")
    params = graph.qparams(dq) if dq is not None else None
    bq = graph.const(dq.input[0]) if dq is not None else None
    if bq is None or params is None or bq.dtype != np.int32:
        return "its bias is neither a float initializer nor DequantizeLinear of an int32 one"
    return (bq.astype(np.float64) - params[1].astype(np.float64)) * params[0].astype(np.float64)


def fuse_qdq(nodes, arrays: dict, outputs, dot: bool = True) -> tuple[list, dict, list]:
    """``(nodes, new constants, report)``: the fusable QDQ ops replaced by
    fused nodes, the QDQ nodes no one reads any more dropped; the report a
    ``(node name, op type, "int8" or "float", why)`` per Conv/MatMul/Gemm
    with a DequantizeLinear input. ``dot``: whether the target has an 8-bit
    dot product; without one nothing fuses (int8 would run slower than the
    dequantized float path, ``NO_VNNI``)."""
    from onnx import helper

    graph, fused, constants, report = _Graph(nodes, arrays), [], {}, []
    for node in nodes:
        kind = FUSABLE.get(node.op_type)
        quantized = kind is not None and any(graph.made_by(i, "DequantizeLinear") for i in node.input[:2])
        if not quantized:
            fused.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        why = None if dot else NO_VNNI
        if node.op_type == "Conv" and (any(d != 1 for d in attrs.get("dilations", []))
                                       or len(arrays.get(node.input[1], np.zeros((1, 1, 1, 1))).shape) != 4):
            why = "a dilated or non-2-D convolution"
        if node.op_type == "Gemm" and (attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0
                                       or attrs.get("transA", 0)):
            why = "a Gemm with alpha, beta or transA"
        act = why or _activation(graph, node.input[0])
        if node.op_type == "MatMul" and graph.activation(node.input[1]) and not isinstance(act, str):
            fused.append(_activation_product(graph, node, act, report))  # a product of two activations
            continue
        axis = 0 if node.op_type == "Conv" or (node.op_type == "Gemm" and attrs.get("transB", 0)) else 1
        weight = act if isinstance(act, str) else _weight(graph, node.input[1], axis)
        group = attrs.get("group", 1)
        if node.op_type == "Conv" and not isinstance(weight, str) and group != 1 and not depthwise_weight(
                graph.const(weight[0]).shape, group):
            weight = "a grouped convolution of more than one channel per group"
        bias = weight if isinstance(weight, str) else _bias(graph, node, 2) if node.op_type != "MatMul" else None
        reason = next((v for v in (act, weight, bias) if isinstance(v, str)), None)
        if reason is not None:
            report.append((node.name, node.op_type, "float", reason))
            fused.append(node)
            continue
        (x, x_scale, x_zp), (w, w_scale) = act, weight
        scale_name = f"{node.name}/kiln_w_scale"
        constants[scale_name] = np.asarray(w_scale, np.float32).reshape(-1)
        inputs = [x, w, scale_name]
        if bias is not None:
            constants[f"{node.name}/kiln_bias"] = bias.astype(np.float32)
            inputs.append(f"{node.name}/kiln_bias")
        fused.append(helper.make_node(kind, inputs, list(node.output), name=node.name, domain="kiln",
                                      x_scale=x_scale, x_zero_point=x_zp,
                                      **{k: v for k, v in attrs.items() if k not in ("alpha", "beta", "transA")}))
        report.append((node.name, node.op_type, "int8", ""))
    return _live(fused, outputs), constants, report


def _activation_product(graph: _Graph, node, a, report: list):
    """A ``MatMul`` of ``a`` (its ``_activation``) and a second activation:
    fused into a ``QDQMatMulInt8`` node where that one is quantized too, else
    the node as it is, on the float path. Appends its report line."""
    from onnx import helper

    b = _activation(graph, node.input[1])
    if isinstance(b, str):
        why = f"its second operand is an activation not quantized as its first is ({b})"
        report.append((node.name, node.op_type, "float", why))
        return node
    (x, x_scale, x_zp), (y, y_scale, y_zp) = a, b
    report.append((node.name, node.op_type, "int8", ""))
    return helper.make_node("QDQMatMulInt8", [x, y], list(node.output), name=node.name, domain="kiln",
                            a_scale=x_scale, a_zero_point=x_zp, b_scale=y_scale, b_zero_point=y_zp)


def _live(nodes, outputs) -> list:
    """``nodes`` without those whose outputs no kept node or graph output reads."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
    return kept[::-1]
