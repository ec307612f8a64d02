"""Helpers for writing gradients with registered ops."""
from __future__ import annotations

from .registry import call
from .shapes import is_static, static


def unbroadcast(grad, shape):
    """Sum ``grad`` over the axes numpy broadcasting added to reach ``shape``."""
    shape = tuple(shape)
    gshape = tuple(grad.shape)
    if len(gshape) == len(shape) and all(_same(a, b) for a, b in zip(gshape, shape)):
        return grad
    lead = len(gshape) - len(shape)
    axes = list(range(lead))
    axes += [lead + i for i, d in enumerate(shape)
             if is_static(d) and static(d) == 1 and not (is_static(gshape[lead + i]) and static(gshape[lead + i]) == 1)]
    out = call("sum", grad, axis=tuple(axes), keepdims=False) if axes else grad
    if tuple(out.shape) != shape:
        out = call("reshape", out, shape=shape)
    return out


def _same(a, b) -> bool:
    return (is_static(a) and is_static(b) and static(a) == static(b)) or a is b


def cast_like(mask, like):
    """A 0/1 mask (bool) as a tensor of ``like``'s dtype."""
    return call("cast", mask, dtype=like.dtype)
