"""Tuners: which configs to measure next.

A tuner proposes batches of configs it has not seen (``next_batch``) and is
told what they scored (``update``: speed, 1 / median seconds — ``records.score``
— so memory-bound ops, which count no FLOPs, are ranked too; 0 for a failed
config).

``RandomTuner``  uniform draws over the valid configs.
``GridTuner``    every valid config in a fixed order, the default first.
``XGBTuner``     an XGBoost cost model (see ``cost_model.py``) picks each batch:
                 simulated annealing over the knobs finds configs the model
                 ranks high, the model re-ranks them with their loop-nest
                 features, and a fraction ``epsilon`` of every batch is random
                 (exploration). Until ``min_train`` configs are measured it
                 draws at random. Records of other shapes of the same op seed
                 the model (transfer learning).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..schedules import config_key
from .cost_model import CostModel
from .space import Space


class Tuner:
    name = "base"

    def __init__(self, space: Space, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.visited: set[str] = set()
        self.configs: list[dict] = []
        self.scores: list[float] = []

    def next_batch(self, n: int) -> list[dict]:
        """Up to ``n`` valid configs not measured yet (fewer when the space runs out)."""
        raise NotImplementedError

    def update(self, configs: list[dict], scores: list[float]) -> None:
        for c, s in zip(configs, scores):
            self.visited.add(config_key(c))
            self.configs.append(c)
            self.scores.append(float(s))

    def leftovers(self, n: int) -> list[dict]:
        """Up to ``n`` valid configs not visited yet, in grid order: where a
        tuner's draws find none (they can miss the last few configs of a small
        space), what is left; none means every config of the space was visited."""
        taken: set = set()
        return list(itertools.islice((c for c in self.space.grid() if self._fresh(c, taken)), n))

    def _fresh(self, config: dict | None, taken: set) -> bool:
        key = config_key(config) if config is not None else None
        if key is None or key in self.visited or key in taken:
            return False
        taken.add(key)
        return True

    def _random(self, n: int, taken: set, tries: int = 20) -> list[dict]:
        out = []
        for _ in range(n * tries):
            if len(out) == n:
                break
            c = self.space.sample(self.rng)
            if self._fresh(c, taken):
                out.append(c)
        return out


class RandomTuner(Tuner):
    """Uniform draws over the valid configs."""
    name = "random"

    def next_batch(self, n: int) -> list[dict]:
        return self._random(n, set())


class GridTuner(Tuner):
    """Every valid config in a fixed order, the default first."""
    name = "grid"

    def __init__(self, space: Space, seed: int = 0):
        super().__init__(space, seed)
        self._order = space.grid()

    def next_batch(self, n: int) -> list[dict]:
        out, taken = [], set()
        for c in self._order:
            if self._fresh(c, taken):
                out.append(c)
                if len(out) == n:
                    break
        return out


class XGBTuner(Tuner):
    """An XGBoost cost model picks each batch; see the module docstring."""
    name = "xgb"

    def __init__(self, space: Space, seed: int = 0, objective: str = "rank", epsilon: float = 0.1,
                 min_train: int = 8, anneal_points: int = 64, anneal_steps: int = 60, transfer: list | None = None):
        super().__init__(space, seed)
        self.model = CostModel(objective, seed=seed)
        self.epsilon, self.min_train = epsilon, min_train
        self.anneal_points, self.anneal_steps = anneal_points, anneal_steps
        self.transfer = transfer or []  # (features, score, group) rows from other tasks

    def next_batch(self, n: int) -> list[dict]:
        taken: set = set()
        measured = sum(1 for s in self.scores if s > 0)
        if measured < self.min_train and not self.transfer:
            return self._random(n, taken)
        self._fit()
        n_random = int(round(n * self.epsilon)) if n > 1 else int(self.rng.random() < self.epsilon)
        shortlist = self._anneal(max(4 * n, 16))
        valid = [c for c in (self.space.check(c) for c in shortlist) if c is not None]
        valid = [c for c in valid if self._fresh(c, taken)]
        if valid:
            scores = self.model.predict([self.space.features(c) for c in valid])
            valid = [valid[i] for i in np.argsort(-scores)]
        batch = valid[:n - n_random]
        return batch + self._random(n - len(batch), taken)

    def _fit(self) -> None:
        rows = [self.space.features(c) for c in self.configs]
        best = max(self.scores) if self.scores and max(self.scores) > 0 else 1.0
        labels = [s / best for s in self.scores]
        groups = [0] * len(rows)
        for feats, label, group in self.transfer:
            rows.append(feats)
            labels.append(label)
            groups.append(group)
        self.model.fit(rows, labels, groups)
        knob_rows = [{k: v for k, v in r.items() if not k.startswith(("loop.", "buffer.", "blocks"))} for r in rows]
        self._knob_model = CostModel(self.model.objective, seed=int(self.rng.integers(1 << 30)))
        self._knob_model.fit(knob_rows, labels, groups)

    def _anneal(self, keep: int) -> list[dict]:
        """Simulated annealing on the knob-only model: cheap (no lowering), so
        it can walk far; returns the ``keep`` best configs it met."""
        from .features import config_features, task_features

        task_feats = task_features(self.space.task)

        def score(configs):
            return self._knob_model.predict([{**config_features(self.space.knobs, c), **task_feats} for c in configs])

        order = np.argsort(-np.asarray(self.scores)) if self.scores else []
        starts = [self.configs[i] for i in order[: self.anneal_points // 2]]
        while len(starts) < self.anneal_points:
            starts.append(self.space.draw(self.rng))
        points, current = starts, score(starts)
        best: dict[str, tuple[float, dict]] = {}
        for step in range(self.anneal_steps):
            temp = 1.0 - step / self.anneal_steps
            moved = [self.space.step(p, self.rng) for p in points]
            new = score(moved)
            accept = np.exp(np.minimum(0.0, (new - current) / max(temp, 1e-3) / 0.05)) > self.rng.random(len(points))
            for i in np.flatnonzero(accept):
                points[i], current[i] = moved[i], new[i]
            for p, s in zip(points, current):
                key = config_key(p)
                if key not in self.visited and (key not in best or best[key][0] < s):
                    best[key] = (float(s), p)
        ranked = sorted(best.values(), key=lambda t: -t[0])
        return [p for _, p in ranked[:keep]]


TUNERS = {t.name: t for t in (RandomTuner, GridTuner, XGBTuner)}
