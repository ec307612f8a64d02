"""kiln: a tensor-expression compiler for deep learning, built on TVM.

Operators are declared once (``kiln.te``), scheduled per target
(``kiln.schedules``), compiled and cached (``kiln.runtime``).
"""
from .config import configure_thread_pool as _configure_thread_pool

# TVM's CPU pool defaults to half the hardware threads; size it to the cores
# before the first kernel starts it.
_configure_thread_pool()

from . import errors, te  # noqa: E402
from .errors import KilnError  # noqa: E402
from .runtime import build, cpu, cuda  # noqa: E402
from . import nn  # noqa: E402
from .nn import Tensor, no_grad, optim  # noqa: E402

__version__ = "0.1.0"
__all__ = ["KilnError", "Tensor", "build", "cpu", "cuda", "errors", "nn", "no_grad", "optim", "te", "__version__"]
