"""CPU template for conv2d (NCHW and NHWC), conv2d_packed and
conv2d_backward_data (the transposed convolution, the same TE body over its
zero-placed input, its weight blocked along ``w``'s input channels): vectorized over
output channels, register-tiled over output width, parallel over batch x
channel blocks x rows.

The micro-kernel keeps a ``tile_ow x tile_oc`` block of outputs in registers
(``tile_oc / lanes`` vectors per output column). Each step of the reduction
(input channel, kernel row, kernel column) loads ``tile_oc / lanes`` weight
vectors and broadcasts ``tile_ow`` input values: ``tile_ow * tile_oc / lanes``
FMAs for ``tile_ow + tile_oc / lanes`` loads.

``tile_oc``   output channels per tile, a multiple of the vector lanes when the
              channels allow; only widths that divide the channels when any
              does (a tail block is predicated inside the micro-kernel: 48
              of 512 channels ran at 10 GFLOPS where 32 ran at 170).
``tile_ow``   output columns per tile. Default: the tile with the most
              accumulators that fit the vector registers among those whose
              width divides the output width (a tail would be predicated in
              the micro-kernel), two channel vectors preferred: 4 x 16 for a
              56-wide map on AVX2, 7 x 8 for a 14-wide one. A strided
              ``conv2d_backward_data``'s tile is a multiple of the stride
              wide (14 x 8 for a 14-wide map) and may use every register on
              AVX2 (see ``conv2d_defaults.register_budget``).
``unroll_kw`` 1 to unroll the kernel-column loop.
``unroll_map`` a conv2d that leaves out its padded taps' products
              (``te.conv.skips_padding``: NCHW maps of at most 16 x 16; a
              stride-1 ``conv2d_backward_data`` those reading the zero
              border around ``gy``, ``te.conv_grad.data_skips_padding``):
              1 (default, unless the last channel tile is predicated) to
              unroll a task's rows, its column tiles and the kernel rows, so
              which products read padding is a constant of each and they are
              left out of the code; a task's rows are then
              the whole map by default, and a tile as wide as the map where
              the registers allow (one vector x 14 on a 14-wide AVX-512
              map) and the stride is 1 (ResNet-18's stride-2 128x28x28 ->
              256 at batch 8 took 5.17 ms so, 4.64 with two vectors by 7;
              its stride-1 256x14x14 ties). ResNet-18's 7x7 and 14x14
              layers (znver4, interleaved against the same kernel
              multiplying the padding): 512x7x7 9.12
              -> 7.64 ms at batch 8, 1.32 -> 1.12 at batch 1; 256x14x14 8.41
              -> 7.79 at batch 8. With 0 (or a task of fewer rows, or
              ``unroll_kw`` 0) each product keeps its test.
``unroll_phase`` a strided ``conv2d_backward_data`` only: 1 to split each
              task's rows into whole cycles of the row phases and unroll the
              phase and the kernel-row loop, so each row's sub-kernel, and
              which of its taps are missing, is a constant of the micro-kernel
              (the columns' phases already are: the tile is a multiple of the
              stride wide). With 0 the missing taps of a 3x3 stride-2 kernel
              are multiplied by zero: 12 products per 2 x 2 outputs where 9
              are real. Default 1: 2.0-2.3x on ResNet-18's stride-2 data
              gradients (znver4, batch 1 and 8, interleaved), more than the
              products saved: the unrolled rows also address the sub-kernel
              with constant offsets. No effect where a task's rows are not
              whole cycles of the phases (a height the stride does not divide).
``pack_w``    NCHW only: 1 to copy OIHW weights to ``[O / tile_oc, I, KH, KW,
              tile_oc]`` so the channel vector is contiguous (default 1).
``pack_at``   with ``pack_w`` (or a data gradient's weight copy): 1 to copy
              each task's block of channels inside the task, right before
              its micro-kernel reads it (the block stays in that core's
              cache), 0 for a parallel copy stage of its own. Default 1 where
              each block has one task (one image, tasks of the whole map): a
              block is then copied once either way. ResNet-18's 512x7x7
              layer at batch 1 (znver4, interleaved): forward 1.35 -> 1.30
              ms, data gradient 1.35 -> 1.33, and 2.35 -> 1.33 in the host's
              phases where the copy stage went through memory.
``task_rows`` output rows per parallel task (a divisor of the output height;
              whole cycles of the phases for a strided ``conv2d_backward_data``).
              A task pays a fixed cost (its padded rows, two workspace
              allocations for the padding and the accumulator tile, its
              write-back) that one row of a small map does not cover: on
              8x8 maps a row is 37K multiply-adds for 16 -> 32 channels.
              Default: the most rows up to ``TASK_MACS`` multiply-adds per
              task (1 for ResNet-sized rows; ``PHASED_TASK_MACS`` for a
              strided ``conv2d_backward_data``); a padded conv's up to
              ``PADDED_TASK_MACS`` while an image keeps ``TASKS_PER_IMAGE``
              tasks (14 rows of ResNet-18's 56x56 to 14x14 maps): fewer
              tasks pad each input row fewer times.
``parallel``  1 to run (batch, channel block, row block) on the thread pool.
``pad_inline`` with ``unroll_map`` 1: 1 (default) to read the input where it
              lies, no padded copy: each product's padding test is a
              constant of the unrolled code, the ones reading padding left
              out. ResNet-18 (znver4, interleaved, against ``pad_at`` 1):
              stride-2 128x28x28 -> 256 and 256x14x14 -> 512 at batch 8
              4.53 -> 4.09 and 4.70 -> 4.23 ms, 512x7x7 7.99 -> 7.65, its
              data gradient 8.33 -> 7.87.
``pad_at``    1 to zero-pad each task's input rows inside the task (one
              parallel region per call, the rows still in cache when the
              micro-kernel reads them), 0 for a padding stage of its own.
              Default 1 while the tasks copy each padded row at most
              ``PAD_AT_COPIES`` times (an NCHW task pads every input channel
              for one block of output channels): ResNet-18's 3x3 layers on
              AVX2, forward and data gradient, 64x56 152 vs 123 GFLOPS with
              it, 128x28 154 vs 141, and without it 256x14 150-156 vs
              126-131, 512x7 111-140 vs 92-112 (12, 24, 96 and 192 copies);
              stride 2, 256x14 -> 512 131 vs 100 without (96), and 128x28 ->
              256 (40 copies of 1 x 7 tiles) without it at batch 1 91-100 vs
              79-83 and at batch 8 82-105 vs 73-85 (znver3, interleaved). A
              strided data gradient keeps 1 (256x14 -> 512: 85 vs 55).

A strided ``conv2d_backward_data`` reads its per-phase sub-kernels (the
``_taps`` stage, output channels innermost), stored in blocks of ``tile_oc``
channels: no ``pack_w``.

``conv2d_packed`` reads a weight already in the ``pack_w`` layout (packed once,
by ``pack_conv2d_weight``): it has no ``pack_w`` knob and no pack stage, and
its ``tile_oc`` is the blocks' width, not a knob. An exporter packs a constant
weight with ``oc = packed_channels(workload, target)``, the ``tile_oc`` this
template chooses by default for that conv2d, so both run the same micro-kernel.

The accumulator tile is stored channels-innermost (a local buffer laid out
N, H, W, C) whatever the layout, so its vectors are contiguous; for NCHW the
write-back transposes it into the output. Zero padding is its own block
(inside each task with ``pad_at``), so the inner loop has no bounds checks.

Symbolic dims: a symbolic batch or input-channel count keeps this template
(neither is tiled). A symbolic output-channel count or output width would
leave the accumulator's write-back with a tile of unknown extent, which TVM
cannot bound, so the template declines such a kernel and dispatch gives it the
generic schedule (correct for every size, not register-tiled); ``nn`` makes
only the dims that varied symbolic, which for a layer is its batch.
"""
from __future__ import annotations

from ...te.conv import skips_padding
from ...te.conv_grad import data_skips_padding
from ...te.shapes import static
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_injective
from ..util import const_int, extent, find_block, work
from .conv2d_defaults import (PAD_AT_COPIES, PHASED_TASK_MACS, conv_tiles, default_task_rows, divisor_tile,
                              pad_copies, register_budget, task_row_choices)


@register_template("cpu", ops=("conv2d", "conv2d_packed", "conv2d_backward_data"))
def schedule_conv2d(sch, block, cfg: Config) -> NotApplicable | None:
    conv = block
    packed = cfg.workload.op.name == "conv2d_packed"  # the weight is already in the pack_w layout
    transposed = cfg.workload.op.name == "conv2d_backward_data"  # its output channels are w's input channels
    taps = find_block(sch, "_taps")  # per phase (strided)
    nchw = packed or cfg.workload.attrs.get("layout", "NCHW") == "NCHW"
    blocked = packed and cfg.workload.attrs["out_block"]  # the output is NCHW[oc]c: its channel loop is split
    if blocked:  # n, o block, y, z, o lane | rc, ry, rx
        n, oo, y, z, oi, r1, r2, r3 = sch.get_loops(conv)
    else:  # NCHW: n, o, y, z | rc, ry, rx.  NHWC: n, y, z, o | ry, rx, rc.
        n, a, b, c, r1, r2, r3 = sch.get_loops(conv)
        o, y, z = (a, b, c) if nchw else (c, a, b)
    lanes = cfg.target.lanes(str(sch.get(conv).writes[0].source.dtype))
    o_ext = work(sch, (oo, oi)) if blocked else const_int(extent(sch, o))
    z_ext = const_int(extent(sch, z))
    if o_ext is None or z_ext is None:
        return NOT_APPLICABLE
    budget = register_budget(lanes, phased=taps is not None)
    # a strided data gradient: a tile as wide as a multiple of the stride, so each column's phase (its
    # sub-kernel and its missing taps) is a constant of the unrolled micro-kernel, not computed per column
    phase_h, step = cfg.workload.attrs["stride"] if taps is not None else (1, 1)
    wl = cfg.workload
    if transposed:  # the padded taps' products left out: unroll the map
        skip = data_skips_padding(wl.shapes[0], wl.out_shapes[0], wl.shapes[1], wl.attrs["stride"],
                                  wl.attrs["padding"], wl.attrs["dilation"])
    else:
        skip = skips_padding(wl.attrs.get("layout", "NCHW"), wl.shapes[0], wl.out_shapes[0], wl.attrs["padding"])
    oc_default, ow_default = conv_tiles(o_ext, z_ext, lanes, budget, step, skip, tuple(wl.attrs["stride"]))
    if packed:
        tile_oc = static(cfg.workload.shapes[1][4])
    else:
        widths = sorted({lanes, 2 * lanes, 3 * lanes, 4 * lanes, oc_default})
        whole = [t for t in widths if o_ext % t == 0]
        tile_oc = cfg.define_knob("tile_oc", tuple(whole or widths), default=oc_default)
    vectors = max(1, -(-tile_oc // lanes))
    ow_fit = divisor_tile(z_ext, budget(vectors), step) if tile_oc != oc_default else ow_default
    tile_ow = cfg.define_knob("tile_ow", tuple(range(1, 17)), default=ow_fit)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    h_ext = const_int(extent(sch, y))
    row_macs = z_ext * tile_oc * (work(sch, (r1, r2, r3)) or 1)
    rows = task_row_choices(h_ext, phase_h)
    pad = find_block(sch, "_pad")
    blocks = -(-o_ext // tile_oc) if nchw else 1  # channel blocks per image, each its own tasks
    if skip:  # the map unrolled whole
        row_default = h_ext
    elif taps is not None:
        row_default = default_task_rows(rows, row_macs, PHASED_TASK_MACS)
    else:
        row_default = default_task_rows(rows, row_macs, blocks=blocks if pad is not None and h_ext else None)
    task_rows = cfg.define_knob("task_rows", rows, default=row_default)
    pack_w = not packed and taps is None and cfg.define_knob("pack_w", (0, 1), default=int(nchw)) and nchw
    once = const_int(extent(sch, n)) == 1 and task_rows == h_ext  # one task per channel block
    par = cfg.define_knob("parallel", (0, 1), default=1)
    unroll_map = skip and cfg.define_knob("unroll_map", (0, 1), default=int(o_ext % tile_oc == 0))
    # the map unrolled, whether a product reads padding is a constant of each: the input is read where it
    # lies, the padding never copied
    inline_pad = pad is not None and unroll_map and cfg.define_knob("pad_inline", (0, 1), default=1)
    pad_at = pad is not None and not inline_pad and cfg.define_knob("pad_at", (0, 1), default=int(
        taps is not None or pad_copies(cfg.workload.attrs, blocks, task_rows,
                                        const_int(extent(sch, r2 if nchw else r1))) <= PAD_AT_COPIES))

    if pack_w:
        pack = sch.cache_read(conv, 1, "global")
        if transposed:
            def in_blocks(i, o_, kh, kw):
                return o_ // tile_oc, i, kh, kw, o_ % tile_oc
        else:
            def in_blocks(o_, i, kh, kw):
                return o_ // tile_oc, i, kh, kw, o_ % tile_oc
        sch.transform_layout(conv, ("read", 1), in_blocks, pad_value=0.0 if o_ext is None or o_ext % tile_oc else None)
    if not blocked:
        oo, oi = sch.split(o, [None, tile_oc])
    zo, zi = sch.split(z, [None, tile_ow])
    yo, yi = sch.split(y, [None, task_rows])
    kw_loop = r3 if nchw else r2
    row_phase = []  # a strided data gradient's phase loop, when its rows are unrolled
    if taps is not None and cfg.define_knob("unroll_phase", (0, 1), default=1) and task_rows % phase_h == 0:
        yi, *row_phase = sch.split(yi, [None, phase_h])
    if nchw:
        sch.reorder(n, oo, yo, yi, *row_phase, zo, r1, r2, r3, zi, oi)
    else:
        sch.reorder(n, yo, yi, zo, oo, r1, r2, r3, zi, oi)
    acc = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(acc, zo if nchw else oo)
    if nchw and not blocked:  # channels innermost in the accumulator tile (blocks already have them so)
        sch.transform_layout(conv, ("write", 0), lambda n_, o_, y_, z_: (n_, y_, z_, o_))
    sch.vectorize(oi)  # before decompose_reduction (TVM rejects it after)
    sch.unroll(zi)
    if unroll_kw:
        sch.unroll(kw_loop)
    if row_phase:
        sch.unroll(*row_phase)
        sch.unroll(r2)
    # not over a predicated channel tail: its unrolled tests took LLVM minutes (24 channels in tiles of 16)
    if unroll_map:
        sch.unroll(yi)  # with the columns' and taps' loops unrolled, which products read padding is a
        sch.unroll(zo)  # constant of each: those are left out of the code (a task's rows: the whole map)
        sch.unroll(r2)
    outer = sch.fuse(n, oo, yo) if nchw else sch.fuse(n, yo)
    if par:
        sch.parallel(outer)
    sch.decompose_reduction(conv, r1)

    own = sch.get_loops(acc)[3 if nchw else 4:]
    if own:
        sch.vectorize(own[-1])
    pack_at = pack_w and cfg.define_knob("pack_at", (0, 1), default=int(once))
    if pack_at:  # each task copies its block of channels right before it reads it
        _schedule_pack_at(sch, pack, outer, tile_oc, lanes, transposed)
    elif pack_w:
        _schedule_pack(sch, pack, tile_oc, lanes, transposed)
    if taps is not None:
        _schedule_taps(sch, taps, tile_oc, o_ext, cfg)
    if inline_pad:
        sch.compute_inline(pad)
    elif pad_at:  # each task pads the input rows it reads, right before it reads them
        sch.compute_at(pad, outer)
        sch.vectorize(sch.get_loops(pad)[-1])
    elif pad is not None:
        schedule_injective(sch, pad, cfg, "pad.")


def _schedule_taps(sch, taps, tile_oc: int, channels: int, cfg: Config) -> None:
    """The per-phase sub-kernels (sh, sw, O, TH, TW, C), stored in blocks of
    ``tile_oc`` channels (C / tile_oc, sh, sw, O, TH, TW, tile_oc) when the
    tile divides C, so a register tile streams its weight vectors from
    consecutive addresses, as a packed forward weight does (C innermost, a
    tile's successive vectors lay C elements apart: on 128 -> 256 channels at
    28x28 the kernel ran at a third of the forward's rate)."""
    if channels % tile_oc == 0 and channels > tile_oc:
        sch.transform_layout(taps, ("write", 0),
                             lambda ph, pw, k, t, u, ci: (ci // tile_oc, ph, pw, k, t, u, ci % tile_oc))
        *outer, ci = sch.get_loops(taps)
        cb, cl = sch.split(ci, [None, tile_oc])
        sch.reorder(cb, *outer, cl)
    schedule_injective(sch, taps, cfg, "taps.")


def _schedule_pack_at(sch, pack, task, tile_oc: int, lanes: int, transposed: bool) -> None:
    """The weight copy of ``pack_at``: inside each task, its block of
    ``tile_oc`` channels, a tiled transpose as ``_schedule_pack``'s."""
    sch.compute_at(pack, task)
    own = sch.get_loops(pack)[1:]
    if len(own) != 4:  # a dim of one (a single input channel) left no loop: the copy stays in order
        sch.vectorize(own[-1])
        return
    oc, *rest = own
    if transposed:  # IOHW: the block's channel is the second dim
        rest, oc = [oc, *rest[1:]], rest[0]
        sch.reorder(*rest, oc)
    _tiled_transpose(sch, oc, rest, tile_oc, lanes)


def _tiled_transpose(sch, oc, rest: list, tile_oc: int, lanes: int):
    """Copy one block's ``tile_oc`` channels (loop ``oc``) over the source's
    other dims (loops ``rest``, consecutive) as a tiled transpose: ``lanes``
    consecutive source elements of one vector's channels at a time, written
    a channel vector at a time (see ``_schedule_pack``). Returns the loop
    over the tiles of ``rest``."""
    ko, ki = sch.split(sch.fuse(*rest), [None, lanes])
    if tile_oc > lanes and tile_oc % lanes == 0:  # one vector's channels at a time
        oo, oi = sch.split(oc, [None, lanes])
        sch.reorder(ko, oo, ki, oi)
    else:
        oi = oc
        sch.reorder(ko, ki, oi)
    sch.vectorize(oi)
    return ko


def _schedule_pack(sch, pack, tile_oc: int, lanes: int, transposed: bool) -> None:
    """The weight copy into ``[O / tile_oc, I, KH, KW, tile_oc]``, written a
    channel vector at a time. Reading the source in its own order scattered
    every element to another cache line, with a division per lane for its
    address (3.2 of the 4.7 ms of a 512 -> 512 channel 7x7 conv at batch 1).
    OIHW weights are copied as a tiled transpose: ``lanes`` consecutive (I,
    KH, KW) elements of ``tile_oc`` channels, within L1 both ways, one
    vector's channels at a time: the source rows of one tile are a channel's
    I x KH x KW floats apart, which for 512 input channels and a 3x3 kernel
    (18 KB, half a 4 KB page off) puts them in two L1 sets, and 32 rows
    there overflow the 8 ways (the 512 -> 512 channel 7x7 conv at batch 1,
    AVX-512 tile of 32 channels: 1.78 ms, 0.7 of it the copy, before; 1.37
    after, znver4). IOHW weights (a data gradient's) are read in their own
    order, a source row at a time, each block's channels a vector gathered
    from within the row: blocks outermost (every task reading all rows, a
    vector's channels 9 floats apart) ran the 512 -> 512 channel 7x7 data
    gradient at 1.27x the forward conv's time at batch 1 and 1.09x at batch
    8; source rows outermost, at 0.95x and 1.03x (znver4, interleaved)."""
    loops = sch.get_loops(pack)
    if len(loops) != 4:  # a padded channel block brings its own loops: the copy stays in order
        fused = sch.fuse(*loops)
        outer, vec = sch.split(fused, [None, lanes])
        sch.vectorize(vec)
        sch.parallel(outer)
        return
    if transposed:  # IOHW (the transposed convolution's kernel): its blocked channels are the second dim
        i, o, kh, kw = loops
        ob, oi = sch.split(o, [None, tile_oc])
        sch.reorder(i, ob, kh, kw, oi)
        sch.parallel(sch.fuse(i, ob))
        sch.vectorize(oi)
    else:
        o, i, kh, kw = loops
        ob, oi = sch.split(o, [None, tile_oc])
        sch.parallel(sch.fuse(ob, _tiled_transpose(sch, oi, [i, kh, kw], tile_oc, lanes)))
