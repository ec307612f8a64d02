"""A tuning task: one op at one signature on one target.

``Task.create("matmul", [(1024, 1024), (1024, 1024)])`` checks the signature
with the op's rules (``Op.check`` makes its ``Workload``), so a bad task fails here with a clear error, not in a
worker process. ``task.lower(config)`` is the template applied to a config;
``task.data()`` the seeded inputs and the numpy reference outputs every
config is checked against. ``task.unit`` says how a speed is reported:
GFLOPS for compute-bound ops (matmul, conv2d), GB/s of inputs read plus
outputs written for the others (``task.rate(seconds)``); tuners compare
configs by time either way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np

from ..errors import ShapeError
from . import records
from ..runtime.device import Target, as_target
from ..runtime.lower import Lowered, lower
from ..runtime.measure import check_measurable, nbytes, random_inputs, work
from ..te import get_op
from ..te.workload import Workload
from ..te.shapes import is_static


@dataclass(frozen=True, eq=False)
class Task:
    """A ``Workload`` with concrete dims on a ``Target`` (and the seed of its
    measurement inputs); ``op``, ``attrs``, ``shapes``... are the workload's."""

    workload: Workload
    target: Target
    seed: int = field(default=0)

    @classmethod
    def create(cls, op, shapes: Sequence, dtypes: Sequence[str] | str | None = None,
               attrs: Mapping | None = None, target=None) -> "Task":
        return cls.of(get_op(op).check(shapes, dtypes, attrs), as_target(target))

    @classmethod
    def of(cls, workload: Workload, target: Target) -> "Task":
        """The task of a workload already checked: refused here, not in a
        worker process, if it has a symbolic dim, no elements or no room."""
        for i, s in enumerate(workload.shapes):
            if not all(is_static(d) for d in s):
                raise ShapeError(f"got {s}, expected static dims: tuning measures one concrete shape",
                                 op=workload.op.name, arg=f"input {i}")
        # no empty tensors (nothing to time) and room for the data: the parent's inputs and
        # reference outputs, and a worker's inputs, expected and computed outputs
        check_measurable(workload, input_copies=2, output_copies=3)
        return cls(workload, target)

    op = property(lambda self: self.workload.op)
    attrs = property(lambda self: self.workload.attrs)
    shapes = property(lambda self: self.workload.shapes)
    dtypes = property(lambda self: self.workload.dtypes)
    out_shapes = property(lambda self: self.workload.out_shapes)
    out_dtypes = property(lambda self: self.workload.out_dtypes)

    @cached_property
    def json(self) -> dict:
        return records.task_json(self.workload, self.target.key)

    @property
    def key(self) -> str:
        return records.task_key(self.json)

    @property
    def name(self) -> str:
        sig = ", ".join("x".join(map(str, s)) for s in self.shapes)
        return f"{self.op.name}({sig})"

    @cached_property
    def flops(self) -> float:
        return float(self.op.flops(list(self.shapes), **self.attrs))

    @cached_property
    def _work(self) -> tuple[str, float]:
        return work(self.workload)

    @property
    def unit(self) -> str:
        """``"GFLOPS"`` for compute-bound ops, ``"GB/s"`` for memory-bound ones."""
        return self._work[0]

    @cached_property
    def bytes(self) -> int:
        """Bytes of the inputs read plus the outputs written by one call."""
        return nbytes(self.shapes + self.out_shapes, self.dtypes + self.out_dtypes)

    def rate(self, seconds: float) -> float:
        """``seconds`` per call as a speed in ``self.unit`` (0 for no time)."""
        return self._work[1] / seconds / 1e9 if seconds > 0 else 0.0

    def lower(self, config: Mapping | None = None) -> Lowered:
        """The template applied to ``config`` (raises ScheduleError/BuildError if invalid)."""
        return lower(self.workload, self.target, dict(config or {}))

    def data(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Seeded random inputs and the numpy reference outputs for them."""
        inputs = random_inputs(self.shapes, self.dtypes, seed=self.seed)
        with np.errstate(all="ignore"):  # random inputs may leave the op's domain (an Adam step's v < 0):
            out = self.op.reference(*inputs, **self.attrs)  # the kernel must then give the same NaNs
        outs = out if isinstance(out, (list, tuple)) else [out]
        return inputs, [np.asarray(o, dtype=d) for o, d in zip(outs, self.out_dtypes)]

    def __repr__(self) -> str:
        return f"<kiln task {self.name} on {self.target}>"
