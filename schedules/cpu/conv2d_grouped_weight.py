"""CPU template for a grouped ``conv2d_backward_weight`` (``groups`` > 1),
vectorized over output columns.

The op's channels-last tile (``conv2d_grad.py``) broadcasts one input value
to a vector of output channels; in a grouped weight gradient each of those
channels reads another input channel, a gather. This schedule, like
``conv2d_grad.py``'s ``pixels``, reads ``gy`` as it lies (its transposed
copy inlined) and vectorizes the reduction over output columns: each lane
sums its own columns' products (``rfactor``), and the lanes are added up at
the end. A register tile is ``tile_o`` output channels of one group by a run
of ``tile_t`` of their (input channel, kernel row, kernel column) taps; each
reduction step loads a vector of ``gy`` per channel and output row and a
vector of input columns per distinct (channel, input row, kernel column) the
tile's taps read over ``tile_oh`` output rows, unrolled (a depthwise 3x3's
three kernel rows over four output rows read six input rows, not twelve).
Tasks are (channel tile, tap block), each copying the zero-padded input of
its group, stored by column phase under a stride (``phases``).

``vector``    lanes of the column vectors: a divisor of the output width
              (``conv2d_grouped.default_vector``).
``tile_o``    output channels per tile, a divisor of a group's.
``tile_t``    taps per tile: a box of the (C / groups, KH, KW) taps
              (``tap_blocks``).
``tile_oh``   output rows per reduction step, unrolled: a divisor of OH.
              Default for the three: ``conv2d_grouped``'s cost model (the
              most useful multiply-adds per cycle within the register budget).
``parallel``  1 to run the tasks on the thread pool.
``pad_at``    1 (default) to copy each task's padded input inside it.
``phases``    as in ``conv2d_grouped.py``.
"""
from __future__ import annotations

from ..config import Config
from ..generic import schedule_injective
from ..util import const_int, divisors, extent, find_block
from .conv2d_defaults import register_budget
from .conv2d_grouped import _cycles, _split_phases, default_vector


def tap_blocks(taps: tuple) -> tuple:
    """``tile_t``'s values: runs of the (C / groups, KH, KW) taps that are
    boxes of that space (part of a kernel row, whole rows of a channel, whole
    channels), so a tile's write-back covers its own taps only."""
    c, kh, kw = taps
    return tuple(sorted(set(divisors(kw)) | {kw * d for d in divisors(kh)} | {kh * kw * d for d in divisors(c)}))


def default_weight_tile(per_group: int, taps: tuple, rows: tuple, lanes: int, stride: tuple,
                        dilation: tuple) -> tuple[int, int, int]:
    """(tile_o, tile_t, tile_oh): the tile with the most multiply-adds per
    cycle (``conv2d_grouped._cycles``) within the register budget; on a tie,
    the more accumulators, then the fewer rows."""
    budget = register_budget(lanes)(1)
    c, kh, kw = taps
    best, merit = (1, 1, 1), None
    for tile_t in tap_blocks(taps):
        block = [(t // (kh * kw), t // kw % kh, t % kw) for t in range(tile_t)]  # the first block's taps
        for oh in rows:
            inputs = len({(ci, y * stride[0] + i * dilation[0], j * dilation[1]) for ci, i, j in block
                          for y in range(oh)})
            for tile_o in divisors(per_group):
                count = tile_o * tile_t
                if count > budget:
                    continue
                score = (count * oh / _cycles(count, tile_o * oh, inputs, oh), count, -oh)
                if merit is None or score > merit:
                    best, merit = (tile_o, tile_t, oh), score
    return best


def schedule_grouped_weight(sch, cfg: Config) -> None:
    """A grouped ``conv2d_backward_weight``: see the module docstring."""
    wl = cfg.workload
    name, groups = wl.op.name, wl.attrs["groups"]
    stride, dilation = tuple(wl.attrs["stride"]), tuple(wl.attrs["dilation"])
    sch.compute_inline(sch.get_sblock(f"{name}_gyt"))
    pad = find_block(sch, f"{name}_pad")
    acc = sch.get_sblock(f"{name}_cl")
    c, i, j, o, rn, ry, rz = sch.get_loops(acc)
    taps = tuple(const_int(extent(sch, lp)) for lp in (c, i, j))
    outputs, height, width = (const_int(extent(sch, lp)) for lp in (o, ry, rz))
    lanes = cfg.target.lanes(wl.out_dtypes[0])
    rows = divisors(height)
    vector = cfg.define_knob("vector", tuple(d for d in divisors(width) if d <= lanes),
                             default=default_vector(width, lanes))
    o_, t_, oh_ = default_weight_tile(outputs // groups, taps, rows, lanes, stride, dilation)
    tile_o = cfg.define_knob("tile_o", divisors(outputs // groups), default=o_)
    tile_t = cfg.define_knob("tile_t", tap_blocks(taps), default=t_)
    tile_oh = cfg.define_knob("tile_oh", rows, default=oh_)
    par = cfg.define_knob("parallel", (0, 1), default=1)
    pad_at = pad is not None and cfg.define_knob("pad_at", (0, 1), default=1)
    padded = const_int(extent(sch, sch.get_loops(pad)[-1])) if pad is not None else None
    phases = pad_at and stride[1] > 1 and padded % stride[1] == 0 and cfg.define_knob("phases", (0, 1), default=1)

    if phases:
        _split_phases(sch, pad, stride[1])
    _, lane = sch.split(rz, [None, vector])
    part = sch.rfactor(lane, 4)  # partial sums per lane: (C / groups, KH, KW, O, vector)
    c, i, j, o, rn, ry, rzo, lane = sch.get_loops(part)
    to, ti = sch.split(sch.fuse(c, i, j), [None, tile_t])
    oo, oi = sch.split(o, [None, tile_o])
    ryo, ryi = sch.split(ry, [None, tile_oh])
    sch.reorder(oo, to, rn, ryo, rzo, ryi, oi, ti, lane)
    tile = sch.cache_write(part, 0, "local")
    sch.reverse_compute_at(tile, to)
    sch.vectorize(lane)
    for loop in (ryi, oi, ti):
        sch.unroll(loop)
    task = sch.fuse(oo, to)
    if par:
        sch.parallel(task)
    sch.decompose_reduction(part, rn)
    if pad_at:
        sch.compute_at(pad, task)
        sch.vectorize(sch.get_loops(pad)[-1])
    elif pad is not None:
        schedule_injective(sch, pad, cfg, "pad.")
    *outer, _ = sch.get_loops(acc)  # the lanes added up
    total = sch.fuse(*outer)
    if par:
        sch.parallel(total)
    schedule_injective(sch, sch.get_sblock(name), cfg, "out.")
