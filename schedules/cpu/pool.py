"""CPU template for ``max_pool2d`` in channel blocks (``layout="NCHWc"``,
(N, C / c, H, W, c): what the layout pass gives a max pool between
channel-blocked convolutions, ResNet's stem pool), vectorized over a block's
channels.

A task is one output row of one channel block of one image (parallel over
image x row x block), cut into tiles of ``tile_ow`` columns whose maxima
stay in registers (a vector of the block's channels per column) while the
window's taps are read, each tap one vector load and one vector max per
column; the taps and the tile's columns are unrolled. The window's padding
is read through its condition, the same for every lane of a vector. The
generic schedule, which the NCHW and NHWC layouts keep, vectorizes a
reduction across its outputs only where the innermost output axis is a
whole vector long: a block of 16 uint8 codes is a quarter of one.

``tile_ow``   output columns per tile: a divisor of the output width.
              Default: the widest at most ``MAX_TILE_OW``.
``parallel``  1 to run the (image, row, block) tasks on the thread pool.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors
from .depthwise import row_tiles

MAX_TILE_OW = 8


@register_template("cpu", ops=("max_pool2d",))
def schedule_max_pool_blocked(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    if workload.attrs["layout"] != "NCHWc":
        return NOT_APPLICABLE
    width = const_int(workload.out_shapes[0][3])
    if width is None:
        return NOT_APPLICABLE
    tile = cfg.define_knob("tile_ow", divisors(width), default=max(t for t in divisors(width) if t <= MAX_TILE_OW))
    par = cfg.define_knob("parallel", (0, 1), default=1)

    row_tiles(sch, block, sch.get_loops(block), tile, par)  # the depthwise template's tasks and tiles
    return None
