"""kiln: a tensor-expression compiler for deep learning, built on TVM.

Operators are declared once (``kiln.te``), scheduled per target
(``kiln.schedules``), compiled and cached (``kiln.runtime``); ``kiln.nn``
trains models on the compiled kernels and ``kiln.export`` writes a trained
model as one compiled module.

``import kiln`` imports neither TVM nor PyTorch: every name below but the
errors and the version loads on first use, so ``kiln --help`` answers at once
and running an exported model (``kiln.runtime.Predictor``) never imports the
training layer or the tuner.
"""
import importlib

from . import hooks as _hooks
from . import tvm_import as _tvm_import
from .config import configure_thread_pool as _configure_thread_pool
from .version import __version__

# TVM's CPU pool defaults to half the hardware threads; size it to the cores
# before the first kernel starts it (an invalid setting is reported at first
# use, not here: see kiln.config).
_configure_thread_pool()
_tvm_import.install()

from . import errors  # noqa: E402
from .errors import KilnError  # noqa: E402


def _tuned_config(workload, target_key):
    """The tuning records, read when a kernel is first built (not at import)."""
    from .autotune import records

    return records.best_config(records.task_json(workload, target_key))


def _tuned_batches(ops, target_key):
    """The batch sizes the tuning records tuned ``ops`` at (read on first use)."""
    from .autotune import records

    return records.batch_sizes(ops, target_key)


_hooks.config_sources.append(_tuned_config)
_hooks.batch_sources.append(_tuned_batches)

_LAZY = {"te": ("kiln.te", None), "build": ("kiln.runtime.build", "build"), "cpu": ("kiln.runtime.device", "cpu"),
         "cuda": ("kiln.runtime.device", "cuda"),
         "nn": ("kiln.nn", None), "optim": ("kiln.nn.optim", None), "data": ("kiln.nn.data", None),
         "Tensor": ("kiln.nn.tensor", "Tensor"), "no_grad": ("kiln.nn.tensor", "no_grad"),
         "manual_seed": ("kiln.nn.rng", "manual_seed"),
         "export": ("kiln.graph.export", "export"), "compile": ("kiln.nn.compiled", "compile"),
         "quantize": ("kiln.nn.quantized", "quantize"),
         "autotune": ("kiln.autotune", None), "frontend": ("kiln.frontend", None)}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    value = getattr(value, attr) if attr else value
    globals()[name] = value  # looked up once
    return value


def __dir__():
    return sorted([*globals(), *_LAZY])


__all__ = ["KilnError", "errors", "__version__", *_LAZY]
