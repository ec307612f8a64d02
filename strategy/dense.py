"""The strategies of ``dense``: packed, direct.

``packed`` (priority 10): on the CPU, a constant weight is packed once
(``pack_dense_weight``) into panels of ``panel_width`` columns, the register
tile the template would copy it into on every call, and ``dense_packed``
reads the panels as they are.
"""
from __future__ import annotations

from ..schedules.cpu.matmul import panel_width
from ..te.shapes import static
from .base import Packed, register


@register("dense", "packed", priority=10)
def _dense_packed(workload, target, constant_weight: bool) -> Packed | None:
    if target.kind != "cpu" or not constant_weight:
        return None
    columns = static(workload.shapes[1][1])
    bn = panel_width(columns if isinstance(columns, int) else None, workload.dtypes[1], target)
    return Packed("dense_packed", dict(workload.attrs), "pack_dense_weight", {"bn": bn})
