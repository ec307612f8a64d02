"""Presenting a suite result: Markdown (also the terminal's table), JSON and a
bar chart of the ratios. A result is ``kiln.bench.suites.run``'s dict."""
from __future__ import annotations

import io
import json
import math
import os

import numpy as np

from .timing import NOISY_SPREAD



def _plain(value):
    """JSON for what ``json`` does not know: numpy scalars and arrays, tuples."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(result: dict) -> str:
    """The result as one JSON object (numpy bools and floats made plain, NaN as null)."""
    def clean(v):
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
            return None
        return v

    return json.dumps(clean(result), default=_plain, allow_nan=False)


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _extra(x) -> str:
    return "-" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def header_lines(h: dict) -> list[str]:
    blas = ", ".join(f"{b['internal_api']} {b['version']} {b['architecture']} kernel, {b['num_threads']} threads"
                     for b in h["blas"]) or "none found"
    pinned = ", ".join(b["architecture"] for b in h.get("blas_in_this_process", []))
    v = h["versions"]
    return [f"- date: {h['date']}",
            f"- CPU: {h['cpu_model']} (LLVM `{h['llvm_cpu']}`), ISA {h['isa']['name']} "
            f"({h['isa']['vector_bits']}-bit vectors; {', '.join(h['isa']['features'])})",
            f"- cores {h['cores']}, threads {h['threads']} (kiln, numpy, PyTorch and ONNX Runtime alike)",
            f"- FMA peak {h['fma_peak_gflops']:.0f} GFLOPS fp32, triad bandwidth {h['triad_gbps']:.1f} GB/s",
            f"- numpy's BLAS in the reference process: {blas} (environment without "
            f"{', '.join(h['reference_env_removed'])}; in kiln's own process: {pinned or 'not loaded'})",
            f"- versions: numpy {v['numpy']}, PyTorch {v['torch'] or 'absent'}, ONNX Runtime "
            f"{v['onnxruntime'] or 'absent'}, onnx {v['onnx'] or 'absent'}, TVM {v['apache-tvm']}"]


def table(rows: list[dict]) -> list[str]:
    extras = list(dict.fromkeys(k for r in rows for k in r["extra"]))
    lines = ["| workload | kiln | reference | ratio | target | met | spread kiln / ref | "
             + " | ".join(extras) + (" |" if extras else "") + " notes |",
             "|---" * (8 + len(extras)) + "|"]
    for r in rows:
        digits = 3 if r["unit"] == "ms" else 1
        ref = f"{_num(r['ref'], digits)} {r['unit']} ({r['reference']})" if r["ref"] is not None else r["reference"]
        met = "-" if r["met"] is None else "yes" if r["met"] else "**no**"
        spread = f"{_pct(r['kiln_spread'])} / {_pct(r['ref_spread'])}" + (" (noisy)" if r["noisy"] else "")
        cells = [r["workload"], f"{_num(r['kiln'], digits)} {r['unit']}", ref, _num(r["ratio"], 2),
                 f">= {r['target']:g}", met, spread]
        cells += [_extra(r["extra"].get(k)) for k in extras]
        cells.append(r["note"] or "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(result: dict, command: str = "") -> str:
    """The result as a Markdown page: where it came from, how to read it, one table per suite."""
    lines = ["# kiln benchmark results", "", *header_lines(result["header"]), ""]
    if command:
        lines += [f"Regenerate with `{command}`.", ""]
    lines += ["ratio = kiln's speed / the reference's (reference time / kiln time): above 1 kiln is faster; "
              "a row meets its target when ratio >= target. Figures are medians over "
              f"{result['repeat']} samples taken interleaved with the reference's, after both were warmed up "
              "until two consecutive samples agreed within 5%; spread = interquartile range / median, "
              f"(noisy) when above {NOISY_SPREAD:.0%}." + (" Quick mode: small sizes." if result["quick"] else ""),
              ""]
    for name, rows in result["suites"].items():
        lines += [f"## {name}", "", *table(rows), ""]
    return "\n".join(lines)


def write_file(path: str, data: str | bytes) -> None:
    """Write ``data`` to ``path`` atomically (``kiln.outputs.atomic_path``)."""
    from ..outputs import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def plot(result: dict, path: str) -> None:
    """A horizontal bar per row with a ratio: green when it meets its target, red
    when not; a tick at each row's target. Rows without a ratio are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{name}: {r['workload']} vs {r['reference']}", r) for name, rs in result["suites"].items()
            for r in rs if r["ratio"] is not None]
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(rows) + 1.5))
    y = np.arange(len(rows))
    ax.barh(y, [r["ratio"] for _, r in rows], color=["tab:green" if r["met"] else "tab:red" for _, r in rows])
    ax.scatter([r["target"] for _, r in rows], y, marker="|", s=200, color="black", label="target", zorder=3)
    ax.set_yticks(y, [label for label, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("ratio: kiln's speed / the reference's (above 1: kiln is faster)")
    ax.set_title(f"kiln benchmarks on {result['header']['llvm_cpu']}, {result['header']['date'][:10]}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=120, format=os.path.splitext(path)[1][1:] or "png")
    plt.close(fig)
    write_file(path, image.getvalue())
