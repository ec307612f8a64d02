"""Training-mode BatchNorm (``batch_norm_train``, ``batch_norm_train_grad``) on the CPU.

Each per-channel statistic of NCHW (or NCL) data reduces over the batch and
the spatial dims, which hold the contiguous memory, while neighbouring
channels lie a whole plane apart. The generic schedule vectorizes a
reduction across its outputs — here a gather of 16 channels per load — so
this template takes the other way it offers: the reduction's slices are
summed with vector instructions into partial results (``rfactor``), one
task per channel block, and the per-element stages run as fused vectorized
loops. The slices index the flattened (N, H, W) space, so a plane whose
size is not a power of two costs a division per lane (28x28, 56x56: the
generic schedule measured 1.3-2x faster there, 2x slower on 8x8 to 32x32
planes); those, and (N, C) data, whose channels are the contiguous axis,
keep the generic schedule.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import NOT_APPLICABLE, NotApplicable, register_template
from ..generic import schedule_auto
from ..util import const_int


def work_of(dims) -> int | None:
    """The product of ``dims``, None when one is symbolic."""
    out = 1
    for d in dims:
        d = const_int(d)
        if d is None:
            return None
        out *= d
    return out


@register_template("cpu", families=("norm",))
def schedule_batch_norm(sch, block, cfg: Config) -> NotApplicable | None:
    x = cfg.workload.shapes[1 if cfg.workload.op.name == "batch_norm_train_grad" else 0]
    plane = work_of(x[2:])
    if len(x) < 3 or plane is None or plane & (plane - 1):
        return NOT_APPLICABLE
    schedule_auto(sch, block, cfg, prefer_rfactor=True)
    return None
