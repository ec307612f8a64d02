"""Helpers for writing gradients as arithmetic on values (``ValueOps``)."""
from __future__ import annotations

from .shapes import is_static, static


def wants_grad(value) -> bool:
    """Whether a gradient must be computed for the op input ``value``: False
    for an autograd input that needs none (a batch of data, a constant), so a
    gradient skips its work (PyTorch's ``ctx.needs_input_grad``); True for a
    value of a backend that does not say."""
    return getattr(value, "requires_grad", True)


def as_dtype(grad, dtype: str):
    """``grad`` in its input's ``dtype``: an op that promoted a float32 input
    to float64 gives it a float32 gradient, as PyTorch does."""
    return grad if grad.dtype == dtype else grad.astype(dtype)


def unbroadcast(grad, shape, dtype: str | None = None):
    """Sum ``grad`` over the axes numpy broadcasting added to reach ``shape``
    (and cast it to ``dtype`` when given: the input's, for a float input)."""
    if dtype is not None and dtype.startswith("float"):
        grad = as_dtype(grad, dtype)
    shape = tuple(shape)
    gshape = tuple(grad.shape)
    if len(gshape) == len(shape) and all(_same(a, b) for a, b in zip(gshape, shape)):
        return grad
    lead = len(gshape) - len(shape)
    axes = list(range(lead))
    axes += [lead + i for i, d in enumerate(shape)
             if is_static(d) and static(d) == 1 and not (is_static(gshape[lead + i]) and static(gshape[lead + i]) == 1)]
    out = grad.sum(tuple(axes)) if axes else grad
    if tuple(out.shape) != shape:
        out = out.reshape(shape)
    return out


def _same(a, b) -> bool:
    return (is_static(a) and is_static(b) and static(a) == static(b)) or a is b


def cast_like(mask, like):
    """A 0/1 mask (bool) as a tensor of ``like``'s dtype."""
    return mask.astype(like.dtype)
