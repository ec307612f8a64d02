"""``take`` on the CPU: one row copy per index, vectorized.

``take(x, indices, axis)`` copies, for each index, the block of ``x`` after
``axis`` (an embedding lookup: one row of the table per id). Its output
loops are (before the axis, the indices' dims, after the axis). The
generic injective template fuses them all into one vectorized loop, which
reads the index, wraps and clamps it again for every vector (a division
and a modulo to find it); here the loops over the indices are fused into
one parallel loop, whose body reads the index once and copies the row
after it in vectors. An embedding lookup (8x128 ids in a 30522x768 table)
ran several times faster so than fused, timed interleaved
(``kiln.bench.timing.compare`` of the two kernels).

It applies where the row after ``axis`` has static dims, at least half a
vector of them; ``take`` along the last axis (one element per index) gets
the generic template.

``vector``    lanes of the row's vectors: one or two vectors (default two
              where they divide the row, else one).
``parallel``  1 to spread the indices over the thread pool (default: when
              the output has at least ``PARALLEL_MIN`` elements).
"""
from __future__ import annotations

import math

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import PARALLEL_MIN, vectorize_row


@register_template("cpu", ops=("take",))
def schedule_take(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    x, indices = workload.shapes
    ax = workload.attrs["axis"] % len(x)
    row = x[ax + 1:]
    lanes = cfg.target.lanes(workload.out_dtypes[0])
    if not row or not all(isinstance(d, int) for d in row) or math.prod(row) < max(2, lanes // 2):
        return NOT_APPLICABLE
    width = math.prod(row)
    out = [d if isinstance(d, int) else None for d in workload.out_shapes[0]]
    vec = cfg.define_knob("vector", (lanes, 2 * lanes), default=2 * lanes if width % (2 * lanes) == 0 else lanes)
    par = cfg.define_knob("parallel", (0, 1), default=int(None in out or math.prod(out) >= PARALLEL_MIN))

    loops = sch.get_loops(block)
    outer, inner = loops[:len(loops) - len(row)], loops[len(loops) - len(row):]
    copy = sch.fuse(*inner) if len(inner) > 1 else inner[0]
    if outer:
        rows = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if par:
            sch.parallel(rows)
    vectorize_row(sch, copy, width, vec)
    return None
