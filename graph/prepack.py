"""Pre-pack constant weights into the layout their kernel's template reads.

Condition: on the CPU, a ``dense`` whose weight is a constant, or an NCHW
``conv2d`` whose weight is a constant. Rewrite: the weight is packed once, at
export, into the blocks the template would copy it into on every call —
``pack_dense_weight`` at ``panel_width`` (panels of columns),
``pack_conv2d_weight`` at ``packed_channels`` (blocks of output channels) —
run by their own kernels; the node becomes ``dense_packed`` or
``conv2d_packed``, whose kernel reads the packed constant as it is: no pack
stage per call.
"""
from __future__ import annotations

from ..schedules.cpu.conv2d import packed_channels
from ..schedules.cpu.matmul import panel_width
from ..te import get_op
from .fold import evaluate
from .ir import Graph, Node, Value


def _pack_dense(node: Node, target) -> None:
    weight = node.inputs[1]
    data = evaluate("pack_dense_weight", weight.data, bn=panel_width(int(weight.shape[1]), weight.dtype, target))
    node.op = get_op("dense_packed")
    node.inputs[1] = Value(data.shape, weight.dtype, data=data, name=weight.name + "@packed")


def _pack_conv2d(node: Node, target) -> None:
    x, weight = node.inputs
    workload = node.op.check([x.shape, weight.shape], [x.dtype, weight.dtype], node.attrs)
    data = evaluate("pack_conv2d_weight", weight.data, oc=packed_channels(workload, target))
    attrs = {k: v for k, v in node.attrs.items() if k != "layout"}
    node.op = get_op("conv2d_packed")
    node.attrs = node.op.parse_attrs({**attrs, "out_channels": int(weight.shape[0])})
    node.inputs[1] = Value(data.shape, weight.dtype, data=data, name=weight.name + "@packed")


def prepack_weights(graph: Graph, target) -> int:
    """Pack every constant dense and NCHW conv2d weight; return how many were packed."""
    if target.kind != "cpu":
        return 0
    packed = 0
    for node in graph.nodes:
        if len(node.inputs) < 2 or not node.inputs[1].is_const:
            continue
        if node.op.name == "dense":
            _pack_dense(node, target)
        elif node.op.name == "conv2d" and node.attrs["layout"] == "NCHW":
            _pack_conv2d(node, target)
        else:
            continue
        packed += 1
    return packed
