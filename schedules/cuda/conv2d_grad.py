"""CUDA template for ``conv2d_backward_weight`` (``te/conv_grad.py``).

The op's reduction block computes dw channels-last, ``acc[c, i, j, o]`` summed
over (n, y, z) of ``xpad[n, c, y*s + i*d, z*s + j*d] * gyt[n, y, z, o]``: a
GEMM whose M is (C, KH, KW), whose N is the output channels and whose K is the
batch's output pixels. A thread block computes ``threads_c * tile_c`` input
channels (each with all of its KH x KW taps, so the block's input rows are a
fixed box) by ``threads_o * tile_o`` output channels. The reduction runs
one output row (n, y) at a time: the input rows that output row reads (the
block's channels, padded, ``KH`` rows dilated) and its row of ``gyt`` (the
block's output channels) are copied to shared memory by all the threads
together, the padding and the transpose of ``gy`` folded into the copy; then
every thread accumulates its ``tile_c x KH x KW x tile_o`` register tile
(at most 64 accumulators) over the row's output columns, loading its inputs
and ``tile_o`` gradients from shared memory into registers per column. The
small transpose of the result to OIHW is a flat kernel of its own.

Where the channels alone make too few thread blocks to fill the GPU, the
rows are cut into ``split`` parts (the batch first, then each image's rows)
on the grid's z axis (``rfactor``): each part sums its rows into a partial
dw, and a flat kernel adds the parts, writing dw transposed to OIHW.
"""
from __future__ import annotations

import math

from ...errors import ScheduleError
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, extent
from .common import pow2_at_least, stage_and_finish, stage_operands, vector_knob


@register_template("cuda", ops=("conv2d_backward_weight",))
def schedule_conv2d_backward_weight_cuda(sch, block, cfg: Config) -> NotApplicable | None:
    name = cfg.workload.op.name
    acc = sch.get_sblock(f"{name}_cl")
    c, i, j, o, rn, ry, rz = sch.get_loops(acc)
    o_ext, c_ext, kh, kw = (const_int(extent(sch, lp)) for lp in (o, c, i, j))
    if None in (o_ext, c_ext, kh, kw):
        return NOT_APPLICABLE  # a symbolic channel count: the fallback serves it
    taps = kh * kw
    threads_o = cfg.define_knob("threads_o", (1, 2, 4, 8, 16, 32), default=min(16, pow2_at_least(o_ext, 16)))
    tile_o = cfg.define_knob("tile_o", (1, 2, 4), default=4 if o_ext >= 4 * threads_o and taps <= 9 else 1)
    threads_c = cfg.define_knob("threads_c", (1, 2, 4, 8, 16, 32), default=min(16, pow2_at_least(c_ext, 16)))
    tile_c = cfg.define_knob("tile_c", (1, 2, 4), default=1)
    vector = vector_knob(cfg, "vector", cfg.workload.dtypes[0], default=1)
    if tile_c * taps * tile_o > 64:
        raise ScheduleError(f"got a register tile of {tile_c}x{kh}x{kw}x{tile_o} accumulators, expected at most 64",
                            op=cfg.workload.op.name, arg="config")

    n, oh = const_int(extent(sch, rn)), const_int(extent(sch, ry))
    grid = -(-o_ext // (threads_o * tile_o)) * -(-c_ext // (threads_c * tile_c))
    split = cfg.define_knob("split", SPLITS, default=_default_split(grid, n, oh, o_ext * c_ext * taps))
    # declared whatever the split, so every config of a task names the same knobs
    sum_threads = cfg.define_knob("sum_threads", (64, 128, 256, 512), default=256)

    red = acc
    if split > 1:  # the rows in `split` parts, one per grid slice, summed by a kernel of their own
        by_batch = _batch_parts(split, n, oh)
        if by_batch is None:
            raise ScheduleError(f"got split {split} for a batch of {n} and {oh} output rows, expected a power of 2 "
                                f"that divides the batch times a power of 2 that divides the rows",
                                op=cfg.workload.op.name, arg="config")
        pn, rn = sch.split(rn, [by_batch, None])
        py, ry = sch.split(ry, [split // by_batch, None])
        sch.reorder(pn, py, rn, ry)
        red = sch.rfactor(sch.fuse(pn, py), 0)
        _bind_sum(sch, acc, sum_threads)
        c, i, j, o, part, rn, ry, rz = sch.get_loops(red)  # rfactor made the loops anew
    row = sch.fuse(rn, ry)
    staged, tile = stage_operands(sch, red, inline=(0, 1))  # the padding, the transpose: into the copies

    cb, ct, ci = sch.split(c, [None, threads_c, tile_c])
    ob, ot, oi = sch.split(o, [None, threads_o, tile_o])
    if split > 1:
        sch.reorder(cb, ob, part, ct, ot, row, rz, ci, i, j, oi)
        sch.bind(part, "blockIdx.z")
    else:
        sch.reorder(cb, ob, ct, ot, row, rz, ci, i, j, oi)
    sch.bind(cb, "blockIdx.y")
    sch.bind(ob, "blockIdx.x")
    stage_and_finish(sch, red, tile, ((ct, ot), (threads_c, threads_o)), row, rz,
                     staged, vector, cfg)
    return None


#: parts the batch's output rows are cut into, each reduced by a slice of the grid
SPLITS = (1, 2, 4, 8, 16, 32, 64)
#: thread blocks that fill a GPU (an H100 has 132 multiprocessors, an A100 108)
FULL_GRID = 256
#: the largest partial-sum buffer a default split allocates, in elements
MAX_PARTIALS = 1 << 22


def _default_split(grid: int, n: int | None, oh: int | None, size: int) -> int:
    """The fewest parts that fill the GPU with thread blocks, each part at
    least 8 output rows, the partial sums at most ``MAX_PARTIALS``: ResNet-18's
    64 x 64 layer at batch 8 is 4 blocks of 448 rows unsplit, 128 of 14 rows
    cut in 32."""
    split = 1
    while (2 * split in SPLITS and grid * split < FULL_GRID and _batch_parts(2 * split, n, oh)
           and n * oh >= 16 * split and 2 * split * size <= MAX_PARTIALS):
        split *= 2
    return split


def _batch_parts(split: int, n: int | None, oh: int | None) -> int | None:
    """Of ``split`` parts, how many cut the batch (as many as divide it); the
    rest cut each image's rows, which they must divide (None where they do not)."""
    if n is None or oh is None:
        return None
    by_batch = math.gcd(split, n)
    return by_batch if oh % (split // by_batch) == 0 else None


def _bind_sum(sch, block, threads: int) -> None:
    """The sum of the partial results: a flat kernel over dw's elements, each
    thread adding its element's parts in order and writing it transposed to
    OIHW (the sum's own result held in a register)."""
    *spatial, _ = sch.get_loops(block)
    bx, tx = sch.split(sch.fuse(*spatial), [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    (transpose,) = sch.get_consumers(block)
    sch.reverse_compute_at(transpose, tx)
    sch.set_scope(block, 0, "local")
