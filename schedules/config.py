"""Knobs and configs: the schedule choices of a template, as plain data.

A template declares its knobs while it runs — ``cfg.define_split`` and
``cfg.define_knob`` — and each call returns the value to use: the config's
value when one was given (by the tuner or a tuning record), else the
template's hand-chosen default. So one function is both the hand-written
schedule and the tuner's search space (AutoTVM's ``cfg.is_fallback`` idea).

A config is a mapping ``knob name -> value`` of ints, strs and tuples: it
prints, hashes, compares and round-trips through JSON.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import ScheduleError


@dataclass(frozen=True)
class Split:
    """Split a loop of ``extent`` into ``parts`` loops; the value is the tuple of
    the ``parts - 1`` inner factors (the outer loop takes what is left, with a
    tail when the factors do not divide the extent)."""

    extent: int | None  # None when the loop's extent is symbolic
    parts: int
    default: tuple

    def candidates(self, limit: int = 4096) -> list[int]:
        """Factors a tuner may pick for one inner loop: divisors and powers of two."""
        top = self.extent or limit
        powers = {1 << k for k in range(top.bit_length()) if 1 << k <= top}
        divisors = {d for d in range(1, min(top, limit) + 1) if self.extent and self.extent % d == 0}
        return sorted(powers | divisors)

    def validate(self, name: str, value: Any) -> tuple:
        value = tuple(value) if isinstance(value, (list, tuple)) else None
        if value is None or len(value) != self.parts - 1 or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
            raise ScheduleError(f"got {value!r}, expected {self.parts - 1} positive integer factor(s)", arg=name)
        total = 1
        for v in value:
            total *= v
        if self.extent is not None and total > max(self.extent, 1):
            raise ScheduleError(f"factors {value} multiply to {total}, more than the extent {self.extent}",
                                arg=name)
        return value


@dataclass(frozen=True)
class Knob:
    """A categorical choice among ``options``."""

    options: tuple
    default: Any

    def validate(self, name: str, value: Any) -> Any:
        value = tuple(value) if isinstance(value, list) else value
        if value not in self.options:
            raise ScheduleError(f"got {value!r}, expected one of {list(self.options)}", arg=name)
        return value


@dataclass
class Config:
    """Knob values for one workload on one target. ``values`` left empty means
    "use every template default" (the fallback config). ``workload`` tells the
    template what it schedules (a ``kiln.te.Workload``: ``.op``, ``.attrs``,
    ``.shapes``, ``.dtypes``)."""

    target: Any
    values: dict = field(default_factory=dict)
    space: dict = field(default_factory=dict)
    workload: Any = None

    @property
    def is_fallback(self) -> bool:
        return not self.values

    def define_split(self, name: str, extent, parts: int = 2, default: Sequence[int] | None = None) -> tuple:
        """Declare a split knob; return the inner factors to use."""
        ext = int(extent) if isinstance(extent, int) or hasattr(extent, "value") else None
        if ext is not None and hasattr(extent, "value"):
            ext = int(extent.value)
        default = tuple(default) if default is not None else (1,) * (parts - 1)
        knob = Split(ext, parts, clamp_factors(default, ext))
        return self._define(name, knob)

    def define_knob(self, name: str, options: Sequence, default=None):
        """Declare a categorical knob; return its value."""
        options = tuple(tuple(o) if isinstance(o, list) else o for o in options)
        default = options[0] if default is None else default
        if default not in options:
            options = options + (default,)
        return self._define(name, Knob(options, default))

    def _define(self, name: str, knob):
        if name in self.space and self.space[name] != knob:
            raise ScheduleError(f"knob '{name}' is declared twice with different spaces", arg=name)
        self.space[name] = knob
        if name in self.values:
            return knob.validate(name, self.values[name])
        return knob.default

    def check_known(self) -> None:
        """Reject values for knobs the template never declared (typos, stale records)."""
        unknown = sorted(set(self.values) - set(self.space))
        if unknown:
            raise ScheduleError(f"unknown knob(s) {unknown}; this template declares {sorted(self.space)}",
                                arg=unknown[0])

    def resolved(self) -> dict:
        """Every declared knob with the value used (default or given)."""
        return {k: self.values.get(k, knob.default) for k, knob in self.space.items()}

    def key(self) -> str:
        return config_key(self.values)


def clamp_factors(factors: Sequence[int], extent: int | None) -> tuple:
    """Shrink default factors so that they fit a small extent (keeps defaults valid)."""
    out, room = [], extent
    for f in reversed(list(factors)):
        f = max(1, int(f))
        if room is not None:
            f = max(1, min(f, room))
            room = max(1, room // f)
        out.append(f)
    return tuple(reversed(out))


def config_key(values: Mapping) -> str:
    """Canonical JSON of a config's values (tuples as lists), for keys and records."""
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in sorted(values.items())},
                      sort_keys=True, separators=(",", ":"))
