"""CPU template for matmul, batched matmul and dense (with its bias/relu epilogue).

The GotoBLAS/BLIS recipe, one knob per decision. Loops, outermost first::

    [k blocks]                        only when tile_k < K (see below)
      pack a k-slice of B             (pack_b; every column, in parallel)
      parallel (batch, m block, n block):
        pack A's block                (pack_a; block_m x tile_k, stays in L2)
        n panels (tile_n wide):       the B panel (tile_k x tile_n) stays in L1
          m tiles (tile_m high):
            micro-kernel: tile_k steps of tile_m x tile_n FMAs, unroll_k at a time

``tile_m``    rows of the register tile: each loaded B vector feeds ``tile_m``
              FMAs. Default: the most rows whose accumulators, B vectors and
              the broadcast A value fit the vector registers (6 x 16 with
              AVX2's 16 registers, 12 x 32 with AVX-512's 32).
``tile_n``    columns of the register tile, a multiple of the vector lanes
              (default 2 vectors).
``unroll_k``  k steps unrolled inside the micro-kernel (default 4).
``tile_k``    k block. ``tile_k == K`` (the default up to K = 1024) keeps the
              accumulators in registers for the whole reduction and writes
              each output once, with the un-padding and the dense epilogue
              folded into that write. A smaller block makes the packed panels
              fit the caches for long reductions: C is zeroed first and each
              k block adds its part to it (LLVM keeps the tile in registers
              within a block: the loads and stores of C are loop-invariant
              in the micro-kernel and promoted).
``block_m``   register tiles of rows per parallel task: A's packed block
              (``block_m * tile_m x tile_k``) is sized to stay in L2.
``block_n``   n panels per parallel task (default all of them; fewer when the
              rows alone do not give every thread work).
``pack_a``    1 to copy each task's A block to ``[M / tile_m, K, tile_m]``
              right before its micro-kernels run, so they read A contiguously.
``pack_b``    1 to copy B to panels ``[N / tile_n, K, tile_n]`` (per k block).
``parallel``  1 to run the tasks on the thread pool.

Static shapes the tiles do not divide are padded (``pad_einsum``) instead of
predicated, so odd sizes keep the fast micro-kernel; the padding goes into
the packs and is cut off where the output is written.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..generic import schedule_injective
from ..util import blocks, const_int, extent, fold_consumers, is_reduction, try_inline

TILE_M = (1, 2, 3, 4, 6, 8, 12, 16)
FULL_K_MAX = 1024        # up to this K the whole reduction runs in registers by default
K_BLOCK = 512            # the default k block beyond it
A_BLOCK_BYTES = 192 << 10  # A's packed block: well inside a 512 KB L2 next to the B panel


def _round_up(x: int, f: int) -> int:
    return -(-x // f) * f


def _k_blocks(k: int, unroll: int) -> list[int]:
    return [d for d in range(unroll, k + 1, unroll) if k % d == 0]


def _divisors(n: int | None) -> tuple:
    """Tiles per task: divisors only, as a split with a tail would leave the
    write-back of the accumulator tile without its bounds check."""
    return tuple(d for d in range(1, n + 1) if n % d == 0) if n else (1,)


@register_template("cpu", ops=("matmul", "dense"))
def schedule_matmul(sch, block, cfg: Config) -> None:
    red = next(b for b in blocks(sch) if is_reduction(sch, b))
    loops = sch.get_loops(red)
    nbatch = len(loops) - 3
    m_ext, n_ext, k_ext = (const_int(extent(sch, lp)) for lp in loops[-3:])
    batch_ext = [const_int(extent(sch, lp)) for lp in loops[:-3]]
    dtype = str(sch.get(red).writes[0].source.dtype)
    lanes = cfg.target.lanes(dtype)
    elem = max(1, int("".join(c for c in dtype if c.isdigit()) or 32) // 8)
    a_matrix, b_matrix = (len(sch.get(red).reads[i].source.shape) >= 2 for i in (0, 1))

    tile_n = cfg.define_knob("tile_n", tuple(lanes * v for v in (1, 2, 3, 4)),
                             default=lanes * (2 if n_ext is None or n_ext > lanes else 1))
    vectors = -(-tile_n // lanes)
    fits = [t for t in TILE_M if t * vectors + vectors + 1 <= cfg.target.vector_registers]
    tile_m = cfg.define_knob("tile_m", TILE_M, default=max(t for t in fits if m_ext is None or t <= max(m_ext, 1)))
    unroll_k = cfg.define_knob("unroll_k", (1, 2, 4, 8), default=4 if k_ext is None or k_ext >= 4 else 1)
    pack_a = cfg.define_knob("pack_a", (0, 1), default=int(a_matrix)) and a_matrix
    pack_b = cfg.define_knob("pack_b", (0, 1), default=int(b_matrix)) and b_matrix
    par = cfg.define_knob("parallel", (0, 1), default=1)

    pads = [tile_m, tile_n, unroll_k]
    if any(e is None or e % p for e, p in zip((m_ext, n_ext, k_ext), pads)):
        # a symbolic dim is padded too: its last tile then never needs a bounds check but the write-back's
        sch.pad_einsum(red, [1] * nbatch + pads)
    k_pad = _round_up(k_ext, unroll_k) if k_ext else None
    k_opts = tuple(_k_blocks(k_pad, unroll_k)) if k_pad else (unroll_k,)
    tile_k = cfg.define_knob("tile_k", k_opts, default=_default_k_block(k_pad, k_opts))
    blocked = k_pad is not None and tile_k < k_pad
    k_step = tile_k if k_pad else 1024  # what a task's A block holds along k

    m_tiles = -(-m_ext // tile_m) if m_ext else None
    n_panels = -(-n_ext // tile_n) if n_ext else None
    block_m = cfg.define_knob("block_m", _divisors(m_tiles),
                              default=_default_block_m(m_tiles, tile_m * k_step * elem, batch_ext, cfg.target.cores))
    row_tasks = _count(batch_ext) * -(-m_tiles // block_m) if m_tiles and None not in batch_ext else None
    block_n = cfg.define_knob("block_n", _divisors(n_panels),
                              default=_default_block_n(n_panels, row_tasks, cfg.target.cores))

    packs = [_pack(sch, red, 0, tile_m, cfg, transposed="transpose_a") if pack_a else None,
             _pack(sch, red, 1, tile_n, cfg, transposed="transpose_b") if pack_b else None]

    loops = sch.get_loops(red)
    batch, (m, n, k) = loops[:-3], loops[-3:]
    mo, mi = sch.split(m, [None, tile_m])
    no, ni = sch.split(n, [None, tile_n])
    mb, mo = sch.split(mo, [None, block_m])
    nb, no = sch.split(no, [None, block_n])
    ko, ki = sch.split(k, [None, tile_k]) if blocked else (None, k)
    ku, kk = sch.split(ki, [None, unroll_k])
    outer = [ko] if blocked else []
    sch.reorder(*outer, *batch, mb, nb, no, mo, ku, kk, mi, ni)
    acc = None
    if not blocked:  # the whole reduction in registers: a local tile written back once
        acc = sch.cache_write(red, 0, "local")
        sch.reverse_compute_at(acc, mo)
    sch.vectorize(ni)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(mi)
    sch.unroll(kk)
    task = sch.fuse(*batch, mb, nb)
    if par:
        sch.parallel(task)
    if packs[0] is not None:
        sch.compute_at(packs[0], task)
    if packs[1] is not None and blocked:
        sch.compute_at(packs[1], ko)
    init = sch.decompose_reduction(red, ko if blocked else ku)

    if blocked:
        _flat_parallel(sch, init, lanes)
    else:
        sch.vectorize(sch.get_loops(init)[-1])
        _write_back(sch, acc, lanes, cfg)
    if packs[1] is not None:
        _flat_parallel(sch, packs[1], lanes, skip=1 if blocked else 0)
    done = {_name(sch, b) for b in (red, acc, init, *packs) if b is not None}
    for name in [_name(sch, b) for b in blocks(sch)]:
        if name not in done:  # padding copies of unpacked operands; the unpadding and epilogue when blocked
            _schedule_rest(sch, sch.get_sblock(name), _name(sch, red), cfg)


def _default_k_block(k_pad, options) -> int:
    if k_pad is None or k_pad <= FULL_K_MAX:
        return options[-1]
    return max([d for d in options if d <= K_BLOCK] or [options[0]])


def _default_block_m(m_tiles, row_bytes: int, batch_ext, cores: int) -> int:
    if not m_tiles:
        return 1
    fit = max(1, A_BLOCK_BYTES // max(row_bytes, 1))
    tasks_wanted = 2 * cores if None in batch_ext else -(-2 * cores // _count(batch_ext))
    even = max(1, m_tiles // max(tasks_wanted, 1))  # leave every thread a few tasks when rows allow
    return max(b for b in _divisors(m_tiles) if b <= min(fit, even))


def _default_block_n(n_panels, row_tasks, cores: int) -> int:
    if not n_panels:
        return 1
    if row_tasks is None or row_tasks >= 2 * cores:
        return n_panels
    want = -(-2 * cores // row_tasks)  # split the columns too until every thread has work
    return max(b for b in _divisors(n_panels) if n_panels // b >= want or b == 1)


def _count(dims) -> int:
    total = 1
    for d in dims:
        total *= d or 1
    return total


def _pack(sch, red, index: int, tile: int, cfg: Config, transposed: str):
    """Copy operand ``index`` to ``[..., outer / tile, K, tile]`` (its padding folded in)."""
    source = str(sch.get(red).reads[index].source.name)
    pack = sch.cache_read(red, index, "global")
    swap = bool(cfg.workload.attrs.get(transposed))
    if index == 0:  # A is (..., M, K), or (..., K, M) transposed
        layout = (lambda *i: (*i[:-2], i[-1] // tile, i[-2], i[-1] % tile)) if swap else \
            (lambda *i: (*i[:-2], i[-2] // tile, i[-1], i[-2] % tile))
    else:  # B is (..., K, N), or (..., N, K) transposed
        layout = (lambda *i: (*i[:-2], i[-2] // tile, i[-1], i[-2] % tile)) if swap else \
            (lambda *i: (*i[:-2], i[-1] // tile, i[-2], i[-1] % tile))
    sch.transform_layout(red, ("read", index), layout)
    for producer in sch.get_producers(pack):  # the padding goes into the pack
        if sch.get(producer).name_hint == source:
            try_inline(sch, producer)
    return pack


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
