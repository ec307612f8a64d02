"""CPU template for conv2d (NCHW and NHWC) and conv2d_packed: vectorized over
output channels, register-tiled over output width, parallel over batch x
channel blocks x rows. ``conv2d_backward_data`` (the transposed convolution,
the same TE body over its zero-placed input) runs the same micro-kernel:
``conv2d_transposed.py``.

The micro-kernel keeps a ``tile_ow x tile_oc`` block of outputs in registers
(``tile_oc / lanes`` vectors per output column). Each step of the reduction
(input channel, kernel row, kernel column) loads ``tile_oc / lanes`` weight
vectors and broadcasts ``tile_ow`` input values: ``tile_ow * tile_oc / lanes``
FMAs for ``tile_ow + tile_oc / lanes`` loads.

Each variant is a straight-line schedule of the steps in ``conv2d_steps.py``
on its loops' roles (``conv2d_roles.py``), its defaults from
``conv2d_defaults.py``:

- NCHW ``conv2d`` (``schedule_nchw``): its OIHW weight copied into blocks of
  ``tile_oc`` channels (``pack_w``, ``conv2d_pack.py``); a stride-1
  ``conv2d_backward_data`` runs the same schedule with its IOHW weight.
- ``conv2d_packed`` reads a weight already in that layout (packed once, by
  ``pack_conv2d_weight``): it has no ``pack_w`` knob and no pack stage, and
  its ``tile_oc`` is the blocks' width, not a knob. An exporter packs a
  constant weight with ``oc = packed_channels(workload, target)``, the
  ``tile_oc`` this template chooses by default for that conv2d, so both run
  the same micro-kernel. Its output may be in channel blocks itself
  (``out_block``).
- NHWC ``conv2d``: channels innermost already, its weight (HWIO) read where
  it lies.

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
              map) and the stride is 1 (under a stride, two vectors by 7
              ran faster than a row of 14 broadcasts per weight vector).
              Faster than the same kernel multiplying the padding on
              ResNet-18's 7x7 and 14x14 layers, forward and data gradient.
              With 0 (or a task of fewer rows, or ``unroll_kw`` 0) each
              product keeps its test.
``unroll_phase`` a strided ``conv2d_backward_data`` only: see
              ``conv2d_transposed.py``.
``pack_w``    NCHW only: 1 to copy OIHW weights to ``[O / tile_oc, I, KH, KW,
              tile_oc]`` so the channel vector is contiguous (default 1).
              NHWC declares it too, with no effect (default 0).
``pack_at``   with ``pack_w`` (or a data gradient's weight copy): 1 to copy
              each task's block of channels inside the task, right before
              its micro-kernel reads it (the block stays in that core's
              cache), 0 for a parallel copy stage of its own. Default 1 where
              each block has one task (one image, tasks of the whole map): a
              block is then copied once either way, and the copy stage went
              through memory in some of the host's phases (ResNet-18's
              512x7x7 layer at batch 1, forward and data gradient).
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
``rows_first`` NCHW: 1 to order the tasks (batch, row block, channel block),
              so the threads split an image's rows rather than its channel
              blocks: each core then reads the rows it wrote in the layer
              before, and the whole weight. Default 1 where the weight has
              fewer elements than an image of the input (``conv2d_defaults``).
``pad_inline`` with ``unroll_map`` 1: 1 (default) to read the input where it
              lies, no padded copy: each product's padding test is a
              constant of the unrolled code, the ones reading padding left
              out. Faster than ``pad_at`` 1 on ResNet-18's stride-2
              128x28x28 -> 256 and 256x14x14 -> 512, its 512x7x7 and that
              layer's data gradient at batch 8.
``pad_at``    1 to zero-pad each task's input rows inside the task (one
              parallel region per call, the rows still in cache when the
              micro-kernel reads them), 0 for a padding stage of its own.
              Default 1 while the tasks copy each padded row at most
              ``PAD_AT_COPIES`` times (an NCHW task pads every input channel
              for one block of output channels): on ResNet-18's 3x3 layers
              on AVX2, forward and data gradient, it won with 12 and 24
              copies (64x56, 128x28) and lost with 96 and 192 (256x14,
              512x7), and likewise under stride 2 (96 copies for 256x14 ->
              512; 40 copies of 1 x 7 tiles for 128x28 -> 256, which won
              without it). A strided data gradient keeps 1.

The knobs' defaults were measured with ``python benchmarks/compare_configs.py
OP --shape ... --config A --config B`` (configs of one kernel interleaved) on
ResNet-18's layers (those of ``kiln bench --suite cpu``); figures:
benchmarks/RESULTS.md, "Template choices: the measurements behind
schedules/", ``conv2d.py``.

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
from ...te.shapes import static
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from .conv2d_defaults import conv_tiles, register_budget
from .conv2d_grouped import schedule_grouped
from .conv2d_pack import OIHW, CopiedWeight, PackedWeight
from .conv2d_roles import ConvRoles, conv_roles
from .conv2d_steps import (accumulate_nchw, accumulate_nhwc, channel_tile, column_tile, few_pad_copies,
                           padding_knobs, place_padding, run_tasks, split_tiles, task_order, task_rows, unroll_map,
                           unroll_tile, vectorize_write_back)


@register_template("cpu", ops=("conv2d", "conv2d_packed"))
def schedule_conv2d(sch, block, cfg: Config) -> NotApplicable | None:
    """An NCHW ``conv2d`` or a ``conv2d_packed`` (``schedule_nchw``), a
    grouped NCHW ``conv2d`` (``conv2d_grouped.py``), or an NHWC ``conv2d``
    (grouped or not: its channel vectors read a depthwise conv's input
    channels where they lie)."""
    wl = cfg.workload
    packed = wl.op.name == "conv2d_packed"
    nchw = packed or wl.attrs["layout"] == "NCHW"
    roles = conv_roles(sch, block, cfg, nchw=nchw, blocked=packed and bool(wl.attrs["out_block"]))
    if roles is None:
        return NOT_APPLICABLE
    if nchw and wl.attrs.get("groups", 1) > 1:
        schedule_grouped(sch, roles, cfg)
        return None
    if not nchw:
        _schedule_nhwc(sch, roles, cfg)
        return None
    skip = skips_padding("NCHW", wl.shapes[0], wl.out_shapes[0], wl.attrs["padding"], wl.shapes[1][2:4])
    schedule_nchw(sch, roles, cfg, skip, PackedWeight(static(wl.shapes[1][4])) if packed else OIHW)
    return None


def schedule_nchw(sch, r: ConvRoles, cfg: Config, skip: bool, weight: CopiedWeight | PackedWeight) -> None:
    """An NCHW convolution whose weight is copied into blocks of ``tile_oc``
    channels (``pack_w``) or already in them (``PackedWeight``); ``skip``:
    it leaves out the products that read its padding."""
    budget = register_budget(r.lanes)
    tiles = conv_tiles(r.channels, r.width, r.lanes, budget, 1, skip, tuple(cfg.workload.attrs["stride"]))
    tile_oc = weight.tile_oc(cfg, r, tiles[0])
    tile_ow = column_tile(cfg, r, tile_oc, tiles, budget)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    blocks = -(-r.channels // tile_oc)  # channel blocks per image, each its own tasks
    rows = task_rows(cfg, r, tile_oc, blocks, skip)
    pack_w = weight.pack_w(cfg)
    par = cfg.define_knob("parallel", (0, 1), default=1)
    unroll, inline, pad_at = padding_knobs(cfg, r, skip, tile_oc, few_pad_copies(cfg, r, blocks, rows))

    pack = weight.read_copy(sch, r, tile_oc) if pack_w else None
    t = split_tiles(sch, r, tile_oc, tile_ow, rows)
    acc = accumulate_nchw(sch, r, t)
    unroll_tile(sch, r, t, unroll_kw)
    if unroll:
        unroll_map(sch, r, t)
    task = run_tasks(sch, r, task_order(sch, cfg, r.n, t.oo, t.yo), par)
    vectorize_write_back(sch, acc, 3)  # below (task, a task's rows, column tiles)
    once = r.batch == 1 and rows == r.height  # one task per channel block
    if pack_w and cfg.define_knob("pack_at", (0, 1), default=int(once)):
        weight.copy_in_task(sch, pack, task, tile_oc, r.lanes)  # each task copies its block right before reading it
    elif pack_w:
        weight.copy(sch, pack, tile_oc, r.lanes)
    place_padding(sch, cfg, r, inline, pad_at, task)


def _schedule_nhwc(sch, r: ConvRoles, cfg: Config) -> None:
    """An NHWC ``conv2d``: tasks of (image, row block), the channel blocks
    inside each column tile. It multiplies its padding (``skips_padding``
    holds for NCHW only): no ``unroll_map``."""
    budget = register_budget(r.lanes)
    tiles = conv_tiles(r.channels, r.width, r.lanes, budget, 1, False, tuple(cfg.workload.attrs["stride"]))
    tile_oc = channel_tile(cfg, r, tiles[0])
    tile_ow = column_tile(cfg, r, tile_oc, tiles, budget)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    rows = task_rows(cfg, r, tile_oc, 1, False)
    cfg.define_knob("pack_w", (0, 1), default=0)  # declared, no effect: the weight is read where it lies
    par = cfg.define_knob("parallel", (0, 1), default=1)
    _, _, pad_at = padding_knobs(cfg, r, False, tile_oc, few_pad_copies(cfg, r, 1, rows))

    t = split_tiles(sch, r, tile_oc, tile_ow, rows)
    acc = accumulate_nhwc(sch, r, t)
    unroll_tile(sch, r, t, unroll_kw)
    task = run_tasks(sch, r, (r.n, t.yo), par)
    vectorize_write_back(sch, acc, 4)  # below (task, a task's rows, column tiles, channel blocks)
    place_padding(sch, cfg, r, False, pad_at, task)
