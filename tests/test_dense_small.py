"""Dense inference kernels: a constant weight packed once (``pack_dense_weight``)
and read by ``dense_packed`` with no pack stage, and the few-rows (GEMV-shaped)
schedule the CPU template chooses for small batches or is told to use for a
symbolic one."""
import numpy as np
import pytest
import tvm

import kiln
from kiln.errors import AttrError, ShapeError
from kiln.schedules.cpu.matmul import panel_width
from kiln.schedules.util import blocks
from kiln.te import sym

CPU = kiln.cpu()


def _weights(k, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((k, n)).astype("float32"), rng.standard_normal(n).astype("float32")


def _packed(w):
    bn = panel_width(w.shape[1], "float32", CPU)
    return kiln.build("pack_dense_weight", [w.shape], attrs={"bn": bn})(w)


def _sblocks(kernel):
    """(name, names of the buffers it reads, names of the buffers it writes) of every block."""
    sch = tvm.s_tir.Schedule(kernel.ir())
    found = [sch.get(b) for b in blocks(sch)]
    return [(b.name_hint, {str(r.source.name) for r in b.reads}, {str(w.source.name) for w in b.writes}) for b in found]


def test_packing_puts_each_panel_of_columns_contiguously_with_zeros_past_n():
    w, _ = _weights(5, 20)
    packed = kiln.build("pack_dense_weight", [w.shape], attrs={"bn": 16})(w)
    assert packed.shape == (2, 5, 16)
    np.testing.assert_array_equal(packed[0], w[:, :16])
    np.testing.assert_array_equal(packed[1, :, :4], w[:, 16:])
    assert not packed[1, :, 4:].any()


@pytest.mark.parametrize("config", [{}, {"few_rows": 1}], ids=["many-rows", "few-rows"])
@pytest.mark.parametrize("k, n", [(784, 512), (64, 10)])
def test_a_symbolic_batch_kernel_matches_numpy_at_1_7_and_64_rows(config, k, n):
    w, b = _weights(k, n)
    packed = _packed(w)
    kernel = kiln.build("dense_packed", [(sym("n"), k), packed.shape, (n,)], attrs={"relu": True}, config=config)
    for m in (1, 7, 64):
        x = np.random.default_rng(m).standard_normal((m, k)).astype("float32")
        np.testing.assert_allclose(kernel(x, packed, b), np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m", [sym("n"), 1, 64])
@pytest.mark.parametrize("config", [{}, {"few_rows": 1}], ids=["many-rows", "few-rows"])
def test_dense_packed_has_no_pack_stage(m, config):
    w, _ = _weights(784, 512)
    kernel = kiln.build("dense_packed", [(m, 784), _packed(w).shape, (512,)], config=config)
    weight = kernel.ir()["main"].params[1].name
    readers = [name for name, reads, _ in _sblocks(kernel) if any(r.startswith(weight) for r in reads)]
    assert readers == ["dense_packed_matmul_update"], readers  # only the micro-kernel reads the weight
    # what dense with the same shapes does: the weight is copied into panels on every call
    dense = kiln.build("dense", [(m, 784), (784, 512), (512,)], config={"pack_b": 1})
    assert any(name.endswith("_global") for name, _, _ in _sblocks(dense))


def test_few_rows_is_the_default_for_small_concrete_batches_only():
    # B is packed only for more rows than PACK_B_ROWS, or rows not known: a few row tiles read its panels in place
    for m, few, pack_b in ((1, 1, 0), (7, 1, 0), (8, 1, 0), (9, 0, 0), (64, 0, 0), (2048, 0, 1), (sym("n"), 0, 1)):
        config = kiln.build("dense", [(m, 784), (784, 512), (512,)]).resolved_config()
        assert config["few_rows"] == few, m
        assert config["pack_b"] == pack_b and config["pack_a"] == 1 - few, m
    assert kiln.build("dense", [(7, 64), (64, 128), (128,)]).resolved_config()["tile_m"] == 7  # no padded rows


def test_b_rows_far_apart_are_packed_from_a_few_row_tiles():
    """A B read as laid out whose rows are PACK_B_ROW_BYTES or more apart is
    packed from PACK_B_WIDE_ROWS rows (its panel's rows would share a few
    cache sets); narrower rows, or fewer rows, read it in place."""
    from kiln.schedules.cpu.matmul import PACK_B_ROW_BYTES, PACK_B_WIDE_ROWS

    wide, narrow = PACK_B_ROW_BYTES // 4 + 16, PACK_B_ROW_BYTES // 4 - 256
    for m, n, pack_b in ((PACK_B_WIDE_ROWS, wide, 1), (PACK_B_WIDE_ROWS - 16, wide, 0), (PACK_B_WIDE_ROWS, narrow, 0)):
        config = kiln.build("matmul", [(m, 256), (256, n)]).resolved_config()
        assert config["pack_b"] == pack_b, (m, n)
    assert kiln.build("matmul", [(sym("n"), 256), (256, wide)]).resolved_config()["pack_b"] == 1  # rows not known
    kernel = kiln.build("matmul", [(PACK_B_WIDE_ROWS, 64), (64, wide)])
    a, b = (np.random.default_rng(0).standard_normal(s).astype("float32") for s in kernel.shapes)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_symbolic_few_rows_kernel_takes_one_row_tiles_without_padding():
    w, _ = _weights(64, 128)
    kernel = kiln.build("dense_packed", [(sym("n"), 64), _packed(w).shape, (128,)], config={"few_rows": 1})
    assert kernel.resolved_config()["tile_m"] == 1
    assert not [name for name, _, _ in _sblocks(kernel) if name.endswith("_pad")]


def test_few_rows_run_serially_below_the_measured_work_and_in_parallel_above():
    small = kiln.build("dense", [(1, 64), (64, 128), (128,)])
    large = kiln.build("dense", [(1, 784), (784, 512), (512,)])
    assert small.resolved_config()["parallel"] == 0 and "T.parallel" not in small.script()
    assert large.resolved_config()["parallel"] == 1 and "T.parallel" in large.script()


def test_panel_width_is_the_tile_the_template_packs_for_dense():
    for n in (10, 128, 512):
        config = kiln.build("dense", [(64, 32), (32, n), (n,)]).resolved_config()
        assert config["tile_n"] == panel_width(n, "float32", CPU)


def test_panels_that_do_not_hold_n_columns_are_a_shape_error():
    with pytest.raises(ShapeError, match="dense_packed"):
        kiln.build("dense_packed", [(1, 8), (2, 8, 16), (40,)])
    with pytest.raises(ShapeError, match="dense_packed"):
        kiln.build("dense_packed", [(1, 8), (1, 9, 16), (10,)])
    with pytest.raises(AttrError, match="bn"):
        kiln.build("pack_dense_weight", [(8, 10)], attrs={"bn": 0})


def test_a_copy_of_a_is_made_only_for_several_panels_and_stored_a_vector_at_a_time():
    """pack_a copies a task's rows of A for the B panels that reuse them: none
    for a single panel (a 10-class layer), and each packed row
    ``[k, 0:tile_m]`` is one vector store (row-major order made every element
    a scalar store, 60 us against 9 without the copy for 64 x 512 -> 10)."""
    narrow = kiln.build("dense", [(48, 512), (512, 10), (10,)])  # 48 rows: whole 6- and 8-row tiles
    assert 48 % narrow.resolved_config()["tile_m"] == 0 and narrow.resolved_config()["pack_a"] == 0
    wide = kiln.build("dense", [(64, 512), (512, 128), (128,)])
    config = wide.resolved_config()
    assert config["pack_a"] == 1
    lines = wide.script().splitlines()
    at = next(i for i, line in enumerate(lines) if 'sblock("x0' in line and "global" in line)  # the copy of A
    assert f"T.vectorized({config['tile_m']})" in lines[at - 1], lines[at - 3:at + 1]
    x, w, b = (np.random.default_rng(0).standard_normal(s).astype("float32") for s in ((64, 512), (512, 128), (128,)))
    np.testing.assert_allclose(wide(x, w, b), x @ w + b, rtol=1e-4, atol=1e-4)


def test_a_large_b_is_split_among_the_threads_by_columns():
    """cols_first (default for a B over COLS_FIRST_BYTES, in parallel): each
    thread takes 1/cores of B's panels and runs every row against them, so B
    is read once per call; a small B keeps the split by rows. Both compute
    the same."""
    from kiln.schedules.cpu.matmul import COLS_FIRST_BYTES

    n = sym("n")
    large = kiln.build("dense", [(n, 784), (784, 512), (512,)])
    assert 784 * 512 * 4 > COLS_FIRST_BYTES
    config = large.resolved_config()
    panels = 512 // panel_width(512, "float32", CPU)
    assert config["cols_first"] == 1 and panels // config["block_n"] >= CPU.cores
    small = kiln.build("dense", [(n, 64), (64, 128), (128,)])
    assert small.resolved_config()["cols_first"] == 0
    x, (w, b) = np.random.default_rng(0).standard_normal((37, 784)).astype("float32"), _weights(784, 512)
    rows = kiln.build("dense", [(n, 784), (784, 512), (512,)], config={"cols_first": 0})
    np.testing.assert_allclose(large(x, w, b), x @ w + b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(rows(x, w, b), large(x, w, b), rtol=1e-5, atol=1e-5)


def test_a_prime_count_of_panels_keeps_the_row_split():
    """17 panels split into 17 column ranges of one: each range packed A's
    block again. With no divisor making a few ranges, the rows are split."""
    width = panel_width(1000, "float32", CPU)
    n = 17 * width - 3  # 17 panels, the last one padded
    kernel = kiln.build("matmul", [(129, 1000), (1000, n)])
    config = kernel.resolved_config()
    assert config["cols_first"] == 0 and config["block_n"] == 17, config
    a, b = (np.random.default_rng(0).standard_normal(s).astype("float32") for s in ((129, 1000), (1000, n)))
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("dense", [(50, 512), (512, 10), (10,)], {}),
    ("matmul", [(128, 50), (128, 10)], {"transpose_a": True}),  # a weight gradient: A^T of the activations
])
def test_an_a_padded_to_whole_tiles_is_packed_even_for_one_panel(op, shapes, attrs):
    """A that must be padded is copied either way; the default makes that copy
    the pack (for A^T, an unpacked padded copy read a column per k was 3x
    slower: 128 x 512 -> 10 on AVX2, 97 against 32 us)."""
    kernel = kiln.build(op, shapes, attrs=attrs)
    config = kernel.resolved_config()
    assert 50 % config["tile_m"] and config["pack_a"] == 1, config
    a, b = (np.random.default_rng(1).standard_normal(s).astype("float32") for s in shapes[:2])
    args, want = [a, b], (a.T if attrs else a) @ b
    if op == "dense":
        bias = np.arange(10, dtype="float32")
        args, want = [a, b, bias], want + bias
    np.testing.assert_allclose(kernel(*args), want, rtol=1e-4, atol=1e-4)


def test_a_symbolic_batch_is_padded_in_the_pack_even_for_one_panel():
    """A symbolic M is padded to whole tiles too; that copy is the pack, made
    per task (a pass of its own over all of A made a 64 x 512 -> 10 layer
    14.2 us against 10.9)."""
    w, b = _weights(512, 10)
    kernel = kiln.build("dense_packed", [(sym("n"), 512), _packed(w).shape, (10,)])
    assert kernel.resolved_config()["pack_a"] == 1
    assert not [name for name, _, _ in _sblocks(kernel) if name.endswith("_pad")]  # no padded copy of its own
    for m in (1, 7, 64):
        x = np.random.default_rng(m).standard_normal((m, 512)).astype("float32")
        np.testing.assert_allclose(kernel(x, _packed(w), b), x @ w + b, rtol=1e-4, atol=1e-4)


def test_pad_copies_of_both_operands_share_their_knobs():
    """Both operands padded and a k block below K: the two pad copies are
    scheduled under the same ``pad.`` knobs (their defaults differed by size,
    and the second declaration was rejected as a different space)."""
    shapes = [(128, 130), (128, 10)]  # A's copy large enough to run in parallel, B's not
    kernel = kiln.build("matmul", shapes, attrs={"transpose_a": True}, config={"tile_k": 32, "pack_a": 0, "pack_b": 0})
    config = kernel.resolved_config()
    assert "pad.parallel" in config and "pad.vector" in config
    a, b = (np.random.default_rng(2).standard_normal(s).astype("float32") for s in shapes)
    np.testing.assert_allclose(kernel(a, b), a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shapes", [
    [(32, 1024), (256, 1024)],        # eager LSTM's input gradient: g @ W^T
    [(64, 2048), (128, 2048)],        # K in blocks: a pack per block
    [(4, 128, 64), (4, 128, 64)],     # attention's Q @ K^T
    [(100, 300), (70, 300)],          # N and K not whole tiles: the flat copy
])
def test_a_transposed_b_is_packed_in_tiles_that_store_panel_rows_in_vectors(shapes):
    """B read transposed is copied to its panels a tile of rows at a time:
    each panel row a vector store, the k steps of a tile unrolled (where N
    and K are whole tiles), and the product is numpy's."""
    kernel = kiln.build("matmul", shapes, attrs={"transpose_b": True})
    config = kernel.resolved_config()
    lines = kernel.script().splitlines()
    copy = next(k for k, line in enumerate(lines) if 'T.sblock("x1_' in line and '_global")' in line)  # B's pack
    tiles = shapes[1][-1] % kiln.cpu().lanes("float32") == 0  # K whole vectors (N is padded to whole panels)
    assert config["pack_b"] == 1
    inner, step = lines[copy - 1], lines[copy - 2]  # the copy's two innermost loops
    if tiles:  # a panel row of tile_n columns stored as vectors, under the tile's unrolled k steps
        assert f"T.vectorized({config['tile_n']})" in inner and "T.unroll" in step, "\n".join(lines[copy - 4:copy])
    else:
        assert "T.unroll" not in step, "\n".join(lines[copy - 4:copy])
    a, b = (np.random.default_rng(0).standard_normal(s).astype("float32") for s in shapes)
    np.testing.assert_allclose(kernel(a, b), a @ np.swapaxes(b, -1, -2), rtol=1e-4, atol=1e-3)
