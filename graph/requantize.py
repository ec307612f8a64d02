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
Runtime runs a QDQ model's adds. A max pool between (ResNet's stem) pools
the codes. Between ResNet-50's convolutions every activation then moves as
bytes instead of floats, both ways.
"""
from __future__ import annotations

from ..te import get_op
from .ir import Graph, Node, Value
from .qdq import grid

QUANTIZE, DEQUANTIZE, DEQUANTIZE_ADD = get_op("quantize"), get_op("dequantize"), get_op("dequantize_add")
MAX_POOL = get_op("max_pool2d")


def _residual(reader: Node, value: Value) -> bool:
    """Whether ``reader`` reads ``value`` only as the operand of an ``add`` in its epilogue."""
    if any(v is value for v in reader.inputs) or (reader.prologue is not None and any(
            v is value for v in reader.prologue.operands())):
        return False
    uses = [(op, others) for op, _, others in reader.epilogue if any(v is value for v in others)]
    return len(uses) == 1 and uses[0][0].sums_operands and len(uses[0][1]) == 1


def _passes_codes(reader: Node, value: Value, graph: Graph) -> bool:
    """Whether ``reader`` is a max pool of ``value`` alone, nothing fused: a
    max of codes is the codes of the max (quantizing never reorders values;
    its padding, the least code, never wins), so it can pool the codes."""
    return reader.op is MAX_POOL and reader.inputs[0] is value and not reader.epilogue and \
        reader.prologue is None and not graph.is_output(reader.outputs[0])


def _reader_codes(graph: Graph, value: Value, chain: list) -> set | None:
    """The ``(in_scale, in_zero_point)`` pairs the int8 readers of ``value``
    (and of the max pools between) quantize it with, if every reader can take
    codes; else None. Appends to ``chain`` each value that would hold codes."""
    chain.append(value)
    codes = set()
    for reader in {id(n): n for n in graph.users(value)}.values():
        if reader.op.quantized_input and reader.inputs[0] is value and \
                not any(v is value for v in reader.operands()[1:]):
            codes.add((reader.attrs["in_scale"], reader.attrs["in_zero_point"]))
        elif _passes_codes(reader, value, graph):
            inner = _reader_codes(graph, reader.outputs[0], chain)
            if inner is None:
                return None
            codes |= inner
        elif not _residual(reader, value):
            return None
    return codes


def _codes(graph: Graph, node: Node) -> tuple | None:
    """``(in_scale, in_zero_point, values)``: the one quantization the int8
    readers of ``node``'s output use and the values that would then hold
    codes, if every reader can take them; else None."""
    if not node.op.compute_bound or len(node.outputs) != 1:
        return None
    out, chain = node.outputs[0], []
    if out.dtype != "float32" or graph.is_output(out):
        return None
    codes = _reader_codes(graph, out, chain)
    return (*codes.pop(), chain) if codes is not None and len(codes) == 1 else None


def _ends_on_grid(node: Node, attrs: dict) -> bool:
    """Whether ``node``'s epilogue ends by quantizing to the codes ``attrs``
    name and dequantizing them again: without the dequantize it writes them."""
    if len(node.epilogue) < 2:
        return False
    (q, qa, _), (dq, da, _) = node.epilogue[-2:]
    return q is QUANTIZE and dq is DEQUANTIZE and grid(qa) == grid(da) == grid(attrs)


def requantize(graph: Graph) -> int:
    """Make each producer whose readers can take its uint8 codes write them,
    in place; return how many do."""
    count = 0
    for node in graph.nodes:
        codes = _codes(graph, node)
        if codes is None:
            continue
        scale, zero_point, chain = codes
        attrs = DEQUANTIZE_ADD.parse_attrs({"scale": scale, "zero_point": zero_point, "dtype": "uint8"})
        if _ends_on_grid(node, attrs):  # a QDQ file's quantize/dequantize pair (``graph.qdq``): its codes
            node.epilogue.pop()
        else:  # the codes the int8 readers' own quantizing stages computed: by the reciprocal (``conv2d_int8``)
            node.epilogue.append((QUANTIZE, QUANTIZE.parse_attrs({**attrs, "reciprocal": True}), []))
        for value in chain:
            value.dtype = "uint8"
            for reader in graph.users(value):
                reader.epilogue = [(DEQUANTIZE_ADD, attrs, others) if any(v is value for v in others)
                                   else (op, a, others) for op, a, others in reader.epilogue]
        count += 1
    return count
