"""Shape ops: reshape, broadcast_to (and, below, the other layout ops).

They move data without arithmetic, so they are all ``injective`` and get the
generic fused/vectorized/parallel schedule (or are inlined into a consumer).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .grad import unbroadcast
from .registry import Op, call, register
from .shapes import broadcast_index, broadcast_shapes, canonical, is_static, shape_str, size, static


def _int_shape(op: str, name: str, value):
    """A target shape: ints (one may be -1) or symbolic dims."""
    if not isinstance(value, (tuple, list)):
        value = (value,)
    out = []
    for d in value:
        if isinstance(d, bool) or not (isinstance(d, (int, np.integer)) or isinstance(d, tirx.Expr)):
            raise A.AttrError(f"got {value!r}, expected a tuple of ints (one may be -1)", op=op, arg=name)
        out.append(int(d) if isinstance(d, (int, np.integer)) else d)
    return tuple(out)


def _unravel(flat, shape):
    """Row-major indices of flat offset ``flat`` in ``shape``."""
    idx = []
    for d in reversed(shape):
        idx.append(tirx.floormod(flat, d))
        flat = tirx.floordiv(flat, d)
    return list(reversed(idx))


def _ravel(indices, shape):
    flat = 0
    for i, d in zip(indices, shape):
        flat = flat * d + i
    return flat


@register
class Reshape(Op):
    name = "reshape"
    attrs = {"shape": A.Attr(_int_shape, doc="the new shape; one dim may be -1")}

    def infer_shape(self, x, shape):
        shape = list(shape)
        if sum(1 for d in shape if is_static(d) and d == -1) > 1:
            raise ShapeError(f"got {tuple(shape)}, expected at most one -1", op=self.name, arg="shape")
        if any(is_static(d) and static(d) < -1 for d in shape):
            raise ShapeError(f"got {tuple(shape)}, expected dims >= -1", op=self.name, arg="shape")
        known = size([d for d in shape if not (is_static(d) and d == -1)])
        total = size(x)
        if -1 in shape:
            if not isinstance(total, int) or not isinstance(known, int):
                raise ShapeError("-1 needs static sizes", op=self.name, arg="shape")
            if known == 0 or total % known:
                raise ShapeError(f"cannot reshape {shape_str(x)} into {tuple(shape)}", op=self.name, arg="shape")
            shape[shape.index(-1)] = total // known
        elif isinstance(total, int) and isinstance(known, int) and total != known:
            raise ShapeError(f"cannot reshape {shape_str(x)} ({total} elements) into {tuple(shape)} "
                             f"({known} elements)", op=self.name, arg="shape")
        return canonical(shape, self.name, "shape")

    def compute(self, x, shape):
        out = self.infer_shape(tuple(x.shape), shape)
        return te.compute(out, lambda *i: x(*_unravel(_ravel(i, out), x.shape)), name=self.name, tag="injective")

    def reference(self, x, shape):
        return np.reshape(x, shape)

    def gradient(self, g, node):
        return (call("reshape", g, shape=tuple(node.inputs[0].shape)),)


@register
class BroadcastTo(Op):
    name = "broadcast_to"
    attrs = {"shape": A.Attr(_int_shape, doc="the target shape")}

    def infer_shape(self, x, shape):
        shape = canonical(shape, self.name, "shape")
        if len(shape) < len(x) or broadcast_shapes(self.name, x, shape) != shape:
            raise ShapeError(f"cannot broadcast {shape_str(x)} to {shape_str(shape)}", op=self.name, arg="shape")
        return shape

    def compute(self, x, shape):
        out = self.infer_shape(tuple(x.shape), shape)
        return te.compute(out, lambda *i: x(*broadcast_index(i, x.shape, len(out))), name=self.name,
                          tag="injective")

    def reference(self, x, shape):
        return np.broadcast_to(x, shape).copy()

    def gradient(self, g, node):
        return (unbroadcast(g, node.inputs[0].shape),)
