"""Shape ops: reshape, broadcast_to (and, below, the other layout ops; ``pad``
is in ``pad.py``).

They move data without arithmetic, so they are all ``injective`` and get the
generic fused/vectorized/parallel schedule (or are inlined into a consumer).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .grad import unbroadcast
from .oprefs import op_ref
from .registry import Op, register
from .shapes import (DTYPES, broadcast_index, broadcast_shapes, canonical, dtype_of, index_dim, is_static, normalize_axes, shape_str,
                     size, static)

# the gradients' ops that have no operator (see oprefs)
dilate, undilate = op_ref("dilate"), op_ref("undilate")


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
        idx.append(tirx.floormod(flat, index_dim(d)))
        flat = tirx.floordiv(flat, index_dim(d))
    return list(reversed(idx))


def _ravel(indices, shape):
    flat = 0
    for i, d in zip(indices, shape):
        flat = flat * d + i
    return flat


@register
class Reshape(Op):
    name = "reshape"
    view = True
    dtypes = (*DTYPES, "uint8", "int8")  # a quantized model's codes reshape too (a view: nothing computed)
    grad_inputs = ()
    grad_output = False
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
        return (g.reshape(node.inputs[0].shape),)


@register
class BroadcastTo(Op):
    name = "broadcast_to"
    grad_inputs = ()
    grad_output = False
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


def _perm(op: str, name: str, value):
    return None if value is None else A.int_tuple()(op, name, value)


@register
class Transpose(Op):
    """numpy's transpose: ``axes`` None reverses the axes, else a permutation."""

    name = "transpose"
    permutes_axes = True
    grad_inputs = ()
    grad_output = False
    attrs = {"axes": A.Attr(_perm, default=None, doc="a permutation of the axes (None: reverse)")}

    def perm(self, ndim, axes):
        if axes is None:
            return tuple(reversed(range(ndim)))
        norm = [a % ndim if -ndim <= a < ndim else None for a in axes]
        if len(axes) != ndim or None in norm or sorted(norm) != list(range(ndim)):
            raise ShapeError(f"got {axes}, expected a permutation of {ndim} axes", op=self.name, arg="axes")
        return tuple(norm)

    def infer_shape(self, x, axes):
        return tuple(x[a] for a in self.perm(len(x), axes))

    def compute(self, x, axes):
        perm = self.perm(len(x.shape), axes)
        inv = [perm.index(k) for k in range(len(perm))]
        return te.compute(self.infer_shape(tuple(x.shape), axes), lambda *i: x(*[i[inv[k]] for k in range(len(inv))]),
                          name=self.name, tag="injective")

    def reference(self, x, axes):
        return np.transpose(x, axes)

    def gradient(self, g, node):
        perm = self.perm(len(node.inputs[0].shape), node.attrs["axes"])
        return (g.permute(tuple(perm.index(k) for k in range(len(perm)))),)


@register
class Flip(Op):
    name = "flip"
    grad_inputs = ()
    grad_output = False
    attrs = {"axis": A.Attr(A.axes, default=None, doc="axes to reverse (None: all)")}

    def infer_shape(self, x, axis):
        normalize_axes(self.name, axis, len(x))
        return x

    def compute(self, x, axis):
        axes = normalize_axes(self.name, axis, len(x.shape))
        return te.compute(x.shape, lambda *i: x(*[x.shape[k] - 1 - v if k in axes else v for k, v in enumerate(i)]),
                          name=self.name, tag="injective")

    def reference(self, x, axis):
        return np.flip(x, axis)

    def gradient(self, g, node):
        return (g.flip(node.attrs["axis"]),)


class _Dilation(Op):
    attrs = {"axes": A.Attr(A.axes, doc="axes to dilate"),
             "dilation": A.Attr(A.non_negative_int, doc="zeros inserted between elements")}

    def axes_of(self, ndim, axes):
        return normalize_axes(self.name, axes, ndim, arg="axes")


@register
class Dilate(_Dilation):
    """Insert ``dilation`` zeros after every element along ``axes`` (as needle):
    a dim of size n becomes n * (dilation + 1)."""

    name = "dilate"
    grad_inputs = ()
    grad_output = False

    def infer_shape(self, x, axes, dilation):
        ax = self.axes_of(len(x), axes)
        return tuple(d * (dilation + 1) if k in ax else d for k, d in enumerate(x))

    def compute(self, x, axes, dilation):
        ax, step = self.axes_of(len(x.shape), axes), dilation + 1
        out = self.infer_shape(tuple(x.shape), axes, dilation)

        def body(*i):
            on_grid = [tirx.floormod(v, step) == 0 for k, v in enumerate(i) if k in ax]
            src = x(*[tirx.floordiv(v, step) if k in ax else v for k, v in enumerate(i)])
            return tirx.if_then_else(tirx.all(*on_grid), src, tirx.const(0, dtype_of(x))) if on_grid else src

        return te.compute(out, body, name=self.name, tag="injective")

    def reference(self, x, axes, dilation):
        out = np.zeros(self.infer_shape(x.shape, axes, dilation), x.dtype)
        out[tuple(slice(None, None, dilation + 1) if k in self.axes_of(x.ndim, axes) else slice(None)
                  for k in range(x.ndim))] = x
        return out

    def gradient(self, g, node):
        return (undilate(g, **node.attrs),)


@register
class Undilate(_Dilation):
    """Keep every ``(dilation + 1)``-th element along ``axes``: the inverse of dilate."""

    name = "undilate"
    grad_inputs = ()
    grad_output = False

    def infer_shape(self, x, axes, dilation):
        ax = self.axes_of(len(x), axes)
        return tuple((d + dilation) // (dilation + 1) if k in ax else d for k, d in enumerate(x))

    def compute(self, x, axes, dilation):
        ax, step = self.axes_of(len(x.shape), axes), dilation + 1
        return te.compute(self.infer_shape(tuple(x.shape), axes, dilation),
                          lambda *i: x(*[v * step if k in ax else v for k, v in enumerate(i)]),
                          name=self.name, tag="injective")

    def reference(self, x, axes, dilation):
        return x[tuple(slice(None, None, dilation + 1) if k in self.axes_of(x.ndim, axes) else slice(None)
                       for k in range(x.ndim))].copy()

    def gradient(self, g, node):
        x = node.inputs[0]
        grown = dilate(g, **node.attrs)
        if tuple(grown.shape) == tuple(x.shape):
            return (grown,)
        return (grown[tuple(slice(0, d, 1) for d in x.shape)],)
