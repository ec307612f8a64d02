"""``kiln.build``: one op, compiled for one signature, through the kernel cache.

``build(op, shapes, dtypes, attrs)`` checks the call (``Op.check`` makes the
``Workload``), then ``build_workload`` finds its config (given, tuned, or the
template defaults), its cache key, and returns the cached ``Kernel`` or
lowers and compiles a new one."""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Callable, Mapping, Sequence

from ..errors import BuildError, KilnError, ShapeError
from ..schedules import config_key
from ..te import get_op
from ..te.shapes import shape_str
from ..te.workload import Workload
from .. import hooks
from . import cache
from .device import as_target
from .kernel import Kernel
from .lower import compile_lowered, lower, past_int32


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
    return build_workload(get_op(op).check(shapes, dtypes, attrs), as_target(target), config)


def build_workload(workload: Workload, target, config: Mapping | None = None) -> Kernel:
    """``build`` for a workload already checked (``Op.check``) on a ``Target``."""
    values = tuned_config(workload, target) if config is None else dict(config)
    key = cache.key_of(workload, target.build_key, config_key(values))

    def relower():
        return lower(workload, target, values)

    def make(module):
        return Kernel(workload, target, values, module, relower)

    def compile_new():
        try:
            lowered = relower()
            executable = compile_lowered(workload, lowered, target)
        except BuildError as exc:
            if not past_int32(workload):
                raise
            raise ShapeError(f"got {', '.join(shape_str(s) for s in workload.shapes)}: a tensor of more than "
                             "2**31 - 1 elements, which this op cannot be built for with 64-bit indices; split the "
                             "work into tensors below that size", op=workload.op.name, arg="shapes") from exc
        kernel = make(executable.mod)
        kernel.__dict__["_lowered"] = lowered  # already at hand: keep it
        return kernel, executable if target.kind == "cpu" else None

    return cache.get(key, make, compile_new)


_checked: dict[tuple, bool] = {}
_scope = threading.local()  # .untuned: tuned configs are ignored in this thread


def add_config_source(source: Callable) -> None:
    """Where ``build`` looks for a tuned config when none is given:
    ``source(workload, target_key) -> config or None`` (kiln wires in the
    tuning records)."""
    if source not in hooks.config_sources:
        hooks.config_sources.append(source)


def tuned_batch_sizes(ops, target) -> set[int]:
    """The batch sizes (leading dims of the first input) at which a config
    source holds tuned kernels of the ops named ``ops`` on ``target``."""
    found: set[int] = set()
    for source in hooks.batch_sources:
        found |= set(source(set(ops), target.key))
    return found


def tuned_config(workload: Workload, target) -> dict:
    """The first tuned config a source knows for this workload, if it still
    fits the template (a record from an older template may name knobs that no
    longer exist: it is skipped with a warning); ``{}`` inside ``untuned()``."""
    if getattr(_scope, "untuned", False):
        return {}
    for source in hooks.config_sources:
        found = source(workload, target.key)
        if not found:
            continue
        memo = (workload.key, target.key, config_key(found))
        if memo not in _checked:
            try:
                lower(workload, target, found)
                _checked[memo] = True
            except KilnError as exc:
                warnings.warn(f"kiln: ignoring the tuning record for {workload.op.name} {memo[2]}: {exc}",
                              RuntimeWarning, stacklevel=3)
                _checked[memo] = False
        if _checked[memo]:
            return dict(found)
    return {}


@contextlib.contextmanager
def untuned():
    """Within it, this thread builds, compiles and exports with the
    templates' defaults, as if there were no tuning records (how a model's
    time before tuning is measured)."""
    before = getattr(_scope, "untuned", False)
    _scope.untuned = True
    try:
        yield
    finally:
        _scope.untuned = before
