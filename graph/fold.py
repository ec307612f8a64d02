"""Fold per-channel affine chains (eval BatchNorm, bias adds) into the
weights of the conv2d or dense before them.

Condition: an op linear in its weight (``Op.fold_weight_axis``: an NCHW
``conv2d``, a ``dense`` without its relu) or affine in its output
(``Op.affine_output``: the int8 products, ``sums * scale + offset``) whose
weights are constants, and
after it a chain of ops affine in the value it reads (``Op.affine_operands``:
``add``/``subtract``/``multiply`` in either operand, ``divide`` as the
dividend) whose other operand is a constant varying along the output
channels only, each link read by nothing but the next.
Rewrite: the chain is ``f(z) = s * z + t`` per channel, with ``t = f(0)`` and
``s = f(1) - f(0)`` computed by running the chain's own ops on constants
(kiln's kernels: no op math is written again here). The weights become
``W * s`` (per output channel); a bias input (a dense's) becomes ``f(b)``;
an op without one (a conv2d) keeps one ``add`` of ``t`` after it, which
``graph.fuse`` folds into its write-back; an int8 product's ``scale``
becomes ``scale * s`` and its ``offset`` ``f(offset)`` (an imported
model's bias add then costs its write-back nothing).
"""
from __future__ import annotations

import numpy as np

from ..runtime.build import build
from ..runtime.device import host
from ..te import get_op
from .ir import Graph, Node, Value

#: the output axis of a foldable op's channels (NCHW's C, dense's N)
CHANNELS = 1


def evaluate(op: str, *arrays: np.ndarray, **attrs) -> np.ndarray:
    """``op(*arrays)`` computed by its compiled kernel (constants only), on
    this machine's CPU whatever the export targets (``KILN_CPU`` may name a
    CPU this one cannot run)."""
    kernel = build(op, [a.shape for a in arrays], [str(a.dtype) for a in arrays], attrs, target=host())
    return kernel(*arrays)


def _foldable(node: Node) -> bool:
    """Whether ``node`` is linear in its weights (``Op.fold_weight_axis``) or
    affine in its output (``Op.affine_output``), in NCHW and without a relu,
    nothing fused yet, and they are constants it can scale."""
    return ((node.op.fold_weight_axis is not None or node.op.affine_output is not None) and not node.epilogue
            and not node.attrs.get("relu")
            and node.attrs.get("layout", "NCHW") == "NCHW" and all(v.is_const for v in node.inputs[1:]))


def _per_channel(value: Value, rank: int, axis: int, channels: int) -> bool:
    """Whether ``value`` is a constant that broadcasts along every axis but the channels'."""
    if not value.is_const or len(value.shape) > rank:
        return False
    shape = (1,) * (rank - len(value.shape)) + tuple(value.shape)
    return all(d == 1 for i, d in enumerate(shape) if i != axis) and shape[axis] in (1, channels)


def _chain(graph: Graph, node: Node) -> list[Node]:
    """The affine links after ``node`` that can fold into it."""
    out = node.outputs[0]
    rank, channels = len(out.shape), int(out.shape[CHANNELS])
    links, cur = [], out
    while True:
        user = graph.sole_user(cur)
        if user is None or user.epilogue or user.outputs[0].dtype != out.dtype:
            return links
        at = next((k for k in user.op.affine_operands if user.inputs[k] is cur), None)
        if at is None or not _per_channel(user.inputs[1 - at], rank, CHANNELS, channels):
            return links
        links.append(user)
        cur = user.outputs[0]


def _apply_chain(links: list[Node], z: np.ndarray) -> np.ndarray:
    """The chain's ops run on the constant ``z`` in place of the producer's output."""
    for link in links:
        a, b = link.inputs
        args = [z, b.data] if not a.is_const else [a.data, z]
        z = evaluate(link.op.name, *args, **link.attrs)
    return z


def _drop(graph: Graph, links: list[Node], out: Value) -> None:
    """Remove the folded ``links``: their readers read ``out`` instead."""
    graph.replace_uses(links[-1].outputs[0], out)
    for link in reversed(links):
        graph.remove(link)


def fold_affine(graph: Graph) -> int:
    """Fold every affine chain that can be folded; return how many were."""
    folded = 0
    for node in list(graph.nodes):
        links = _chain(graph, node) if node in graph.nodes and _foldable(node) else []
        if not links:
            continue
        out = node.outputs[0]
        channels, dtype = int(out.shape[CHANNELS]), out.dtype
        probe = (1,) * CHANNELS + (channels,) + (1,) * (len(out.shape) - CHANNELS - 1)
        t = _apply_chain(links, np.zeros(probe, dtype))
        s = evaluate("subtract", _apply_chain(links, np.ones(probe, dtype)), t)
        if node.op.affine_output is not None:  # y = sums * scale + offset:  f(y) = sums * (scale s) + f(offset)
            at, off = node.op.affine_output
            scale, offset = node.inputs[at], node.inputs[off]
            node.inputs[at] = Value(scale.shape, dtype, data=evaluate("multiply", scale.data, s.reshape(-1)),
                                    name=scale.name + "'")
            node.inputs[off] = Value(offset.shape, dtype, name=offset.name + "'",
                                     data=_apply_chain(links, offset.data.reshape(probe)).reshape(-1))
            _drop(graph, links, out)
            folded += 1
            continue
        weight = node.inputs[1]
        along = [1] * len(weight.shape)  # s along the weight's output channels
        along[node.op.fold_weight_axis] = channels
        node.inputs[1] = Value(weight.shape, dtype, data=evaluate("multiply", weight.data, s.reshape(along)),
                               name=weight.name + "'")
        if len(node.inputs) > 2:  # a bias, y = x W + b:  f(y) = x (W s) + f(b)
            bias = node.inputs[2]
            node.inputs[2] = Value(bias.shape, dtype, data=_apply_chain(links, bias.data.reshape(probe)).reshape(-1),
                                   name=bias.name + "'")
            _drop(graph, links, out)
        else:  # no bias (conv2d): one add of t after W s
            first = links[0]
            first.op, first.attrs = get_op("add"), {}
            first.inputs = [out, Value(t.shape, dtype, data=t, name=f"shift{folded}")]
            graph.replace_uses(links[-1].outputs[0], first.outputs[0])
            for link in reversed(links[1:]):
                graph.remove(link)
        folded += 1
    return folded
