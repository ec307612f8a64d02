"""Layer normalization (``layer_norm``, ``layer_norm_grad``) on the CPU: each
row normalized in one pass over memory, the rows shared among the threads.

The ops' per-row stages — the mean and the variance (the gradient's means
of ``gy w`` and ``gy w xhat`` too), then the row's output — run back to
back for one row while it is in L1 (a few KB): each reduction summed in
vector slices of the row (``rfactor``), the output written vectorized.
The generic schedule runs each stage as a parallel pass of its own over
the whole input.

Every row stage's nest starts with the loops over the rows, so these are
fused in each and merged into one loop (as ``norm.py`` merges BatchNorm's
channel loops). No stage is moved under another's loop: ``compute_at``
refuses a stage whose output is read outside that loop, as the gradient's
mean and ``rstd`` are.

The gradient's sums over the rows (``dweight``, ``dbias``) join the same
pass where ``chunks`` divides the rows: the row loop is split into chunks,
one parallel task each, and each chunk adds its rows into partial sums of
its own (``rfactor`` over the rows), vectorized along the row, while the
row is still in L1; the chunks' partials are added up after. Otherwise
(``chunks`` 0) the sums are the generic reductions: a pass of their own
over ``gy`` and ``x`` from memory, with one dependent chain of adds per
vector of a row's positions (compare the two with
``benchmarks/compare_configs.py``-style interleaved timing of
``layer_norm_grad`` at ``chunks`` 0 and its default).

It applies to rows whose length (static) a slice of 4 lanes or more
divides at least twice; the generic schedule serves the rest (short or odd
rows, ``axis=0``'s single row).

``vector``    lanes of each reduction's slices and of the output's vectors:
              a quarter, half, one or two vectors that divide the row;
              default one vector (the widest below that where none does).
``parallel``  1 to run the row loop (or the chunks) on the thread pool.
``chunks``    the gradient only: tasks over the rows, each with partial
              sums over its rows (a divisor of the rows, at most
              ``MAX_CHUNKS_PER_CORE`` a core; default the largest multiple
              of the cores among them), or 0 for the generic sums (the
              default where no divisor is such a multiple).
"""
from __future__ import annotations

import math

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_injective, schedule_reduction, vectorize_row
from ..util import block_name, blocks, is_reduction

#: a slice's fewest lanes
MIN_LANES = 4
#: the most chunks of rows (each with its own partial sums over the rows) per core
MAX_CHUNKS_PER_CORE = 4


@register_template("cpu", ops=("layer_norm", "layer_norm_grad"))
def schedule_layer_norm(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    x = workload.out_shapes[0]  # both ops' first output has x's shape
    ax = workload.attrs["axis"] % len(x)
    if ax == 0 or not all(isinstance(d, int) for d in x[ax:]):
        return NOT_APPLICABLE
    length = math.prod(x[ax:])
    lanes = cfg.target.lanes(workload.out_dtypes[0])
    widths = tuple(v for v in (lanes // 4, lanes // 2, lanes, 2 * lanes)
                   if v >= MIN_LANES and length % v == 0 and length >= 2 * v)
    if not widths:
        return NOT_APPLICABLE
    names = _names(sch)
    output = workload.op.name
    by_rows = [n for n in names[names.index(output) + 1:] if n.startswith(output + "_")]  # the sums over the rows
    vec = cfg.define_knob("vector", widths, default=lanes if lanes in widths else max(widths))
    par = cfg.define_knob("parallel", (0, 1), default=1)
    chunks = _chunks(cfg, x[:ax]) if by_rows else 0

    sliced = [_slices(sch, sch.get_sblock(n), vec, ax) for n in names[:names.index(output)]
              if is_reduction(sch, sch.get_sblock(n))]
    partials = [_partials(sch, sch.get_sblock(n), chunks, len(x) - ax + 1) for n in by_rows
                if chunks and is_reduction(sch, sch.get_sblock(n))]
    names = _names(sch)
    stages = [n for n in names[:names.index(output) + 1]] + partials  # program order
    rows = [_rows(sch, sch.get_sblock(n), ax) for n in stages[:len(stages) - len(partials)]]
    if partials:  # each stage's rows as (chunk, row of the chunk), like the partial sums' nests
        rows = [sch.split(r, [chunks, None]) for r in rows]
        rows += [sch.get_loops(sch.get_sblock(n))[:2] for n in partials]
        task = sch.merge(*[r[0] for r in rows])
        sch.merge(*[r[1] for r in rows])
    else:
        task = sch.merge(*rows)
    if par:
        sch.parallel(task)
    for rf in sliced:  # a slice's lanes (the innermost loop of its partial sums) as one vector
        rf_block = sch.get_sblock(rf)
        sch.vectorize(sch.get_loops(rf_block)[-1])
        sch.decompose_reduction(rf_block, sch.get_loops(rf_block)[-2])
    for name in [output] + partials:  # under the row loop: the row's positions, vectorized
        b = sch.get_sblock(name)
        inner = sch.get_loops(b)[(2 if partials else 1) + (name in partials):]  # (a partial's first: which sum)
        vectorize_row(sch, sch.fuse(*inner) if len(inner) > 1 else inner[0], length, vec)
        if name in partials:  # each chunk's partial sums start at zero before its rows
            sch.decompose_reduction(b, sch.get_loops(b)[1])
    for name in by_rows:  # the chunks' partials added up (or, without chunks, the whole sums), then cast
        b = sch.get_sblock(name)
        (schedule_reduction if is_reduction(sch, b) else schedule_injective)(sch, b, cfg, name + ".")
    return None


def _chunks(cfg: Config, rows) -> int:
    """The ``chunks`` knob: tasks over the rows for the gradient's sums over them (0: none)."""
    count = math.prod(rows) if all(isinstance(d, int) for d in rows) else None
    cores = cfg.target.cores
    options = [d for d in range(2, MAX_CHUNKS_PER_CORE * cores + 1) if count and count % d == 0]
    even = [d for d in options if d % cores == 0]
    return cfg.define_knob("chunks", (0, *options), default=max(even or [0]))


def _names(sch) -> list[str]:
    return [block_name(sch, b) for b in blocks(sch)]


def _rows(sch, block, ax: int):
    """The loops over the rows of a row stage's nest (its first ``ax``), fused into one."""
    loops = sch.get_loops(block)[:ax]
    return sch.fuse(*loops) if len(loops) > 1 else loops[0]


def _slices(sch, block, width: int, ax: int) -> str:
    """The row reduction ``block`` (loops: the rows', then the row's) summed in
    slices of ``width`` adjacent values: returns the name of the block of the
    slices' partial sums (``rfactor``)."""
    row = sch.get_loops(block)[ax:]
    _, lane = sch.split(sch.fuse(*row) if len(row) > 1 else row[0], [None, width])
    return block_name(sch, sch.rfactor(lane, ax))


def _partials(sch, block, chunks: int, ndim: int) -> str:
    """The sums over the rows ``block`` (loops: ``ndim`` over its outputs, which
    sum and the row's positions, then the rows') as ``chunks`` partial sums,
    each over its chunk of rows (``rfactor``), with the loops (chunk, row of
    the chunk, which sum, positions...): returns the name of the partial sums' block."""
    loops = sch.get_loops(block)
    red = loops[ndim:]
    chunk, row = sch.split(sch.fuse(*red) if len(red) > 1 else red[0], [chunks, None])
    rf = sch.rfactor(chunk, 0)
    positions = sch.get_loops(rf)[:ndim]
    sch.reorder(*sch.get_loops(rf)[ndim:], *positions)
    return block_name(sch, rf)
