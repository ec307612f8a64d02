"""No op runs as a naive serial loop nest: at realistic sizes every family
compiles to a kernel with a parallel loop and a vectorized loop (for the
data-dependent family, the copies around its one serial compaction loop)."""
import re

import numpy as np
import pytest

import kiln
from kiln.te import get_op, list_ops

LARGE = [
    ("add", [(512, 512), (512,)], {}), ("exp", [(1 << 18,)], {}), ("relu", [(256, 1000)], {}),
    ("cast", [(512, 512)], {"dtype": "float64"}), ("transpose", [(512, 384)], {}),
    ("getitem", [(512, 512)], {"index": ((1, None, 2), (None, None, -1))}),
    ("pad", [(500, 500)], {"pad_width": ((1, 1), (6, 6))}), ("concatenate", [(300, 256), (200, 256)], {}),
    ("broadcast_to", [(1, 512)], {"shape": (512, 512)}), ("equal_scalar", [(512, 512)], {"scalar": 0.5}),
    ("sum", [(512, 512)], {"axis": 0}), ("sum", [(512, 512)], {"axis": 1}), ("sum", [(1 << 20,)], {}),
    ("max", [(256, 1024)], {"axis": -1}), ("mean", [(64, 64, 64)], {"axis": (0, 2)}),
    ("logsumexp", [(512, 512)], {"axis": 1}), ("softmax", [(1024, 1024)], {}), ("log_softmax", [(256, 1000)], {}),
    ("matmul", [(256, 256), (256, 256)], {}), ("matmul", [(8, 128, 64), (64, 96)], {}),
    ("dense", [(128, 784), (784, 512), (512,)], {"relu": True}),
    ("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], {"padding": 1}),
    ("conv2d", [(1, 56, 56, 64), (3, 3, 64, 64)], {"padding": 1, "layout": "NHWC"}),
    ("max_pool2d", [(8, 64, 56, 56)], {"kernel": 3, "stride": 2, "padding": 1}),
    ("avg_pool2d", [(8, 64, 56, 56)], {"kernel": 2}), ("global_avg_pool2d", [(8, 512, 7, 7)], {}),
    ("masked_select", [(512, 512), (512, 512)], {}),
    ("adam_step", [(784, 512)] * 4 + [(7,)], {}),
    ("batch_norm_train", [(64, 64, 28, 28), (64,), (64,)], {}),
    ("conv2d_backward_weight", [(8, 64, 56, 56), (8, 64, 56, 56)], {"kernel": 3, "padding": 1}),
    ("conv2d_backward_data", [(8, 64, 56, 56), (64, 64, 3, 3)], {"in_size": 56, "padding": 1}),
    ("conv2d", [(1, 144, 56, 56), (144, 1, 3, 3)], {"padding": 1, "groups": 144}),
    ("conv2d", [(1, 128, 28, 28), (128, 4, 3, 3)], {"padding": 1, "groups": 32}),
    ("conv2d_backward_weight", [(8, 144, 56, 56), (8, 144, 56, 56)], {"kernel": 3, "padding": 1, "groups": 144}),
    ("conv2d_winograd", [(64, 1, 8, 8, 16), (1, 4, 4, 16, 32)], {"out_channels": 32, "padding": 1, "in_block": 16}),
    ("depthwise_conv2d_packed", [(1, 3, 112, 112, 32), (3, 1, 3, 3, 32)],
     {"channels": 96, "padding": 1, "stride": 2, "in_block": 32, "out_block": True}),
    ("batch_norm_train_grad", [(64, 64, 28, 28)] * 2 + [(64,)] * 3, {}),
    ("attention", [(1, 128, 12, 64)] * 3 + [(1, 1, 1, 128)], {"layout": "bshd"}),
    ("dense_int8", [(128, 784), (32, 196, 16, 4), (512,), (512,)], {}),
    ("conv2d_int8", [(1, 64, 56, 56), (4, 3, 3, 16, 16, 4), (64,), (64,)], {"in_scale": 0.02, "padding": 1}),
]
DTYPES = {"masked_select": ["float32", "bool"], "dense_int8": ["uint8", "int8", "float32", "float32"],
          "conv2d_int8": ["float32", "int8", "float32", "float32"]}


@pytest.mark.parametrize("op,shapes,attrs", LARGE, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_large_kernels_are_parallel_and_vectorized(op, shapes, attrs):
    script = kiln.build(op, shapes, DTYPES.get(op), attrs=attrs).script()
    assert "T.parallel" in script, f"{op}{shapes}: no parallel loop"
    assert "T.vectorized" in script, f"{op}{shapes}: no vectorized loop"


@pytest.mark.parametrize("op, shapes, attrs, vectorized", [
    ("add", [(8, 64, 8, 8), (8, 64, 8, 8)], {}, True),       # elementwise, rows a half or a whole vector: fused
    ("relu", [(64, 32, 28, 28)], {}, True),                  # a fused vector would cross rows: each row a vector
    ("add", [(8, 64, 14, 14), (8, 64, 14, 14)], {}, True),   # the same, rows narrower than a vector
    ("add", [(64, 32, 8, 8), (1, 32, 1, 1)], {}, True),      # a vector stays within one channel's 8x8 map
    # a vector would cross channels (a division per lane): each 7-wide row a vector where that is at least
    # half the lanes (generic.schedule_injective), else scalar
    ("add", [(8, 64, 7, 7), (1, 64, 1, 1)], {}, lambda lanes: 7 >= lanes // 2),
    ("pad", [(500, 500)], {"pad_width": ((1, 1), (2, 1))}, False),  # rows of 503 (prime): scalar rows
    ("pad", [(8, 64, 56, 56)], {"pad_width": ((0, 0), (0, 0), (1, 1), (1, 1))}, True),  # rows of 58, each a vector
    ("conv2d_backward_weight", [(64, 16, 8, 8), (64, 32, 8, 8)], {"kernel": 3, "padding": 1}, True),
    ("transpose", [(8, 64, 56, 56)], {"axes": (0, 2, 3, 1)}, True),  # rows of 64 channels
])
def test_a_vector_never_computes_its_lanes_indices_apart(op, shapes, attrs, vectorized):
    """Injective kernels are vectorized only where a vector's lanes address
    each buffer affinely (measured: a per-channel bias on 7x7 maps 3x and a
    pad 1.5x slower vectorized across rows than scalar); a vector that would
    cross rows keeps to its row instead (``rows``), and no lane of a
    zero-padding stage computes its column with a division."""
    kernel = kiln.build(op, shapes, attrs=attrs)
    script = kernel.script()
    if callable(vectorized):
        vectorized = vectorized(kiln.cpu().lanes("float32"))
    assert ("T.vectorized" in script) == vectorized, script
    for lane in re.findall(r"for (\w+) in T.vectorized", script):  # a lane's index: no division, no modulo
        for binding in re.findall(r"T.axis.spatial\(\d+, (.*)\)", script):
            if re.search(rf"\b{lane}\b", binding) and kernel.op in ("add", "relu"):
                assert "//" not in binding and "%" not in binding, script
    pad = re.search(r'T.sblock\("\w*_pad"\)(.*?)T.reads', script, re.S)
    if pad is not None:  # the column comes straight from the row's loop
        column = re.findall(r"T.axis.spatial\(\d+, (.*)\)", pad.group(1))[-1]
        assert "//" not in column and "%" not in column, pad.group(1)


def test_a_fused_update_is_one_pass_over_memory():
    # the new state and the new weight are computed in one loop nest: each element read once, written once
    script = kiln.build("adam_step", [(784, 512)] * 4 + [(7,)]).script()
    assert script.count("T.parallel") == 1 and script.count("T.vectorized") == 1


@pytest.mark.parametrize("op", ["concatenate", "stack"])
def test_a_join_of_many_inputs_finds_each_elements_input_in_log2_tests(op):
    # one test per halving of the inputs: 64 inputs nest 6 deep (a chain nested 63 and ran 4x a copy's time)
    from tvm import ir, te

    def depth(e):
        if isinstance(e, ir.expr.Call) and e.op.name.endswith("if_then_else"):
            return 1 + max(depth(e.args[1]), depth(e.args[2]))
        return 0

    xs = [te.placeholder((32, 256), "float32", name=f"x{k}") for k in range(64)]
    assert depth(get_op(op).compute(*xs, axis=0).op.body[0]) == 6
    got = kiln.build(op, [(32, 256)] * 64)(*[np.full((32, 256), k, np.float32) for k in range(64)])
    assert np.array_equal(got.reshape(64, -1), np.repeat(np.arange(64, dtype=np.float32)[:, None], 32 * 256, 1))


def test_every_family_is_covered():
    families = {get_op(name).family for name in list_ops()}
    covered = {get_op(op).family for op, _, _ in LARGE}
    assert families <= covered


@pytest.mark.parametrize("op, shapes, attrs", [
    ("conv2d", [(1, 144, 56, 56), (144, 1, 3, 3)], {"padding": 1, "groups": 144}),
    ("conv2d", [(1, 144, 56, 56), (144, 1, 3, 3)], {"padding": 1, "groups": 144, "stride": 2}),
    ("conv2d", [(1, 32, 14, 14), (64, 1, 3, 3)], {"padding": 1, "groups": 32}),
    ("conv2d", [(1, 128, 28, 28), (128, 4, 3, 3)], {"padding": 1, "groups": 32}),
    ("conv2d_backward_data", [(1, 144, 56, 56), (144, 1, 3, 3)], {"in_size": 56, "padding": 1, "groups": 144}),
    ("conv2d_backward_data", [(1, 144, 28, 28), (144, 1, 3, 3)],
     {"in_size": 56, "padding": 1, "stride": 2, "groups": 144}),  # per phase: a phase's columns a vector
])
def test_a_grouped_conv_vectorizes_output_columns_in_tasks_that_pad_their_rows(op, shapes, attrs):
    """Each lane of a grouped conv's vectors is an output column, never a
    channel (each channel reads other input channels: a gather), the vector
    a power of two or one vector at least half full (``conv2d_grouped.py``),
    and the zero padding is copied inside each parallel task."""
    script = kiln.build(op, shapes, attrs=attrs).script()
    update = script[:script.index(f'T.sblock("{op}_update")')]
    lane, width = re.findall(r"for (\w+) in T.vectorized\((\d+)\)", update)[-1]
    _, channel, _, column = re.findall(r"v_\w+ = T.axis.spatial\(\d+, (.*)\)", script[len(update):])[:4]
    assert not re.search(rf"\b{lane}\b", channel) and re.search(rf"\b{lane}\b", column), script
    lanes = kiln.cpu().lanes("float32")
    assert int(width) & (int(width) - 1) == 0 or lanes // 2 <= int(width) <= lanes
    task = script[script.index("T.parallel"):]
    assert task.index(f'T.sblock("{op}_pad")') < task.index(f'T.sblock("{op}_update")'), script


def test_a_large_weight_gradient_is_written_to_oihw_by_its_tiles():
    """A deep layer's weight gradient (512x7x7: a 9.4 MB result) has no
    channels-last copy transposed in a pass of its own: one reduction slice,
    each register tile stored straight to OIHW (2x faster on znver3)."""
    import numpy as np

    shapes, attrs = [(1, 64, 7, 7), (1, 96, 7, 7)], {"kernel": 3, "padding": 1}
    kernel = kiln.build("conv2d_backward_weight", shapes, attrs=attrs)
    config = kernel.resolved_config()
    assert config["chunks"] == 1 and config["direct_out"] == 1
    script = kernel.script()
    assert "conv2d_backward_weight_cl = " not in script, "a channels-last result buffer remains"
    transposed = kiln.build("conv2d_backward_weight", shapes, attrs=attrs, config={"direct_out": 0})
    assert "conv2d_backward_weight_cl = T.sblock_alloc_buffer((64, 3, 3, 96))" in transposed.script()
    rng = np.random.default_rng(0)
    x, gy = (rng.standard_normal(s).astype("float32") for s in shapes)
    op = get_op("conv2d_backward_weight")
    want = op.reference(x, gy, **op.parse_attrs(attrs))
    np.testing.assert_allclose(kernel(x, gy), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(transposed(x, gy), want, rtol=1e-4, atol=1e-4)


def test_slices_of_the_weight_gradient_where_gy_overflows_the_cache_and_the_result_is_not_far_larger():
    """The reduction is sliced (partial sums added up) for a large map and a
    small result; for a result larger than gy only where gy overflows half of
    the target's L2 and the result is at most ``SLICE_RESULT_RATIO`` times gy
    (CIFAR's 256x8x8 at batch 32: 2x faster in 2 slices on a 2 MB L2); never for
    a result far larger than gy."""
    from kiln.schedules.cpu.conv2d_grad import SLICE_RESULT_RATIO

    attrs = {"kernel": 3, "padding": 1}
    wide = kiln.build("conv2d_backward_weight", [(8, 16, 56, 56), (8, 16, 56, 56)], attrs=attrs)
    deep = kiln.build("conv2d_backward_weight", [(8, 512, 7, 7), (8, 512, 7, 7)], attrs=attrs)
    assert wide.resolved_config()["chunks"] > 1
    assert deep.resolved_config()["chunks"] == 1  # a result 12x gy
    result, image = 256 * 256 * 9 * 4, 256 * 8 * 8 * 4  # bytes: the result, and gy per image
    batch = max(kiln.cpu().l2_bytes // 2, result // SLICE_RESULT_RATIO) // image + 1  # gy just past both
    if batch * image > result:
        pytest.skip(f"this host's L2 ({kiln.cpu().l2_bytes} bytes) holds a gy larger than the 256x256 result")
    shapes = [(batch, 256, 8, 8)] * 2
    assert kiln.build("conv2d_backward_weight", shapes, attrs=attrs).resolved_config()["chunks"] > 1
    small = kiln.build("conv2d_backward_weight", [(2, 256, 8, 8)] * 2, attrs=attrs)  # gy within half of L2
    assert small.resolved_config()["chunks"] == 1


@pytest.mark.parametrize("width", [14, 28])
def test_strided_data_gradient_tiles_are_phase_aligned_over_blocked_sub_kernels(width):
    """A stride-2 conv2d_backward_data: its register tile is a multiple of the
    stride wide (each column's sub-kernel a constant of the micro-kernel) and
    its sub-kernels are stored in blocks of the tile's channels (C / tile,
    sh, sw, O, TH, TW, tile), streamed from consecutive addresses."""
    kernel = kiln.build("conv2d_backward_data", [(1, 64, width // 2, width // 2), (64, 32, 3, 3)],
                        attrs={"in_size": width, "stride": 2, "padding": 1})
    config = kernel.resolved_config()
    assert config["tile_ow"] % 2 == 0 and width % config["tile_ow"] == 0, config
    shape = re.findall(r"conv2d_backward_data_taps = T.sblock_alloc_buffer\(\(([^)]*)\)", kernel.script())
    tile = config["tile_oc"]
    assert shape == [f"{32 // tile}, 2, 2, 64, 2, 2, {tile}"], (shape, config)


@pytest.mark.parametrize("shapes, stride, whole_kernel", [
    ([(8, 64, 56, 56), (8, 128, 28, 28)], 2, False),   # a slice of gy stays in L2: the most accumulators
    ([(8, 256, 14, 14), (8, 256, 14, 14)], 1, True),   # every tile streams gy: one vector by a whole 3x3 kernel
])
def test_weight_gradient_tiles_fill_the_registers(shapes, stride, whole_kernel):
    """The default register tile of a 3x3 weight gradient holds more
    accumulators than one vector by a channel's nine taps, within the
    registers a conv tile may use (on AVX2 by spanning two channels' rows
    of three taps), except where each tile streams gy from beyond L2: there
    one vector by nine keeps the bytes of gy per multiply-add lowest."""
    from kiln.schedules.cpu.conv2d_defaults import register_budget

    kernel = kiln.build("conv2d_backward_weight", shapes, attrs={"kernel": 3, "padding": 1, "stride": stride})
    config, lanes = kernel.resolved_config(), kiln.cpu().lanes("float32")
    vectors = config["tile_o"] // lanes
    rows = config["tile_c"] * config["tile_k"]
    assert rows <= register_budget(lanes)(vectors) and rows * vectors >= 9
    if whole_kernel:
        assert (vectors, config["tile_k"]) == (1, 9)
    else:
        assert rows * vectors > 9  # AVX2: two vectors by two channels' three taps; AVX-512: two by nine


@pytest.mark.parametrize("shapes, attrs", [
    ([(2, 3, 32, 32), (2, 8, 16, 16)], {"kernel": 7, "stride": 2, "padding": 3}),   # the stem's kind
    ([(1, 4, 18, 18), (1, 12, 16, 16)], {"kernel": 3}),                              # stride 1, no padding
    ([(2, 5, 32, 32), (2, 6, 16, 16)], {"kernel": 3, "stride": 2, "padding": 2, "dilation": 2}),
])
def test_pixel_weight_gradient_reads_gy_as_it_is(shapes, attrs):
    """``pixels``: vectors of output columns, so gy is read in NCHW (no
    transposed copy); under a stride the padded input is stored in column
    phases, so each tap's columns are consecutive. It matches numpy."""
    import numpy as np

    kernel = kiln.build("conv2d_backward_weight", shapes, attrs=attrs, config={"pixels": 1})
    assert kernel.resolved_config()["pixels"] == 1
    script = kernel.script()
    assert "conv2d_backward_weight_gyt" not in script, "gy is still transposed"
    if attrs.get("stride", 1) > 1:
        n, c, h, w = shapes[0]
        pad = attrs["padding"]
        phases = f"conv2d_backward_weight_pad = T.sblock_alloc_buffer(({n}, {c}, {h + 2 * pad}, 2, {(w + 2 * pad) // 2}))"
        assert phases in script
    rng = np.random.default_rng(0)
    x, gy = (rng.standard_normal(s).astype("float32") for s in shapes)
    op = get_op("conv2d_backward_weight")
    np.testing.assert_allclose(kernel(x, gy), op.reference(x, gy, **op.parse_attrs(attrs)), rtol=1e-4, atol=1e-4)


def test_pixels_only_where_the_columns_are_whole_vectors():
    """An output width that is not a multiple of the lanes leaves one schedule."""
    lanes = kiln.cpu().lanes("float32")
    kernel = kiln.build("conv2d_backward_weight", [(1, 4, lanes + 3, lanes + 3), (1, 8, lanes + 1, lanes + 1)],
                        attrs={"kernel": 3})
    assert kernel.resolved_config()["pixels"] == 0
    with pytest.raises(kiln.errors.ScheduleError, match="pixels"):
        kiln.build("conv2d_backward_weight", [(1, 4, lanes + 3, lanes + 3), (1, 8, lanes + 1, lanes + 1)],
                   attrs={"kernel": 3}, config={"pixels": 1})


@pytest.mark.parametrize("extents, lanes, align", [
    ([64, 32, 28, 28], 16, False),  # 28-wide rows: TVM leaves every lane's (i % 784 // 28, i % 28) apart
    ([64, 16, 8, 8], 16, True),     # two rows a vector, a map four vectors
    ([8, 64, 56, 56], 8, True),     # rows of whole vectors
    ([100, 30], 16, False),         # 2-D with a partial last vector
    ([1000, 30], 16, True),         # 2-D, whole vectors: i // 30 * 30 + i % 30 folds
    ([16, 32, 7, 7], 8, False),
])
def test_vectors_align_only_where_tvm_folds_the_fused_index(extents, lanes, align):
    from kiln.schedules.generic import _vectors_align

    assert _vectors_align(extents, lanes) == align


def test_a_fused_epilogue_a_generic_template_scheduled_keeps_its_row_vectors():
    """A training step's broadcast_to + relu_grad kernel (the global pooling's
    gradient on 28x28 maps): the generic template schedules the pair by rows;
    the epilogue pass must not schedule it again as one fused loop (1.35 ms
    where rows take 0.07 on znver4)."""
    import numpy as np

    from kiln.graph.fuse import fuse_epilogues
    from kiln.graph.ir import Graph, Value
    from kiln.graph.entries import static_config
    from kiln.graph.lower import schedule_kernels, to_relax

    graph = Graph()
    g, y = Value((64, 32, 1, 1), "float32", name="g"), Value((64, 32, 28, 28), "float32", name="y")
    graph.inputs = [g, y]
    wide = graph.add(get_op("broadcast_to"), {"shape": (64, 32, 28, 28)}, [g], [((64, 32, 28, 28), "float32")])
    grad = graph.add(get_op("relu_grad"), {}, [wide.outputs[0], y], [((64, 32, 28, 28), "float32")])
    graph.outputs = list(grad.outputs)
    assert fuse_epilogues(graph) == 1
    mod, kernels = to_relax(graph)
    mod = schedule_kernels(mod, kernels, kiln.cpu(), static_config)
    (script,) = [f.script() for gv, f in mod.functions_items() if gv.name_hint in kernels]
    assert "T.vectorized(T.int64(28))" in script, script
    assert np.prod([64, 32, 28]) == int(re.search(r"T.parallel\(T.int64\((\d+)\)\)", script).group(1))


def test_matmul_row_blocks_deal_out_evenly_to_the_threads():
    from kiln.schedules.cpu.matmul import BALANCE, _balance, _default_block_m

    assert _balance(7, 2) == pytest.approx(7 / 8) and _balance(14, 2) == 1.0
    a_block = 192 << 10
    assert _default_block_m(98, 4096, [], 2, a_block) == 7  # 14 tasks, not 7 (one thread idle an eighth of the time)
    assert _default_block_m(49, 4096, [], 2, a_block) == 7  # no better balance within 8 tasks a thread: kept
    assert _default_block_m(16, 4096, [], 2, a_block) == 4  # already even
    # B's columns split among the threads: the rows in as few blocks as fit the L2's share
    assert _default_block_m(16, 24576, [], 2, a_block, wide=True) == 8
    assert _default_block_m(16, 24576, [], 2, 4 * a_block, wide=True) == 16
    # X^T dY of a 128-row batch through a 784 -> 512 layer (the MLP's weight gradient): its row tiles (784
    # rows in tiles of the ISA's tile_m) in blocks dealt out evenly
    config = kiln.build("matmul", [(128, 784), (128, 512)], attrs={"transpose_a": True}).resolved_config()
    tiles = -(-784 // config["tile_m"])
    assert tiles % config["block_m"] == 0 and _balance(tiles // config["block_m"], kiln.cpu().cores) >= BALANCE


@pytest.mark.parametrize("shapes, rows_first", [
    ([(1, 144, 28, 28), (24, 144, 1, 1)], 1),   # MobileNetV2's projection: a 14 KB weight, a 450 KB image
    ([(1, 512, 7, 7), (512, 512, 3, 3)], 0),    # ResNet's last layers: a 9 MB weight, a 100 KB image
])
def test_conv_tasks_split_an_images_rows_where_its_weight_is_the_smaller(shapes, rows_first):
    """The threads split an image's rows (each core then reads the rows it wrote before) unless the weight
    is larger than the image: then they split its channel blocks, each reading half the weight. Either order
    computes the same."""
    attrs = {"padding": shapes[1][2] // 2}
    kernel = kiln.build("conv2d", shapes, attrs=attrs)
    assert kernel.resolved_config()["rows_first"] == rows_first
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype("float32") for s in shapes)
    other = kiln.build("conv2d", shapes, attrs=attrs, config={**kernel.config, "rows_first": 1 - rows_first})
    assert other.script() != kernel.script()
    np.testing.assert_allclose(kernel(x, w), other(x, w), rtol=1e-5, atol=1e-4)


def test_a_softmax_writing_codes_rounds_its_vectors():
    """A quantize fused into a softmax's write-back (attention's probabilities in a QDQ file) rounds whole
    vectors: TVM scalarized the loop (``nearbyint`` is not one of its vectorizable ops unless kiln says so),
    and LLVM then vectorized it across rows with gathers."""
    import tvm
    from tvm import te

    from kiln.runtime.lower import schedule

    x = te.placeholder((4, 32, 128), "float32", name="x")
    probabilities = get_op("softmax").compute(x, axis=-1)
    codes = get_op("quantize").compute(probabilities, scale=1 / 255, zero_point=0, dtype="uint8", reciprocal=False)
    workload = get_op("softmax").check([(4, 32, 128)], None, {"axis": -1})
    sch = schedule(workload, te.create_prim_func([x, codes]), probabilities.op.name, kiln.cpu()).sch
    sch.reverse_compute_inline(sch.get_sblock(codes.op.name))  # as graph.lower fuses an epilogue
    assembly = tvm.compile(sch.mod, target=kiln.cpu().tvm).mod.inspect_source("asm")
    assert re.search(r"\bv(roundps|rndscaleps)\b", assembly) and "gather" not in assembly


@pytest.mark.parametrize("mcpu", ["znver3", "znver4", "sapphirerapids"])
def test_dense_packed_sums_the_whole_reduction_in_registers_while_a_weight_panel_fits_its_l2_share(mcpu):
    """A blocked K zeroes the output, adds each block to it and runs the epilogue as a pass of its own; a
    weight's layer keeps the whole K while its panel (K x the panel's width) takes a quarter of L2 or less."""
    from kiln.runtime.device import cpu
    from kiln.schedules.cpu.matmul import FULL_K_MAX, PANEL_L2_SHARE
    target = cpu(mcpu)
    bn = 2 * target.lanes("float32")
    for k in (2048, 3072, 8192):
        kernel = kiln.build("dense_packed", [(128, k), (768 // bn, k, bn), (768,)], target=target)
        whole = k <= FULL_K_MAX or k * bn * 4 <= PANEL_L2_SHARE * target.l2_bytes
        assert (kernel.resolved_config()["tile_k"] == k) == whole, (mcpu, k)
    # the plain dense (a weight read as laid out) keeps blocking past FULL_K_MAX
    assert kiln.build("dense", [(128, 3072), (3072, 768), (768,)], target=target).resolved_config()["tile_k"] < 3072
