"""Long float32 reductions: kiln's error and numpy's against a float64 sum,
side by side, and each one's time, interleaved in one process.

kiln accumulates float32 sums in float64 (``kiln.te.reduction.accumulator``)
and rounds once; numpy adds pairwise in float32. Each row is one op over
1e4-1e7 elements of positive values (the case where rounding errors add up
instead of cancelling): ``sum`` and ``mean`` of a vector, ``sum`` over the
rows and over the columns of a matrix, ``logsumexp`` over rows, and the
mean ``softmax_cross_entropy`` over a batch of 10-class rows.

Run: ``python benchmarks/reduction_accuracy.py [--repeat 7] [--sizes 1e4,1e6,1e7]``.
Prints one row per op and size: relative error of kiln and of numpy, and the
median time per call of each (numpy's single-threaded reduction, which calls
no BLAS, so ``OPENBLAS_CORETYPE`` does not touch it; kiln on its thread pool).
"""
from __future__ import annotations

import argparse

import numpy as np

import kiln
from kiln.bench.timing import calls_sampler, compare, kernel_sampler
from kiln.te import get_op


def _cases(n: int):
    """(label, op, shapes, dtypes, attrs, numpy float32 function) for ``n`` elements."""
    rows = max(1, n // 1000)
    yield "sum", "sum", [(n,)], None, {}, lambda x: x.sum()
    yield "mean", "mean", [(n,)], None, {}, lambda x: x.mean()
    yield "sum over rows", "sum", [(rows, 1000)], None, {"axis": 1}, lambda x: x.sum(axis=1)
    yield "sum over columns", "sum", [(1000, rows)], None, {"axis": 0}, lambda x: x.sum(axis=0)
    yield "logsumexp over rows", "logsumexp", [(rows, 1000)], None, {"axis": 1}, None
    batch = max(1, n // 10)
    yield "cross-entropy mean", "softmax_cross_entropy", [(batch, 10), (batch,)], ["float32", "int32"], {}, None


def _inputs(shapes, dtypes, rng):
    if dtypes:  # logits and labels
        (n, c), _ = shapes
        return [rng.random((n, c), dtype=np.float32) * 4, rng.integers(0, c, n).astype(dtypes[1])]
    return [rng.random(shapes[0], dtype=np.float32)]


def _relative(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got, "float64") - want) / np.abs(want)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved samples per side (default 7)")
    parser.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="element counts, comma-separated")
    args = parser.parse_args()
    try:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"got --sizes {args.sizes!r}, expected numbers such as 1e4,1e6")
    if args.repeat < 1 or min(sizes) < 10:
        parser.error("expected --repeat >= 1 and sizes of at least 10 elements")
    rng = np.random.default_rng(0)
    print(f"# {kiln.cpu()}: relative error against a float64 computation, time per call (median of "
          f"{args.repeat}, interleaved)")
    print(f"{'op':22} {'elements':>9} {'kiln err':>9} {'numpy err':>9} {'kiln ms':>9} {'numpy ms':>9}")
    for n in sizes:
        for label, op, shapes, dtypes, attrs, numpy_fn in _cases(n):
            arrays = _inputs(shapes, dtypes, rng)
            ref = get_op(op)
            parsed = ref.parse_attrs(attrs)
            want = np.asarray(ref.reference(arrays[0].astype("float64"), *arrays[1:], **parsed))
            numpy_fn = numpy_fn or (lambda *a, ref=ref, parsed=parsed: ref.reference(*a, **parsed))
            kernel = kiln.build(op, shapes, dtypes, attrs)
            times = compare({"kiln": kernel_sampler(kernel, arrays), "numpy": calls_sampler(lambda: numpy_fn(*arrays))},
                            args.repeat)
            print(f"{label:22} {n:>9.0e} {_relative(kernel(*arrays), want):>9.1e} "
                  f"{_relative(numpy_fn(*arrays), want):>9.1e} {times['kiln']['median_s'] * 1e3:>9.3f} "
                  f"{times['numpy']['median_s'] * 1e3:>9.3f}")


if __name__ == "__main__":
    main()
