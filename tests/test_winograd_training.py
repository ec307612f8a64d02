"""Winograd convolutions where the weights change (``kiln.strategy.conv2d``): the
data gradient's weight transform, which convolutions a compiled step's pass
rewrites, a step's numerics against direct convolutions, and eager ops."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.strategy import Direct, choose
from kiln.te import get_op
from kiln.te.layout import blocked_array

from test_compile import SHAPES, _batches, _state_gap, _twins

#: the largest error relative to the output's largest magnitude, as ``tests/test_winograd.py`` bounds it
RELATIVE = {2: 4e-6, 4: 2e-5}


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("n, o, c, h, wd, padding, oc, in_block", [
    (2, 32, 16, 8, 8, 1, 16, 16),   # the digits CNN's second conv, its gradient blocked as the step reads it
    (1, 5, 20, 7, 9, 0, 8, 0),      # gy smaller than the input: the gradient pads 2; C not a block multiple
    (2, 12, 6, 9, 5, (2, 1), 8, 0),  # padding 2 (the gradient's 0) and 1
])
def test_the_flipped_weight_runs_the_stride_1_data_gradient(n, o, c, h, wd, padding, oc, in_block, tile):
    rng = np.random.default_rng(0)
    gy = rng.standard_normal((n, o, h, wd)).astype("float32")
    w = rng.standard_normal((o, c, 3, 3)).astype("float32")
    ph, pw = padding if isinstance(padding, tuple) else (padding, padding)
    in_size = (h - 2 + 2 * (1 - ph) + 2, wd - 2 + 2 * (1 - pw) + 2)
    want = get_op("conv2d_backward_data").reference(gy.astype("float64"), w.astype("float64"), in_size=in_size,
                                                     stride=(1, 1), padding=(ph, pw), dilation=(1, 1))
    u = kiln.build("winograd_conv2d_weight", [w.shape], attrs={"oc": oc, "tile": tile, "flip": True})(w)
    assert u.shape == (-(-c // oc), tile + 2, tile + 2, o, oc)
    gi = blocked_array(gy, in_block) if in_block else gy
    attrs = {"out_channels": c, "padding": (2 - ph, 2 - pw), "in_block": in_block}
    got = kiln.build("conv2d_winograd", [gi.shape, u.shape], attrs=attrs)(gi, u)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= RELATIVE[tile] * np.abs(want).max()


def _net():
    """A 3x3 stride-1 conv (16 -> 16: Winograd), a stride-2 one and a 16-channel 5x5 one (direct)."""
    return nn.Sequential(nn.Conv(1, 16, 3), nn.ReLU(), nn.Conv(16, 16, 3), nn.ReLU(), nn.Conv(16, 16, 3, stride=2),
                         nn.ReLU(), nn.Conv(16, 16, 5), nn.GlobalAvgPool2d(), nn.Linear(16, 10))


def test_the_step_runs_stride_1_3x3_convs_and_their_data_gradients_as_winograd():
    """Forward and data gradient of the 16-channel 3x3 stride-1 conv become
    Winograd convolutions reading blocked input (its bias and relu still its
    write-back); the first conv (one input channel), the stride-2 conv and the
    5x5 one stay direct, and so do their data gradients; ``winograd=False``
    leaves every convolution direct."""
    kiln.manual_seed(0)
    model, loss_fn = _net(), nn.SoftmaxLoss()
    (x, y), = _batches((1, 12, 12), 1, 8)
    args = (nn.Tensor(x), nn.Tensor(y))
    graph = kiln.compile(lambda a, b: loss_fn(model(a), b), nn.optim.SGD(model.parameters(), lr=0.1)).graph(*args)
    ops = [n.op.name for n in graph.nodes]
    winograd = [n for n in graph.nodes if n.op.name == "conv2d_winograd"]
    flips = [n.inputs[1].node.attrs["flip"] for n in winograd]
    assert sorted(flips) == [False, True]
    assert all(n.attrs["in_block"] and n.inputs[0].node.op.name == "to_blocked" for n in winograd)
    forward = winograd[flips.index(False)]
    assert [op.name for op, _, _ in forward.epilogue] == ["add", "relu"]
    assert ops.count("conv2d") == 3 and ops.count("winograd_conv2d_weight") == 2
    # the data gradients of the stride-2 and 5x5 convs (the first conv's is pruned: x needs none)
    assert ops.count("conv2d_backward_data") == 2
    kiln.manual_seed(0)
    plain = _net()
    graph = kiln.compile(lambda a, b: loss_fn(plain(a), b), nn.optim.SGD(plain.parameters(), lr=0.1),
                         winograd=False).graph(*args)
    assert not any(n.op.name in ("conv2d_winograd", "to_blocked") for n in graph.nodes)


@pytest.mark.parametrize("name", ["cnn", "resnet"])
def test_a_step_with_winograd_convs_trains_as_one_with_direct_convs(name):
    """The zoo CNN and ResNet (whose 16- and 32-channel stride-1 convs run as
    Winograd) against the same compiled step with direct convs over 10
    steps: losses and parameters measured within 2.2e-7 relative and 2.4e-7
    absolute; allowed 1e-5. (Further on, the two runs' rounding differences
    grow as those of any two kernels do: over 50 steps the ResNet's losses
    measured 1.8e-4 apart.)"""
    direct, winograd = _twins(name)
    loss_fn = nn.SoftmaxLoss()
    steps = [kiln.compile(lambda x, y, m=m: loss_fn(m(x), y),
                          nn.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4), winograd=w)
             for m, w in ((direct, False), (winograd, True))]
    batches, probe = _batches(SHAPES[name], 10, 16), _twins(name)[0]
    graph = kiln.compile(lambda x, y: loss_fn(probe(x), y)).graph(*map(nn.Tensor, batches[0]))
    assert any(n.op.name == "conv2d_winograd" for n in graph.nodes)
    for x, y in batches:
        want, got = (float(step(x, y).numpy()) for step in steps)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert _state_gap(direct, winograd) < 1e-5


@pytest.mark.parametrize("on", [True, False])
def test_eager_convs_dispatch_to_winograd_unless_switched_off(on, monkeypatch):
    """Eager: the conv and its data gradient run as the kernels of a
    ``StagedKernel`` of the Winograd implementation (blocking, weight
    transform, Winograd conv), or as the direct kernels with
    ``KILN_WINOGRAD=0``; either way the output and the
    gradients match numpy within the Winograd bound."""
    monkeypatch.setenv("KILN_WINOGRAD", "1" if on else "0")
    kiln.manual_seed(3)
    conv = nn.Conv(16, 24, 3)
    # 6 tiles of F(4x4) an image: 30 in the batch, for 24 output channels (16 in the data gradient)
    x = nn.Tensor(np.random.default_rng(0).standard_normal((5, 16, 9, 7)).astype("float32"), requires_grad=True)
    y = conv(x)
    y.sum().backward()
    kinds = {k.op.name: getattr(k, "implementation", Direct("")).name for k in conv.kernel_pool.kernels()}
    assert kinds["conv2d"] == kinds["conv2d_backward_data"] == ("winograd" if on else "direct")
    w = conv.weight.numpy().astype("float64")
    xs = x.numpy().astype("float64")
    want = get_op("conv2d").reference(xs, w, layout="NCHW", stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    want += conv.bias.numpy().reshape(1, -1, 1, 1)
    gx = get_op("conv2d_backward_data").reference(np.ones(want.shape), w, in_size=(9, 7), stride=(1, 1),
                                                  padding=(1, 1), dilation=(1, 1))
    for got, ref in ((y.numpy(), want), (x.grad.numpy(), gx)):
        assert np.abs(got - ref).max() <= RELATIVE[4] * np.abs(ref).max()


def test_the_strategy_keeps_what_winograd_does_not_fit_direct():
    """Weights that change every call: a dilation, a stride, a symbolic
    batch, a batch of fewer tiles than output channels and a data gradient
    whose padding is wider than its kernel stay direct; a 16-channel float32
    or float64 layer runs as Winograd."""
    conv, grad, cpu = get_op("conv2d"), get_op("conv2d_backward_data"), kiln.cpu()

    def planned(op, shapes, dtype="float32", **attrs):
        found = choose(op.check(shapes, [dtype] * 2, attrs), cpu)
        return None if isinstance(found, Direct) else found

    shapes = [(4, 16, 8, 8), (16, 16, 3, 3)]  # 4 tiles of F(4x4) an image: 16 for 16 channels
    assert planned(conv, shapes, padding=1) and planned(conv, shapes, "float64", padding=1)
    assert planned(conv, shapes, padding=2, dilation=2) is None
    assert planned(conv, shapes, padding=1, stride=2) is None
    assert planned(conv, [(kiln.te.sym("n"), 16, 8, 8), (16, 16, 3, 3)], padding=1) is None
    # fewer tiles than output channels: F(2x2) on 4x4 has 4 an image, 12 in 3 images, for 16 channels
    assert planned(conv, [(3, 16, 4, 4), (16, 16, 3, 3)], padding=1) is None
    assert planned(conv, [(4, 16, 4, 4), (16, 16, 3, 3)], padding=1)
    assert planned(grad, [(2, 16, 8, 8), (16, 16, 3, 3)], in_size=(10, 10), padding=0)
    assert planned(grad, [(2, 16, 12, 12), (16, 16, 3, 3)], in_size=(8, 8), padding=3) is None
