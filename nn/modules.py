"""Modules (needle's ``nn``), with PyTorch's argument names: the ``Module``
base class (``module.py``), the layers below, and the image layers
(``conv_modules.py``), all importable from here."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import AttrError, ShapeError
from ..te import call
from ..te.value import pick_alias
from . import functional as F
from . import init
from .conv_modules import AvgPool2d, Conv, GlobalAvgPool2d, MaxPool2d
from .module import Module, Parameter
from .state import TRANSPOSED, LoadResult, TorchOnly
from .tensor import no_grad

__all__ = ["AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv", "Dropout", "Flatten", "GlobalAvgPool2d", "Identity",
           "LayerNorm1d", "Linear", "LoadResult", "MaxPool2d", "Module", "Parameter", "ReLU", "Residual",
           "Sequential", "Sigmoid", "SoftmaxLoss", "Tanh"]


class Identity(Module):
    """Returns its input."""

    def forward(self, x):
        """``x`` itself."""
        return x


class Linear(Module):
    """``y = x @ W + b``, PyTorch's ``Linear`` with its weight transposed.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default True
    dtype : str, default 'float32'

    Attributes
    ----------
    weight : Parameter
        (in_features, out_features): the transpose of PyTorch's, so that a
        2-D input runs as one fused ``dense`` kernel; ``state_dict`` and
        ``load_state_dict`` with ``layout="torch"`` transpose it.
    bias : Parameter or None
        (out_features,).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype="float32"):
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.kaiming_uniform(in_features, out_features, dtype=dtype))
        self.bias = Parameter(init.kaiming_uniform(out_features, 1, shape=(out_features,), dtype=dtype)) if bias \
            else None

    def torch_layout(self) -> dict:
        """PyTorch stores ``weight`` (out_features, in_features)."""
        return {"weight": TRANSPOSED}

    def forward(self, x):
        """(..., in_features) -> (..., out_features): one packed product of the rows."""
        if x.ndim < 2:
            y = x @ self.weight
            return y + self.bias if self.bias is not None else y
        count = 1
        for d in x.shape[:-1]:  # the rows, symbolic in a trace with a dynamic batch or length
            count = count * d
        rows = x if x.ndim == 2 else x.reshape((count, self.in_features))
        y = call("dense", rows, self.weight, self.bias) if self.bias is not None else rows @ self.weight
        return y if x.ndim == 2 else y.reshape((*x.shape[:-1], self.out_features))


class ReLU(Module):
    """``max(x, 0)``, elementwise."""

    def forward(self, x):
        """The rectified ``x``."""
        return call("relu", x)


class Tanh(Module):
    """The hyperbolic tangent, elementwise."""

    def forward(self, x):
        """``tanh(x)``."""
        return call("tanh", x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``, elementwise."""

    def forward(self, x):
        """``sigmoid(x)``."""
        return call("sigmoid", x)


class Flatten(Module):
    """(N, ...) -> (N, prod(...)); N may be symbolic (exported models)."""

    def forward(self, x):
        """``x`` with every axis after the first merged."""
        return x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


class Sequential(Module):
    """Its layers applied in order; they are named "0", "1", ... as in PyTorch.

    Parameters
    ----------
    *modules : Module
    """

    _unprefixed = ("modules",)

    def __init__(self, *modules: Module):
        self.modules = list(modules)

    def forward(self, x):
        """The last layer's output."""
        for m in self.modules:
            x = m(x)
        return x


class Residual(Module):
    """``fn(x) + x``.

    Parameters
    ----------
    fn : Module
        Its output has ``x``'s shape.
    """

    def __init__(self, fn: Module):
        self.fn = fn

    def forward(self, x):
        """``fn(x) + x``."""
        return self.fn(x) + x


class Dropout(Module):
    """Zero each element with probability ``p`` while training (the rest
    scaled by ``1 / (1 - p)``); the identity in eval mode."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def forward(self, x):
        """``x`` with dropout applied while training."""
        return F.dropout(x, self.p, self.training)


class SoftmaxLoss(Module):
    """Mean softmax cross-entropy of logits (N, C) against integer labels (N,)
    in ``[0, C)``; other labels raise ``DataError`` (see ``functional.cross_entropy``).
    Logits (..., C) with labels (...) (a language model's (N, L, C) and
    (N, L)) are the mean over every position."""

    def forward(self, logits, labels):
        """The loss, a 0-d tensor."""
        if len(logits.shape) > 2:
            rows = int(np.prod(logits.shape[:-1]))
            if tuple(labels.shape) != tuple(logits.shape[:-1]):
                raise ShapeError(f"got labels of shape {tuple(labels.shape)}, expected {tuple(logits.shape[:-1])} "
                                 f"for logits {tuple(logits.shape)}", where="SoftmaxLoss", arg="labels")
            logits, labels = logits.reshape((rows, logits.shape[-1])), labels.reshape((rows,))
        return F.cross_entropy(logits, labels)


class LayerNorm1d(Module):
    """Normalize over the last axis, then scale by ``weight`` and shift by ``bias`` (each (dim,)).

    Parameters
    ----------
    dim : int
        The size of the last axis.
    eps : float, default 1e-5
    dtype : str, default 'float32'
    """

    def __init__(self, dim: int, eps: float = 1e-5, dtype="float32"):
        self.dim, self.eps = dim, eps
        self.weight = Parameter(init.ones(dim, dtype=dtype))
        self.bias = Parameter(init.zeros(dim, dtype=dtype))

    def forward(self, x):
        """(..., dim) -> (..., dim)."""
        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=-1, keepdims=True)
        return centered / (var + self.eps).sqrt() * self.weight + self.bias


class _BatchNorm(Module):
    """Normalize each channel (axis 1) over every other axis: batch
    statistics in training (``batch_norm_train``), running statistics in eval
    (the arguments are documented on ``BatchNorm2d``)."""

    def __init__(self, num_features: int | None = None, eps: float = 1e-5, momentum: float = 0.1, dtype="float32",
                 *, dim: int | None = None):
        where = type(self).__name__
        num_features = pick_alias(where, num_features=num_features, dim=dim)
        if num_features is None:
            raise AttrError("missing: the number of channels", where=where, arg="num_features")
        if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not 0 <= momentum <= 1:
            raise AttrError(f"got {momentum!r}, expected a number in [0, 1] (PyTorch's None, a cumulative "
                            "average, is not supported)", where=where, arg="momentum")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(init.ones(num_features, dtype=dtype))
        self.bias = Parameter(init.zeros(num_features, dtype=dtype))
        self.running_mean = init.zeros(num_features, dtype=dtype)
        self.running_var = init.ones(num_features, dtype=dtype)
        self.num_batches_tracked = 0

    @property
    def dim(self) -> int:
        """``num_features``, under kiln's earlier name."""
        return self.num_features

    def torch_layout(self) -> dict:
        """PyTorch also saves ``num_batches_tracked``."""
        return {"num_batches_tracked": TorchOnly("int64")}

    def _view(self, t, ndim):
        shape = tuple(self.num_features if i == 1 else 1 for i in range(ndim))
        return t.reshape(shape)

    def forward(self, x):
        """(N, C, ...) -> (N, C, ...)."""
        if x.shape[1] != self.num_features:
            raise ShapeError(f"got {x.shape}, expected {self.num_features} features on axis 1",
                             where=type(self).__name__, arg="x")
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
    """Batch norm over (N, C) or (N, C, L): ``BatchNorm2d``'s arguments and state."""


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W), with PyTorch's arguments: each channel
    normalized with its batch statistics in training, its running statistics
    in eval, then scaled by ``weight`` and shifted by ``bias``.

    Parameters
    ----------
    num_features : int
        C, the size of axis 1 (``dim=`` is accepted too, kiln's earlier name).
    eps : float, default 1e-5
    momentum : float, default 0.1
        The weight of each batch in the running statistics, in [0, 1].
        PyTorch's ``None`` (a cumulative average) is not supported.
    dtype : str, default 'float32'

    Attributes
    ----------
    weight, bias : Parameter
        (C,).
    running_mean, running_var : Tensor
        (C,) buffers. Training updates the running variance with the batch's
        biased variance (needle's), PyTorch with the unbiased one, so the
        two frameworks' running variances differ slightly after training.
    num_batches_tracked : int
        PyTorch's counter, kept for its state dicts (``layout="torch"``);
        kiln's training does not advance it, as it uses ``momentum`` always.
    """
