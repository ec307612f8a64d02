"""The strategy layer (``kiln.strategy``): which implementation runs a
workload, and that the kernel pool and the graph passes carry out any
implementation it returns without knowing the algorithm."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError
from kiln.graph.implement import implement
from kiln.runtime.staged import StagedKernel
from kiln.schedules.cpu.conv2d_defaults import packed_channels
from kiln.schedules.cpu.matmul import panel_width
from kiln.strategy import Direct, Packed, Winograd, base, choose, register, strategies
from kiln.te import get_op, sym

CPU = kiln.cpu()


def _conv(x, w, dtype="float32", **attrs):
    return get_op("conv2d").check([x, w], dtype, attrs)


def test_strategies_are_listed_by_priority():
    assert [s.name for s in strategies("conv2d")] == ["winograd", "depthwise", "packed"]
    assert [s.name for s in strategies("conv2d_backward_data")] == ["winograd"]
    assert [s.name for s in strategies("dense")] == ["packed"]
    assert strategies("relu") == []


def test_a_constant_3x3_conv_runs_as_winograd_else_packed():
    w = _conv((1, 64, 56, 56), (64, 64, 3, 3), padding=1)
    found = choose(w, CPU, constant_weight=True)
    assert isinstance(found, Winograd) and found.tile == 4 and found.op == "conv2d_winograd"
    assert found.weight_op == "winograd_conv2d_weight"
    assert dict(found.weight_attrs) == {"oc": packed_channels(w, CPU), "tile": 4} and found.in_block == 0
    packed = choose(w, CPU, constant_weight=True, without=("winograd",))
    assert isinstance(packed, Packed) and packed.op == "conv2d_packed"
    assert packed.attrs["out_channels"] == 64 and "layout" not in packed.attrs
    assert dict(packed.weight_attrs) == {"oc": packed_channels(w, CPU)}
    one = _conv((1, 64, 56, 56), (128, 64, 1, 1))
    assert isinstance(choose(one, CPU, constant_weight=True), Packed)  # 1x1: no Winograd
    # a symbolic batch: the export's constant weight still runs as Winograd
    assert isinstance(choose(_conv((sym("n"), 64, 56, 56), (64, 64, 3, 3), padding=1), CPU, True), Winograd)


def test_what_runs_directly():
    w = _conv((1, 64, 56, 56), (64, 64, 3, 3), padding=1)
    nhwc = _conv((1, 56, 56, 64), (3, 3, 64, 64), padding=1, layout="NHWC")
    assert isinstance(choose(nhwc, CPU, constant_weight=True), Direct)
    assert isinstance(choose(w, kiln.cuda("sm_80"), constant_weight=True), Direct)
    # a weight that changes every call: one image has 196 tiles of F(4x4) for 64 channels, so it pays...
    assert isinstance(choose(w, CPU), Winograd) and choose(w, CPU).in_block == CPU.lanes("float32")
    # ...but not on 8x8 with 4 tiles an image for 64 output channels, nor at a symbolic batch
    assert isinstance(choose(_conv((8, 64, 8, 8), (64, 64, 3, 3), padding=1), CPU), Direct)
    assert isinstance(choose(_conv((sym("n"), 64, 56, 56), (64, 64, 3, 3), padding=1), CPU), Direct)
    relu = choose(get_op("relu").check([(4, 4)]), CPU)
    assert isinstance(relu, Direct) and relu.op == "relu" and relu.weight_op is None


def test_a_constant_depthwise_conv_runs_packed_in_the_blocks_of_the_conv_writing_its_input():
    conv = _conv((1, 144, 56, 56), (144, 1, 3, 3), padding=1, stride=2, groups=144)
    found = choose(conv, CPU, constant_weight=True)
    expansion = _conv((1, 144, 56, 56), (144, 144, 1, 1))  # a 1x1 conv writing this input
    assert isinstance(found, Packed) and found.op == "depthwise_conv2d_packed" and found.in_block == 0
    assert dict(found.attrs) == {"channels": 144, "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1)}
    assert found.weight_op == "pack_conv2d_weight" and dict(found.weight_attrs) == {"oc": packed_channels(expansion,
                                                                                                           CPU)}
    eager = choose(conv, CPU, constant_weight=False)  # a weight that changes every call: the direct kernel
    assert isinstance(eager, Direct) and eager.attrs["groups"] == 144


@pytest.mark.parametrize("x, w, groups", [((1, 144, 56, 56), (144, 1, 3, 3), 144),  # depthwise
                                           ((1, 32, 56, 56), (64, 1, 3, 3), 32),  # depthwise, multiplier 2
                                           ((1, 128, 28, 28), (128, 4, 3, 3), 32),  # ResNeXt-style
                                           ((8, 64, 56, 56), (64, 32, 3, 3), 2)])
def test_grouped_convs_run_directly(x, w, groups):
    """Neither the Winograd kernel nor ``conv2d_packed`` reads groups: a
    grouped conv, its weight constant or not (but a constant depthwise one,
    above), and its data gradient run directly (3x3, stride 1 and channels
    that would take Winograd ungrouped)."""
    conv = _conv(x, w, padding=1, groups=groups)
    for constant in (True, False):
        if constant and groups == x[1] == w[0]:
            continue
        found = choose(conv, CPU, constant_weight=constant)
        assert isinstance(found, Direct) and found.op == "conv2d" and found.attrs["groups"] == groups
    data = get_op("conv2d_backward_data").check([conv.out_shapes[0], w], "float32",
                                                {"in_size": x[2:], "padding": 1, "groups": groups})
    assert isinstance(choose(data, CPU), Direct)


def test_dense_packs_a_constant_weight_in_panels():
    w = get_op("dense").check([(8, 784), (784, 512), (512,)], "float32", {"relu": True})
    found = choose(w, CPU, constant_weight=True)
    assert isinstance(found, Packed) and found.op == "dense_packed" and dict(found.attrs) == dict(w.attrs)
    assert dict(found.weight_attrs) == {"bn": panel_width(512, "float32", CPU)}
    assert isinstance(choose(w, CPU), Direct)


def test_a_strategy_name_registers_once():
    with pytest.raises(AttrError, match="already has a strategy named 'packed'"):
        register("dense", "packed", 5)(lambda *a: None)


@pytest.fixture
def packed_in_every_call(monkeypatch):
    """A strategy registered for the test: a conv2d whose weight changes
    every call packed in blocks of 8 channels at each call and run by
    ``conv2d_packed`` — a variant neither the pool nor the passes know."""
    monkeypatch.setitem(base._STRATEGIES, "conv2d", list(base._STRATEGIES["conv2d"]))

    @register("conv2d", "test_packed_every_call", priority=30)
    def _every_call(workload, target, constant_weight):
        if constant_weight or workload.attrs["layout"] != "NCHW":
            return None
        attrs = {k: v for k, v in workload.attrs.items() if k not in ("layout", "groups")}
        return Packed("conv2d_packed", {**attrs, "out_channels": workload.shapes[1][0]}, "pack_conv2d_weight",
                      {"oc": 8})


def test_a_new_strategy_runs_eagerly_without_changes_elsewhere(packed_in_every_call):
    kiln.manual_seed(0)
    conv = nn.Conv(3, 16, 3)
    x = np.random.default_rng(0).standard_normal((2, 3, 10, 10)).astype("float32")
    got = conv(nn.Tensor(x)).numpy()
    kernel = next(k for k in conv.kernel_pool.kernels("conv2d"))
    assert isinstance(kernel, StagedKernel) and kernel.implementation.name == "packed"
    assert [k.op.name for k in kernel.stages] == ["pack_conv2d_weight", "conv2d_packed"]
    w = conv.weight.numpy()
    want = get_op("conv2d").reference(x, w, layout="NCHW", stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    want = want + conv.bias.numpy().reshape(1, -1, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_new_strategy_rewrites_a_graph_without_changes_elsewhere(packed_in_every_call):
    graph = _two_input_graph()
    assert implement(graph, CPU) == 1
    assert [n.op.name for n in graph.nodes] == ["pack_conv2d_weight", "conv2d_packed"]
    assert graph.nodes[1].inputs[1] is graph.nodes[0].outputs[0]


def _two_input_graph():
    """conv2d(x, w) with both inputs of the graph (the weight no constant)."""
    from kiln.graph.ir import Graph, Value

    graph = Graph()
    x, w = Value((2, 3, 10, 10), "float32", name="x"), Value((16, 3, 3, 3), "float32", name="w")
    graph.inputs = [x, w]
    check = get_op("conv2d").check([x.shape, w.shape], "float32", {"padding": 1})
    node = graph.add(check.op, check.attrs, [x, w], list(zip(check.out_shapes, check.out_dtypes)))
    graph.outputs = list(node.outputs)
    return graph
