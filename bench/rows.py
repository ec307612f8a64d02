"""One row of a suite: kiln's figure, the reference's, their ratio, the target.

``ratio`` is always kiln's *speed* over the reference's (reference time /
kiln time): above 1 kiln is faster. A row meets its target when ``ratio >=
target``. ``spread`` is a side's interquartile range over its median
(``kiln.bench.timing``); a row is ``noisy`` when either side's exceeds 10%.
"""
from __future__ import annotations

from .timing import NOISY_SPREAD

RATES = ("GFLOPS", "GB/s")


def figure(unit: str, side: dict, amount: float | None = None) -> float:
    """The figure a side shows: a rate (``amount`` of work per median call,
    in billions per second) or milliseconds per call (``unit == "ms"``)."""
    if "figure" in side:  # a ceiling measured once, not a timed side
        return float(side["figure"])
    if unit in RATES:
        return float(amount) / 1e9 / side["median_s"]
    return side["median_s"] * 1e3


def make_row(workload: str, unit: str, kiln: dict | None, reference: str, ref: dict | None, target: float,
             amount: float | None = None, note: str | None = None, extra: dict | None = None) -> dict:
    """A row from the two sides' stats (``timing.compare``); ``ref`` None
    (with a ``note`` saying why) reports kiln's figure alone, and ``kiln``
    None too a row that was not run, its ``note`` saying why."""
    kiln = kiln or {}
    kiln_fig = figure(unit, kiln, amount) if kiln else None
    row = {"workload": workload, "unit": unit, "kiln": kiln_fig, "kiln_spread": kiln.get("spread"),
           "reference": reference, "ref": None, "ref_spread": None, "ratio": None, "target": float(target),
           "met": None, "noisy": bool(kiln.get("spread", 0) > NOISY_SPREAD), "note": note, "extra": extra or {}}
    if ref is not None:
        ref_fig = figure(unit, ref, amount)
        ratio = kiln_fig / ref_fig if unit in RATES else ref_fig / kiln_fig
        row.update(ref=ref_fig, ref_spread=ref.get("spread"), ratio=float(ratio), met=bool(ratio >= target),
                   noisy=bool(row["noisy"] or (ref.get("spread") or 0) > NOISY_SPREAD))
    return row
