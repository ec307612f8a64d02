"""The search space of a task: the knobs its template declares.

The template is run once with its defaults to learn the knobs. Some knobs
constrain others (the matmul's ``tile_k`` must be a multiple of ``unroll_k``),
so a config is valid when the template accepts it: ``check`` lowers it (a few
milliseconds) and memoizes the answer together with the config's features.
Configs are canonical — every declared knob with its value — and two configs
whose scheduled programs are structurally equal (a knob with no effect under
the others' values: ``conv2d_backward_data``'s ``unroll_phase`` on a height the
stride does not divide, the weight gradient's column knobs under ``pixels``)
are one point of the space, the first one met: a tuner never measures the
same program twice.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np
import tvm_ffi

from ..errors import KilnError
from ..schedules import config_key
from ..schedules.config import Knob
from . import features


class Space:
    """The knobs of a task's template and the configs its template accepts; see the module docstring."""
    def __init__(self, task):
        self.task = task
        lowered = task.lower({})
        self.knobs = dict(sorted(lowered.cfg.space.items()))
        self.default = lowered.cfg.resolved()
        self._task_features = features.task_features(task)
        self._checked: dict[str, dict | None] = {}
        self._features: dict[str, dict] = {}
        self._programs: dict[int, dict] = {}  # structural hash of the scheduled program -> its canonical config
        self._remember(self.default, lowered)

    # -- the knobs ----------------------------------------------------------------
    def choices(self, name: str) -> list:
        knob = self.knobs[name]
        if isinstance(knob, Knob):
            return list(knob.options)
        return [t for t in itertools.product(knob.candidates(), repeat=knob.parts - 1)
                if knob.extent is None or math.prod(t) <= max(knob.extent, 1)]

    @property
    def size(self) -> int:
        """Points of the knob grid (some may be rejected by the template)."""
        return math.prod(len(self.choices(n)) for n in self.knobs)

    # -- validity -----------------------------------------------------------------
    def check(self, config: dict) -> dict | None:
        """The canonical form of ``config``, or None when the template rejects it."""
        key = config_key(config)
        if key not in self._checked:
            try:
                lowered = self.task.lower(config)
            except KilnError:
                self._checked[key] = None
            else:
                self._checked[key] = self._remember(config, lowered)
        found = self._checked[key]
        return dict(found) if found is not None else None

    def _remember(self, config: dict, lowered) -> dict:
        canonical = self._programs.setdefault(tvm_ffi.structural_hash(lowered.sch.mod), lowered.cfg.resolved())
        key = config_key(canonical)
        self._checked[config_key(config)] = self._checked[key] = canonical
        if key not in self._features:
            self._features[key] = {**features.config_features(self.knobs, canonical),
                                   **features.loop_features(lowered.sch.mod["main"]), **self._task_features}
        return canonical

    def features(self, config: dict) -> dict:
        """Named features of a valid config (see ``features.py``)."""
        canonical = self.check(config)
        if canonical is None:
            raise KeyError(f"config {config} is not valid for {self.task.name}")
        return self._features[config_key(canonical)]

    # -- moving around ------------------------------------------------------------
    def sample(self, rng: np.random.Generator, tries: int = 100) -> dict | None:
        """A random valid config (None if ``tries`` draws found none)."""
        for _ in range(tries):
            found = self.check(self.draw(rng))
            if found is not None:
                return found
        return None

    def step(self, config: dict, rng: np.random.Generator) -> dict:
        """``config`` with one knob moved one or two places along its (ordered)
        options; not checked against the template (cheap, for annealing)."""
        names = [n for n in self.knobs if len(self.choices(n)) > 1]
        if not names:
            return dict(config)
        name = names[int(rng.integers(len(names)))]
        options = self.choices(name)
        value = config.get(name, self.knobs[name].default)
        here = options.index(value) if value in options else 0
        there = min(max(here + int(rng.choice([-2, -1, 1, 2])), 0), len(options) - 1)
        return dict(config, **{name: options[there]})

    def neighbour(self, config: dict, rng: np.random.Generator, tries: int = 20) -> dict | None:
        """A valid config one ``step`` away from ``config``."""
        for _ in range(tries):
            found = self.check(self.step(config, rng))
            if found is not None and found != config:
                return found
        return None

    def grid(self) -> Iterator[dict]:
        """Every valid config, in a fixed order (the default first)."""
        yield dict(self.default)
        names, seen = list(self.knobs), {config_key(self.default)}
        for values in itertools.product(*(self.choices(n) for n in names)):
            found = self.check(dict(zip(names, values)))
            if found is not None and config_key(found) not in seen:
                seen.add(config_key(found))
                yield found

    def draw(self, rng: np.random.Generator) -> dict:
        """A uniform point of the knob grid; not checked against the template."""
        return {n: (opts := self.choices(n))[int(rng.integers(len(opts)))] for n in self.knobs}
