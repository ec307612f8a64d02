"""The autotuner: spaces, records, tuners, and tuned configs reaching kiln.build."""
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

import kiln
from kiln.autotune import Builder, LocalRunner, Space, Task, apply_records, best, load_records, tune
from kiln.autotune.cost_model import CostModel
from kiln.errors import AttrError, ShapeError
from kiln.autotune import records
from kiln.schedules import config_key

SMALL = Task.create("matmul", [(48, 40), (40, 56)])


@pytest.fixture(scope="module")
def workers():
    builder, runner = Builder(), LocalRunner(repeat=3, min_repeat_ms=5)
    yield builder, runner
    builder.close()
    runner.close()


def test_space_knobs_sample_neighbour_and_grid():
    space = Space(SMALL)
    assert set(space.knobs) >= {"tile_m", "tile_n", "unroll_k", "tile_k", "pack_b", "parallel"}
    assert space.size == np.prod([len(space.choices(n)) for n in space.knobs])
    rng = np.random.default_rng(0)
    c = space.sample(rng)
    assert space.check(c) == c
    n = space.neighbour(c, rng)
    assert n is not None and sum(n[k] != c[k] for k in c) == 1
    grid = [config_key(g) for _, g in zip(range(30), space.grid())]
    assert grid[0] == config_key(space.default) and len(set(grid)) == len(grid)
    assert space.check(dict(space.default, unroll_k=8, tile_k=4)) is None  # tile_k must be a multiple of unroll_k


@pytest.mark.parametrize("in_size, same", [(11, True), (12, False)])
def test_configs_of_one_program_are_one_point(in_size, same):
    """A knob that changes nothing under the others' values (``unroll_phase``
    where a task's rows are not whole cycles of the phases: an odd height
    under stride 2) gives the config met first, so it is not measured twice;
    where it does change the program, two points."""
    space = Space(Task.create("conv2d_backward_data", [(1, 16, 6, 6), (16, 24, 3, 3)],
                              attrs={"in_size": in_size, "stride": 2, "padding": 1}))
    rolled = space.check(dict(space.default, unroll_phase=0))
    assert space.check(dict(space.default, unroll_phase=1)) == space.default
    assert (rolled == space.default) is same
    assert rolled["unroll_phase"] == (1 if same else 0)


def test_features_name_knobs_loops_and_task():
    space = Space(SMALL)
    f = space.features(space.default)
    assert f["knob.tile_m"] == pytest.approx(np.log2(1 + space.default["tile_m"]))
    assert f["loop.parallel.count"] >= 1 and f["loop.vectorized.count"] >= 1
    assert f["buffer.local.log_bytes"] > 0 and f["task.in0.0"] == pytest.approx(np.log2(49))


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_cost_model_learns_an_order(objective):
    rng = np.random.default_rng(0)
    rows = [{"a": float(a), "b": float(b)} for a, b in rng.uniform(0, 4, size=(64, 2))]
    labels = [r["a"] - 0.5 * r["b"] for r in rows]
    model = CostModel(objective)
    model.fit(rows, labels, [0] * len(rows))
    pred = model.predict(rows)
    assert np.corrcoef(pred, labels)[0, 1] > 0.9
    with pytest.raises(AttrError, match="objective"):
        CostModel("bogus")


def test_task_rejects_bad_input():
    with pytest.raises(ShapeError, match="matmul"):
        Task.create("matmul", [(4, 5), (6, 7)])
    with pytest.raises(ShapeError, match="static dims"):
        Task.create("relu", [(kiln.te.sym("n"), 4)])
    with pytest.raises(AttrError, match="tuner"):
        tune(SMALL, trials=1, tuner="annealing")


@pytest.mark.parametrize("tuner", ["random", "grid", "xgb"])
def test_short_tune_writes_records_and_keeps_the_best(tuner, tmp_path, workers):
    path = tmp_path / "records.jsonl"
    options = {"min_train": 4} if tuner == "xgb" else {}
    result = tune(SMALL, trials=12, tuner=tuner, records=path, batch_size=4, builder=workers[0], runner=workers[1],
                  **options)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    recs = [r for r in lines if not r.get("confirmed")]
    assert len(recs) == 12 and result.measured == 12 and result.trials == recs
    assert all(r["task_key"] == SMALL.key and r["tuner"] == tuner and r["kiln"] and r["tvm"] for r in recs)
    assert len({config_key(r["config"]) for r in recs}) == 12  # no config measured twice
    assert [r["trial"] for r in recs] == list(range(12))
    assert recs[0]["config"] == Space(SMALL).default
    ok = [r for r in recs if records.is_ok(r)]
    assert len(ok) == 12, [r["error"] for r in recs if r["error"]]
    assert all(len(r["result"]["costs"]) == 3 and r["result"]["gflops"] > 0 for r in ok)
    assert best(SMALL, path)["config"] == result.best["config"]
    # the run ends by re-timing the (at most 3) fastest configs that beat the default, with it, interleaved:
    # these decide the best; where none beat it, nothing is re-timed and the default stays the best
    confirmed = [r for r in lines if r.get("confirmed")]
    faster = [r for r in ok if r["result"]["median_s"] < recs[0]["result"]["median_s"]]
    chosen = sorted(faster, key=lambda r: r["result"]["median_s"])[:3] + recs[:1] if faster else []
    assert {config_key(r["config"]) for r in confirmed} == {config_key(r["config"]) for r in chosen}
    assert all(len(r["result"]["costs"]) == 9 and r["trial"] is None for r in confirmed)
    winners = [r for r in confirmed if r.get("beats_first") is not False]  # the first, and who beat it in turns
    assert all(("beats_first" in r) == (config_key(r["config"]) != config_key(recs[0]["config"])) for r in confirmed)
    assert result.best == (min(winners, key=lambda r: r["result"]["median_s"]) if confirmed else recs[0])


def test_xgb_tuner_uses_the_model_after_min_train(tmp_path, workers):
    from kiln.autotune import XGBTuner

    space = Space(SMALL)
    search = XGBTuner(space, seed=1, min_train=4)
    rng = np.random.default_rng(0)
    configs = [space.sample(rng) for _ in range(8)]
    search.update(configs, [float(c["tile_m"]) for c in configs])  # pretend bigger tile_m is faster
    batch = search.next_batch(8)
    assert len(batch) == 8 and not {config_key(c) for c in batch} & search.visited
    assert np.mean([c["tile_m"] for c in batch]) > np.mean(space.choices("tile_m"))


def test_transfer_rows_come_from_other_shapes(tmp_path, workers):
    from kiln.autotune.transfer import transfer_rows

    path = tmp_path / "records.jsonl"
    other = Task.create("matmul", [(32, 32), (32, 32)])
    tune(other, trials=4, tuner="random", records=path, batch_size=4, builder=workers[0], runner=workers[1])
    rows = transfer_rows(SMALL, path)
    assert len(rows) == 4 and all(g == 1 for _, _, g in rows) and max(s for _, s, _ in rows) == 1.0
    assert transfer_rows(other, path) == []  # a task's own records are not "transfer"


def test_tuned_config_is_used_by_build(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_applied", [])
    path = tmp_path / "records.jsonl"
    task = Task.create("matmul", [(24, 40), (40, 24)])
    config = dict(Space(task).default, tile_m=2, unroll_k=1, tile_k=8)
    rec = records.make_record(task.json, config, result={"median_s": 1e-6, "gflops": 1.0, "costs": [1e-6]})
    records.append(path, [rec])
    assert kiln.build("matmul", task.shapes).config == {}
    apply_records(path)
    kernel = kiln.build("matmul", task.shapes)
    assert kernel.config == config and kernel.resolved_config()["tile_m"] == 2
    a, b = np.ones((24, 40), "float32"), np.ones((40, 24), "float32")
    np.testing.assert_allclose(kernel(a, b), a @ b)
    assert kiln.build("matmul", task.shapes, config={}).config == {}  # {} still forces the defaults
    stale = records.make_record(task.json, {"tile_q": 3}, result={"median_s": 1e-9, "gflops": 9.0, "costs": [1e-9]})
    records.append(path, [stale])
    with pytest.warns(RuntimeWarning, match="ignoring the tuning record"):
        assert kiln.build("matmul", task.shapes).config == {}


def test_best_trusts_a_confirmation_only_until_a_later_trial():
    def made(median, confirmed=False, k=0):
        return records.make_record(SMALL.json, {"k": k}, result={"median_s": median, "costs": [median]},
                                   confirmed=confirmed)
    lucky, slow = made(1.0, k=1), made(3.0, k=2)
    retimed = made(2.0, confirmed=True, k=1)
    assert records.best([lucky, slow, retimed]) is retimed  # the re-timing beats the lucky single timing
    later = made(1.5, k=3)  # measured since, by a run that did not confirm (a model's rounds)
    assert records.best([lucky, slow, retimed, later]) is lucky
    assert records.best([lucky, slow, retimed, later, made(1.6, confirmed=True, k=3)])["result"]["median_s"] == 1.6
    assert records.best([]) is None


def test_a_re_timed_config_replaces_the_first_only_where_it_won_two_turns_of_three():
    """A re-timed config must be faster than the first in two of three turns
    they shared: a lower median alone can be the host's shifts."""
    from kiln.autotune.tune import _against

    first = [1.0] * 15
    assert _against([0.9] * 10 + [1.1] * 5, first, False) == {"beats_first": True}  # 10 turns of 15
    assert _against([0.5] * 9 + [1.1] * 6, first, False) == {"beats_first": False}  # a lower median, 9 of 15
    assert _against([0.9] * 15, first, True) == {} and _against([0.9] * 15, None, False) == {}

    def made(median, k, **info):
        return records.make_record(SMALL.json, {"k": k}, result={"median_s": median, "costs": [median]},
                                   confirmed=True, **info)
    default, noise, faster = made(1.0, 0), made(0.9, 1, beats_first=False), made(0.95, 2, beats_first=True)
    assert records.best([default, noise]) is default
    assert records.best([default, noise, faster]) is faster


def test_records_torn_and_corrupt_lines_are_skipped_with_a_warning(tmp_path):
    path = tmp_path / "r.jsonl"
    good = records.make_record(SMALL.json, {"tile_m": 4}, result={"median_s": 1.0, "gflops": 1.0, "costs": [1.0]})
    records.append(path, [good, good])
    with open(path, "ab") as f:
        f.write(b'{"format": 1, "task": {"op": "mat')  # a crash mid-write
    with pytest.warns(RuntimeWarning, match="torn or corrupt"):
        assert len(records.load(path)) == 2
    records.append(path, [good])  # the torn line is ended first, the new record survives whole
    with pytest.warns(RuntimeWarning, match=r"line 3\)"):
        assert len(load_records(path)) == 3
    path.write_text(path.read_text() + "not json\n[1, 2]\n")
    with pytest.warns(RuntimeWarning, match="skipped 3"):
        assert len(records.load(path, SMALL.key)) == 3
    with warnings.catch_warnings(record=True) as again:  # the file as it stands was reported: once is enough
        warnings.simplefilter("always")
        assert len(records.load(path)) == len(load_records(path)) == 3
    assert not again
    assert records.load(tmp_path / "missing.jsonl") == []


APPENDER = """
import sys
from kiln.autotune import records
rec = records.make_record({"op": "x", "writer": sys.argv[2]}, {"pad": "y" * 3000}, error={"kind": "test", "message": ""})
for i in range(150):
    records.append(sys.argv[1], [dict(rec, trial=i)] * 3)
"""


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "shared.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(w)]) for w in range(2)]
    assert all(p.wait(120) == 0 for p in procs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any torn line would warn
        recs = records.load(path)
    assert len(recs) == 2 * 150 * 3
    assert {r["task"]["writer"] for r in recs} == {"0", "1"}


def test_memory_bound_ops_are_tuned_by_time_and_reported_in_gbps(tmp_path, workers):
    """relu counts no FLOPs: scored by GFLOPS every config was 0, the cost model
    learned nothing and early stopping quit after its first window."""
    from kiln.autotune.tuners import XGBTuner

    task = Task.create("relu", [(4096,)])
    seen = []
    result = tune(task, trials=8, tuner="xgb", records=tmp_path / "r.jsonl", batch_size=2, early_stopping=4,
                  builder=workers[0], runner=workers[1], min_train=2, callback=lambda p: seen.append(p.best_rate))
    assert task.unit == "GB/s" and result.measured >= 6  # the first batch set a best: at least 4 more trials
    ok = [r for r in result.trials if records.is_ok(r)]
    assert ok and all(r["result"]["gbps"] > 0 and r["result"]["gflops"] == 0 for r in ok)
    assert all(records.score(r) == pytest.approx(1 / r["result"]["median_s"]) for r in ok)
    assert seen[0] > 0 and seen[-1] == pytest.approx(task.rate(records.best(ok)["result"]["median_s"]))
    search = XGBTuner(Space(task), min_train=2)
    search.update([r["config"] for r in ok], [records.score(r) for r in ok])
    search.next_batch(2)
    assert search.model.booster is not None  # trained on time-based scores, not on zeros


def test_compare_times_libraries_in_turns_and_checks_each(tmp_path, workers):
    """``LocalRunner.compare``: every library checked against the reference,
    then timed one repeat at a time in rotated turns."""
    import tvm

    from kiln.autotune.tune import _write_data

    builder, runner = workers
    space = Space(SMALL)
    configs = [space.default, next(c for c in space.grid() if config_key(c) != config_key(space.default))]
    libraries = [b["library"] for b in builder.build(SMALL.target, [tvm.ir.save_json(SMALL.lower(c).sch.mod)
                                                                     for c in configs], str(tmp_path))]
    data = _write_data(SMALL, str(tmp_path))
    reply = runner.compare(libraries, data, rounds=4)
    assert reply["ok"] and len(reply["costs"]) == 2 and all(len(c) == 4 and min(c) > 0 for c in reply["costs"])
    with np.load(data) as arrays:
        np.savez(tmp_path / "wrong.npz", **{k: (-arrays[k] if k.startswith("out") else arrays[k]) for k in arrays})
    reply = runner.compare(libraries, str(tmp_path / "wrong.npz"), rounds=4)
    assert not reply["ok"] and reply["kind"] == "wrong_result"


def test_a_confirmation_whose_comparison_fails_times_each_config_alone(tmp_path, workers):
    builder, runner = workers

    class Failing(LocalRunner):
        def compare(self, *args, **kwargs):
            return {"ok": False, "kind": "crash", "message": "worker died"}

    failing = Failing(repeat=3, min_repeat_ms=5)
    path = tmp_path / "r.jsonl"
    space = Space(SMALL)
    configs = [space.default] + [c for _, c in zip(range(3), space.grid()) if config_key(c) != config_key(space.default)]
    # trials in which the three others beat the default: all four are re-timed
    records.append(path, [records.make_record(SMALL.json, c, result={"median_s": s, "costs": [s]}, trial=k)
                          for k, (c, s) in enumerate(zip(configs, (4e-3, 3e-3, 2e-3, 1e-3)))])
    try:
        kiln.autotune.confirm(SMALL, path, builder=builder, runner=failing)
    finally:
        failing.close()
    confirmed = [r for r in records.load(path) if records.is_confirmed(r)]
    assert {config_key(r["config"]) for r in confirmed} == {config_key(c) for c in configs}
    assert all(len(r["result"]["costs"]) == 9 for r in confirmed)


def test_a_confirmation_re_times_only_the_configs_that_beat_the_first(tmp_path):
    """The fastest trials that beat the first config (three at most) are
    built again beside it; where none beat it, nothing is built or timed."""
    from kiln.autotune.tune import _confirm

    space = Space(SMALL)
    configs = [c for _, c in zip(range(6), space.grid())]
    built = []

    class Counting:
        def build(self, target, modules, folder):
            built.append(len(modules))
            return [{"ok": False, "error": "not built here"} for _ in modules]

    def trials(times):
        return [records.make_record(SMALL.json, c, result={"median_s": s, "costs": [s]}, trial=k)
                for k, (c, s) in enumerate(zip(configs, times))]

    runner = LocalRunner(repeat=3)
    try:
        assert _confirm(SMALL, trials([1, 2, 3, 4, 5, 6]), configs[0], Counting(), runner, str(tmp_path), "", {}) == []
        assert built == []  # the first stayed the fastest
        _confirm(SMALL, trials([5, 2, 6, 1, 4, 3]), configs[0], Counting(), runner, str(tmp_path), "", {})
        _confirm(SMALL, trials([3, 4, 2, 5, 6, 1]), configs[0], Counting(), runner, str(tmp_path), "", {})
    finally:
        runner.close()
    assert built == [4, 3]  # three that beat it and the first; then the two that did
