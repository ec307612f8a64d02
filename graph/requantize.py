"""Hand int8 layers their input as uint8 codes instead of float.

Condition: a float32 value that the graph does not return, computed by a
``compute_bound`` node (a convolution or dense layer, its fused epilogue
included), read by at least one ``quantized_input`` op (``conv2d_int8``) as
its first input, all of them with the same ``in_scale`` and
``in_zero_point`` (``kiln.quantize`` observed the same tensor for each), and
otherwise only as the operand of an ``add`` in another node's epilogue (a
residual add). Rewrite: the producer's epilogue ends with ``quantize`` to
those codes, so it writes uint8; the int8 layers take the codes as they are
(they quantized the same values with the same rounding themselves before:
bit for bit the same), and each residual add becomes ``dequantize_add``,
which takes the codes back to floats in the reader's write-back — the
residual then carries the rounding of its codes, as it does where ONNX
Runtime runs a QDQ model's adds. Between ResNet-50's convolutions every
activation then moves as bytes instead of floats, both ways.
"""
from __future__ import annotations

from ..te import get_op
from .ir import Graph, Node, Value

QUANTIZE, DEQUANTIZE_ADD = get_op("quantize"), get_op("dequantize_add")


def _residual(reader: Node, value: Value) -> bool:
    """Whether ``reader`` reads ``value`` only as the operand of an ``add`` in its epilogue."""
    if any(v is value for v in reader.inputs) or (reader.prologue is not None and any(
            v is value for v in reader.prologue.operands())):
        return False
    uses = [(op, others) for op, _, others in reader.epilogue if any(v is value for v in others)]
    return len(uses) == 1 and uses[0][0].sums_operands and len(uses[0][1]) == 1


def _codes(graph: Graph, node: Node) -> tuple | None:
    """``(in_scale, in_zero_point)`` the int8 readers of ``node``'s output
    quantize it with, if every reader can take the codes; else None."""
    if not node.op.compute_bound or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if out.dtype != "float32" or graph.is_output(out):
        return None
    codes = set()
    for reader in {id(n): n for n in graph.users(out)}.values():
        if reader.op.quantized_input and reader.inputs[0] is out and \
                not any(v is out for v in reader.operands()[1:]):
            codes.add((reader.attrs["in_scale"], reader.attrs["in_zero_point"]))
        elif not _residual(reader, out):
            return None
    return codes.pop() if len(codes) == 1 else None


def requantize(graph: Graph) -> int:
    """Make each producer whose readers can take its uint8 codes write them,
    in place; return how many do."""
    count = 0
    for node in graph.nodes:
        codes = _codes(graph, node)
        if codes is None:
            continue
        scale, zero_point = codes
        attrs = QUANTIZE.parse_attrs({"scale": scale, "zero_point": zero_point, "dtype": "uint8"})
        out = node.outputs[0]
        node.epilogue.append((QUANTIZE, attrs, []))
        out.dtype = "uint8"
        for reader in graph.users(out):
            reader.epilogue = [(DEQUANTIZE_ADD, attrs, others) if any(v is out for v in others) else (op, a, others)
                               for op, a, others in reader.epilogue]
        count += 1
    return count
