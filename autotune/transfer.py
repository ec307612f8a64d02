"""What the cost model knows before a run measures anything: the records of
other shapes of the same op on the same target, as training rows
(``tune(..., transfer=True)`` hands them to the xgb tuner)."""
from __future__ import annotations

from pathlib import Path

from . import records as rec
from .space import Space
from .task import Task


def transfer_rows(task: Task, path: Path, limit: int = 512) -> list:
    """(features, speed relative to that task's fastest, group) rows from
    records of other shapes of the same op on the same target: what the model
    knows before measuring."""
    by_task: dict[str, list] = {}
    for r in rec.load(path):
        t = r["task"]
        if t.get("op") == task.op.name and t.get("target") == task.target.key and r["task_key"] != task.key \
                and not rec.is_confirmed(r):
            by_task.setdefault(r["task_key"], []).append(r)
    rows = []
    for group, (key, recs) in enumerate(sorted(by_task.items()), 1):
        t = recs[0]["task"]
        try:
            other = Space(Task.create(task.op, t["shapes"], t["dtypes"], t["attrs"], task.target))
        except Exception:  # noqa: BLE001 - a record of a shape this template no longer takes
            continue
        best = max((rec.score(r) for r in recs), default=0.0) or 1.0
        for r in recs:
            c = other.check(r["config"])
            if c is not None:
                rows.append((other.features(c), rec.score(r) / best, group))
        if len(rows) >= limit:
            break
    return rows[:limit]
