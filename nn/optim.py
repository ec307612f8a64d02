"""Optimizers (needle's conventions). Updates run as compiled kernels on
detached data, so no graph grows across steps, and write the parameters and
the optimizer state in place (``Tensor.apply_``): no new buffer per step for
them. In every update ``g = grad + weight_decay * w`` first.

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

import numpy as np

from ..errors import AttrError
from .tensor import Tensor, no_grad


class Optimizer:
    def __init__(self, params):
        self.params = [p for p in params]
        if not self.params:
            raise AttrError("got no parameters, expected at least one", op=type(self).__name__, arg="params")

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    reset_grad = zero_grad

    def step(self) -> None:
        with no_grad():
            for i, p in enumerate(self.params):
                if p.grad is not None:
                    self.update(i, p.detach(), p.grad.detach())

    def update(self, i: int, w: Tensor, g: Tensor) -> None:
        """Update ``w`` (sharing the parameter's memory) in place from its gradient ``g``."""
        raise NotImplementedError


def _check(name: str, value: float, low: float, high: float | None = None, owner: str = "optimizer",
           low_ok: bool = True, high_ok: bool = False):
    """Refuse ``value`` unless it is a finite number in ``[low, high)`` (the ends
    included or not as ``low_ok``/``high_ok`` say; no upper end without ``high``)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and \
        (value > low or (low_ok and value == low)) and (high is None or value < high or (high_ok and value == high))
    if not ok:
        interval = f"{'[' if low_ok else '('}{low}, {high if high is not None else 'inf'}{']' if high_ok else ')'}"
        raise AttrError(f"got {value!r}, expected a finite number in {interval}", op=owner, arg=name)


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
                            "dampening=0 with nesterov=True", op="SGD", arg="nesterov")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.dampening, self.nesterov = dampening, bool(nesterov)
        self.u: dict[int, Tensor] = {}

    def update(self, i, w, g):
        if self.weight_decay:
            g = g + w * self.weight_decay
        if self.momentum:
            m = self.momentum
            keep = 1 - (m if self.dampening is None else self.dampening)  # the share of g that enters u
            if i in self.u:
                u = self.u[i].apply_("multiply_scalar", scalar=m)
                u = u.apply_("add", g * keep) if keep != 1 else u.apply_("add", g)
            elif self.dampening is None:
                u = self.u[i] = g * keep
            else:  # PyTorch starts the buffer at g itself (a copy: u is updated in place, g is p.grad)
                u = self.u[i] = Tensor(g.numpy())
            g = g + u * m if self.nesterov else u
        w.apply_("subtract", g * self.lr)


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

    def step(self) -> None:
        self.t += 1
        super().step()

    def update(self, i, w, g):
        if self.weight_decay:
            g = g + w * self.weight_decay
        b1, b2 = self.beta1, self.beta2
        if i in self.m:
            m = self.m[i].apply_("multiply_scalar", scalar=b1).apply_("add", g * (1 - b1))
            v = self.v[i].apply_("multiply_scalar", scalar=b2).apply_("add", g * g * (1 - b2))
        else:
            m, v = self.m[i], self.v[i] = g * (1 - b1), g * g * (1 - b2)
        # The bias corrections change every step: pass them as 0-d tensors, so
        # the same compiled kernels serve every step (a Python scalar would be
        # baked into a new kernel each time).
        c1 = Tensor(np.asarray(1 - b1 ** self.t, w.dtype))
        c2 = Tensor(np.asarray(1 - b2 ** self.t, w.dtype))
        w.apply_("subtract", (m / c1) * self.lr / ((v / c2).sqrt() + self.eps))
