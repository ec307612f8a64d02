"""The search space of a template: the knobs it declares for one workload.

Knobs are declared while the template runs, and some depend on others (the
matmul's ``tile_k`` options depend on ``unroll_k``), so a config is sampled
the way the template reads it: lower with the defaults to learn the space,
draw a value for every knob, lower again, and re-draw (or drop back to the
default) any knob the template rejects for the values drawn before it.
"""
from __future__ import annotations

import numpy as np

from ..errors import ScheduleError
from ..runtime.device import as_target
from ..runtime.lower import lower
from ..schedules.config import Knob
from ..te import get_op


def draw(knob, rng: np.random.Generator):
    """A random value of one knob."""
    if isinstance(knob, Knob):
        return knob.options[int(rng.integers(len(knob.options)))]
    room, factors = knob.extent or 4096, []
    for _ in range(knob.parts - 1):
        options = [c for c in knob.candidates() if c <= max(room, 1)]
        f = int(options[int(rng.integers(len(options)))])
        factors.append(f)
        room //= f
    return tuple(factors)


def sample_config(op, shapes, dtypes=None, attrs=None, target=None, rng=None, tries: int = 20) -> dict:
    """A random valid config (knob name -> value) of ``op``'s template."""
    op, target = get_op(op), as_target(target)
    rng = rng or np.random.default_rng()
    dtypes = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes or "float32"] * len(shapes)
    parsed, out_shapes, out_dtypes = op.check(shapes, dtypes, attrs)

    def space_of(values):
        return lower(op, shapes, dtypes, parsed, out_shapes, out_dtypes, target, values).cfg.space

    values = {name: draw(knob, rng) for name, knob in space_of({}).items()}
    for _ in range(tries):
        try:
            space = space_of(values)
        except ScheduleError as exc:
            if exc.arg not in values:
                raise
            knob = space_of({k: v for k, v in values.items() if k != exc.arg}).get(exc.arg)
            values[exc.arg] = draw(knob, rng) if knob is not None and rng.random() < 0.5 else None
            values = {k: v for k, v in values.items() if v is not None}
            continue
        unseen = {name: draw(knob, rng) for name, knob in space.items() if name not in values}
        if not unseen:
            return values
        values.update(unseen)
    raise ScheduleError(f"no valid config found in {tries} draws", op=op.name, arg="config")
