"""The workload: one op at one signature, checked once and passed everywhere.

``Op.check(shapes, dtypes, attrs)`` returns a ``Workload``: the op, its parsed
attributes, the input shapes and dtypes, and the output shapes and dtypes its
rules infer. Building, lowering, the ``Kernel``, the kernel cache, tuning
tasks, records, the exporter's tracer — all take this one value, so none of
them re-parses attributes, re-decides a default dtype or re-infers a shape.

``workload.json`` is its canonical description (plain JSON: symbolic dims by
name), the part of every kernel-cache key and tuning-record task that names
what is computed; ``workload.key`` is a short hash of it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from .shapes import shape_str


def plain(value) -> Any:
    """``value`` as plain JSON: tuples become lists, a symbolic dim its name."""
    if isinstance(value, (tuple, list)):
        return [plain(x) for x in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return f"sym:{value}"


def digest(description: Mapping) -> str:
    """SHA-256 of a JSON description, keys sorted."""
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, eq=False)
class Workload:
    """A validated call of an op (made by ``Op.check``, not by hand).

    Attributes
    ----------
    op : Op
    attrs : dict
        Parsed and defaulted (treat as read-only: the key is computed once).
    shapes, dtypes : tuple
        One entry per input; dims are ints or symbolic expressions.
    out_shapes, out_dtypes : tuple
        One entry per kernel output (a data-dependent op's storage and length).
    """

    op: Any
    attrs: Mapping
    shapes: tuple
    dtypes: tuple
    out_shapes: tuple
    out_dtypes: tuple

    @property
    def json(self) -> dict:
        """``{"op", "attrs", "shapes", "dtypes"}`` as plain JSON (a fresh dict each time)."""
        return {"op": self.op.name, "attrs": {k: plain(v) for k, v in sorted(self.attrs.items())},
                "shapes": [[plain(d) for d in s] for s in self.shapes], "dtypes": list(self.dtypes)}

    @cached_property
    def key(self) -> str:
        """A short stable hash of ``json``."""
        return digest(self.json)[:20]

    @property
    def name(self) -> str:
        """``matmul(64x32:float32, 32x16:float32)``."""
        sig = ", ".join(f"{shape_str(s)}:{d}" for s, d in zip(self.shapes, self.dtypes))
        return f"{self.op.name}({sig})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Workload) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"<kiln workload {self.name}>"
