"""Winograd F(2x2, 3x3) inference convolution: the weight transform and
``conv2d_winograd`` against the direct convolution they replace, and the
export choosing it for small 3x3 layers."""
import numpy as np
import pytest

import kiln
from kiln.errors import ShapeError
from kiln.graph.export import optimize
from kiln.graph.prepack import winograd_fits
from kiln.graph.trace import trace
from kiln.nn.train import build_model
from kiln.schedules.cpu.conv2d import packed_channels
from kiln.te import get_op
from kiln.te.conv import _conv_nchw
from kiln.te.layout import blocked_array

#: the largest error measured relative to the output's largest magnitude
#: (float32, random normal inputs, 16-32 channels): 5e-7; the bound leaves room
RELATIVE = 4e-6


def _winograd(x, w, oc, padding, in_block=0, out_block=False, config=None):
    u = kiln.build("winograd_conv2d_weight", [w.shape], attrs={"oc": oc})(w)
    xi = blocked_array(x, in_block) if in_block else x
    attrs = {"out_channels": w.shape[0], "padding": padding, "in_block": in_block, "out_block": out_block}
    return kiln.build("conv2d_winograd", [xi.shape, u.shape], attrs=attrs, config=config)(xi, u)


@pytest.mark.parametrize("n, c, h, wd, o, padding, oc, in_block, out_block", [
    (2, 16, 8, 8, 32, 1, 32, 16, True),   # the digits CNN's second layer
    (1, 3, 7, 5, 5, 1, 8, 0, False),      # odd map: the last tiles cut; O not a block multiple
    (2, 4, 6, 9, 8, 0, 8, 0, True),       # no padding
    (1, 8, 5, 5, 16, 2, 16, 8, False),    # padding 2
    (3, 20, 7, 7, 40, (1, 0), 16, 8, True),  # uneven padding, blocked input with a padded last block
])
def test_matches_the_direct_convolution(n, c, h, wd, o, padding, oc, in_block, out_block):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, wd)).astype("float32")
    w = rng.standard_normal((o, c, 3, 3)).astype("float32")
    pad = padding if isinstance(padding, tuple) else (padding, padding)
    want = _conv_nchw(x, w, (1, 1), pad, (1, 1))
    if out_block:
        want = blocked_array(want, oc)
    got = _winograd(x, w, oc, padding, in_block, out_block)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= RELATIVE * np.abs(want).max()


def test_every_register_tile_matches():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 16, 8, 8)).astype("float32"), rng.standard_normal((32, 16, 3, 3)).astype("float32")
    want = _conv_nchw(x, w, (1, 1), (1, 1), (1, 1))
    for tile in (1, 2, 4, 8, 16):
        for par in (0, 1):
            got = _winograd(x, w, 32, 1, config={"tile_p": tile, "parallel": par})
            assert np.abs(got - want).max() <= RELATIVE * np.abs(want).max(), (tile, par)


def test_bad_weights_name_the_op_and_argument():
    with pytest.raises(ShapeError, match="winograd_conv2d_weight.*3x3"):
        kiln.build("winograd_conv2d_weight", [(8, 4, 5, 5)], attrs={"oc": 8})
    with pytest.raises(ShapeError, match="conv2d_winograd.*'w'.*Winograd blocks"):
        kiln.build("conv2d_winograd", [(1, 4, 8, 8), (1, 3, 3, 4, 8)], attrs={"out_channels": 8})
    with pytest.raises(ShapeError, match="conv2d_winograd.*channels"):
        kiln.build("conv2d_winograd", [(1, 5, 8, 8), (1, 4, 4, 4, 8)], attrs={"out_channels": 8})


def _workload(x, w, **attrs):
    return get_op("conv2d").check([x, w], ["float32", "float32"], attrs)


def test_the_export_takes_winograd_for_small_3x3_layers_only():
    cpu = kiln.cpu()
    small = _workload((16, 16, 8, 8), (32, 16, 3, 3), padding=1)
    assert winograd_fits(small, packed_channels(small, cpu))
    for big in (_workload((1, 64, 56, 56), (64, 64, 3, 3), padding=1),   # the tiles' transform overflows L2
                _workload((1, 512, 7, 7), (512, 512, 3, 3), padding=1),   # 16 channel blocks
                _workload((1, 1, 8, 8), (16, 1, 3, 3), padding=1),        # one input channel
                _workload((1, 16, 8, 8), (32, 16, 3, 3), padding=1, stride=2),
                _workload((1, 16, 8, 8), (32, 16, 5, 5), padding=2)):
        assert not winograd_fits(big, packed_channels(big, cpu))


def test_an_exported_cnn_runs_its_second_conv_as_winograd():
    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu())
    assert [n.op.name for n in graph.nodes if n.op.name.startswith("conv2d")] == ["conv2d_packed", "conv2d_winograd"]
    winograd = next(n for n in graph.nodes if n.op.name == "conv2d_winograd")
    assert winograd.attrs["in_block"] and winograd.attrs["out_block"]  # in the blocked region


def test_optimize_can_keep_every_conv_direct():
    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu(), winograd=False)
    assert [n.op.name for n in graph.nodes if n.op.name.startswith("conv2d")] == ["conv2d_packed", "conv2d_packed"]
