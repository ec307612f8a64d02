"""CUDA templates, checked without a GPU: they compile to PTX for sm_80 and
sm_90, stay within the per-block limits, and the exact scheduled programs
(shared-memory stages and register tiles included) match numpy on the CPU
with their thread bindings made serial. The deliberate-bug tests show that
check can fail. Where a GPU is present the same configs run on it, and the
tuner measures there."""
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import kiln
from kiln.autotune import Space, Task
from kiln.errors import KernelRuntimeError, KilnError, ScheduleError
from kiln.schedules.cuda import check

from cases import CASES
from devices import HAS_GPU, needs_gpu
from helpers import Case, has_cuda_template

WORKLOADS = [
    Case("matmul", [(37, 29), (29, 45)]), Case("matmul", [(3, 17, 9), (9, 70)]),
    Case("matmul", [(29, 37), (45, 29)], attrs={"transpose_a": True, "transpose_b": True}),
    Case("matmul", [(5, 7), (7,)]), Case("dense", [(13, 33), (33, 20), (20,)], attrs={"relu": True}),
    Case("conv2d", [(1, 3, 9, 11), (5, 3, 3, 3)], attrs={"padding": 1}),
    Case("conv2d", [(2, 16, 14, 14), (24, 16, 3, 3)], attrs={"padding": 1, "stride": 2}),
    Case("softmax", [(7, 50)]), Case("log_softmax", [(5, 64)]), Case("softmax", [(4, 6, 5)], attrs={"axis": 1}),
    Case("sum", [(13, 70)], attrs={"axis": 1}), Case("max", [(70, 13)], attrs={"axis": 0}), Case("sum", [(999,)]),
    Case("logsumexp", [(6, 40)], attrs={"axis": 1}), Case("add", [(33, 17), (17,)]), Case("relu", [(1000, 3)]),
    Case("sgd_momentum_step", [(33, 17)] * 3 + [(5,)], attrs={"nesterov": True}),
    Case("conv2d_backward_data", [(2, 5, 5, 6), (5, 3, 3, 3)], attrs={"in_size": (9, 11), "padding": 1, "stride": 2}),
    Case("conv2d_backward_weight", [(2, 3, 9, 11), (2, 5, 5, 6)], attrs={"kernel": 3, "padding": 1, "stride": 2}),
    Case("conv2d_backward_weight", [(2, 8, 7, 7), (2, 16, 7, 7)], attrs={"kernel": 3, "padding": 2, "dilation": 2}),
    Case("conv2d_backward_weight", [(3, 16, 12, 12), (3, 24, 12, 12)], attrs={"kernel": 3, "padding": 1}),  # split
    Case("batch_norm_train", [(6, 3, 4, 5), (3,), (3,)]),
    # a reduction over one element (its loop vanishes) and one whose output keeps the reduced axis
    Case("mean", [(1, 9)], attrs={"axis": 0}), Case("logsumexp", [(7, 13)], attrs={"axis": 0, "keepdims": True}),
    Case("avg_pool2d", [(1, 2, 5, 7)], attrs={"kernel": 3, "stride": 2, "padding": 1}),
    Case("power_scalar", [(9, 4)], attrs={"scalar": 3}), Case("dense", [(1, 6), (6, 2), (2,)], "float64"),
]
SM80 = kiln.cuda("sm_80")


def _task(case, target=SM80):
    return Task.create(case.op, case.shapes, case.dtype_list(), case.attrs, target)


def _cpu_check(task, config):
    """The scheduled CUDA program, run on the CPU, against numpy."""
    low = task.lower(config)
    inputs, expected = task.data()
    got = check.run_on_cpu(low.sch.mod, inputs, [(e.shape, str(e.dtype)) for e in expected])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4, err_msg=f"{task.name} with {low.cfg.resolved()}")


@pytest.mark.parametrize("case", WORKLOADS, ids=str)
def test_default_and_sampled_configs_match_numpy_on_the_cpu(case):
    task = _task(case)
    space = Space(task)
    rng = np.random.default_rng(0)
    for config in [space.default] + [space.sample(rng) for _ in range(2)]:
        check.check_resources(task.lower(config).sch.mod, task.target, case.op)
        _cpu_check(task, config)


@pytest.mark.parametrize("shapes, splits", [([(4, 8, 8, 8), (4, 16, 8, 8)], (1, 2, 4, 8, 16, 32)),
                                             ([(3, 16, 12, 12), (3, 24, 12, 12)], (1, 2, 4))])
def test_the_weight_gradient_cut_across_the_grid_matches_numpy(shapes, splits):
    """Every split the template accepts (the batch, then each image's rows,
    cut into parts reduced by slices of the grid, then summed) gives dw; the
    next power of 2 divides neither and is refused."""
    task = _task(Case("conv2d_backward_weight", shapes, attrs={"kernel": 3, "padding": 1}))
    default = Space(task).default
    for split in splits:
        _cpu_check(task, dict(default, split=split))
    with pytest.raises(ScheduleError, match=f"split {2 * splits[-1]} for a batch of {shapes[0][0]}"):
        task.lower(dict(default, split=2 * splits[-1]))


def test_the_weight_gradient_of_a_large_layer_fills_the_gpu_by_default():
    """ResNet-18's 64x56x56 layer at batch 8 is 4 thread blocks of 448 rows
    unsplit (0.04x cuDNN on an H100); the default cuts it in 32 (1.2x)."""
    task = _task(Case("conv2d_backward_weight", [(8, 64, 56, 56), (8, 64, 56, 56)], attrs={"kernel": 3, "padding": 1}))
    assert Space(task).default["split"] == 32


@pytest.mark.parametrize("case", [Case("conv2d", [(2, 16, 7, 7), (24, 16, 3, 3)], attrs={"padding": 1}),
                                  Case("conv2d_backward_data", [(2, 5, 5, 6), (5, 3, 3, 3)],
                                       attrs={"in_size": (9, 11), "padding": 1, "stride": 2})], ids=str)
def test_several_output_rows_per_thread_match_numpy(case):
    """``tile_y`` rows of a 7-row map (the last block's rows cut short) and of
    a stride-2 data gradient."""
    task = _task(case)
    default = Space(task).default
    for tile_y in (2, 4):
        _cpu_check(task, dict(default, tile_y=tile_y))


def test_the_conv_takes_several_rows_per_thread_where_the_grid_stays_full():
    def default(batch):
        case = Case("conv2d", [(batch, 128, 28, 28), (128, 128, 3, 3)], attrs={"padding": 1})
        return Space(_task(case)).default["tile_y"]

    assert (default(8), default(1)) == (4, 1)  # 224 blocks at batch 8, 28 at batch 1


@needs_gpu
@pytest.mark.parametrize("case", WORKLOADS, ids=str)
def test_default_and_sampled_configs_match_numpy_on_the_gpu(case):
    """The same configs, compiled for the GPU present (``kiln.cuda()`` reads its
    architecture) and run on it."""
    target = kiln.cuda()
    task = _task(case, target)
    space = Space(task)
    inputs, expected = task.data()
    rng = np.random.default_rng(0)
    for config in [space.default] + [space.sample(rng) for _ in range(2)]:
        kernel = kiln.build(case.op, case.shapes, case.dtype_list(), case.attrs, target=target, config=config)
        got = kernel(*inputs)
        for g, e in zip(got if isinstance(got, (list, tuple)) else [got], expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4, err_msg=f"{task.name} with {config}")


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", WORKLOADS[::2] + [WORKLOADS[5], WORKLOADS[17]], ids=str)
def test_templates_compile_to_ptx(case, arch):
    target = kiln.cuda(arch)
    task = _task(case, target)
    ptx = check.compile_ptx(task.lower({}).sch.mod, target, case.op)
    assert f".target {arch}" in ptx and ".entry" in ptx


@needs_nvcc
def test_a_sampled_matmul_config_compiles_for_both_archs():
    rng = np.random.default_rng(3)
    for arch in ("sm_80", "sm_90"):
        target = kiln.cuda(arch)
        task = Task.create("matmul", [(96, 80), (80, 72)], target=target)
        config = Space(task).sample(rng)
        assert ".entry" in check.compile_ptx(task.lower(config).sch.mod, target, "matmul")


def test_every_op_case_lowers_for_cuda_with_its_default_config():
    """What the op table runs where a GPU is present, checked where there is
    none: every case's CUDA schedule applies and passes TVM's GPU verification."""
    failed = []
    for case in CASES:
        if has_cuda_template(case.op):
            try:
                _task(case, kiln.cuda("sm_90")).lower({})
            except KilnError as exc:
                failed.append(f"{case}: {exc}")
    assert not failed, "\n".join(failed)


@needs_nvcc
@pytest.mark.parametrize("op, shapes, attrs", [
    ("exp", [(4096,)], {}), ("maximum", [(4096,), (4096,)], {}), ("cast", [(4096,)], {"dtype": "bool"}),
    ("conv2d_winograd", [(2, 16, 8, 8), (1, 4, 4, 16, 32)], {"out_channels": 32, "padding": 1}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_stages_cuda_cannot_vectorize_run_an_element_per_thread(op, shapes, attrs):
    """TVM's CUDA code generator emits ``float4 != float4`` (a NaN test) and
    bool vectors it cannot convert: such stages ignore the ``vector`` knob."""
    task = Task.create(op, shapes, None, attrs, SM80)
    config = {k: 4 for k in Space(task).knobs if k.endswith("vector")}
    assert config, "no vector knob to set"
    low = task.lower(config)
    assert "T.vectorized" not in low.sch.mod.script()
    assert ".entry" in check.compile_ptx(low.sch.mod, SM80, op)


def test_a_vector_of_float64_is_two_elements_wide():
    task = Task.create("dense", [(64, 64), (64, 64), (64,)], "float64", {}, SM80)
    assert Space(task).choices("vector") == [1, 2]
    assert Space(Task.create("dense", [(64, 64), (64, 64), (64,)], "float32", {}, SM80)).choices("vector") == [1, 2, 4]
    check.check_resources(task.lower({}).sch.mod, SM80, "dense")


def test_configs_over_the_limits_are_rejected_before_compiling():
    with pytest.raises(ScheduleError, match="shared memory per block"):
        kiln.build("matmul", [(512, 512), (512, 512)], target=SM80,
                   config={"threads_m": 32, "threads_n": 32, "tile_m": 8, "tile_n": 8, "tile_k": 32})
    with pytest.raises(ScheduleError, match="2048 threads per block"):
        kiln.build("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], attrs={"padding": 1}, target=SM80,
                   config={"threads_oc": 32, "threads_s": 64})
    task = Task.create("matmul", [(512, 512), (512, 512)], target=SM80)
    assert Space(task).check({"threads_m": 32, "threads_n": 32, "tile_k": 32}) is None  # the tuner skips it


def test_tvm_verification_agrees_with_the_limits(monkeypatch):
    task = Task.create("matmul", [(512, 512), (512, 512)], target=SM80)
    assert check._tvm_verifies(task.lower({}).sch.mod, SM80, "matmul")
    monkeypatch.setattr("kiln.runtime.lower.check_resources", lambda *args: None)  # lower it unchecked
    over = task.lower({"threads_m": 32, "threads_n": 32, "tile_m": 8, "tile_n": 8, "tile_k": 32}).sch.mod
    assert check.resources(over)[0].shared_bytes == 64 * 1024
    assert not check._tvm_verifies(over, SM80, "matmul")


def test_traffic_model_matches_the_lecture_formulas():
    n = 256
    task = Task.create("matmul", [(n, n), (n, n)], target=SM80)
    for tile, threads in ((8, 16), (4, 16), (4, 8)):
        config = {"threads_m": threads, "threads_n": threads, "tile_m": tile, "tile_n": tile, "tile_k": 8}
        counts = check.traffic(task.lower(config).sch.mod)
        block = threads * tile
        assert counts["global_to_shared"] == 2 * n ** 3 // block
        assert counts["shared_to_register"] == 2 * n ** 3 // tile


def test_resources_are_per_block_and_per_thread():
    task = Task.create("matmul", [(256, 256), (256, 256)], target=SM80)
    (kernel,) = check.resources(task.lower({"threads_m": 16, "threads_n": 16, "tile_m": 8, "tile_n": 8,
                                             "tile_k": 8}).sch.mod)
    assert kernel.threads == 256
    assert kernel.shared_bytes == (128 * 8 + 8 * 128) * 4
    assert kernel.registers == 8 * 8 + 8 + 8 + check.REGISTER_OVERHEAD


def _shift_staged_reads(mod, staged_suffix="_shared"):
    """A deliberately wrong program: every read of a shared-memory tile takes
    the element one column to the right (wrapping at the tile's edge)."""

    def shift(load):
        if not load.source.name.endswith(staged_suffix):
            return load
        idx = list(load.indices)
        idx[-1] = tirx.floormod(idx[-1] + 1, load.source.shape[-1])
        return tirx.BufferLoad(load.source, idx)

    func = mod["main"]
    return tvm.IRModule({"main": func.with_body(tvm_ffi.structural_map(func.body, [(tvm.ir.TensorLoad, shift)]))})


def test_the_cpu_check_catches_a_staged_tile_read_with_a_wrong_index():
    task = Task.create("matmul", [(64, 48), (48, 40)], target=SM80)
    low = task.lower({})
    inputs, (expected,) = task.data()
    (good,) = check.run_on_cpu(low.sch.mod, inputs, [(expected.shape, "float32")])
    np.testing.assert_allclose(good, expected, rtol=1e-4, atol=1e-4)
    (bad,) = check.run_on_cpu(_shift_staged_reads(low.sch.mod), inputs, [(expected.shape, "float32")])
    assert not np.allclose(bad, expected, rtol=1e-3, atol=1e-3)


def test_the_cpu_check_catches_a_conv_input_tile_read_with_a_wrong_index():
    task = Task.create("conv2d", [(1, 8, 10, 10), (8, 8, 3, 3)], attrs={"padding": 1}, target=SM80)
    low = task.lower({})
    inputs, (expected,) = task.data()
    (bad,) = check.run_on_cpu(_shift_staged_reads(low.sch.mod), inputs, [(expected.shape, "float32")])
    assert not np.allclose(bad, expected, rtol=1e-3, atol=1e-3)


def test_a_cuda_kernel_without_a_gpu_says_so():
    kernel = kiln.build("relu", [(64,)], target=SM80)
    assert "__global__" in kernel.source() and "threadIdx.x" in kernel.source()
    if HAS_GPU:
        pytest.skip("a GPU is present: the kernel runs")
    with pytest.raises(KernelRuntimeError, match="no cuda device"):
        kernel(np.ones(64, "float32"))


@needs_gpu
def test_the_default_cuda_target_is_the_gpu_present():
    major, minor = tvm.cuda(0).compute_version.split(".")
    assert kiln.cuda().arch == f"sm_{major}{minor}"


def test_show_prints_the_traffic_model(capsys):
    from kiln.cli import main

    assert main(["show", "matmul", "--shape", "256x256x256", "--target", "cuda", "--traffic"]) == 0
    out = capsys.readouterr().out
    assert "global->shared 262,144 elements" in out and "shared->register 4,194,304 elements" in out
    assert "global->register 0 elements" in out
    assert "256 threads/block" in out


def test_the_tuner_builds_cuda_configs_and_records_a_missing_device(tmp_path):
    """The same knob API tunes CUDA templates: configs are built for the GPU in
    worker processes; measuring needs a GPU (here or behind an RPC tracker),
    so without one each trial is recorded as an error and the run completes."""
    from kiln.autotune import LocalRunner, tune

    if HAS_GPU:
        pytest.skip("a GPU is present: trials would be measured")
    task = Task.create("matmul", [(64, 64), (64, 64)], target=SM80)
    result = tune(task, trials=2, tuner="random", records=tmp_path / "r.jsonl", batch_size=2,
                  runner=LocalRunner(repeat=1, min_repeat_ms=1))
    assert len(result.records) == 2
    assert all(r["error"]["kind"] == "runtime" and "no cuda device" in r["error"]["message"] for r in result.records)
    assert all(r["build_s"] > 0 for r in result.records)  # built before the measurement was refused


@needs_gpu
def test_the_tuner_measures_cuda_configs_on_the_gpu(tmp_path):
    from kiln.autotune import LocalRunner, tune

    task = Task.create("matmul", [(128, 128), (128, 128)], target=kiln.cuda())
    result = tune(task, trials=4, tuner="random", records=tmp_path / "r.jsonl", batch_size=4,
                  runner=LocalRunner(repeat=2, min_repeat_ms=5))
    assert result.measured == 4  # and the confirmation of the fastest, timed again
    assert all(r["error"] is None for r in result.records), [r["error"] for r in result.records]
    assert all(0 < r["result"]["median_s"] < 0.1 for r in result.records)
