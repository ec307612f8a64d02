"""CPU template for ``attention``: a block of query rows of one head per task,
its scores, softmax and product with ``v`` computed in the task's cache.

A task (parallel over batch x head x row block) first lays the head's keys
out transposed (``attention_kt``: D x Sk, so a vector of the scores reads
one vector of it), then computes its ``rows`` x Sk scores a register tile
at a time (``reg_rows`` rows x ``cols`` keys, accumulated over the features:
each step one broadcast query element times a vector of keys), each row's
max, the exponentials of the scaled, masked scores (vectorized over the
keys), their sum, and the output rows as a register tile of ``reg_rows``
rows x ``vcols`` values accumulated over the keys (one probability times a
vector of ``v``'s row), divided by the sums as they are written. The score
rows never leave the task: no (S, Sk) matrix is written to memory.

With a symbolic sequence length (an export's ``dynamic_seq``: S and Sk
both symbolic) the kernel's stages run over the lengths padded to
``KEY_BLOCK`` (``te/attention.py``: padding keys are zeros masked out,
padding queries zero rows), so the row blocks, key tiles and vectors divide
them evenly; the tasks are the normalized rows' (``attention_norm``) and the
output rows are copied out within them. ``rows`` then divides ``KEY_BLOCK``.

``rows``      query rows per task: a divisor of S past 1 (of ``KEY_BLOCK`` for a
              symbolic S). Default: the most whose scores fit ``SCORE_BYTES``
              (``SYMBOLIC_KEYS`` keys assumed where Sk is symbolic).
``reg_rows``  rows of both register tiles (its largest common divisor with
              ``rows``). Default: the most whose accumulators fill half
              the vector registers.
``parallel``  1 to run the tasks on the thread pool.
"""
from __future__ import annotations

import math

import numpy as np

from ...te.attention import KEY_BLOCK, logical
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors

#: the score rows a task holds by default (L2-resident on every x86 kind kiln targets)
SCORE_BYTES = 64 * 1024
#: with a symbolic sequence length: the ``rows`` offered, and the keys the default assumes
SYMBOLIC_ROWS = (2, 4, 8, 16)  # divisors of KEY_BLOCK: the padded rows split evenly
SYMBOLIC_KEYS = 512
#: the rows of a register tile the knob offers (the tile takes the largest that divides ``rows``)
REG_ROWS = (1, 2, 4, 6, 8)
#: the widest register tile in vectors of a row
MAX_VECTORS = 4


def _cols(extent: int, lanes: int) -> int:
    """The columns of a register tile over an axis of ``extent``: the widest
    divisor of it up to ``MAX_VECTORS`` vectors, whole vectors where it can."""
    fits = [c for c in divisors(extent) if c <= MAX_VECTORS * lanes]
    whole = [c for c in fits if c % lanes == 0]
    return max(whole or fits)


@register_template("cpu", ops=("attention",))
def schedule_attention(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    layout = workload.attrs["layout"]
    n, d = (const_int(x) for x in logical(workload.shapes[0], layout)[2:])
    sk, dv = const_int(logical(workload.shapes[1], layout)[2]), const_int(logical(workload.shapes[2], layout)[3])
    dtype = workload.out_dtypes[0]
    lanes = cfg.target.lanes(dtype)
    symbolic = n is None and sk is None  # a traced sequence length: the keys padded to KEY_BLOCK
    if None in (d, dv) or not symbolic and None in (n, sk) or min(d, dv, n or 2, sk or 2) < 2 or (
            symbolic and KEY_BLOCK % lanes):  # compute_at drops a stage's unit loops
        return NOT_APPLICABLE
    itemsize = np.dtype(dtype).itemsize
    choices = SYMBOLIC_ROWS if symbolic else [r for r in divisors(n) if r > 1]
    keys = SYMBOLIC_KEYS if symbolic else sk
    rows = cfg.define_knob("rows", choices,
                           default=max(r for r in choices if r == choices[0] or r * keys * itemsize <= SCORE_BYTES))
    cols, vcols = KEY_BLOCK if symbolic else _cols(sk, lanes), _cols(dv, lanes)
    budget = cfg.target.vector_registers // 2  # accumulators; the rest hold loads and broadcasts
    widest = max(-(-cols // lanes), -(-vcols // lanes))
    reg_rows = cfg.define_knob("reg_rows", REG_ROWS, default=max(r for r in REG_ROWS if r == 1 or r * widest <= budget))
    reg_rows = math.gcd(reg_rows, rows)
    par = cfg.define_knob("parallel", (0, 1), default=1)

    stages = {name: sch.get_sblock(f"attention_{name}") for name in ("kt", "score", "max", "exp", "sum", "acc")}
    # the task loop is the output's, or with symbolic lengths the (padded, so evenly split) rows of the
    # normalized ``acc`` (``attention_norm``), the output then copied out of it within the task
    root = sch.get_sblock("attention_norm") if symbolic else block
    loops = sch.get_loops(root)
    bb, hh, i, f = loops[:4] if symbolic or layout == "bhsd" else (loops[0], loops[2], loops[1], loops[3])
    sch.reorder(bb, hh, i, f)
    _, i = sch.split(i, [None, rows])
    task = sch.fuse(bb, hh, sch.get_loops(root)[2])
    if par:
        sch.parallel(task)  # before the stages move in (TVM checks their dataflow)
    use_rf = symbolic or sk % lanes == 0 and sk > lanes  # the row max and sum as ``lanes`` partial results
    partial = {name: _rfactor(sch, stages[name], lanes) for name in ("sum", "max")} if use_rf else {}
    order = [stages["acc"], stages["sum"], partial.get("sum"), stages["exp"], stages["max"],
             partial.get("max"), stages["score"], stages["kt"]]
    for stage in order:  # consumers first
        if stage is not None:
            sch.compute_at(stage, task)
    if symbolic:
        sch.reverse_compute_at(block, task)
    for name in ("sum", "max"):
        if name in partial:  # compute_at made the partials' loops (lane, row, key block)
            lane, row, outer = sch.get_loops(partial[name])[-3:]
            sch.reorder(row, outer, lane)
            sch.vectorize(lane)
            sch.decompose_reduction(partial[name], outer)
    e, j = sch.get_loops(stages["kt"])[-2:]
    sch.reorder(j, e)  # read the keys' rows in order (the transposed writes stay in cache)
    _tile(sch, stages["score"], reg_rows, cols)
    _tile(sch, stages["acc"], reg_rows, vcols)
    _vectorize_last(sch, stages["exp"], lanes)
    if symbolic:
        _vectorize_last(sch, root, lanes)
    _vectorize_last(sch, block, lanes)
    return None


def _tile(sch, stage, reg_rows: int, cols: int) -> None:
    """A (rows, columns, reduction) stage as register tiles of ``reg_rows`` x
    ``cols``: accumulated in registers over the reduction, then written."""
    r, c, k = sch.get_loops(stage)[-3:]
    r1, r2 = sch.split(r, [None, reg_rows])
    c1, c2 = sch.split(c, [None, cols])
    sch.reorder(r1, c1, k, r2, c2)
    acc = sch.cache_write(stage, 0, "local")
    sch.reverse_compute_at(acc, c1)
    sch.vectorize(c2)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(r2)
    sch.decompose_reduction(stage, k)
    sch.vectorize(sch.get_loops(acc)[-1])


def _rfactor(sch, stage, lanes: int):
    """A row reduction as ``lanes`` partial results (a new block) and their reduction."""
    _, inner = sch.split(sch.get_loops(stage)[-1], [None, lanes])
    return sch.rfactor(inner, factor_axis=len(sch.get(stage).iter_vars) - 1)


def _vectorize_last(sch, stage, lanes: int) -> None:
    inner = sch.get_loops(stage)[-1]
    extent = const_int(sch.get(inner).extent)
    if extent is None or extent % lanes == 0:  # a symbolic extent here is the padded keys'
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)
