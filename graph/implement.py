"""Run each node as the implementation the strategy layer chooses.

Condition: ``kiln.strategy.choose`` picks an implementation other than
``Direct`` for the node's workload on the target (``strategy/``: on the CPU,
a constant dense or NCHW conv2d weight is packed; a 3x3 stride-1 conv2d with
16 or more input channels, or its data gradient, runs as a Winograd
convolution), told whether the node's weight is a constant. Rewrite:

* the weight becomes the output of the implementation's ``weight_op`` (a
  pack or a transform): a constant computed once, here (``fold.evaluate``),
  else a node of its own placed before this one (it runs in every call);
* the input is blocked (``to_blocked``) where the implementation reads it in
  channel blocks, once per value whichever nodes read it;
* the node becomes the implementation's op, with its attributes.

An exported model (its weights constants) thus reads packed or transformed
weights as they are, with no pack stage per call; a training step (its
weights parameters) transforms them in every call. ``winograd=False`` keeps
every convolution off Winograd.
"""
from __future__ import annotations

from ..strategy import Direct, choose, strategies
from ..te import get_op
from .fold import evaluate
from .ir import Graph, Node, Value


def _prepare_weight(graph: Graph, node: Node, implementation) -> Value:
    """The node's weight as ``implementation.weight_op`` gives it."""
    weight, tag = node.inputs[1], implementation.name
    if weight.is_const:
        data = evaluate(implementation.weight_op, weight.data, **implementation.weight_attrs)
        return Value(data.shape, weight.dtype, data=data, name=f"{weight.name}@{tag}")
    return graph.insert(node, get_op(implementation.weight_op), implementation.weight_attrs, weight,
                        f"{weight.name}@{tag}")


def implement(graph: Graph, target, winograd: bool = True) -> int:
    """Rewrite every node whose chosen implementation is not ``Direct``, in
    place; return how many were rewritten."""
    count, blocked = 0, {}  # a value blocked once, whichever nodes read it
    without = () if winograd else ("winograd",)
    for node in list(graph.nodes):
        if len(node.inputs) < 2 or not strategies(node.op.name):
            continue
        workload = node.op.check([v.shape for v in node.inputs], [v.dtype for v in node.inputs], node.attrs)
        implementation = choose(workload, target, constant_weight=node.inputs[1].is_const, without=without)
        if isinstance(implementation, Direct):
            continue
        if implementation.weight_op:
            node.inputs[1] = _prepare_weight(graph, node, implementation)
        if implementation.in_block:
            x = node.inputs[0]
            if id(x) not in blocked:
                blocked[id(x)] = graph.insert(node, get_op("to_blocked"), {"block": implementation.in_block}, x,
                                              f"{x.name}@blocked")
            node.inputs[0] = blocked[id(x)]
        node.op = get_op(implementation.op)
        node.attrs = node.op.parse_attrs(implementation.attrs)
        count += 1
    return count
