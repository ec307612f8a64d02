"""The steps the CPU conv templates' variants (``conv2d.py``,
``conv2d_transposed.py``) share, each on a ``ConvRoles``: the register tile's
and the tasks' knobs, the loop nest (tiles, order, the accumulator tile,
unrolling, parallel tasks) and where the zero padding is computed. The knobs
are documented in ``conv2d.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..generic import schedule_injective
from .conv2d_defaults import (PAD_AT_COPIES, default_task_rows, divisor_tile, pad_copies, rows_first_default,
                              task_row_choices)
from .conv2d_roles import ConvRoles


def channel_tile(cfg: Config, r: ConvRoles, default: int) -> int:
    """``tile_oc``: one to four vectors of channels, or ``default``; only
    the widths that divide the channels when any does."""
    widths = sorted({r.lanes, 2 * r.lanes, 3 * r.lanes, 4 * r.lanes, default})
    whole = [t for t in widths if r.channels % t == 0]
    return cfg.define_knob("tile_oc", tuple(whole or widths), default=default)


def column_tile(cfg: Config, r: ConvRoles, tile_oc: int, tiles: tuple[int, int], budget, step: int = 1) -> int:
    """``tile_ow``: the default tile's width (``tiles``: ``conv_tiles``'
    ``(tile_oc, tile_ow)``) with its ``tile_oc``, else the widest that
    ``budget`` allows ``tile_oc``'s vectors."""
    oc_default, ow_default = tiles
    vectors = max(1, -(-tile_oc // r.lanes))
    fit = divisor_tile(r.width, budget(vectors), step) if tile_oc != oc_default else ow_default
    return cfg.define_knob("tile_ow", tuple(range(1, 17)), default=fit)


def row_work(r: ConvRoles, tile_oc: int) -> int:
    """Multiply-adds of one output row of a task."""
    return r.width * tile_oc * (r.per_output or 1)


def task_rows(cfg: Config, r: ConvRoles, tile_oc: int, blocks: int, skip: bool) -> int:
    """``task_rows`` of a convolution without phases: by default the whole
    map where it is unrolled (``skip``), else ``default_task_rows``, a
    padded conv's tasks growing while an image of ``blocks`` channel blocks
    keeps enough of them."""
    rows = task_row_choices(r.height, 1)
    default = r.height if skip else default_task_rows(
        rows, row_work(r, tile_oc), blocks=blocks if r.pad is not None and r.height else None)
    return cfg.define_knob("task_rows", rows, default=default)


def few_pad_copies(cfg: Config, r: ConvRoles, blocks: int, rows: int) -> bool:
    """Whether tasks of ``rows`` rows, ``blocks`` per image, copy each padded
    input row at most ``PAD_AT_COPIES`` times (``pad_at``'s default)."""
    return pad_copies(cfg.workload.attrs, blocks, rows, r.kernel_rows) <= PAD_AT_COPIES


def padding_knobs(cfg: Config, r: ConvRoles, skip: bool, tile_oc: int, pad_at: bool) -> tuple:
    """``(unroll_map, pad_inline, pad_at)``: ``unroll_map`` where the
    padding's products are left out (``skip``), ``pad_inline`` under it,
    ``pad_at`` (default ``pad_at``) where the padding is still copied."""
    # not over a predicated channel tail: its unrolled tests took LLVM minutes (24 channels in tiles of 16)
    unroll = skip and cfg.define_knob("unroll_map", (0, 1), default=int(r.channels % tile_oc == 0))
    # the map unrolled, whether a product reads padding is a constant of each: the input is read where it
    # lies, the padding never copied
    inline = r.pad is not None and unroll and cfg.define_knob("pad_inline", (0, 1), default=1)
    at = r.pad is not None and not inline and cfg.define_knob("pad_at", (0, 1), default=int(pad_at))
    return unroll, inline, at


@dataclass(frozen=True)
class Tiles:
    """The split loops: channel blocks and a block's channels (``oo``,
    ``oi``), column tiles and a tile's columns (``zo``, ``zi``), row blocks
    and a task's rows (``yo``, ``yi``)."""

    oo: object
    oi: object
    zo: object
    zi: object
    yo: object
    yi: object


def split_tiles(sch, r: ConvRoles, tile_oc: int, tile_ow: int, rows: int) -> Tiles:
    """Split the channels (unless already in blocks), columns and rows into
    register tiles and tasks."""
    oo, oi = r.blocks or sch.split(r.o, [None, tile_oc])
    zo, zi = sch.split(r.z, [None, tile_ow])
    yo, yi = sch.split(r.y, [None, rows])
    return Tiles(oo, oi, zo, zi, yo, yi)


def accumulate_nchw(sch, r: ConvRoles, t: Tiles, phases: tuple = ()):
    """Order an NCHW conv's loops: tasks (image, channel block, row block),
    a task's rows (and their ``phases``), column tiles, the reduction, the
    register tile; accumulate each tile in a local buffer, channels
    innermost, written back after it. Returns the write-back block."""
    sch.reorder(r.n, t.oo, t.yo, t.yi, *phases, t.zo, *r.reduction, t.zi, t.oi)
    acc = sch.cache_write(r.conv, 0, "local")
    sch.reverse_compute_at(acc, t.zo)
    if r.o is not None:  # channels innermost in the accumulator tile (blocks already have them so)
        sch.transform_layout(r.conv, ("write", 0), lambda n_, o_, y_, z_: (n_, y_, z_, o_))
    return acc


def accumulate_nhwc(sch, r: ConvRoles, t: Tiles):
    """``accumulate_nchw`` for NHWC, whose channels are innermost already:
    tasks (image, row block), a task's rows, column tiles, channel blocks."""
    sch.reorder(r.n, t.yo, t.yi, t.zo, t.oo, *r.reduction, t.zi, t.oi)
    acc = sch.cache_write(r.conv, 0, "local")
    sch.reverse_compute_at(acc, t.oo)
    return acc


def unroll_tile(sch, r: ConvRoles, t: Tiles, unroll_kw: int) -> None:
    """The micro-kernel: channel lanes vectorized, the tile's columns (and,
    with ``unroll_kw``, the kernel columns) unrolled."""
    sch.vectorize(t.oi)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(t.zi)
    if unroll_kw:
        sch.unroll(r.rx)


def unroll_map(sch, r: ConvRoles, t: Tiles) -> None:
    """``unroll_map``: a task's rows, its column tiles and the kernel rows
    unrolled (with the columns' and taps' loops unrolled, which products read
    padding is a constant of each: those are left out of the code)."""
    sch.unroll(t.yi)
    sch.unroll(t.zo)
    sch.unroll(r.ry)


def task_order(sch, cfg: Config, n, blocks, rows) -> tuple:
    """The task loops (image, channel blocks, row blocks), reordered as
    ``rows_first`` says: 1 puts the row blocks before the channel blocks, so
    the threads split an image's rows (default ``rows_first_default``)."""
    rows_first = cfg.define_knob("rows_first", (0, 1), default=int(rows_first_default(cfg.workload)))
    order = (rows, blocks) if rows_first else (blocks, rows)
    sch.reorder(*order)
    return (n, *order)


def run_tasks(sch, r: ConvRoles, loops: tuple, par: int):
    """Fuse the task ``loops`` into one (parallel with ``par``) and zero the
    accumulators before the reduction; returns the task loop."""
    task = sch.fuse(*loops)
    if par:
        sch.parallel(task)
    sch.decompose_reduction(r.conv, r.reduction[0])
    return task


def vectorize_write_back(sch, acc, depth: int) -> None:
    """Vectorize the write-back's innermost loop below its first ``depth``."""
    own = sch.get_loops(acc)[depth:]
    if own:
        sch.vectorize(own[-1])


def place_padding(sch, cfg: Config, r: ConvRoles, inline: bool, at: bool, task) -> None:
    """The zero padding: read in place (``pad_inline``), computed by each
    task for the rows it reads, right before it reads them (``pad_at``), or
    a parallel stage of its own."""
    if inline:
        sch.compute_inline(r.pad)
    elif at:
        sch.compute_at(r.pad, task)
        sch.vectorize(sch.get_loops(r.pad)[-1])
    elif r.pad is not None:
        schedule_injective(sch, r.pad, cfg, "pad.")
