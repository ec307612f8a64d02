"""``transpose`` on the CPU where the innermost axis moves: in square tiles.

A transpose whose output's last axis is not the input's last one reads the
input across its rows. The generic injective template fuses the output's
loops into one vectorized loop: each vector of the output gathers its lanes
from as many input rows, and the next vector from the next rows, so a whole
column of input lines (a 2048 x 512 transpose: 2048 lines, 128 KB) passes
through L1 once per output row, at a float or two of each line per visit.
Here the two axes are tiled: a ``tile`` x lanes block of the output is
written row by row (a vector each), and the ``tile`` input rows it gathers
from stay in L1 until every column of theirs in the block is written.

``tile``      input rows per tile, the output's rows of one tile (the
              output axis that walks the input's last axis is split by
              it): half a vector, one or two (default one vector).
``parallel``  1 to spread the tiles over the thread pool (default: when the
              output has at least ``PARALLEL_MIN`` elements).

It applies to a static shape whose two tiled axes are whole multiples of a
vector (both of the output's: its last and the one read along the input's
rows); others get the generic template. Figures: benchmarks/RESULTS.md,
"Training steps on emeraldrapids".
"""
from __future__ import annotations

import math

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import PARALLEL_MIN


@register_template("cpu", ops=("transpose",))
def schedule_transpose(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    shape, out = workload.shapes[0], workload.out_shapes[0]
    rank = len(shape)
    if rank < 2 or not all(isinstance(d, int) for d in out):
        return NOT_APPLICABLE
    perm = workload.op.perm(rank, workload.attrs["axes"])
    across = perm.index(rank - 1)  # the output axis that walks the input's rows
    lanes = cfg.target.lanes(workload.out_dtypes[0])
    loops = sch.get_loops(block)
    if across == rank - 1 or len(loops) != rank or out[-1] % lanes or out[across] % max(1, lanes // 2):
        return NOT_APPLICABLE
    tiles = tuple(t for t in (lanes // 2, lanes, 2 * lanes) if t > 1 and out[across] % t == 0)
    tile = cfg.define_knob("tile", tiles, default=lanes if lanes in tiles else tiles[-1])
    par = cfg.define_knob("parallel", (0, 1), default=int(math.prod(out) >= PARALLEL_MIN))
    ao, ai = sch.split(loops[across], [None, tile])
    bo, bi = sch.split(loops[-1], [None, lanes])
    others = [lp for k, lp in enumerate(loops[:-1]) if k != across]
    sch.reorder(*others, ao, bo, ai, bi)
    outer = sch.fuse(*others, ao, bo)
    if par:
        sch.parallel(outer)
    sch.unroll(ai)
    sch.vectorize(bi)
    return None
