"""CPU template for ``conv2d_int8``: register tiles of int32 accumulators over
output positions of one row and blocks of output channels, one ``vpdpbusd``
per position, block and 4 input channels where the target has AVX-512 VNNI (on AVX2, with
7-bit weights, ``vpmaddubsw`` and ``vpmaddwd``: ``int8.dot_instruction``).

The quantizing stage (``conv2d_int8_quantize``: the input as padded uint8
(N, H, W, C); none where the input is uint8 codes in channel blocks and
unpadded) runs first, parallel over its rows; reading a channel-blocked
input (``in_block``) it runs along contiguous channels, a vector at a time. A task then holds a tile of
``tile_w`` adjacent output positions of one output row x ``tile_p`` blocks
of ``bn`` output channels, and steps over the taps and the channels 4 at a
time: 4 uint8 of a position broadcast, multiplied with each block's (bn, 4)
int8 weights and summed into its lanes (``int8_intrin.VNNI_16x4``; without
VNNI the same loops as vectorized int32 arithmetic, exact and slower). A
channel-blocked output (``out_block``) is written tile by tile, as soon as
its sums are done (one vector store per position and block: 1x1 layers of
64 channels 1.2-1.6x faster than writing a whole row after its tiles, whose
zeroed sums went through memory); an NCHW output, a strided scatter, is
written along the task's whole row.

``tile_w``    output positions of the register tile: a divisor of the output
              width, at most ``MAX_TILE_W``. Default: the most accumulators
              (``tile_w x tile_p``, at most ``MAX_ACCUMULATORS``).
``tile_p``    blocks of ``bn`` output channels: a divisor of the blocks, at
              most ``MAX_TILE_P``.
``parallel``  1 to run the tasks on the thread pool.
``rows_first`` 1 to order the tasks (image, row, channel blocks), so the
              threads split an image's rows, 0 for (image, channel blocks,
              row): each thread then reads half the weight. Default: 1 where
              the weight has fewer elements than an image of the input, as
              for the float convolution (``conv2d_steps.task_order``).
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..util import const_int, divisors, find_block
from .conv2d_steps import task_order
from .int8 import dot_instruction, dot_steps
from .int8_intrin import local

#: register tile bounds: 8 positions, 4 blocks, 24 of the 32 zmm registers as accumulators
MAX_TILE_W, MAX_TILE_P, MAX_ACCUMULATORS = 8, 4, 24
#: channels the quantizing stage converts at a time from a channel-blocked input
QUANT_LANES = 16


def default_tile(width: int, panels: int) -> tuple[int, int]:
    """``(tile_w, tile_p)``: the most accumulators within the bounds, more blocks on a tie."""
    pairs = [(w * p, p, w) for w in divisors(width) if w <= MAX_TILE_W
             for p in divisors(panels) if p <= MAX_TILE_P and w * p <= MAX_ACCUMULATORS]
    _, p, w = max(pairs)
    return w, p


@register_template("cpu", ops=("conv2d_int8",))
def schedule_conv2d_int8(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    width, panels, bn = (const_int(d) for d in (workload.out_shapes[0][3], workload.shapes[1][0],
                                                  workload.shapes[1][4]))
    if width is None or panels is None:
        return NOT_APPLICABLE
    tw, tp = default_tile(width, panels)
    tile_w = cfg.define_knob("tile_w", [d for d in divisors(width) if d <= MAX_TILE_W], default=tw)
    tile_p = cfg.define_knob("tile_p", [d for d in divisors(panels) if d <= MAX_TILE_P], default=tp)
    par = cfg.define_knob("parallel", (0, 1), default=1)

    quant = find_block(sch, "conv2d_int8_quantize")  # none where the sums read blocked codes as they are
    if quant is not None:
        b, y, _, ch = sch.get_loops(quant)
        rows = sch.fuse(b, y)
        if par:
            sch.parallel(rows)
        lanes = const_int(workload.shapes[1][3]) * 4
        if workload.attrs["in_block"] and lanes % QUANT_LANES == 0:
            sch.vectorize(sch.split(ch, [None, QUANT_LANES])[1])

    acc = sch.get_sblock("conv2d_int8_acc")
    b, y, z, p, j, ky, kx, c4, r = sch.get_loops(acc)
    zo, zi = sch.split(z, [None, tile_w])
    po, pi = sch.split(p, [None, tile_p])
    sch.reorder(b, y, po, zo, ky, kx, c4, zi, pi, j, r)
    task = sch.fuse(*task_order(sch, cfg, b, po, y))  # a whole output row per task
    if par:
        sch.parallel(task)
    intrinsic = dot_instruction(cfg.target, workload, bn)
    if workload.attrs["out_block"]:
        # each tile written as soon as it is summed, from its registers (a vector per position and block)
        sch.reverse_compute_at(block, zo)
        sch.set_scope(acc, 0, "local")
        intrinsic = intrinsic and local(intrinsic)
        sch.vectorize(sch.get_loops(block)[-1])  # the bn lanes of one position and block
    else:
        sch.reverse_compute_at(block, task)  # the NCHW write-back runs along the row
    dot_steps(sch, acc, ky, (zi, pi), j, r, intrinsic)
    return None
