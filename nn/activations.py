"""Activation functions (``torch.nn.functional``'s names and arguments), each
one registered op: ``kiln.nn.functional`` re-exports them."""
from __future__ import annotations

from ..te import call


def gelu(x, approximate: str = "none"):
    """x * Phi(x); ``approximate="tanh"`` for the tanh form (GPT-2's)."""
    return call("gelu", x, approximate=approximate)


def erf(x):
    """The error function, elementwise."""
    return call("erf", x)


def silu(x):
    """x * sigmoid(x) (swish)."""
    return call("silu", x)


def hardswish(x):
    """x * relu6(x + 3) / 6 (MobileNetV3's)."""
    return call("hardswish", x)


def hardsigmoid(x):
    """relu6(x + 3) / 6, PyTorch's form."""
    return call("hardsigmoid", x, alpha=1 / 6, beta=0.5)


def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    """``x`` clamped to [min_val, max_val]."""
    return call("clip", x, min=float(min_val), max=float(max_val))


def relu6(x):
    """min(max(x, 0), 6) (MobileNetV2's)."""
    return call("clip", x, min=0.0, max=6.0)


def clamp(x, min=None, max=None):  # noqa: A002 - PyTorch's argument names
    """``x`` clamped to [min, max] (None: unbounded on that side)."""
    return call("clip", x, **{k: v for k, v in (("min", min), ("max", max)) if v is not None})


def leaky_relu(x, negative_slope: float = 0.01):
    """x where x > 0, else negative_slope * x."""
    return call("leaky_relu", x, alpha=float(negative_slope))


def elu(x, alpha: float = 1.0):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return call("elu", x, alpha=float(alpha))


def softplus(x):
    """log(1 + exp(x)), computed without overflow."""
    return call("softplus", x)
