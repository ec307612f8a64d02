"""Tuning curves: best GFLOPS so far against trials, one line per run."""
from __future__ import annotations

from pathlib import Path

from ..errors import KilnError
from . import records as rec


def curves(records: list[dict]) -> dict[tuple, list[float]]:
    """(task name, tuner, run) -> best GFLOPS after each trial."""
    runs: dict[tuple, list[dict]] = {}
    for r in records:
        t = r["task"]
        name = f"{t['op']}({', '.join('x'.join(map(str, s)) for s in t['shapes'])})"
        runs.setdefault((name, r.get("tuner", "?"), r.get("run", "?")), []).append(r)
    out = {}
    for key, rs in runs.items():
        best, curve = 0.0, []
        for r in sorted(rs, key=lambda r: r.get("trial", 0)):
            best = max(best, r["result"]["gflops"] if rec.is_ok(r) else 0.0)
            curve.append(best)
        out[key] = curve
    return out


def plot(records: list[dict], out: str | Path) -> Path:
    """Write a PNG of the tuning curves in ``records``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise KilnError("plotting needs matplotlib: pip install 'kiln[plot]'", op="tune", arg="--plot") from exc
    lines = curves(records)
    if not lines:
        raise KilnError("no records to plot", op="tune", arg="--records")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, tuner, run), curve in sorted(lines.items()):
        ax.plot(range(1, len(curve) + 1), curve, label=f"{name} {tuner} [{run}]" if len(lines) > 1 else
                f"{name} {tuner}")
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOPS so far")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
