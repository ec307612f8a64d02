"""CPU template for ``conv2d_backward_data``, the transposed convolution
(``te/conv_grad.py``): ``conv2d.py``'s micro-kernel, its output channels
being ``w``'s input channels. Two variants, as the op has two TE bodies:

- stride 1, or a dilation with a stride (``gy`` placed on the input's grid):
  ``schedule_nchw`` with the weight copied from IOHW into blocks of
  ``tile_oc`` channels, every knob as for a forward conv;
- a stride and no dilation, per phase (``_schedule_phased``): the sub-kernels
  of the ``_taps`` stage, output channels innermost, stored in blocks of
  ``tile_oc`` channels (``_schedule_taps``): no ``pack_w``. Its tile is a
  multiple of the stride wide, so each column's phase (its sub-kernel and
  its missing taps) is a constant of the unrolled micro-kernel, within the
  phased register budget (``conv2d_defaults.register_budget``); its tasks'
  rows are whole cycles of the phases (``task_row_choices``), up to
  ``PHASED_TASK_MACS`` multiply-adds by default; its padding is computed in
  each task (``pad_at`` 1).

``unroll_phase`` the phased variant only: 1 to split each task's rows into
              whole cycles of the row phases and unroll the phase and the
              kernel-row loop, so each row's sub-kernel, and which of its
              taps are missing, is a constant of the micro-kernel (the
              columns' phases already are: the tile is a multiple of the
              stride wide). With 0 the missing taps of a 3x3 stride-2 kernel
              are multiplied by zero: 12 products per 2 x 2 outputs where 9
              are real. Default 1: twice as fast on ResNet-18's stride-2 data
              gradients at batch 1 and 8, more than the products saved: the
              unrolled rows also address the sub-kernel with constant
              offsets (``python benchmarks/compare_configs.py
              conv2d_backward_data ... --config '{"unroll_phase": 0}'
              --config '{}'``; figures: benchmarks/RESULTS.md, "Template
              choices: the measurements behind schedules/",
              ``conv2d.py``). No effect where a task's rows are not whole
              cycles of the phases (a height the stride does not divide).

The other knobs are ``conv2d.py``'s.
"""
from __future__ import annotations

from dataclasses import replace

from ...te.conv_grad import data_skips_padding
from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_injective
from ..util import find_block
from .conv2d import schedule_nchw
from .conv2d_defaults import PHASED_TASK_MACS, conv_tiles, default_task_rows, register_budget, task_row_choices
from .conv2d_grouped import schedule_grouped
from .conv2d_pack import IOHW
from .conv2d_roles import ConvRoles, conv_roles
from .conv2d_steps import (accumulate_nchw, channel_tile, column_tile, padding_knobs, place_padding, row_work,
                           run_tasks, split_tiles, unroll_tile, vectorize_write_back)


@register_template("cpu", ops=("conv2d_backward_data",))
def schedule_conv2d_backward_data(sch, block, cfg: Config) -> NotApplicable | None:
    """The phased variant where the op has its ``_taps`` stage, the grouped
    template for a grouped data gradient (``conv2d_grouped.py``), else
    ``schedule_nchw`` with the IOHW weight copied."""
    roles = conv_roles(sch, block, cfg)
    if roles is None:
        return NOT_APPLICABLE
    if cfg.workload.attrs["groups"] > 1:
        schedule_grouped(sch, roles, cfg)
        return None
    taps = find_block(sch, "_taps")
    if taps is not None:
        _schedule_phased(sch, roles, cfg, taps)
        return None
    a = cfg.workload.attrs
    skip = data_skips_padding(cfg.workload.shapes[0], cfg.workload.out_shapes[0], cfg.workload.shapes[1],
                              a["stride"], a["padding"], a["dilation"])  # the padded taps' products left out
    schedule_nchw(sch, roles, cfg, skip, IOHW)
    return None


def _schedule_phased(sch, r: ConvRoles, cfg: Config, taps) -> None:
    """A strided data gradient per phase: tiles a multiple of the stride
    wide, tasks of whole cycles of the row phases, each row's sub-kernel a
    constant of the micro-kernel (``unroll_phase``)."""
    stride = tuple(cfg.workload.attrs["stride"])
    phase_h, step = stride
    budget = register_budget(r.lanes, phased=True)
    tiles = conv_tiles(r.channels, r.width, r.lanes, budget, step, False, stride)
    tile_oc = channel_tile(cfg, r, tiles[0])
    tile_ow = column_tile(cfg, r, tile_oc, tiles, budget, step)
    unroll_kw = cfg.define_knob("unroll_kw", (0, 1), default=1)
    choices = task_row_choices(r.height, phase_h)
    rows = cfg.define_knob("task_rows", choices,
                           default=default_task_rows(choices, row_work(r, tile_oc), PHASED_TASK_MACS))
    par = cfg.define_knob("parallel", (0, 1), default=1)
    _, _, pad_at = padding_knobs(cfg, r, False, tile_oc, True)  # pad_at 1 by default, whatever the copies

    t = split_tiles(sch, r, tile_oc, tile_ow, rows)
    phase = None
    if cfg.define_knob("unroll_phase", (0, 1), default=1) and rows % phase_h == 0:
        yi, phase = sch.split(t.yi, [None, phase_h])
        t = replace(t, yi=yi)
    acc = accumulate_nchw(sch, r, t, () if phase is None else (phase,))
    unroll_tile(sch, r, t, unroll_kw)
    if phase is not None:  # each row's sub-kernel, and its missing taps, a constant of the micro-kernel
        sch.unroll(phase)
        sch.unroll(r.ry)
    task = run_tasks(sch, r, (r.n, t.oo, t.yo), par)
    vectorize_write_back(sch, acc, 3)  # as in schedule_nchw
    _schedule_taps(sch, taps, tile_oc, r.channels, cfg)
    place_padding(sch, cfg, r, False, pad_at, task)


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
