"""``graph.patterns``: GELU written out as arithmetic becomes the ``gelu`` op
at export, in either form and any spelling, and fuses into the dense layer
before it; near misses and cones whose inner values are read elsewhere stay
as they are."""
import math

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.nn import functional as F
from kiln.nn.activations import erf

from helpers import exported_matches

K = math.sqrt(2 / math.pi)


def gelu_tanh(h, c=0.044715, cube=None):  # GPT-2's NewGELUActivation
    return 0.5 * h * (1.0 + F.tanh(K * (h + c * (h ** 3.0 if cube is None else cube))))


def gelu_erf(h):  # what torch.onnx.export writes for nn.GELU below opset 20
    return h * 0.5 * (erf(h / math.sqrt(2.0)) + 1.0)


class Dense(nn.Module):
    def __init__(self, act, keep_inner=False):
        self.fc, self.act, self.keep_inner = nn.Linear(16, 32), act, keep_inner

    def forward(self, x):
        h = self.fc(x)
        if self.keep_inner:  # the cube is an output too
            cube = h ** 3.0
            return self.act(h, cube=cube), cube
        return self.act(h)


@pytest.mark.parametrize("act, kernel", [(gelu_tanh, "dense_packed_gelu"), (gelu_erf, "dense_packed_gelu"),
                                         (lambda h: gelu_tanh(h, 0.044), None)])
def test_gelu_formulas_become_one_op_that_fuses_into_the_dense_layer(act, kernel, tmp_path):
    nn.init.manual_seed(0)
    model = Dense(act).eval()
    x = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32) * 2
    graph = optimize(trace(model, x[:1]), kiln.cpu())
    names = [n.name for n in graph.nodes if not n.op.view]
    if kernel is None:  # another constant: another function, left as the model wrote it
        assert "gelu" not in " ".join(names) and any("tanh" in n for n in names), names
    else:
        assert names == [kernel], names
    exported_matches(model, x, tmp_path)


def test_a_cone_whose_inner_value_is_read_elsewhere_is_left_alone():
    nn.init.manual_seed(0)
    graph = optimize(trace(Dense(gelu_tanh, keep_inner=True).eval(), np.zeros((1, 16), "float32")), kiln.cpu())
    names = " ".join(n.name for n in graph.nodes)
    assert "gelu" not in names and "tanh" in names, names
