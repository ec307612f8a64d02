"""CPU template for matmul, batched matmul, dense (with its bias/relu epilogue)
and dense_packed (dense whose weight is already in panels: no pack_b, and the
panel width is the weight's, not a knob; see ``panel_width``).

The GotoBLAS/BLIS recipe, one knob per decision. Loops, outermost first::

    [k blocks]                        only when tile_k < K (see below)
      pack a k-slice of B             (pack_b; every column, in parallel)
      parallel (batch, m block, n block):  (n block, m block) with cols_first
        pack A's block                (pack_a; block_m x tile_k, stays in L2)
        n panels (tile_n wide):       the B panel (tile_k x tile_n) stays in L1
          m tiles (tile_m high):
            micro-kernel: tile_k steps of tile_m x tile_n FMAs, unroll_k at a time

``tile_m``    rows of the register tile: each loaded B vector feeds ``tile_m``
              FMAs. Default: the most rows whose accumulators, B vectors and
              the broadcast A value fit the vector registers (6 x 16 with
              AVX2's 16 registers), but 8 where that fits and M has 8 rows
              (``TALL_TILE_M``, AVX-512: 12 x 32 fits, and was slower on
              every shape measured, as well as padding the multiples of 8
              that most batches are).
``tile_n``    columns of the register tile, a multiple of the vector lanes
              (default 2 vectors; for a few rows, the most vectors up to 2
              that leave the rows themselves a register tile: 7 rows on
              AVX2 take one vector, not a 6-row tile padded to 12 rows).
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
              right before its micro-kernels run, so they read A contiguously
              (default 1; 0 when B is one panel and A needs no padding:
              nothing reuses the copy. A padded A, a symbolic M included,
              is copied either way, and the pack is that copy in the
              micro-kernel's order: A^T of 128 x 512 times a 128 x 10
              gradient, 6-row tiles on AVX2, 97 -> 32 us; a symbolic-batch
              64 x 512 -> 10 layer on znver4 14.2 -> 10.9 us).
``pack_b``    1 to copy B to panels ``[N / tile_n, K, tile_n]`` (per k block).
``cols_first`` 1 to order the tasks column range first: the threads split B's
              columns and each runs every row against its range, so a B too
              large to share a core's L2 with the rest (a 784 x 512 layer,
              1.6 MB) is read from memory once per call, not once per thread.
              Default: 1 in parallel when B is over ``COLS_FIRST_BYTES``
              (``block_n`` then 1/cores of the panels); 16 rows of
              784 -> 512 on 2 threads 76 -> 62 us, 128 rows 419 -> 349 us;
              a small B fits every core's cache and keeps the row split, as
              does a prime count of panels (``_column_range``).
``parallel``  1 to run the tasks on the thread pool.
``few_rows``  1 for a GEMV-shaped schedule for a few rows (a batch of 1-8):
              ``tile_m`` the rows themselves (no padding to a tall tile; 1
              for a symbolic M), no packs (one pass over the weight is all the
              reuse there is), a k step that divides K (no padded copy of the
              weight), the columns split among the threads, and ``parallel``
              only from ``PARALLEL_WORK`` multiply-adds (a symbolic M counts
              as one row). Default: 1 for a concrete M <= ``FEW_ROWS``, else
              0. A symbolic-batch kernel meant for small batches is built with
              ``config={"few_rows": 1}``; the default ``{}`` keeps the tall
              tile, the right choice for large batches.

Static shapes the tiles do not divide are padded (``pad_einsum``) instead of
predicated, so odd sizes keep the fast micro-kernel; the padding goes into
the packs and is cut off where the output is written.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..generic import schedule_injective
from ..util import blocks, const_int, divisors, extent, fold_consumers, is_reduction, try_inline

TILE_M = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
# the register tile's rows where they fit (AVX-512) and M has as many: 8 rows of 2 vectors keep 16 FMAs in
# flight, and the tallest tile, 12, was slower at every shape measured. A symbolic M: 64 x 784 -> 512 on 2
# threads, emeraldrapids: 188-227 us against 246-252, 128 rows 375-400 against 418. Static shapes, same
# machine, best of 4 interleaved runs, 8 against 12 rows: dense 64/128/256 x 784 -> 512 0.244/0.407/0.797
# against 0.287/0.471/0.904 ms, 128 x 512 -> 256 0.146 against 0.161, matmul 512^3 1.37 against 1.43,
# 1024^3 8.7 against 9.2
TALL_TILE_M = 8
# a B of more bytes than this is split among the threads by columns (``cols_first``)
COLS_FIRST_BYTES = 256 << 10
FEW_ROWS = 8             # up to this many rows the default is the GEMV-shaped schedule (``few_rows``)
# multiply-adds from which two threads beat one for few rows: measured on 2 cores (znver5),
# 1x256->256 1.96 us serial / 1.71 parallel, 1x64->128 0.21 / 0.88, 1x784->512 14.6 / 6.9
PARALLEL_WORK = 1 << 16
FULL_K_MAX = 1024        # up to this K the whole reduction runs in registers by default
K_BLOCK = 512            # the default k block beyond it
A_BLOCK_BYTES = 192 << 10  # A's packed block: well inside a 512 KB L2 next to the B panel
# the least share of the threads' time spent working that the default row blocks leave (``_balance``):
# a weight gradient 784 x 128 -> 512 (X^T dY, 98 tiles of 8 rows) in 7 blocks ran 0.56 ms on 2 threads
# (znver4), in 14 blocks 0.50
BALANCE = 0.9
MAX_TASKS = 8  # per thread, the most row blocks a better balance may bring


def panel_width(n: int | None, dtype: str, target) -> int:
    """The B panel width (``tile_n``) the template chooses by default for ``n``
    columns of ``dtype`` on ``target``: two vectors, one when ``n`` fits in one.

    An exporter packs a constant dense weight with ``pack_dense_weight`` at
    ``bn = panel_width(N, dtype, target)`` so that ``dense_packed`` reads the
    same register tile the template would have packed for ``dense``.
    """
    lanes = target.lanes(dtype)
    return lanes * (2 if n is None or n > lanes else 1)


def _default_unroll(k: int | None, exact: bool) -> int:
    if exact and k is not None:  # a k step that divides K: padding K would copy the weight on every call
        return max(u for u in (1, 2, 4) if k % u == 0)
    return 4 if k is None or k >= 4 else 1


def _round_up(x: int, f: int) -> int:
    return -(-x // f) * f


def _k_blocks(k: int, unroll: int) -> list[int]:
    return [d for d in range(unroll, k + 1, unroll) if k % d == 0]


@register_template("cpu", ops=("matmul", "dense", "dense_packed"))
def schedule_matmul(sch, block, cfg: Config) -> None:
    red = next(b for b in blocks(sch) if is_reduction(sch, b))
    loops = sch.get_loops(red)
    prepacked = cfg.workload.op.name == "dense_packed"  # loops (m, panel, lane, k): B is already in panels
    nbatch = len(loops) - 3 - prepacked
    m_ext, k_ext = (const_int(extent(sch, lp)) for lp in (loops[nbatch], loops[-1]))
    batch_ext = [const_int(extent(sch, lp)) for lp in loops[:nbatch]]
    dtype = str(sch.get(red).writes[0].source.dtype)
    lanes = cfg.target.lanes(dtype)
    elem = max(1, int("".join(c for c in dtype if c.isdigit()) or 32) // 8)
    a_matrix, b_matrix = (len(sch.get(red).reads[i].source.shape) >= 2 for i in (0, 1))

    registers = cfg.target.vector_registers
    few_rows = m_ext is not None and m_ext <= FEW_ROWS
    if prepacked:  # the panel width is the weight's layout, not a choice
        panels, tile_n = (const_int(extent(sch, lp)) for lp in loops[-3:-1])
        n_ext = panels * tile_n if panels else None
    else:
        n_ext = const_int(extent(sch, loops[-2]))
        width = panel_width(n_ext, dtype, cfg.target) // lanes
        if few_rows:  # the rows themselves must be a register tile (rows x vectors, the B vectors, a broadcast)
            width = max([v for v in range(1, width + 1) if m_ext * v + v + 1 <= registers] or [1])
        tile_n = cfg.define_knob("tile_n", tuple(lanes * v for v in (1, 2, 3, 4)), default=lanes * width)
    few = cfg.define_knob("few_rows", (0, 1), default=int(few_rows))
    vectors = -(-tile_n // lanes)
    fits = [t for t in TILE_M if t * vectors + vectors + 1 <= registers]
    tall = max(t for t in fits if m_ext is None or t <= max(m_ext, 1))
    if TALL_TILE_M in fits and (m_ext is None or m_ext >= TALL_TILE_M):
        tall = TALL_TILE_M
    tile_m = cfg.define_knob("tile_m", TILE_M, default=1 if few and m_ext is None else tall)
    unroll_k = cfg.define_knob("unroll_k", (1, 2, 4, 8), default=_default_unroll(k_ext, prepacked or few))
    # A's block is worth a copy when several B panels reuse it, or when A is copied anyway to pad it
    one_panel = n_ext is not None and n_ext <= tile_n
    # a symbolic dim is padded too (below), so a symbolic M is a padded A
    padded_a = any(t > 1 and (e is None or e % t) for e, t in ((m_ext, tile_m), (k_ext, unroll_k)))
    pack_a = cfg.define_knob("pack_a", (0, 1), default=int(
        a_matrix and not few and (not one_panel or padded_a))) and a_matrix
    pack_b = 0 if prepacked else cfg.define_knob("pack_b", (0, 1), default=int(b_matrix and not few)) and b_matrix
    # few rows: a symbolic M counts as one row (the work the smallest call does)
    par = cfg.define_knob("parallel", (0, 1), default=int(not few or _count((m_ext, n_ext, k_ext)) >= PARALLEL_WORK))

    pads = [tile_m, tile_n, unroll_k]
    if any(p > 1 and (e is None or e % p) for e, p in zip((m_ext, n_ext, k_ext), pads)):
        # a symbolic dim is padded too: its last tile then never needs a bounds check but the write-back's
        sch.pad_einsum(red, [1] * nbatch + ([tile_m, 1, 1, unroll_k] if prepacked else pads))
    k_pad = _round_up(k_ext, unroll_k) if k_ext else None
    k_opts = tuple(_k_blocks(k_pad, unroll_k)) if k_pad else (unroll_k,)
    tile_k = cfg.define_knob("tile_k", k_opts, default=_default_k_block(k_pad, k_opts))
    blocked = k_pad is not None and tile_k < k_pad
    k_step = tile_k if k_pad else 1024  # what a task's A block holds along k

    m_tiles = -(-m_ext // tile_m) if m_ext else None
    n_panels = -(-n_ext // tile_n) if n_ext else None
    block_m = cfg.define_knob("block_m", divisors(m_tiles),
                              default=_default_block_m(m_tiles, tile_m * k_step * elem, batch_ext, cfg.target.cores))
    row_tasks = _count(batch_ext) * -(-m_tiles // block_m) if m_tiles and None not in batch_ext else None
    row_tasks = row_tasks or (1 if few else None)  # few rows: the columns give the threads their work
    b_bytes = (k_pad or 0) * (n_ext or 0) * elem
    split = _column_range(n_panels, cfg.target.cores)
    cols_first = cfg.define_knob("cols_first", (0, 1), default=int(
        bool(par) and not few and b_bytes > COLS_FIRST_BYTES and split is not None))
    block_n = cfg.define_knob("block_n", divisors(n_panels), default=(
        split if cols_first and split else _default_block_n(n_panels, row_tasks, cfg.target.cores)))

    packs = [_pack(sch, red, 0, tile_m, cfg, transposed="transpose_a") if pack_a else None,
             _pack(sch, red, 1, tile_n, cfg, transposed="transpose_b") if pack_b else None]

    loops = sch.get_loops(red)
    if prepacked:
        batch, (m, no, ni, k) = [], loops
    else:
        batch, (m, n, k) = loops[:-3], loops[-3:]
        no, ni = sch.split(n, [None, tile_n])
    mo, mi = sch.split(m, [None, tile_m])
    mb, mo = sch.split(mo, [None, block_m])
    nb, no = sch.split(no, [None, block_n])
    ko, ki = sch.split(k, [None, tile_k]) if blocked else (None, k)
    ku, kk = sch.split(ki, [None, unroll_k])
    outer = [ko] if blocked else []
    sch.reorder(*outer, *batch, *((nb, mb) if cols_first else (mb, nb)), no, mo, ku, kk, mi, ni)
    acc = None
    if not blocked:  # the whole reduction in registers: a local tile written back once
        acc = sch.cache_write(red, 0, "local")
        sch.reverse_compute_at(acc, mo)
    sch.vectorize(ni)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(mi)
    sch.unroll(kk)
    task = sch.fuse(*batch, *((nb, mb) if cols_first else (mb, nb)))
    if par:
        sch.parallel(task)
    if packs[0] is not None:
        sch.compute_at(packs[0], task, preserve_unit_loops=True)  # a K of 1 keeps its loop (_order_pack_a)
        _order_pack_a(sch, packs[0], tile_m, bool(cfg.workload.attrs.get("transpose_a")))
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
    options = [b for b in divisors(m_tiles) if b <= min(fit, even)]
    batch = 1 if None in batch_ext else _count(batch_ext)
    balanced = [b for b in options if m_tiles // b * batch <= MAX_TASKS * cores
                and _balance(m_tiles // b * batch, cores) >= BALANCE]  # more tasks: B read again by each
    return max(balanced or options)


def _balance(tasks: int, cores: int) -> float:
    """The share of the threads' time spent working when ``tasks`` equal
    tasks are dealt out in turns of ``cores``: 7 tasks on 2 cores 7/8."""
    return tasks / (-(-tasks // cores) * cores)


def _column_range(n_panels: int | None, cores: int) -> int | None:
    """Panels per column range when each thread takes one: 1/cores of them;
    None when no divisor makes at most 2 x cores ranges (a prime count of
    panels): each range packs A's block again (129 x 1000 x 257 on AVX2, 17
    ranges of one panel: 90 GFLOPS, one range: 127)."""
    if not n_panels or n_panels < cores:
        return None
    width = max(b for b in divisors(n_panels) if n_panels // b >= cores)
    return width if n_panels // width <= 2 * cores else None


def _default_block_n(n_panels, row_tasks, cores: int) -> int:
    if not n_panels:
        return 1
    if row_tasks is None or row_tasks >= 2 * cores:
        return n_panels
    want = -(-2 * cores // row_tasks)  # split the columns too until every thread has work
    return max(b for b in divisors(n_panels) if n_panels // b >= want or b == 1)


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


def _order_pack_a(sch, pack, tile_m: int, transposed: bool) -> None:
    """Copy a task's A block one packed row ``[k, 0:tile_m]`` at a time, a
    vector store each: row by row, every element of the copy would be a
    scalar store ``tile_m`` floats from the last (64 x 512 -> 10 on one
    thread: 60 us with the copy in that order, 9 us without a copy at all)."""
    *_, first, second = sch.get_loops(pack)
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
