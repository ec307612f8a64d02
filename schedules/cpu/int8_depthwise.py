"""CPU template for ``depthwise_conv2d_int8``: the float depthwise
template's tasks and register tiles (``depthwise.row_tiles``: one output row
of one channel block of one image per task, in (image, row, block) order;
``tile_ow`` columns of int32 accumulators in registers while the taps are
summed, each tap one vector multiply-add of the codes widened to int32 by
the tap's weight vector), over the sums of ``depthwise_conv2d_int8_acc``.

The quantizing stage, where there is one (a float input, or codes in other
blocks), runs first over the same (image, row, block) tasks, a block's
channels a vector. A channel-blocked output (``out_block``) is written tile
by tile from the registers, its epilogue (and a fused ``quantize`` to the
next layer's codes) vectorized over the block; an NCHW output, a strided
scatter, is written along the task's row.

``tile_ow``   output columns per tile: a divisor of the output width.
              Default: the widest that keeps the tile's accumulators, a
              weight vector and an input vector within the vector registers
              and is at most ``depthwise.MAX_TILE_OW`` wide.
``parallel``  1 to run the tasks on the thread pool.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, find_block
from .depthwise import define_knobs


@register_template("cpu", ops=("depthwise_conv2d_int8",))
def schedule_depthwise_int8(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    width, oc = const_int(workload.out_shapes[0][3]), const_int(workload.shapes[1][4])
    if width is None or oc is None:
        return NOT_APPLICABLE
    tile, par = define_knobs(cfg, width, oc, "int32")

    quant = find_block(sch, "depthwise_conv2d_int8_quantize")
    if quant is not None:
        n, b, y, _, lane = sch.get_loops(quant)
        sch.reorder(n, y, b)
        rows = sch.fuse(n, y, b)
        if par:
            sch.parallel(rows)
        sch.vectorize(lane)
    pad = find_block(sch, "depthwise_conv2d_int8_pad")
    if pad is not None:
        sch.compute_inline(pad)

    acc = sch.get_sblock("depthwise_conv2d_int8_acc")
    n, b, y, x, lane, rh, rw = sch.get_loops(acc)
    xo, xi = sch.split(x, [None, tile])
    sch.reorder(n, y, b, xo, rh, rw, xi, lane)
    rows = sch.fuse(n, y, b)
    if par:
        sch.parallel(rows)
    if workload.attrs["out_block"]:
        sch.reverse_compute_at(block, xo)  # the tile's write-back, from its registers
        sch.set_scope(acc, 0, "local")
        xw, lw = sch.get_loops(block)[-2:]
        sch.unroll(xw)
        sch.vectorize(lw)
    else:
        sch.reverse_compute_at(block, rows)  # the NCHW write-back runs along the row
    sch.vectorize(lane)  # before decompose_reduction (TVM rejects it after)
    for loop in (xi, rh, rw):
        sch.unroll(loop)
    sch.decompose_reduction(acc, rh)
    sch.vectorize(sch.get_loops(sch.get_sblock("depthwise_conv2d_int8_acc_init"))[-1])
    return None
