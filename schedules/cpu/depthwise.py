"""CPU template for ``depthwise_conv2d_packed``: a depthwise convolution in
channel blocks, vectorized over a block's channels.

A task is one output row of one channel block of one image (parallel over
image x row x block: the threads split an image's rows, so each core reads
the rows it wrote in the layer before; with the blocks outermost, each core
read every block, half of them from the other core's cache: MobileNetV2 at
batch 1, with its 1x1 layers split by rows too, 3.63 -> 3.23 ms). Its row
is cut into tiles of ``tile_ow`` columns;
each tile's ``tile_ow`` x ``oc`` outputs stay in registers (``oc / lanes``
vectors a column) while the taps are summed, each tap one vector
multiply-add per vector of the tile: an input vector (the tap's column, a
block's channels) times the tap's weight vector. The kernel rows and
columns and the tile's columns are unrolled. A zero-padded input is read
through its padding's condition, the same for every lane of a vector.

``tile_ow``   output columns per tile: a divisor of the output width.
              Default: the widest that keeps the tile's accumulators, a
              weight vector and an input vector within the vector registers
              and is at most ``MAX_TILE_OW`` wide.
``parallel``  1 to run the (image, row, block) tasks on the thread pool.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors, find_block

#: the widest default tile: past it the unrolled body outgrows what the loads between FMAs can hide
MAX_TILE_OW = 8


@register_template("cpu", ops=("depthwise_conv2d_packed",))
def schedule_depthwise_packed(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    width, oc = const_int(workload.out_shapes[0][3]), const_int(workload.shapes[1][4])
    if width is None or oc is None:
        return NOT_APPLICABLE
    tile, par = define_knobs(cfg, width, oc, workload.out_dtypes[0])

    pad = find_block(sch, "conv2d_pad")
    if pad is not None:
        sch.compute_inline(pad)
    if workload.attrs["out_block"]:
        n, b, y, x, lane, rh, rw = sch.get_loops(block)
    else:  # an NCHW output: its channels as (block, lane)
        n, c, y, x, rh, rw = sch.get_loops(block)
        b, lane = sch.split(c, [None, oc])
    row_tiles(sch, block, (n, b, y, x, lane, rh, rw), tile, par)
    return None


def define_knobs(cfg: Config, width: int, oc: int, dtype: str) -> tuple[int, int]:
    """``tile_ow`` and ``parallel`` for output rows of ``width`` columns in
    blocks of ``oc`` channels, accumulated in ``dtype`` vectors."""
    vectors = -(-oc // cfg.target.lanes(dtype))
    fits = [t for t in divisors(width) if t <= MAX_TILE_OW and (t + 2) * vectors <= cfg.target.vector_registers]
    return (cfg.define_knob("tile_ow", divisors(width), default=max(fits or [1])),
            cfg.define_knob("parallel", (0, 1), default=1))


def row_tiles(sch, block, loops, tile: int, par: int) -> None:
    """A windowed reduction over channel blocks (``loops``: image, block, row,
    column, lane, window row, window column) as tasks of one output row of
    one block, in (image, row, block) order, its columns in tiles of
    ``tile`` kept in registers while the window's taps are read (vectorized
    over the lanes; the taps and the tile's columns unrolled), each tile
    written back after its taps."""
    n, b, y, x, lane, rh, rw = loops
    xo, xi = sch.split(x, [None, tile])
    sch.reorder(n, y, b, xo, rh, rw, xi, lane)
    acc = sch.cache_write(block, 0, "local")  # the tile's accumulators, written back after its taps
    sch.reverse_compute_at(acc, xo)
    sch.vectorize(lane)  # before decompose_reduction (TVM rejects it after)
    for loop in (xi, rh, rw):
        sch.unroll(loop)
    rows = sch.fuse(n, y, b)
    if par:
        sch.parallel(rows)
    sch.decompose_reduction(block, rh)
    sch.vectorize(sch.get_loops(acc)[-1])
