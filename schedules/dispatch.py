"""Which template schedules an op on a target: ``(op, target) -> template``.

Rules are tried in order and the first that matches wins: templates registered
for the op's name, then for its family, then the generic fallback of the
target. A template is ``fn(sch, block, cfg)``: it applies ``tvm.s_tir.Schedule``
primitives to the op's output ``block`` (and what feeds it), reading its knobs
from ``cfg``.
"""
from __future__ import annotations

from typing import Callable

from ..errors import ScheduleError

Template = Callable  # (sch: tvm.s_tir.Schedule, block, cfg: Config) -> None

_BY_OP: dict[tuple[str, str], Template] = {}
_BY_FAMILY: dict[tuple[str, str], Template] = {}
_FALLBACK: dict[str, Template] = {}


def register_template(target: str, *, ops: tuple[str, ...] = (), families: tuple[str, ...] = (),
                      fallback: bool = False):
    """Decorator registering a template for ``target`` ("cpu" or "cuda")."""

    def wrap(fn: Template) -> Template:
        for name in ops:
            _BY_OP.setdefault((name, target), fn)
        for fam in families:
            _BY_FAMILY.setdefault((fam, target), fn)
        if fallback:
            _FALLBACK.setdefault(target, fn)
        return fn

    return wrap


def lookup(op, target_kind: str) -> Template:
    """The template for ``op`` (an ``Op``) on a target kind."""
    for table, key in ((_BY_OP, (op.name, target_kind)), (_BY_FAMILY, (op.family, target_kind))):
        if key in table:
            return table[key]
    if target_kind in _FALLBACK:
        return _FALLBACK[target_kind]
    raise ScheduleError(f"no schedule template for target '{target_kind}'", op=op.name, arg="target")


def template_name(fn: Template) -> str:
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
