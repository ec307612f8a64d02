"""CUDA template for conv2d (NCHW), after TVM's classic "optimize convolution
on GPU" schedule.

A thread block computes ``threads_oc * tile_oc`` output channels by
``threads_s * tile_s`` output columns of ``tile_y`` output rows of one
image (the staged input tile then has a fixed size: ``tile_c`` channels by
the rows those output rows read by the columns the block's outputs read).
The input channels run in slices of ``tile_c``: the slice of the
(zero-padded) input the block's positions read, and the slice of the
weights its channels need, are copied to shared memory by all the threads
together; then every thread accumulates its ``tile_oc x tile_y x tile_s``
register tile, loading ``tile_oc`` weights and ``tile_y x tile_s`` inputs
from shared memory into registers per kernel tap. NHWC convolutions are
declined (dispatch gives them the CUDA fallback). ``conv2d_backward_data``
is the same TE body (over its zero-placed input, reading the kernel
flipped): the same schedule.
"""
from __future__ import annotations

import math

from ...errors import ScheduleError
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, extent
from .common import pow2_at_least, stage_and_finish, stage_operands, vector_knob


@register_template("cuda", ops=("conv2d", "conv2d_backward_data"))
def schedule_conv2d_cuda(sch, block, cfg: Config) -> NotApplicable | None:
    if cfg.workload.attrs.get("layout", "NCHW") != "NCHW":
        return NOT_APPLICABLE
    conv = block
    n, o, y, x, rc, ry, rx = sch.get_loops(conv)
    o_ext, c_ext = const_int(extent(sch, o)), const_int(extent(sch, rc))
    s_ext = const_int(extent(sch, x))
    threads_oc = cfg.define_knob("threads_oc", (1, 2, 4, 8, 16, 32), default=min(8, pow2_at_least(o_ext or 8, 8)))
    tile_s = cfg.define_knob("tile_s", (1, 2, 4), default=2 if (s_ext or 64) >= 32 else 1)
    threads_s = cfg.define_knob("threads_s", (4, 8, 16, 32, 64),
                                default=min(32, max(4, pow2_at_least(-(-(s_ext or 64) // tile_s), 32))))
    tile_oc = cfg.define_knob("tile_oc", (1, 2, 4, 8), default=4 if (o_ext or 32) >= 4 * threads_oc else 1)
    tile_c = cfg.define_knob("tile_c", (1, 2, 4, 8, 16), default=min(8, pow2_at_least(c_ext or 8, 8)))
    blocks = [const_int(extent(sch, n)), -(-(o_ext or 1) // (threads_oc * tile_oc)),
              -(-(s_ext or 1) // (threads_s * tile_s))]
    tile_y = cfg.define_knob("tile_y", (1, 2, 4), default=_default_tile_y(cfg, const_int(extent(sch, y)), blocks))
    vector = vector_knob(cfg, "vector", cfg.workload.dtypes[0], default=1)
    if tile_oc * tile_y * tile_s > 64:
        raise ScheduleError(f"got a register tile of {tile_oc}x{tile_y}x{tile_s} accumulators, expected at most 64",
                            op=cfg.workload.op.name, arg="config")

    staged, acc = stage_operands(sch, conv, inline=(0,))  # the zero padding goes into the fetch

    ob, ot, oi = sch.split(o, [None, threads_oc, tile_oc])
    yb, yi = sch.split(y, [None, tile_y])
    xb, st, si = sch.split(x, [None, threads_s, tile_s])
    rco, rci = sch.split(rc, [None, tile_c])
    sch.reorder(n, ob, yb, xb, ot, st, rco, rci, ry, rx, oi, yi, si)
    sch.bind(sch.fuse(n, ob), "blockIdx.y")
    sch.bind(sch.fuse(yb, xb), "blockIdx.x")
    stage_and_finish(sch, conv, acc, ((ot, st), (threads_oc, threads_s)), rco, rx,
                     staged, vector, cfg)


#: thread blocks a default ``tile_y`` must leave (an H100 has 132 multiprocessors)
MIN_BLOCKS = 192


def _default_tile_y(cfg: Config, rows: int | None, blocks: list) -> int:
    """Output rows per thread, from a sweep on an H100 (ResNet-18's layers at
    batch 8, TFLOPS for tile_y 1 / 2 / 4): 28-row maps 4 (forward 9.7 / 14.0 /
    19.4, data gradient 10.0 / 18.8 / 18.8), 14-row maps 2 (forward 5.7 / 7.6
    / 6.1, and 5.4 / 8.3 / 4.2 for the stride-2 layer's; data gradient 6.5 /
    7.8 / 6.3), 7-row maps 2 forward (2.9 / 3.9 / 3.3, stride 2 3.0 / 3.6 /
    2.4) but 1 for the data gradient (5.4 / 4.3 / 3.3); 1 for a stride-2 data
    gradient (14 rows: 4.6 / 4.2 / 4.8) and 56-row maps (15.0 / 14.9 / 15.7).
    A stride-2 conv takes at most 2 (its 64x56x56 layer's 28 rows: untimed).
    Each only where the grid keeps ``MIN_BLOCKS`` blocks (at batch 1 the
    layers run on fewer: not measured, kept at 1)."""
    forward = cfg.workload.op.name == "conv2d"
    if rows is None or None in blocks or not forward and max(cfg.workload.attrs["stride"]) > 1:
        return 1
    choice = 4 if 20 <= rows < 40 else 2 if 10 <= rows < 20 or rows < 10 and forward else 1
    if max(cfg.workload.attrs["stride"]) > 1:
        choice = min(choice, 2)  # 4 rows of a stride-2 conv read 9 input rows: slower on both layers timed
    return choice if math.prod(blocks) * -(-rows // choice) >= MIN_BLOCKS else 1
