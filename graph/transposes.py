"""Fold a transpose of a matrix's last two axes into the products that read it.

``matmul`` reads either operand with its last two axes swapped
(``transpose_a``, ``transpose_b``), so a ``transpose`` that only swaps
them need not be a kernel writing a copy:

- ``matmul(transpose(a), b)`` is ``matmul(a, b, transpose_a=True)`` (and so
  for ``b``, and a flag already set is cleared);
- ``dense(x, transpose(w), bias)`` is ``matmul(x, w, transpose_b=True)``
  followed by the bias add (and its relu), which ``graph.fuse`` puts back
  into the product's write-back: PyTorch's ``linear`` arrives as
  ``addmm(b, x, t(W))``, and a training step would otherwise transpose every
  weight on the way in and every weight's gradient on the way out;
- ``transpose(matmul(a, b))``, the matmul read by nothing else, is
  ``matmul(b, a)`` with each operand's flag flipped ((AB)ᵀ = BᵀAᵀ): the
  gradient of a transposed weight.

A transpose of a constant stays, and in an export ``dense_of_constants``
goes the other way: a matrix product of rows and a constant matrix (read
transposed or not) becomes a ``dense`` layer whose weight is that matrix
laid out (K, N) once, which the export packs into the panels its kernel
reads, and the bias add after it folds into the dense's bias
(``graph.fold``). The transposes folded away are dropped once nothing
reads them.
"""
from __future__ import annotations

import numpy as np

from ..te import get_op
from .ir import Graph, Node, Value


def _swaps_last_two(node: Node) -> bool:
    if not node.op.permutes_axes or node.epilogue or node.prologue:
        return False
    rank = len(node.inputs[0].shape)
    perm = node.op.perm(rank, node.attrs.get("axes"))
    return rank >= 2 and perm == tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _plain_matmul(node: Node) -> bool:
    """A matmul of two operands of rank 2 or more, nothing fused into it."""
    return (node.op.transposed_operands and not node.epilogue and node.prologue is None
            and all(len(v.shape) >= 2 for v in node.inputs))


def _matmul(graph: Graph, before: Node, a: Value, b: Value, ta: bool, tb: bool) -> Value:
    """A new ``matmul(a, b)`` with those flags, placed before ``before``."""
    node = _new(graph, before, "matmul", [a, b], {"transpose_a": ta, "transpose_b": tb})
    return node.outputs[0]


def _new(graph: Graph, before: Node, op: str, inputs: list, attrs: dict) -> Node:
    op = get_op(op)
    workload = op.check([v.shape for v in inputs], [v.dtype for v in inputs], attrs)
    node = graph.add(op, workload.attrs, inputs, list(zip(workload.out_shapes, workload.out_dtypes)))
    graph.nodes.remove(node)
    graph.nodes.insert(graph.nodes.index(before), node)
    return node


def _into_readers(graph: Graph, t: Node) -> int:
    """Rewrite the products reading transpose ``t``'s output to read its input."""
    source, out, folded = t.inputs[0], t.outputs[0], 0
    for user in list(dict.fromkeys(graph.users(out))):
        if user.epilogue or user.prologue is not None:
            continue
        if _plain_matmul(user):
            ta, tb = user.attrs["transpose_a"], user.attrs["transpose_b"]
            a, b = user.inputs
            user.inputs = [source if a is out else a, source if b is out else b]
            user.attrs = dict(user.attrs, transpose_a=ta != (a is out), transpose_b=tb != (b is out))
            folded += 1
        elif user.op.dense_layer and user.inputs[1] is out and user.inputs[0] is not out \
                and user.outputs[0].dtype == source.dtype:
            x, _, bias = user.inputs
            y = _matmul(graph, user, x, source, False, True)
            y = _new(graph, user, "add", [y, bias], {}).outputs[0]
            if user.attrs.get("relu"):
                y = _new(graph, user, "relu", [y], {}).outputs[0]
            graph.replace_uses(user.outputs[0], y)
            graph.nodes.remove(user)
            folded += 1
    return folded


def _into_producer(graph: Graph, t: Node) -> int:
    """``transpose(matmul(a, b))`` as one matmul, where nothing else reads the product."""
    producer = t.inputs[0].node
    if producer is None or not _plain_matmul(producer) or graph.sole_user(t.inputs[0]) is not t:
        return 0
    a, b = producer.inputs
    y = _matmul(graph, t, b, a, not producer.attrs["transpose_b"], not producer.attrs["transpose_a"])
    graph.replace_uses(t.outputs[0], y)
    return 1


def fold_transposes(graph: Graph) -> int:
    """Fold every transpose of the last two axes that can be (see the module's
    docstring) and drop the nodes left unread; return how many were folded."""
    folded = 0
    for node in list(graph.nodes):
        if node not in graph.nodes or not _swaps_last_two(node) or node.inputs[0].is_const:
            continue
        folded += _into_producer(graph, node) or _into_readers(graph, node)
    if folded:
        graph.prune()
    return folded


def dense_of_constants(graph: Graph) -> int:
    """Make every ``matmul(x, C)`` of an ``x`` of rank 2 or more and a
    constant matrix ``C`` (``transpose_b`` or not, nothing fused) a ``dense``
    of ``C`` as (K, N) and a zero bias, on ``x``'s rows (an ``x`` of more
    axes viewed as (rows, K) and the result viewed back: a sequence model's
    projections of (batch, tokens, features)); return how many were."""
    made = 0
    for node in list(graph.nodes):
        if not _plain_matmul(node) or node.attrs["transpose_a"]:
            continue
        x, w = node.inputs
        if not w.is_const or len(w.shape) != 2 or x.dtype != w.dtype:
            continue
        weight = np.ascontiguousarray(w.data.T if node.attrs["transpose_b"] else w.data)
        bias = graph.const(np.zeros(weight.shape[1], weight.dtype))
        lead = tuple(x.shape[:-1])
        rows = x
        if len(lead) > 1:
            rows = _new(graph, node, "reshape", [x], {"shape": (_product(lead), x.shape[-1])}).outputs[0]
        y = _new(graph, node, "dense", [rows, graph.const(weight, f"{w.name}_kn"), bias], {}).outputs[0]
        if len(lead) > 1:
            y = _new(graph, node, "reshape", [y], {"shape": lead + (weight.shape[1],)}).outputs[0]
        graph.replace_uses(node.outputs[0], y)
        graph.nodes.remove(node)
        made += 1
    return made


def _product(dims):
    """The product of dims (ints or symbolic expressions)."""
    out = dims[0]
    for d in dims[1:]:
        out = out * d
    return out
