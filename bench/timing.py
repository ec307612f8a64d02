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
import psutil

from ..errors import AttrError

Sampler = Callable[[], float]

STABLE_WITHIN = 0.05    # two consecutive warm-up samples this close: warmed up
MAX_WARMUP = 25         # samples at most before timing anyway (reported as not stable)
NOISY_SPREAD = 0.10     # a side whose interquartile range / median exceeds this is flagged
MIN_SAMPLE_S = 0.02     # a sample lasts at least this long (calls are repeated within it)
# Before each interleaved sample, wait until the previous side's threads are
# idle. Thread pools spin before they sleep: OpenBLAS's for about 0.1 s, and
# TVM's pool, one per thread that launches kernels (the main thread and each
# engine worker), for about 0.1 s each, so a kiln training step leaves a core
# busy for up to a second. Sampled at once, PyTorch's next step shared the
# cores with those spinners and ran 100x slower; a fixed pause is either too
# short or wastes time, so the pause lasts until the CPU use of this process
# and its children (the numpy reference) drops near zero.
SETTLE_S = 3.0          # the longest wait for idle (a busy neighbour never lets it come)
SETTLE_WINDOW_S = 0.02  # idle: less than IDLE_SHARE of one core used over such a window
IDLE_SHARE = 0.1
# Untimed calls that start every sample: the wait for idle leaves the caches
# cold (the host runs other work meanwhile), and the first call after it is
# slow on both sides (figures: benchmarks/RESULTS.md, "Benchmark timing: the
# first call after idle"). A sample times
# the steady state of calls that follow one another, as a serving or
# training loop makes them; ``time_evaluator`` (``kernel_sampler``) makes
# one untimed call before it times, too.
WARM_CALLS = 1


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
    the slow one. Every later sample starts with one untimed call too
    (``WARM_CALLS``).
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
        run(WARM_CALLS)
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
    waiting before each sample until the CPU is idle, at most ``settle``
    seconds (default ``SETTLE_S``; 0: no wait).

    Returns, per side, ``stats`` plus its ``warmup`` report.
    """
    check_repeat(repeat)
    settle = SETTLE_S if settle is None else settle
    warmups = {}
    for name, sample in samplers.items():
        wait_until_idle(settle)
        warmups[name] = warm_up(sample)
    seconds: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(repeat):
        for name, sample in samplers.items():
            wait_until_idle(settle)
            seconds[name].append(sample())
    return {name: {**stats(seconds[name]), "warmup": warmups[name]} for name in samplers}


def _children_cpu_s() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # it ended meanwhile
            continue
        total += times.user + times.system
    return total


def wait_until_idle(max_wait: float | None = None) -> float:
    """Wait until this process and its children use (almost) no CPU, at most
    ``max_wait`` seconds (default ``SETTLE_S``); return the seconds waited.

    Own CPU time comes from ``time.process_time`` (exact); the children's from
    ``psutil`` (in clock ticks, 10 ms), so a child counts as idle when its
    time did not move by more than a tick over a window. Own time is read
    after psutil's scan of the process table, whose cost (about 1.5 ms for 80
    processes, more on a crowded machine) would otherwise count as this
    process being busy and, near the 2 ms threshold, make every wait last
    ``max_wait``.
    """
    max_wait = SETTLE_S if max_wait is None else max_wait
    start = time.perf_counter()
    if max_wait <= 0:
        return 0.0
    children, own = _children_cpu_s(), time.process_time()
    while time.perf_counter() - start < max_wait:
        time.sleep(SETTLE_WINDOW_S)
        own_now, children_now = time.process_time(), _children_cpu_s()
        if own_now - own < IDLE_SHARE * SETTLE_WINDOW_S and children_now - children <= 0.011:
            break
        children, own = children_now, time.process_time()
    return time.perf_counter() - start


def _min_repeat_ms(min_time: float | None) -> int:
    """``min_time`` seconds (default ``MIN_SAMPLE_S``) as ``time_evaluator``'s whole milliseconds."""
    return max(1, int((MIN_SAMPLE_S if min_time is None else min_time) * 1e3))


def kernel_sampler(kernel, arrays: Sequence[np.ndarray], min_time: float | None = None) -> Sampler:
    """A sampler of a compiled kiln kernel: TVM's ``time_evaluator`` on device
    tensors made once, one repeat lasting at least ``min_time`` (default
    ``MIN_SAMPLE_S``) per sample."""
    import tvm

    dev = kernel.target.device()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    min_ms = _min_repeat_ms(min_time)
    return lambda: kernel.time(*tensors, number=1, repeat=1, min_repeat_ms=min_ms)["median"]


def module_sampler(module, tensors: Sequence, min_time: float | None = None) -> Sampler:
    """A sampler of a compiled module's ``main``: TVM's ``time_evaluator`` on
    ``tensors`` (its inputs then its outputs, all on the device it runs on),
    one repeat lasting at least ``min_time`` (default ``MIN_SAMPLE_S``) per
    sample.

    For a module compiled outside kiln's kernel cache — a hand-written
    schedule passed to ``tvm.compile`` (give its ``.mod``) — where
    ``kernel_sampler`` times a kiln kernel.
    """
    if not tensors:
        raise AttrError("got no tensors, expected the module's inputs and outputs on its device", arg="tensors")
    timer = module.time_evaluator("main", tensors[0].device, number=1, repeat=1,
                                  min_repeat_ms=_min_repeat_ms(min_time))
    return lambda: timer(*tensors).median
