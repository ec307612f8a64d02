"""``graph.transposes``: a transpose of a matrix's last two axes folds into the
products reading it (a dense of a transposed weight: PyTorch's ``linear``)
and into the product it transposes, in a compiled training step and in an
export, giving the same numbers; a transpose of a constant or of other axes
stays."""
import warnings

import numpy as np

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.graph.ir import Graph
from kiln.graph.transposes import fold_transposes
from kiln.nn import functional as F
from kiln.runtime import Predictor
from kiln.te import call


class TorchLinear(nn.Module):
    """Two layers holding their weights as PyTorch does, (out, in), read through a transpose."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.w1 = nn.Parameter(rng.standard_normal((32, 16)).astype("float32") * 0.3)
        self.b1 = nn.Parameter(rng.standard_normal(32).astype("float32") * 0.1)
        self.w2 = nn.Parameter(rng.standard_normal((10, 32)).astype("float32") * 0.3)
        self.b2 = nn.Parameter(np.zeros(10, "float32"))

    def forward(self, x):
        h = call("dense", x, F.transpose(self.w1), self.b1, relu=True)
        return call("dense", h, F.transpose(self.w2), self.b2)


def _ops(graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


def test_a_training_step_reads_transposed_weights_in_place_and_trains_as_eagerly():
    x = np.random.default_rng(1).standard_normal((8, 16)).astype("float32")
    y = np.arange(8, dtype="int32") % 10
    losses = {}
    for compiled in (False, True):
        model = TorchLinear()
        optimizer = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        loss_fn = nn.SoftmaxLoss()
        if compiled:
            step = kiln.compile(lambda a, b: loss_fn(model(a), b), optimizer)
            with warnings.catch_warnings():
                warnings.simplefilter("error", kiln.nn.compiled.CompileWarning)  # compiled, not run eagerly
                losses[compiled] = [float(step(x, y).numpy()) for _ in range(5)]
        else:
            losses[compiled] = []
            for _ in range(5):
                optimizer.zero_grad()
                loss = loss_fn(model(kiln.Tensor(x)), kiln.Tensor(y))
                loss.backward()
                optimizer.step()
                losses[compiled].append(float(loss.numpy()))
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)
    assert losses[True][-1] < losses[True][0]


def test_the_pass_leaves_no_transpose_of_a_weight_or_of_its_gradient():
    g = Graph()
    x, w, dy = g.input("x", (8, 16), "float32"), g.input("w", (32, 16), "float32"), g.input("dy", (8, 32), "float32")
    wt, = g.apply("transpose", [w])
    y, = g.apply("dense", [x, wt, g.const(np.ones(32, "float32"))], {"relu": True})
    dwt, = g.apply("matmul", [x, dy], {"transpose_a": True})  # dense's weight gradient, (16, 32)
    dw, = g.apply("transpose", [dwt])  # the transpose's gradient
    g.output(y)
    g.output(dw)
    assert fold_transposes(g) == 2
    assert _ops(g) == ["matmul", "add", "relu", "matmul"]
    assert g.nodes[0].attrs["transpose_b"] and not g.nodes[0].attrs["transpose_a"]
    assert g.nodes[3].inputs[0] is dy and g.nodes[3].inputs[1] is x  # dyᵀ x: (32, 16)
    assert g.nodes[3].attrs["transpose_a"] and not g.nodes[3].attrs["transpose_b"]
    assert tuple(g.outputs[1].shape) == (32, 16)


def test_transposes_of_constants_or_of_other_axes_stay():
    g = Graph()
    x = g.input("x", (2, 4, 8, 8), "float32")
    c = g.const(np.ones((8, 8), "float32"))
    ct, = g.apply("transpose", [c])
    heads, = g.apply("transpose", [x], {"axes": (0, 2, 1, 3)})
    y, = g.apply("matmul", [heads, ct])
    g.output(y)
    assert fold_transposes(g) == 0
    assert _ops(g) == ["transpose", "transpose", "matmul"]


class Attention(nn.Module):
    def forward(self, q, k):
        return F.matmul(q, F.transpose(k))  # scores: q kᵀ


def test_an_export_reads_keys_transposed_in_place(tmp_path):
    q = np.random.default_rng(2).standard_normal((2, 4, 6, 8)).astype("float32")
    k = np.random.default_rng(3).standard_normal((2, 4, 6, 8)).astype("float32")
    graph = optimize(trace(Attention(), (q[:1], k[:1])), kiln.cpu())
    assert "transpose" not in [n.op.name for n in graph.nodes]
    predictor = Predictor(kiln.export(Attention(), (q[:1], k[:1]), tmp_path / "m.so"))
    np.testing.assert_allclose(predictor(q, k), q @ np.swapaxes(k, -1, -2), rtol=1e-5, atol=1e-5)


def test_a_product_with_a_constant_matrix_exports_as_a_packed_dense_layer(tmp_path):
    class Linear(nn.Module):  # PyTorch's layout, as an imported linear reads it: x wᵀ + b
        def __init__(self):
            rng = np.random.default_rng(4)
            self.w = nn.Parameter(rng.standard_normal((24, 16)).astype("float32"))
            self.b = nn.Parameter(rng.standard_normal(24).astype("float32"))

        def forward(self, x):
            return call("matmul", x, self.w, transpose_b=True) + self.b

    x = np.random.default_rng(5).standard_normal((4, 16)).astype("float32")
    model = Linear()
    graph = optimize(trace(model, x[:1]), kiln.cpu())
    assert [n.name for n in graph.nodes if not n.op.view] == ["dense_packed"]  # the bias folded into it
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so"))
    np.testing.assert_allclose(predictor(x), x @ model.w.numpy().T + model.b.numpy(), rtol=1e-5, atol=1e-5)


def test_a_product_of_sequences_with_a_constant_matrix_runs_on_their_rows(tmp_path):
    class Projection(nn.Module):  # (batch, tokens, features) @ W + b, as a sequence model's Linear computes it
        def __init__(self):
            rng = np.random.default_rng(6)
            self.w = nn.Parameter(rng.standard_normal((16, 24)).astype("float32"))
            self.b = nn.Parameter(rng.standard_normal(24).astype("float32"))

        def forward(self, x):
            return F.matmul(x, self.w) + self.b

    x = np.random.default_rng(7).standard_normal((3, 5, 16)).astype("float32")
    model = Projection()
    graph = optimize(trace(model, x[:1]), kiln.cpu())
    assert [n.name for n in graph.nodes if not n.op.view] == ["dense_packed_add"]  # the bias add in its write-back
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so"))
    np.testing.assert_allclose(predictor(x), x @ model.w.numpy() + model.b.numpy(), rtol=1e-5, atol=1e-5)

