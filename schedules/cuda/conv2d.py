"""CUDA template for conv2d (NCHW), after TVM's classic "optimize convolution
on GPU" schedule.

A thread block computes ``threads_oc * tile_oc`` output channels by
``threads_s * tile_s`` output columns of one output row of one image (the
staged input tile then has a fixed size: ``tile_c`` channels by the kernel's
rows by the columns the block's outputs read). The input channels run in slices of ``tile_c``: the slice of the
(zero-padded) input the block's positions read, and the slice of the
weights its channels need, are copied to shared memory by all the threads
together; then every thread accumulates its ``tile_oc x tile_s`` register
tile, loading ``tile_oc`` weights and ``tile_s`` inputs from shared memory
into registers per kernel tap. NHWC convolutions are declined (dispatch
gives them the CUDA fallback). ``conv2d_backward_data`` is the same TE body
(over its zero-placed input, reading the kernel flipped): the same schedule.
"""
from __future__ import annotations

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
    vector = vector_knob(cfg, "vector", cfg.workload.dtypes[0], default=1)

    staged, acc = stage_operands(sch, conv, inline=(0,))  # the zero padding goes into the fetch

    ob, ot, oi = sch.split(o, [None, threads_oc, tile_oc])
    xb, st, si = sch.split(x, [None, threads_s, tile_s])
    rco, rci = sch.split(rc, [None, tile_c])
    sch.reorder(n, ob, y, xb, ot, st, rco, rci, ry, rx, oi, si)
    sch.bind(sch.fuse(n, ob), "blockIdx.y")
    sch.bind(sch.fuse(y, xb), "blockIdx.x")
    stage_and_finish(sch, conv, acc, ((ot, st), (threads_oc, threads_s)), rco, rx,
                     staged, vector, cfg)
