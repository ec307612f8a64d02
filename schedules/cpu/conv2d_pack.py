"""A conv's weight in blocks of ``tile_oc`` output channels, ``[O / tile_oc,
I, KH, KW, tile_oc]``, so the micro-kernel's channel vectors are contiguous:
copied there (the ``pack_w`` knob of ``conv2d.py``) from a forward conv's
OIHW weight (``OIHW``) or from a data gradient's IOHW one (``IOHW``: its
output channels are ``w``'s input channels), or already there
(``PackedWeight``: ``conv2d_packed``).

The copy is written a channel vector at a time. Reading the source in its
own order scattered every element to another cache line, with a division
per lane for its address (3.2 of the 4.7 ms of a 512 -> 512 channel 7x7 conv
at batch 1). OIHW weights are copied as a tiled transpose
(``_tiled_transpose``): ``lanes`` consecutive (I, KH, KW) elements of
``tile_oc`` channels, within L1 both ways, one vector's channels at a time:
the source rows of one tile are a channel's I x KH x KW floats apart, which
for 512 input channels and a 3x3 kernel (18 KB, half a 4 KB page off) puts
them in two L1 sets, and 32 rows there overflow the 8 ways. IOHW weights
are read in their own order, a source row at a time, each block's channels a
vector gathered from within the row: blocks outermost (every task reading
all rows, a vector's channels 9 floats apart) ran the data gradient slower
than the forward conv. Figures: benchmarks/RESULTS.md, "Template choices:
the measurements behind schedules/".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import Config
from .conv2d_roles import ConvRoles
from .conv2d_steps import channel_tile


@dataclass(frozen=True)
class CopiedWeight:
    """A weight layout copied into channel blocks (``pack_w``):
    ``blocks(tile_oc)`` the index map to them, ``copy(sch, pack, tile_oc,
    lanes)`` schedules the copy as a parallel stage of its own,
    ``copy_in_task(sch, pack, task, tile_oc, lanes)`` inside each task
    (``pack_at``)."""

    blocks: Callable
    copy: Callable
    copy_in_task: Callable

    def tile_oc(self, cfg: Config, r: ConvRoles, default: int) -> int:
        """The ``tile_oc`` knob (``channel_tile``)."""
        return channel_tile(cfg, r, default)

    def pack_w(self, cfg: Config) -> int:
        """The ``pack_w`` knob."""
        return cfg.define_knob("pack_w", (0, 1), default=1)

    def read_copy(self, sch, r: ConvRoles, tile_oc: int):
        """Read the weight from a copy in blocks of ``tile_oc`` channels
        (zeros past the channels in a partial last block); returns the
        copy's block."""
        pack = sch.cache_read(r.conv, 1, "global")
        sch.transform_layout(r.conv, ("read", 1), self.blocks(tile_oc),
                             pad_value=0.0 if r.channels % tile_oc else None)
        return pack


@dataclass(frozen=True)
class PackedWeight:
    """A weight already in blocks of ``width`` channels (``conv2d_packed``):
    ``tile_oc`` is their width, and nothing is copied."""

    width: int

    def tile_oc(self, cfg: Config, r: ConvRoles, default: int) -> int:
        """The blocks' width: no knob."""
        return self.width

    def pack_w(self, cfg: Config) -> int:
        """0, and no knob: nothing to copy."""
        return 0


def _oihw_blocks(tile_oc: int):
    def in_blocks(o_, i, kh, kw):
        return o_ // tile_oc, i, kh, kw, o_ % tile_oc
    return in_blocks


def _iohw_blocks(tile_oc: int):
    def in_blocks(i, o_, kh, kw):
        return o_ // tile_oc, i, kh, kw, o_ % tile_oc
    return in_blocks


def _stage_loops(sch, pack, lanes: int) -> list | None:
    """The copy stage's four loops, or None where a padded channel block
    brought its own loops: the copy then stays in order, vectorized and
    parallel."""
    loops = sch.get_loops(pack)
    if len(loops) == 4:
        return loops
    outer, vec = sch.split(sch.fuse(*loops), [None, lanes])
    sch.vectorize(vec)
    sch.parallel(outer)
    return None


def _task_loops(sch, pack, task) -> list | None:
    """The copy computed in ``task``, for its block of channels; its four
    loops below the task, or None where a dim of one (a single input
    channel) left no loop: the copy then stays in order, vectorized (a
    block of one weight, a 1x1 kernel of one channel in and out, no loop at all)."""
    sch.compute_at(pack, task)
    own = sch.get_loops(pack)[1:]
    if len(own) == 4:
        return own
    if own:
        sch.vectorize(own[-1])
    return None


def _copy_oihw(sch, pack, tile_oc: int, lanes: int) -> None:
    loops = _stage_loops(sch, pack, lanes)
    if loops is not None:
        o, i, kh, kw = loops
        ob, oi = sch.split(o, [None, tile_oc])
        sch.parallel(sch.fuse(ob, _tiled_transpose(sch, oi, [i, kh, kw], tile_oc, lanes)))


def _copy_oihw_in_task(sch, pack, task, tile_oc: int, lanes: int) -> None:
    own = _task_loops(sch, pack, task)
    if own is not None:
        oc, *rest = own
        _tiled_transpose(sch, oc, rest, tile_oc, lanes)


def _copy_iohw(sch, pack, tile_oc: int, lanes: int) -> None:
    loops = _stage_loops(sch, pack, lanes)
    if loops is not None:
        i, o, kh, kw = loops
        ob, oi = sch.split(o, [None, tile_oc])
        sch.reorder(i, ob, kh, kw, oi)
        sch.parallel(sch.fuse(i, ob))
        sch.vectorize(oi)


def _copy_iohw_in_task(sch, pack, task, tile_oc: int, lanes: int) -> None:
    own = _task_loops(sch, pack, task)
    if own is not None:
        i, oc, kh, kw = own
        sch.reorder(i, kh, kw, oc)
        _tiled_transpose(sch, oc, [i, kh, kw], tile_oc, lanes)


def _tiled_transpose(sch, oc, rest: list, tile_oc: int, lanes: int):
    """Copy one block's ``tile_oc`` channels (loop ``oc``) over the source's
    other dims (loops ``rest``, consecutive) as a tiled transpose: ``lanes``
    consecutive source elements of one vector's channels at a time, written
    a channel vector at a time. Returns the loop over the tiles of
    ``rest``."""
    ko, ki = sch.split(sch.fuse(*rest), [None, lanes])
    if tile_oc > lanes and tile_oc % lanes == 0:  # one vector's channels at a time
        oo, oi = sch.split(oc, [None, lanes])
        sch.reorder(ko, oo, ki, oi)
    else:
        oi = oc
        sch.reorder(ko, ki, oi)
    sch.vectorize(oi)
    return ko


#: a forward conv's weight (O, I, KH, KW)
OIHW = CopiedWeight(_oihw_blocks, _copy_oihw, _copy_oihw_in_task)
#: a data gradient's weight: the forward conv's (O, I, KH, KW), whose I are the gradient's output channels
IOHW = CopiedWeight(_iohw_blocks, _copy_iohw, _copy_iohw_in_task)
