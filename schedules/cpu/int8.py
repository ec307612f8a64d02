"""CPU template for ``dense_int8``: register tiles of int32 accumulators over
the weight's blocks, the dequantizing epilogue applied as each tile is
written.

A task (parallel over row blocks x panel blocks) holds a tile of ``tile_m``
rows x ``tile_p`` panels of ``bn`` int32 lanes. Each step of 4 along K
broadcasts 4 uint8 of a row and adds to each of its panels the dot products
of those 4 with the panel's (bn, 4) int8 block: on a target with AVX-512
VNNI one ``vpdpbusd`` per panel and row (``int8_intrin.VNNI_16x4``, bn =
16), exact in int32. Elsewhere the same loops run as vectorized int32
multiply-adds (exact, slower: no 8-bit dot instruction is used;
``vpmaddubsw``'s int16 saturation would need 7-bit operands). The output
block (float32: the int32 sums times ``scale`` plus ``offset``) is written
within the task, from its tile.

``tile_m``    rows of the register tile: a divisor of M (of ``ROW_BLOCK`` for a
              symbolic M, whose accumulators are padded to it). Default: the
              most up to 6.
``tile_p``    panels (of ``bn`` columns) of the register tile: a divisor of the
              panels. Default: the most up to 4.
``parallel``  1 to run the tasks on the thread pool.
"""
from __future__ import annotations

from ...te.quantize import ROW_BLOCK
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors
from .int8_intrin import VNNI_16x4

#: the most rows and panels a register tile takes by default (6 x 4 accumulators of 32 zmm registers)
MAX_TILE_M, MAX_TILE_P = 6, 4


def uses_vnni(target, workload) -> bool:
    """Whether ``dense_int8`` on ``target`` runs on ``vpdpbusd``: AVX-512 VNNI,
    16-lane panels, and K in whole blocks of 4 (no masked tail)."""
    k, bn = const_int(workload.shapes[0][1]), const_int(workload.shapes[1][2])
    return "avx512vnni" in target.isa and bn == 16 and k is not None and k % 4 == 0


def dot_steps(sch, acc, outer_reduction, tile, lanes, four, vnni: bool) -> None:
    """The steps of an int8 register tile: the accumulators zeroed before
    ``outer_reduction`` (vectorized), the ``tile`` loops unrolled, and each
    step's ``lanes`` x ``four`` products one ``vpdpbusd`` (``VNNI_16x4``) or,
    without ``vnni``, vectorized int32 multiply-adds over ``lanes``."""
    if not vnni:  # before decompose_reduction (TVM rejects vectorizing under a reduction after it)
        sch.reorder(four, lanes)
        sch.unroll(four)
        sch.vectorize(lanes)
    init = sch.decompose_reduction(acc, outer_reduction)
    sch.vectorize(sch.get_loops(init)[-1])
    for loop in tile:
        sch.unroll(loop)
    if vnni:
        sch.tensorize(lanes, VNNI_16x4)


@register_template("cpu", ops=("dense_int8",))
def schedule_dense_int8(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    m, panels = const_int(workload.shapes[0][0]), const_int(workload.shapes[1][0])
    if m == 0:
        return NOT_APPLICABLE
    row_choices = divisors(m if m is not None else ROW_BLOCK)
    tile_m = cfg.define_knob("tile_m", row_choices, default=max(t for t in row_choices if t <= MAX_TILE_M))
    panel_choices = divisors(panels)
    tile_p = cfg.define_knob("tile_p", panel_choices, default=max(t for t in panel_choices if t <= MAX_TILE_P))
    par = cfg.define_knob("parallel", (0, 1), default=1)

    acc = sch.get_sblock("dense_int8_acc")
    i, p, j, k4, r = sch.get_loops(acc)
    io, ii = sch.split(i, [None, tile_m])
    po, pi = sch.split(p, [None, tile_p])
    sch.reorder(io, po, k4, ii, pi, j, r)
    task = sch.fuse(io, po)
    if par:
        sch.parallel(task)
    sch.reverse_compute_at(block, task)
    dot_steps(sch, acc, k4, (ii, pi), j, r, uses_vnni(cfg.target, workload))
    _, inner = sch.split(sch.get_loops(block)[-1], [None, cfg.target.lanes("float32")])
    sch.vectorize(inner)
    return None
