"""Optimizers (needle's conventions). Updates run as compiled kernels on
detached data, so no graph grows across steps, and write the parameters and
the optimizer state in place (``Tensor.apply_``): no new buffer per step for
them.

SGD: u <- momentum * u + (1 - momentum) * (grad + weight_decay * w);
     w <- w - lr * u.
Adam: m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  with bias correction
     w <- w - lr * m_hat / (sqrt(v_hat) + eps), g = grad + weight_decay * w.
"""
from __future__ import annotations

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


def _check(name: str, value: float, low: float, high: float | None = None, owner: str = "optimizer"):
    if not (value >= low and (high is None or value < high)):
        raise AttrError(f"got {value}, expected a value in [{low}, {high if high is not None else 'inf'})",
                        op=owner, arg=name)


class SGD(Optimizer):
    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0):
        super().__init__(params)
        _check("lr", lr, 0.0, owner="SGD")
        _check("momentum", momentum, 0.0, 1.0, owner="SGD")
        _check("weight_decay", weight_decay, 0.0, owner="SGD")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.u: dict[int, Tensor] = {}

    def update(self, i, w, g):
        if self.weight_decay:
            g = g + w * self.weight_decay
        if self.momentum:
            if i in self.u:
                g = self.u[i].apply_("multiply_scalar", scalar=self.momentum).apply_("add", g * (1 - self.momentum))
            else:
                self.u[i] = g = g * (1 - self.momentum)
        w.apply_("subtract", g * self.lr)


class Adam(Optimizer):
    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
        super().__init__(params)
        _check("lr", lr, 0.0, owner="Adam")
        _check("beta1", beta1, 0.0, 1.0, owner="Adam")
        _check("beta2", beta2, 0.0, 1.0, owner="Adam")
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
