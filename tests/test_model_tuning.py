"""Model-level tuning: task extraction, the task scheduler, resuming, budgets,
and tuned records reaching exported models and compiled training steps."""
import os
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import relax

import kiln
from kiln import nn
from kiln.autotune import LocalRunner, Task, TaskScheduler, apply_records, extract, records, tune_model
from kiln.autotune.extract import ModelTask
from kiln.errors import AttrError, ExportError, ShapeError
from kiln.graph.export import export, inference_graph, tuned_batches
from kiln.graph.lower import kernel_nodes, node_workload
from kiln.graph.step import graph_key
from kiln.nn.train import build_model
from kiln.runtime import Predictor
from kiln.runtime.build import untuned
from kiln.runtime.device import as_target

ZOO = ("mlp", "cnn", "resnet")


def _called_kernels(vm, module, entry: str, args, suffix: str = "") -> Counter:
    """How often one call of ``entry`` launches each kernel, named as its
    graph node (the entry's suffix and the kernel's index dropped)."""
    module = getattr(module, "mod", module)  # an executable, or the library it was loaded as
    library = next(m for m in module.imports if m.kind == "library")
    called = Counter()

    def instrument(func, symbol, before, ret, *rest):  # noqa: ARG001 - the hook's fixed signature
        if before and library.implements_function(symbol):
            called[_node_name(symbol, suffix)] += 1
        return 0

    vm.set_instrument(instrument)
    vm[entry](*args)
    return called


def _node_name(symbol: str, suffix: str = "") -> str:
    base = symbol[:-len(suffix)] if suffix else symbol
    return base.rsplit("_", 1)[0]  # the kernel index


@pytest.mark.parametrize("name", ZOO)
def test_extract_finds_every_kernel_an_export_runs(name, tmp_path):
    model = build_model(name, (1, 8, 8), 10)
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    tasks = extract(model, x)
    expected = Counter()
    for t in tasks:
        expected.update(t.kernels)
        assert t.calls == len(t.kernels) and t.task.shapes[0][0] == 4
    predictor = Predictor(export(model, x, tmp_path / "m.so", batches=[4]))
    vm = relax.VirtualMachine(predictor._lib, tvm.cpu())
    assert _called_kernels(vm, predictor._lib, "main_b4", [tvm.runtime.tensor(x)], "_b4") == expected
    assert len({t.task.key for t in tasks}) == len(tasks)  # one task per distinct workload


@pytest.mark.parametrize("name", ZOO)
def test_extract_training_finds_every_kernel_a_compiled_step_runs(name):
    model = build_model(name, (1, 8, 8), 10)
    x = np.random.default_rng(0).random((8, 1, 8, 8), dtype=np.float32)
    y = np.arange(8, dtype="int32") % 10
    before = model.state_dict()
    tasks = extract(model, x, training=True, labels=y)
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # the traced step was undone
    ops = {t.task.op.name for t in tasks}
    assert {"dense", "softmax_cross_entropy", "adam_step"} <= ops
    if name != "mlp":
        assert {"conv2d", "conv2d_backward_weight"} <= ops
    loss_fn, opt = nn.SoftmaxLoss(), nn.optim.Adam(model.parameters())
    step = kiln.compile(lambda a, b: loss_fn(model(a), b), opt)
    step(nn.Tensor(x), nn.Tensor(y))
    (module,) = [s for s in step._steps.values()]
    held, vm = module._keep
    library = next(m for m in getattr(held.module, "mod", held.module).imports if m.kind == "library")
    called = Counter()

    def instrument(func, symbol, before_, ret, *rest):  # noqa: ARG001 - the hook's fixed signature
        if before_ and library.implements_function(symbol):
            called[_node_name(symbol)] += 1
        return 0

    vm.set_instrument(instrument)  # the step's function runs on this VM
    step(nn.Tensor(x), nn.Tensor(y)).numpy()
    expected = Counter()
    for t in tasks:
        expected.update(t.kernels)
    assert called == expected


def test_extract_rejects_bad_input():
    model = build_model("mlp", (1, 8, 8), 10)
    with pytest.raises(ShapeError, match="extract"):
        extract(model, np.float32(1.0))
    with pytest.raises(AttrError, match="kiln.nn.Module"):
        extract(lambda v: v, np.zeros((2, 3), "float32"), training=True)


def _fake(tasks_seconds: dict, log: list, per_trial_s: float = 0.0, slower: tuple = ()):
    """A tune_round whose configs get faster with trials (slower, for the
    tasks in ``slower``): task -> seconds of its default."""
    made: dict = {}

    def tune_round(model_task, n):
        task = model_task.task
        found = made.setdefault(task.key, [])
        for _ in range(n):
            k = len(found)
            seconds = tasks_seconds[task.key] * (1 + 0.2 * k) ** (1 if task.key in slower else -1)
            found.append(records.make_record(task.json, {"k": k}, result={"median_s": seconds, "costs": [seconds]}))
            log.append(task.key)
        time.sleep(per_trial_s * n)
        return list(found)
    return tune_round


def _two_tasks():
    big = Task.create("matmul", [(64, 64), (64, 64)])
    small = Task.create("matmul", [(8, 8), (8, 8)])
    return [ModelTask(big, 10, ("matmul",) * 10), ModelTask(small, 1, ("matmul",))], big, small


def test_scheduler_spends_its_trials_where_the_model_gains_most():
    tasks, big, small = _two_tasks()
    log = []
    seconds = {big.key: 1e-3, small.key: 1e-5}
    plan = TaskScheduler(tasks, round_trials=4, tune_round=_fake(seconds, log)).run(trials=80)
    count = Counter(log)
    assert plan.trials == 80 == sum(count.values())
    assert count[small.key] >= 4 and count[big.key] > 5 * count[small.key]  # each tried, the heavy one most
    assert plan.estimate_s() < plan.estimate_s(default=True)
    assert all(s.improved and s.default_config == {"k": 0} and s.best_config == {"k": s.trials - 1}
               for s in plan.states)  # the fake's last config is its fastest


def test_scheduler_stops_tasks_that_stop_improving_and_honours_budgets():
    tasks, big, small = _two_tasks()
    flat = {}

    def tune_round(model_task, n):
        task = model_task.task
        found = flat.setdefault(task.key, [])
        found += [records.make_record(task.json, {"k": len(found) + i}, result={"median_s": 1e-3, "costs": [1e-3]})
                  for i in range(n)]
        return list(found)
    plan = TaskScheduler(tasks, round_trials=4, patience=8, tune_round=tune_round).run(trials=1000)
    assert all(s.stopped.startswith("no faster config") for s in plan.states) and plan.trials < 40
    assert not any(s.improved for s in plan.states)  # nothing beat the first config: the model keeps its kernels
    for budget in (0.6, 1.5):  # seconds; rounds of 4 trials at 20 ms per trial
        start = time.monotonic()
        TaskScheduler(tasks, round_trials=4, tune_round=_fake({big.key: 1e-3, small.key: 1e-5}, [],
                                                               per_trial_s=0.02)).run(budget_s=budget)
        assert budget - 0.1 <= time.monotonic() - start <= 1.1 * budget  # ends within a round (80 ms) of it
    with pytest.raises(AttrError, match="neither"):
        TaskScheduler(tasks).run()
    with pytest.raises(AttrError, match="no tasks"):
        TaskScheduler([])


def test_a_budget_too_short_for_full_first_rounds_reaches_every_task_or_says_which_it_missed():
    """Rounds of 8 trials at 0.1 s a trial: a 1 s budget affords one full
    round, yet three tasks each get a first round (shorter ones); a budget
    that cannot reach them all names the ones it missed."""
    tasks, big, small = _two_tasks()
    third = Task.create("matmul", [(16, 16), (16, 16)])
    tasks.append(ModelTask(third, 1, ("matmul",)))
    seconds = {big.key: 1e-3, small.key: 1e-5, third.key: 1e-4}
    log = []
    plan = TaskScheduler(tasks, round_trials=8, tune_round=_fake(seconds, log, per_trial_s=0.1)).run(budget_s=1.0)
    assert set(log) == {big.key, small.key, third.key} and not plan.unreached, Counter(log)
    log = []
    plan = TaskScheduler(tasks, round_trials=8, tune_round=_fake(seconds, log, per_trial_s=0.4)).run(budget_s=1.0)
    assert plan.unreached and len(set(log)) + len(plan.unreached) == 3  # each task reached or named


def test_a_run_ends_by_confirming_the_tasks_it_measured_largest_share_first():
    tasks, big, small = _two_tasks()
    log, confirmed = [], []
    made = _fake({big.key: 1e-3, small.key: 1e-5}, log)
    kept: dict = {}

    def tune_round(model_task, n):
        kept[model_task.task.key] = made(model_task, n)
        return list(kept[model_task.task.key])

    def confirm_round(model_task):  # the re-timing finds every config 10% slower than its trial said
        task, found = model_task.task, kept[model_task.task.key]
        confirmed.append(task.key)
        best, first = min(found, key=lambda r: r["result"]["median_s"]), found[0]
        again = [records.make_record(task.json, r["config"], confirmed=True,
                                     result={"median_s": 1.1 * r["result"]["median_s"], "costs": []})
                 for r in (best, first)]
        return found + again
    plan = TaskScheduler(tasks, round_trials=4, tune_round=tune_round, confirm_round=confirm_round).run(trials=24)
    assert confirmed == [big.key, small.key]
    by_key = {s.model_task.task.key: s for s in plan.states}
    assert all(s.confirmed and s.trials == len(kept[k]) for k, s in by_key.items())
    trial_best = min(r["result"]["median_s"] for r in kept[big.key])
    assert by_key[big.key].best_s == pytest.approx(1.1 * trial_best)
    assert by_key[big.key].default_s == pytest.approx(1.1e-3)
    assert TaskScheduler(tasks, round_trials=4, tune_round=tune_round).confirm_round is None  # a fake: none
    # a task none of whose trials beat its baseline keeps it, and is not re-timed
    confirmed.clear(), kept.clear()
    made = _fake({big.key: 1e-3, small.key: 1e-5}, log, slower=(small.key,))
    plan = TaskScheduler(tasks, round_trials=4, tune_round=tune_round, confirm_round=confirm_round).run(trials=24)
    by_key = {s.model_task.task.key: s for s in plan.states}
    assert confirmed == [big.key] and by_key[big.key].confirmed and not by_key[small.key].confirmed
    assert not by_key[small.key].improved and by_key[small.key].best_s == by_key[small.key].default_s == 1e-5


def test_a_killed_model_tune_resumes_without_remeasuring(tmp_path):
    path = tmp_path / "records.jsonl"
    cmd = [sys.executable, "-m", "kiln", "tune", "--model", "mlp", "--trials", "12", "--batch", "4",
           "--batch-size", "2", "--records", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(records.load(path)) >= 4:
            break
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = records.load(path)
    assert 4 <= len(before) < 12, "the first round should be written before the kill"
    runner = LocalRunner(repeat=3, min_repeat_ms=5)
    try:
        plan = tune_model(build_model("mlp", (1, 8, 8), 10), np.zeros((2, 1, 8, 8), "float32"), trials=12,
                          records=path, resume=True, runner=runner, round_trials=4)
    finally:
        runner.close()
    after = records.load(path)
    trials = [r for r in after if not records.is_confirmed(r)]
    assert len(trials) == 12 and plan.measured == 12 - len(before) and after[:len(before)] == before
    measured = [(r["task_key"], kiln.schedules.config_key(r["config"])) for r in trials]
    assert len(set(measured)) == len(measured)  # nothing measured twice
    # then the tasks it measured confirmed where a trial beat the baseline (the first trial)
    beaten = set()
    for s in plan.states:
        mine = [r for r in trials if r["task_key"] == s.model_task.task.key and records.is_ok(r)]
        if s.measured_now and any(r["result"]["median_s"] < mine[0]["result"]["median_s"] for r in mine[1:]):
            beaten.add(s.model_task.task.key)
    assert {r["task_key"] for r in after if records.is_confirmed(r)} == \
        {s.model_task.task.key for s in plan.states if s.confirmed} == beaten


@pytest.mark.parametrize("argv", [["--model", "mlp", "--trials", "4"], ["relu", "--shape", "64"]])
def test_ctrl_c_in_a_tune_says_where_the_measurements_are_and_how_to_go_on(tmp_path, capsys, monkeypatch, argv):
    from types import SimpleNamespace

    from kiln.autotune.tune import Progress
    from kiln.cli import main

    def measured_then_interrupted(task, *args, callback, **kwargs):
        callback(Progress(task, 16, done=8) if isinstance(task, Task) else SimpleNamespace(measured=8))
        raise KeyboardInterrupt

    monkeypatch.setattr(kiln.autotune.model, "tune_model", measured_then_interrupted)  # kiln tune --model
    monkeypatch.setattr(kiln.autotune, "tune", measured_then_interrupted)  # kiln tune OP
    path = tmp_path / "r.jsonl"
    assert main(["tune", *argv, "--records", str(path), "--json"]) == 130
    err = capsys.readouterr().err
    assert err.startswith(f"kiln tune: interrupted; {path} holds the 8 trials measured: the same command with "
                          "--resume goes on from them"), err


@pytest.mark.parametrize("argv", [["--model", "mlp", "--trials", "4"], ["relu", "--shape", "64"]])
def test_ctrl_c_before_a_trial_is_measured_says_nothing_was_written(tmp_path, capsys, monkeypatch, argv):
    from kiln.cli import main, tune_model as cli_tune_model

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_tune_model, "run", interrupted)  # kiln tune --model
    monkeypatch.setattr(kiln.autotune, "tune", interrupted)  # kiln tune OP
    assert main(["tune", *argv, "--records", str(tmp_path / "r.jsonl")]) == 130
    err = capsys.readouterr().err
    assert err == "kiln tune: interrupted before the first trial was measured: no records were written\n", err


def test_tuned_records_reach_the_export_and_the_compiled_step(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_applied", [])
    model = nn.Sequential(nn.Linear(24, 40), nn.ReLU(), nn.Linear(40, 10))
    x = np.random.default_rng(1).random((6, 24), dtype=np.float32)
    target = as_target(None)
    (first, *_), = [extract(model, x)]
    config = dict(kiln.autotune.Space(first.task).default, tile_m=2)
    path = tmp_path / "records.jsonl"
    records.append(path, [records.make_record(first.task.json, config,
                                              result={"median_s": 1e-6, "costs": [1e-6]})])
    graph = inference_graph(model, x, target)
    assert tuned_batches(graph, target) == []
    apply_records(path)
    assert tuned_batches(graph, target) == [6]
    predictor = Predictor(export(model, x, tmp_path / "m.so"))
    assert predictor.meta["entries"][0] == {"name": "main_b6", "batch": 6}
    reference = model(nn.Tensor(x)).numpy()
    np.testing.assert_allclose(predictor(x), reference, rtol=1e-5, atol=1e-6)
    with untuned():
        plain = Predictor(export(model, x, tmp_path / "plain.so"))
    assert "main_b6" not in [e["name"] for e in plain.meta["entries"]]
    with pytest.raises(ExportError, match="batches"):
        export(model, x, tmp_path / "bad.so", batches=[0])
    static = graph.specialized(6)
    tuned_key = graph_key(static, target)
    assert node_workload(kernel_nodes(static)[0]).key == first.task.workload.key
    with untuned():
        assert graph_key(static, target) != tuned_key  # a new record makes a new compiled step


def test_configs_tuned_on_an_op_alone_apply_to_its_fused_kernels(tmp_path, monkeypatch):
    """A task is its op alone; the step's kernel of it may carry an epilogue
    (the pool's gradient broadcast into the ReLU's). Each task's config,
    recorded as tuned, reaches every kernel of the task: none ignored for
    knobs its fused kernel names otherwise."""
    monkeypatch.setattr(records, "_applied", [])
    model = build_model("cnn", (1, 8, 8), 10)
    x = np.random.default_rng(0).random((8, 1, 8, 8), dtype=np.float32)
    y = np.arange(8, dtype="int32") % 10
    tasks = extract(model, x, training=True, labels=y)
    fused = [t for t in tasks if any(name != t.task.op.name for name in t.kernels)]
    assert any(t.task.op.name == "broadcast_to" for t in fused)  # the case that was ignored
    records.append(tmp_path / "records.jsonl", [
        records.make_record(t.task.json, kiln.autotune.Space(t.task).default,
                            result={"median_s": 1e-6, "costs": [1e-6]}) for t in tasks])
    apply_records(tmp_path / "records.jsonl")
    loss_fn, opt = nn.SoftmaxLoss(), nn.optim.Adam(model.parameters())
    step = kiln.compile(lambda a, b: loss_fn(model(a), b), opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "ignoring the tuning record for ..."
        loss = step(nn.Tensor(x), nn.Tensor(y)).numpy()
    assert np.isfinite(loss)


def test_the_model_tune_table_puts_each_task_beside_its_arithmetic_at_the_fma_peak():
    from kiln.cli.tune_model import _table, peak_ms

    dense = Task.create("dense", [(16, 32), (32, 10), (10,)])
    relu = Task.create("relu", [(16, 32)])
    assert peak_ms(dense.workload, 100.0) == pytest.approx(1e3 * 2 * 16 * 32 * 10 / 100e9)
    assert peak_ms(relu.workload, 100.0) is None  # memory-bound: no arithmetic to put at the peak
    # a Winograd conv's kernel does its products in the transformed domain: F(4x4, 3x3) on an 8x8 map, 16 -> 32
    # channels, is 2 x 2 tiles of 6 x 6 positions, each a (tiles x 16) by (16 x 32) product, per image
    winograd = Task.create("conv2d_winograd", [(2, 1, 8, 8, 16), (1, 6, 6, 16, 32)],
                           attrs={"out_channels": 32, "padding": 1, "in_block": 16, "out_block": True})
    products = 2 * 2 * 36 * 4 * 16 * 32
    assert peak_ms(winograd.workload, 100.0) == pytest.approx(1e3 * products / 100e9)
    assert winograd.flops == 2 * 2 * 32 * 64 * 16 * 9  # its GFLOPS still count the direct conv's products
    task = {"calls": 1, "trials": 4, "confirmed": True, "default_ms": 2e-4, "improved": True}
    summary = {"model": "m", "training": False, "batch": 16, "trials": 8, "measured_now": 8, "elapsed_s": 3.0,
               "fma_peak_gflops": 100.0, "estimate_untuned_ms": 4e-4, "estimate_tuned_ms": 3e-4,
               "untuned_ms": 0.01, "tuned_ms": 0.008, "speedup": 1.25, "same_kernels": False,
               "records": "r.jsonl", "default_records": False,
               "tasks": [dict(task, task=dense.name, best_ms=2 * peak_ms(dense.workload, 100.0),
                              peak_ms=peak_ms(dense.workload, 100.0)),
                         dict(task, task=relu.name, best_ms=1e-4, peak_ms=None)]}
    dense_line, relu_line = (line for line in _table(summary).splitlines() if line.strip().startswith(("dense", "relu")))
    assert dense_line.split()[-2:] == ["50%", "confirmed"] and relu_line.split()[-3:] == ["-", "-", "confirmed"]
    assert "100 GFLOPS" in _table(summary) and "noise" not in _table(summary)
    # where tuning kept every default, the tuned model is the untuned one: the table says what its ratio is
    same = dict(summary, same_kernels=True, tasks=[dict(t, improved=False) for t in summary["tasks"]])
    assert all(line.endswith("confirmed  default best") for line in _table(same).splitlines()
               if line.strip().startswith(("dense", "relu")))
    assert "the difference measured is the noise of the measurement" in _table(same)
    # where the records went, and how the export and the training step read them
    assert "kiln export/train --records r.jsonl" in _table(summary)
    assert "kiln export/train --records 'my runs/r.jsonl'" in _table(dict(summary, records="my runs/r.jsonl"))
    assert "kiln export, kiln train and kiln.build use the tuned configs" in _table(dict(summary, default_records=True))


def test_tasks_of_one_name_are_told_apart_by_their_attributes():
    from types import SimpleNamespace

    from kiln.cli.tune_model import task_names

    tasks = [Task.create("multiply_scalar", [(16,)], attrs={"scalar": s}) for s in (0.9, 0.01)]
    tasks.append(Task.create("relu", [(16,)]))
    states = [SimpleNamespace(model_task=ModelTask(t, 2, ())) for t in tasks]
    assert task_names(states) == ["multiply_scalar(16; scalar=0.9)", "multiply_scalar(16; scalar=0.01)", "relu(16)"]
