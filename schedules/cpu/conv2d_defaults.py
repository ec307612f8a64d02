"""The CPU conv templates' default knob values (``schedules/cpu/conv2d.py``,
``conv2d_transposed.py``): the register tile (``tile_oc`` x ``tile_ow``
within a register budget), the rows of a parallel task, where the zero
padding is copied, and the channel block an exporter packs a constant weight
with. Each rule's reasoning is with its constant (figures:
benchmarks/RESULTS.md, "Template choices: the measurements behind
schedules/").
"""
from __future__ import annotations

import math

from ...errors import AttrError
from ...te.shapes import static
from ...te.workload import Workload
from ..util import divisors


def default_tiles(channels: int | None, width: int | None, lanes: int, budget, step: int = 1) -> tuple[int, int]:
    """(tile_oc, tile_ow): the register tile with the most accumulators within
    ``budget(vectors)`` whose width divides the output width (a tail tile
    would be predicated inside the micro-kernel); two channel vectors
    preferred, as they halve the broadcasts per FMA. With a ``step`` (a
    strided data gradient's tiles, a multiple of the stride wide): on AVX2,
    of the tiles with enough accumulators to hide the FMA latency, the one
    with the fewest loads per FMA (2 vectors x 4 columns at 56 and 28 wide
    ran 1.1-1.2x one vector x 14, and one vector x 14 at 14 wide 1.6x two
    vectors x 2); on AVX-512, the most accumulators, as for a conv, within
    its smaller budget."""
    if channels is not None and channels < lanes:  # the conv's budget (3 x 14 ran at half 3 x 8's rate)
        return channels, divisor_tile(width, register_budget(lanes)(1), step)
    tiles = [(vectors, divisor_tile(width, budget(vectors), step)) for vectors in (2, 1)
             if channels is None or channels % (vectors * lanes) == 0]
    if not tiles:
        return lanes, divisor_tile(width, budget(1), step)

    def merit(tile):
        vectors, ow = tile
        if step == 1 or lanes >= 16:
            return vectors * ow, vectors
        return vectors * ow >= LATENCY_ACCUMULATORS, -(vectors + ow) / (vectors * ow), vectors * ow

    vectors, ow = max(tiles, key=merit)
    return vectors * lanes, ow


def conv_tiles(channels: int, width: int, lanes: int, budget, step: int, skip: bool, stride) -> tuple[int, int]:
    """(tile_oc, tile_ow): the conv templates' default register tile:
    ``default_tiles``, or, where the template unrolls the map (``skip``: the padding's products
    left out) and a row of one channel vector fits the registers, a tile as
    wide as the map: one copy of the kernel per row. Not under a stride, where
    the row's 14 broadcasts per weight vector ran slower than two vectors by 7
    (ResNet-18's 128x28x28 -> 256 at batch 8)."""
    oc, ow = default_tiles(channels, width, lanes, budget, step)
    if skip and ow != width and budget(1) >= width and channels % lanes == 0 and tuple(stride) == (1, 1):
        return lanes, width
    return oc, ow


#: accumulators that keep both FMA pipes busy through the FMA latency (2 x 4 cycles)
LATENCY_ACCUMULATORS = 8

#: a strided data gradient's accumulators on AVX-512: on ResNet-18's stride-2 layers one vector x 14
#: columns ran 1.15-1.25x two vectors x 14 (28 accumulators, every register) and two x 4 on 28- and
#: 14-wide maps; on a 56-wide map two x 8 and one x 14 tie (``benchmarks/compare_configs.py
#: conv2d_backward_data``; figures: benchmarks/RESULTS.md, "Template choices: the measurements behind
#: schedules/")
PHASED_WIDE_ACCUMULATORS = 16


def divisor_tile(width: int | None, limit: int, step: int = 1) -> int:
    """The widest tile up to ``limit`` that divides ``width``, a multiple of
    ``step`` if one is."""
    limit = max(1, limit)
    if width is None:
        return min(8, limit)
    fits = [d for d in range(1, min(width, limit) + 1) if width % d == 0]
    return max([d for d in fits if d % step == 0] or fits)


#: multiply-adds a task's rows may add up to by default (``task_rows``): enough
#: to amortize a task's fixed cost, small enough to leave every thread tasks
TASK_MACS = 1 << 18


def task_row_choices(height: int | None, stride: int) -> tuple:
    """``task_rows``' values: the divisors of the output height; for a
    strided ``conv2d_backward_data`` whose height the stride divides, only
    whole cycles of its phases. A task then starts on phase 0 and a row's
    phase is its offset in the task: with one row per task, the phase
    ``(y + padding) % stride`` of a row taken from the fused parallel loop
    was flattened by TVM 0.27 into an index that read the wrong channel
    block's sub-kernel on a map's last row at batch 2 and above."""
    rows = divisors(height)
    whole = tuple(d for d in rows if d % stride == 0)
    return whole if height and height % stride == 0 else rows


#: the same for a strided data gradient, measured on ResNet-18's stride-2 layers (AVX2, batch 8): tasks of
#: 14 rows (6.4M multiply-adds) ran 1.15-1.3x tasks of 2 on all three (68-76 -> 86-89 GFLOPS)
PHASED_TASK_MACS = 1 << 23


#: a padded conv's tasks may grow to this many multiply-adds while an image still splits into
#: ``TASKS_PER_IMAGE`` tasks: a task of one row pads the kernel's rows (3 for a 3x3) to advance one,
#: a task of many rows pads each row about once: 1-7% faster than tasks of one row on ResNet-18's padded
#: layers (``benchmarks/compare_configs.py conv2d``, ``task_rows``). A 1x1 conv (nothing to pad) keeps
#: ``TASK_MACS``: more rows ran slower there (figures: benchmarks/RESULTS.md, "Template choices: the
#: measurements behind schedules/")
PADDED_TASK_MACS = 1 << 24

#: tasks an image of a padded conv keeps at least (channel blocks x row blocks), so one image still
#: spreads over the threads
TASKS_PER_IMAGE = 8


def default_task_rows(rows: tuple, row_macs: int, limit: int = TASK_MACS, blocks: int | None = None) -> int:
    """The most rows up to ``limit`` multiply-adds, else the fewest; with
    ``blocks`` (a padded conv's channel blocks per image), more rows up to
    ``PADDED_TASK_MACS`` while ``TASKS_PER_IMAGE`` tasks remain."""
    fit = [d for d in rows if d * row_macs <= limit]
    base = max(fit) if fit else min(rows)
    if blocks is None:
        return base
    height = max(rows)
    wide = [d for d in rows if d * row_macs <= PADDED_TASK_MACS and blocks * (height // d) >= TASKS_PER_IMAGE]
    return max([base, *wide])


#: ``pad_at``'s default: 1 while the tasks copy each padded input row at most this many times in all
PAD_AT_COPIES = 32


def pad_copies(attrs, blocks: int, task_rows: int, kernel_rows: int | None) -> float:
    """How many times ``pad_at``'s tasks copy each padded input row: once per
    channel block (NCHW: a task is one block's rows, and pads every input
    channel), times the rows a task reads over the rows it advances by (the
    kernel's rows overlap the next task's)."""
    step = attrs.get("stride", (1, 1))[0] if "in_size" not in attrs else 1  # a data gradient's placed grid: 1
    span = ((kernel_rows or 1) - 1) * attrs.get("dilation", (1, 1))[0] + 1
    return blocks * (task_rows * step + max(span - step, 0)) / (task_rows * step)


def register_budget(lanes: int, phased: bool = False):
    """Output columns a tile of ``vectors`` channel vectors may have: for a
    conv, 24 (AVX-512) or 12 (AVX2) accumulators in all, most of the 32 or
    16 vector registers, the rest left for the weight vectors and a
    broadcast. For a strided ``conv2d_backward_data`` on AVX2, every register
    but the weight vectors and a broadcast (its tiles are narrow: on a 14-wide
    map, one vector by 14 columns ran at 1.4x one vector by 7, whose columns
    alternate phases); on AVX-512, ``PHASED_WIDE_ACCUMULATORS``."""
    if phased:
        if lanes >= 16:
            return lambda vectors: PHASED_WIDE_ACCUMULATORS // vectors
        return lambda vectors: (16 - vectors - 1) // vectors
    total = 24 if lanes >= 16 else 12
    return lambda vectors: total // vectors


def packed_channels(workload: Workload, target) -> int:
    """The block width ``oc`` to pack a constant conv2d weight with.

    Parameters
    ----------
    workload : Workload
        An NCHW ``conv2d`` (``kiln.te.get_op("conv2d").check(...)``).
    target : Target
        Where the packed kernel will run (``kiln.cpu()``).

    Returns
    -------
    int
        ``default_tiles``' channels for ``workload``: the ``tile_oc`` this
        template chooses by default, except where it unrolls the map with a
        row of one vector (``conv_tiles``). A constant weight is packed in
        these blocks whatever the map, so that the convolutions of a blocked
        region (``graph.layout``), direct and Winograd, share one block
        width: ``pack_conv2d_weight(w, oc=...)`` then feeds ``conv2d_packed``
        that register tile.
    """
    if workload.op.name != "conv2d" or workload.attrs["layout"] != "NCHW":
        raise AttrError(f"got {workload.op.name} with {workload.attrs.get('layout')}, expected an NCHW conv2d "
                        "(only OIHW weights are packed)", op=workload.op.name, arg="layout")
    _, channels, _, width = (static(d) for d in workload.out_shapes[0])
    lanes = target.lanes(workload.out_dtypes[0])
    known = [d if isinstance(d, int) else None for d in (channels, width)]
    return default_tiles(*known, lanes, register_budget(lanes))[0]


def rows_first_default(workload: Workload) -> bool:
    """``rows_first``'s default: 1 where the weight has fewer elements than
    one image of the input. The threads then split an image's rows, not its
    channel blocks, so each core reads the rows it wrote in the layer before
    (a channel split reads every input channel, half of them from the other
    core's cache) and the whole weight; a weight larger than the image keeps
    the channel split, each core reading half of it (MobileNetV2 at batch 1,
    its depthwise and 1x1 layers all rows first: 3.63 -> 3.23 ms; ResNet-50's
    layers all rows first, its large weights included: 33.5 -> 36.7 ms)."""
    dims = [static(d) for d in (*workload.shapes[0][1:], *workload.shapes[1])]
    if not all(isinstance(d, int) for d in dims):
        return False
    image = len(workload.shapes[0]) - 1
    return math.prod(dims[image:]) < math.prod(dims[:image])
