"""Channel-blocked layouts (graph.layout): convolutions hand each other
NCHW[c]c blocks, pooling runs in them, and conversions happen only where a
blocked region meets the rest of the graph; every graph still computes what
the model's eval forward computes, at batch 1, 7 and 64."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.graph import optimize, trace
from kiln.graph.layout import block_layouts
from kiln.nn.train import build_model
from kiln.runtime import Predictor

from devices import cpu_level  # noqa: F401 - a fixture
from helpers import conv_blocks

BATCHES = (1, 7, 64)


def _matches(model, x, tmp_path, rtol=1e-5):
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so"))
    for batch in BATCHES:
        want = model(kiln.Tensor(x[:batch])).numpy()
        scale = np.max(np.abs(want)) + 1e-12
        assert np.max(np.abs(predictor(x[:batch]) - want)) / scale < rtol, batch


def _optimized(model, x):
    return optimize(trace(model, x[:1]), kiln.cpu())


def _convs(graph):
    """The convolutions in order, a prologue (graph.fuse.fuse_prologues) before the conv computing it."""
    return [c for n in graph.nodes if n.op.channel_blocked for c in ([n.prologue] if n.prologue else []) + [n]]


def _summary(graph):
    """Each node as (name, in_block, out_block or the layout) for the nodes that have them."""
    return [(n.name, n.attrs.get("in_block"), n.attrs.get("out_block", n.attrs.get("layout"))) for n in graph.nodes]


@pytest.fixture
def images():
    return np.random.default_rng(0).standard_normal((64, 1, 8, 8)).astype("float32")


def test_the_cnn_carries_blocks_from_conv_to_conv_to_pooling(images, tmp_path, cpu_level):
    nn.init.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = _optimized(model, images)
    # the second conv reads the first's blocks and writes blocks (3x3 on a small map), pooled in its tasks;
    # the first reads the NCHW input as it is and writes it blocks, computed in the second's tasks where
    # those write one channel block (graph.fuse.fuse_prologues: a task per image)
    block, _ = conv_blocks((1, 1, 8, 8), (16, 1, 3, 3))
    _, second_blocks = conv_blocks((1, 16, 8, 8), (32, 16, 3, 3))
    convs = [("conv2d_packed_add_relu_conv2d_winograd_add_relu_global_avg_pool2d", block, True)]
    if second_blocks > 1:
        convs = [("conv2d_packed_add_relu", 0, True), ("conv2d_winograd_add_relu_global_avg_pool2d", block, True)]
    assert _summary(graph) == [*convs,
                               ("from_blocked", None, None),  # the one conversion: on the 1x1 pooled output
                               ("reshape", None, None), ("dense_packed", None, None)]
    winograd = graph.nodes[len(convs) - 1]
    first = winograd.prologue or graph.nodes[0]
    assert (first.attrs["in_block"], first.attrs["out_block"]) == (0, True)
    assert winograd.inputs[0] is first.outputs[0] and len(first.outputs[0].shape) == 5
    assert len(winograd.outputs[0].shape) == 5
    _matches(model, images, tmp_path)


def test_the_resnet_blocks_every_conv_and_its_residual_adds(images, tmp_path):
    nn.init.manual_seed(1)
    model = build_model("resnet", (1, 8, 8), 10)
    model.train()
    model(kiln.Tensor(images))  # BatchNorm statistics away from (0, 1)
    model.eval()
    graph = _optimized(model, images)
    convs = _convs(graph)
    assert len(convs) == 6 and all(n.attrs["out_block"] for n in convs)
    out_blocks = [int(n.inputs[1].shape[-1]) for n in convs]  # each weight's channel block (the ISA's choice)
    # stem, block 1's two convs, block 2's first conv, 1x1 shortcut, second conv (fused with the residual add,
    # in the add's place): each reads its producer's blocks
    assert [n.attrs["in_block"] for n in convs] == [0] + [out_blocks[i] for i in (0, 1, 2, 2, 3)]
    assert not [n for n in graph.nodes if n.op.name == "to_blocked"]  # the residuals are blocks already
    _matches(model, images, tmp_path)


class StemPool(nn.Module):
    """ResNet's stem: a conv, a max pool, then a block whose residual is the pool's output."""

    def __init__(self):
        self.stem, self.pool = nn.Conv(1, 16, 3), nn.MaxPool2d(3, stride=2, padding=1)
        self.a, self.b, self.head = nn.Conv(16, 16, 3), nn.Conv(16, 16, 1), nn.GlobalAvgPool2d()

    def forward(self, x):
        h = self.pool(nn.ReLU()(self.stem(x)))
        return self.head(nn.ReLU()(self.b(nn.ReLU()(self.a(h))) + h))


def test_a_max_pool_between_convs_pools_their_blocks(images, tmp_path):
    nn.init.manual_seed(3)
    model = StemPool().eval()
    graph = _optimized(model, images)
    pool = next(n for n in graph.nodes if n.op.name == "max_pool2d")
    stem, a, b = (n for n in graph.nodes if n.op.channel_blocked)
    assert stem.attrs["out_block"] and pool.attrs["layout"] == "NCHWc" and len(pool.outputs[0].shape) == 5
    assert a.inputs[0] is pool.outputs[0] and a.attrs["in_block"] == int(stem.inputs[1].shape[-1])
    assert not [n for n in graph.nodes if n.op.name == "to_blocked"]  # b's residual, the pool's, is blocks already
    _matches(model, images, tmp_path)


class SharedWithPooling(nn.Module):
    """A conv whose output feeds another conv and a max pooling whose output
    joins a value the graph returns (so the pooling stays NCHW)."""

    def __init__(self):
        self.a, self.b, self.pool = nn.Conv(1, 16, 3), nn.Conv(16, 16, 3), nn.MaxPool2d(1)

    def forward(self, x):
        y = nn.ReLU()(self.a(x))
        return self.b(y) + self.pool(y)


def test_a_value_read_by_an_op_without_blocks_stays_nchw(images, tmp_path):
    nn.init.manual_seed(2)
    model = SharedWithPooling().eval()
    graph = _optimized(model, images)
    first, second = (n for n in graph.nodes if n.op.channel_blocked)
    assert not first.attrs["out_block"] and len(first.outputs[0].shape) == 4  # max_pool2d reads it too
    assert second.attrs["in_block"] == 0 and not second.attrs["out_block"]  # its output is the graph's
    assert not [n for n in graph.nodes if n.op.name in ("to_blocked", "from_blocked")]
    _matches(model, images, tmp_path)


class ResidualOfInput(nn.Module):
    """pool(relu(conv(relu(conv(x))) + x)): the second conv writes blocks for
    the pooling, so its residual, the graph input, is converted to blocks."""

    def __init__(self):
        self.a, self.b, self.pool = nn.Conv(16, 16, 3), nn.Conv(16, 16, 3), nn.GlobalAvgPool2d()

    def forward(self, x):
        return self.pool(nn.ReLU()(self.b(nn.ReLU()(self.a(x))) + x))


def test_a_residual_of_an_nchw_value_is_converted_once_at_the_edge(tmp_path):
    nn.init.manual_seed(3)
    x = np.random.default_rng(3).standard_normal((64, 16, 6, 6)).astype("float32")
    model = ResidualOfInput().eval()
    graph = _optimized(model, x)
    assert [n.name for n in graph.nodes] == ["conv2d_winograd_add_relu", "to_blocked",
                                             "conv2d_winograd_add_add_relu_global_avg_pool2d", "from_blocked",
                                             "reshape"]
    convert, second = graph.nodes[1], graph.nodes[2]
    assert convert.inputs[0] is graph.inputs[0] and convert.attrs["block"] == 16
    assert second.attrs["in_block"] == 16 and second.attrs["out_block"]
    assert any(v is convert.outputs[0] for _, _, others in second.epilogue for v in others)
    _matches(model, x, tmp_path)


def test_the_pass_is_idempotent_and_counts_the_blocked_convs(images):
    nn.init.manual_seed(4)
    graph = _optimized(build_model("cnn", (1, 8, 8), 10).eval(), images)
    before = _summary(graph)
    assert block_layouts(graph) == 0  # nothing left to block
    assert _summary(graph) == before
