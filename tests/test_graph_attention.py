"""``graph.attention``: attention written out as products, scale, mask and
softmax becomes one ``attention`` node in an export (heads read in the
projections' layout where the model transposes them), giving the same
numbers; chains that do not compute ``c s + m`` stay as they are."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.graph.attention import fuse_attention
from kiln.graph.ir import Graph
from kiln.nn import functional as F
from kiln.runtime import Predictor
from kiln.te import call


def _ops(graph) -> list[str]:
    return [n.op.name for n in graph.nodes if not n.op.view]


def _reference(q, k, v, mask, scale):
    s = q @ np.swapaxes(k, -1, -2) * scale + mask
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


class Heads(nn.Module):
    """Attention over (B, H, S, D) heads, as a model written with kiln ops computes it."""

    def forward(self, q, k, v, mask):
        scores = F.matmul(q, F.transpose(k)) / 4.0 + mask
        return F.matmul(F.softmax(scores, axis=-1), v)


class Projections(nn.Module):
    """BERT's attention as an ONNX file has it: (B, S, H*D) projections split into heads by
    reshapes and transposes, keys transposed by (0, 2, 3, 1), the output transposed back."""

    def forward(self, q, k, v, mask):
        b, s = q.shape[0], q.shape[1]
        heads = [F.reshape(t, (b, s, 2, 8)) for t in (q, k, v)]
        qh, vh = (F.permute(t, (0, 2, 1, 3)) for t in (heads[0], heads[2]))
        kt = F.permute(heads[1], (0, 2, 3, 1))
        scores = call("multiply_scalar", F.matmul(qh, kt), scalar=0.125) + mask
        out = F.permute(F.matmul(F.softmax(scores, axis=3), vh), (0, 2, 1, 3))
        return F.reshape(out, (b, s, 16))


def test_attention_over_heads_is_one_kernel_and_exports_the_same_numbers(tmp_path):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 16, 8)).astype("float32") for _ in range(3))
    mask = np.where(rng.random((2, 1, 1, 16)) < 0.2, -1e4, 0).astype("float32")
    graph = optimize(trace(Heads(), (q[:1], k[:1], v[:1], mask[:1])), kiln.cpu())
    assert _ops(graph) == ["attention"]
    node = graph.nodes[-1]
    assert node.attrs["layout"] == "bhsd" and node.attrs["scale"] == pytest.approx(0.25)
    predictor = Predictor(kiln.export(Heads(), (q[:1], k[:1], v[:1], mask[:1]), tmp_path / "m.so"))
    np.testing.assert_allclose(predictor(q, k, v, mask), _reference(q, k, v, mask, 0.25), rtol=1e-5, atol=1e-5)


def test_projections_are_read_as_heads_in_place_with_no_transpose(tmp_path):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 12, 16)).astype("float32") for _ in range(3))
    mask = np.where(rng.random((2, 1, 12, 12)) < 0.3, -1e4, 0).astype("float32")
    example = (q[:1], k[:1], v[:1], mask[:1])
    graph = optimize(trace(Projections(), example), kiln.cpu())
    assert _ops(graph) == ["attention"]
    assert graph.nodes[[n.op.name for n in graph.nodes].index("attention")].attrs["layout"] == "bshd"
    predictor = Predictor(kiln.export(Projections(), example, tmp_path / "m.so"))
    heads = [np.transpose(t.reshape(2, 12, 2, 8), (0, 2, 1, 3)) for t in (q, k, v)]
    want = np.transpose(_reference(*heads, mask, 0.125), (0, 2, 1, 3)).reshape(2, 12, 16)
    np.testing.assert_allclose(predictor(q, k, v, mask), want, rtol=1e-5, atol=1e-5)


def _graph(chain, read_probs_twice=False):
    """q kᵀ, ``chain(graph, scores, mask)``, softmax and the product with v, on a graph of inputs."""
    g = Graph()
    q, k, v = (g.input(n, (1, 2, 8, 4), "float32") for n in "qkv")
    mask = g.input("mask", (1, 1, 1, 8), "float32")
    s, = g.apply("matmul", [q, k], {"transpose_b": True})
    p, = g.apply("softmax", [chain(g, s, mask)], {"axis": -1})
    out, = g.apply("matmul", [p, v])
    g.output(out)
    if read_probs_twice:
        g.output(p)
    return g


def _scaled_then_masked(g, s, mask):
    return g.apply("add", [g.apply("multiply_scalar", [s], {"scalar": 0.5})[0], mask])[0]


@pytest.mark.parametrize("chain, fused", [
    (_scaled_then_masked, True),
    (lambda g, s, mask: g.apply("divide", [g.apply("add", [mask, s])[0], g.const(np.float32(2.0))])[0], False),
    (lambda g, s, mask: g.apply("add", [g.apply("multiply_scalar", [s], {"scalar": -0.5})[0], mask])[0], False),
    (lambda g, s, mask: g.apply("exp", [s])[0], False),
    (lambda g, s, mask: s, True),
], ids=["c s + m", "(s + m) / c: the mask scaled", "a negative scale", "not affine", "no scale or mask"])
def test_only_a_chain_computing_c_s_plus_m_fuses(chain, fused):
    g = _graph(chain)
    assert fuse_attention(g) == int(fused)
    assert (_ops(g) == ["attention"]) == fused


def test_probabilities_read_elsewhere_stay_unfused():
    g = _graph(_scaled_then_masked, read_probs_twice=True)
    assert fuse_attention(g) == 0
    assert "softmax" in _ops(g)


def test_heads_left_in_heads_layout_get_their_transpose_back():
    g = Graph()
    q, k, v = (g.input(n, (1, 8, 2, 4), "float32") for n in "qkv")  # (B, S, H, D)
    qh, = g.apply("transpose", [q], {"axes": (0, 2, 1, 3)})
    kt, = g.apply("transpose", [k], {"axes": (0, 2, 3, 1)})
    vh, = g.apply("transpose", [v], {"axes": (0, 2, 1, 3)})
    s, = g.apply("matmul", [qh, kt])
    p, = g.apply("softmax", [s], {"axis": -1})
    out, = g.apply("matmul", [p, vh])
    g.output(out)  # (B, H, S, D): nothing transposes it back
    assert fuse_attention(g) == 1
    assert _ops(g) == ["attention", "transpose"]
    assert g.nodes[0].attrs["layout"] == "bshd" and tuple(g.outputs[0].shape) == (1, 2, 8, 4)
