"""Generic CPU templates: the fallbacks every op gets when no specific template
matches. Injective blocks are fused, vectorized and run in parallel; reductions
run parallel over their outputs and vectorized either across outputs (when the
innermost output axis is long) or across a factored slice of the reduction.

Knobs (names are prefixed with the block's name where an op has several
blocks, and on a fused epilogue's blocks: ``schedule_auto``):

``vector``    lanes of the innermost vectorized loop (default: the target's
              vector lanes for the dtype, 1 for short loops; a reduction's
              slice the widest of a quarter, half or whole vector, at
              least 4 lanes, that reads adjacent elements).
``rows``      1 to keep the innermost loop apart, under the fused outer
              loops, and vectorize it by itself (``vectorize_row``); 0 to
              fuse every loop. Default 1 where a vector of the fused loop
              would cross rows and compute each lane's indices with a
              division and a modulo: the zero-padding stage of a weight
              gradient ran scalar with four of them per element, 1.4-1.6x
              slower (``python benchmarks/compare_configs.py``, ``rows`` 0
              against 1; figures: benchmarks/RESULTS.md, "Template
              choices: the measurements behind schedules/").
``parallel``  1 to run the outer loop on the thread pool (default: when the
              work is at least ``PARALLEL_MIN`` elements or unknown).
``rfactor``   reductions only: 1 to vectorize a factored slice of the
              innermost reduction loops, 0 to vectorize across outputs
              (default 1 where the slice reads adjacent elements).
"""
from __future__ import annotations

from .config import Config
from .dispatch import register_template
from tvm import tirx
from tvm.tirx.analysis import undefined_vars

from .util import block_name, blocks, const_int, extent, is_output, is_reduction, loop_kinds, split_loops, try_inline, work

#: below this many elements a parallel launch costs more than it saves.
PARALLEL_MIN = 16384
#: the longest row ``rows`` vectorizes whole (a zero-padded row of a 56-wide map is 58)
ROW_VECTOR_MAX = 64


def _lanes(cfg: Config, sch, block) -> int:
    dtype = sch.get(block).writes[0].source.dtype
    return cfg.target.lanes(str(dtype))


def schedule_injective(sch, block, cfg: Config, prefix: str = "", parallel: bool | None = None) -> None:
    """Fuse the loops, vectorize the inner ``vector`` lanes, parallelize the
    rest (by default when the work is large enough; ``parallel`` sets the
    default for a template that knows better). Where a vector of the fused
    loop would cross rows (``rows``), the innermost loop stays a loop of its
    own under the fused outer ones."""
    loops = sch.get_loops(block)
    if not loops:
        return
    lanes = _lanes(cfg, sch, block)
    n = work(sch, loops)
    flat = _lanes_stay_in_a_row(sch, block, loops, lanes)
    width = const_int(extent(sch, loops[-1]))
    row_options = (0, 1) if len(loops) > 1 and width is not None and width > 1 else (0,)
    rows = cfg.define_knob(prefix + "rows", row_options, default=_declared(
        cfg, prefix + "rows", int(not flat and len(row_options) > 1)))
    # a row narrower than a vector is still vectorized whole from half a vector up (relu over 14- and 7-wide
    # rows, ``benchmarks/compare_configs.py relu``; figures: benchmarks/RESULTS.md, "Template choices: the
    # measurements behind schedules/")
    vectorizable = (n is None or n >= lanes) and (flat if not rows else width >= max(2, lanes // 2))
    # blocks that share a prefix (a template's pad copies of both operands) share its knobs: the first
    # declares the defaults
    vec = cfg.define_knob(prefix + "vector", (1, lanes, 2 * lanes, 4 * lanes),
                          default=_declared(cfg, prefix + "vector", lanes if vectorizable else 1))
    par = cfg.define_knob(prefix + "parallel", (0, 1), default=_declared(cfg, prefix + "parallel", int(
        (n is None or n >= PARALLEL_MIN) if parallel is None else parallel)))
    if rows:
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        vectorize_row(sch, loops[-1], width, vec)
    else:
        outer = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if vec > 1:
            outer, inner = sch.split(outer, [None, vec])
            sch.vectorize(inner)
    if par:
        sch.parallel(outer)


def vectorize_row(sch, loop, width: int, vec: int) -> None:
    """Vectorize an innermost loop of ``width`` iterations: by ``vec`` lanes
    when they divide it, else whole when it is at most ``ROW_VECTOR_MAX``
    long, else by its largest divisor from ``vec`` to that bound (a scalar
    loop when there is none)."""
    if vec <= 1:
        return
    if width % vec == 0 and width > vec:
        sch.vectorize(sch.split(loop, [None, vec])[1])
    elif width <= ROW_VECTOR_MAX:
        sch.vectorize(loop)
    else:
        piece = next((d for d in range(ROW_VECTOR_MAX, vec - 1, -1) if width % d == 0), None)
        if piece is not None:
            sch.vectorize(sch.split(loop, [None, piece])[1])


def _declared(cfg: Config, name: str, default):
    """The default of knob ``name`` if a block before this one declared it, else ``default``."""
    knob = cfg.space.get(name)
    return default if knob is None else knob.default


def _lanes_stay_in_a_row(sch, block, loops, lanes: int) -> bool:
    """Whether a vector of ``lanes`` consecutive elements of the fused loop
    reads every buffer without a division and a modulo per lane. It never
    does where a vector crosses a row boundary it is not aligned with
    (``_vectors_align``); otherwise it does when each read is elementwise (indexes its buffer as the write does: the
    fused index is the flat index of both), or depends only on loops whose
    index no vector changes (the outer loops of a trailing block whose size
    is a multiple of the lanes: a bias read per channel of 8x8 maps), or
    when the innermost loop's extent is a multiple of the lanes (a vector
    never leaves its row). A vector that crosses rows computes each lane's
    indices apart: a per-channel bias added to 7x7 maps ran 3x slower
    vectorized, the transpose to OIHW in ``conv2d_backward_weight`` 0.17 ms
    against a few microseconds scalar."""
    extents = [const_int(extent(sch, lp)) for lp in loops]
    if extents[-1] is not None and extents[-1] % lanes == 0:
        return True
    if not _vectors_align(extents, lanes):
        return False
    stmt = sch.get(block)
    names = [iv.var for iv in stmt.iter_vars]
    if len(names) != len(loops):
        return True  # not a plain nest of its own loops: the template's default stands
    uniform, trailing = None, 1  # loops [0, uniform) keep one index across a vector
    for k in range(len(extents) - 1, -1, -1):
        if extents[k] is None:
            break
        trailing *= extents[k]
        if trailing % lanes == 0:
            uniform = k
            break
    varying = names if uniform is None else names[uniform:]
    written = [r.min for r in stmt.writes[0].region]
    for read in stmt.reads:
        mins = [r.min for r in read.region]
        if len(mins) == len(written) and all(a.same_as(b) for a, b in zip(mins, written)):
            continue  # elementwise
        used = [v for m in mins for v in undefined_vars(m)]
        if any(v.same_as(w) for v in used for w in varying):
            return False
    return True


def _vectors_align(extents: list, lanes: int) -> bool:
    """Whether TVM can simplify the fused index of a vector's lanes back to
    the flat index: when every row boundary of the nest (each trailing
    product of its extents) falls on a vector boundary or inside one vector
    a whole number of times, or when the nest is 2-D with no partial last
    vector (``i // w * w + i % w`` folds). Otherwise every lane's index is
    computed apart, even for an elementwise op: relu ran 4-17x slower fused
    than by rows on such nests, and fused as fast or faster where they align
    (``benchmarks/compare_configs.py relu``, ``rows`` 0 against 1; figures:
    benchmarks/RESULTS.md, "Template choices: the measurements behind
    schedules/"). A symbolic extent ends the check (the boundaries inside it
    align)."""
    product = 1
    for e in reversed(extents):
        if e is None:
            return True
        product *= e
        if product % lanes == 0:
            return True
        if lanes % product:
            break
    else:
        return True
    return len(extents) == 2 and None not in extents and extents[0] * extents[1] % lanes == 0


def schedule_reduction(sch, block, cfg: Config, prefix: str = "") -> None:
    """Parallel over outputs; vectorized across outputs or across a factored
    slice of the innermost reduction loops. By default the slice is taken
    when the outputs are too few to fill a vector or where it reads adjacent
    elements (the reduced loops index the input's trailing dims:
    ``_reads_adjacent``), as a BatchNorm's per-channel statistics of NCHW
    data do on maps of 4 elements or more (32x64x16x16: 0.136 ms against
    0.305 across the channels); on maps of 7x7 a slice would span the batch
    dim and gather (16x64x7x7: 0.088 against 0.038 across the channels)."""
    kinds = loop_kinds(sch, block)
    loops = sch.get_loops(block)
    spatial = [lp for lp, red in zip(loops, kinds) if not red]
    reduce = [lp for lp, red in zip(loops, kinds) if red]
    lanes = _lanes(cfg, sch, block)
    n_out = work(sch, spatial)
    last_sp = const_int(extent(sch, spatial[-1])) if spatial else 1
    red_n = work(sch, reduce)
    inner_reduce = bool(kinds) and kinds[-1]
    # rfactor needs an output axis to hang the partial results on (TVM cannot
    # rfactor into a 0-d output) and a slice that divides the reduction (a
    # predicated slice gives wrong partial results).
    slices = _slice_widths(red_n, lanes) if spatial else ()
    can_rf = bool(slices)
    adjacent = next((v for v in sorted(slices, reverse=True)  # the widest slice that reads adjacent elements
                     if v <= lanes and _reads_adjacent(sch, block, reduce, _slice_start(sch, reduce, v))),
                    None) if can_rf and inner_reduce else None
    width = adjacent or max((v for v in slices if v <= lanes), default=None)  # the slice's default lanes
    # the slice is the better default wherever it reads contiguous memory: a reduction over an input's
    # trailing dims (row sums, per-channel sums of NCHW data) 1.5-5x faster than vectors across outputs,
    # which gather them from strided rows, and so is a slice of a half or a quarter of a vector where no
    # whole one divides those dims (``benchmarks/compare_configs.py sum``, ``rfactor`` 0 against 1;
    # figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
    use_rf = cfg.define_knob(prefix + "rfactor", (0, 1) if can_rf else (0,), default=int(
        can_rf and inner_reduce and ((last_sp is not None and last_sp < lanes) or adjacent is not None))) \
        if spatial else 0
    par = cfg.define_knob(prefix + "parallel", (0, 1), default=int(
        bool(spatial) and (n_out is None or n_out * (red_n or 1) >= PARALLEL_MIN)))
    if not spatial:
        _full_reduction(sch, block, reduce, red_n, lanes, cfg, prefix)
    elif use_rf:
        _rfactor(sch, block, spatial, reduce, slices, width, par, cfg, prefix)
    else:
        _vectorize_outputs(sch, block, spatial, reduce, lanes, par, cfg, prefix)


def _full_reduction(sch, block, reduce, red_n, lanes, cfg, prefix):
    """A reduction to one value: ``chunks`` threads each keep ``vector`` partial
    results (two rfactors), combined at the end."""
    cores = cfg.target.cores
    vec = lanes if red_n and red_n % lanes == 0 and red_n >= 2 * lanes else 1
    per_lane = red_n // vec if red_n else None
    big = red_n is not None and red_n >= PARALLEL_MIN
    chunks = max((d for d in range(1, 8 * cores + 1) if per_lane % d == 0), default=1) if big else 1
    vec = cfg.define_knob(prefix + "vector", (1, vec), default=vec)
    chunks = cfg.define_knob(prefix + "chunks", (1, chunks), default=chunks)
    r = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
    if vec == 1 and chunks == 1:
        sch.decompose_reduction(block, r)
        return
    r_par, r_mid, r_vec = sch.split(r, [chunks, None, vec])
    try:
        rf = sch.rfactor(r_par, factor_axis=0)
    except Exception:  # noqa: BLE001 - TVM cannot rfactor some 0-d outputs (beside other blocks): stay serial
        sch.decompose_reduction(block, r_par)
        return
    rf_par, rf_mid, rf_vec = sch.get_loops(rf)
    if vec > 1:
        rf = sch.rfactor(rf_vec, factor_axis=1)
        rf_par, rf_mid, rf_vec = sch.get_loops(rf)
        sch.vectorize(rf_vec)
    sch.parallel(rf_par)
    sch.decompose_reduction(rf, rf_mid)


def _vectorize_outputs(sch, block, spatial, reduce, lanes, par, cfg, prefix):
    """Loops [spatial..., last_outer, reduce..., last_inner]: each step of the
    reduction updates a vector of adjacent outputs."""
    last = spatial[-1]
    n_last = const_int(extent(sch, last))
    vec = cfg.define_knob(prefix + "vector", (1, lanes, 2 * lanes),
                          default=lanes if n_last is None or n_last >= lanes else 1)
    outer = spatial
    if vec > 1:
        last_o, last_i = sch.split(last, [None, vec])
        sch.reorder(*spatial[:-1], last_o, *reduce, last_i)
        outer = spatial[:-1] + [last_o]
        # TVM only vectorizes a reduction's loop while the block still has its
        # init, so vectorize before decompose_reduction.
        sch.vectorize(last_i)
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if par:
        sch.parallel(fused)
    if reduce:
        sch.decompose_reduction(block, sch.get_loops(block)[1])


def _slice_start(sch, reduce, vec: int) -> int:
    """The first of the innermost reduction loops whose extents ``vec``
    divides: the loops a vector slice is cut from (a slice across all of
    them, an NCHW per-channel sum's n, h and w, would index each lane with a
    division and a modulo)."""
    tail = len(reduce) - 1
    while tail > 0 and (work(sch, reduce[tail:]) or 1) % vec:
        tail -= 1
    return tail


def _reads_adjacent(sch, block, reduce, tail: int) -> bool:
    """Whether the reduction loops from ``tail`` on index the trailing dims
    of the block's widest input, in order: a slice of them reads adjacent
    elements."""
    stmt = sch.get(block)
    reduced = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    if len(reduced) != len(reduce) or not stmt.reads:
        return False
    region = max(stmt.reads, key=lambda r: len(r.region)).region  # the widest input's elements read
    wanted = reduced[tail:]
    trailing = [r.min for r in region[len(region) - len(wanted):]] if len(region) >= len(wanted) else []
    return len(trailing) == len(wanted) and all(i.same_as(v) for i, v in zip(trailing, wanted))


def _slice_widths(red_n, lanes: int) -> tuple:
    """Vector slices a reduction of ``red_n`` elements can be cut into: a
    quarter, half, one or two vectors (at least 4 lanes) that divide it at
    least twice; none when its size is symbolic."""
    if red_n is None:
        return ()
    return tuple(v for v in (lanes // 4, lanes // 2, lanes, 2 * lanes)
                 if v >= 4 and red_n % v == 0 and red_n >= 2 * v)


def _rfactor(sch, block, spatial, reduce, slices, default, par, cfg, prefix):
    """Split the reduction into ``vector`` partial results computed with vector
    instructions, then combine them: the rfactor of the innermost slice."""
    vec = cfg.define_knob(prefix + "vector", slices, default=default)
    tail = _slice_start(sch, reduce, vec)
    r = sch.fuse(*reduce[tail:]) if len(reduce) - tail > 1 else reduce[tail]
    _, r_inner = sch.split(r, [None, vec])
    rf = sch.rfactor(r_inner, factor_axis=len(spatial))
    out_loops = sch.get_loops(block)
    fused = sch.fuse(*out_loops[:len(spatial)]) if len(spatial) > 1 else out_loops[0]
    sch.compute_at(rf, fused)
    if par:
        sch.parallel(fused)
    # compute_at regenerates the rf block's own loops as [partial-result axis, outer reduction loops..., r_outer]
    r_vec, *r_outer = sch.get_loops(rf)[1:]
    sch.reorder(*r_outer, r_vec)
    sch.vectorize(r_vec)
    sch.decompose_reduction(rf, r_outer[0])


def schedule_empty(sch) -> None:
    """Shapes with a zero-size dim: nothing to tile (a zero extent cannot be
    split); each reduction's init is taken out of its loops, which may not run
    (a sum over an empty axis is 0)."""
    for b in blocks(sch):
        if is_reduction(sch, b):
            sch.decompose_reduction(b, split_loops(sch, b)[1][0])


@register_template("cpu", families=("dynamic",))
def schedule_serial(sch, block, cfg: Config) -> None:
    """Data-dependent ops (``masked_select``...): the compaction is one serial
    loop with a running count, written out in the op (an opaque block); the
    copies that flatten its inputs run as injective loops."""
    for b in blocks(sch):
        if sch.get_loops(b) and not is_reduction(sch, b):
            schedule_injective(sch, b, cfg, block_name(sch, b) + ".")


@register_template("cpu", fallback=True)
def schedule_auto(sch, block, cfg: Config) -> None:
    """Any op: inline intermediate injective blocks, then schedule each remaining
    block as a reduction (``schedule_reduction``) or an injective loop nest.

    Knob names are prefixed with their block's name where the op's own
    blocks (``block`` and those before it) are several; an op of one block
    keeps them plain on the block that stands for it (``block``, or the
    output it was inlined into), and the blocks of a fused epilogue after it
    take prefixes. So a kernel with an epilogue declares the knobs of its op
    alone, and a config tuned on the op alone applies to it."""
    all_blocks = blocks(sch)
    for b in all_blocks:
        # a 0-d stage after a reduction (a mean's division) gets a loop of one: beside a block with no loop
        # at all, TVM's rfactor fails (softmax_cross_entropy's row slices, a mean's vector partials)
        if not sch.get_loops(b) and not is_reduction(sch, b):
            sch.add_unit_loop(b)
    names = [block_name(sch, b) for b in all_blocks]
    own = names.index(block_name(sch, block)) + 1
    chain = [block]  # the block and the consumers it may be inlined into, in turn
    while len(consumers := sch.get_consumers(chain[-1])) == 1:
        chain.append(consumers[0])
    chain = [block_name(sch, b) for b in chain]
    for b in all_blocks:
        if not is_output(sch, b) and not is_reduction(sch, b):
            try_inline(sch, b)
    left = [block_name(sch, b) for b in blocks(sch)]
    plain = next((name for name in chain if name in left), None) if own == 1 else None
    for b in blocks(sch):
        name = block_name(sch, b)
        prefix = "" if name == plain else name + "."
        if is_reduction(sch, b):
            schedule_reduction(sch, b, cfg, prefix)
        elif is_output(sch, b) or not try_inline(sch, b):
            schedule_injective(sch, b, cfg, prefix)
