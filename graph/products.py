"""Passes over the many small products of an unrolled recurrence, in a
training step: a sum of them joined into one product over their K axes,
and a weight many of them read transposed laid out transposed once.

A weight read by many steps — a recurrent layer's state weight, unrolled
over a sequence — gets its gradient as a sum of one small product per step:
``Σ_t h_tᵀ g_t``, each a (H x N)(N x 4H) product too thin to keep a core's
FMA units busy. The sum is one product of the steps' operands joined along
K: ``[h_1; ...; h_T]ᵀ [g_1; ...; g_T]``, T times deeper, which runs at the
speed of a large matrix product (what cuDNN and PyTorch do for the weight
gradients of their recurrent layers).

``join_products`` finds a tree of ``add`` nodes (``Op.sums_operands``; each
add read only by the next) whose leaves include two or more plain 2-D
``matmul`` outputs of one shape, dtype and operand flags, each read only by
the tree, and replaces them with ``concatenate`` of each operand along its K
axis and one ``matmul``; the other leaves are added to it as before.

The same layer's state gradient at each step is ``g_t W_hhᵀ``: a product
reading the weight transposed, which runs slower than one reading a (K, N)
matrix as it is laid out (its panels of N are strided). ``transpose_once``
gives a graph input that ``MIN_PRODUCTS`` or more products read transposed
one ``transpose`` before its first reader, and those products read it as
laid out. Both run before ``graph.fuse`` turns adds into epilogues.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from ..te import get_op
from .ir import Graph, Node, Value
from .transposes import _new

#: the fewest products worth joining (each join costs the concatenated copies)
MIN_PRODUCTS = 4


def join_products(graph: Graph) -> int:
    """Join the sums of products in ``graph``, in place; return how many sums were rewritten."""
    reads = Counter(id(v) for n in graph.nodes for v in n.operands())
    reads.update(id(v) for v in graph.outputs)
    made = {id(v): n for n in graph.nodes for v in n.outputs}

    def only_for(v: Value) -> Node | None:
        """The node making ``v``, where the sum is its only reader."""
        node = made.get(id(v))
        return node if node is not None and reads[id(v)] == 1 else None

    def is_sum(node: Node | None) -> bool:
        return (node is not None and node.op.sums_operands and not node.epilogue and node.prologue is None
                and all(tuple(v.shape) == tuple(node.outputs[0].shape) for v in node.inputs))

    inner = set()
    for node in graph.nodes:
        if is_sum(node):
            inner.update(id(only_for(v)) for v in node.inputs if is_sum(only_for(v)))
    joined = 0
    for root in [n for n in graph.nodes if is_sum(n) and id(n) not in inner]:
        leaves, stack = [], list(root.inputs)
        while stack:
            v = stack.pop()
            node = only_for(v)
            if is_sum(node):
                stack.extend(node.inputs)
            else:
                leaves.append(v)
        groups = defaultdict(list)
        for v in leaves:
            node = only_for(v)
            if node is not None and _plain_product(node):
                groups[(node.attrs["transpose_a"], node.attrs["transpose_b"], v.dtype)].append(node)
        joinable = [g for g in groups.values() if len(g) >= MIN_PRODUCTS]
        if not joinable:
            continue
        rest = [v for v in leaves if not any(only_for(v) in g for g in joinable)]
        terms = [_joined(graph, root, g) for g in joinable] + rest
        total = terms[0]
        for term in terms[1:]:
            total = _new(graph, root, root.op, [total, term], dict(root.attrs)).outputs[0]
        graph.replace_uses(root.outputs[0], total)
        joined += 1
    if joined:
        graph.prune()
    return joined


def transpose_once(graph: Graph) -> int:
    """Lay out once each graph input many 2-D products read transposed as their
    right operand; return how many inputs were."""
    readers = defaultdict(list)
    for node in graph.nodes:
        if _plain_product(node) and node.attrs["transpose_b"] and node.inputs[1] in graph.inputs:
            readers[id(node.inputs[1])].append(node)
    done = 0
    for products in readers.values():
        if len(products) < MIN_PRODUCTS:
            continue
        weight = products[0].inputs[1]
        flipped = _new(graph, products[0], get_op("transpose"), [weight], {"axes": (1, 0)}).outputs[0]
        for node in products:
            node.inputs = [node.inputs[0], flipped]
            node.attrs = dict(node.attrs, transpose_b=False)
        done += 1
    return done


def _plain_product(node: Node) -> bool:
    """A 2-D ``matmul`` with nothing fused into it."""
    return (node.op.transposed_operands and not node.epilogue and node.prologue is None
            and all(len(v.shape) == 2 for v in node.inputs))


def _joined(graph: Graph, before: Node, products: list) -> Value:
    """One ``matmul`` of the products' operands concatenated along K, placed before ``before``."""
    ta, tb = products[0].attrs["transpose_a"], products[0].attrs["transpose_b"]
    a = _new(graph, before, get_op("concatenate"), [p.inputs[0] for p in products], {"axis": 0 if ta else 1})
    b = _new(graph, before, get_op("concatenate"), [p.inputs[1] for p in products], {"axis": 1 if tb else 0})
    return _new(graph, before, get_op("matmul"), [a.outputs[0], b.outputs[0]],
                {"transpose_a": ta, "transpose_b": tb}).outputs[0]
