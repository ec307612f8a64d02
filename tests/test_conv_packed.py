"""conv2d inference kernels with a constant weight: packed once into channel
blocks (``pack_conv2d_weight``) and read by ``conv2d_packed`` with no pack
stage, on the CPU template's micro-kernel; the CUDA fallback runs it too."""
import numpy as np
import pytest
import tvm

import kiln
from kiln.autotune import Space, Task
from kiln.errors import AttrError, ShapeError
from kiln.schedules.cpu.conv2d_defaults import packed_channels
from kiln.schedules.cuda import check
from kiln.schedules.util import blocks
from kiln.te import get_op, sym

CPU = kiln.cpu()
CONV = get_op("conv2d")
# (x, w, attrs): the timed layer, channels the blocks do not divide (the last block padded), dilation
LAYERS = [((16, 16, 8, 8), (32, 16, 3, 3), {"padding": 1}),
          ((2, 3, 9, 11), (20, 3, 3, 3), {"padding": 1, "stride": 2}),
          ((1, 8, 12, 12), (24, 8, 3, 3), {"padding": 2, "dilation": 2})]


def _conv(x_shape, w_shape, attrs, batch=None):
    """The conv2d workload of a layer (its batch replaced by ``batch``)."""
    return CONV.check([(batch or x_shape[0], *x_shape[1:]), w_shape], attrs=attrs)


def _pack(w, attrs):
    oc = packed_channels(_conv((1, w.shape[1], 16, 16), w.shape, attrs), CPU)
    return kiln.build("pack_conv2d_weight", [w.shape], attrs={"oc": oc})(w)


def _packed_kernel(x_shape, w, attrs, batch, config=None):
    packed = _pack(w, attrs)
    kernel = kiln.build("conv2d_packed", [(batch, *x_shape[1:]), packed.shape],
                        attrs={**attrs, "out_channels": w.shape[0]}, config=config)
    return kernel, packed


def _sblocks(kernel):
    """(name, names of the buffers it reads) of every block of the lowered kernel."""
    sch = tvm.s_tir.Schedule(kernel.ir())
    return [(sch.get(b).name_hint, {str(r.source.name) for r in sch.get(b).reads}) for b in blocks(sch)]


def _data(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype("float32"), rng.standard_normal(w_shape).astype("float32")


def test_packing_puts_each_block_of_channels_innermost_with_zeros_past_o():
    _, w = _data((1,), (20, 3, 2, 2))
    packed = kiln.build("pack_conv2d_weight", [w.shape], attrs={"oc": 16})(w)
    assert packed.shape == (2, 3, 2, 2, 16)
    np.testing.assert_array_equal(packed[0], w[:16].transpose(1, 2, 3, 0))
    np.testing.assert_array_equal(packed[1, ..., :4], w[16:].transpose(1, 2, 3, 0))
    assert not packed[1, ..., 4:].any()


@pytest.mark.parametrize("x_shape, w_shape, attrs", LAYERS, ids=str)
def test_a_symbolic_batch_kernel_matches_numpy_at_1_7_and_64(x_shape, w_shape, attrs):
    _, w = _data(x_shape, w_shape)
    kernel, packed = _packed_kernel(x_shape, w, attrs, sym("n"))
    assert kernel.template == "conv2d.schedule_conv2d"
    parsed = CONV.parse_attrs(attrs)
    for n in (1, 7, 64):
        x, _ = _data((n, *x_shape[1:]), w_shape, seed=n)
        np.testing.assert_allclose(kernel(x, packed), CONV.reference(x, w, **parsed), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [sym("n"), 1, 64], ids=str)
def test_conv2d_packed_has_no_pack_stage(batch):
    x_shape, w_shape, attrs = LAYERS[0]
    _, w = _data(x_shape, w_shape)
    kernel, _ = _packed_kernel(x_shape, w, attrs, batch)
    weight = kernel.ir()["main"].params[1].name
    readers = [name for name, reads in _sblocks(kernel) if any(r.startswith(weight) for r in reads)]
    assert readers == ["conv2d_packed_update"], readers  # only the micro-kernel reads the weight
    assert not [name for name, _ in _sblocks(kernel) if name.endswith("_global")]
    # what conv2d with the same shapes does: the weight is copied into blocks on every call
    conv = kiln.build("conv2d", [(batch, *x_shape[1:]), w_shape], attrs=attrs)
    assert conv.resolved_config()["pack_w"] == 1
    assert any(name.endswith("_global") for name, _ in _sblocks(conv))


@pytest.mark.parametrize("x_shape, w_shape, attrs", LAYERS, ids=str)
def test_packed_channels_is_the_tile_conv2d_chooses(x_shape, w_shape, attrs):
    workload = _conv(x_shape, w_shape, attrs)
    config = kiln.build("conv2d", workload.shapes, attrs=attrs).resolved_config()
    # conv2d's channel tile, but where it unrolls a small map with a row of one vector (conv_tiles)
    whole_row = (config["tile_oc"], config["tile_ow"]) == (CPU.lanes("float32"), workload.out_shapes[0][3])
    assert packed_channels(workload, CPU) == config["tile_oc"] or whole_row
    # the packed kernel's micro-kernel is conv2d's: the same output-column tile
    kernel, _ = _packed_kernel(x_shape, _data(x_shape, w_shape)[1], attrs, x_shape[0])
    assert kernel.resolved_config()["tile_ow"] == config["tile_ow"] or whole_row
    assert "tile_oc" not in kernel.resolved_config() and "pack_w" not in kernel.resolved_config()


def test_packed_channels_takes_only_an_nchw_conv2d():
    nhwc = CONV.check([(1, 8, 8, 3), (3, 3, 3, 16)], attrs={"layout": "NHWC"})
    with pytest.raises(AttrError, match="layout"):
        packed_channels(nhwc, CPU)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_configs_match_numpy(seed):
    x_shape, w_shape, attrs = LAYERS[1]
    x, w = _data(x_shape, w_shape, seed)
    packed = _pack(w, attrs)
    task = Task.create("conv2d_packed", [x_shape, packed.shape], None, {**attrs, "out_channels": w_shape[0]})
    config = Space(task).sample(np.random.default_rng(seed))
    kernel, _ = _packed_kernel(x_shape, w, attrs, x_shape[0], config=config)
    np.testing.assert_allclose(kernel(x, packed), CONV.reference(x, w, **CONV.parse_attrs(attrs)),
                               rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_a_large_kernel_is_parallel_and_vectorized():
    _, w = _data((1,), (64, 64, 3, 3))
    script = _packed_kernel((1, 64, 56, 56), w, {"padding": 1}, 1)[0].script()
    assert "T.parallel" in script and "T.vectorized" in script


@pytest.mark.parametrize("op, shapes, attrs", [
    ("pack_conv2d_weight", [(20, 3, 3, 3)], {"oc": 8}),
    ("conv2d_packed", [(2, 3, 9, 11), (3, 3, 3, 3, 8)], {"out_channels": 20, "padding": 1}),
], ids=["pack", "conv"])
def test_the_cuda_fallback_schedules_both_ops(op, shapes, attrs):
    task = Task.create(op, shapes, None, attrs, kiln.cuda("sm_80"))
    low = task.lower({})
    check.check_resources(low.sch.mod, task.target, op)
    inputs, expected = task.data()
    got = check.run_on_cpu(low.sch.mod, inputs, [(e.shape, str(e.dtype)) for e in expected])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_blocks_that_do_not_hold_out_channels_are_a_shape_error():
    with pytest.raises(ShapeError, match="conv2d_packed"):  # 2 blocks of 16 hold 17..32 channels
        kiln.build("conv2d_packed", [(1, 3, 8, 8), (2, 3, 3, 3, 16)], attrs={"out_channels": 40})
    with pytest.raises(ShapeError, match="conv2d_packed"):
        kiln.build("conv2d_packed", [(1, 3, 8, 8), (2, 3, 3, 3)], attrs={"out_channels": 2})
    with pytest.raises(ShapeError, match="conv2d_packed"):  # 4 input channels, blocks for 3
        kiln.build("conv2d_packed", [(1, 4, 8, 8), (1, 3, 3, 3, 16)], attrs={"out_channels": 16})
    with pytest.raises(AttrError, match="out_channels"):
        kiln.build("conv2d_packed", [(1, 3, 8, 8), (1, 3, 3, 3, 16)])
    with pytest.raises(AttrError, match="oc"):
        kiln.build("pack_conv2d_weight", [(8, 3, 3, 3)], attrs={"oc": 0})


def test_timing_conv2d_against_conv2d_packed(capsys):
    """Reported, not asserted: per-call time of the symbolic-batch kernels."""
    x_shape, w_shape, attrs = LAYERS[0]
    _, w = _data(x_shape, w_shape)
    conv = kiln.build("conv2d", [(sym("n"), *x_shape[1:]), w_shape], attrs=attrs)
    packed_kernel, packed = _packed_kernel(x_shape, w, attrs, sym("n"))
    rows = []
    for n in (1, 16, 64):
        x, _ = _data((n, *x_shape[1:]), w_shape, seed=n)
        np.testing.assert_allclose(packed_kernel(x, packed), conv(x, w), rtol=1e-4, atol=1e-4)
        plain, pre = conv.time(x, w)["median"], packed_kernel.time(x, packed)["median"]
        rows.append(f"batch {n:>2}: conv2d {plain * 1e6:8.1f} us  conv2d_packed {pre * 1e6:8.1f} us  "
                    f"ratio {pre / plain:.2f}")
    with capsys.disabled():
        print(f"\n{x_shape[1:]} x {w_shape} {attrs}, symbolic batch:\n" + "\n".join(rows))


@pytest.mark.parametrize("config, regions", [({"pad_inline": 0, "pad_at": 0}, 3), ({"pad_inline": 0, "pad_at": 1}, 2),
                                             ({}, 2)])
def test_padding_is_a_stage_a_copy_inside_each_task_or_left_out(config, regions):
    """``pad_at`` pads a task's input rows inside the task (one parallel
    region per call); without it the padding is a parallel stage of its own;
    on an unrolled small map (the default here) ``pad_inline`` reads the
    input where it lies, no padded copy at all. All compute the same."""
    x = np.random.default_rng(0).standard_normal((3, 16, 8, 8)).astype("float32")
    w = np.random.default_rng(1).standard_normal((32, 16, 3, 3)).astype("float32")
    kernel = kiln.build("conv2d", [(sym("n"), 16, 8, 8), w.shape], attrs={"padding": 1}, config=config)
    resolved = kernel.resolved_config()
    assert resolved["pad_inline"] == config.get("pad_inline", 1) and resolved.get("pad_at") == config.get("pad_at")
    script = kernel.script()
    assert script.count("T.parallel") == regions  # the tasks, the weight pack [, the padding]
    assert ('T.sblock("conv2d_pad")' in script) == bool(config)
    want = kiln.te.get_op("conv2d").reference(x, w, **kiln.te.get_op("conv2d").parse_attrs({"padding": 1}))
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op, shapes, attrs, many", [
    ("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], {"padding": 1}, False),  # 4 channel blocks: 12 copies
    ("conv2d", [(1, 1024, 28, 28), (1024, 1024, 3, 3)], {"padding": 1}, True),  # 32 blocks of 32, 64 of 16
    ("conv2d_backward_data", [(1, 1024, 28, 28), (1024, 1024, 3, 3)], {"in_size": 28, "padding": 1}, True),
    ("conv2d", [(1, 64, 56, 56), (128, 64, 3, 3)], {"padding": 1, "stride": 2}, False),  # 12 copies or fewer
])
def test_pad_at_default_counts_the_copies_of_each_padded_row(op, shapes, attrs, many):
    """pad_at by default while the tasks copy each padded input row at most
    PAD_AT_COPIES times: an NCHW task pads every input channel for its block
    of output channels, so deep layers with many blocks pad once instead."""
    from kiln.schedules.cpu.conv2d_defaults import PAD_AT_COPIES, pad_copies

    kernel = kiln.build(op, shapes, attrs=attrs)
    config = kernel.resolved_config()
    channels = shapes[1][1] if op == "conv2d_backward_data" else shapes[1][0]
    parsed = kiln.te.get_op(op).parse_attrs(attrs)
    copies = pad_copies(parsed, -(-channels // config["tile_oc"]), config["task_rows"], 3)
    assert (copies > PAD_AT_COPIES) == many and config["pad_at"] == int(not many), (copies, config)


@pytest.mark.parametrize("layout, x_shape, w_shape, stride", [
    ("NCHW", (3, 16, 8, 8), (32, 16, 3, 3), 1),
    ("NCHW", (2, 5, 9, 7), (16, 5, 3, 3), 2),
    ("NHWC", (2, 8, 6, 5), (3, 3, 5, 16), 1),
])
def test_task_rows_computes_the_same_for_every_row_block(layout, x_shape, w_shape, stride):
    """``task_rows`` gives each parallel task a block of output rows (its
    padded input rows with it); every divisor of the output height computes
    what one row per task does."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape).astype("float32"), rng.standard_normal(w_shape).astype("float32")
    attrs = {"padding": 1, "stride": stride, "layout": layout}
    op = kiln.te.get_op("conv2d")
    want = op.reference(x, w, **op.parse_attrs(attrs))
    height = want.shape[2 if layout == "NCHW" else 1]
    for rows in [d for d in range(1, height + 1) if height % d == 0]:
        kernel = kiln.build("conv2d", [(sym("n"), *x_shape[1:]), w.shape], attrs=attrs, config={"task_rows": rows})
        assert kernel.resolved_config()["task_rows"] == rows
        np.testing.assert_allclose(kernel(x, w), want, rtol=1e-4, atol=1e-4, err_msg=f"task_rows={rows}")


def test_task_rows_default_groups_the_rows_of_a_small_map_only():
    """A row of an 8x8 map is too little work for a task of its own; a row
    of ResNet's 56x56 layer is plenty, unless the conv pads its input: then
    a task takes rows up to PADDED_TASK_MACS while the image keeps
    TASKS_PER_IMAGE tasks, so each padded row is copied about once."""
    from kiln.runtime.lower import lower
    from kiln.schedules.cpu.conv2d_defaults import PADDED_TASK_MACS, TASK_MACS, TASKS_PER_IMAGE
    small = kiln.build("conv2d", [(sym("n"), 16, 10, 10), (32, 16, 3, 3)])  # an 8x8 map, no padding
    config = small.resolved_config()
    row_macs = 8 * config["tile_oc"] * 16 * 3 * 3  # one output row of one channel tile
    want = max(d for d in (1, 2, 4, 8) if d * row_macs <= TASK_MACS)  # 4 rows of 32 channels, 8 of 16
    assert 1 < config["task_rows"] == want
    # padded, the map is small enough to leave the padding's products out: a task is the whole map
    padded_small = kiln.build("conv2d", [(sym("n"), 16, 8, 8), (32, 16, 3, 3)], attrs={"padding": 1})
    assert padded_small.resolved_config()["task_rows"] == 8
    unpadded = lower(CONV.check([(1, 64, 56, 56), (64, 64, 3, 3)]), kiln.cpu(), {}).cfg.resolved()
    assert unpadded["task_rows"] == 1  # 54 rows: one is 1M multiply-adds
    padded = lower(CONV.check([(1, 64, 56, 56), (64, 64, 3, 3)], attrs={"padding": 1}), kiln.cpu(), {}).cfg.resolved()
    blocks, row_macs = 64 // padded["tile_oc"], 56 * padded["tile_oc"] * 64 * 9
    want = max(d for d in range(1, 57) if 56 % d == 0 and d * row_macs <= PADDED_TASK_MACS
               and blocks * 56 // d >= TASKS_PER_IMAGE)
    assert 1 < padded["task_rows"] == want  # 14 rows of 32 channels (AVX-512), 28 of 16 (AVX2)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("conv2d", [(1, 256, 7, 7), (256, 256, 3, 3)], {"padding": 1}),  # 8 or more blocks of a whole map
    ("conv2d_backward_data", [(1, 256, 7, 7), (256, 256, 3, 3)], {"in_size": 7, "padding": 1}),
])
def test_pack_at_copies_each_tasks_weight_block_inside_the_task(op, shapes, attrs):
    """With one task per channel block (one image, whole-map tasks) each task
    copies its own block of the packed weight, which stays in its core's
    cache; with more images a block would be copied once per image, so the
    copy stays a stage of its own. Both compute the same."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
    spec = kiln.te.get_op(op)
    want = spec.reference(*arrays, **spec.parse_attrs(attrs))
    default = kiln.build(op, shapes, attrs=attrs)
    assert default.resolved_config()["pack_at"] == 1
    assert default.script().count("T.parallel") == 1  # the tasks alone: no parallel copy before them
    for pack_at in (0, 1):
        kernel = kiln.build(op, shapes, attrs=attrs, config={"pack_at": pack_at})
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4, err_msg=f"pack_at={pack_at}")
    batched = kiln.build(op, [(4, *shapes[0][1:]), shapes[1]], attrs=attrs).resolved_config()
    assert batched["pack_at"] == 0


def test_a_small_padded_map_leaves_the_padding_products_out_of_the_code():
    """A 7x7 map with a 3x3 kernel and padding 1: of the 7 x 7 x 9 products
    per channel tile, those whose input lies in the padding are not in the
    unrolled micro-kernel: (5 x 3 + 2 x 2)^2 = 361 vector FMAs, not 441."""
    import re

    kernel = kiln.build("conv2d", [(1, 64, 7, 7), (64, 64, 3, 3)], attrs={"padding": 1})
    assert kernel.resolved_config()["unroll_map"] == 1
    assert len(re.findall(r"call <\d+ x float> @llvm\.fmuladd", kernel.source())) == 19 * 19


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((3, 16, 7, 7), (32, 16, 3, 3), {"padding": 1}),
    ((2, 8, 14, 14), (16, 8, 3, 3), {"padding": 1, "stride": 2}),
    ((1, 8, 12, 12), (32, 8, 3, 3), {"padding": 2, "dilation": 2}),
    ((2, 3, 8, 8), (16, 3, 5, 5), {"padding": 2}),  # a 16 x 16 map would be too many taps to unroll
])
@pytest.mark.parametrize("unroll_map", [0, 1])
def test_leaving_the_padding_products_out_computes_the_same(x_shape, w_shape, attrs, unroll_map):
    _matches_reference(x_shape, w_shape, attrs, {"unroll_map": unroll_map})


def test_a_predicated_channel_tile_keeps_the_tests_in_the_loop():
    """20 channels in tiles of 16 (8 on AVX2): unrolled, the tests of the
    predicated tile took LLVM minutes; by default they stay in the loop."""
    kernel = _matches_reference((2, 8, 9, 11), (20, 8, 3, 3), {"padding": (1, 2)}, {})
    assert kernel.resolved_config()["unroll_map"] == 0


def _matches_reference(x_shape, w_shape, attrs, config):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(x_shape).astype("float32"), rng.standard_normal(w_shape).astype("float32")
    want = CONV.reference(x, w, **CONV.parse_attrs(attrs))
    kernel = kiln.build("conv2d", [x_shape, w_shape], attrs=attrs, config=config)
    np.testing.assert_allclose(kernel(x, w), want, rtol=1e-4, atol=1e-4)
    return kernel


def test_an_infinite_weight_on_a_padded_tap_leaves_the_border_finite():
    """The padding's products are left out, not multiplied by zero: an
    infinite weight tap that only ever meets padding at a border output
    leaves that output finite (numpy's zero-padded reference gives
    0 x inf = NaN there), as oneDNN's kernels do."""
    x = np.ones((1, 16, 7, 7), "float32")
    w = np.zeros((16, 16, 3, 3), "float32")
    w[:, :, 0, 0] = np.inf  # the top-left tap: padding for the first output row and column
    got = kiln.build("conv2d", [x.shape, w.shape], attrs={"padding": 1})(x, w)
    assert np.isfinite(got[:, :, 0, :]).all() and np.isfinite(got[:, :, :, 0]).all()
    assert np.isinf(got[:, :, 1:, 1:]).all()  # where the tap reads the image


def test_a_data_gradient_on_a_small_map_leaves_out_the_border_products_too():
    """A stride-1 ``conv2d_backward_data`` convolves ``gy`` inside a zero
    border with the flipped kernel; on a small map it leaves those products
    out as the forward conv does (its 512x7x7 layer did 18% more products
    than the forward): the flipped top-left tap meets only the border at the
    last row and column, which stay finite."""
    gy = np.ones((1, 16, 7, 7), "float32")
    w = np.zeros((16, 16, 3, 3), "float32")
    w[:, :, 0, 0] = np.inf
    kernel = kiln.build("conv2d_backward_data", [gy.shape, w.shape], attrs={"in_size": 7, "padding": 1})
    got = kernel(gy, w)
    assert kernel.resolved_config()["unroll_map"] == 1
    assert np.isfinite(got[:, :, -1, :]).all() and np.isfinite(got[:, :, :, -1]).all()
    assert np.isinf(got[:, :, :-1, :-1]).all()
