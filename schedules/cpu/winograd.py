"""CPU template for ``conv2d_winograd``: every stage of one (image, channel
block) computed in one parallel task, so a task's tiles stay in L1/L2
between the stages.

Per task, for output tiles of m x m (F(m x m, 3x3), m = 2 or 4, read from
the weight's shape): the input transform (``_input``, ``_v``: vectorized
over the input channels, within one of the input's channel blocks, the (m +
2)^2 positions unrolled so each is one expression), one matrix product per
position (``_gemm``: a register tile of ``tile_p`` tiles x the block's
``oc`` channels, ``oc / lanes`` weight vectors and ``tile_p`` broadcasts per
input channel, as the direct conv's micro-kernel), and the output transform
(``_rows``, then the output itself, its m x m outputs unrolled; a fused
epilogue joins its write-back).

``tile_p``    tiles per register tile: a divisor of the tiles, the most
              within the direct conv's accumulator budget (``conv2d_defaults.register_budget``):
              on 16 -> 32 channels on an 8x8 map (AVX-512) 8 tiles x 2 vectors
              ran faster than 4 or 16, and 1.5x the direct ``conv2d_packed``
              (``python benchmarks/compare_configs.py conv2d_winograd``, and
              ``winograd_vs_direct.py`` for the direct conv; figures:
              benchmarks/RESULTS.md, "Template choices: the measurements
              behind schedules/").
``parallel``  1 to run the tasks on the thread pool.
``fuse_transforms`` 1 to compute each transform in one pass: the rows pass
              (``_input``, ``_rows``) inlined into the columns pass, a tile's
              positions in registers, the sums the positions share
              computed once; 0 for a stage per pass, through a task buffer.

A task recomputes the input transform for each of its image's channel
blocks (one block, the zoo CNN's 32 channels, recomputes nothing).
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..generic import PARALLEL_MIN
from ..util import const_int, divisors, extent, find_block, work
from ...te.winograd import output_tile
from .conv2d_defaults import register_budget


#: ``fuse_transforms``' default for each output tile: fused, F(2x2) ran
#: 1.1-1.2x unfused; F(4x4) gained 4% but compiled 6x slower, and up to 80x
#: on odd maps with padding 2 or an NCHW input (``python
#: benchmarks/compare_configs.py conv2d_winograd``; figures:
#: benchmarks/RESULTS.md, "Template choices: the measurements behind
#: schedules/")
FUSE_TRANSFORMS = {2: 1, 4: 0}


@register_template("cpu", ops=("conv2d_winograd",))
def schedule_winograd(sch, block, cfg: Config) -> None:
    name = cfg.workload.op.name
    oc, step = int(cfg.workload.shapes[1][4]), output_tile(cfg.workload.shapes[1])
    lanes = cfg.target.lanes(str(sch.get(block).writes[0].source.dtype))
    vectors = max(1, -(-oc // lanes))
    pad = find_block(sch, name + "_pad")
    if pad is not None:
        sch.compute_inline(pad)
    gemm = sch.get_sblock(name + "_gemm")
    tiles = const_int(extent(sch, sch.get_loops(gemm)[4]))
    choices = divisors(tiles)
    fit = [d for d in choices if d <= register_budget(lanes)(vectors)]
    tile_p = cfg.define_knob("tile_p", choices, default=max(fit or [1]))
    par = cfg.define_knob("parallel", (0, 1), default=1)
    fused = cfg.define_knob("fuse_transforms", (0, 1), default=FUSE_TRANSFORMS[step])
    if fused:  # each transform in one pass: a tile's rows pass computed inside its columns pass
        sch.compute_inline(sch.get_sblock(name + "_input"))
        sch.compute_inline(sch.get_sblock(name + "_rows"))

    if cfg.workload.attrs["out_block"]:
        n, kb, y, z, k = sch.get_loops(block)
    else:
        n, o, y, z = sch.get_loops(block)
        kb, k = sch.split(o, [None, oc])
    yo, yi = sch.split(y, [None, step])
    zo, zi = sch.split(z, [None, step])
    sch.reorder(n, kb, yo, zo, yi, zi, k)
    outer = sch.fuse(n, kb)
    if par:
        sch.parallel(outer)
    sch.unroll(yi)
    sch.unroll(zi)
    sch.vectorize(k)

    if not fused:
        _transform(sch, sch.get_sblock(name + "_rows"), outer, (0, 1, 2, 3), (0, 1))  # i, u, p, k

    sch.compute_at(gemm, outer, preserve_unit_loops=True)  # a map of one tile keeps its tile loop
    e, u, p, k, rc = sch.get_loops(gemm)[-5:]
    po, pi = sch.split(p, [None, tile_p])
    sch.reorder(e, u, po, rc, pi, k)
    acc = sch.cache_write(gemm, 0, "local")
    sch.reverse_compute_at(acc, po)
    sch.vectorize(k)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(pi)
    sch.decompose_reduction(gemm, rc)
    *_, row, lane = sch.get_loops(acc)
    sch.unroll(row)
    sch.vectorize(lane)

    in_block = cfg.workload.attrs["in_block"]
    _transform(sch, sch.get_sblock(name + "_v"), outer, (2, 0, 1, 3), (0, 1), in_block)  # e, u, p, c: p first
    if not fused:
        _transform(sch, sch.get_sblock(name + "_input"), outer, (0, 1, 2, 3), (1, 2), in_block)  # p, e, v, c


def _transform(sch, block, outer, order: tuple, unrolled: tuple, block_width: int = 0) -> None:
    """A transform stage under the task loop: its four loops in ``order``,
    its two position loops (``unrolled``, indices into its own loops)
    unrolled so each position is one expression, the channels innermost, vectorized;
    with a ``block_width`` narrower than the channels, the channels are split
    into blocks of it, outside the positions, so a vector never spans two of
    the input's channel blocks."""
    sch.compute_at(block, outer, preserve_unit_loops=True)
    loops = sch.get_loops(block)[-4:]
    first, *positions = (loops[k] for k in order[:3])
    channels = [loops[3]]
    if block_width and (const_int(extent(sch, loops[3])) or 0) > block_width:
        channels = sch.split(loops[3], [None, block_width])
    sch.reorder(first, *channels[:-1], *positions, channels[-1])
    for k in unrolled:
        sch.unroll(loops[k])
    sch.vectorize(channels[-1])


@register_template("cpu", ops=("winograd_conv2d_weight",))
def schedule_winograd_weight(sch, block, cfg: Config) -> None:
    """The weight transform, one parallel task per (channel block, input
    channel): its 3 x 3 taps copied into a vector of the block's channels
    each, then ``G`` along rows and columns with the positions unrolled (each
    a sum of constant multiples), vectorized over the block's channels. In a
    training step it runs every call (``kiln.strategy.conv2d``)."""
    name = cfg.workload.op.name
    b, e, u, i, j = sch.get_loops(block)
    sch.reorder(b, i, e, u, j)
    outer = sch.fuse(b, i)
    if cfg.define_knob("parallel", (0, 1), default=int((work(sch, sch.get_loops(block)) or 0) >= PARALLEL_MIN)):
        sch.parallel(outer)
    for loop in (e, u):
        sch.unroll(loop)
    sch.vectorize(j)
    for stage in ("_rows", "_taps"):  # consumers first: each goes under the task loop of what reads it
        inner = sch.get_sblock(name + stage)
        sch.compute_at(inner, outer, preserve_unit_loops=True)
        *_, p1, p2, _, lane = sch.get_loops(inner)
        sch.unroll(p1)
        sch.unroll(p2)
        sch.vectorize(lane)
