"""Optimizers (needle's conventions). Each parameter's update is one fused
kernel (``te/optim.py``: ``sgd_step``, ``sgd_momentum_step``, ``adam_step``)
on detached data, so no graph grows across steps: one pass over the weight,
its gradient and its state, written in place (``Tensor.apply_``), with the
hyperparameters passed as a small tensor (a learning-rate schedule or Adam's
bias correction compiles nothing new). In every update
``g = grad + weight_decay * w`` first.

SGD, by default needle's dampened momentum (u starts at 0):
     u <- momentum * u + (1 - momentum) * g;  w <- w - lr * u.
SGD with ``dampening=d`` given: PyTorch's ``torch.optim.SGD`` exactly —
     u <- g on the first step, then u <- momentum * u + (1 - d) * g;
     w <- w - lr * u, or with ``nesterov`` w <- w - lr * (g + momentum * u).
Adam: m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  with bias correction
     w <- w - lr * m_hat / (sqrt(v_hat) + eps).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ..errors import AttrError
from .tensor import Tensor, no_grad


class Optimizer:
    def __init__(self, params):
        self._hypers: dict = {}
        self.params = [p for p in params]
        if not self.params:
            raise AttrError("got no parameters, expected at least one", where=type(self).__name__, arg="params")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    reset_grad = zero_grad

    def step(self) -> None:
        """Update every parameter that has a gradient, one fused kernel each."""
        with no_grad():
            for i, update in self.plan_step():
                self.apply(i, update, self.params[i].grad.detach())

    def plan_step(self, indices=None) -> list:
        """Begin a step and plan the update of each parameter in ``indices``
        (default: those with a gradient): ``[(index, Update)]``. A compiled
        step (``kiln.compile``) plans each call this way and feeds the
        hyperparameters to its module, so the bookkeeping is the eager one."""
        self._hypers = {}
        self.begin_step()
        if indices is None:
            indices = [i for i, p in enumerate(self.params) if p.grad is not None]
        return [(i, self.plan(i, self.params[i])) for i in indices]

    def apply(self, i: int, update: "Update", g: Tensor) -> None:
        """Run ``update`` on parameter ``i`` (in place) with its gradient ``g``."""
        w = self.params[i]
        h = self.hyper(update.values, w.dtype)
        w.detach().apply_(update.op, g, *update.states, h, **update.attrs)

    def hyper(self, values: tuple, dtype: str) -> Tensor:
        """The hyperparameter vector of an update kernel, made once per step
        for all parameters that share it."""
        key = (values, dtype)
        if key not in self._hypers:
            self._hypers[key] = Tensor(np.asarray(values, dtype))
        return self._hypers[key]

    def begin_step(self) -> None:
        """The step's own bookkeeping (Adam counts its steps)."""

    def plan(self, i: int, w: Tensor) -> "Update":
        """The update of parameter ``i`` this step (making its state on first use)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Update:
    """One parameter's update: the fused op, its state tensors (written in
    place with the weight), its hyperparameter values and attributes."""

    op: str
    states: tuple
    values: tuple
    attrs: dict = field(default_factory=dict)


def _check(name: str, value: float, low: float, high: float | None = None, owner: str = "optimizer",
           low_ok: bool = True, high_ok: bool = False):
    """Refuse ``value`` unless it is a finite number in ``[low, high)`` (the ends
    included or not as ``low_ok``/``high_ok`` say; no upper end without ``high``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and \
        (value > low or (low_ok and value == low)) and (high is None or value < high or (high_ok and value == high))
    if not ok:
        interval = f"{'[' if low_ok else '('}{low}, {high if high is not None else 'inf'}{']' if high_ok else ')'}"
        raise AttrError(f"got {value!r}, expected a finite number in {interval}", where=owner, arg=name)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, weight decay and Nesterov momentum.

    Parameters
    ----------
    params : iterable of Parameter
    lr : float
        Learning rate, >= 0.
    momentum : float
        In [0, 1).
    weight_decay : float
        L2 penalty added to the gradient, >= 0.
    dampening : float or None
        ``None`` (the default): needle's update, where the momentum buffer
        starts at zero and ``u <- momentum * u + (1 - momentum) * g`` (so
        ``lr`` sees a gradient average, not a sum). A number ``d`` in [0, 1]:
        PyTorch's update, ``u <- g`` on the first step and
        ``u <- momentum * u + (1 - d) * g`` after; ``dampening=0`` matches
        ``torch.optim.SGD``'s defaults step for step.
    nesterov : bool
        Step along ``g + momentum * u`` (PyTorch's Nesterov form); needs
        ``momentum > 0`` and ``dampening=0``, as in PyTorch.
    """

    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0, dampening=None, nesterov=False):
        super().__init__(params)
        _check("lr", lr, 0.0, owner="SGD")
        _check("momentum", momentum, 0.0, 1.0, owner="SGD")
        _check("weight_decay", weight_decay, 0.0, owner="SGD")
        if dampening is not None:
            _check("dampening", dampening, 0.0, 1.0, owner="SGD", high_ok=True)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise AttrError(f"got momentum={momentum}, dampening={dampening}, expected momentum > 0 and "
                            "dampening=0 with nesterov=True", where="SGD", arg="nesterov")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.dampening, self.nesterov = dampening, bool(nesterov)
        self.u: dict[int, Tensor] = {}

    def plan(self, i, w):
        if not self.momentum:
            return Update("sgd_step", (), (self.lr, self.weight_decay))
        m, first = self.momentum, i not in self.u
        if first:  # the buffer starts at 0; PyTorch's first step sets it to g (decay 0, keep 1)
            self.u[i] = Tensor(np.zeros(w.shape, w.dtype))
        if self.dampening is None:
            decay, keep = m, 1 - m
        else:
            decay, keep = (0.0, 1.0) if first else (m, 1 - self.dampening)
        return Update("sgd_momentum_step", (self.u[i],), (self.lr, self.weight_decay, decay, keep, m),
                      {"nesterov": self.nesterov})


class Adam(Optimizer):
    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        _check("lr", lr, 0.0, owner="Adam")
        _check("beta1", beta1, 0.0, 1.0, owner="Adam")
        _check("beta2", beta2, 0.0, 1.0, owner="Adam")
        _check("eps", eps, 0.0, owner="Adam", low_ok=False)
        _check("weight_decay", weight_decay, 0.0, owner="Adam")
        self.lr, self.beta1, self.beta2, self.eps, self.weight_decay = lr, beta1, beta2, eps, weight_decay
        self.t = 0
        self.m: dict[int, Tensor] = {}
        self.v: dict[int, Tensor] = {}

    def begin_step(self) -> None:
        self.t += 1

    def plan(self, i, w):
        if i not in self.m:
            self.m[i], self.v[i] = Tensor(np.zeros(w.shape, w.dtype)), Tensor(np.zeros(w.shape, w.dtype))
        b1, b2 = self.beta1, self.beta2
        return Update("adam_step", (self.m[i], self.v[i]),
                      (self.lr, self.weight_decay, b1, b2, self.eps, 1 - b1 ** self.t, 1 - b2 ** self.t))
