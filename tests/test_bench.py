"""``kiln bench`` and ``kiln.bench``: timing discipline, the full-speed numpy
reference, synchronized train steps, the suites' JSON, and refusals."""
import json
import os
import time

import numpy as np
import pytest
import tvm

import kiln
from kiln.bench import reference, report, timing
from kiln.cli import main
from kiln.errors import KilnError
from devices import HAS_GPU
from helpers import cli_error


def scripted(values):
    """A sampler returning ``values`` in turn, logging each call."""
    it = iter(values)
    return lambda: next(it)


def test_warm_up_stops_at_two_samples_within_5_percent():
    assert timing.warm_up(scripted([9.0, 3.0, 2.0, 1.0, 1.03, 5.0])) == {"samples": 5, "stable": True}
    assert timing.warm_up(scripted([1.0, 2.0] * 20), max_samples=6) == {"samples": 6, "stable": False}


def test_stats_spread_is_interquartile_range_over_median_and_flags_noise():
    s = timing.stats([1.0, 1.0, 1.0, 1.0, 9.0])  # one outlier: max is reported, spread stays robust
    assert s["median_s"] == 1.0 and s["max_s"] == 9.0 and s["spread"] == 0.0 and not s["noisy"]
    s = timing.stats([1.0, 1.2, 1.4, 1.6])
    assert s["spread"] == pytest.approx((1.45 - 1.15) / 1.3) and s["noisy"]


def test_compare_warms_each_side_then_interleaves_them():
    log = []
    sides = {name: (lambda n=name: log.append(n) or 1.0) for name in ("kiln", "ref")}
    out = timing.compare(sides, repeat=3, settle=0)
    warm = out["kiln"]["warmup"]["samples"] + out["ref"]["warmup"]["samples"]
    assert log[warm:] == ["kiln", "ref"] * 3
    assert out["kiln"]["samples"] == 3 and out["ref"]["median_s"] == 1.0


def test_every_calls_sample_starts_with_an_untimed_call():
    calls = []

    def fn():
        calls.append(time.perf_counter())

    sample = timing.calls_sampler(fn, min_time=0.0)
    sample()  # calibrates: one untimed call, then the count (1 when no time is asked for)
    assert len(calls) == 2
    sample()
    assert len(calls) == 2 + timing.WARM_CALLS + 1


def test_module_sampler_times_main_on_the_given_tensors_for_at_least_min_time():
    from tvm import te

    n = 1 << 16
    A = te.placeholder((n,), "float32", name="A")
    C = te.compute((n,), lambda i: A[i] * 2.0, name="C")
    executable = tvm.compile(te.create_prim_func([A, C]), target=kiln.cpu().tvm)
    a_np = np.arange(n, dtype="float32")
    a, c = tvm.runtime.tensor(a_np), tvm.runtime.tensor(np.zeros(n, "float32"))
    sample = timing.module_sampler(executable.mod, [a, c], min_time=0.05)
    start = time.perf_counter()
    seconds = sample()
    elapsed = time.perf_counter() - start
    assert 0 < seconds < elapsed and elapsed >= 0.05  # a per-call average over a sample of >= min_time
    np.testing.assert_array_equal(c.numpy(), a_np * 2)  # it ran main on these tensors
    with pytest.raises(KilnError, match="tensors"):
        timing.module_sampler(executable.mod, [])


@pytest.mark.parametrize("repeat", [0, -1, 2.5, True])
def test_repeat_must_be_a_positive_int(repeat):
    with pytest.raises(KilnError, match="repeat"):
        timing.check_repeat(repeat)


def test_reference_process_drops_the_blas_pins_and_keeps_this_environment():
    before = dict(os.environ)
    env = reference.child_env(3)
    assert not set(reference.BLAS_PINS) & set(env) and env["OPENBLAS_NUM_THREADS"] == "3"
    with reference.NumpyReference(threads=1) as ref:
        assert ref.info["numpy"] == np.__version__
        assert [b["num_threads"] for b in ref.info["blas"]] == [1] * len(ref.info["blas"]) != []
        workload = kiln.te.get_op("matmul").check([(64, 32), (32, 16)])
        ref.prepare(workload)
        assert 0 < ref.sample() < 0.1
        with pytest.raises(KilnError, match="numpy reference failed"):  # attrs the reference cannot take
            ref.prepare(kiln.te.Workload(workload.op, {"bogus": 1}, workload.shapes, workload.dtypes, (), ()))
    assert dict(os.environ) == before


def test_train_step_returns_only_after_its_kernels_ran(monkeypatch):
    """A deliberately slow kernel (every pushed function sleeps) must be inside
    the timed region: the step may not return with work still queued."""
    from kiln.bench.suites.train import kiln_step
    from kiln.runtime.engine import Engine

    pushed, finished = [], []
    push = Engine.push

    def slow_push(self, fn, reads=(), writes=(), name=None, inline=False):
        def slow():
            time.sleep(0.01)
            fn()
            finished.append(time.perf_counter())

        pushed.append(name)
        return push(self, slow, reads, writes, name=name, inline=False)  # on the pool, never inline

    kiln.nn.init.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(8, 4), kiln.nn.ReLU(), kiln.nn.Linear(4, 3))
    step = kiln_step(model, np.ones((4, 8), "float32"), np.array([0, 1, 2, 0], "int32"), momentum=0.9)
    step()  # compile outside the patched region
    monkeypatch.setattr(Engine, "push", slow_push)
    start = time.perf_counter()
    step()
    returned = time.perf_counter()
    assert pushed and len(finished) == len(pushed) and max(finished) <= returned
    workers = max(1, kiln.runtime.engine.default().workers)
    assert returned - start >= 0.01 * len(pushed) / workers


def test_cnn_twin_computes_what_the_kiln_model_computes():
    torch = pytest.importorskip("torch", reason="the twins are PyTorch models")
    from kiln.bench.twins import torch_twin
    from kiln.nn.train import build_model

    kiln.nn.init.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10).eval()
    x = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)
    with torch.inference_mode():
        expected = torch_twin(model).eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(kiln.Tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_json_converts_numpy_values_and_nan():
    out = json.loads(report.to_json({"a": np.bool_(True), "b": np.float32(1.5), "c": float("nan"), "d": (1, 2),
                                     "e": np.arange(2)}))
    assert out == {"a": True, "b": 1.5, "c": None, "d": [1, 2], "e": [0, 1]}


def test_bench_op_reports_both_sides_spread_and_blas(capsys, monkeypatch):
    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    assert main(["bench", "matmul", "--shape", "128x128x128", "--repeat", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    for side in ("kiln", "numpy"):
        assert res[side]["gflops"] > 0 and res[side]["samples"] == 3 and res[side]["warmup"]["samples"] >= 2
        assert res[side]["spread"] >= 0
    assert res["ratio"] == pytest.approx(res["numpy"]["median_s"] / res["kiln"]["median_s"])
    assert res["blas"] and res["blas"][0]["internal_api"] and res["reference_env_removed"] == list(reference.BLAS_PINS)


@pytest.mark.parametrize("argv,needle", [
    (["bench", "relu", "--shape", "16", "--repeat", "0"], "--repeat"),
    (["bench", "relu", "--shape", "16", "--repeat", "-3"], "--repeat"),
    (["bench", "relu", "--shape", "0"], "no elements"),
    (["bench", "matmul", "--shape", "0x4x4"], "no elements"),
    (["bench", "relu", "--shape", "3000000000"], "GiB of memory is available"),
    (["bench", "relu"], "--shape"),
    (["bench", "--suite", "gpu"], "cpu, train, inference"),
    (["bench", "relu", "--shape", "4", "--markdown", "x.md"], "--suite only"),
    (["bench", "relu", "--shape", "4", "--int8"], "--suite only"),
    (["bench", "--suite", "cpu", "--int8"], "applies to --suite models"),
])
def test_bench_refuses_with_one_line(capsys, argv, needle):
    cli_error(capsys, argv, needle)


def test_memory_refusal_gives_both_figures():
    from kiln.runtime.measure import check_measurable

    with pytest.raises(KilnError, match=r"needs about 5\.6 GiB .* but 1\.0 GiB"):
        check_measurable(kiln.te.get_op("relu").check([(300_000_000,)]), input_copies=3, output_copies=2, available=1 << 30)


@pytest.mark.skipif(HAS_GPU, reason="a CUDA device is present: nothing to refuse")
def test_bench_cuda_without_a_gpu_says_so(capsys):
    assert main(["bench", "matmul", "--shape", "64x64x64", "--target", "cuda"]) == 2
    assert "no CUDA device is present" in capsys.readouterr().err


def test_plot_without_matplotlib_fails_before_measuring(capsys, monkeypatch, tmp_path):
    import sys

    from kiln.bench import suites

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", None)
    monkeypatch.setattr(suites, "run", lambda *a, **k: pytest.fail("the suite ran before the check"))
    assert main(["bench", "--suite", "cpu", "--plot", str(tmp_path / "r.png")]) == 2
    assert "pip install -e '.[plot]'" in capsys.readouterr().err


def test_the_report_shows_a_command_a_shell_can_run_again():
    from argparse import Namespace

    from kiln.cli.bench import _command

    args = Namespace(quick=True, repeat=3, markdown="my results/{cpu}.md")
    assert _command(["cpu", "train"], args) == "kiln bench --suite cpu,train --quick --repeat 3 --markdown " \
        "'my results/{cpu}.md'"


def test_every_suite_gives_valid_json_markdown_and_a_plot(capsys, monkeypatch, tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    from kiln.bench.suites import cpu, models

    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    monkeypatch.setattr(timing, "MIN_SAMPLE_S", 0.002)
    monkeypatch.setattr(timing, "MAX_WARMUP", 4)
    monkeypatch.setitem(cpu.QUICK, "matmuls", [((128, 128, 128), 0.95)])  # kernels other tests compiled
    monkeypatch.setitem(cpu.QUICK, "stream_elements", 65536)
    monkeypatch.setitem(cpu.QUICK, "dense", ((8, 16, 8), 1.1))
    monkeypatch.setitem(cpu.QUICK, "conv_layers", [(4, 8, 4, 3, 1, 1)])
    monkeypatch.setitem(cpu.QUICK, "softmax", [(8, 64)])
    monkeypatch.setitem(models.QUICK, "models", ("ResNet-18",))  # BERT's import is tests/test_frontend_models.py's
    md, png = tmp_path / "{cpu}.md", tmp_path / "ratios.png"
    assert main(["bench", "--suite", "all", "--quick", "--json", "--markdown", str(md), "--plot", str(png)]) == 0
    res = json.loads(capsys.readouterr().out)
    head = res["header"]
    assert head["llvm_cpu"] == kiln.cpu().mcpu and head["isa"]["vector_bits"] == kiln.cpu().vector_bits
    assert head["fma_peak_gflops"] > 0 and head["triad_gbps"] > 0 and head["cores"] >= 1 and head["blas"]
    assert set(res["suites"]) == {"cpu", "train", "inference", "models", "int8"}
    for name, rows in res["suites"].items():
        assert rows, name
        for row in rows:
            assert (row["kiln"] > 0 if row["kiln"] is not None else row["note"]) and isinstance(row["noisy"], bool), row
            assert row["ratio"] is None or (row["ratio"] > 0 and isinstance(row["met"], bool)), row
    for row in res["suites"]["inference"]:
        if "max |kiln - PyTorch|" in row["extra"]:
            assert row["extra"]["max |kiln - PyTorch|"] < 1e-4
    for row in res["suites"]["models"]:  # run where the references are installed (the test extra), else a note
        assert row["note"] or (row["extra"]["max rel. diff"] < 1e-4 and row["extra"]["GFLOP"] > 0)
    for row in res["suites"]["int8"]:  # the quantized model agrees with its float model and ONNX Runtime's int8 one
        assert row["kiln"] is None or (row["extra"].get("cosine to float", 1.0) > 0.99
                                       and row["extra"]["cosine to ORT int8"] > 0.99)
    text = (tmp_path / f"{kiln.cpu().mcpu}.md").read_text()
    assert kiln.cpu().mcpu in text and "## train" in text and "| ratio |" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_samples_wait_for_spinning_threads_to_go_idle():
    import threading

    def spin(seconds):  # what a thread pool does after its job: burn a core for a while
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    # the suite's earlier tests may leave work finishing (in one CI run on a busy host something did, and this
    # wait reached its 2 s limit): let it end; then nothing runs, and no wait goes beyond a window or two. A
    # test worker's message thread wakes now and then (one such wake made a wait 0.33 s): one of three waits
    timing.wait_until_idle(30.0)
    assert min(timing.wait_until_idle(2.0) for _ in range(3)) < 0.2
    spinner = threading.Thread(target=spin, args=(0.4,))
    spinner.start()
    waited = timing.wait_until_idle(2.0)
    spinner.join()
    assert 0.3 <= waited < 2.0, waited


def test_the_process_table_scan_does_not_count_as_being_busy(monkeypatch):
    clock = [0.0]  # this process's CPU time: only the scan spends any (other threads of the suite may not)

    def slow_scan():  # psutil's walk of a crowded process table: 3 ms of this process's CPU
        clock[0] += 0.003
        return 0.0

    monkeypatch.setattr(timing, "_children_cpu_s", slow_scan)
    monkeypatch.setattr(timing.time, "process_time", lambda: clock[0])
    assert timing.wait_until_idle(1.0) < 0.2


def test_a_reference_view_of_an_input_is_timed_with_its_copy():
    """numpy's transpose is a view: the reference's sample copies it, as the
    kernel writes its result; a result of its own is left as it is."""
    from kiln.bench.reference import _written

    a = np.arange(12.0).reshape(3, 4)
    view, fresh = np.transpose(a), a * 2
    copied, kept = _written([view, fresh], [a])
    assert not np.shares_memory(copied, a) and np.array_equal(copied, view)
    assert kept is fresh
