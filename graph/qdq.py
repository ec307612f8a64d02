"""Give a value one fake quantization that all its int8 readers share.

A QDQ file (ONNX Runtime's ``quantize_static``) writes a residual block's
sum once and reads it twice: the next block's convolutions quantize it
(``fuse_qdq`` made them ``conv2d_int8`` with the file's scale), and the next
residual add reads ``DequantizeLinear(QuantizeLinear(sum))``, a separate
``quantize``/``dequantize`` pair. The pair is an elementwise node of its own
that no epilogue takes (its first input is the sum, not a product's
result), so the add reading it stays a separate kernel on floats in NCHW,
and the blocks' products cannot hand each other codes.

Condition: a float32 value, not an output, read by at least one
``quantize`` whose only reader is a ``dequantize`` of the same scale, zero
point and dtype; every other reader is one such pair too, or an int8
product (``Op.quantized_input``) that quantizes the value with the same
scale and zero point as its first input and reads it nowhere else.
Rewrite: the first pair moves to right after the value's producer and every
reader reads its result: the other pairs' readers (the same values) and the
int8 products (quantizing a value already on the grid gives the codes it
came from). The other pairs are dropped. The value's producer then takes
the pair and the add as its epilogue (``graph.fuse``); ``graph.requantize``
makes it write the codes the products read.

``by_multiplier`` then makes every ``quantize`` in an int8 product's
epilogue multiply by ``1 / scale`` (``reciprocal``), as ONNX Runtime's own
kernels for the same file requantize (``QLinearConv``, ``QLinearAdd``: a
float multiplier): the file's ``QuantizeLinear`` divides, and a vector
division cost more than the rest of a convolution's write-back (a 1x1
convolution of ResNet-50 writing fake-quantized floats, batch 8: 1.56 -> 1.15 ms).
"""
from __future__ import annotations

from ..te import get_op
from .ir import Graph, Node, Value

QUANTIZE, DEQUANTIZE = get_op("quantize"), get_op("dequantize")


def grid(attrs: dict) -> tuple:
    """``(scale, zero_point, dtype)`` of a ``quantize``/``dequantize``: the codes it maps to or from."""
    return attrs["scale"], attrs["zero_point"], attrs["dtype"]


def _pair(graph: Graph, node: Node, value: Value) -> Node | None:
    """The ``dequantize`` that alone reads ``node``, a ``quantize`` of ``value``
    alone, on the same grid; else None."""
    if node.op is not QUANTIZE or node.inputs[0] is not value or node.epilogue or node.prologue is not None:
        return None
    dq = graph.sole_user(node.outputs[0])
    same = dq is not None and dq.op is DEQUANTIZE and not dq.epilogue and dq.inputs[0] is node.outputs[0]
    return dq if same and grid(dq.attrs) == grid(node.attrs) else None


def _reads_first_only(node: Node, value: Value) -> bool:
    return node.inputs[0] is value and not any(v is value for v in node.operands()[1:])


def _shared(graph: Graph, value: Value) -> tuple | None:
    """``(pairs, products)`` reading ``value`` when the condition holds."""
    if value.dtype != "float32" or graph.is_output(value):
        return None
    pairs, products, grids = [], [], set()
    for reader in {id(n): n for n in graph.users(value)}.values():
        dq = _pair(graph, reader, value)
        if dq is not None:
            pairs.append((reader, dq))
            grids.add(grid(reader.attrs))
        elif reader.op.quantized_input and _reads_first_only(reader, value) and reader.attrs.get("in_scale"):
            products.append(reader)
            grids.add((reader.attrs["in_scale"], reader.attrs["in_zero_point"], "uint8"))
        else:
            return None
    return (pairs, products) if pairs and len(grids) == 1 and (products or len(pairs) > 1) else None


def share_fake_quant(graph: Graph) -> int:
    """Apply the rewrite wherever the condition holds; return how many values it shared."""
    count = 0
    quantized = {id(n.inputs[0]) for n in graph.nodes if n.op is QUANTIZE}  # the candidates: finding readers scans
    for producer in list(graph.nodes):
        for value in producer.outputs:
            found = _shared(graph, value) if id(value) in quantized else None
            if found is None:
                continue
            (q, dq), *others = found[0]
            for node in (q, dq):
                graph.nodes.remove(node)
            at = graph.nodes.index(producer) + 1
            graph.nodes[at:at] = [q, dq]
            shared = dq.outputs[0]
            for other_q, other_dq in others:
                graph.replace_uses(other_dq.outputs[0], shared)
                graph.remove(other_dq)
                graph.remove(other_q)
            for product in found[1]:
                product.inputs[0] = shared
            count += 1
    return count


def by_multiplier(graph: Graph) -> int:
    """Make each dividing ``quantize`` in an int8 product's epilogue multiply
    by its reciprocal; return how many it changed."""
    count = 0
    for node in graph.nodes:
        if node.op.family != "int8":
            continue
        for i, (op, attrs, others) in enumerate(node.epilogue):
            if op is QUANTIZE and not attrs["reciprocal"]:
                node.epilogue[i] = (op, QUANTIZE.parse_attrs({**attrs, "reciprocal": True}), others)
                count += 1
    return count
