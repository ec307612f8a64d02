"""CPU template for grouped and depthwise NCHW convolutions (``groups`` > 1):
``conv2d`` and ``conv2d_backward_data``, vectorized over output columns.

An output channel of a grouped convolution reads only its group's C / groups
input channels (one, for a depthwise conv). ``conv2d.py``'s micro-kernel
vectorizes over output channels and broadcasts one input value to all of
them; here each lane of such a vector would read another input channel, a
gather. This template vectorizes over output columns instead, the direction
in which an NCHW input row is contiguous (TVM's x86
``depthwise_conv2d_NCHWc`` vectorizes a channel block instead, its input
already in that layout). Its register tile is ``tile_oc`` output channels of
one group by ``tile_oh`` rows by ``tile_ow`` columns: each reduction step (an
input channel of the group and a kernel column, over the kernel rows)
broadcasts a weight per channel and row, and loads the input columns of the
tile's rows once for all its channels; the tile's rows and the kernel rows
are unrolled, so an input row two output rows read is loaded once. A task
(image, channel tile, rows) copies the zero-padded input rows of its group
right before reading them (``pad_at``), and under a column stride stores
them split into their column phases, so that a tap's columns are
consecutive (``phases``), as ``conv2d_grad.py``'s ``pixels`` does.

``vector``    lanes of the column vectors: a divisor of the output width
              (a tail would be predicated in the micro-kernel) up to a
              vector (``default_vector``: a power of two where one fills
              half a vector or more).
``tile_ow``   output columns per tile: a multiple of ``vector`` dividing
              the width (its vectors unrolled).
``tile_oc``   output channels per tile: a divisor of a group's.
``tile_oh``   output rows per tile: a divisor of a task's.
              Default for the three (``default_tile``): the tile with the
              most useful lane multiply-adds per cycle, its cycles bounded
              by its vector FMAs (fewer than ``LATENCY_ACCUMULATORS``
              accumulators stall on the FMA latency) and by its loads (each
              distinct input vector once, a weight broadcast per channel
              and tap), within the conv templates' register budget.
``unroll_kw`` 1 to unroll the kernel-column loop (default 1).
``task_rows`` output rows per parallel task, a multiple of ``tile_oh``.
              Default: the whole map, halved while an image has fewer than
              ``GROUPED_TASKS`` tasks or a task's padded input rows exceed
              ``GROUPED_TASK_BYTES``.
``parallel``  1 to run (image, channel tile, row block) on the thread pool.
``pad_at``    1 (default) to zero-pad each task's input rows inside the task,
              0 for a parallel padding stage of its own.
``phases``    under a column stride, with a padding whose columns split into
              whole phases: 1 (default) to store the padded input by column
              phase (``w % stride, w // stride``), so a tap reads a vector of
              consecutive columns; 0 reads every stride-th column, one
              element at a time.

A grouped data gradient's TE body is the placed one under a stride too
(``te/conv_grad.py``): its columns are read consecutively, the products of
the zeros between ``gy``'s columns left out by a select.
"""
from __future__ import annotations

import numpy as np

from ..config import Config
from ..generic import schedule_injective
from ..util import const_int, divisors, extent, find_block
from .conv2d_defaults import LATENCY_ACCUMULATORS, register_budget
from .conv2d_roles import ConvRoles
from .conv2d_steps import place_padding, run_tasks, vectorize_write_back

#: an image keeps at least this many tasks by default (``task_rows``), so that one image spreads over the
#: threads however few channel tiles it has
GROUPED_TASKS = 8

#: the most bytes of padded input rows one task copies by default (``task_rows``): within a core's L2
GROUPED_TASK_BYTES = 256 << 10

#: vector FMAs and vector loads (or broadcasts) a core issues per cycle, each: the weights of
#: ``default_tile``'s merit, for the x86 cores kiln targets (two FMA pipes, two or more load ports)
FMA_PER_CYCLE, LOADS_PER_CYCLE = 2, 2

#: cycles of an FMA's latency: an accumulator takes a new FMA this often at most
FMA_LATENCY = LATENCY_ACCUMULATORS // FMA_PER_CYCLE


def column_stride(cfg: Config) -> tuple[int, int]:
    """The (row, column) stride of the op's TE body: a forward conv's
    stride; a data gradient's body reads ``gy`` placed on the input's grid,
    at stride 1."""
    wl = cfg.workload
    return tuple(wl.attrs["stride"]) if wl.op.name == "conv2d" else (1, 1)


def default_vector(width: int, lanes: int) -> int:
    """``vector``'s default: the widest power of two that divides the width,
    up to a vector, if it fills half a vector or more; else the widest
    divisor of the width that does (one vector, its last lanes idle); else
    that power of two. A vector of another width LLVM loads in power-of-two
    pieces and inserts them together: 14 columns on AVX-512 as 8 + 4 + 2,
    worth it where the power of two would be 2 (a 14- or 28-wide map), not
    where it is 8 (a 56-wide map; figures: benchmarks/RESULTS.md, "Grouped
    and depthwise convolutions")."""
    fits = [d for d in divisors(width) if d <= lanes]
    power = max(d for d in fits if d & (d - 1) == 0)
    if 2 * power >= lanes:
        return power
    return max((d for d in fits if 2 * d > lanes), default=power)


def default_tile(width: int, vector: int, per_group: int, rows: tuple, lanes: int, kernel: tuple, stride: tuple,
                 dilation: tuple) -> tuple[int, int, int]:
    """(tile_ow, tile_oc, tile_oh) for vectors of ``vector`` columns: the
    tile with the most useful lane multiply-adds per cycle (``_cycles``)
    within ``register_budget``; on a tie, the more accumulators (fewer
    passes over the taps), then the fewer loads per multiply-add, then the
    wider (fewer, longer rows to write)."""
    budget = register_budget(lanes)(1)
    best, merit = (vector, 1, 1), None
    for ow in (d for d in divisors(width) if d % vector == 0):
        # the distinct input vectors a row's taps read (scalar columns of neighbouring taps coincide)
        columns = len({k * vector * stride[1] + x * dilation[1] for k in range(ow // vector) for x in range(kernel[1])})
        for oh in rows:
            lines = len({y * stride[0] + r * dilation[0] for y in range(oh) for r in range(kernel[0])})
            for oc in divisors(per_group):
                count = oc * oh * (ow // vector)
                if count > budget:
                    continue
                taps = kernel[0] * kernel[1]
                useful = oc * oh * ow * taps
                loads = oc * taps + lines * columns
                score = (useful / _cycles(count, oc * taps, lines * columns, taps), count, -loads / useful, ow)
                if merit is None or score > merit:
                    best, merit = (ow, oc, oh), score
    return best


def _cycles(accumulators: int, weights: int, inputs: int, taps: int) -> float:
    """Cycles of a tile's reduction over one input channel: its vector FMAs
    (``taps`` per accumulator, at most one per ``FMA_LATENCY`` cycles on
    each) against its loads (each distinct input vector once, and a weight
    broadcast per channel and tap)."""
    rate = min(FMA_PER_CYCLE, accumulators / FMA_LATENCY)
    return max(accumulators * taps / rate, (weights + inputs) / LOADS_PER_CYCLE)


def default_task_rows(choices: tuple, height: int | None, batch_tasks: int, row_bytes: int) -> int:
    """The most rows (a whole map first) that leave an image ``GROUPED_TASKS``
    tasks (``batch_tasks``: its channel tiles) and copy at most
    ``GROUPED_TASK_BYTES`` of padded input per task."""
    if not height:
        return min(choices)
    fits = [d for d in choices if batch_tasks * (height // d) >= GROUPED_TASKS and d * row_bytes <= GROUPED_TASK_BYTES]
    return max(fits) if fits else min(choices)


def schedule_grouped(sch, r: ConvRoles, cfg: Config) -> None:
    """A grouped NCHW ``conv2d`` or ``conv2d_backward_data`` (its body's
    output channels in ``groups`` groups, each reading its own input
    channels): see the module docstring. A data gradient computed per
    phase (its ``_taps`` stage) is ``_schedule_phased``."""
    taps = find_block(sch, "_taps")
    if taps is not None:
        _schedule_phased(sch, r, cfg, taps)
        return
    wl = cfg.workload
    per_group = r.channels // wl.attrs["groups"]
    (sh, sw), dilation = column_stride(cfg), tuple(wl.attrs["dilation"])
    rows = divisors(r.height)
    rc, ry, rx = r.reduction
    vector = cfg.define_knob("vector", tuple(d for d in divisors(r.width) if d <= r.lanes),
                             default=default_vector(r.width, r.lanes))
    kernel = (const_int(extent(sch, ry)) or 1, const_int(extent(sch, rx)) or 1)
    ow, oc, oh = default_tile(r.width, vector, per_group, rows, r.lanes, kernel, (sh, sw), dilation)
    tile_ow = cfg.define_knob("tile_ow", tuple(d for d in divisors(r.width) if d % vector == 0), default=ow)
    tile_oc = cfg.define_knob("tile_oc", divisors(per_group), default=oc)
    tile_oh = cfg.define_knob("tile_oh", rows, default=oh)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    choices = tuple(d for d in rows if d % tile_oh == 0) or rows
    # the padded input a task copies per output row: its group's channels, ``stride`` rows of the padded width
    padded_width = (r.width - 1) * sw + (const_int(extent(sch, rx)) - 1) * dilation[1] + 1
    row_bytes = const_int(extent(sch, rc)) * padded_width * sh * np.dtype(wl.dtypes[0]).itemsize
    task_rows, par, pad_at = _task_knobs(cfg, r, choices, r.channels // tile_oc, row_bytes)
    phases = pad_at and sw > 1 and _phase_split(sch, r, sw) and cfg.define_knob("phases", (0, 1), default=1)

    if phases:
        _split_phases(sch, r.pad, sw)
    oo, oi = sch.split(r.o, [None, tile_oc])
    yo, yt, yi = sch.split(r.y, [None, max(1, task_rows // tile_oh), tile_oh])
    zo, zk, zi = sch.split(r.z, [None, tile_ow // vector, vector])
    sch.reorder(r.n, oo, yo, yt, zo, rc, rx, yi, ry, oi, zk, zi)
    acc = sch.cache_write(r.conv, 0, "local")
    sch.reverse_compute_at(acc, zo)
    sch.vectorize(zi)  # before decompose_reduction (TVM rejects it after)
    for loop in (ry, oi, yi, zk):  # the rows unrolled: an input row read by two of them is loaded once
        sch.unroll(loop)
    if unroll_kw:
        sch.unroll(rx)
    task = run_tasks(sch, r, (r.n, oo, yo), par)
    vectorize_write_back(sch, acc, 3)  # below (task, a task's row tiles, column tiles)
    place_padding(sch, cfg, r, False, pad_at, task)


def _schedule_phased(sch, r: ConvRoles, cfg: Config, taps) -> None:
    """A grouped data gradient per phase (``te/conv_grad.py``): tiles of
    whole cycles of the row and column phases, the columns of each column
    phase one vector, so that within a tile each row's and column's phase,
    its sub-kernel and its missing taps are constants of the unrolled code
    and a phase's columns read consecutive columns of ``gy``. The
    accumulators are stored by column phase, ``(x % s, x // s)``; the knobs
    are the other variant's, ``vector`` and ``tile_ow`` counting one phase's
    columns and every tile's rows and columns whole cycles of the phases."""
    wl = cfg.workload
    per_group = r.channels // wl.attrs["groups"]
    sh, sw = wl.attrs["stride"]
    ro, rt, ru = r.reduction
    sub = (const_int(extent(sch, rt)), const_int(extent(sch, ru)))  # a phase's sub-kernel
    columns, rows = r.width // sw, divisors(r.height // sh)
    vector = cfg.define_knob("vector", tuple(d for d in divisors(columns) if d <= r.lanes),
                             default=default_vector(columns, r.lanes))
    ow, oc, oh = default_tile(columns, vector, per_group, rows, r.lanes, sub, (1, 1), (1, 1))
    tile_ow = cfg.define_knob("tile_ow", tuple(d * sw for d in divisors(columns) if d % vector == 0),
                              default=ow * sw)
    tile_oc = cfg.define_knob("tile_oc", divisors(per_group), default=oc)
    tile_oh = cfg.define_knob("tile_oh", tuple(d * sh for d in rows), default=oh * sh)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    choices = tuple(d * sh for d in rows if d * sh % tile_oh == 0) or (tile_oh,)
    row_bytes = per_group * (columns + sub[1]) * np.dtype(wl.dtypes[0]).itemsize  # gy's rows, per output row
    task_rows, par, pad_at = _task_knobs(cfg, r, choices, r.channels // tile_oc, row_bytes)

    oo, oi = sch.split(r.o, [None, tile_oc])
    yo, yt, yi = sch.split(r.y, [None, max(1, task_rows // tile_oh), tile_oh])
    zo, zk, zi, zp = sch.split(r.z, [None, tile_ow // (vector * sw), vector, sw])
    sch.reorder(r.n, oo, yo, yt, zo, ro, ru, yi, rt, oi, zp, zk, zi)
    acc = sch.cache_write(r.conv, 0, "local")
    sch.transform_layout(r.conv, ("write", 0), lambda n, c, y, x: (n, c, y, x % sw, x // sw))
    sch.reverse_compute_at(acc, zo)
    sch.vectorize(zi)
    for loop in (rt, oi, yi, zp, zk):
        sch.unroll(loop)
    if unroll_kw:
        sch.unroll(ru)
    task = run_tasks(sch, r, (r.n, oo, yo), par)
    vectorize_write_back(sch, acc, 3)
    schedule_injective(sch, taps, cfg, "taps.")
    place_padding(sch, cfg, r, False, pad_at, task)


def _task_knobs(cfg: Config, r: ConvRoles, choices: tuple, tiles: int, row_bytes: int) -> tuple:
    """``task_rows`` (of ``choices``; ``tiles`` channel tiles per image,
    ``row_bytes`` of padded input copied per output row), ``parallel`` and
    ``pad_at``."""
    rows = cfg.define_knob("task_rows", choices, default=default_task_rows(choices, r.height, tiles, row_bytes))
    par = cfg.define_knob("parallel", (0, 1), default=1)
    pad_at = r.pad is not None and cfg.define_knob("pad_at", (0, 1), default=1)
    return rows, par, pad_at


def _phase_split(sch, r: ConvRoles, stride: int) -> bool:
    """Whether the padding stage's columns split into ``stride`` whole phases."""
    padded = const_int(extent(sch, sch.get_loops(r.pad)[-1]))
    return bool(padded) and padded % stride == 0


def _split_phases(sch, pad, stride: int) -> None:
    """Store the padded input by column phase, ``(n, c, h, w % s, w // s)``,
    and compute it in that order (its writes consecutive)."""
    def phases(n, c, h, w):
        return n, c, h, w % stride, w // stride
    sch.transform_layout(pad, ("write", 0), phases)
    sch.transform_block_layout(pad, phases)

