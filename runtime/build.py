"""``kiln.build``: one op, compiled for one signature, through the kernel cache."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import warnings

import numpy as np

from ..errors import DTypeError, KilnError
from ..schedules import config_key
from ..te import get_op
from . import cache
from .device import as_target
from .kernel import Kernel
from .lower import compile_lowered, lower


def build(op, shapes: Sequence, dtypes: Sequence[str] | str | None = None, attrs: Mapping | None = None,
          target=None, config: Mapping | None = None) -> Kernel:
    """Compile ``op`` for inputs of ``shapes`` and ``dtypes`` (default float32).

    Parameters
    ----------
    op : str or Op
        A registered op name (``kiln.te.list_ops()``).
    shapes : sequence of shapes
        One shape per input; dims are ints or symbolic (``kiln.te.sym("n")``).
    dtypes : dtype or sequence of dtypes, optional
    attrs : mapping, optional
        The op's attributes (validated; defaults filled in).
    target : kiln.cpu(), kiln.cuda(arch), "cpu" or "cuda[:sm_XX]", optional
    config : mapping, optional
        Knob values for the op's template; missing knobs take the defaults.
        When omitted, the best tuning record of this task is used if there is
        one (``kiln tune``, ``kiln.autotune.apply_records``); ``{}`` forces
        the template defaults.

    Returns
    -------
    Kernel
        Callable on numpy arrays or TVM tensors; ``.script()``, ``.source()``, ``.time()``.
    """
    op = get_op(op)
    target = as_target(target)
    shapes = [tuple(s) if isinstance(s, (tuple, list)) else s for s in shapes]
    if dtypes is None or isinstance(dtypes, str):
        dtypes = [dtypes or "float32"] * len(shapes)
    try:
        dtypes = [str(np.dtype(d)) for d in dtypes]
    except TypeError as exc:
        raise DTypeError(f"got {list(dtypes)}, expected dtype names", op=op.name, arg="dtypes") from exc
    attrs, out_shapes, out_dtypes = op.check(shapes, dtypes, attrs)
    shapes = [tuple(s) for s in shapes]
    if config is None:
        values = tuned_config(op, attrs, shapes, dtypes, out_shapes, out_dtypes, target)
    else:
        values = dict(config)
    key = cache.key_of(op.name, attrs, shapes, dtypes, target.key, config_key(values))

    def relower():
        return lower(op, shapes, dtypes, attrs, out_shapes, out_dtypes, target, values)

    def make(module):
        return Kernel(op, attrs, shapes, dtypes, out_dtypes, target, values, module, relower)

    def compile_new():
        lowered = relower()
        executable = compile_lowered(op, lowered, target)
        kernel = make(executable.mod)
        kernel.__dict__["_lowered"] = lowered  # already at hand: keep it
        return kernel, executable if target.kind == "cpu" else None

    return cache.get(key, make, compile_new)


_config_sources: list[Callable] = []
_checked: dict[tuple, bool] = {}


def add_config_source(source: Callable) -> None:
    """Where ``build`` looks for a tuned config when none is given:
    ``source(op_name, attrs, shapes, dtypes, target_key) -> config or None``
    (kiln wires in the tuning records)."""
    if source not in _config_sources:
        _config_sources.append(source)


def tuned_config(op, attrs, shapes, dtypes, out_shapes, out_dtypes, target) -> dict:
    """The first tuned config a source knows for this signature, if it still
    fits the template (a record from an older template may name knobs that no
    longer exist: it is skipped with a warning)."""
    for source in _config_sources:
        found = source(op.name, attrs, shapes, dtypes, target.key)
        if not found:
            continue
        memo = (cache.key_of(op.name, attrs, shapes, dtypes, target.key, ""), config_key(found))
        if memo not in _checked:
            try:
                lower(op, shapes, dtypes, attrs, out_shapes, out_dtypes, target, found)
                _checked[memo] = True
            except KilnError as exc:
                warnings.warn(f"kiln: ignoring the tuning record for {op.name} {memo[1]}: {exc}", RuntimeWarning,
                              stacklevel=3)
                _checked[memo] = False
        if _checked[memo]:
            return dict(found)
    return {}
