"""Parameter initialization (needle's ``init``): uniform/normal, Xavier and
Kaiming (fan-in/fan-out as in needle and PyTorch), constants, one-hot, and
``zeros_like``/``ones_like``; needle's signatures (``device=`` included).

Random values come from the seeded family of ``kiln.nn.rng`` (``manual_seed``
reseeds it together with dropout, transforms and shuffling) or from a
``generator=`` passed per call, so runs are reproducible.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import AttrError
from . import rng
from .data import check_labels
from .rng import manual_seed  # noqa: F401  (the same call as kiln.manual_seed: it reseeds everything)
from .tensor import Tensor

GAINS = {"relu": math.sqrt(2.0), "linear": 1.0, "tanh": 5.0 / 3, "sigmoid": 1.0}


def generator() -> np.random.Generator:
    """The generator initializers draw from by default."""
    return rng.generator()


def _gen(generator_):
    return generator_ if generator_ is not None else rng.generator()


def _shape(fn: str, shape: tuple) -> tuple:
    """``*shape`` as needle passes it, or one tuple as PyTorch allows."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise AttrError(f"got {shape!r}, expected non-negative integer dims", where=f"init.{fn}", arg="shape")
    return tuple(int(d) for d in shape)


def _tensor(values, dtype, requires_grad, device=None):
    return Tensor(np.asarray(values, dtype=dtype), requires_grad=requires_grad, device=device)


def rand(*shape, low=0.0, high=1.0, device=None, dtype="float32", requires_grad=False, generator=None):
    """Uniform values in [low, high)."""
    return _tensor(_gen(generator).uniform(low, high, _shape("rand", shape)), dtype, requires_grad, device)


def randn(*shape, mean=0.0, std=1.0, device=None, dtype="float32", requires_grad=False, generator=None):
    """Normal values N(mean, std^2)."""
    return _tensor(_gen(generator).normal(mean, std, _shape("randn", shape)), dtype, requires_grad, device)


def randb(*shape, p=0.5, device=None, dtype="bool", requires_grad=False, generator=None):
    """Bernoulli(p) values."""
    return _tensor(_gen(generator).random(_shape("randb", shape)) < p, dtype, requires_grad, device)


def constant(*shape, c=1.0, device=None, dtype="float32", requires_grad=False):
    return _tensor(np.full(_shape("constant", shape), c), dtype, requires_grad, device)


def ones(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, device=None, dtype="float32", requires_grad=False):
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros_like(array, *, device=None, dtype=None, requires_grad=False):
    """Zeros of ``array``'s shape and (unless given) dtype."""
    return zeros(*array.shape, device=device, dtype=dtype or array.dtype, requires_grad=requires_grad)


def ones_like(array, *, device=None, dtype=None, requires_grad=False):
    """Ones of ``array``'s shape and (unless given) dtype."""
    return ones(*array.shape, device=device, dtype=dtype or array.dtype, requires_grad=requires_grad)


def one_hot(n: int, labels, device=None, dtype="float32", requires_grad=False):
    """Rows of the n x n identity picked by integer ``labels``."""
    labels = check_labels(labels.numpy() if isinstance(labels, Tensor) else labels, n, "init.one_hot")
    return _tensor(np.eye(n)[labels], dtype, requires_grad, device)


def _gain(nonlinearity: str) -> float:
    if nonlinearity not in GAINS:
        raise AttrError(f"got {nonlinearity!r}, expected one of {sorted(GAINS)}", where="kaiming init",
                        arg="nonlinearity")
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
