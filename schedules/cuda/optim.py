"""The fused optimizer updates (``te/optim.py``) on CUDA: one kernel, each
thread updating its elements' state and weight (see ``cpu/optim.py``)."""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..util import merge_nests
from .common import bind_flat


@register_template("cuda", families=("optimizer",))
def schedule_update_cuda(sch, block, cfg: Config) -> None:
    merge_nests(sch, block)
    bind_flat(sch, block, cfg)
