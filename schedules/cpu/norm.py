"""Training-mode BatchNorm (``batch_norm_train``, ``batch_norm_train_grad``)
on the CPU: all of a channel's work in one parallel task.

The ops' stages are per-channel reductions over the batch and the map (the
mean and the variance; the gradient's sums of ``gy`` and ``gy * x-hat``
too) and the per-element output. The generic schedule runs each stage as a
parallel pass of its own over the whole input: three passes (six for the
gradient), each a launch on the thread pool, each reading the input back
from wherever the last pass left it. Here one task per channel runs every
stage in turn on that channel's planes (from a few KB to a few hundred:
they stay in L1 or L2): each reduction summed in vector slices of the
contiguous map (``rfactor``), then the output written vectorized: 1.0-1.8x
the generic schedule's speed for ``batch_norm_train``, 1.2-2.5x for its
gradient, timed interleaved (``kiln.bench.timing.compare`` of the two
kernels); figures: benchmarks/RESULTS.md, "Template choices: the
measurements behind schedules/", ``norm.py``.

It applies to data of rank 3 or more with static dims, whose map a slice
of 4 lanes or more divides, and whose channels share out evenly among the
cores (a multiple of them, or 4 a core at least); the generic schedule
serves the rest ((N, C) data, 7x7 maps, a few channels for many cores).

``vector``    lanes of each reduction's slices: a quarter, half or whole
              vector that divides the map; default the widest.
``parallel``  1 to run the channel tasks on the thread pool.
"""
from __future__ import annotations

import math

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import vectorize_row
from ..util import block_name, blocks, is_reduction

#: ``vector``'s smallest slice
MIN_LANES = 4


@register_template("cpu", ops=("batch_norm_train", "batch_norm_train_grad"))
def schedule_batch_norm(sch, block, cfg: Config) -> NotApplicable | None:
    workload = cfg.workload
    x = workload.shapes[1 if workload.op.name == "batch_norm_train_grad" else 0]
    if len(x) < 3 or not all(isinstance(d, int) for d in x):
        return NOT_APPLICABLE
    channels, plane = x[1], math.prod(x[2:])
    lanes = cfg.target.lanes(workload.out_dtypes[0])
    widths = tuple(v for v in (lanes // 4, lanes // 2, lanes) if v >= MIN_LANES and plane % v == 0)
    cores = cfg.target.cores
    if not widths or not (channels % cores == 0 or channels >= 4 * cores):
        return NOT_APPLICABLE
    width = cfg.define_knob("vector", widths, default=max(widths))
    par = cfg.define_knob("parallel", (0, 1), default=1)

    factored = [_slices(sch, sch.get_sblock(name), width) for name in _own(sch, workload.op.name)
                if is_reduction(sch, sch.get_sblock(name))]
    out = sch.get_sblock(workload.op.name)
    batch, channel, *_ = sch.get_loops(out)
    sch.reorder(channel, batch)
    # every stage's nest starts with its channel loop: one loop of them all, the stages in program order in
    # its body (each reads only its own channel of the stages before it)
    channel = sch.merge(*[sch.get_loops(sch.get_sblock(name))[0] for name in _own(sch, workload.op.name)])
    if par:
        sch.parallel(channel)
    for rf in factored:  # a slice's lanes (the innermost loop of its partial sums) as one vector
        sch.vectorize(sch.get_loops(rf)[-1])
    out = sch.get_sblock(workload.op.name)
    spatial = sch.get_loops(out)[2:]  # under the channel and batch loops
    vectorize_row(sch, sch.fuse(*spatial) if len(spatial) > 1 else spatial[0], plane, lanes)
    return None


def _own(sch, output: str) -> list[str]:
    """The names of the op's stages, in order, up to its ``output`` block: a
    fused epilogue's blocks after it are the graph's to inline into the
    output's write-back (``graph.lower``)."""
    names = [block_name(sch, b) for b in blocks(sch)]
    return names[:names.index(output) + 1]


def _slices(sch, block, width: int):
    """The per-channel reduction ``block`` (loops: channel, batch, map)
    summed in slices of ``width`` adjacent elements of the map: returns the
    block of the slices' partial sums (``rfactor``), whose innermost loop
    runs over a slice's lanes."""
    _, _, *plane = sch.get_loops(block)
    _, lane = sch.split(sch.fuse(*plane) if len(plane) > 1 else plane[0], [None, width])
    return sch.rfactor(lane, 1)
