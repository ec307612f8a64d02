"""Measure a kernel against numpy in the same process: time, GFLOPS or GB/s, ratio.

kiln's time is TVM's ``time_evaluator`` (``number`` calls per repeat, at least
``min_repeat_ms`` per repeat, on device tensors); numpy's is the op's registered
numpy reference, timed with ``time.perf_counter`` after one warm-up call. For
both the figure is the median over repeats, with min and max reported. Compute-
bound families (matmul, conv2d) report GFLOPS from ``op.flops``; the others
report GB/s of inputs read plus outputs written.
"""
from __future__ import annotations

import time

import numpy as np
import tvm

from ..te.shapes import size
from .build import build

COMPUTE_BOUND = ("matmul", "conv2d")


def random_inputs(shapes, dtypes, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s, d in zip(shapes, dtypes):
        if d == "bool":
            out.append(rng.random(s) < 0.5)
        elif d.startswith("int"):
            out.append(rng.integers(0, 8, size=s).astype(d))
        else:
            out.append(rng.uniform(-1, 1, size=s).astype(d))
    return out


def _stats(seconds) -> dict:
    seconds = np.asarray(seconds, dtype=float)
    return {"median_s": float(np.median(seconds)), "min_s": float(seconds.min()), "max_s": float(seconds.max())}


def measure(op, shapes, dtypes=None, attrs=None, target=None, repeat: int = 10, inputs=None) -> dict:
    """kiln vs numpy on the same inputs; ``ratio`` > 1 means kiln is faster."""
    kernel = build(op, shapes, dtypes, attrs, target=target)
    op = kernel.op
    arrays = inputs if inputs is not None else random_inputs(kernel.shapes, kernel.dtypes)
    dev = kernel.target.device()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    timing = kernel.time(*tensors, number=1 if repeat < 3 else 3, repeat=max(repeat, 1))
    kiln_stats = _stats(timing["results"])

    op.reference(*arrays, **kernel.attrs)  # warm-up
    numpy_times = []
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        out = op.reference(*arrays, **kernel.attrs)
        numpy_times.append(time.perf_counter() - start)
    numpy_stats = _stats(numpy_times)

    outs = out if isinstance(out, list) else [out]
    if op.family in COMPUTE_BOUND:
        unit, work = "GFLOPS", op.flops(list(kernel.shapes), **kernel.attrs) / 1e9
    else:
        unit = "GB/s"
        work = (sum(a.nbytes for a in arrays) + sum(np.asarray(o).nbytes for o in outs)) / 1e9
    key = "gflops" if unit == "GFLOPS" else "gbps"
    kiln_stats[key] = work / kiln_stats["median_s"]
    numpy_stats[key] = work / numpy_stats["median_s"]
    return {"op": op.name, "shapes": [list(s) for s in kernel.shapes], "dtypes": list(kernel.dtypes),
            "attrs": kernel.attrs, "target": str(kernel.target), "cpu": kernel.target.mcpu,
            "threads": tvm.runtime.num_threads(), "unit": unit, "kiln": kiln_stats, "numpy": numpy_stats,
            "ratio": numpy_stats["median_s"] / kiln_stats["median_s"], "elements": int(size(kernel.shapes[0]))}
