"""Recognize an activation written out as elementwise arithmetic, and make it one op.

Models write GELU by its formula as often as they call it: GPT-2's
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` and an
ONNX file's ``x * 0.5 * (1 + erf(x / sqrt(2)))`` arrive as six to eight
elementwise nodes reading ``x`` three times. Fusion (``graph.fuse``) takes
chains, not such a cone, so they ran as two kernels of their own after the
dense layer writing ``x``. ``fuse_activations`` finds each cone of
elementwise nodes reading one value (more than once: what a chain of
fused ops cannot compute) and scalar constants, whose intermediate values
nothing outside reads, and compares the function it computes with each
known activation on sample points (numpy references, float64): the order
and spelling of the arithmetic do not matter, only what it computes, and
no op is recognized by its name. A match becomes that op
(``gelu``), which then fuses into its producer like any elementwise op.
ONNX Runtime's ``GeluFusion`` and ``FastGeluFusion`` do the same by
matching node patterns.
"""
from __future__ import annotations

import numpy as np

from ..te import get_op
from .ir import Graph, Node

#: (op, attrs) of each activation a cone may compute
ACTIVATIONS = (("gelu", {"approximate": "tanh"}), ("gelu", {"approximate": "none"}))
#: the most nodes of a cone
MAX_NODES = 12
#: the sample points, and how close (relative to the activation's largest value) a cone must come
SAMPLES = np.concatenate([np.linspace(-6.0, 6.0, 97), [-0.01, 0.003, 0.5]])
TOLERANCE = 1e-6


def _scalar(value) -> bool:
    return value.is_const and value.data.size == 1


def _cone(root: Node, stop=None) -> tuple[dict, dict]:
    """``(leaves, nodes)`` by id: the elementwise nodes of the root's shape
    that ``root`` depends on, back to the values outside (``stop``, when
    given, is one of them) but for scalar constants."""
    shape = root.outputs[0].shape
    nodes, leaves, stack = {id(root): root}, {}, [root]
    while stack:
        for v in stack.pop().inputs:
            if _scalar(v):
                continue
            producer = v.node
            if producer is not None and id(producer) in nodes:
                continue
            if (v is not stop and producer is not None and producer.op.elementwise and not producer.epilogue
                    and len(producer.outputs) == 1 and producer.prologue is None and v.shape == shape
                    and len(nodes) < MAX_NODES):
                nodes[id(producer)] = producer
                stack.append(producer)
            else:
                leaves[id(v)] = v
    return leaves, nodes


def _readers(graph: Graph) -> dict:
    """How many times each value is read (by id), an output counting as a read."""
    count: dict = {}
    for node in graph.nodes:
        for v in node.operands():
            count[id(v)] = count.get(id(v), 0) + 1
    for v in graph.outputs:
        count[id(v)] = count.get(id(v), 0) + 1
    return count


def _reads_inside(nodes: dict) -> dict:
    """How many times the cone's nodes read each value (by id)."""
    count: dict = {}
    for node in nodes.values():
        for v in node.inputs:
            count[id(v)] = count.get(id(v), 0) + 1
    return count


def _find(graph: Graph, root: Node, readers: dict):
    """``(x, nodes in order)``: a cone of ``root`` (``_cone``) reading one
    value ``x`` of its shape and dtype from outside, more than once, its
    inner values read by nothing else (``readers``: ``_readers``); None
    where there is none. The cone stops at the nearest such ``x`` (a bias
    add before it stays out)."""
    leaves, nodes = _cone(root)
    inside = _reads_inside(nodes)
    out = root.outputs[0]
    candidates = [v for n in reversed(graph.nodes) if id(n) in nodes for v in n.inputs
                  if not _scalar(v) and inside[id(v)] > 1 and v.shape == out.shape and v.dtype == out.dtype]
    for x in dict.fromkeys(candidates):
        leaves, nodes = _cone(root, stop=x)
        inside = _reads_inside(nodes)
        if list(leaves) != [id(x)] or len(nodes) < 3 or inside[id(x)] < 2:
            continue
        inner = [n.outputs[0] for n in nodes.values() if n is not root]
        if all(readers.get(id(v), 0) == inside.get(id(v), 0) for v in inner):
            return x, [n for n in graph.nodes if id(n) in nodes]
    return None


def _evaluate(x, members: list[Node]) -> np.ndarray | None:
    """What the cone computes at ``SAMPLES`` (None where an op cannot say)."""
    values = {id(x): SAMPLES}
    try:
        with np.errstate(all="ignore"):
            for node in members:
                args = [np.asarray(v.data, np.float64).reshape(()) if _scalar(v) else values[id(v)]
                        for v in node.inputs]
                values[id(node.outputs[0])] = np.asarray(node.op.reference(*args, **node.attrs), np.float64)
    except Exception:  # noqa: BLE001 - an op's reference that refuses float64 samples: no match
        return None
    return values[id(members[-1].outputs[0])]


def _matching(got: np.ndarray) -> tuple | None:
    for name, attrs in ACTIVATIONS:
        want = np.asarray(get_op(name).reference(SAMPLES, **attrs), np.float64)
        if got.shape == want.shape and np.all(np.abs(got - want) <= TOLERANCE * np.abs(want).max()):
            return name, attrs
    return None


def fuse_activations(graph: Graph) -> int:
    """Replace each cone computing a known activation (``ACTIVATIONS``) with
    the activation's op; return how many were replaced."""
    replaced, readers, gone = 0, _readers(graph), set()
    for root in reversed(list(graph.nodes)):
        if id(root) in gone or not root.op.elementwise or len(root.outputs) != 1 \
                or root.outputs[0].dtype not in ("float32", "float64"):
            continue
        found = _find(graph, root, readers)
        if found is None:
            continue
        x, members = found
        got = _evaluate(x, members)
        match = None if got is None else _matching(got)
        if match is None:
            continue
        op = get_op(match[0])
        out = root.outputs[0]
        node = Node(op, op.parse_attrs(match[1]), [x], [out])
        out.node = node
        graph.nodes[graph.nodes.index(root)] = node
        for member in members:
            if member is not root:
                graph.nodes.remove(member)
                gone.add(id(member))
        replaced += 1
    return replaced
