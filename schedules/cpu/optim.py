"""The fused optimizer updates (``te/optim.py``) on the CPU: one pass over memory.

The op declares one stage per new state buffer and one for the new weight,
each a loop nest over the parameter's shape. They become one nest (state
stages first, the weight last: the order the op's in-place contract needs,
since each stage writes over its input), scheduled as one injective loop:
fused, vectorized, parallel above a size. Each element is read once and
written once.
"""
from __future__ import annotations

from ..config import Config
from ..dispatch import register_template
from ..generic import schedule_injective
from ..util import merge_nests


@register_template("cpu", families=("optimizer",))
def schedule_update(sch, block, cfg: Config) -> None:
    merge_nests(sch, block)
    schedule_injective(sch, block, cfg)
