"""kiln's exceptions.

Every public entry point validates its input and raises one of these, naming the
op (or the object, function or file that is not an op: ``where=``), the
argument, what was given and what was expected. Nothing from TVM's C++
side is allowed to reach a user as a raw traceback: the runtime wraps it in
``BuildError`` or ``KernelRuntimeError``.
"""
from __future__ import annotations


class KilnError(Exception):
    """Base class of every error kiln raises on purpose."""

    def __init__(self, message: str, *, op: str | None = None, arg: str | None = None, where: str | None = None):
        """``op`` names a registered operator only (``exc.op`` means the
        operator); ``where`` names anything else the error is about, as it is
        to read in front of the message: ``"Predictor"``, ``"dataset 'mnist'"``."""
        self.op = op
        self.arg = arg
        self.where = where
        self.message = message  # without the prefix naming where, the op and the argument
        parts = [] if where is None else [where]
        if op is not None:
            parts.append(f"op '{op}'")
        if arg is not None:
            parts.append(f"argument '{arg}'")
        prefix = ", ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ShapeError(KilnError, ValueError):
    """Input shapes that the op cannot accept (rank, broadcasting, sizes)."""


class DTypeError(KilnError, TypeError):
    """An input dtype the op does not support, or inputs whose dtypes disagree."""


class AttrError(KilnError, ValueError):
    """A missing, unknown or invalid op attribute."""


class OpNotFoundError(KilnError, KeyError):
    """No op is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


class TargetError(KilnError, ValueError):
    """An unknown or unusable compilation target."""


class ScheduleError(KilnError):
    """A schedule template or config that cannot be applied to the op."""


class BuildError(KilnError):
    """TVM failed to compile a scheduled op."""


class ConfigError(KilnError, ValueError):
    """An environment variable kiln reads holds a value it cannot use (see ``kiln.config``)."""

    def __init__(self, variable: str, value: str, expected: str):
        self.variable, self.value, self.expected = variable, value, expected
        super().__init__(f"environment variable {variable}={value!r}: expected {expected}")
        self.arg = variable

    def __reduce__(self):  # pickled across worker processes: rebuild from the three parts
        return type(self), (self.variable, self.value, self.expected)


class CacheError(KilnError):
    """The kernel cache directory is unusable."""


class KernelRuntimeError(KilnError, RuntimeError):
    """A compiled kernel rejected its arguments or failed while running."""


class ExportError(KilnError):
    """A model that cannot be exported, or an exported file that cannot be loaded."""


class DataError(KilnError):
    """A dataset file that is missing, truncated or not in the expected format."""


class CheckpointError(KilnError):
    """A checkpoint (``.npz`` + ``.npz.json``) that is missing, corrupt, not
    kiln's format, or does not fit the model it is loaded into."""


class OutputError(KilnError):
    """An output path that cannot be written (a directory, a read-only or
    missing folder), found before the work that would produce it."""


class FrontendError(KilnError, ValueError):
    """A model the frontends cannot import: a file that is not a model, an op,
    opset or dtype kiln does not support, or inputs that do not fit it."""


class GradError(KilnError, RuntimeError):
    """An autograd request that cannot be met, such as ``backward()`` on a
    tensor that no recorded op connects to a leaf requiring a gradient."""


def tvm_message(exc: BaseException, limit: int = 500) -> str:
    """The one useful line of an error raised from TVM's C++ side.

    TVM's messages carry a C++ and Python traceback first and the reason last;
    a kiln error quotes only that reason (at most ``limit`` characters), or
    the exception's type when it has no text.
    """
    lines = str(exc).strip().splitlines()
    useful = [t for t in lines if t.strip() and not t.startswith(("  ", "File", "Traceback"))]
    return (useful[-1] if useful else type(exc).__name__)[:limit]
