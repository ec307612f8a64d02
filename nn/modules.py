"""Modules (needle's ``nn``): parameters are found by walking attributes, and
every forward is made of registered ops, so it runs as compiled kernels."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import AttrError, ShapeError
from ..runtime import pool as _pool
from ..runtime.pool import KernelPool
from ..te import attrs as A
from ..te import call
from . import functional as F
from . import init
from .tensor import Tensor, no_grad


class Parameter(Tensor):
    """A tensor that a Module owns and an optimizer updates."""

    def __init__(self, data, *, dtype=None, requires_grad: bool = True):
        super().__init__(data, dtype=dtype, requires_grad=requires_grad)


def _walk(value, prefix: str = "", path: tuple = ()):
    """``(dotted name, item)`` for every Module (``value`` itself included) and
    every Tensor reachable from ``value`` through Module attributes, lists,
    tuples and dicts, in definition order: the one walk that parameters, state
    and ``train``/``eval`` share, so they always see the same tree. A module
    met again inside itself (a cycle) is not entered twice."""
    if isinstance(value, Tensor):
        yield prefix, value
    elif isinstance(value, Module) and id(value) not in path:
        yield prefix, value
        for key, v in vars(value).items():
            yield from _walk(v, prefix if key in value._unprefixed else _join(prefix, key), path + (id(value),))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, _join(prefix, str(i)), path)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, _join(prefix, str(k)), path)


def _named_tensors(value):
    """``(dotted name, tensor)`` for every Tensor reachable from ``value``."""
    return ((name, t) for name, t in _walk(value) if isinstance(t, Tensor))


def _modules(value):
    """Every Module reachable from ``value``, ``value`` first."""
    return (m for _, m in _walk(value) if isinstance(m, Module))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


class LoadResult(NamedTuple):
    """What ``load_state_dict(..., strict=False)`` left alone."""

    missing_keys: list
    unexpected_keys: list


class Module:
    """A layer or a model: its Parameters and submodules are its attributes.

    State is named by attribute path, as in PyTorch: ``Linear`` holds
    ``weight`` and ``bias``; ``Sequential(a, b)`` names its layers ``0``,
    ``1`` (``"0.weight"``); a list, tuple or dict attribute ``layers`` of
    modules gives ``"layers.1.bias"``. Parameters are trained and saved; any
    other Tensor attribute (BatchNorm's ``running_mean``/``running_var``) is a
    *buffer*: saved and loaded with the state, never trained.

    Calling a model runs its ops on its ``kernel_pool`` with each layer as its
    own site (so each layer has its own shape budget for concrete kernels);
    the pool is not state and is neither saved nor copied with the weights.
    """

    training = True
    #: attributes whose items are named without the attribute's own name
    #: (``Sequential`` stores its layers in ``modules`` but names them "0", "1")
    _unprefixed: tuple = ()

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        """``(name, Parameter)`` pairs, each parameter once (under its first name)."""
        seen, out = set(), []
        for name, t in _named_tensors(self):
            if isinstance(t, Parameter) and id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> list[tuple[str, Tensor]]:
        """``(name, Tensor)`` of the saved state that is not trained (e.g. running statistics)."""
        seen, out = set(), []
        for name, t in _named_tensors(self):
            if not isinstance(t, Parameter) and id(t) not in seen:
                seen.add(id(t))
                out.append((name, t))
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter and buffer by name, as numpy copies (later training
        does not change them); ``np.savez(path, **model.state_dict())`` saves it."""
        return {name: t.numpy() for name, t in _named_tensors(self)}

    def load_state_dict(self, state, strict: bool = True) -> LoadResult:
        """Copy ``state`` (name -> array or Tensor, e.g. from ``state_dict``) into
        this module's parameters and buffers, each cast to its dtype.

        Nothing is changed unless every entry fits: with ``strict`` (the
        default) the names must match exactly; shapes must always match.

        Returns
        -------
        LoadResult
            ``(missing_keys, unexpected_keys)``: empty lists when strict.

        Raises
        ------
        AttrError
            Missing or unexpected names (strict), or a value that is not numeric;
            the message lists every problem.
        ShapeError
            Only shapes disagree; the message lists each name with both shapes.
        """
        owner = f"{type(self).__name__}.load_state_dict"
        if not hasattr(state, "keys"):
            raise AttrError(f"got {type(state).__name__}, expected a mapping of names to arrays", where=owner,
                            arg="state")
        own = list(_named_tensors(self))
        names = {name for name, _ in own}
        missing = [name for name, _ in own if name not in state]
        unexpected = [str(k) for k in state.keys() if k not in names]
        values, shapes, kinds = {}, [], []
        for name, t in own:
            if name not in state:
                continue
            v = state[name]
            arr = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
            if arr.dtype.kind not in "biuf":
                kinds.append(f"{name} ({arr.dtype})")
            elif arr.shape != t.shape:
                shapes.append(f"{name} (got {arr.shape}, expected {t.shape})")
            values[name] = arr
        problems = []
        if strict and missing:
            problems.append(f"missing keys: {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"unexpected keys: {', '.join(unexpected)}")
        if kinds:
            problems.append(f"not numeric: {', '.join(kinds)}")
        if shapes:
            problems.append(f"mis-shaped: {', '.join(shapes)}")
        if problems:
            error = ShapeError if len(problems) == 1 and shapes else AttrError
            raise error("; ".join(problems) + (" (strict=False ignores missing and unexpected names)"
                                               if strict and (missing or unexpected) else ""),
                        where=owner, arg="state")
        for name, t in own:
            if name in values:
                t.data = values[name].astype(t.dtype, copy=False)
        return LoadResult(missing, unexpected)

    def train(self, mode: bool = True) -> "Module":
        for m in _modules(self):
            m.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    @property
    def kernel_pool(self) -> KernelPool:
        """The pool that picks this model's kernels (``runtime/pool.py``),
        made on first use: owned by the model, not part of its state."""
        pool = self.__dict__.get("_kernel_pool")
        if pool is None:
            pool = self.__dict__.setdefault("_kernel_pool", KernelPool())
        return pool

    def __call__(self, *args):
        """``forward`` with this layer as the kernel site: on the active pool
        (the enclosing model's, or a run's), else on this model's own."""
        outer = _pool.active_site()
        pool = self.kernel_pool if outer is None else outer.pool
        with _pool.activate(pool.site(self)):
            return self.forward(*args)

    def forward(self, *args):
        raise NotImplementedError


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """y = x @ W + b with W (in, out): one fused ``dense`` kernel for 2-D inputs."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype="float32"):
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features, dtype=dtype))
        self.bias = Parameter(init.kaiming_uniform(out_features, 1, shape=(out_features,), dtype=dtype)) if bias \
            else None

    def forward(self, x):
        if self.bias is not None and x.ndim == 2:
            return call("dense", x, self.weight, self.bias)
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class ReLU(Module):
    def forward(self, x):
        return call("relu", x)


class Tanh(Module):
    def forward(self, x):
        return call("tanh", x)


class Sigmoid(Module):
    def forward(self, x):
        return call("sigmoid", x)


class Flatten(Module):
    """(N, ...) -> (N, prod(...)); N may be symbolic (exported models)."""

    def forward(self, x):
        return x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


class Sequential(Module):
    _unprefixed = ("modules",)  # layers are named "0", "1", ... as in PyTorch

    def __init__(self, *modules: Module):
        self.modules = list(modules)

    def forward(self, x):
        for m in self.modules:
            x = m(x)
        return x


class Residual(Module):
    def __init__(self, fn: Module):
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class Dropout(Module):
    """Zero each element with probability p while training (scaled by 1/(1-p))."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class SoftmaxLoss(Module):
    """Mean softmax cross-entropy of logits (N, C) against integer labels (N,)
    in ``[0, C)``; other labels raise ``DataError`` (see ``functional.cross_entropy``)."""

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels)


class LayerNorm1d(Module):
    def __init__(self, dim: int, eps: float = 1e-5, dtype="float32"):
        self.dim, self.eps = dim, eps
        self.weight = Parameter(init.ones(dim, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, dtype=dtype))

    def forward(self, x):
        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=-1, keepdims=True)
        return centered / (var + self.eps).sqrt() * self.weight + self.bias


class _BatchNorm(Module):
    """Normalize each channel (axis 1) over every other axis: batch
    statistics in training (``batch_norm_train``), running statistics in eval."""

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1, dtype="float32"):
        self.dim, self.eps, self.momentum = dim, eps, momentum
        self.weight = Parameter(init.ones(dim, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, dtype=dtype))
        self.running_mean = init.zeros(dim, dtype=dtype)
        self.running_var = init.ones(dim, dtype=dtype)

    def _view(self, t, ndim):
        shape = tuple(self.dim if i == 1 else 1 for i in range(ndim))
        return t.reshape(shape)

    def forward(self, x):
        if x.shape[1] != self.dim:
            raise ShapeError(f"got {x.shape}, expected {self.dim} features on axis 1", where=type(self).__name__,
                             arg="x")
        if self.training:  # one kernel forward, one backward (te/norm.py)
            y, mean, var = call("batch_norm_train", x, self.weight, self.bias, eps=self.eps)
            with no_grad():
                m = self.momentum
                # in place (the same Tensors): a compiled step sees the state it updates
                self.running_mean.data = self.running_mean * (1 - m) + mean.detach() * m
                self.running_var.data = self.running_var * (1 - m) + var.detach() * m
            return y
        centered = x - self._view(self.running_mean, x.ndim)
        scale = self._view(self.weight / (self.running_var + self.eps).sqrt(), x.ndim)
        return centered * scale + self._view(self.bias, x.ndim)


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L)."""


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W)."""


class Conv(Module):
    """NCHW convolution with bias and needle's 'same' padding (kernel // 2 on
    each side); ``kernel_size`` and ``stride`` are ints or (h, w) pairs, as in
    PyTorch's ``Conv2d``. Weight (out, in, kh, kw), bias (out,)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, bias=True, dtype="float32"):
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = A.int_tuple(2, minimum=1)("Conv", "kernel_size", kernel_size)
        self.stride = A.int_tuple(2, minimum=1)("Conv", "stride", stride)
        kh, kw = self.kernel_size
        self.padding = (kh // 2, kw // 2)
        fan_in, fan_out = in_channels * kh * kw, out_channels * kh * kw
        self.weight = Parameter(init.kaiming_uniform(fan_in, fan_out, dtype=dtype, shape=(
            out_channels, in_channels, kh, kw)))
        bound = 1.0 / fan_in ** 0.5
        self.bias = Parameter(init.rand(out_channels, low=-bound, high=bound, dtype=dtype)) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.padding)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        self.attrs = dict(kernel=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return call("max_pool2d", x, **self.attrs)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0):
        self.attrs = dict(kernel=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return call("avg_pool2d", x, **self.attrs)


class GlobalAvgPool2d(Module):
    """(N, C, H, W) -> (N, C): the mean over each channel's plane."""

    def forward(self, x):
        return call("global_avg_pool2d", x).reshape(x.shape[0], x.shape[1])
