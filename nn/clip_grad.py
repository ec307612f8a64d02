"""Gradient-norm clipping (PyTorch's ``torch.nn.utils.clip_grad_norm_``), on
compiled kernels: nothing is waited for, so it runs between ``backward`` and
``optimizer.step()`` without stalling the engine."""
from __future__ import annotations

import math
import numbers
from typing import Iterable

import numpy as np

from ..errors import AttrError
from ..te import call
from .tensor import Tensor, no_grad


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0) -> Tensor:
    """Scale the gradients of ``parameters`` so that their joint norm is at
    most ``max_norm``.

    The norm is taken over all gradients as if they were one vector; when it
    exceeds ``max_norm`` every gradient is multiplied by
    ``max_norm / (norm + 1e-6)``, as PyTorch does. Parameters without a
    gradient are skipped; each ``.grad`` is replaced by its scaled value.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensors
    max_norm : float
        A number >= 0.
    norm_type : float
        The p of the p-norm (> 0), or ``inf`` for the largest absolute value.

    Returns
    -------
    Tensor
        The total norm before clipping, 0-d (NaN or inf if a gradient holds one).
    """
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not isinstance(max_norm, numbers.Real) or isinstance(max_norm, bool) or not max_norm >= 0:
        raise AttrError(f"got {max_norm!r}, expected a number >= 0", where="clip_grad_norm_", arg="max_norm")
    p = float("inf") if norm_type in ("inf", float("inf")) else norm_type
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not p > 0:
        raise AttrError(f"got {norm_type!r}, expected a number > 0 or inf", where="clip_grad_norm_", arg="norm_type")
    grads = [t.grad for t in params if t.grad is not None]
    if not grads:
        return Tensor(np.zeros((), "float32"))
    dtype = str(np.result_type(*[g.dtype for g in grads]))
    with no_grad():
        if math.isinf(p):
            total = call("stack", *[_as(g.abs().max(), dtype) for g in grads]).max()
        else:
            parts = [_as((g * g if p == 2 else call("power_scalar", g.abs(), scalar=float(p))).sum(), dtype)
                     for g in grads]
            total = call("power_scalar", call("stack", *parts).sum(), scalar=1.0 / p)
        # max_norm / max(total + eps, max_norm): 1 when the norm is within bounds
        coef = call("rdivide_scalar", call("maximum_scalar", total + 1e-6, scalar=float(max_norm)),
                    scalar=float(max_norm))
        for t in params:
            if t.grad is not None:
                # a new tensor, not an in-place update: one gradient may be shared by
                # several parameters (add's gradient passes the same tensor to both inputs)
                t.grad = t.grad * _as(coef, t.grad.dtype)
    return total


def _as(t: Tensor, dtype: str) -> Tensor:
    return t if t.dtype == dtype else t.astype(dtype)
