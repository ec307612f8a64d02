"""The tuning loop: propose, build, measure, record — one batch at a time.

Each batch is appended to the records file as soon as it is measured, so a
killed run loses at most the batch in flight. ``resume=True`` reads the
task's records back first: their configs count as trials done, feed the
tuner, and are never measured again. The template's default config is
measured first, so every run can say how much tuning gained.

Configs are compared by time (``records.score``: 1 / median seconds), for
the tuners, their cost model and early stopping alike; speeds are reported
in the task's unit (GFLOPS, or GB/s for memory-bound ops, whose GFLOPS is 0).

A batch of trials is timed in turns (``_timed``): where the host's speed
shifts, it shifts for the whole batch. Batches are timed at different
moments, though, so on a noisy machine the fastest trial can still be a
lucky timing. A run therefore ends by confirming (``confirm=True``): the
fastest configs whose trials beat the one measured first (``CONFIRM_TOP`` at
most) are built again with it and timed in turns, one repeat each
(``LocalRunner.compare``), and these records (``confirmed``) decide the
task's best (``records.best``): a config replaces the first only where it
was faster in two turns of three at least (``beats_first``), since a
median a few percent lower is within what the host's shifts make of two
equal kernels. Where no trial beat the first, nothing is re-timed: the
first stays the best, and a lucky timing of the first can only keep the
config a run started from.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import tvm

from ..errors import AttrError
from . import records as rec
from ..schedules import config_key
from .runners import Builder, LocalRunner
from .space import Space
from .task import Task
from .transfer import transfer_rows
from .tuners import TUNERS


CONFIRM_TOP = 3     # the fastest configs re-timed at the end of a run (those that beat the first, with it)
CONFIRM_ROUNDS = 3  # that re-timing's repeats per config, in the runner's repeats (3 x 5: 15 turns)
CONFIRM_WINS = 2 / 3  # the share of those turns a config must be faster in than the first to replace it


@dataclass
class Progress:
    task: Task
    trials: int
    done: int = 0
    resumed: int = 0         # trials read back from the records, not measured by this run
    errors: int = 0
    best_s: float = float("inf")     # median seconds of the fastest config so far
    default_s: float = float("inf")  # of the config measured first (the template's default, or the start)
    started: float = field(default_factory=time.monotonic)

    @property
    def best_rate(self) -> float:
        """The best config's speed in ``task.unit`` (0 before one succeeded)."""
        return self.task.rate(self.best_s) if self.best_s < float("inf") else 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        """Seconds left at this run's pace (None before the first batch)."""
        here = self.done - self.resumed
        return self.elapsed / here * (self.trials - self.done) if here > 0 else None


@dataclass
class TuneResult:
    task: Task
    records_path: Path
    records: list            # this task's records: resumed ones first, then this run's
    measured: int            # measured in this run
    elapsed_s: float
    tuner: str
    default_config: dict     # measured first: the template's default, or the start it was given
    stopped: str | None = None  # why fewer trials ran than asked: "space" (all its configs measured), "early_stopping"
    configs: int = 0         # distinct configs measured, resumed ones included: all of the space's where "space"

    @property
    def best(self) -> dict | None:
        return rec.best(self.records)

    @property
    def default(self) -> dict | None:
        """The first config's record: its confirmation, timed beside the best, when there is one."""
        return rec.baseline(self.records, self.default_config)

    @property
    def errors(self) -> list:
        return [r for r in self.records if r.get("error")]

    @property
    def trials(self) -> list:
        """The records of trials, in measurement order (the confirmation's left out)."""
        return [r for r in self.records if not rec.is_confirmed(r)]


def tune(task: Task, trials: int = 64, tuner: str = "xgb", records: str | os.PathLike | None = None,
         resume: bool = False, runner=None, builder=None, batch_size: int = 8, early_stopping: int | None = None,
         seed: int = 0, transfer: bool = True, callback: Callable[[Progress], None] | None = None,
         new_trials: int | None = None, start: dict | None = None, confirm: bool = True,
         **tuner_options) -> TuneResult:
    """Tune ``task`` for ``trials`` measurements; returns the records and the best.

    Parameters
    ----------
    tuner : {"xgb", "random", "grid"}
    records : str or PathLike, optional
        The JSON Lines records file (default: kiln's, which ``kiln.build``
        reads).
    resume : bool
        Continue from this task's records instead of starting over.
    runner : LocalRunner or RPCRunner, optional
        ``LocalRunner()`` (default) or ``RPCRunner(host, port, key)``; its
        ``check()`` runs first (an unreachable RPC tracker fails in seconds).
    early_stopping : int, optional
        Stop after this many trials without a faster config.
    transfer : bool
        Seed the xgb model with records of other shapes of the same op.
    new_trials : int, optional
        Measure at most this many in this run, on top of the resumed ones
        (then ``trials`` bounds the total only).
    start : dict, optional
        The config measured first, instead of the template's default (the
        one a model runs untuned: what tuning is measured against).
    confirm : bool
        End a run that measured something by re-timing the fastest configs
        and the first, interleaved (see the module docstring).
    """
    if tuner not in TUNERS:
        raise AttrError(f"got {tuner!r}, expected one of {sorted(TUNERS)}", where="tune", arg="tuner")
    if trials < 1 or batch_size < 1:
        raise AttrError(f"got trials={trials}, batch_size={batch_size}, expected positive numbers", where="tune",
                        arg="trials")
    if new_trials is not None and new_trials < 1:
        raise AttrError(f"got new_trials={new_trials}, expected a positive number or None", where="tune",
                        arg="new_trials")
    if early_stopping is not None and early_stopping < 1:
        raise AttrError(f"got early_stopping={early_stopping}, expected a positive number of trials or None",
                        where="tune", arg="early_stopping")
    path = rec.path_of(records)
    rec.prepare(path)
    if runner is not None and hasattr(runner, "check"):
        runner.check()
    space = Space(task)
    first = (space.check(start) if start else None) or dict(space.default)
    options = dict(tuner_options)
    if tuner == "xgb" and transfer:
        options["transfer"] = transfer_rows(task, path)
    search = TUNERS[tuner](space, seed=seed, **options)
    prior = rec.load(path, task.key) if resume else []
    _replay(search, space, task, prior)
    run_id = next((r["run"] for r in reversed(prior) if r.get("tuner") == tuner and r.get("run")), None) or \
        f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{tuner}-{seed}"

    if new_trials is not None:
        trials = min(trials, len(search.visited) + new_trials)
    progress = Progress(task, trials, done=len(search.visited), resumed=len(search.visited))
    # the fastest trial: a confirmation's re-timing is not a trial (nor in the plot's curves)
    progress.best_s = min((r["result"]["median_s"] for r in prior if rec.is_ok(r) and not rec.is_confirmed(r)),
                          default=float("inf"))
    session, since_best, stopped = [], 0, None
    with _workers(task, runner, builder, "kiln-tune-") as (runner, builder, folder, data):
        while progress.done < trials:
            n = min(batch_size, trials - progress.done)
            batch = _with_first(search, first, n) if progress.done == 0 else \
                search.next_batch(n) or search.leftovers(n)
            if not batch:
                stopped = "space"
                break
            batch_records = _measure(task, space, batch, builder, runner, folder, data,
                                     {"tuner": tuner, "run": run_id, "seed": seed}, first_trial=progress.done)
            rec.append(path, batch_records)  # flushed before the next batch starts
            session += batch_records
            scores = [rec.score(r) for r in batch_records]
            search.update(batch, scores)
            progress.done += len(batch)
            progress.errors += sum(1 for r in batch_records if r["error"])
            times = [r["result"]["median_s"] for r in batch_records if rec.is_ok(r)]
            if times and min(times) < progress.best_s:
                progress.best_s, since_best = min(times), 0
            else:
                since_best += len(batch)
            if batch[0] == first and progress.default_s == float("inf") and rec.is_ok(batch_records[0]):
                progress.default_s = batch_records[0]["result"]["median_s"]
            if callback:
                callback(progress)
            if early_stopping and since_best >= early_stopping and progress.done < trials:
                stopped = "early_stopping"
                break
        if confirm and session:
            confirmed = _confirm(task, prior + session, first, builder, runner, folder, data,
                                 {"tuner": tuner, "run": run_id, "seed": seed})
            rec.append(path, confirmed)
            session += confirmed
    measured = sum(1 for r in session if not rec.is_confirmed(r))
    return TuneResult(task, path, prior + session, measured, progress.elapsed, tuner, first, stopped,
                      len(search.visited))


def confirm(task: Task, records: str | os.PathLike | None = None, first: dict | None = None, runner=None,
            builder=None, **about) -> list[dict]:
    """Confirm ``task``'s records as a ``tune`` run ends (the fastest
    trials that beat ``first``, default the template's default, at most
    ``CONFIRM_TOP``, and ``first`` timed again interleaved; nothing when
    none beat it), append the confirmed records to ``records`` and return
    them: what a model's tuning does for each task it measured, whose
    rounds are ``tune(confirm=False)`` calls."""
    path = rec.path_of(records)
    space = Space(task)
    first = (space.check(first) if first else None) or dict(space.default)
    with _workers(task, runner, builder, "kiln-confirm-") as (runner, builder, folder, data):
        confirmed = _confirm(task, rec.load(path, task.key), first, builder, runner, folder, data, about)
    rec.append(path, confirmed)
    return confirmed


@contextlib.contextmanager
def _workers(task, runner, builder, prefix: str):
    """``(runner, builder, folder, data)``: the given runner and builder, or
    new ones closed on leaving, and a temporary folder (removed on leaving)
    holding the task's inputs and expected outputs (``data``)."""
    own_runner, own_builder = runner is None, builder is None
    runner, builder = runner or LocalRunner(), builder or Builder()
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield runner, builder, folder, _write_data(task, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if own_runner:
            runner.close()
        if own_builder:
            builder.close()


def _confirm(task, records, first, builder, runner, folder, data, about) -> list[dict]:
    """Records of the configs of ``records`` whose trials beat ``first``'s
    (the ``CONFIRM_TOP`` fastest; all the fastest when ``first`` has no
    successful trial) and of ``first``, timed again in turns
    (``runner.compare``: ``CONFIRM_ROUNDS`` x the runner's repeats, one
    repeat each), each from all its timings; none when fewer than two
    configs are chosen (no trial beat ``first``: it stays the best)."""
    ok = sorted((r for r in records if rec.is_ok(r) and not rec.is_confirmed(r)),
                key=lambda r: r["result"]["median_s"])
    first_key, chosen = config_key(first), {}
    for r in ok:  # fastest first: the configs before first's fastest trial are those that beat it
        key = config_key(r["config"])
        if key == first_key:
            chosen[key] = r["config"]
            break
        if key not in chosen and len(chosen) < CONFIRM_TOP:
            chosen[key] = r["config"]
    if len(chosen) < 2:
        return []
    built = builder.build(task.target, [tvm.ir.save_json(task.lower(c).sch.mod) for c in chosen.values()], folder)
    ready = [(key, b["library"]) for key, b in zip(chosen, built) if b.get("ok")]
    costs: dict[str, list] = {key: [] for key, _ in ready}
    try:
        together = runner.compare([lib for _, lib in ready], data, task.target.kind,
                                  CONFIRM_ROUNDS * runner.timing["repeat"]) if ready and hasattr(runner, "compare") \
            else {}
        if together.get("ok"):
            costs = {key: times for (key, _), times in zip(ready, together["costs"])}
        else:  # one of them failed in the worker: each alone, in rotated rounds, so the others still count
            for turn in range(CONFIRM_ROUNDS if ready else 0):
                order = ready[turn % len(ready):] + ready[:turn % len(ready)]
                for (key, _), reply in zip(order, runner.run([lib for _, lib in order], data, task.target.kind)):
                    if reply.get("ok"):
                        costs[key] += reply["costs"]
    finally:
        for _, lib in ready:
            os.unlink(lib)
    return [rec.make_record(task.json, chosen[key], result=_result(task, times), confirmed=True, trial=None,
                            runner=runner.describe(), **_against(times, costs.get(first_key), key == first_key),
                            **about)
            for key, times in costs.items() if times]


def _against(times: list, first: list | None, is_first: bool) -> dict:
    """``{"beats_first": bool}`` for a config re-timed beside the first:
    whether it was faster in at least ``CONFIRM_WINS`` of the turns they
    shared (each turn times both at one moment); nothing for the first, or
    where the first has no timings."""
    if is_first or not first:
        return {}
    turns = list(zip(times, first))
    return {"beats_first": sum(a < b for a, b in turns) >= CONFIRM_WINS * len(turns)}


def _replay(search, space, task, prior) -> None:
    configs, scores = [], []
    for r in prior:
        c = space.check(r["config"])
        if c is not None and config_key(c) not in search.visited:
            configs.append(c)
            scores.append(rec.score(r))
    search.update(configs, scores)


def _with_first(search, config: dict, n):
    """The first batch starts with ``config`` (the template's default, or the given start)."""
    first = [] if config_key(config) in search.visited else [dict(config)]
    search.visited.update(config_key(c) for c in first)
    rest = search.next_batch(n - len(first)) if n > len(first) else []
    search.visited.difference_update(config_key(c) for c in first)
    return first + rest


def _timed(runner, libraries: list[str], data: str, device: str) -> list[dict]:
    """A reply per library: a batch timed in turns (``runner.compare``, each
    library its runner's repeats, one at a time) where the runner can, so a
    shift in the host's speed falls on the whole batch; each alone where a
    library failed in the comparison (a crash, a hang or a wrong result
    fails it for all: alone, each gets its own verdict)."""
    if len(libraries) > 1 and getattr(runner, "in_turns", False):
        together = runner.compare(libraries, data, device, runner.timing["repeat"])
        if together.get("ok"):
            share = together["measure_s"] / len(libraries)
            return [{"ok": True, "costs": costs, "measure_s": share, "device": together["device"]}
                    for costs in together["costs"]]
    return runner.run(libraries, data, device)


def _write_data(task: Task, folder: str) -> str:
    inputs, outputs = task.data()
    path = os.path.join(folder, "data.npz")
    arrays = {f"in{i}": a for i, a in enumerate(inputs)} | {f"out{i}": o for i, o in enumerate(outputs)}
    np.savez(path, n_in=len(inputs), n_out=len(outputs), **arrays)
    return path


def _measure(task, space, batch, builder, runner, folder, data, about, first_trial) -> list[dict]:
    modules = [tvm.ir.save_json(task.lower(c).sch.mod) for c in batch]
    built = builder.build(task.target, modules, folder)
    ran = iter(_timed(runner, [b["library"] for b in built if b.get("ok")], data, task.target.kind))
    out = []
    for i, (config, b) in enumerate(zip(batch, built)):
        info = {**about, "trial": first_trial + i, "runner": runner.describe(),
                "build_s": round(b.get("build_s", 0.0), 4)}
        if not b.get("ok"):
            out.append(rec.make_record(task.json, config, error=_error(b), **info))
            continue
        r = next(ran)
        os.unlink(b["library"])
        if not r.get("ok"):
            out.append(rec.make_record(task.json, config, error=_error(r), **info))
            continue
        out.append(rec.make_record(task.json, config, result=_result(task, r["costs"]),
                                   measure_s=round(r.get("measure_s", 0.0), 4), device=r.get("device"), **info))
    return out


def _result(task, costs) -> dict:
    """A record's result from the seconds of its timed repeats."""
    costs = np.asarray(costs, dtype=float)
    median = float(np.median(costs))
    return {"costs": costs.tolist(), "median_s": median, "min_s": float(costs.min()), "max_s": float(costs.max()),
            "gflops": task.flops / median / 1e9 if median > 0 else 0.0,
            "gbps": task.bytes / median / 1e9 if median > 0 else 0.0}


def _error(reply: dict) -> dict:
    return {"kind": reply.get("kind", "error"), "message": reply.get("message", "")}
