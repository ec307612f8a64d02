"""CPU template for ``matmul_int8`` (``te/quantize_matmul.py``): one task
per matrix of the batch, in which B is packed, A's row sums and B's column
sums taken, the products summed in register tiles of ``dense_int8``'s shape
(rows x panels of 16 int32 lanes, one ``vpdpbusd`` per row and panel and
step of 4 along K on AVX-512 VNNI) into the matrix's accumulators (64 KB for
128 x 128: they stay in L2), and written back with the zero points'
corrections and the scale. A single matrix (no batch dims) has a task per
block of ``tile_m`` rows, its packing and column sums stages of their own.

``tile_m``    rows of the register tile: a divisor of M. Default: the most up
              to 6.
``tile_p``    panels of 16 columns in the tile: a divisor of the panels.
              Default: the most up to 4.
``parallel``  1 to run the tasks on the thread pool.

A symbolic M or N (a sequence length) leaves the template: the generic
schedule computes it (exact, not tiled). A symbolic batch or K stays. The
8-bit instruction needs the reduction in whole blocks of 4: with K not a
multiple of 4, or on a CPU without AVX-512 VNNI (uint8 codes on both sides
leave no 7-bit operand for AVX2's ``vpmaddubsw``), the same loops run as
vectorized int32 multiply-adds (exact, slower).
"""
from __future__ import annotations

from ...te.quantize_matmul import PANEL, sums_read
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors
from .int8 import MAX_TILE_M, MAX_TILE_P, dot_steps
from .int8_intrin import VNNI_16x4


@register_template("cpu", ops=("matmul_int8",))
def schedule_matmul_int8(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    a, b = workload.shapes
    m, k, n = const_int(a[-2]), const_int(a[-1]), const_int(b[-1])
    if not m or not n or k == 0:  # a symbolic M or N: the generic schedule (TVM cannot tile their write-back)
        return NOT_APPLICABLE
    batch_dims = len(a) - 2
    row_choices = divisors(m)
    tile_m = cfg.define_knob("tile_m", row_choices, default=max(t for t in row_choices if t <= MAX_TILE_M))
    panel_choices = divisors(-(-n // PANEL))
    tile_p = cfg.define_knob("tile_p", panel_choices, default=max(t for t in panel_choices if t <= MAX_TILE_P))
    par = cfg.define_knob("parallel", (0, 1), default=1)

    # the tasks are the write-back's: a matrix (its batch loops fused), or a block of a single matrix's rows
    *batch, rows, cols = sch.get_loops(block)
    if batch_dims:
        task = sch.fuse(*batch)
    else:
        task, rows = sch.split(rows, [None, tile_m])
    if par:
        sch.parallel(task)
    sch.vectorize(sch.split(cols, [None, cfg.target.lanes("float32")])[1])
    acc = sch.get_sblock("matmul_int8_acc")
    sch.compute_at(acc, task, preserve_unit_loops=True)  # a single panel keeps its loop
    sums = sums_read(workload.attrs["a_zero_point"], workload.attrs["b_zero_point"])
    for name in (*sums, "matmul_int8_pack"):
        stage = sch.get_sblock(name)
        if batch_dims or name == "matmul_int8_row_sum":
            sch.compute_at(stage, task, preserve_unit_loops=True)  # made in the task that reads it
        elif par:  # a single matrix's B: packed and summed once, before its row blocks
            sch.parallel(sch.get_loops(stage)[0])
    if "matmul_int8_col_sum" in sums:  # B's rows in turn, added to a vector of columns
        col_sum = sch.get_sblock("matmul_int8_col_sum")
        col, depth = sch.get_loops(col_sum)[-2:]
        outer, lanes = sch.split(col, [None, cfg.target.lanes("int32")])
        sch.reorder(outer, depth, lanes)
        sch.vectorize(lanes)  # before decompose_reduction (TVM rejects it after)
        sch.decompose_reduction(col_sum, depth)

    i, p, j, k4, r = sch.get_loops(acc)[-5:]
    io, ii = sch.split(i, [None, tile_m])
    po, pi = sch.split(p, [None, tile_p])
    sch.reorder(io, po, k4, ii, pi, j, r)
    intrinsic = VNNI_16x4 if "avx512vnni" in cfg.target.isa and k is not None and k % 4 == 0 else None
    dot_steps(sch, acc, k4, (ii, pi), j, r, intrinsic)
    return None
