"""CPU template for ``conv2d_backward_weight`` (``te/conv_grad.py``).

The op computes dw channels-last, ``acc[c, i, j, o]``, a reduction over
(n, y, z) of ``xpad[n, c, y*s + i*d, z*s + j*d] * gyt[n, y, z, o]``: a GEMM
whose M is (C, KH, KW), whose N is the output channels (contiguous in
``gyt``) and whose K is the batch's output pixels. The micro-kernel keeps a
``tile_ck x tile_o`` block of ``acc`` in registers (``tile_o / lanes``
vectors per row): each reduction step loads ``tile_o / lanes`` vectors of
``gyt`` and broadcasts ``tile_ck`` input values. The (C, KH, KW) x O blocks
run in parallel; the transposes in (``gy`` to ``gyt``) and out (``acc`` to
OIHW, unless the tiles write OIHW themselves: ``direct_out``) and the
padding are parallel injective loops (the padding by rows: ``rows`` in
``kiln.schedules.generic``).

``tile_o``    output channels per tile: one or two vectors (all of O when it
              is less than a vector). Default: the one whose tile holds the
              most accumulators, two vectors on a tie (half the broadcasts
              per multiply-add): a 7x7 kernel on AVX2 takes one vector by
              seven rows, not two vectors by one.
``tile_ck``   (c, i, j) rows per tile: a block of (c, i, j) space (a
              divisor of KW; KW times a divisor of KH; or KH*KW times a
              divisor of C), so the tile's write-back covers exactly its
              own rows; default the largest whose accumulators fit the
              vector registers.
``chunks``    slices of the (batch x output row) reduction, each summed into
              its own partial result (``rfactor``) and added up at the end:
              a slice of ``gyt`` then stays in cache while every tile reads
              it, where one pass would stream all of ``gyt`` from memory once
              per tile (56x56 maps: 3 MB per tile). Default: the fewest
              slices of at most ``CHUNK_BYTES`` of ``gyt``; one when the
              result is at least as large as ``gyt`` (deep layers: the
              partial sums would outweigh the re-reads; ResNet-18's 512x7x7
              at batch 8 on znver3, 2 slices 37.6 ms against 30.2 for one).
``direct_out`` 1 to write each register tile straight to OIHW (one output
              channel's (c, i, j) rows are contiguous there) instead of to a
              channels-last result transposed in a pass of its own; with one
              slice only (the slices' sum is a reduction of its own). The
              pass cost as much as the arithmetic where the result is large:
              ResNet-18's 512x7x7 at batch 1, 9.4 -> 4.5 ms on znver3
              (256x14x14 3.45 -> 2.27, 128x28x28 2.62 -> 1.86). Default 1.
``parallel``  1 to run the tiles (of every slice) on the thread pool.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_injective
from ..util import blocks, const_int, divisors, extent
from .conv2d import _budget


#: bytes of ``gyt`` a reduction slice may read (within a core's L2)
CHUNK_BYTES = 512 << 10


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
    lanes = cfg.target.lanes(cfg.workload.out_dtypes[0])
    options = tuple(t for t in (lanes, 2 * lanes) if o_ext % t == 0) or (o_ext if o_ext < lanes else lanes,)
    c_ext, kh, kw = parts
    rows = sorted({d for d in divisors(kw)} | {kw * m for m in divisors(kh)} | {kh * kw * m for m in divisors(c_ext)})

    def fitting(t: int) -> int:  # the most (c, i, j) rows whose accumulators fit beside tile_o = t
        return max([d for d in rows if d <= _budget(lanes)(-(-t // lanes))] or [1])

    tile_o = cfg.define_knob("tile_o", options, default=max(
        options, key=lambda t: (fitting(t) * -(-t // lanes), t)))  # most accumulators; then fewer broadcasts
    tile_ck = cfg.define_knob("tile_ck", tuple(rows), default=fitting(tile_o))
    row_bytes = sums[2] * o_ext * 4
    chunk_options = divisors(sums[0] * sums[1])
    # a result as large as gyt: each slice's partial sums would move more memory than the re-reads they save
    small_out = c_ext * kh * kw * o_ext * 4 < sums[0] * sums[1] * row_bytes
    chunks = cfg.define_knob("chunks", tuple(chunk_options), default=next(
        (d for d in chunk_options if sums[0] * sums[1] // d * row_bytes <= CHUNK_BYTES), chunk_options[-1])
        if small_out else 1)
    par = cfg.define_knob("parallel", (0, 1), default=1)

    part = acc
    if chunks > 1:  # partial sums per slice (a block of their own), added up by the original block
        rk = sch.fuse(rn, ry)
        rko, _ = sch.split(rk, [chunks, None])
        part = sch.rfactor(rko, 0)
        c, i, j, o, rko, rk, rz = sch.get_loops(part)  # rfactor keeps the loops where they were
    else:
        rko, rk = None, sch.fuse(rn, ry)
    ck = sch.fuse(c, i, j)
    cko, cki = sch.split(ck, [None, tile_ck])
    oo, oi = sch.split(o, [None, tile_o])
    sch.reorder(*([rko] if rko is not None else []), cko, oo, rk, rz, cki, oi)
    tile = sch.cache_write(part, 0, "local")
    sch.reverse_compute_at(tile, oo)
    direct = cfg.define_knob("direct_out", (0, 1), default=1) and chunks == 1
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
    for other in blocks(sch):
        label = sch.get(other).name_hint
        if label in (f"{name}_pad", f"{name}_gyt", name):
            schedule_injective(sch, other, cfg, {f"{name}_pad": "pad.", f"{name}_gyt": "gyt."}.get(label, "out."))
    return None
