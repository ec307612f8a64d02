"""Winograd F(2x2, 3x3) and F(4x4, 3x3) inference convolutions: the weight
transform and ``conv2d_winograd`` against the direct convolution they
replace, the export choosing them and their output tile, and a global pool
computed inside one."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, ShapeError
from kiln.graph.export import optimize
from kiln.strategy.conv2d import winograd_tile
from kiln.graph.trace import trace
from kiln.nn.train import build_model
from kiln.runtime import Predictor
from kiln.te import get_op
from kiln.te.conv import _conv_nchw
from kiln.te.layout import blocked_array

from helpers import conv_blocks

#: for each output tile, the largest error measured relative to the
#: output's largest magnitude (float32, random normal inputs, 3-20 channels
#: here): F(2x2) 3e-7, F(4x4) 3.3e-6; the bounds leave room
RELATIVE = {2: 4e-6, 4: 2e-5}


def _winograd(x, w, oc, padding, in_block=0, out_block=False, config=None, tile=2):
    u = kiln.build("winograd_conv2d_weight", [w.shape], attrs={"oc": oc, "tile": tile})(w)
    xi = blocked_array(x, in_block) if in_block else x
    attrs = {"out_channels": w.shape[0], "padding": padding, "in_block": in_block, "out_block": out_block}
    return kiln.build("conv2d_winograd", [xi.shape, u.shape], attrs=attrs, config=config)(xi, u)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("n, c, h, wd, o, padding, oc, in_block, out_block", [
    (2, 16, 8, 8, 32, 1, 32, 16, True),   # the digits CNN's second layer
    (1, 3, 7, 5, 5, 1, 8, 0, False),      # odd map: the last tiles cut; O not a block multiple
    (2, 4, 6, 9, 8, 0, 8, 0, True),       # no padding
    (1, 8, 5, 5, 16, 2, 16, 8, False),    # padding 2
    (3, 20, 7, 7, 40, (1, 0), 16, 8, True),  # uneven padding, blocked input with a padded last block
    (2, 8, 4, 4, 8, 1, 8, 8, True),       # one 4x4 tile per image (F(4x4))
])
def test_matches_the_direct_convolution(n, c, h, wd, o, padding, oc, in_block, out_block, tile):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, wd)).astype("float32")
    w = rng.standard_normal((o, c, 3, 3)).astype("float32")
    pad = padding if isinstance(padding, tuple) else (padding, padding)
    want = _conv_nchw(x, w, (1, 1), pad, (1, 1))
    if out_block:
        want = blocked_array(want, oc)
    got = _winograd(x, w, oc, padding, in_block, out_block, tile=tile)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= RELATIVE[tile] * np.abs(want).max()


@pytest.mark.parametrize("tile, tiles", [(2, 16), (4, 4)])  # tiles per image on an 8x8 map
def test_every_register_tile_matches(tile, tiles):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 16, 8, 8)).astype("float32"), rng.standard_normal((32, 16, 3, 3)).astype("float32")
    want = _conv_nchw(x, w, (1, 1), (1, 1), (1, 1))
    # both thread settings; F(2x2)'s fused passes once (F(4x4)'s compile for seconds: the random configs of
    # tests/test_template_configs.py take them)
    for k, tile_p in enumerate(d for d in (1, 2, 4, 8, 16) if tiles % d == 0):
        config = {"tile_p": tile_p, "parallel": k % 2, "fuse_transforms": int(k == 0 and tile == 2)}
        got = _winograd(x, w, 32, 1, config=config, tile=tile)
        assert np.abs(got - want).max() <= RELATIVE[tile] * np.abs(want).max(), config


def test_bad_weights_name_the_op_and_argument():
    with pytest.raises(ShapeError, match="winograd_conv2d_weight.*3x3"):
        kiln.build("winograd_conv2d_weight", [(8, 4, 5, 5)], attrs={"oc": 8})
    with pytest.raises(AttrError, match="winograd_conv2d_weight.*'tile'.*2 or 4"):
        kiln.build("winograd_conv2d_weight", [(8, 4, 3, 3)], attrs={"oc": 8, "tile": 3})
    with pytest.raises(ShapeError, match="conv2d_winograd.*'w'.*Winograd blocks"):
        kiln.build("conv2d_winograd", [(1, 4, 8, 8), (1, 5, 5, 4, 8)], attrs={"out_channels": 8})
    with pytest.raises(ShapeError, match="conv2d_winograd.*'w'.*Winograd blocks"):
        kiln.build("conv2d_winograd", [(1, 4, 8, 8), (1, 6, 4, 4, 8)], attrs={"out_channels": 8})
    with pytest.raises(ShapeError, match="conv2d_winograd.*'w'.*Winograd blocks"):
        kiln.build("conv2d_winograd", [(1, 4, 8, 8), (1, 3, 3, 4, 8)], attrs={"out_channels": 8})
    with pytest.raises(ShapeError, match="conv2d_winograd.*channels"):
        kiln.build("conv2d_winograd", [(1, 5, 8, 8), (1, 4, 4, 4, 8)], attrs={"out_channels": 8})


def _workload(x, w, **attrs):
    return get_op("conv2d").check([x, w], ["float32", "float32"], attrs)


def test_the_export_picks_the_output_tile():
    for x, w, tile in [((16, 16, 8, 8), (32, 16, 3, 3), 4),      # the digits CNN's second layer
                       ((1, 64, 56, 56), (64, 64, 3, 3), 4),     # ResNet-18's first stage
                       ((1, 64, 112, 112), (64, 64, 3, 3), 0),   # its tiles' transforms stream through memory
                       ((1, 32, 7, 7), (32, 32, 3, 3), 4),       # 4 tiles of 4x4, 16 of 2x2
                       ((1, 32, 6, 6), (32, 32, 3, 3), 2),       # as many multiplies either way
                       ((1, 32, 4, 4), (32, 32, 3, 3), 2),       # one 4x4 tile per image
                       ((1, 256, 14, 14), (256, 256, 3, 3), 2),  # F(4x4) rounds too much this deep
                       # F(2x2) (too deep for F(4x4)) on 7x7: 16 tiles for 49 outputs, 0.58 of the direct
                       # multiplies (WINOGRAD_MAX_SHARE): direct
                       ((1, 512, 7, 7), (512, 512, 3, 3), 0),
                       ((1, 1, 8, 8), (16, 1, 3, 3), 0),         # one input channel
                       ((1, 16, 8, 8), (32, 16, 3, 3, {"stride": 2}), 0),
                       ((1, 16, 8, 8), (32, 16, 3, 3, {"dilation": 2}), 0),
                       ((1, 16, 8, 8), (32, 16, 5, 5), 0)]:
        attrs = {"padding": 1, **(w[4] if len(w) > 4 else {})}
        assert winograd_tile(_workload(x, w[:4], **attrs)) == tile, (x, w)


def test_an_exported_cnn_runs_its_second_conv_as_winograd():
    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu())
    # the first conv computed in the second's tasks where those write one channel block
    # (graph.fuse.fuse_prologues), else a kernel of its own
    one_block = conv_blocks((1, 16, 8, 8), (32, 16, 3, 3))[1] == 1
    assert [n.op.name for n in graph.nodes if n.op.name.startswith("conv2d")] == \
        ["conv2d_winograd"] if one_block else ["conv2d_packed", "conv2d_winograd"]
    winograd = next(n for n in graph.nodes if n.op.name == "conv2d_winograd")
    assert (winograd.prologue.op.name if one_block else winograd.prologue) == ("conv2d_packed" if one_block else None)
    assert winograd.attrs["in_block"] and winograd.attrs["out_block"]  # in the blocked region
    assert winograd.inputs[1].shape[1:3] == (6, 6)  # F(4x4, 3x3) on its 8x8 map


def test_optimize_can_keep_every_conv_direct():
    model = build_model("cnn", (1, 8, 8), 10).eval()
    graph = optimize(trace(model, np.zeros((1, 1, 8, 8), "float32")), kiln.cpu(), winograd=False)
    assert [n.op.name for n in graph.nodes if n.op.name.startswith("conv2d")] == ["conv2d_packed", "conv2d_packed"]


def test_a_global_pool_runs_inside_the_winograd_conv(tmp_path):
    """The pool after a Winograd conv joins its epilogue and runs in its
    tasks (every entry: one thread at batch 1, in parallel above), equal to
    the model's eval forward; on a 7x7 map (the last tiles cut) with 40
    channels (blocks, the last one padded). The zoo's resnet and cnn exports
    (tests/test_zoo.py, tests/test_graph.py) run it on whole tiles."""
    size, channels = 7, 40
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv(3, 16, 3), nn.ReLU(), nn.Conv(16, channels, 3), nn.BatchNorm2d(channels),
                          nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(channels, 10))
    x = np.random.default_rng(0).standard_normal((64, 3, size, size)).astype("float32")
    model(kiln.Tensor(x))  # BatchNorm statistics away from (0, 1)
    model.eval()
    graph = optimize(trace(model, x[:1]), kiln.cpu())
    names = [n.name for n in graph.nodes]
    assert "conv2d_winograd_add_relu_global_avg_pool2d" in names and "global_avg_pool2d" not in names, names
    tile = next(n for n in graph.nodes if n.op.name == "conv2d_winograd").inputs[1].shape[1] - 2
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so"))
    for batch in (1, 7, 64):
        want = model(kiln.Tensor(x[:batch])).numpy()
        assert np.abs(predictor(x[:batch]) - want).max() <= RELATIVE[tile] * np.abs(want).max(), batch


class ConvThenWinograd(nn.Module):
    """A direct conv (``first``: not 3x3 stride 1, or too few input channels
    for Winograd) read only by a Winograd conv of one channel block."""

    def __init__(self, first):
        self.first, self.second, self.bn = first, nn.Conv(16, 16, 3), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        y = nn.ReLU()(self.first(x))
        return self.head(nn.GlobalAvgPool2d()(nn.ReLU()(self.bn(self.second(y)))))


@pytest.mark.parametrize("first, size, small", [
    (lambda: nn.Conv(3, 16, 3, stride=2), 15, True),  # stride 2 on an odd map: 8x8 images of 16 channels
    (lambda: nn.Conv(2, 16, 5), 7, True),            # a 5x5 kernel, padding 2
    (lambda: nn.Conv(1, 16, 3), 40, False),          # 100 KB an image: past PROLOGUE_BYTES, a kernel of its own
], ids=["stride2", "5x5", "large"])
def test_a_small_direct_conv_runs_inside_the_winograd_conv_reading_it(first, size, small, tmp_path):
    """The producer becomes the Winograd conv's prologue, computed image by
    image in its tasks, where its output is small and the Winograd conv
    writes one channel block (a task per image); every entry equals the
    model's eval forward, a batch's own entry (``batches``, the graph
    specialized to it) too."""
    nn.init.manual_seed(1)
    model = ConvThenWinograd(first())
    x = np.random.default_rng(1).standard_normal((64, model.first.weight.shape[1], size, size)).astype("float32")
    model(kiln.Tensor(x))  # BatchNorm statistics away from (0, 1)
    model.eval()
    graph = optimize(trace(model, x[:1]), kiln.cpu())
    winograd = next(n for n in graph.nodes if n.op.name == "conv2d_winograd")
    second = (1, 16) + tuple(winograd.inputs[0].shape[2:4])  # its input map, NCHW or blocked
    fused = small and conv_blocks(second, (16, 16, 3, 3))[1] == 1
    assert (winograd.prologue is not None) == fused
    assert sum(n.op.name == "conv2d_packed" for n in graph.nodes) == (0 if fused else 1)
    tile = winograd.inputs[1].shape[1] - 2
    predictor = Predictor(kiln.export(model, x[:1], tmp_path / "m.so", batches=(7,)))
    assert predictor.meta["entries"][0] == {"name": "main_b7", "batch": 7}  # the first, so batch 7 runs it
    for batch in (1, 7, 64):
        want = model(kiln.Tensor(x[:batch])).numpy()
        assert np.abs(predictor(x[:batch]) - want).max() <= RELATIVE[tile] * np.abs(want).max(), batch
