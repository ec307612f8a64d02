"""Attribute parsers: each turns a user value into the canonical, hashable form.

An op declares ``attrs = {"axis": Attr(axes, default=None), ...}``; the registry
calls the parser with the op's name so that every error names the op and the
attribute. Canonical values are plain Python data (ints, floats, bools, strs,
tuples, None) so configs and cache keys can be printed, hashed and stored.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import AttrError

REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its parser, its default and one line of doc."""

    parse: Callable[[str, str, Any], Any]
    default: Any = REQUIRED
    doc: str = ""


def _fail(op: str, name: str, value: Any, expected: str):
    raise AttrError(f"got {value!r}, expected {expected}", op=op, arg=name)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(op: str, name: str, value: Any) -> int:
    if not _is_int(value):
        _fail(op, name, value, "an integer")
    return int(value)


def positive_int(op: str, name: str, value: Any) -> int:
    value = integer(op, name, value)
    if value < 1:
        _fail(op, name, value, "an integer >= 1")
    return value


def non_negative_int(op: str, name: str, value: Any) -> int:
    value = integer(op, name, value)
    if value < 0:
        _fail(op, name, value, "an integer >= 0")
    return value


def positive_float(op: str, name: str, value: Any) -> float:
    """A finite real number > 0 (an epsilon)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < float("inf"):
        _fail(op, name, value, "a finite number > 0")
    return float(value)


def boolean(op: str, name: str, value: Any) -> bool:
    if not isinstance(value, (bool,)) and not (_is_int(value) and value in (0, 1)):
        _fail(op, name, value, "True or False")
    return bool(value)


def scalar(op: str, name: str, value: Any) -> int | float | bool:
    """A Python number (numpy scalars are converted); keeps int vs float, which
    decides the result dtype the way numpy does."""
    if isinstance(value, bool):
        return value
    if _is_int(value):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    _fail(op, name, value, "a real number")


def axes(op: str, name: str, value: Any) -> tuple[int, ...] | None:
    """None (all axes), an int, or a sequence of ints; range-checked later,
    once the input's rank is known."""
    if value is None:
        return None
    if _is_int(value):
        return (int(value),)
    if isinstance(value, (tuple, list)) and all(_is_int(v) for v in value):
        return tuple(int(v) for v in value)
    _fail(op, name, value, "None, an integer or a sequence of integers")


def int_tuple(length: int | None = None, minimum: int | None = None):
    """A sequence of ints (or one int, repeated to ``length``)."""

    def parse(op: str, name: str, value: Any) -> tuple[int, ...]:
        if _is_int(value) and length is not None:
            value = (value,) * length
        if not isinstance(value, (tuple, list)) or not all(_is_int(v) for v in value):
            want = f"{length} integers" if length else "a sequence of integers"
            _fail(op, name, value, want)
        if length is not None and len(value) != length:
            _fail(op, name, value, f"exactly {length} integers")
        if minimum is not None and any(v < minimum for v in value):
            _fail(op, name, value, f"integers >= {minimum}")
        return tuple(int(v) for v in value)

    return parse


def one_of(*choices: str):
    def parse(op: str, name: str, value: Any) -> str:
        if value not in choices:
            _fail(op, name, value, "one of " + ", ".join(repr(c) for c in choices))
        return value

    return parse


def dtype_name(op: str, name: str, value: Any) -> str:
    import numpy as np

    try:
        return str(np.dtype(value))
    except TypeError:
        _fail(op, name, value, "a dtype name such as 'float32'")
