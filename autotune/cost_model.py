"""The XGBoost cost model: predicts how good a config is from its features.

Labels are speed (1 / seconds) relative to the fastest config of the same
task (1.0 = fastest, 0.0 = failed), so tasks of different sizes, and ops that
count no FLOPs, share one scale.
``objective="rank"`` learns the order within each task (pairwise ranking,
one query group per task), ``"reg"`` the relative throughput itself.
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError
from .features import matrix

OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}


class CostModel:
    def __init__(self, objective: str = "rank", seed: int = 0, rounds: int = 60):
        if objective not in OBJECTIVES:
            raise AttrError(f"got {objective!r}, expected one of {sorted(OBJECTIVES)}", where="CostModel",
                            arg="objective")
        self.objective, self.seed, self.rounds = objective, seed, rounds
        self.names: list[str] = []
        self.booster = None

    def fit(self, rows: list[dict], labels: list[float], groups: list[int]) -> None:
        import xgboost as xgb

        order = np.argsort(np.asarray(groups), kind="stable")  # ranking wants rows grouped by query
        x, self.names = matrix([rows[i] for i in order])
        y = np.asarray(labels, dtype=np.float32)[order]
        qid = np.asarray(groups)[order]
        data = xgb.DMatrix(x, label=y, qid=qid if self.objective == "rank" else None, missing=np.nan)
        params = {"objective": OBJECTIVES[self.objective], "max_depth": 6, "eta": 0.3, "subsample": 1.0,
                  "min_child_weight": 0, "gamma": 1e-4, "lambda": 1.0, "seed": self.seed, "nthread": 1,
                  "verbosity": 0}
        self.booster = xgb.train(params, data, num_boost_round=self.rounds)

    def predict(self, rows: list[dict]) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None or not rows:
            return np.zeros(len(rows))
        x, _ = matrix(rows, self.names)
        return self.booster.predict(xgb.DMatrix(x, missing=np.nan))
