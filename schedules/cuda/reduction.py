"""CUDA templates for reductions and for every other op (the CUDA fallback).

A reduction reduces across the threads of a block: its reduction loops are
fused and split over ``threads`` threads bound to ``threadIdx.x``, which TVM
lowers to a cross-thread all-reduce (warp shuffles, then shared memory
between warps) — one block per output. When the reduction is short and the
outputs many (``mode="thread"``), each thread reduces one output serially.

Row ops run in one pass: when every reduction feeding the output produces
the output's own shape (``logsumexp``, ``mean``), or for ``softmax`` and
``log_softmax`` over the last axis, one block per output row computes all the
stages of its row back to back (the row max, the sum of exponentials, the
output) with no kernel launch between them.

Injective ops are fused and spread flat over blocks x threads.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import block_name, blocks, const_int, extent, is_output, is_reduction, split_loops, try_inline, work
from .common import bind_flat, pow2_at_least

MODES = ("block", "thread")


def cross_thread(sch, block, cfg: Config, prefix: str = "", outer=None) -> None:
    """Reduce ``block`` across threads. With ``outer`` (a loop bound to
    blockIdx) the block already sits under its row; else it gets its grid."""
    spatial, reduce = split_loops(sch, block)
    if outer is not None:  # compute_at put the row's own (unit) loops before the reduction
        spatial = []
    red_n = work(sch, reduce)
    n_out = work(sch, spatial)
    serial = outer is None and red_n is not None and red_n < 32 and (n_out is None or n_out >= 1024)
    mode = cfg.define_knob(prefix + "mode", MODES, default="thread" if serial else "block")
    threads = cfg.define_knob(prefix + "threads", (32, 64, 128, 256, 512, 1024),
                              default=256 if red_n is None else max(32, pow2_at_least(red_n, 256)))
    if (mode == "thread" or red_n == 1) and outer is None:  # over one element: a copy, one output per thread
        fused = _fuse_or_unit(sch, block, spatial)
        bx, tx = sch.split(fused, [None, threads])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        return
    if outer is None:
        sch.bind(_fuse_or_unit(sch, block, spatial), "blockIdx.x")
    r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    _, tx = sch.split(r, [None, threads])
    sch.bind(tx, "threadIdx.x")


def _fuse_or_unit(sch, block, loops):
    """The given loops fused, or a new unit loop outside all the block's loops."""
    if loops:
        return sch.fuse(*loops) if len(loops) > 1 else loops[0]
    others = sch.get_loops(block)
    unit = sch.add_unit_loop(block)  # TVM adds it innermost
    if others:
        sch.reorder(unit, *others)
    return unit


def _threads_over(sch, block, loops, threads: int) -> None:
    """Spread a row's elementwise stage over the block's threads."""
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    _, tx = sch.split(fused, [None, threads])
    sch.bind(tx, "threadIdx.x")


def _same_shape_rows(sch, out, cfg: Config) -> bool:
    """One block per output element: every reduction feeding ``out`` makes
    ``out``'s shape, so all of them run under ``out``'s block."""
    producers = [b for b in blocks(sch) if block_name(sch, b) != block_name(sch, out)]
    out_ext = [const_int(extent(sch, lp)) for lp in sch.get_loops(out)]
    for b in producers:
        spatial, reduce = split_loops(sch, b)
        if not is_reduction(sch, b) or [const_int(extent(sch, lp)) for lp in spatial] != out_ext:
            return False
        if work(sch, reduce) == 1:  # under the row its unit loop vanishes: nothing for threads
            return False
    if is_reduction(sch, out) or not producers:
        return False
    row = _fuse_or_unit(sch, out, sch.get_loops(out))
    sch.bind(row, "blockIdx.x")
    for b in reversed(producers):
        sch.compute_at(b, row)
    for b in producers:
        sch.set_scope(b, 0, "shared")  # the row's partial results, read by the block's threads
        cross_thread(sch, b, cfg, block_name(sch, b) + ".", outer=row)
    return True


@register_template("cuda", ops=("softmax", "log_softmax"))
def schedule_softmax_cuda(sch, block, cfg: Config) -> NotApplicable | None:
    """One block per row over the last axis; other axes are declined (the fallback takes them)."""
    ndim = len(cfg.workload.shapes[0])
    if cfg.workload.attrs["axis"] % ndim != ndim - 1:
        return NOT_APPLICABLE
    loops = sch.get_loops(block)
    row_len = const_int(extent(sch, loops[-1]))
    threads = cfg.define_knob("threads", (32, 64, 128, 256, 512, 1024),
                              default=256 if row_len is None else max(32, pow2_at_least(row_len, 256)))
    row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
    sch.bind(row, "blockIdx.x")
    _, tx = sch.split(loops[-1], [None, threads])
    sch.bind(tx, "threadIdx.x")
    stages = [b for b in blocks(sch) if block_name(sch, b) != block_name(sch, block)]
    for b in reversed(stages):
        sch.compute_at(b, row)
    for b in stages:
        sch.set_scope(b, 0, "shared")  # the row max, sum and exponentials, read by every thread
        _, reduce = split_loops(sch, b)
        if reduce:
            r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
            _, rtx = sch.split(r, [None, threads])
            sch.bind(rtx, "threadIdx.x")
        else:  # exp(x - max) once per element, kept for the sum and the output
            _threads_over(sch, b, sch.get_loops(b)[1:], threads)


@register_template("cuda", families=("dynamic",))
def schedule_dynamic_cuda(sch, block, cfg: Config) -> None:
    raise ScheduleError("data-dependent ops (a serial compaction) have no CUDA template: run them on the CPU",
                        op=cfg.workload.op.name, arg="target")


@register_template("cuda", fallback=True)
def schedule_auto_cuda(sch, block, cfg: Config) -> None:
    """Any op: inline intermediate injective blocks, fuse row reductions into
    their consumer when they share its shape, else give each block its own
    kernel (cross-thread reduction or a flat injective grid)."""
    for b in blocks(sch):
        if not is_output(sch, b) and not is_reduction(sch, b):
            try_inline(sch, b)
    remaining = blocks(sch)
    outputs = [b for b in remaining if is_output(sch, b)]
    if len(outputs) == 1 and len(remaining) > 1 and _same_shape_rows(sch, outputs[0], cfg):
        return
    many = len(remaining) > 1
    for b in blocks(sch):
        prefix = block_name(sch, b) + "." if many else ""
        if is_reduction(sch, b):
            cross_thread(sch, b, cfg, prefix)
        else:
            bind_flat(sch, b, cfg, prefix)
