"""Fused ops computed inside a kernel's parallel tasks (``graph.fuse``'s
``fuse_pools`` and ``fuse_prologues``), scheduled after the kernel's own
template: a reduction reading the kernel's output, reduced where each task
wrote it, and a producer of its first input, computed image by image in the
task that reads it. ``graph.lower`` calls them on the scheduled kernel.
"""
from __future__ import annotations

from ..errors import ExportError, tvm_message
from ..schedules.util import const_int, divisors, extent, split_loops

#: accumulator vectors of a prologue's register tile (``_register_tile``)
REGISTER_TILE = 12


def _below_task(sch, block) -> tuple[list, list]:
    """The block's loops below the task loop (its outermost, a kept one): the kept ones and the reduced ones."""
    kept, reduced = split_loops(sch, block)
    return kept[1:], reduced


def reduce_in_task(sch, names: list[str], head: str, node) -> None:
    """Compute the reduction ``names[0]`` and the blocks after it (a pool's
    sums, then its mean) inside the outermost loop of the block ``head``,
    the node's parallel task: each task reduces the outputs it wrote,
    the reduced axes outside the kept ones, the innermost kept loop (a
    channel block) vectorized."""
    try:
        task = sch.get_loops(sch.get_sblock(head))[0]
        for name in names:
            block = sch.get_sblock(name)
            sch.reverse_compute_at(block, task)
            kept, reduced = _below_task(sch, block)
            if kept:
                sch.reorder(*reduced, *kept)
                sch.vectorize(kept[-1])
            if reduced:
                sch.decompose_reduction(block, reduced[0])
    except Exception as exc:  # noqa: BLE001 - the graph pass fuses only producers whose tasks allow it
        raise ExportError(f"could not compute the fused {names[-1]} inside {node.op.name}'s tasks: "
                          f"{tvm_message(exc)}", op=node.op.name, arg="model") from exc


def compute_in_task(lowered, names: list[str], head: str, node) -> None:
    """Compute the prologue's blocks ``names`` (its op's stages, then its
    epilogue's) inside the outermost loop of the block ``head``, the node's
    parallel task: its last stage register-tiled as the direct conv's
    micro-kernel (an output row's columns x its channels in registers, the
    reduction outside them), its epilogue inlined into the tile's
    write-back, the stages before it (a padding copy) vectorized rows."""
    sch, prologue = lowered.sch, node.prologue
    stages = names[:len(names) - len(prologue.epilogue)]
    try:
        block = sch.get_sblock(stages[-1])
        acc = sch.cache_write(block, 0, "local")  # the block accumulates in registers; acc writes the output
        for name in names[len(stages):]:
            sch.reverse_compute_inline(sch.get_sblock(name))
        task = sch.get_loops(sch.get_sblock(head))[0]
        sch.compute_at(acc, task)
        for name in reversed(stages):  # consumers first
            sch.compute_at(sch.get_sblock(name), task)
        for name in stages[:-1]:
            sch.vectorize(sch.get_loops(sch.get_sblock(name))[-1])
        _register_tile(sch, block, acc, lowered.cfg.target)
    except Exception as exc:  # noqa: BLE001 - the graph pass fuses only producers whose tasks allow it
        raise ExportError(f"could not compute {prologue.name} inside {node.op.name}'s tasks: {tvm_message(exc)}",
                          op=node.op.name, arg="model") from exc


def _register_tile(sch, block, acc, target) -> None:
    """Schedule a reduction computed in a task (its loops below the task's):
    the kept loops but the last two outside, then the reduction, then the
    last two (columns, channels) as a register tile of accumulators, which
    ``acc`` writes back once per tile."""
    kept, reduced = _below_task(sch, block)
    if len(kept) < 2 or not reduced:
        raise ValueError("expected a reduction with at least two kept loops")
    columns, channels = kept[-2:]
    lanes = target.lanes(str(sch.get(block).writes[0].source.dtype))
    vectors = -(-const_int(extent(sch, channels)) // lanes)
    width = max([d for d in divisors(const_int(extent(sch, columns))) if d * vectors <= REGISTER_TILE] or [1])
    outer, columns = sch.split(columns, [None, width])
    sch.reorder(*kept[:-2], outer, *reduced, columns, channels)
    sch.reverse_compute_at(acc, outer)
    sch.vectorize(channels)
    sch.unroll(columns)
    for loop in reduced[1:]:
        sch.unroll(loop)
    sch.decompose_reduction(block, reduced[0])
    *_, column, lane = sch.get_loops(acc)
    sch.unroll(column)
    sch.vectorize(lane)
