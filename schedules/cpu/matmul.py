"""CPU templates for matmul, batched matmul and dense (with its bias/relu
epilogue: ``schedule_matmul``) and dense_packed (dense whose weight is already
in panels: ``schedule_dense_packed``, no pack_b, and the panel width is the
weight's, not a knob; see ``panel_width``). Each is a straight-line schedule
on its loops' roles (``matmul_roles.py``) of the steps in ``matmul_steps.py``.

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
``tile_k``    k block. ``tile_k == K`` (the default up to K = 1024, for
              ``dense_packed`` while a weight panel takes at most
              ``PANEL_L2_SHARE`` of L2) keeps the
              accumulators in registers for the whole reduction and writes
              each output once, with the un-padding and the dense epilogue
              folded into that write. A smaller block makes the packed panels
              fit the caches for long reductions: C is zeroed first and each
              k block adds its part to it (LLVM keeps the tile in registers
              within a block: the loads and stores of C are loop-invariant
              in the micro-kernel and promoted).
``block_m``   register tiles of rows per parallel task: A's packed block
              (``block_m * tile_m x tile_k``) is sized to stay in L2
              (``A_BLOCK_SHARE`` of ``Target.l2_bytes``). A symbolic M
              takes 1 or 0 (``WHOLE``: every row tile in one task); 0 by
              default where the threads split B's columns (``cols_first``):
              each thread then streams its range of B once per call, not
              once per 8 rows (BERT-base at 128 tokens, ONNX Runtime / kiln
              0.79 -> 0.96 at batch 1).
``block_n``   n panels per parallel task (default all of them; fewer when the
              rows alone do not give every thread work).
``pack_a``    1 to copy each task's A block to ``[M / tile_m, K, tile_m]``
              right before its micro-kernels run, so they read A contiguously
              (default 1; 0 when B is one panel and A needs no padding:
              nothing reuses the copy. A padded A, a symbolic M included,
              is copied either way, and the pack is that copy in the
              micro-kernel's order: faster than the copy in A's own order
              for A^T of 128 x 512 times a 128 x 10 gradient and a
              symbolic-batch 64 x 512 -> 10 layer; figures:
              benchmarks/RESULTS.md, "Template choices: the measurements
              behind schedules/", ``matmul.py``).
``pack_b``    1 to copy B to panels ``[N / tile_n, K, tile_n]`` (per k block).
              Default: 1 for a B read transposed, a batched product or a
              transposed A; for a B read as laid out past ``PACK_B_ROWS``
              rows (or a symbolic M), or from ``PACK_B_WIDE_ROWS`` rows where
              B's rows are ``PACK_B_ROW_BYTES`` or more apart: a panel's
              rows then fall in a few cache sets and evict each other
              (1024 x 512 x 2048 on a 2 MB L2: 14.7 -> 7.2 ms packed, 768 x
              3072: 44.9 -> 16.5 ms; 3 KB apart, 768 columns, even); else its
              panels are read in place (dense 32 x 256 -> 1024: 0.130 ->
              0.085 ms).
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

The defaults were measured with ``python benchmarks/compare_configs.py OP
--shape ... --config A --config B`` (configs of one kernel interleaved) and
``kiln bench --suite cpu`` (its matmul and dense rows); figures:
benchmarks/RESULTS.md, "Template choices: the measurements behind
schedules/", ``matmul.py``.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..util import divisors
from .matmul_roles import MatmulRoles, matmul_roles
from .matmul_steps import Tasks, Tile, pack, pad_to_tiles, schedule_tiles

TILE_M = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
# the register tile's rows where they fit (AVX-512) and M has as many: 8 rows of 2 vectors keep 16 FMAs in
# flight, and the tallest tile, 12, was slower at every shape measured (dense and matmul, static and
# symbolic M; figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
TALL_TILE_M = 8
# a B of more bytes than this is split among the threads by columns (``cols_first``)
COLS_FIRST_BYTES = 256 << 10
FEW_ROWS = 8             # up to this many rows the default is the GEMV-shaped schedule (``few_rows``)
# multiply-adds from which two threads beat one for few rows, measured on 2 cores (figures:
# benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
PARALLEL_WORK = 1 << 16
# up to this many rows a B read as laid out is not packed by default: its panels are read in place (a
# tile_n-wide slice of each of K rows, which the prefetchers stream), and a copy of B costs a whole pass over
# it for the few row tiles that reuse it: dense 32 x 256 -> 1024 on 2 threads 0.130 -> 0.085 ms, 256 rows
# even, 2048 rows even (figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
PACK_B_ROWS = 1024
# B's rows this many bytes apart or more are packed from ``PACK_B_WIDE_ROWS`` rows: the in-place panel's rows
# share a few cache sets (1024 x 512 x 2048: 2x packed; 1000 columns, 4000 bytes: 2x; 768 columns, 3 KB: even;
# 2048 columns at 16 rows: the copy 1.4x slower, 32 rows even, 64 rows 1.4x faster; figures: benchmarks/RESULTS.md,
# "Training steps on emeraldrapids")
PACK_B_ROW_BYTES, PACK_B_WIDE_ROWS = 3584, 64
FULL_K_MAX = 1024        # up to this K the whole reduction runs in registers by default
K_BLOCK = 512            # the default k block beyond it
#: ``dense_packed`` keeps the whole reduction in registers further, while a weight panel (K x ``tile_n``) takes
#: at most this share of a core's L2: a blocked K zeroes C, adds each block to it and runs the epilogue as a
#: pass of its own over C (BERT-base's 3072 -> 768 layers with their bias and residual add, 1024 rows: 18.4 ms,
#: 16.4 without the residual; the model at batch 8 0.977 -> 0.996x ONNX Runtime, batch 1 0.953 -> 0.977 on
#: ``emeraldrapids``, whose 2 MB L2 holds a 3072-long panel of 32 columns four times over)
PANEL_L2_SHARE = 1 / 4
#: the share of a core's L2 (``Target.l2_bytes``) A's packed block takes by default, next to the B panel: 192 KB
#: of Zen 3's 512 KB, 768 KB of a Xeon's 2 MB (dense 128 x 768 -> 3072 with its weight read from memory, the
#: rows in 4 blocks -> 1, 2.79 -> 2.35 ms on ``emeraldrapids``; figures: benchmarks/RESULTS.md, "Template
#: choices: the measurements behind schedules/")
A_BLOCK_SHARE = 3 / 8
#: ``block_m`` for every tile of a symbolic M in one task: the default where B's columns are split among the
#: threads (``cols_first``), so that each thread streams its range of B once per call, not once per 8 rows
#: (BERT-base, 128 tokens a row of the batch: its dense layers read 340 MB of weights; see ``_tasks``)
WHOLE = 0
# the least share of the threads' time spent working that the default row blocks leave (``_balance``): a
# weight gradient 784 x 128 -> 512 (X^T dY, 98 tiles of 8 rows) ran faster in 14 blocks than in 7 on 2
# threads (figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
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


@register_template("cpu", ops=("matmul", "dense"))
def schedule_matmul(sch, block, cfg: Config) -> None:
    """``matmul`` and ``dense``: B copied into panels of ``tile_n`` columns (``pack_b``)."""
    r = matmul_roles(sch, cfg)
    width = panel_width(r.n, r.dtype, cfg.target) // r.lanes
    if _few(r):  # the rows themselves must be a register tile (rows x vectors, the B vectors, a broadcast)
        width = max([v for v in range(1, width + 1) if r.m * v + v + 1 <= cfg.target.vector_registers] or [1])
    tile_n = cfg.define_knob("tile_n", tuple(r.lanes * v for v in (1, 2, 3, 4)), default=r.lanes * width)
    few = cfg.define_knob("few_rows", (0, 1), default=int(_few(r)))
    tile = _register_tile(cfg, r, tile_n, few, exact=bool(few))
    pack_a = _pack_a(cfg, r, tile, few)
    pack_b = cfg.define_knob("pack_b", (0, 1), default=int(r.b_matrix and not few and _packs_b(cfg, r))) \
        and r.b_matrix
    par = _parallel(cfg, r, few)
    pad_to_tiles(sch, r, tile)
    tasks = _tasks(cfg, r, tile, few, par)
    packs = (pack(sch, r, 0, tile.m, cfg, transposed="transpose_a") if pack_a else None,
             pack(sch, r, 1, tile.n, cfg, transposed="transpose_b") if pack_b else None)
    *batch, m, n, k = sch.get_loops(r.red)
    no, ni = sch.split(n, [None, tile.n])
    schedule_tiles(sch, cfg, r, tile, tasks, packs, (batch, m, no, ni, k))


@register_template("cpu", ops=("dense_packed",))
def schedule_dense_packed(sch, block, cfg: Config) -> None:
    """``dense_packed``: B read from its panels, whose width is ``tile_n``;
    a k step that divides K by default (padding K would copy the weight)."""
    r = matmul_roles(sch, cfg, panels=True)
    few = cfg.define_knob("few_rows", (0, 1), default=int(_few(r)))
    tile = _register_tile(cfg, r, r.panel, few, exact=True)
    pack_a = _pack_a(cfg, r, tile, few)
    par = _parallel(cfg, r, few)
    pad_to_tiles(sch, r, tile)
    full_k = max(FULL_K_MAX, int(PANEL_L2_SHARE * cfg.target.l2_bytes) // (tile.n * r.elem))
    tasks = _tasks(cfg, r, tile, few, par, full_k)
    packs = (pack(sch, r, 0, tile.m, cfg, transposed="transpose_a") if pack_a else None, None)
    m, no, ni, k = sch.get_loops(r.red)
    schedule_tiles(sch, cfg, r, tile, tasks, packs, ((), m, no, ni, k))


def _packs_b(cfg: Config, r: MatmulRoles) -> bool:
    """``pack_b``'s default beyond a few rows: B read transposed (strided panels)
    is packed; B read as laid out only past ``PACK_B_ROWS`` rows (or rows not
    known), from ``PACK_B_WIDE_ROWS`` where its rows are ``PACK_B_ROW_BYTES``
    apart or more, in a batched product, or beside a transposed A."""
    attrs = cfg.workload.attrs
    laid_out = not attrs.get("transpose_a") and not attrs.get("transpose_b") and not r.batch
    if not laid_out or r.m is None:
        return True
    return r.m > PACK_B_ROWS or (r.n is not None and r.n * r.elem >= PACK_B_ROW_BYTES and r.m >= PACK_B_WIDE_ROWS)


def _few(r: MatmulRoles) -> bool:
    """``few_rows``' default: a concrete M of at most ``FEW_ROWS``."""
    return r.m is not None and r.m <= FEW_ROWS


def _register_tile(cfg: Config, r: MatmulRoles, tile_n: int, few: int, exact: bool) -> Tile:
    """``tile_m`` (the most rows that fit the registers beside ``tile_n``'s
    vectors, ``TALL_TILE_M`` where it fits; the rows themselves for few rows
    of a symbolic M) and ``unroll_k`` (with ``exact``, one that divides K)."""
    vectors = -(-tile_n // r.lanes)
    fits = [t for t in TILE_M if t * vectors + vectors + 1 <= cfg.target.vector_registers]
    tall = max(t for t in fits if r.m is None or t <= max(r.m, 1))
    if TALL_TILE_M in fits and (r.m is None or r.m >= TALL_TILE_M):
        tall = TALL_TILE_M
    tile_m = cfg.define_knob("tile_m", TILE_M, default=1 if few and r.m is None else tall)
    unroll_k = cfg.define_knob("unroll_k", (1, 2, 4, 8), default=_default_unroll(r.k, exact))
    return Tile(tile_m, tile_n, unroll_k)


def _pack_a(cfg: Config, r: MatmulRoles, tile: Tile, few: int) -> int:
    """``pack_a``: A's block is worth a copy when several B panels reuse it,
    or when A is copied anyway to pad it."""
    one_panel = r.n is not None and r.n <= tile.n
    # a symbolic dim is padded too (``pad_to_tiles``), so a symbolic M is a padded A
    padded_a = any(t > 1 and (e is None or e % t) for e, t in ((r.m, tile.m), (r.k, tile.k)))
    return cfg.define_knob("pack_a", (0, 1), default=int(
        r.a_matrix and not few and (not one_panel or padded_a))) and r.a_matrix


def _parallel(cfg: Config, r: MatmulRoles, few: int) -> int:
    """``parallel``; few rows only from ``PARALLEL_WORK`` multiply-adds, a
    symbolic M counting as one row (the work the smallest call does)."""
    return cfg.define_knob("parallel", (0, 1), default=int(not few or _count((r.m, r.n, r.k)) >= PARALLEL_WORK))


def _tasks(cfg: Config, r: MatmulRoles, tile: Tile, few: int, par: int, full_k: int = FULL_K_MAX) -> Tasks:
    """``tile_k``, ``block_m``, ``cols_first`` and ``block_n``, on the
    padded dims; up to a K of ``full_k`` the whole reduction by default."""
    k_pad = _round_up(r.k, tile.k) if r.k else None
    k_opts = tuple(_k_blocks(k_pad, tile.k)) if k_pad else (tile.k,)
    tile_k = cfg.define_knob("tile_k", k_opts, default=_default_k_block(k_pad, k_opts, full_k))
    k_step = tile_k if k_pad else 1024  # what a task's A block holds along k
    m_tiles = -(-r.m // tile.m) if r.m else None
    n_panels = -(-r.n // tile.n) if r.n else None
    cores = cfg.target.cores
    b_bytes = (k_pad or 0) * (r.n or 0) * r.elem
    split = _column_range(n_panels, cores)
    wide = bool(par) and not few and b_bytes > COLS_FIRST_BYTES and split is not None
    a_block = int(A_BLOCK_SHARE * cfg.target.l2_bytes)
    block_m = cfg.define_knob("block_m", divisors(m_tiles) if m_tiles else (1, WHOLE), default=(
        _default_block_m(m_tiles, tile.m * k_step * r.elem, r.batch, cores, a_block, wide) if m_tiles else
        WHOLE if wide else 1))
    row_tasks = _count(r.batch) * -(-m_tiles // block_m) if m_tiles and None not in r.batch else None
    row_tasks = row_tasks or (1 if few or block_m == WHOLE else None)  # the columns give the threads their work
    cols_first = cfg.define_knob("cols_first", (0, 1), default=int(wide))
    block_n = cfg.define_knob("block_n", divisors(n_panels), default=(
        split if cols_first and split else _default_block_n(n_panels, row_tasks, cores)))
    return Tasks(tile_k, k_pad is not None and tile_k < k_pad, block_m, block_n, cols_first, par)


def _default_unroll(k: int | None, exact: bool) -> int:
    if exact and k is not None:  # a k step that divides K: padding K would copy the weight on every call
        return max(u for u in (1, 2, 4) if k % u == 0)
    return 4 if k is None or k >= 4 else 1


def _round_up(x: int, f: int) -> int:
    return -(-x // f) * f


def _k_blocks(k: int, unroll: int) -> list[int]:
    return [d for d in range(unroll, k + 1, unroll) if k % d == 0]


def _default_k_block(k_pad, options, full_k: int) -> int:
    if k_pad is None or k_pad <= full_k:
        return options[-1]
    return max([d for d in options if d <= K_BLOCK] or [options[0]])


def _default_block_m(m_tiles, row_bytes: int, batch_ext, cores: int, a_block: int, wide: bool = False) -> int:
    """The most row tiles whose packed rows fit ``a_block`` bytes; with B's
    columns split among the threads (``wide``) that is all, else the rows
    also leave every thread a few tasks, dealt out evenly (``_balance``)."""
    if not m_tiles:
        return 1
    fit = max(1, a_block // max(row_bytes, 1))
    if wide:  # the columns give the threads their work: each row block reads the thread's range of B once
        return max(b for b in divisors(m_tiles) if b <= fit)
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
