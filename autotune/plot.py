"""Tuning curves: the best speed so far against trials, one line per run.

Speed is GFLOPS for compute-bound ops and GB/s for the others (see
``Task.unit``); a records file may hold both kinds.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import KilnError
from . import records as rec

INSTALL_HINT = "pip install -e '.[plot]'"


def _pyplot():
    """matplotlib's pyplot on the file-only backend, or a KilnError saying how to get it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise KilnError(f"plotting needs matplotlib (the 'plot' extra): {INSTALL_HINT}", arg="--plot") from exc
    return plt


def _unit(op_name: str) -> str:
    from ..te import get_op

    try:
        return "GFLOPS" if get_op(op_name).compute_bound else "GB/s"
    except KilnError:  # a record of an op this version does not have
        return "GFLOPS"


def curves(records: list[dict]) -> dict[tuple, tuple[str, list[float]]]:
    """(task name, tuner, run) -> (unit, best speed in that unit after each trial)."""
    runs: dict[tuple, list[dict]] = {}
    for r in records:
        if rec.is_confirmed(r):  # the re-timing that ends a run, not a trial
            continue
        t = r["task"]
        name = f"{t['op']}({', '.join('x'.join(map(str, s)) for s in t['shapes'])})"
        runs.setdefault((name, r.get("tuner", "?"), r.get("run", "?")), []).append(r)
    out = {}
    for key, rs in runs.items():
        unit = _unit(rs[0]["task"]["op"])
        field = "gflops" if unit == "GFLOPS" else "gbps"
        best, curve = 0.0, []
        for r in sorted(rs, key=lambda r: r.get("trial", 0)):
            best = max(best, r["result"].get(field, 0.0) if rec.is_ok(r) else 0.0)
            curve.append(best)
        out[key] = (unit, curve)
    return out


def plot(records: list[dict], out: str | Path) -> Path:
    """Write an image (PNG, or another type by the suffix) of the tuning curves in ``records``."""
    plt = _pyplot()
    lines = curves(records)
    if not lines:
        raise KilnError("no records to plot", arg="--records")
    units = sorted({unit for unit, _ in lines.values()})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (name, tuner, run), (unit, curve) in sorted(lines.items()):
        label = f"{name} {tuner}" + (f" [{run}]" if len(lines) > 1 else "") + (f" ({unit})" if len(units) > 1 else "")
        ax.plot(range(1, len(curve) + 1), curve, label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel(f"best {' or '.join(units)} so far")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    from ..outputs import atomic_path

    out = Path(out)
    try:
        with atomic_path(out) as tmp:  # the temporary name has no suffix: say the type
            fig.savefig(tmp, dpi=110, format=out.suffix.lstrip(".").lower())
    except ValueError as exc:
        raise KilnError(f"cannot write {out}: {exc}", arg="--plot") from exc
    finally:
        plt.close(fig)
    return out
