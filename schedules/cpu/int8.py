"""CPU template for ``dense_int8``: register tiles of int32 accumulators over
the weight's blocks, the dequantizing epilogue applied as each tile is
written.

A task (parallel over panel blocks x row blocks) holds a tile of ``tile_m``
rows x ``tile_p`` panels of ``bn`` int32 lanes. Each step of 4 along K
broadcasts 4 uint8 of a row and adds to each of its panels the dot products
of those 4 with the panel's (bn, 4) int8 block: on a target with AVX-512
VNNI one ``vpdpbusd`` per panel and row (``int8_intrin.VNNI_16x4``, bn =
16), exact in int32; on AVX2, where the weights promise 7 bits
(``weight_bits=7``: ``kiln.quantize`` for such a target), ``vpmaddubsw`` and
``vpmaddwd`` per 8 lanes (``int8_intrin.AVX2_16x4``). Elsewhere the same
loops run as vectorized int32 multiply-adds (exact, slower). The output
block (float32: the int32 sums times ``scale`` plus ``offset``) is written
within the task, from its tile.

``tile_m``    rows of the register tile: a divisor of M (of ``ROW_BLOCK`` for a
              symbolic M, whose accumulators are padded to it). Default: the
              most up to 6.
``tile_p``    panels (of ``bn`` columns) of the register tile: a divisor of the
              panels. Default: the most up to 4.
``parallel``  1 to run the tasks on the thread pool.
``cols_first`` 1 to order the tasks panel block first: each thread takes a
              range of the weight's panels and runs every row against it,
              so the weight is read once per call and the rows (the smaller
              re-read: a tile has fewer rows than columns) once per panel
              block. Default 1: BERT-base int8 at 128 tokens 41.3 -> 31.5 ms
              at batch 1 (rows first read its 85 MB of weights once per 4
              rows).
"""
from __future__ import annotations

from ...te.quantize import ROW_BLOCK
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors
from .int8_intrin import AVX2_16x4, VNNI_16x4, registered

#: the most rows and panels a register tile takes by default (6 x 4 accumulators of 32 zmm registers)
MAX_TILE_M, MAX_TILE_P = 6, 4


def dot_instruction(target, workload, bn: int, whole: bool = True) -> str | None:
    """The tensor intrinsic an int8 template's steps run on, for panels of
    ``bn`` lanes (``whole``: the reduction in whole blocks of 4, no masked
    tail): ``VNNI_16x4`` on AVX-512 VNNI; ``AVX2_16x4`` on AVX2 where the
    weights promise 7 bits (``weight_bits``); else None (int32 arithmetic)."""
    if bn != 16 or not whole:
        return None
    if "avx512vnni" in target.isa:
        return VNNI_16x4
    return AVX2_16x4 if "avx2" in target.isa and workload.attrs["weight_bits"] == 7 else None


def dot_steps(sch, acc, outer_reduction, tile, lanes, four, intrinsic: str | None) -> None:
    """The steps of an int8 register tile: the accumulators zeroed before
    ``outer_reduction`` (vectorized), the ``tile`` loops unrolled, and each
    step's ``lanes`` x ``four`` products one ``intrinsic`` (``dot_instruction``)
    or, without one, vectorized int32 multiply-adds over ``lanes``."""
    if intrinsic is None:  # before decompose_reduction (TVM rejects vectorizing under a reduction after it)
        sch.reorder(four, lanes)
        sch.unroll(four)
        sch.vectorize(lanes)
    init = sch.decompose_reduction(acc, outer_reduction)
    sch.vectorize(sch.get_loops(init)[-1])
    for loop in tile:
        sch.unroll(loop)
    if intrinsic is not None:
        sch.tensorize(lanes, registered(intrinsic))


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
    cols_first = cfg.define_knob("cols_first", (0, 1), default=1)

    acc = sch.get_sblock("dense_int8_acc")
    i, p, j, k4, r = sch.get_loops(acc)
    io, ii = sch.split(i, [None, tile_m])
    po, pi = sch.split(p, [None, tile_p])
    tasks = (po, io) if cols_first else (io, po)
    sch.reorder(*tasks, k4, ii, pi, j, r)
    task = sch.fuse(*tasks)
    if par:
        sch.parallel(task)
    sch.reverse_compute_at(block, task)
    k, bn = const_int(workload.shapes[0][1]), const_int(workload.shapes[1][2])
    dot_steps(sch, acc, k4, (ii, pi), j, r, dot_instruction(cfg.target, workload, bn, k is not None and k % 4 == 0))
    _, inner = sch.split(sch.get_loops(block)[-1], [None, cfg.target.lanes("float32")])
    sch.vectorize(inner)
    return None
