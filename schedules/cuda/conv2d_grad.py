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
and ``tile_o`` gradients from shared memory into registers per column. The small transpose of the
result to OIHW is a flat kernel of its own.
"""
from __future__ import annotations

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

    staged, tile = stage_operands(sch, acc, inline=(0, 1))  # the padding, the transpose: into the copies

    cb, ct, ci = sch.split(c, [None, threads_c, tile_c])
    ob, ot, oi = sch.split(o, [None, threads_o, tile_o])
    row = sch.fuse(rn, ry)
    sch.reorder(cb, ob, ct, ot, row, rz, ci, i, j, oi)
    sch.bind(cb, "blockIdx.y")
    sch.bind(ob, "blockIdx.x")
    stage_and_finish(sch, acc, tile, ((ct, ot), (threads_c, threads_o)), row, rz,
                     staged, vector, cfg)
    return None
