"""Every mistake a user can make with ``kiln tune``, ``show`` and ``predict``
ends in one line ``kiln: error: ...`` and exit status 2, before any work is
done: argparse's own errors included."""
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.autotune import Space, Task, records
from kiln.cli import build_parser, main
from devices import HAS_GPU
from helpers import cli_error, run_cli




@pytest.mark.parametrize("flag,value", [("--trials", "0"), ("--trials", "-3"), ("--batch", "0"),
                                        ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"),
                                        ("--timeout", "inf"), ("--parallel", "0"), ("--early-stopping", "0"),
                                        ("--early-stopping", "-2"), ("--seed", "-1"), ("--seed", "x"),
                                        ("--tuner", "annealing")])
def test_tune_refuses_nonsense_flag_values(capsys, flag, value):
    cli_error(capsys, ["tune", "relu", "--shape", "64", flag, value], f"argument {flag}:")


def test_argparse_errors_read_like_kiln_errors(capsys):
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--bogus"], "unrecognized arguments: --bogus")
    cli_error(capsys, ["nope"], "invalid choice: 'nope'")
    cli_error(capsys, ["predict", "m.so"], "--input")


@pytest.mark.parametrize("argv,needle", [
    (["tune", "matmul", "--trials", "2"], "--shape"),
    (["tune"], "--plot PNG"),
    (["tune", "relu", "--shape", "64", "--key", "board"], "without --rpc"),
    (["tune", "relu", "--shape", "64", "--rpc", "localhost", "--key", "board"], "HOST:PORT"),
    (["tune", "relu", "--shape", "64", "--rpc", "127.0.0.1:70000", "--key", "board"], "HOST:PORT"),
    (["tune", "matmul", "--shape", "0x4x4"], "no elements"),
    (["tune", "relu", "--shape", "64", "--plot", "curves.txt"], ".png"),
    (["tune", "--model", "cnn"], "--budget"),
    (["tune", "--model", "vgg", "--trials", "8"], "zoo model"),
    (["tune", "--model", "missing.npz", "--trials", "8"], "missing.npz"),
    (["tune", "--model", "cnn", "--budget", "10 minutes"], "argument --budget"),
    (["tune", "--model", "cnn", "--budget", "0s"], "argument --budget"),
    (["tune", "--model", "cnn", "--trials", "8", "--plot", "c.png"], "--plot"),
    (["tune", "relu", "--shape", "64", "--model", "cnn", "--trials", "8"], "one or the other"),
    (["tune", "relu", "--shape", "64", "--budget", "10m"], "without --model"),
    (["tune", "relu", "--shape", "64", "--training"], "without --model"),
    (["tune", "--model", "cnn", "--trials", "8", "--target", "cuda"], "expected cpu"),  # the model runs on the CPU
    (["show", "relu", "--shape", "99999999999999999999"], "int64"),
    (["show", "relu", "--shape", "4000000000x4000000000x4000000000"], "int64"),
    (["show", "relu", "--shape", "-4"], "non-negative"),
])
def test_tune_and_show_mistakes(capsys, argv, needle):
    cli_error(capsys, argv, needle)


@pytest.mark.skipif(HAS_GPU, reason="a CUDA device is present: tuning for it can measure")
def test_tune_for_cuda_without_a_gpu_is_refused_before_building(capsys):
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--target", "cuda"], "no CUDA device")


def test_tune_checks_output_paths_before_measuring(capsys, tmp_path):
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--records", str(tmp_path)], "is a directory")
    cli_error(capsys, ["tune", "--model", "mlp", "--trials", "4", "--records", str(tmp_path)], "is a directory")
    blocker = tmp_path / "file"
    blocker.write_text("")
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--records", str(blocker / "r.jsonl")], "cannot write")
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--plot", str(blocker / "c.png")],
           "is a file, not a folder")
    cli_error(capsys, ["tune", "--plot", str(tmp_path / "c.png"), "--records", str(tmp_path / "none.jsonl")],
           "no records file")


def test_plot_hint_matches_the_readme(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", None)
    err = cli_error(capsys, ["tune", "relu", "--shape", "64", "--plot", str(tmp_path / "c.png")], "matplotlib")
    assert "pip install -e '.[plot]'" in err
    readme = open(os.path.join(os.path.dirname(kiln.__file__), "README.md")).read()
    assert "pip install -e '.[plot]'" in readme


def test_show_zero_size_dims_never_pass_tvm_text_through(capsys):
    status, _, err = run_cli(["show", "matmul", "--shape", "0x4x4"], capsys)
    assert status in (0, 2) and "Check failed" not in err and "Traceback" not in err, err
    assert status == 0 or err.startswith("kiln: error:")


def test_show_uses_a_records_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(records, "_applied", [])
    task = Task.create("matmul", [(24, 40), (40, 24)])  # the shape and config test_autotune compiles
    config = dict(Space(task).default, tile_m=2, unroll_k=1, tile_k=8)
    path = tmp_path / "board.jsonl"
    records.append(path, [records.make_record(task.json, config, result={"median_s": 1e-6, "costs": [1e-6]})])
    assert main(["show", "matmul", "--shape", "24x40x24", "--records", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tuned"] and info["config"]["tile_m"] == 2
    cli_error(capsys, ["show", "matmul", "--shape", "24x40x24", "--records", str(tmp_path / "none.jsonl")],
           "does not exist")
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not\na records file\n")
    cli_error(capsys, ["show", "matmul", "--shape", "24x40x24", "--records", str(foreign)], "no valid tuning record")


def test_tune_summary_of_a_memory_bound_op_and_a_custom_records_file(capsys, tmp_path):
    path = tmp_path / "r.jsonl"
    argv = ["tune", "relu", "--shape", "4096", "--trials", "2", "--tuner", "grid", "--records", str(path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "0.0 GFLOPS" not in out
    assert f"--records {path}" in out and "apply_records" in out  # how to use the file, not a false promise
    assert main(argv + ["--resume", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unit"] == "GB/s" and summary["best_rate"] > 0 and summary["measured_now"] == 0
    png = tmp_path / "curves.png"
    assert main(["tune", "--plot", str(png), "--records", str(path)]) == 0  # plotting alone is a mode of its own
    assert "2 trials" in capsys.readouterr().out and png.stat().st_size > 1000


def test_tune_summary_agrees_with_its_progress_bar_beside_another_run_in_the_file(capsys, tmp_path):
    path, task = tmp_path / "r.jsonl", Task.create("relu", [(4096,)])
    fast = records.make_record(task.json, Space(task).default, result={"median_s": 1e-12, "costs": [1e-12]},
                               trial=0, run="another run")  # of the same task, not of this run: never its best
    records.append(path, [fast])
    assert main(["tune", "relu", "--shape", "4096", "--trials", "3", "--tuner", "grid", "--records", str(path)]) == 0
    out, err = capsys.readouterr()
    bar = float([line for line in err.splitlines() if line.startswith("[")][-1].split(" best ")[1].split()[0])
    best = float(out.split("\n  best     ")[1].split()[0])
    assert best == bar < task.rate(1e-12) / 1e3 and "1.00x" not in out, (err, out)


def _timed(task, config, ms, **about):
    return records.make_record(task.json, config, result={"median_s": ms / 1e3, "costs": [ms / 1e3]}, **about)


def test_tune_summary_tells_the_best_trial_from_the_config_its_re_timing_kept(capsys):
    from pathlib import Path

    from kiln.autotune.tune import TuneResult
    from kiln.cli import tune as cli_tune
    from kiln.schedules import config_key

    task = Task.create("relu", [(4096,)])
    default = Space(task).default
    other = next(c for c in Space(task).grid() if config_key(c) != config_key(default))
    trials = [_timed(task, default, 0.6, trial=0), _timed(task, other, 0.28, trial=1)]
    # the re-timing beside the default found the fastest trial's config no faster: the default is kept
    kept_default = [_timed(task, other, 0.62, confirmed=True, beats_first=False),
                    _timed(task, default, 0.6, confirmed=True)]
    result = TuneResult(task, Path("my runs/r.jsonl"), trials + kept_default, 2, 1.0, "grid", default)
    summary = cli_tune._summary(result, 2, None, default_records=False)
    cli_tune._print_summary(summary)
    out = capsys.readouterr().out
    assert summary["best_ms"] == pytest.approx(0.28) and summary["kept_config"] == default
    assert summary["stopped"] is None and summary["retimed"] and summary["kept_is_default"]
    assert f"  best     {task.rate(0.28e-3):.1f} GB/s, 0.280 ms in trial 2, 2.14x faster than the default's " \
        "0.600 ms\n" in out, out
    assert "none was faster in most turns; the default is kept" in out and "1.00x" not in out, out
    assert f"  kept     {json.dumps(default)}\n" in out and "note" not in out, out
    assert "kiln show/bench --records 'my runs/r.jsonl'" in out  # a path a shell can take back

    # the fastest trial's config kept, re-timed at 2.8x its trial's speed: said, not left to contradict the bar
    kept_best = [_timed(task, other, 0.1, confirmed=True, beats_first=True), _timed(task, default, 0.2, confirmed=True)]
    result = TuneResult(task, Path("r.jsonl"), trials + kept_best, 2, 1.0, "grid", default)
    cli_tune._print_summary(cli_tune._summary(result, 2, None, default_records=False))
    out = capsys.readouterr().out
    assert "0.280 ms in trial 2, 2.14x faster" in out, out
    assert f"the best trial's config is kept, {task.rate(0.1e-3):.1f} GB/s, 0.100 ms, 2.00x faster than the " \
        "default's 0.200 ms" in out, out
    assert "re-timed, it ran 2.8x faster than in its trial" in out, out
    assert cli_tune._versus(1.0, 1.001) == ", as fast as the default (1.001 ms)"
    assert cli_tune._versus(2.0, 1.0) == ", 2.00x slower than the default's 1.000 ms"
    stopped = TuneResult(task, Path("r.jsonl"), trials, 2, 1.0, "grid", default, "early_stopping", 2)
    assert cli_tune._stopped(stopped, 4) == "4 trials or more found no faster config (--early-stopping 4)"


def test_tune_says_why_it_ran_fewer_trials_than_asked(capsys, tmp_path):
    configs = sum(1 for _ in Space(Task.create("relu", [(64,)])).grid())
    argv = ["tune", "relu", "--shape", "64", "--trials", str(configs + 8), "--tuner", "random", "--records",
            str(tmp_path / "r.jsonl")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"stopped  at {configs} of the {configs + 8} trials asked: the space has only {configs} configs, all " \
        "measured" in out, out


# -- RPC ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tune_rpc_without_a_tracker_fails_in_seconds(capsys):
    start = time.monotonic()
    cli_error(capsys, ["tune", "relu", "--shape", "64", "--rpc", f"127.0.0.1:{_free_port()}", "--key", "board"],
           "no TVM RPC tracker answers")
    assert time.monotonic() - start < 15


def test_tune_rpc_to_a_silent_peer_times_out_quickly():
    from kiln.autotune import RPCRunner
    from kiln.errors import KilnError

    with socket.socket() as server:  # accepts connections, never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        runner = RPCRunner("127.0.0.1", server.getsockname()[1], "board", connect_timeout=1.0)
        start = time.monotonic()
        with pytest.raises(KilnError, match="no TVM RPC tracker answers"):
            runner.check()
        assert time.monotonic() - start < 5
        # a batch meant for an unreachable device is recorded as rpc at once, without a timeout per trial
        replies = runner.run(["a.so", "b.so"], "data.npz")
        runner.close()
    assert [r["kind"] for r in replies] == ["rpc", "rpc"] and time.monotonic() - start < 10


# -- predict --------------------------------------------------------------------
@pytest.fixture(scope="module")
def model(tmp_path_factory):
    nn.init.manual_seed(0)
    return kiln.export(nn.Sequential(nn.Linear(8, 3)), np.zeros((1, 8), "float32"),
                       tmp_path_factory.mktemp("model") / "model.so")


def test_predict_reads_npy_and_single_array_npz(capsys, tmp_path, model):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "one.npz", batch=x)
    np.savez(tmp_path / "two.npz", batch=x, labels=np.arange(4))
    assert main(["predict", str(model), "--input", str(tmp_path / "x.npy"), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert len(want["classes"]) == 4
    assert main(["predict", str(model), "--input", str(tmp_path / "one.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == want
    assert main(["predict", str(model), "--input", str(tmp_path / "two.npz"), "--key", "batch", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == want
    cli_error(capsys, ["predict", str(model), "--input", str(tmp_path / "two.npz")], "--key NAME")
    err = cli_error(capsys, ["predict", str(model), "--input", str(tmp_path / "two.npz"), "--key", "x"], "no array 'x'")
    assert "batch, labels" in err


def test_predict_refuses_bad_inputs_and_models(capsys, tmp_path, model):
    inputs = {"empty.npy": b"", "text.npy": b"hello, not numbers", "cut.npz": b"PK\x03\x04truncated"}
    for name, data in inputs.items():
        (tmp_path / name).write_bytes(data)
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    full = tmp_path / "full.npy"
    np.save(full, np.zeros((64, 8), "float32"))
    (tmp_path / "short.npy").write_bytes(full.read_bytes()[:200])
    np.save(tmp_path / "f64.npy", np.zeros((2, 8)))
    np.save(tmp_path / "wide.npy", np.zeros((2, 9), "float32"))
    cases = [("empty.npy", "empty"), ("text.npy", "not a .npy or .npz"), ("cut.npz", "numeric array"),
             ("objects.npy", "numeric array"), ("short.npy", "numeric array"), ("missing.npy", "cannot read"),
             ("f64.npy", "astype('float32')"), ("wide.npy", "expected (N, 8)")]
    for name, needle in cases:
        cli_error(capsys, ["predict", str(model), "--input", str(tmp_path / name)], needle)
    cli_error(capsys, ["predict", str(model), "--input", str(full), "--key", "x"], "a .npy file")
    cli_error(capsys, ["predict", str(tmp_path / "none.so"), "--input", str(full)], "no file")
    cli_error(capsys, ["predict", str(tmp_path / "text.npy"), "--input", str(full)], "not a loadable module")


def test_output_cut_by_a_closed_pipe_exits_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "kiln.cli", "ops"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before kiln writes, as with `kiln ops | head -0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


def test_every_option_of_tune_show_predict_ops_has_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ("tune", "show", "predict", "ops"):
        missing = [a.option_strings or a.dest for a in sub.choices[name]._actions if not a.help]
        assert not missing, f"kiln {name}: {missing}"
