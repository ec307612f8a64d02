"""The tuner survives its failures: crashing and hanging kernels, a SIGKILLed
tuning process, and an RPC server dying mid-run."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from kiln.autotune import LocalRunner, RPCRunner, Task, tune
from kiln.autotune import records
from kiln.schedules import config_key, dispatch


# -- a template whose "fault" knob swaps the inner loop for abort() or pause() ----
def _intrin(call: str):
    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((4,), "float32", offset_factor=1), B: T.Buffer((4,), "float32", offset_factor=1)):
        with T.sblock("root"):
            T.reads(A[0:4])
            T.writes(B[0:4])
            for i in T.serial(0, 4):
                with T.sblock("update"):
                    vi = T.axis.remap("S", [i])
                    B[vi] = A[vi] * T.float32(-1.0)

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((4,), "float32", offset_factor=1), B: T.Buffer((4,), "float32", offset_factor=1)):
        with T.sblock("root"):
            T.reads(A[0:4])
            T.writes(B[0:4])
            T.evaluate(T.call_extern("int32", call))

    name = f"kiln_test_{call}4"
    TensorIntrin.register(name, desc, impl, override=True)
    return name


FAULTS = {"abort": _intrin("abort"), "pause": _intrin("pause")}  # abort kills, pause hangs


def faulty_negate(sch, block, cfg):
    fault = cfg.define_knob("fault", ("none", "abort", "pause"), default="none")
    tile = cfg.define_knob("tile", (4, 8), default=4)
    (loop,) = sch.get_loops(block)
    _, inner = sch.split(loop, [None, tile])
    if fault != "none":
        _, inner = sch.split(inner, [None, 4])
        sch.tensorize(inner, FAULTS[fault])


def test_crashing_and_hanging_configs_are_recorded_and_the_search_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(dispatch._BY_OP, ("negate", "cpu"), faulty_negate)
    task = Task.create("negate", [(64,)])
    path = tmp_path / "records.jsonl"
    runner = LocalRunner(repeat=2, min_repeat_ms=1, timeout=4)
    result = tune(task, trials=6, tuner="grid", records=path, runner=runner, batch_size=3)
    by_fault = {}
    for r in records.load(path):
        by_fault.setdefault(r["config"]["fault"], []).append(r)
    assert len(result.trials) == 6
    trials = [r for r in by_fault["none"] if not records.is_confirmed(r)]
    assert all(records.is_ok(r) for r in by_fault["none"]) and len(trials) == 2
    default, other = sorted(trials, key=lambda r: r["config"]["tile"])  # the default tiles by 4
    beaten = other["result"]["median_s"] < default["result"]["median_s"]  # then both are re-timed
    assert len(by_fault["none"]) == 2 + (2 if beaten else 0)
    assert [r["error"]["kind"] for r in by_fault["abort"]] == ["crash", "crash"]
    assert "SIGABRT" in by_fault["abort"][0]["error"]["message"]
    assert [r["error"]["kind"] for r in by_fault["pause"]] == ["timeout", "timeout"]
    assert result.best["config"]["fault"] == "none"


def test_miscompiled_config_is_caught_by_the_reference_check(tmp_path, monkeypatch):
    def wrong(sch, block, cfg):
        (loop,) = sch.get_loops(block)
        if cfg.define_knob("parallel", (1, 0), default=1):  # two programs, both "wrong" against the reference
            sch.parallel(loop)

    monkeypatch.setitem(dispatch._BY_OP, ("negate", "cpu"), wrong)
    task = Task.create("negate", [(64,)])
    inputs, expected = task.data()
    monkeypatch.setattr(Task, "data", lambda self: (inputs, [-e for e in expected]))  # a "reference" that disagrees
    result = tune(task, trials=2, tuner="grid", records=tmp_path / "r.jsonl",
                  runner=LocalRunner(repeat=2, min_repeat_ms=1))
    assert [r["error"]["kind"] for r in result.records] == ["wrong_result", "wrong_result"]
    assert "numpy reference" in result.records[0]["error"]["message"]


def _record_lines(path):
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0


def test_sigkilled_run_resumes_without_measuring_a_config_twice(tmp_path):
    path = tmp_path / "records.jsonl"
    cmd = [sys.executable, "-m", "kiln.cli", "tune", "matmul", "--shape", "40x48x56", "--trials", "12", "--batch", "4",
           "--tuner", "random", "--records", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while _record_lines(path) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _record_lines(path)
    assert 4 <= killed_at < 12, "the run should have been killed mid-way"
    out = subprocess.run(cmd + ["--resume", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    recs = [r for r in records.load(path) if not records.is_confirmed(r)]
    keys = [config_key(r["config"]) for r in recs]
    assert len(recs) == 12 and len(set(keys)) == 12
    assert summary["trials"] == 12 and summary["measured_now"] == 12 - killed_at
    assert sorted(r["trial"] for r in recs) == list(range(12))


# -- RPC: a tracker and two servers on 127.0.0.1 --------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: a ``torch`` that cannot be imported, first on the RPC processes' path: TVM imports PyTorch when it can,
#: 2-3 s in the tracker, each server and every session's worker process, which these tests never use
NO_TORCH = Path(tempfile.mkdtemp(prefix="kiln-no-torch-"))
(NO_TORCH / "torch.py").write_text('raise ImportError("PyTorch is left out of the tests\' RPC processes")\n')


def _spawn(args):
    path = os.pathsep.join(filter(None, [str(NO_TORCH), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": path})


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _age(pid: int) -> float | None:
    """Seconds since process ``pid`` started, to a clock tick (psutil's start times are whole-second coarse)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _uploaded(pid: int) -> bool:
    """Whether an RPC session's work folder (its current directory) holds an uploaded file."""
    try:
        return bool(os.listdir(f"/proc/{pid}/cwd"))
    except OSError:
        return False


@pytest.fixture
def rpc_cluster():
    port = _free_port()
    tracker = _spawn(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end",
                      str(port + 1), "--silent"])
    servers = []
    try:
        deadline = time.monotonic() + 60
        while True:  # wait for the tracker
            try:
                client = tvm.rpc.connect_tracker("127.0.0.1", port)
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert time.monotonic() < deadline, "the RPC tracker did not start"
                time.sleep(0.2)
        for _ in range(2):
            sport = _free_port()
            servers.append(_spawn(["tvm.exec.rpc_server", "--host", "127.0.0.1", "--port", str(sport),
                                   "--port-end", str(sport + 1), "--tracker", f"127.0.0.1:{port}",
                                   "--key", "kiln-test", "--silent"]))
        while client.summary()["queue_info"].get("kiln-test", {}).get("free", 0) < 2:
            assert time.monotonic() < deadline, "the RPC servers did not register"
            time.sleep(0.2)
        yield port, servers, tracker
    finally:
        for p in servers + [tracker]:
            _kill(p)


def test_rpc_tuning_through_a_tracker_survives_a_server_dying(tmp_path, rpc_cluster):
    port, servers, _ = rpc_cluster
    task = Task.create("matmul", [(40, 48), (48, 56)])
    # each session measures for 3 x 250 ms or more: a session younger than that has not sent its result
    runner = RPCRunner("127.0.0.1", port, "kiln-test", n_parallel=2, repeat=3, min_repeat_ms=250, timeout=60)
    victim = psutil.Process(servers[0].pid)
    killed = threading.Event()
    done = [0]

    def measuring() -> bool:
        """Whether a session holds its uploaded library and opened under 0.6 s ago: past the tracker's request
        (a connection lost before it is retried on another server), and still in its 3 x 250 ms of timing."""
        try:
            kids = [kid.pid for kid in victim.children(recursive=True) if kid.pid not in helpers]
        except psutil.NoSuchProcess:  # a session ended while psutil listed it: look again
            return False
        return any(_uploaded(pid) and (_age(pid) or 1.0) < 0.6 for pid in kids)

    helpers = {kid.pid for kid in victim.children(recursive=True)}  # the idle server's own, before any session

    def kill_during_a_session(progress):
        done[0] = progress.done
        if progress.done < 4 or killed.is_set():
            return

        def watch():  # a session runs in a child of the server: kill the server while one is measuring
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and done[0] < 12:  # leave a batch to run after the kill
                if measuring():
                    _kill(servers[0])
                    killed.set()
                    return
                time.sleep(0.01)

        threading.Thread(target=watch, daemon=True).start()

    result = tune(task, trials=16, tuner="random", records=tmp_path / "r.jsonl", runner=runner, batch_size=4,
                  callback=kill_during_a_session)
    runner.close()
    assert killed.is_set(), "no measurement reached the server to be killed"
    recs = result.trials
    assert len(recs) == 16 and len({config_key(r["config"]) for r in recs}) == 16
    errors = [r for r in recs if r["error"]]
    assert errors and all(e["error"]["kind"] in ("rpc", "crash", "timeout") for e in errors)
    ok = [r for r in recs if records.is_ok(r)]
    assert all(r["device"] == "rpc:kiln-test" for r in ok)
    assert any(r["trial"] > max(e["trial"] for e in errors) for r in ok), "the run should go on on the other server"


def test_rpc_key_without_devices_is_refused_and_a_lost_tracker_is_recorded_as_rpc(tmp_path, rpc_cluster):
    from kiln.errors import KilnError

    port, _, tracker = rpc_cluster
    with pytest.raises(KilnError, match="no device registered under key 'board'.*'kiln-test'"):
        RPCRunner("127.0.0.1", port, "board").check()
    task = Task.create("relu", [(256,)])
    runner = RPCRunner("127.0.0.1", port, "kiln-test", repeat=2, min_repeat_ms=1, timeout=60)

    def lose_the_tracker(progress):
        if progress.done == 2:
            _kill(tracker)

    start = time.monotonic()
    result = tune(task, trials=6, tuner="random", records=tmp_path / "r.jsonl", runner=runner, batch_size=2,
                  callback=lose_the_tracker)
    runner.close()
    kinds = [r["error"]["kind"] if r["error"] else "ok" for r in result.records]
    assert kinds == ["ok", "ok", "rpc", "rpc", "rpc", "rpc"], [r["error"] for r in result.records]
    assert "no TVM RPC tracker answers" in result.records[-1]["error"]["message"]
    assert time.monotonic() - start < 60, "an unreachable device should not cost a timeout per trial"
