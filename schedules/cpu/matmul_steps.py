"""The schedule steps the CPU matmul templates (``matmul.py``) share, once
their knobs are chosen: padding to whole tiles, the operands' packs, the
loop nest of tasks, panels, register tiles and k steps, and the blocks
around it (the accumulator's write-back with the epilogue, the padding
copies). The knobs are documented in ``matmul.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..generic import schedule_injective
from ..util import blocks, const_int, extent, fold_consumers, try_inline
from .matmul_roles import MatmulRoles


@dataclass(frozen=True)
class Tile:
    """The register tile: ``m`` rows by ``n`` columns, ``k`` steps unrolled."""

    m: int
    n: int
    k: int


@dataclass(frozen=True)
class Tasks:
    """The cache blocks and the tasks: ``tile_k`` (a block of k when
    ``blocked``), ``block_m`` tiles of rows (0: all of a symbolic M's) and
    ``block_n`` panels per task, ordered ``cols_first`` or not, run in
    parallel with ``parallel``."""

    tile_k: int
    blocked: bool
    block_m: int
    block_n: int
    cols_first: int
    parallel: int


def pad_to_tiles(sch, r: MatmulRoles, tile: Tile) -> None:
    """Pad the dims the tile does not divide (``pad_einsum``): static shapes
    keep the fast micro-kernel instead of predicates. A symbolic dim is
    padded too: its last tile then never needs a bounds check but the
    write-back's. B's panels are whole already."""
    if any(p > 1 and (e is None or e % p) for e, p in zip((r.m, r.n, r.k), (tile.m, tile.n, tile.k))):
        columns = [1, 1] if r.panel else [tile.n]
        sch.pad_einsum(r.red, [1] * len(r.batch) + [tile.m, *columns, tile.k])


def pack(sch, r: MatmulRoles, index: int, tile: int, cfg: Config, transposed: str):
    """Copy operand ``index`` to ``[..., outer / tile, K, tile]`` (its padding folded in)."""
    source = str(sch.get(r.red).reads[index].source.name)
    copy = sch.cache_read(r.red, index, "global")
    swap = bool(cfg.workload.attrs.get(transposed))
    if index == 0:  # A is (..., M, K), or (..., K, M) transposed
        layout = (lambda *i: (*i[:-2], i[-1] // tile, i[-2], i[-1] % tile)) if swap else \
            (lambda *i: (*i[:-2], i[-2] // tile, i[-1], i[-2] % tile))
    else:  # B is (..., K, N), or (..., N, K) transposed
        layout = (lambda *i: (*i[:-2], i[-2] // tile, i[-1], i[-2] % tile)) if swap else \
            (lambda *i: (*i[:-2], i[-1] // tile, i[-2], i[-1] % tile))
    sch.transform_layout(r.red, ("read", index), layout)
    for producer in sch.get_producers(copy):  # the padding goes into the pack
        if sch.get(producer).name_hint == source:
            try_inline(sch, producer)
    return copy


def schedule_tiles(sch, cfg: Config, r: MatmulRoles, tile: Tile, tasks: Tasks, packs: tuple, loops: tuple) -> None:
    """The loop nest over ``loops`` (``_loop_nest``), then the blocks around
    it: A's pack in each task, B's per k block, the accumulators' zeroing,
    and the write-back (the whole reduction in registers) or C accumulated
    in memory, block by block."""
    task, ko, ku, acc = _loop_nest(sch, r, tile, tasks, loops)
    pack_a, pack_b = packs
    if pack_a is not None:
        sch.compute_at(pack_a, task, preserve_unit_loops=True)  # a K of 1 keeps its loop (_order_pack_a)
        _order_pack_a(sch, pack_a, tile.m, bool(cfg.workload.attrs.get("transpose_a")))
    if pack_b is not None and tasks.blocked:
        sch.compute_at(pack_b, ko)
    init = sch.decompose_reduction(r.red, ko if tasks.blocked else ku)
    if tasks.blocked:
        _flat_parallel(sch, init, r.lanes)
    else:
        sch.vectorize(sch.get_loops(init)[-1])
        _write_back(sch, acc, r.lanes, cfg)
    if pack_b is not None:
        skip = 1 if tasks.blocked else 0
        if not (cfg.workload.attrs.get("transpose_b") and _tiled_pack(sch, pack_b, tile.n, r.lanes, skip)):
            _flat_parallel(sch, pack_b, r.lanes, skip=skip)
    done = {_name(sch, b) for b in (r.red, acc, init, *packs) if b is not None}
    for name in [_name(sch, b) for b in blocks(sch)]:
        if name not in done:  # padding copies of unpacked operands; the unpadding and epilogue when blocked
            _schedule_rest(sch, sch.get_sblock(name), _name(sch, r.red), cfg)


def _loop_nest(sch, r: MatmulRoles, tile: Tile, tasks: Tasks, loops: tuple) -> tuple:
    """Order ``loops`` (batch loops, m, n panels, a panel's columns, k),
    outermost first: [k blocks], the tasks, n panels, m tiles, k steps, the
    register tile (vectorized along the panel, its rows and k steps
    unrolled); with the whole reduction in registers, a local accumulator
    tile. Returns (the task loop, the k-block loop or None, the k-step loop,
    the accumulator's write-back block or None)."""
    batch, m, no, ni, k = loops
    mo, mi = sch.split(m, [None, tile.m])
    mb, mo = sch.split(mo, [None, tasks.block_m]) if tasks.block_m else (None, mo)  # 0: every row tile
    nb, no = sch.split(no, [None, tasks.block_n])
    ko, ki = sch.split(k, [None, tasks.tile_k]) if tasks.blocked else (None, k)
    ku, kk = sch.split(ki, [None, tile.k])
    ranges = tuple(x for x in ((nb, mb) if tasks.cols_first else (mb, nb)) if x is not None)
    sch.reorder(*([ko] if tasks.blocked else []), *batch, *ranges, no, mo, ku, kk, mi, ni)
    acc = None
    if not tasks.blocked:  # the whole reduction in registers: a local tile written back once
        acc = sch.cache_write(r.red, 0, "local")
        sch.reverse_compute_at(acc, mo)
    sch.vectorize(ni)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(mi)
    sch.unroll(kk)
    task = sch.fuse(*batch, *ranges)
    if tasks.parallel:
        sch.parallel(task)
    return task, ko, ku, acc


def _order_pack_a(sch, pack_a, tile_m: int, transposed: bool) -> None:
    """Copy a task's A block one packed row ``[k, 0:tile_m]`` at a time, a
    vector store each: row by row, every element of the copy would be a
    scalar store ``tile_m`` floats from the last (64 x 512 -> 10 on one
    thread: 60 us with the copy in that order, 9 us without a copy at all)."""
    *_, first, second = sch.get_loops(pack_a)
    m, k = (second, first) if transposed else (first, second)
    mo, mi = sch.split(m, [None, tile_m])
    sch.reorder(mo, k, mi)
    sch.vectorize(mi)


def _write_back(sch, acc, lanes: int, cfg: Config) -> None:
    """Fold the un-padding and the epilogue (dense bias/relu, 1-D squeeze) into
    the block that writes the accumulator tile back, and vectorize it."""
    rest = fold_consumers(sch, acc)
    if rest is not None:  # e.g. a rank-changing squeeze: scheduled on its own
        schedule_injective(sch, rest, cfg, "epilogue.")
    own = sch.get_loops(acc)[3:]  # below (task, n panel, m tile)
    if not own:
        return
    inner = sch.fuse(*own) if len(own) > 1 else own[0]
    _, vec = sch.split(inner, [None, lanes])
    sch.vectorize(vec)


def _tiled_pack(sch, pack_b, tile_n: int, lanes: int, skip: int) -> bool:
    """Copy a transposed B (``[..., N, K]``) to its panels ``[N / tile_n, K,
    tile_n]`` in tiles of ``tile_n`` rows by ``lanes`` columns of B: each
    panel row (``tile_n`` columns of one k) is stored in vectors, gathered
    from the tile's rows, which stay in L1 while the tile's ``lanes`` k steps
    read them. Copied flat (a vector along K, each lane stored a panel row
    apart), every store touched as many lines, and the 256 x 1024 copy of a
    32 x 1024 x 256 product took 4x the product itself (figures:
    benchmarks/RESULTS.md, "Training steps on emeraldrapids"). False (nothing
    changed) where N or K is not whole tiles."""
    loops = sch.get_loops(pack_b)[skip:]
    if len(loops) < 2:
        return False
    *outer, n, k = loops
    n_ext, k_ext = const_int(extent(sch, n)), const_int(extent(sch, k))
    if n_ext is None or k_ext is None or n_ext % tile_n or k_ext % lanes:
        return False
    no, ni = sch.split(n, [None, tile_n])
    ko, ki = sch.split(k, [None, lanes])
    sch.reorder(*outer, no, ko, ki, ni)
    tasks = sch.fuse(*outer, no, ko)
    sch.parallel(tasks)
    sch.unroll(ki)
    sch.vectorize(ni)
    return True


def _flat_parallel(sch, block, lanes: int, skip: int = 0) -> None:
    """Fuse the block's loops below the first ``skip``; vectorize and parallelize."""
    loops = sch.get_loops(block)[skip:]
    if not loops:
        return
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    outer, vec = sch.split(fused, [None, lanes])
    sch.vectorize(vec)
    sch.parallel(outer)


def _name(sch, block) -> str:
    return sch.get(block).name_hint


def _schedule_rest(sch, block, red_name: str, cfg: Config) -> None:
    """A copy that feeds the micro-kernel stays a parallel pass of its own;
    one after it (the unpadding) is inlined into its consumer when it has one."""
    feeds = any(_name(sch, c) == red_name for c in sch.get_consumers(block))
    if feeds or not try_inline(sch, block):
        schedule_injective(sch, block, cfg, "pad." if _name(sch, block).endswith("_pad") else "epilogue.")
