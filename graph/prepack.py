"""Pre-pack constant weights into the layout their kernel's template reads.

Condition: a ``dense`` whose weight is a constant, on the CPU. Rewrite: the
weight is packed once, at export, into the panels the template would copy it
into on every call (``pack_dense_weight`` at ``panel_width``, run by its own
kernel), and the node becomes ``dense_packed``, whose kernel reads the
panels as they are: no pack stage per call.
"""
from __future__ import annotations

from ..schedules.cpu.matmul import panel_width
from ..te import get_op
from .fold import evaluate
from .ir import Graph, Value


def prepack_weights(graph: Graph, target) -> int:
    """Pack every constant dense weight; return how many were packed."""
    if target.kind != "cpu":
        return 0
    packed = 0
    for node in graph.nodes:
        if node.op.name != "dense" or not node.inputs[1].is_const:
            continue
        weight = node.inputs[1]
        bn = panel_width(int(weight.shape[1]), weight.dtype, target)
        data = evaluate("pack_dense_weight", weight.data, bn=bn)
        node.op = get_op("dense_packed")
        node.inputs[1] = Value(data.shape, weight.dtype, data=data, name=weight.name + "@packed")
        packed += 1
    return packed
