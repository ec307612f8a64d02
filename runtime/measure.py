"""What measuring a kernel needs before anything is timed: seeded inputs, the
work one call does, and a check that the inputs exist and fit in memory.

Compute-bound ops (``Op.compute_bound``: the matrix products, and the
convolutions and their gradients but ``conv2d_winograd``) are scored in
GFLOPS from ``op.flops``; the others in GB/s of inputs read plus outputs
written. The comparison itself (kiln against a reference, warmed up and
interleaved) is ``kiln.bench``.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..te.workload import Workload

GIB = float(1 << 30)


def random_inputs(shapes, dtypes, seed: int = 0) -> list[np.ndarray]:
    """Seeded inputs of the given shapes and dtypes: uniform in [-1, 1) for
    floats, 0..7 for ints, fair coins for bools."""
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


def nbytes(shapes, dtypes) -> int:
    """Bytes of arrays of these (concrete) shapes and dtypes."""
    return sum(int(np.prod(s, dtype=object)) * np.dtype(d).itemsize for s, d in zip(shapes, dtypes))


def work(workload: Workload) -> tuple[str, float]:
    """``(unit, amount)`` of one call: ``("GFLOPS", flops)`` for compute-bound
    ops, else ``("GB/s", bytes read + written)``; concrete shapes only."""
    op = workload.op
    if op.compute_bound:
        return "GFLOPS", float(op.flops([tuple(s) for s in workload.shapes], **workload.attrs))
    return "GB/s", float(nbytes(workload.shapes, workload.dtypes) + nbytes(workload.out_shapes, workload.out_dtypes))


def check_measurable(workload: Workload, input_copies: int = 1, output_copies: int = 1,
                     available: int | None = None) -> tuple[str, float]:
    """Refuse what cannot be measured, before anything is allocated; return ``work``.

    Every input and output must have concrete dims and at least one element
    (an empty op has no time to speak of, and a rate over it divides by
    zero), and ``input_copies`` copies of the inputs plus ``output_copies`` of
    the outputs must fit in ``available`` bytes (default: the memory
    available now, from psutil). Raises ShapeError naming the op.
    """
    name = workload.op.name
    for what, group in (("input", workload.shapes), ("output", workload.out_shapes)):
        for i, s in enumerate(group):
            if not all(isinstance(d, (int, np.integer)) for d in s):
                raise ShapeError(f"got {what} {i} of shape {tuple(s)}, expected concrete dims to measure",
                                 op=name, arg="shapes")
            if 0 in tuple(s):
                raise ShapeError(f"got {what} {i} of shape {tuple(s)} with no elements; a benchmark needs "
                                 "at least one element in every input and output", op=name, arg="shapes")
    need = (input_copies * nbytes(workload.shapes, workload.dtypes)
            + output_copies * nbytes(workload.out_shapes, workload.out_dtypes))
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    if need > available:
        raise ShapeError(f"measuring these shapes needs about {need / GIB:.1f} GiB ({input_copies} copies of the "
                         f"inputs, {output_copies} of the outputs) but {available / GIB:.1f} GiB of memory is "
                         "available; use smaller shapes", op=name, arg="shapes")
    return work(workload)
