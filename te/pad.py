"""``pad`` (constant, reflect, edge) and its gradient ``pad_grad``, which
adds each padded element back onto the input element it copies."""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .shapes import dtype_of, is_static, shape_str, static

# the gradients' ops that have no operator (see oprefs)
pad, pad_grad = op_ref("pad"), op_ref("pad_grad")


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
