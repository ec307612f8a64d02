"""Which template schedules an op on a target: ``apply(op, target, ...)``.

A template is ``fn(sch, block, cfg)``: it applies ``tvm.s_tir.Schedule``
primitives to the op's output ``block`` (and what feeds it), reading its knobs
from ``cfg``. The candidates for (op, target) are tried in order — templates
registered for the op's name, then for its family, then the target's generic
fallback — and the first that accepts the workload schedules it (TVM dlight's
rule contract).

A template that does not suit the workload (a symbolic dim it cannot tile, a
layout it does not handle) returns ``NOT_APPLICABLE``, and dispatch moves on
to the next candidate with the same, untouched schedule and config. So a
template must decide *before* it changes the schedule or declares a knob;
reading the schedule (``get_loops``, ``get``, extents) is fine. Declining
after either is a bug that ``apply`` reports as a ``ScheduleError``. The
fallback accepts every workload: it never declines.
"""
from __future__ import annotations

from typing import Callable

from ..errors import BuildError, KilnError, ScheduleError, tvm_message

Template = Callable  # (sch: tvm.s_tir.Schedule, block, cfg: Config) -> None | NotApplicable


class NotApplicable:
    """The type of ``NOT_APPLICABLE``, what a template returns to decline a workload."""

    def __repr__(self) -> str:
        return "NOT_APPLICABLE"


NOT_APPLICABLE = NotApplicable()

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


def _candidates(op, target_kind: str) -> list[Template]:
    """The templates to try for ``op`` (an ``Op``) on a target kind, in order; the last is the fallback."""
    if target_kind not in _FALLBACK:
        raise ScheduleError(f"no schedule template for target '{target_kind}'", op=op.name, arg="target")
    keys = ((_BY_OP, (op.name, target_kind)), (_BY_FAMILY, (op.family, target_kind)))
    return [table[key] for table, key in keys if key in table] + [_FALLBACK[target_kind]]


def apply(op, target_kind: str, sch, block, cfg) -> str:
    """Schedule ``block`` of ``sch`` with the first template for (``op``, target)
    that accepts the workload; return that template's name (``template_name``).

    Raises
    ------
    ScheduleError
        A template declined after declaring a knob or changing the schedule, or
        the fallback declined; or a knob value in ``cfg`` is invalid.
    BuildError
        TVM rejected a schedule primitive the accepting template applied.
    """
    *specific, fallback = _candidates(op, target_kind)
    for fn in specific:
        knobs, edits = len(cfg.space), _edits(sch)
        if _run(fn, op, sch, block, cfg) is not NOT_APPLICABLE:
            return template_name(fn)
        if len(cfg.space) != knobs or _edits(sch) != edits:
            raise ScheduleError(f"template {template_name(fn)} declined the workload after declaring knobs or "
                                "changing the schedule; a template decides before it does either",
                                op=op.name, arg="template")
    if _run(fallback, op, sch, block, cfg) is NOT_APPLICABLE:
        raise ScheduleError(f"the fallback template {template_name(fallback)} declined the workload; "
                            "a fallback must schedule every op", op=op.name, arg="template")
    return template_name(fallback)


def _run(fn: Template, op, sch, block, cfg):
    try:
        return fn(sch, block, cfg)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's schedule errors are C++ tracebacks
        raise BuildError(f"template {template_name(fn)} failed with config {cfg.values}: {tvm_message(exc)}",
                         op=op.name, arg="config") from exc


def _edits(sch) -> int:
    """How many schedule-changing primitives the schedule's trace holds (lookups such as
    ``get_loops`` are pure: they leave the program as it was)."""
    return sum(not inst.kind.is_pure for inst in sch.trace.insts)


def template_name(fn: Template) -> str:
    """``module.function`` of a template, e.g. ``conv2d.schedule_conv2d``: what a kernel records."""
    return f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
