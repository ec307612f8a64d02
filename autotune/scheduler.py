"""Sharing one tuning budget among a model's tasks, where it shortens the model most.

The model's time is estimated as ``sum(calls * best seconds)`` over its tasks
(``extract``). Every task first gets one round (its default config and a few
more: ``round_trials``), the tasks whose estimated share is largest first.
Then each round goes to the task with the largest expected gain per trial,
as Ansor's gradient-based task scheduler does: ``calls`` times a mix of the
task's recent improvement per trial (backward: what its last rounds gained)
and an optimistic ``best / trials`` (forward: tasks tuned little are likely
to gain more). A task stops after ``patience`` trials without a faster
config, or when its space runs out.

A run ends by confirming each task it measured whose trials beat its
baseline (``tune.confirm``: those fastest configs and the baseline timed
again, interleaved), the tasks with the largest estimated share first,
while the time budget allows: a round's single timings can be lucky ones,
and the confirmed records are what ``records.best`` (so export and
training) and the estimates go by. A task whose baseline stayed its
fastest keeps it, and costs no confirmation.

Every round is a ``tune`` call with ``resume=True`` on one records file, so
the records are the whole state: what a run finds there is built on, never
measured again, and a run killed at any point resumes from them
(``resume=True`` also counts them among its trials), and each round's xgb model starts
from its task's records and those of the other tasks of the same op
(``transfer``: shapes teach each other). A trial budget counts the records
a resumed run finds; a time budget (seconds) counts this run, which ends
when the next round is not expected to fit in what is left of it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import AttrError
from ..schedules.config import config_key
from . import records as rec
from .extract import ModelTask

@dataclass
class TaskState:
    """One task's tuning so far: ``trials`` records, ``best_s`` (median
    seconds of its fastest config), ``default_s`` (its baseline's: the
    config the model runs untuned, measured first),
    ``history`` of ``(trials, best_s)`` after each round."""

    model_task: ModelTask
    trials: int = 0
    best_s: float = math.inf
    default_s: float = math.inf
    since_best: int = 0
    stopped: str = ""         # why it gets no more rounds ("" while it may)
    round_s: float = 0.0      # wall seconds of its last round
    round_n: int = 0          # trials its last round measured
    measured_now: int = 0     # trials this run measured
    confirmed: bool = False   # its best re-timed at the end of this run
    history: list = field(default_factory=list)
    best_config: dict | None = None     # the config of ``best_s``
    default_config: dict | None = None  # the config of ``default_s``

    @property
    def improved(self) -> bool:
        """Whether its best config is another than its baseline (the model tuned runs another kernel)."""
        return self.best_config is not None and config_key(self.best_config) != config_key(self.default_config or {})

    @property
    def calls(self) -> int:
        return self.model_task.calls


@dataclass
class Schedule:
    """Where a model's tuning stands (what the callback sees and ``run`` returns)."""

    states: list
    trials: int = 0           # records of the model's tasks (resumed included)
    measured: int = 0         # measured by this run
    rounds: int = 0
    current: TaskState | None = None
    started: float = field(default_factory=time.monotonic)
    budget_s: float | None = None
    trial_budget: int | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def estimate_s(self, default: bool = False) -> float:
        """The model's estimated seconds: calls x best (or default) time, over the tasks measured."""
        times = [(s.calls, s.default_s if default else s.best_s) for s in self.states]
        return sum(c * t for c, t in times if t < math.inf)

    @property
    def measured_all(self) -> bool:
        return all(s.best_s < math.inf or s.stopped for s in self.states)

    @property
    def unreached(self) -> list:
        """The tasks no round reached (the budget ended first): they run untuned."""
        return [s for s in self.states if not s.history and not s.stopped]


class TaskScheduler:
    """Tune ``tasks`` (``extract``'s ``ModelTask`` list) under one budget; see the module docstring.

    ``tune_round(model_task, n)`` measures up to ``n`` more configs of a
    ``ModelTask`` (its baseline config first) and returns all of its records (default: ``tune`` with ``resume=True``
    on ``records``, sharing ``runner`` and ``builder`` among rounds); tests
    give a fake one. ``confirm_round(model_task)`` confirms a task's records
    and returns them all (default ``tune.confirm`` with the real
    ``tune_round``, none with a fake one, which has no kernels to re-time).
    """

    def __init__(self, tasks: list, records=None, tuner: str = "xgb", round_trials: int = 8, patience: int = 32,
                 seed: int = 0, runner=None, builder=None, alpha: float = 0.2,
                 tune_round: Callable | None = None, confirm_round: Callable | None = None):
        if not tasks:
            raise AttrError("got no tasks, expected the tasks of a model (kiln.autotune.extract)",
                            where="TaskScheduler", arg="tasks")
        if round_trials < 1 or patience < 1:
            raise AttrError(f"got round_trials={round_trials}, patience={patience}, expected positive numbers",
                            where="TaskScheduler", arg="round_trials")
        self.tasks, self.tuner, self.seed = list(tasks), tuner, seed
        self.records = rec.path_of(records)
        self.round_trials, self.patience, self.alpha = round_trials, patience, alpha
        self.runner, self.builder = runner, builder
        self.tune_round = tune_round or self._tune_round
        self.confirm_round = confirm_round or (self._confirm_round if tune_round is None else None)

    def run(self, trials: int | None = None, budget_s: float | None = None, resume: bool = False,
            callback: Callable[[Schedule], None] | None = None) -> Schedule:
        """Tune until ``trials`` trials are done or ``budget_s`` seconds have
        passed, whichever is first (at least one of them). Records the file
        already holds for the tasks are built on, never measured again;
        ``resume`` (continuing a killed run) counts them among the trials."""
        if trials is None and budget_s is None:
            raise AttrError("got neither a trial count nor a time budget, expected one", where="TaskScheduler.run",
                            arg="trials")
        if (trials is not None and trials < 1) or (budget_s is not None and budget_s <= 0):
            raise AttrError(f"got trials={trials}, budget_s={budget_s}, expected positive numbers",
                            where="TaskScheduler.run", arg="trials")
        rec.prepare(self.records)  # an unwritable records file is said before the first round
        plan = Schedule([TaskState(t) for t in self.tasks], budget_s=budget_s, trial_budget=trials)
        for state in plan.states:  # a task's records are never measured again; with resume they count
            self._absorb(state, rec.load(self.records, state.model_task.task.key), measured=0, seconds=0.0)
        plan.trials = sum(s.trials for s in plan.states) if resume else 0
        while True:
            state = self._pick(plan)
            if state is None:
                break
            n = self._round_size(plan, state)
            if n < 1:
                break
            plan.current = state
            start, before = time.monotonic(), state.trials
            found = self.tune_round(state.model_task, n)
            self._absorb(state, found, measured=n, seconds=time.monotonic() - start)
            plan.measured += state.trials - before
            plan.trials += state.trials - before
            plan.rounds += 1
            if callback:
                callback(plan)
        self._confirm(plan)
        plan.current = None
        return plan

    def _confirm(self, plan: Schedule) -> None:
        """Confirm the tasks this run measured whose best is not their
        baseline, largest share first, each while the time left covers it
        (the last confirmation's seconds, or the task's last round's)."""
        if self.confirm_round is None:
            return
        took = 0.0
        for state in sorted((s for s in plan.states if s.measured_now and s.best_s < math.inf and s.improved),
                            key=lambda s: -s.calls * s.best_s):
            if plan.budget_s is not None and plan.elapsed + (took or state.round_s) > plan.budget_s:
                break
            start = time.monotonic()
            found = self.confirm_round(state.model_task)
            took = time.monotonic() - start
            best = rec.best(found)
            state.best_s, state.best_config = best["result"]["median_s"], best["config"]
            first = next(r for r in found if rec.is_ok(r) and not rec.is_confirmed(r))  # as ``_absorb`` takes it
            state.default_s = rec.baseline(found, first["config"])["result"]["median_s"]
            state.default_config = first["config"]
            state.confirmed = True

    # -- choosing ------------------------------------------------------------------------
    def _pick(self, plan: Schedule) -> TaskState | None:
        """Untried tasks first (largest weight first), then the largest expected gain per trial."""
        open_ = [s for s in plan.states if not s.stopped]
        if not open_:
            return None
        untried = [s for s in open_ if not s.history]
        if untried:
            return max(untried, key=lambda s: s.calls * _weight(s.model_task.task))
        return max(open_, key=self.gain)

    def gain(self, state: TaskState) -> float:
        """Expected decrease of the model's time per trial spent on ``state``."""
        if state.best_s == math.inf:
            return 0.0
        past = state.history[-4] if len(state.history) >= 4 else (0, state.default_s)
        span = max(state.trials - past[0], 1)
        backward = max(0.0, (past[1] - state.best_s) / span) if past[1] < math.inf else 0.0
        forward = state.best_s / max(state.trials, 1)
        return state.calls * (self.alpha * backward + (1 - self.alpha) * forward)

    def _round_size(self, plan: Schedule, state: TaskState) -> int:
        """The next round's trials: ``round_trials`` within the trial budget.
        Under a time budget, a task's first round while others still wait
        for theirs takes no more than its share of the time left (at least
        its baseline), so the budget reaches every task; and a round gets no
        trials when the time left is less than it is expected to take (at
        its task's last seconds per trial, else the mean of the others') and
        the confirmations after it, so a run ends before its budget rather
        than after it."""
        n = self.round_trials
        if plan.trial_budget is not None:
            n = min(n, plan.trial_budget - plan.trials)
        if plan.budget_s is not None and n > 0:
            per_trial = _seconds_per_trial(plan, state)
            if not state.history:  # a first round: its share of the time left, else what fits
                untried = len(plan.unreached)
                left = plan.budget_s - plan.elapsed - self._confirm_reserve(plan, state, 0.0)
                if per_trial:
                    n = min(n, int(left / untried / per_trial) or int(left / per_trial))
                elif untried > 1:  # before any round: a share of the trials
                    n = max(1, n // untried)
            expected = n * per_trial
            if plan.elapsed + expected + self._confirm_reserve(plan, state, expected) > plan.budget_s:
                n = 0
        return n

    def _confirm_reserve(self, plan: Schedule, state: TaskState, expected: float) -> float:
        """Seconds kept for the confirmations that end the run: one round's
        worth per task measured whose best is not its baseline (a
        confirmation builds half a round's configs and times them three
        times), and ``state``'s (its round may find one)."""
        if self.confirm_round is None:
            return 0.0
        return sum(s.round_s for s in plan.states if s.measured_now and s.improved and s is not state) + expected

    # -- bookkeeping ---------------------------------------------------------------------
    def _absorb(self, state: TaskState, found: list, measured: int, seconds: float) -> None:
        """Update ``state`` from all of its task's records after a round of ``measured`` trials."""
        found = [r for r in found if not rec.is_confirmed(r)]  # trials only (a confirmation is no trial)
        ok = [r for r in found if rec.is_ok(r)]
        fastest = min(ok, key=lambda r: r["result"]["median_s"], default=None)
        best = fastest["result"]["median_s"] if fastest else math.inf
        new = len(found) - state.trials
        if state.default_s == math.inf and ok:
            state.default_s = ok[0]["result"]["median_s"]  # a task's first record is its baseline
            state.default_config = ok[0]["config"]
        state.since_best = 0 if best < state.best_s else state.since_best + max(new, 0)
        if best < state.best_s:
            state.best_s, state.best_config = best, fastest["config"]
        state.trials = len(found)
        if measured:
            state.measured_now += new
            state.round_s, state.round_n = seconds, max(new, 1)
            state.history.append((state.trials, state.best_s))
            if new < measured:
                state.stopped = "space exhausted"
        if state.since_best >= self.patience:
            state.stopped = f"no faster config in {state.since_best} trials"

    def _tune_round(self, task: ModelTask, n: int) -> list:
        from .tune import tune

        result = tune(task.task, trials=10 ** 9, new_trials=n, start=task.baseline, tuner=self.tuner, records=self.records, resume=True,
                      runner=self.runner, builder=self.builder, batch_size=n, seed=self.seed,
                      confirm=False)  # a round of a model's budget: its trials only
        return result.records

    def _confirm_round(self, task: ModelTask) -> list:
        from .tune import confirm

        confirm(task.task, self.records, first=task.baseline, runner=self.runner, builder=self.builder,
                tuner=self.tuner, seed=self.seed)
        return rec.load(self.records, task.task.key)


def _seconds_per_trial(plan: Schedule, state: TaskState) -> float:
    """Seconds a trial of ``state`` is expected to take: its last round's,
    else the mean of the other tasks' rounds (0 before any round)."""
    if state.round_n:
        return state.round_s / state.round_n
    rounds = [(s.round_s, s.round_n) for s in plan.states if s.round_n]
    return sum(t for t, _ in rounds) / sum(n for _, n in rounds) if rounds else 0.0


def _weight(task) -> float:
    """A rough guess of a task's seconds before it is measured: its
    multiply-adds at 100 GFLOPS or its bytes at 20 GB/s, whichever is more."""
    return max(task.flops / 100e9, task.bytes / 20e9)
