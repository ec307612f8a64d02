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
from .oprefs import op_ref
from .registry import Op, register
from .shapes import (broadcast_index, broadcast_shapes, canonical, dtype_of, index_dim, is_static, normalize_axes, shape_str,
                     size, static)

# the gradients' ops that have no operator (see oprefs)
dilate, undilate = op_ref("dilate"), op_ref("undilate")
pad, pad_grad = op_ref("pad"), op_ref("pad_grad")


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


def _pad_width(op: str, name: str, value):
    pairs = value if isinstance(value, (tuple, list)) else None
    if pairs is None or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise A.AttrError(f"got {value!r}, expected ((before, after), ...) per axis", op=op, arg=name)
    return tuple(A.int_tuple(2, minimum=0)(op, name, p) for p in pairs)


PAD_MODES = ("constant", "reflect", "edge")


def _check_pad_mode(op: str, x, pad_width, mode: str) -> None:
    """reflect mirrors without repeating the edge, so it needs pad < dim; edge needs an element."""
    for k, (d, (lo, hi)) in enumerate(zip(x, pad_width)):
        if mode == "constant" or not (lo or hi) or not is_static(d):
            continue  # a symbolic dim is checked at run time, when the kernel's output shape is inferred
        if mode == "reflect" and max(lo, hi) >= static(d):
            raise ShapeError(f"reflect padding ({lo}, {hi}) of axis {k} needs pads < its size {static(d)}",
                             op=op, arg="pad_width")
        if mode == "edge" and static(d) == 0:
            raise ShapeError(f"edge padding of axis {k} needs an element to repeat; the axis is empty",
                             op=op, arg="pad_width")


def _pad_source(v, lo: int, d, mode: str):
    """The input index an output index ``v`` of a padded axis reads (in bounds except for constant)."""
    j = v - lo
    if mode == "reflect":  # -j left of the axis, 2 (d - 1) - j right of it
        return (d - 1) - tirx.abs((d - 1) - tirx.abs(j))
    if mode == "edge":
        return tirx.min(tirx.max(j, 0), d - 1)
    return j


@register
class Pad(Op):
    """numpy's pad: ``mode="constant"`` writes ``value``, ``"reflect"`` mirrors
    the input without repeating its edge (each pad < the dim, as ONNX and
    PyTorch require), ``"edge"`` repeats the edge element."""

    name = "pad"
    grad_inputs = ()
    grad_output = False
    attrs = {"pad_width": A.Attr(_pad_width, doc="((before, after), ...) for every axis"),
             "value": A.Attr(A.scalar, default=0, doc="the constant written in the padding (mode constant)"),
             "mode": A.Attr(A.one_of(*PAD_MODES), default="constant", doc="constant, reflect or edge")}

    def infer_shape(self, x, pad_width, value, mode):
        if len(pad_width) != len(x):
            raise ShapeError(f"got {len(pad_width)} (before, after) pairs for an input of rank {len(x)}",
                             op=self.name, arg="pad_width")
        if mode != "constant" and value != 0:
            raise A.AttrError(f"got {value!r} with mode {mode!r}; a value is for mode 'constant' only", op=self.name,
                              arg="value")
        _check_pad_mode(self.name, x, pad_width, mode)
        return tuple(d + lo + hi for d, (lo, hi) in zip(x, pad_width))

    def compute(self, x, pad_width, value, mode):
        out = self.infer_shape(tuple(x.shape), pad_width, value, mode)
        fill = tirx.const(value, dtype_of(x))

        def body(*i):
            src = x(*[_pad_source(v, lo, d, mode) if lo or hi else v for v, (lo, hi), d in zip(i, pad_width, x.shape)])
            if mode != "constant":
                return src
            inside = [tirx.all(v >= lo, v < lo + d) for v, (lo, hi), d in zip(i, pad_width, x.shape) if lo or hi]
            return tirx.if_then_else(tirx.all(*inside), src, fill) if inside else src

        return te.compute(out, body, name=self.name, tag="injective")

    def reference(self, x, pad_width, value, mode):
        if mode != "constant":
            return np.pad(x, pad_width, mode=mode)
        return np.pad(x, pad_width, constant_values=np.asarray(value).astype(x.dtype))

    def gradient(self, g, node):
        x, pad_width, mode = node.inputs[0], node.attrs["pad_width"], node.attrs["mode"]
        if mode != "constant":
            return (pad_grad(g, pad_width=pad_width, mode=mode),)
        return (g[tuple(slice(lo, lo + d, 1) for (lo, _), d in zip(pad_width, x.shape))],)


@register
class PadGrad(Op):
    """Gradient of pad w.r.t. its input: each element of the padded ``g`` is
    added back onto the input element it was read from (its mirror for
    reflect, the edge for edge). Linear, so its own gradient is pad (value 0)."""

    name = "pad_grad"
    grad_inputs = ()
    grad_output = False
    dtypes = ("float32", "float64")
    attrs = {"pad_width": A.Attr(_pad_width, doc="pad's ((before, after), ...)"),
             "mode": A.Attr(A.one_of(*PAD_MODES), default="constant", doc="pad's mode")}

    def infer_shape(self, g, pad_width, mode):
        if len(pad_width) != len(g):
            raise ShapeError(f"got {len(pad_width)} (before, after) pairs for a gradient of rank {len(g)}",
                             op=self.name, arg="pad_width")
        out = tuple(d - lo - hi for d, (lo, hi) in zip(g, pad_width))
        if any(is_static(d) and static(d) < 0 for d in out):
            raise ShapeError(f"got a gradient of {shape_str(g)}, smaller than the padding {pad_width}", op=self.name,
                             arg="g")
        _check_pad_mode(self.name, out, pad_width, mode)
        return out

    def compute(self, g, pad_width, mode):
        folded = [k for k, (lo, hi) in enumerate(pad_width) if lo or hi]
        out = g
        for k in folded:  # one axis at a time: each stage sums the few elements that read an input element
            name = self.name if k == folded[-1] else f"{self.name}_axis{k}"
            out = _fold(out, k, pad_width[k], static(g.shape[k]) - pad_width[k][0] - pad_width[k][1], mode, name)
        if not folded:
            out = te.compute(g.shape, lambda *i: g(*i), name=self.name, tag="injective")
        return out

    def reference(self, g, pad_width, mode):
        out = np.zeros(self.infer_shape(g.shape, pad_width, mode), g.dtype)
        # pad the input's flat indices as pad pads values: each g element is added where its index says
        kw = {"constant_values": -1} if mode == "constant" else {}
        read = np.pad(np.arange(out.size).reshape(out.shape), pad_width, mode=mode, **kw)
        np.add.at(out.reshape(-1), read[read >= 0], g[read >= 0])
        return out

    def gradient(self, g, node):
        return (pad(g, pad_width=node.attrs["pad_width"], mode=node.attrs["mode"]),)


def _fold(g, axis: int, pads, n, mode: str, name: str):
    """``g`` with its padded ``axis`` summed back onto the ``n`` input positions.

    Input position i along the axis reads, besides ``g[lo + i]``: for reflect,
    its left mirror ``lo - i`` (1 <= i <= lo) and right mirror ``lo + 2 (n - 1) - i``
    (n - 1 - hi <= i <= n - 2); for edge, the whole left pad (i = 0) and the
    whole right pad (i = n - 1)."""
    (lo, hi), extent = pads, g.shape[axis]
    r = te.reduce_axis((0, 3 if mode == "reflect" else 1 + lo + hi if mode == "edge" else 1), f"r{axis}")
    shape = tuple(n if k == axis else d for k, d in enumerate(g.shape))
    zero = tirx.const(0, dtype_of(g))

    def body(*i):
        v = i[axis]
        if mode == "reflect":
            o = tirx.Select(r == 0, lo + v, tirx.Select(r == 1, lo - v, lo + 2 * (n - 1) - v))
            mirrored = tirx.Or(tirx.all(r == 1, v >= 1, v <= lo), tirx.all(r == 2, v >= n - 1 - hi, v <= n - 2))
            ok = tirx.Or(r == 0, mirrored)
        elif mode == "edge":
            o = tirx.Select(r == 0, lo + v, tirx.Select(r <= lo, r - 1, n + r - 1))
            ok = tirx.Or(r == 0, tirx.Or(tirx.all(r <= lo, v == 0), tirx.all(r > lo, v == n - 1)))
        else:
            o, ok = lo + v + r, r == 0
        safe = tirx.min(tirx.max(o, 0), extent - 1)  # TIR's select may read both sides: stay in bounds
        return te.sum(tirx.if_then_else(ok, g(*[safe if k == axis else w for k, w in enumerate(i)]), zero), axis=r)

    return te.compute(shape, body, name=name, tag="injective")


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
