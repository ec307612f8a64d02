"""Find attention written out as products, scale, mask and softmax, and make it one ``attention`` op.

An exported transformer computes each layer's attention as six to nine
nodes: ``matmul(q, kᵀ)``, a scale (``multiply_scalar`` or a division), an
additive mask, ``softmax`` over the keys, ``matmul(p, v)``, and the
transposes that take the projections (B, S, H·D reshaped to B, S, H, D)
into heads and back. Each was a kernel writing its result, the (S, Sk)
scores and probabilities among them. ``fuse_attention`` finds

    softmax(f(matmul(q, k, transpose_b)), axis=-1) @ v

where ``f`` is a chain of elementwise links (each read by nothing but the
next) whose operands besides the running value are scalar constants and at
most one tensor ``m`` (the mask, constant or not), and ``f(s, m)`` computes
``c s + m`` for a constant ``c > 0``: the chain's own ops are run on sample
values to check it and to read ``c`` (``graph.fold.evaluate``; no op is
recognized by its name, and the order of the scale and the mask's add does
not matter as long as the mask is added unscaled). The products read rank-4
tensors: ``q`` (B, H, S, D), ``k`` (B, H, Sk, D) read transposed and ``v``
(B, H, Sk, Dv); or, where all three are transposes of (B, S, H, ·) tensors
(``k``'s the (0, 2, 3, 1) permutation a model writes for ``kᵀ``), those
tensors in the ``bshd`` layout, the output then written as (B, S, H, Dv)
for the transpose back (or transposed to heads where nothing takes it so).
The match becomes ``attention(q, k, v[, m], scale=c, layout=...)``
(``te/attention.py``), whose kernel keeps a block of rows' scores in cache;
the nodes it replaces are dropped once nothing reads them. ONNX Runtime's
``AttentionFusion`` does this by matching BERT's node patterns.
"""
from __future__ import annotations

import numpy as np

from .fold import evaluate
from .ir import Graph, Node, Value
from .patterns import _scalar
from .transposes import _new, _plain_matmul

#: the permutations into heads: (B, S, H, D) -> (B, H, S, D), and -> (B, H, D, S) for keys read as kᵀ
TO_HEADS, TO_HEADS_T = (0, 2, 1, 3), (0, 2, 3, 1)
#: sample scores and mask values the chain is run on, and how close it must come to ``c s + m``
SCORES, MASK = np.array([0.0, 1.0, -2.5, 3.0]), np.array([1.0, -3.0, 0.5, -1e4])
TOLERANCE = 1e-5


def _chain(graph: Graph, value: Value, links: tuple = (), mask: Value | None = None):
    """``(product, links, mask)`` of the chain ending in ``value``: the plain
    4-D matmul computing the scores and the elementwise links after it, in
    order, each read only by the next; None where it is not such a chain."""
    node = value.node
    if node is None or node.epilogue or node.prologue is not None or len(node.outputs) != 1:
        return None
    if _plain_matmul(node):
        if node.attrs["transpose_a"] or any(len(v.shape) != 4 for v in node.inputs):
            return None
        return node, list(links), mask
    if not node.op.elementwise:
        return None
    for prev in node.inputs:  # the running value: a full-shape input read only here
        if _scalar(prev) or prev.node is None or prev.shape != value.shape or graph.sole_user(prev) is not node:
            continue
        tensors = [v for v in node.inputs if v is not prev and not _scalar(v)]
        if len(tensors) > 1 or (tensors and mask is not None):
            continue
        found = _chain(graph, prev, (node, *links), tensors[0] if tensors else mask)
        if found is not None:
            return found
    return None


def _run(links: list[Node], scores: Value, mask: Value | None, s: np.ndarray, m: np.ndarray, dtype) -> np.ndarray:
    """The chain's ops on sample scores ``s`` and mask ``m`` (elementwise, so any length)."""
    z, running = s.astype(dtype), scores
    for link in links:
        args = [z if v is running else (m.astype(dtype) if v is mask else v.data) for v in link.inputs]
        z = evaluate(link.op.name, *args, **link.attrs)
        running = link.outputs[0]
    return z


def _scale(links: list[Node], scores: Value, mask: Value | None) -> float | None:
    """``c`` where the chain computes ``c s + m`` (``c > 0``), else None."""
    dtype = scores.dtype
    zero = np.zeros_like(SCORES)
    base = _run(links, scores, mask, SCORES, zero, dtype)
    c = float(base[1] - base[0])
    if not c > 0 or not np.allclose(base, c * SCORES, rtol=TOLERANCE, atol=TOLERANCE):
        return None
    if mask is not None:
        shifted = _run(links, scores, mask, SCORES, MASK, dtype)
        if not np.allclose(shifted, c * SCORES + MASK, rtol=TOLERANCE, atol=TOLERANCE):
            return None
    return c


def _source(value: Value, perm: tuple) -> Value | None:
    """What ``value`` is the ``perm`` transpose of, where it is one and nothing is fused into it."""
    node = value.node
    if node is None or not node.op.permutes_axes or node.epilogue or node.prologue is not None:
        return None
    x = node.inputs[0]
    return x if node.op.perm(len(x.shape), node.attrs.get("axes")) == perm else None


def _operands(first: Node, second: Node) -> tuple[str, list[Value]] | None:
    """``(layout, [q, k, v])`` the attention reads, or None."""
    q, k = first.inputs
    v = second.inputs[1]
    tb = first.attrs["transpose_b"]
    heads = [_source(q, TO_HEADS), _source(k, TO_HEADS if tb else TO_HEADS_T), _source(v, TO_HEADS)]
    if all(x is not None for x in heads):
        return "bshd", heads
    if tb:
        return "bhsd", [q, k, v]
    return None


def _fuse(graph: Graph, softmax: Node) -> bool:
    scores, probs = softmax.inputs[0], softmax.outputs[0]
    rank = len(scores.shape)
    if rank != 4 or softmax.epilogue or softmax.attrs["axis"] % rank != rank - 1:
        return False
    second = graph.sole_user(probs)
    if second is None or not _plain_matmul(second) or second.inputs[0] is not probs \
            or second.attrs["transpose_a"] or second.attrs["transpose_b"]:
        return False
    found = _chain(graph, scores)
    if found is None:
        return False
    first, links, mask = found
    if graph.sole_user(first.outputs[0]) is not (links or [softmax])[0]:
        return False
    operands = _operands(first, second)
    dtype = probs.dtype
    if operands is None or any(v.dtype != dtype for v in operands[1] + [mask] if v is not None):
        return False
    scale = _scale(links, first.outputs[0], mask)
    if scale is None:
        return False
    layout, inputs = operands
    node = _new(graph, second, "attention", inputs + ([mask] if mask is not None else []),
                {"scale": scale, "layout": layout})
    out = node.outputs[0]
    result = second.outputs[0]
    if layout == "bshd":
        back = graph.sole_user(result)
        if back is not None and _source(back.outputs[0], TO_HEADS) is result:
            graph.replace_uses(back.outputs[0], out)
            return True
        out = _new(graph, second, "transpose", [out], {"axes": TO_HEADS}).outputs[0]
    graph.replace_uses(result, out)
    return True


def fuse_attention(graph: Graph) -> int:
    """Make every attention the graph writes out one ``attention`` node (see
    the module's docstring); return how many were made."""
    made = 0
    for node in list(graph.nodes):
        if node in graph.nodes and node.op.normalizes_rows and _fuse(graph, node):
            made += 1
    if made:
        graph.prune()
    return made
