"""kiln: a tensor-expression compiler for deep learning, built on TVM.

Operators are declared once (``kiln.te``), scheduled per target
(``kiln.schedules``), compiled and cached (``kiln.runtime``); ``kiln.nn``
trains models on the compiled kernels and ``kiln.export`` writes a trained
model as one compiled module.
"""
import importlib

from .config import configure_thread_pool as _configure_thread_pool
from .version import __version__

# TVM's CPU pool defaults to half the hardware threads; size it to the cores
# before the first kernel starts it (an invalid setting is reported at first
# use, not here: see kiln.config).
_configure_thread_pool()

from . import errors, te  # noqa: E402
from .errors import KilnError  # noqa: E402
from .runtime import build, cpu, cuda  # noqa: E402


def _tuned_config(workload, target_key):
    """The tuning records, read when a kernel is first built (not at import)."""
    from .autotune import records

    return records.best_config(records.task_json(workload, target_key))


from .runtime.build import add_config_source  # noqa: E402

add_config_source(_tuned_config)

# The training layer and the tuner load on first use, so that running an
# exported model (kiln.runtime.Predictor) never imports them.
_LAZY = {"nn": ("kiln.nn", None), "optim": ("kiln.nn.optim", None), "data": ("kiln.nn.data", None),
         "Tensor": ("kiln.nn.tensor", "Tensor"), "no_grad": ("kiln.nn.tensor", "no_grad"),
         "manual_seed": ("kiln.nn.rng", "manual_seed"),
         "export": ("kiln.graph.export", "export"), "compile": ("kiln.nn.compiled", "compile"), "autotune": ("kiln.autotune", None)}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return getattr(value, attr) if attr else value


__all__ = ["KilnError", "build", "cpu", "cuda", "errors", "te", "__version__", *_LAZY]
