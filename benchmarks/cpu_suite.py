"""The CPU benchmark suite: kiln's default (untuned) schedules against
references measured in the same run — numpy/OpenBLAS, PyTorch CPU (optional),
and the machine's own FMA peak and triad bandwidth.

Run: ``python benchmarks/cpu_suite.py [--json] [--quick] [--markdown FILE]``.
Each row: kiln's figure, the reference's, their ratio, and the target ratio.
Times are medians over repeats (min..max reported); both sides run with
kiln's thread count.
"""
from __future__ import annotations

import argparse
import datetime
import json
import time

import numpy as np
import tvm

import kiln
from machine import fma_peak, triad_bandwidth

CONV_LAYERS = [  # (C, H, O, K, stride, pad): ResNet-18's 3x3 layers, a downsampling layer, the stem
    (64, 56, 64, 3, 1, 1), (128, 28, 128, 3, 1, 1), (256, 14, 256, 3, 1, 1), (512, 7, 512, 3, 1, 1),
    (64, 56, 128, 3, 2, 1), (3, 224, 64, 7, 2, 3),
]


def _median(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), float(min(times)), float(max(times))


def _kiln_time(kernel, arrays, repeat):
    dev = kernel.target.device()
    res = kernel.time(*[tvm.runtime.tensor(a, dev) for a in arrays], number=3, repeat=repeat)
    return res["median"], res["min"], res["max"]


def _row(name, unit, work, kiln_t, ref_t, ref_name, target, extra=None):
    kiln_fig = work / kiln_t[0] / 1e9
    row = {"workload": name, "unit": unit, "kiln": kiln_fig, "kiln_spread_ms": [t * 1e3 for t in kiln_t[1:]],
           "reference": ref_name, "target": target}
    if ref_t is not None:
        row.update(ref=work / ref_t[0] / 1e9, ratio=ref_t[0] / kiln_t[0], ref_spread_ms=[t * 1e3 for t in ref_t[1:]])
        row["meets"] = row["ratio"] >= target
    row.update(extra or {})
    return row


def matmul_rows(repeat, peak):
    rng = np.random.default_rng(0)
    rows = []
    for (m, k, n), target in [((256,) * 3, 0.95), ((1024,) * 3, 0.95), ((2048,) * 3, 0.95), ((1000,) * 3, 0.8),
                              ((129, 1000, 257), 0.8), ((128, 512, 10), 0.8)]:
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        kernel = kiln.build("matmul", [a.shape, b.shape])
        work = 2.0 * m * n * k
        kt = _kiln_time(kernel, [a, b], repeat)
        row = _row(f"matmul {m}x{k}x{n}", "GFLOPS", work, kt, _median(lambda: a @ b, repeat), "numpy", target)
        row["kiln_pct_of_fma_peak"] = 100 * row["kiln"] / peak
        rows.append(row)
    x, w, bias = rng.random((128, 784), dtype=np.float32), rng.random((784, 512), dtype=np.float32), \
        rng.random(512, dtype=np.float32)
    kernel = kiln.build("dense", [x.shape, w.shape, bias.shape], attrs={"relu": True})
    rows.append(_row("dense+bias+relu 128x784->512", "GFLOPS", 2.0 * 128 * 784 * 512,
                     _kiln_time(kernel, [x, w, bias], repeat),
                     _median(lambda: np.maximum(x @ w + bias, 0), repeat), "numpy matmul+add+maximum", 1.1))
    return rows


def conv_rows(repeat, batches, torch):
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        for c, h, o, k, s, p in CONV_LAYERS:
            x, w = rng.random((batch, c, h, h), dtype=np.float32), rng.random((o, c, k, k), dtype=np.float32)
            kernel = kiln.build("conv2d", [x.shape, w.shape], attrs={"stride": s, "padding": p})
            work = kernel.op.flops([x.shape, w.shape], **kernel.attrs)
            ref_t = None
            if torch is not None:
                tx, tw = torch.from_numpy(x), torch.from_numpy(w)
                ref_t = _median(lambda: torch.nn.functional.conv2d(tx, tw, stride=s, padding=p), repeat)
            rows.append(_row(f"conv2d b{batch} {c}x{h}x{h}->{o} k{k} s{s}", "GFLOPS", work,
                             _kiln_time(kernel, [x, w], repeat), ref_t, "PyTorch" if torch else "PyTorch (absent)",
                             0.85))
    return rows


def memory_rows(repeat, triad, torch):
    rng = np.random.default_rng(0)
    n = 1 << 24
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    rows = []
    for name, shapes, arrays, nbytes in [("add", [(n,), (n,)], [a, b], 12 * n), ("relu", [(n,)], [a], 8 * n)]:
        kt = _kiln_time(kiln.build(name, shapes), arrays, repeat)
        gbps = nbytes / kt[0] / 1e9
        rows.append({"workload": f"{name} over 16M floats", "unit": "GB/s", "kiln": gbps, "reference": "triad",
                     "ref": triad, "ratio": gbps / triad, "target": 0.8, "meets": gbps / triad >= 0.8,
                     "kiln_spread_ms": [t * 1e3 for t in kt[1:]]})
    for shape in [(1024, 1024), (16384, 1024)]:
        x = rng.random(shape, dtype=np.float32)
        kernel = kiln.build("softmax", [shape])
        ref_t = None
        if torch is not None:
            tx = torch.from_numpy(x)
            ref_t = _median(lambda: torch.softmax(tx, -1), repeat)
        rows.append(_row(f"softmax {shape[0]}x{shape[1]}", "GB/s", 8.0 * x.size, _kiln_time(kernel, [x], repeat),
                         ref_t, "PyTorch" if torch else "PyTorch (absent)", 1.0))
    return rows


def markdown(result) -> str:
    lines = ["# CPU benchmark results", "",
             f"Measured {result['date']} on `{result['cpu']}` with {result['threads']} threads "
             f"(FMA peak {result['fma_peak_gflops']:.0f} GFLOPS, triad {result['triad_gbps']:.1f} GB/s, "
             f"PyTorch {result['torch'] or 'absent'}), by `python benchmarks/cpu_suite.py`. Default (untuned) "
             "schedules. Figures on this shared 2-core machine are noisy.", "",
             "| workload | kiln | reference | ratio | target | met |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ref = f"{r['ref']:.1f} {r['unit']} ({r['reference']})" if "ref" in r else r["reference"]
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        met = ("yes" if r["meets"] else "**no**") if "meets" in r else "-"
        extra = f" ({r['kiln_pct_of_fma_peak']:.0f}% of peak)" if "kiln_pct_of_fma_peak" in r else ""
        lines.append(f"| {r['workload']} | {r['kiln']:.1f} {r['unit']}{extra} | {ref} | {ratio} | "
                     f"{r['target']} | {met} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, batch 1 convolutions only")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    args = parser.parse_args()
    repeat = 3 if args.quick else 10
    try:
        import torch

        torch.set_num_threads(tvm.runtime.num_threads())
    except ImportError:
        torch = None
        print("PyTorch is not installed: conv2d and softmax rows report kiln's figures without a ratio")
    peak, triad = fma_peak(), triad_bandwidth()
    rows = matmul_rows(repeat, peak) + conv_rows(repeat, (1,) if args.quick else (1, 8), torch) + \
        memory_rows(repeat, triad, torch)
    result = {"date": datetime.date.today().isoformat(), "cpu": kiln.cpu().mcpu, "threads": tvm.runtime.num_threads(),
              "fma_peak_gflops": peak, "triad_gbps": triad, "torch": torch.__version__ if torch else None,
              "rows": rows}
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(result))
    print(json.dumps(result) if args.json else markdown(result))


if __name__ == "__main__":
    main()
