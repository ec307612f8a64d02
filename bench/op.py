"""One op's kernel against its numpy reference at full speed (``kiln bench OP``)."""
from __future__ import annotations

import tvm

from ..errors import TargetError
from ..runtime import as_target
from ..runtime.build import build_workload
from ..runtime.measure import check_measurable, random_inputs
from ..te import get_op
from .reference import BLAS_PINS, NumpyReference
from .timing import check_repeat, compare, kernel_sampler

# Held at once: the inputs in this process, their device copy and the
# reference process's copy; kiln's outputs and the reference's.
INPUT_COPIES, OUTPUT_COPIES = 3, 2


def compare_op(op: str, shapes, dtypes=None, attrs=None, target=None, repeat: int = 10) -> dict:
    """Time ``op``'s kernel and its numpy reference on the same seeded inputs.

    Both sides are warmed up until stable, then sampled interleaved
    ``repeat`` times (``kiln.bench.timing``); numpy runs in a child process
    without the OpenBLAS pins (``kiln.bench.reference``), with kiln's thread
    count. Returns a dict: per side ``median_s``, ``min_s``, ``max_s``,
    ``spread`` (interquartile range / median), ``noisy``, ``warmup`` and the rate
    (``gflops`` or ``gbps``); ``ratio`` = numpy's time / kiln's (> 1: kiln is
    faster); ``blas`` (the kernel numpy ran) and ``numpy_version``.

    Raises (all KilnError) on a bad repeat count, a CUDA target with no GPU,
    zero-size or symbolic shapes, or inputs that do not fit in memory.
    """
    check_repeat(repeat)
    op = get_op(op)
    target = as_target(target)
    if target.kind == "cuda" and not tvm.cuda(0).exist:
        raise TargetError("no CUDA device is present on this machine, so a cuda kernel cannot be timed "
                          "(`kiln show --target cuda` compiles without one)", op=op.name, arg="target")
    workload = op.check(shapes, dtypes, attrs)
    unit, amount = check_measurable(workload, INPUT_COPIES, OUTPUT_COPIES)
    kernel = build_workload(workload, target)
    with NumpyReference() as ref:
        ref.prepare(workload)
        kiln_side = kernel_sampler(kernel, random_inputs(kernel.shapes, kernel.dtypes))
        sides = compare({"kiln": kiln_side, "numpy": ref.sample}, repeat)
        info = ref.info
    key = "gflops" if unit == "GFLOPS" else "gbps"
    for side in sides.values():
        side[key] = amount / 1e9 / side["median_s"]
    return {"op": op.name, "shapes": [list(s) for s in kernel.shapes], "dtypes": list(kernel.dtypes),
            "attrs": dict(kernel.attrs), "target": str(kernel.target), "cpu": as_target(None).mcpu,
            "device": tvm.cuda(0).device_name if target.kind == "cuda" else target.mcpu,
            "threads": tvm.runtime.num_threads(), "unit": unit, **sides,
            "ratio": sides["numpy"]["median_s"] / sides["kiln"]["median_s"],
            "noisy": sides["kiln"]["noisy"] or sides["numpy"]["noisy"],
            "blas": info["blas"], "numpy_version": info["numpy"], "reference_env_removed": list(BLAS_PINS)}
