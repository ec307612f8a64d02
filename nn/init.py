"""Parameter initialization (needle's ``init``): uniform/normal, Xavier and
Kaiming (fan-in/fan-out as in needle and PyTorch), constants, one-hot.

Random values come from one seedable generator (``manual_seed``) or a
``generator=`` passed per call, so runs are reproducible.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import AttrError
from .tensor import Tensor

_rng = np.random.default_rng(0)

GAINS = {"relu": math.sqrt(2.0), "linear": 1.0, "tanh": 5.0 / 3, "sigmoid": 1.0}


def manual_seed(seed: int) -> None:
    """Reseed the generator every initializer uses by default."""
    global _rng
    _rng = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _rng


def _gen(generator_):
    return generator_ if generator_ is not None else _rng


def _tensor(values, dtype, requires_grad):
    return Tensor(np.asarray(values, dtype=dtype), requires_grad=requires_grad)


def rand(*shape, low=0.0, high=1.0, dtype="float32", requires_grad=False, generator=None):
    return _tensor(_gen(generator).uniform(low, high, shape), dtype, requires_grad)


def randn(*shape, mean=0.0, std=1.0, dtype="float32", requires_grad=False, generator=None):
    return _tensor(_gen(generator).normal(mean, std, shape), dtype, requires_grad)


def randb(*shape, p=0.5, dtype="bool", requires_grad=False, generator=None):
    """Bernoulli(p) values."""
    return _tensor(_gen(generator).random(shape) < p, dtype, requires_grad)


def constant(*shape, c=1.0, dtype="float32", requires_grad=False):
    return _tensor(np.full(shape, c), dtype, requires_grad)


def ones(*shape, dtype="float32", requires_grad=False):
    return constant(*shape, c=1.0, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, dtype="float32", requires_grad=False):
    return constant(*shape, c=0.0, dtype=dtype, requires_grad=requires_grad)


def one_hot(n: int, labels, dtype="float32", requires_grad=False):
    """Rows of the n x n identity picked by integer ``labels``."""
    labels = np.asarray(labels.numpy() if isinstance(labels, Tensor) else labels)
    return _tensor(np.eye(n)[labels], dtype, requires_grad)


def _gain(nonlinearity: str) -> float:
    if nonlinearity not in GAINS:
        raise AttrError(f"got {nonlinearity!r}, expected one of {sorted(GAINS)}", op="init", arg="nonlinearity")
    return GAINS[nonlinearity]


def xavier_uniform(fan_in, fan_out, gain=1.0, shape=None, **kwargs):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return rand(*(shape or (fan_in, fan_out)), low=-a, high=a, **kwargs)


def xavier_normal(fan_in, fan_out, gain=1.0, shape=None, **kwargs):
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return randn(*(shape or (fan_in, fan_out)), std=std, **kwargs)


def kaiming_uniform(fan_in, fan_out, shape=None, nonlinearity="relu", **kwargs):
    """U(-b, b) with b = gain * sqrt(3 / fan_in)."""
    bound = _gain(nonlinearity) * math.sqrt(3.0 / fan_in)
    return rand(*(shape or (fan_in, fan_out)), low=-bound, high=bound, **kwargs)


def kaiming_normal(fan_in, fan_out, shape=None, nonlinearity="relu", **kwargs):
    """N(0, std^2) with std = gain / sqrt(fan_in)."""
    std = _gain(nonlinearity) / math.sqrt(fan_in)
    return randn(*(shape or (fan_in, fan_out)), std=std, **kwargs)
