"""Timing both sides of a comparison the same way.

A *sampler* is a function of no arguments returning the seconds of one call
of the thing measured (it may average several calls to stay above timer
noise). Every side is first warmed up until two consecutive samples agree
within 5% — one warm-up call is not enough for oneDNN at a new shape, nor for
a BLAS whose threads are asleep — then the sides are sampled interleaved
(kiln, reference, kiln, reference, ...), so a drift in the machine's speed
hits both. Each side reports the median and its spread, the interquartile
range over the median (robust to the one sample a neighbour's burst hits;
min and max are reported too); a spread above 10% flags the row as noisy.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ..errors import AttrError

Sampler = Callable[[], float]

STABLE_WITHIN = 0.05    # two consecutive warm-up samples this close: warmed up
MAX_WARMUP = 25         # samples at most before timing anyway (reported as not stable)
NOISY_SPREAD = 0.10     # a side whose interquartile range / median exceeds this is flagged
MIN_SAMPLE_S = 0.02     # a sample lasts at least this long (calls are repeated within it)
# Pause before each interleaved sample. Thread pools spin before they sleep
# (OpenBLAS's for 2**28 cycles, about 0.1 s; TVM's, oneDNN's and ONNX
# Runtime's for less): without the pause a side's sample would share the
# cores with the previous side's spinning threads.
SETTLE_S = 0.12


def check_repeat(repeat: int) -> int:
    """``repeat`` if it is a positive int, else an AttrError naming it."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise AttrError(f"got {repeat!r}, expected a positive number of timed repeats", arg="repeat")
    return repeat


def calls_sampler(fn: Callable[[], object], min_time: float | None = None) -> Sampler:
    """A sampler timing ``fn()`` with ``time.perf_counter``: calls back to back,
    as many as it takes to last ``min_time`` (default ``MIN_SAMPLE_S``), averaged.

    The count is found on the first sample, after one untimed call, by
    doubling it (``timeit``'s autorange), and then kept, so every later sample
    averages the same number of calls. The first call is never trusted to
    calibrate: at a new shape, or after a BLAS's threads went to sleep, it is
    the slow one.
    """
    min_time = MIN_SAMPLE_S if min_time is None else min_time
    number = 0

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - start

    def sample() -> float:
        nonlocal number
        if number == 0:
            fn()
            n = 1
            while (elapsed := run(n)) < min_time and n < 1 << 20:
                n *= 2
            number = n
            return elapsed / n
        return run(number) / number

    return sample


def warm_up(sample: Sampler, tolerance: float = STABLE_WITHIN, max_samples: int | None = None) -> dict:
    """Sample until two consecutive samples agree within ``tolerance``.

    Returns ``{"samples": n, "stable": bool}``; ``stable`` is False when
    ``max_samples`` (default ``MAX_WARMUP``) passed first (the row is then
    timed anyway and says so).
    """
    max_samples = MAX_WARMUP if max_samples is None else max_samples
    previous = sample()
    for n in range(2, max_samples + 1):
        current = sample()
        if abs(current - previous) <= tolerance * min(current, previous):
            return {"samples": n, "stable": True}
        previous = current
    return {"samples": max_samples, "stable": False}


def stats(seconds: Sequence[float]) -> dict:
    """Median, min, max and spread (interquartile range / median) of per-call seconds."""
    s = np.asarray(seconds, dtype=float)
    q1, median, q3 = (float(q) for q in np.percentile(s, [25, 50, 75]))
    spread = (q3 - q1) / median if median > 0 else 0.0
    return {"median_s": median, "min_s": float(s.min()), "max_s": float(s.max()), "spread": spread,
            "noisy": spread > NOISY_SPREAD, "samples": int(s.size)}


def compare(samplers: dict[str, Sampler], repeat: int, settle: float | None = None) -> dict[str, dict]:
    """Warm every side up, then sample them interleaved ``repeat`` times,
    pausing ``settle`` seconds (default ``SETTLE_S``) before each sample.

    Returns, per side, ``stats`` plus its ``warmup`` report.
    """
    check_repeat(repeat)
    settle = SETTLE_S if settle is None else settle
    warmups = {}
    for name, sample in samplers.items():
        time.sleep(settle)
        warmups[name] = warm_up(sample)
    seconds: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(repeat):
        for name, sample in samplers.items():
            time.sleep(settle)
            seconds[name].append(sample())
    return {name: {**stats(seconds[name]), "warmup": warmups[name]} for name in samplers}


def kernel_sampler(kernel, arrays: Sequence[np.ndarray], min_time: float | None = None) -> Sampler:
    """A sampler of a compiled kiln kernel: TVM's ``time_evaluator`` on device
    tensors made once, one repeat lasting at least ``min_time`` (default
    ``MIN_SAMPLE_S``) per sample."""
    import tvm

    min_time = MIN_SAMPLE_S if min_time is None else min_time
    dev = kernel.target.device()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    min_ms = max(1, int(min_time * 1e3))
    return lambda: kernel.time(*tensors, number=1, repeat=1, min_repeat_ms=min_ms)["median"]
