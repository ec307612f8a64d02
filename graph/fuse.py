"""Fuse elementwise consumers into their producer's write-back.

Condition: a node's only output is read by exactly one node, an elementwise
op (``Op.elementwise``: relu, bias and residual adds, the BatchNorm affine
that could not fold, casts...) that reads it as its first operand (or as
either operand of a commutative op) and produces the same shape. Rewrite:
the consumer joins the producer's ``epilogue`` and the pair takes the
consumer's place in the graph (where the consumer's other operands exist,
such as a bias reshaped after the producer), so the pair is one kernel and
the intermediate is never written to memory (``graph.lower`` inlines the
epilogue into the producer's last block). ``dense`` takes a following relu
as its own ``relu`` attribute, the epilogue its template already computes.
Reshapes are left alone: they lower to views, not kernels.
"""
from __future__ import annotations

from .ir import Graph, Node

COMMUTATIVE = ("add", "multiply", "maximum", "equal")
NOT_FUSED = ("reshape",)  # views in the lowered module
DENSE = ("dense", "dense_packed")  # a relu after them is their own ``relu`` attribute


def _absorbable(graph: Graph, node: Node) -> Node | None:
    """The consumer ``node``'s output can take as its epilogue, if any."""
    if len(node.outputs) != 1 or node.op.data_dependent or node.op.name in NOT_FUSED:
        return None
    out = node.outputs[0]
    user = graph.sole_user(out)
    if user is None or not user.op.elementwise or user.epilogue or user.outputs[0].shape != out.shape:
        return None
    if user.inputs[0] is not out:
        if user.op.name not in COMMUTATIVE or user.inputs[1] is not out:
            return None
        user.inputs = [user.inputs[1], user.inputs[0]]
    reads = {id(v) for v in node.operands()}
    between = graph.nodes[graph.nodes.index(node) + 1:graph.nodes.index(user)]
    if any(m.inplace and any(id(m.inputs[m.op.inplace[k]]) in reads for k in range(len(m.outputs)))
           for m in between):
        return None  # moved to the consumer's place, the producer would read what an update overwrote
    return user


def fuse_epilogues(graph: Graph) -> int:
    """Fuse every elementwise chain into its producer; return how many ops were absorbed."""
    absorbed = 0
    for node in list(graph.nodes):
        while node in graph.nodes:
            user = _absorbable(graph, node)
            if user is None:
                break
            if node.op.name in DENSE and user.op.name == "relu" and not node.attrs["relu"] and not node.epilogue:
                node.attrs = {**node.attrs, "relu": True}
            else:
                node.epilogue.append((user.op, dict(user.attrs), list(user.inputs[1:])))
            node.outputs = [user.outputs[0]]
            user.outputs[0].node = node
            # the fused node takes the consumer's place: its other operands (a bias reshaped after the
            # producer) exist there, and nothing between the two read the producer's output (its sole reader)
            graph.nodes.remove(node)
            graph.nodes[graph.nodes.index(user)] = node
            absorbed += 1
    return absorbed
