"""CPU template for ``conv2d_backward_weight`` (``te/conv_grad.py``).

The op computes dw channels-last, ``acc[c, i, j, o]``, a reduction over
(n, y, z) of ``xpad[n, c, y*s + i*d, z*s + j*d] * gyt[n, y, z, o]``: a GEMM
whose M is (C, KH, KW), whose N is the output channels (contiguous in
``gyt``) and whose K is the batch's output pixels. The micro-kernel keeps a
``(tile_c * tile_k) x tile_o`` block of ``acc`` in registers (``tile_o /
lanes`` vectors per row): each reduction step loads ``tile_o / lanes``
vectors of ``gyt`` and broadcasts ``tile_c * tile_k`` input values. The
(C, KH, KW) x O blocks run in parallel; the transposes in (``gy`` to ``gyt``) and out (``acc`` to
OIHW, unless the tiles write OIHW themselves: ``direct_out``) and the
padding are parallel injective loops (the padding by rows: ``rows`` in
``kiln.schedules.generic``).

``tile_o``    output channels per tile: one or two vectors (all of O when it
              is less than a vector). Default: the one whose tile holds the
              most accumulators, two vectors on a tie (half the broadcasts
              per multiply-add): a 7x7 kernel on AVX2 takes one vector by
              seven rows, not two vectors by one. One vector where every
              tile streams a single slice of ``gyt`` larger than
              ``CHUNK_BYTES`` from beyond L2 (deep layers at batch 8): the
              fewest bytes of it per multiply-add (256x14x14 at batch 8: 1.2x
              the speed of two vectors by six rows), and on stride-1 maps 14
              wide, where two vectors by six rows ran at 0.55-0.75x (a
              measured quirk of the generated loop).
``tile_c``    input channels per tile (a divisor of C).
``tile_k``    kernel taps per channel in a tile: a block of (i, j) space (a
              divisor of KW, or KW times a divisor of KH), so the tile's
              write-back covers exactly its own rows. Default: the longest
              run of taps whose accumulators fit the vector registers, then
              the most channels: on AVX2 a 3x3 kernel takes two vectors by
              two channels' rows of three taps (12 accumulators, 8 loads per
              12 multiply-adds) over one vector by a channel's nine taps (10
              per 9): 1.2-1.3x on ResNet-18's layers measured.
``chunks``    slices of the (batch x output row) reduction, each summed into
              its own partial result (``rfactor``) and added up at the end:
              a slice of ``gyt`` then stays in cache while every tile reads
              it, where one pass would stream all of ``gyt`` from memory once
              per tile (56x56 maps: 3 MB per tile). Default: the fewest
              slices of at most ``CHUNK_BYTES`` of ``gyt`` where the result
              is smaller than ``gyt``. Where it is larger, slices of at most
              half a core's L2 (``Target.l2_bytes``) while the result is at
              most ``SLICE_RESULT_RATIO`` times ``gyt``, else one (deep
              layers: the partial sums would outweigh the re-reads:
              ResNet-18's 512x7x7 at batch 8, a result 12x ``gyt``, ran
              1.25x slower in 2 slices than in one). CIFAR's 256x8x8 at
              batch 32 (2 MB of ``gyt``, a result 1.2x that) ran 2x faster
              in 2 slices than in one on a 2 MB L2; 256x14x14 at batch 8
              (1.6 MB, 1.5x) 1.5x.
``direct_out`` 1 to write each register tile straight to OIHW (one output
              channel's (c, i, j) rows are contiguous there) instead of to a
              channels-last result transposed in a pass of its own; with one
              slice only (the slices' sum is a reduction of its own). The
              pass cost as much as the arithmetic where the result is large
              (ResNet-18's 512x7x7 at batch 1 ran twice as fast with
              it). Default 1.
``parallel``  1 to run the tiles (of every slice) on the thread pool.
``pixels``    1 for the other schedule, vectorized over output columns
              (``_schedule_pixels``): ``gy`` read as it is, no transpose;
              each step loads ``pixel_o`` vectors of ``gy`` and one input
              vector per tap of the tile (``tile_c x tile_k``), and sums
              products per lane. Where the output width is whole vectors
              (and, under a stride, the padded width whole phases). Default
              1 where the channels-last tile holds fewer accumulators than
              hide the FMA latency: ResNet-18's 7x7 stem (one vector by 7
              taps against 4 channels by 3 taps: 1.2-1.5x, at batch 8 past
              PyTorch's speed). 64x56x56 runs at parity and keeps the
              channels-last tile.
``pixel_o``   output channels of a ``pixels`` tile (a divisor of O up to 6).

The defaults were measured on ResNet-18's layers with ``python
benchmarks/compare_configs.py conv2d_backward_weight --shape ... --config A
--config B --torch`` (configs interleaved, PyTorch's kernel beside them);
figures: benchmarks/RESULTS.md, "Template choices: the measurements behind
schedules/", ``conv2d_grad.py``.
"""
from __future__ import annotations

import math

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_injective
from ..util import blocks, const_int, divisors, extent, find_block
from .conv2d_defaults import LATENCY_ACCUMULATORS, register_budget
from .conv2d_grouped_weight import schedule_grouped_weight


#: bytes of ``gyt`` a reduction slice may read (within a core's L2)
CHUNK_BYTES = 512 << 10
#: bytes of ``gy`` a reduction slice of ``pixels`` may read: every tile visits the slice, which stays in
#: L1/L2 when small (the stem at batch 8: slices of 4 rows of 28 KB ran fastest of 2 to 16; figures:
#: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
PIXEL_CHUNK_BYTES = 128 << 10
#: results larger than ``gyt`` by at most this factor still take slices when ``gyt`` overflows half of L2
SLICE_RESULT_RATIO = 4
#: output channels of a pixel tile: at most, and the default (4 x 3 taps: 12 lanes' accumulators)
PIXEL_O_MAX, PIXEL_O_DEFAULT = 6, 4


@register_template("cpu", ops=("conv2d_backward_weight",))
def schedule_conv2d_backward_weight(sch, block, cfg: Config) -> NotApplicable | None:
    name = cfg.workload.op.name
    acc = sch.get_sblock(f"{name}_cl")
    c, i, j, o, rn, ry, rz = sch.get_loops(acc)
    o_ext = const_int(extent(sch, o))
    parts = [const_int(extent(sch, lp)) for lp in (c, i, j)]
    sums = [const_int(extent(sch, lp)) for lp in (rn, ry, rz)]
    if o_ext is None or None in parts or None in sums:
        return NOT_APPLICABLE  # a symbolic channel count or batch: the generic schedule serves it (decided first)
    if cfg.workload.attrs["groups"] > 1:  # each output channel its own input channels: vectors of columns
        schedule_grouped_weight(sch, cfg)
        return None
    lanes = cfg.target.lanes(cfg.workload.out_dtypes[0])
    options = tuple(t for t in (lanes, 2 * lanes) if o_ext % t == 0) or (o_ext if o_ext < lanes else lanes,)
    c_ext, kh, kw = parts
    row_bytes = sums[2] * o_ext * 4
    chunk_options = divisors(sums[0] * sums[1])
    gy_bytes = sums[0] * sums[1] * row_bytes
    # the result's size against gyt's decides whether slices' partial sums cost less than the re-reads they save
    out_bytes, half_l2 = c_ext * kh * kw * o_ext * 4, cfg.target.l2_bytes // 2

    def slices(limit: int) -> int:  # the fewest slices of at most ``limit`` bytes of gy (see ``chunks``)
        if out_bytes >= gy_bytes:  # the partial sums are costly: slices only where gy overflows L2
            if gy_bytes <= half_l2 or out_bytes > SLICE_RESULT_RATIO * gy_bytes:
                return 1
            limit = max(limit, half_l2)
        return next((d for d in chunk_options if gy_bytes // d <= limit), chunk_options[-1])

    budget = register_budget(lanes)
    taps = sorted(set(divisors(kw)) | {kw * m for m in divisors(kh)})  # blocks of (i, j) space
    # channels per tile: as many as one vector's accumulators allow (each channel takes a row or more)
    channel_options = tuple(d for d in divisors(c_ext) if d <= budget(1))

    def fitting(t: int) -> tuple[int, int]:  # the (tile_c, tile_k) whose accumulators fit beside tile_o = t
        room = budget(-(-t // lanes))
        shapes = [(m, k) for m in channel_options for k in taps if m * k <= room] or [(1, 1)]
        return max(shapes, key=lambda mk: (mk[1], mk[0]))  # the longest run of taps, then the most channels

    def best_tile_o(chunks: int) -> int:
        # one vector where gy is streamed from beyond L2 by every tile (one slice, larger than a core's share
        # of it): the fewest bytes of it per multiply-add; and, measured, not explained, on stride-1 maps 14
        # wide, where two vectors by six rows ran at 0.55-0.75x one vector by nine (12, 16, 28 and 56 wide ran
        # 1.1-1.2x; figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
        one_vector = (chunks == 1 and gy_bytes > CHUNK_BYTES) or \
            (sums[2] == 14 and cfg.workload.attrs["stride"][1] == 1)

        def merit(t: int):  # else the most accumulators, then fewer broadcasts
            m, k = fitting(t)
            vectors = -(-t // lanes)
            return (-vectors,) if one_vector else (m * k * vectors, t)
        return max(options, key=merit)

    # pixels where the channels-last tile is too small to hide the FMA latency (few input channels and a
    # kernel row of prime length: the stem's one vector by 7 taps)
    cl_o = best_tile_o(slices(CHUNK_BYTES))
    weak = math.prod(fitting(cl_o)) * -(-cl_o // lanes) < LATENCY_ACCUMULATORS
    pixel_options = _pixel_options(sch, name, cfg, sums[2], lanes)
    pixels = cfg.define_knob("pixels", pixel_options, default=int(1 in pixel_options and weak))
    chunks = cfg.define_knob("chunks", tuple(chunk_options),
                             default=slices(PIXEL_CHUNK_BYTES if pixels else CHUNK_BYTES))
    tile_o = cfg.define_knob("tile_o", options, default=best_tile_o(chunks))
    pixel_outs = tuple(d for d in divisors(o_ext) if d <= PIXEL_O_MAX)
    pixel_o = cfg.define_knob("pixel_o", pixel_outs, default=max(d for d in pixel_outs if d <= PIXEL_O_DEFAULT))
    c_default, k_default = fitting(tile_o) if not pixels else _pixel_taps(
        channel_options, taps, budget(1) // pixel_o)
    tile_c = cfg.define_knob("tile_c", channel_options, default=c_default)
    tile_k = cfg.define_knob("tile_k", tuple(taps), default=k_default)
    par = cfg.define_knob("parallel", (0, 1), default=1)
    direct = cfg.define_knob("direct_out", (0, 1), default=1) and chunks == 1
    if pixels:
        return _schedule_pixels(sch, name, cfg, lanes, chunks, tile_c, tile_k, pixel_o, par)

    part = acc
    if chunks > 1:  # partial sums per slice (a block of their own), added up by the original block
        rk = sch.fuse(rn, ry)
        rko, _ = sch.split(rk, [chunks, None])
        part = sch.rfactor(rko, 0)
        c, i, j, o, rko, rk, rz = sch.get_loops(part)  # rfactor keeps the loops where they were
    else:
        rko, rk = None, sch.fuse(rn, ry)
    cko, cki = _tap_blocks(sch, c, i, j, tile_c, tile_k)
    oo, oi = sch.split(o, [None, tile_o])
    sch.reorder(*([rko] if rko is not None else []), cko, oo, rk, rz, cki, oi)
    tile = sch.cache_write(part, 0, "local")
    sch.reverse_compute_at(tile, oo)
    if direct:
        sch.reverse_compute_inline(sch.get_sblock(name))
    sch.vectorize(oi)
    sch.unroll(cki)
    outer = sch.fuse(*([rko] if rko is not None else []), cko, oo)
    if par:
        sch.parallel(outer)
    sch.decompose_reduction(part, rk)
    if chunks > 1:  # the slices' partial sums added up: parallel over (c, i, j), vectorized over o
        ci, i, j, k, r = sch.get_loops(acc)
        sch.reorder(ci, i, j, r, k)
        total = sch.fuse(ci, i, j)
        if par:
            sch.parallel(total)
        ko, ki = sch.split(k, [None, tile_o])
        sch.vectorize(ki)
        sch.decompose_reduction(acc, r)
    own = sch.get_loops(tile)[1:]
    if direct and len(own) > 1:  # each output channel's (c, i, j) rows are contiguous in OIHW
        sch.reorder(own[-1], *own[:-1])
    elif own:
        sch.vectorize(own[-1])
    prefixes = {f"{name}_pad": "pad.", f"{name}_gyt": "gyt.", name: "out."}
    for other in blocks(sch):
        prefix = prefixes.get(sch.get(other).name_hint)
        if prefix is not None:
            schedule_injective(sch, other, cfg, prefix)
    return None


def _tap_blocks(sch, c, i, j, tile_c: int, tile_k: int):
    """(blocks, taps within a block) of the (C, KH, KW) loops: ``tile_c``
    channels times a run of ``tile_k`` taps."""
    co, ci = sch.split(c, [None, tile_c])
    ko, ki = sch.split(sch.fuse(i, j), [None, tile_k])
    sch.reorder(co, ko, ci, ki)
    return sch.fuse(co, ko), sch.fuse(ci, ki)


def _pixel_options(sch, name: str, cfg: Config, width: int, lanes: int) -> tuple:
    """``pixels``' values: (0, 1) where the output width is whole vectors and
    every tap reads a vector of consecutive input columns: stride 1, or a
    padding stage whose columns split into ``stride`` phases of equal length."""
    stride = cfg.workload.attrs["stride"][1]
    if width % lanes:
        return (0,)
    if stride == 1:
        return (0, 1)
    pad = find_block(sch, f"{name}_pad")
    padded = const_int(extent(sch, sch.get_loops(pad)[-1])) if pad is not None else None
    return (0, 1) if padded and padded % stride == 0 else (0,)


def _pixel_taps(channel_options: tuple, taps: list, room: int) -> tuple[int, int]:
    """(tile_c, tile_k) for a pixel tile: the most taps within ``room`` (each
    one an input vector loaded per step), a run of a channel's taps first."""
    shapes = [(m, k) for m in channel_options for k in taps if m * k <= max(room, 1)] or [(1, 1)]
    return max(shapes, key=lambda mk: (mk[0] * mk[1], mk[1]))


def _schedule_pixels(sch, name: str, cfg: Config, lanes: int, chunks: int, tile_c: int, tile_k: int,
                     pixel_o: int, par: int) -> None:
    """``pixels``: vectors of output columns, read from ``gy`` as it is. Each
    reduction step loads ``pixel_o`` vectors of ``gy`` (one per output
    channel) and one vector of input columns per tap (``tile_c * tile_k``),
    and keeps their products in a tile of lanes (``rfactor``): partial sums
    per lane, added up at the end. No transpose of ``gy``; under a stride the
    padded input is stored split into its column phases, so a tap's columns
    are consecutive. The slices of the reduction (``chunks``) run one after
    another, each tile adding its part to its partial sums in memory (a
    slice of ``gy`` stays in cache while every tile reads it)."""
    stride = cfg.workload.attrs["stride"][1]
    gyt = sch.get_sblock(f"{name}_gyt")
    schedule_injective(sch, gyt, cfg, "gyt.")  # its knobs stay declared (one space for both schedules)
    sch.compute_inline(gyt)
    pad = find_block(sch, f"{name}_pad")
    if pad is not None:
        if stride > 1:
            def phases(n, c, h, w):
                return n, c, h, w % stride, w // stride
            sch.transform_layout(pad, ("write", 0), phases)
            sch.transform_block_layout(pad, phases)
        schedule_injective(sch, pad, cfg, "pad.")
    acc = sch.get_sblock(f"{name}_cl")
    *_, rz = sch.get_loops(acc)
    _, lane = sch.split(rz, [None, lanes])
    part = sch.rfactor(lane, 4)  # partial sums (C, KH, KW, O, lanes)
    c, i, j, o, rn, ry, rzo, lane = sch.get_loops(part)
    rko, rki = sch.split(sch.fuse(rn, ry), [chunks, None])
    cko, cki = _tap_blocks(sch, c, i, j, tile_c, tile_k)
    oo, oi = sch.split(o, [None, pixel_o])
    # output channels outside the taps: the taps' input vectors stay in registers while each gy vector
    # streams (the other order held the gy vectors and spilled an accumulator: the stem at batch 8 ran
    # 1.1-1.4x slower; figures: benchmarks/RESULTS.md, "Template choices: the measurements behind schedules/")
    sch.reorder(rko, cko, oo, rki, rzo, oi, cki, lane)
    sch.vectorize(lane)
    sch.unroll(cki)
    sch.unroll(oi)
    task = sch.fuse(cko, oo)
    if par:
        sch.parallel(task)
    init = sch.decompose_reduction(part, rko)
    *outer, last = sch.get_loops(init)
    sch.vectorize(last)
    if par:
        sch.parallel(sch.fuse(*outer))
    c, i, j, o, _ = sch.get_loops(acc)  # the lanes added up
    if par:
        sch.parallel(sch.fuse(c, i, j))
    schedule_injective(sch, sch.get_sblock(name), cfg, "out.")
