"""The backward ops of the windowed pools (``te/pool.py``): each routes an
output's gradient back over its window — to the first maximum of a max
pool's window, in equal shares over an average pool's divisor."""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import nanmath
from .oprefs import op_ref
from .pool import AVG_ATTRS, MAX_ATTRS, _Pool, _axes, _count, _count_np, _geometry, _scatter_np, _to_nchw, _windows_np, max_pool_expr, pool_windows
from .registry import register

avg_pool2d = op_ref("avg_pool2d")  # the average pool gradient's own gradient
from .shapes import dtype_of, promote, shape_str, static

class _PoolGrad(_Pool):
    """Route each output's gradient back over its window."""

    differentiable = False

    def check_grad(self, x, g, attrs):
        """``x``, once ``g`` is the shape of the pooling's output."""
        want = _Pool.infer_shape(self, x, **attrs)
        if tuple(map(static, g)) != tuple(map(static, want)):
            raise ShapeError(f"got out_grad {shape_str(g)}, expected {shape_str(want)}", op=self.name, arg="g")
        return x

    def cover(self, x_shape, attrs):
        """For input index i: windows (oh, ow) over reduce axes that may contain it."""
        axes, geo = _geometry(self.name, x_shape, attrs)
        r = [te.reduce_axis((0, -(-g.span // g.s)), f"w{j}") for j, g in enumerate(geo)]

        def windows(i):
            """(output index, i's tap (ky, kx) in it, condition that the window exists and holds i)."""
            conds, out, taps = [], list(i), []
            for ax, rr, g in zip(axes, r, geo):
                start = tirx.floordiv(i[ax] + g.lo, g.s) - rr
                offset = i[ax] + g.lo - start * g.s
                conds += [start >= 0, start < g.out, offset < g.span]
                if g.d > 1:
                    conds.append(tirx.floormod(offset, g.d) == 0)
                out[ax] = start
                taps.append(tirx.floordiv(offset, g.d) if g.d > 1 else offset)
            return out, taps, tirx.all(*conds)

        return r, windows


@register
class MaxPool2dGrad(_PoolGrad):
    """Gradient of max_pool2d w.r.t. its input: (x, out_grad) -> like x."""

    name = "max_pool2d_grad"
    arity = 2
    attrs = MAX_ATTRS

    def infer_shape(self, x, g, **attrs):
        return self.check_grad(x, g, attrs)

    def infer_dtype(self, x, g, **attrs):
        return promote(self.name, x, g)

    def compute(self, x, g, **attrs):
        first = _first_max(x, self.name, attrs)
        r, windows = self.cover(tuple(x.shape), attrs)
        (ha, wa), kw = _axes(attrs["layout"]), attrs["kernel"][1]
        dt = promote(self.name, dtype_of(x), dtype_of(g))

        def body(*i):
            o, (ky, kx), ok = windows(i)
            # Clamped: TIR's `and` may evaluate both sides, so reads stay in bounds.
            safe = [tirx.min(tirx.max(v, 0), g.shape[k] - 1) if k in (ha, wa) else v for k, v in enumerate(o)]
            hit = tirx.all(ok, first(*safe) == ky * kw + kx)  # i's tap in window o, numbered as _first_max does
            return te.sum(tirx.if_then_else(hit, g(*safe).astype(dt), tirx.const(0, dt)), axis=r)

        return te.compute(tuple(x.shape), body, name=self.name, tag=self.family)

    def reference(self, x, g, **attrs):
        dt = np.result_type(x, g)
        if x.size == 0:
            return np.zeros(x.shape, dt)
        win = _windows_np(x, attrs, -np.inf)  # (N, C, OH, OW, KH, KW)
        inside = _windows_np(np.ones(x.shape, bool), attrs, False)
        hit = inside & ((win == win.max(axis=(4, 5), keepdims=True)) | np.isnan(win))
        flat = hit.reshape(hit.shape[:4] + (-1,))
        first = (np.arange(flat.shape[-1]) == flat.argmax(axis=-1)[..., None]) & flat.any(axis=-1, keepdims=True)
        parts = np.where(first.reshape(hit.shape), _to_nchw(g, attrs["layout"]).astype(dt)[..., None, None], dt.type(0))
        return _scatter_np(parts, x.shape, attrs)


def _first_max(x, op: str, attrs):
    """Per window: the row-major position ``ky * KW + kx`` of its first maximum."""
    mx = max_pool_expr(x, "max_pool2d_grad_max", op, attrs)
    out, raxes, src = pool_windows(op, x, attrs)
    (ry, rx), kh, kw = raxes, attrs["kernel"][0], attrs["kernel"][1]

    def body(*i):
        idx, inside = src(i)
        # A NaN is the max of its window (as in PyTorch): the first NaN takes the gradient.
        hit = tirx.if_then_else(inside, tirx.Or(x(*idx) == mx(*i), nanmath.isnan(x(*idx))), tirx.const(False, "bool"))
        return te.min(tirx.if_then_else(hit, ry * kw + rx, kh * kw), axis=raxes)

    return te.compute(out, body, name="max_pool2d_grad_first", tag="pool")


@register
class AvgPool2dGrad(_PoolGrad):
    """Gradient of avg_pool2d w.r.t. its input: out_grad -> the input ``shape``.
    It is linear, the adjoint of avg_pool2d, so its own gradient is avg_pool2d."""

    name = "avg_pool2d_grad"
    grad_inputs = ()
    grad_output = False
    differentiable = True
    attrs = {**AVG_ATTRS, "shape": A.Attr(A.int_tuple(4, minimum=1), doc="the pooled input's shape")}

    def gradient(self, g, node):
        return (avg_pool2d(g, **{k: v for k, v in node.attrs.items() if k != "shape"}),)

    def infer_shape(self, g, shape, **attrs):
        return self.check_grad(shape, g, attrs)

    def compute(self, g, shape, **attrs):
        r, windows = self.cover(shape, attrs)
        dt = dtype_of(g)

        def body(*i):
            o, _, ok = windows(i)
            safe = [tirx.max(v, 0) for v in o]
            share = g(*safe) / _count(safe, self.name, shape, attrs, dt)
            return te.sum(tirx.if_then_else(ok, share, tirx.const(0, dt)), axis=r)

        return te.compute(shape, body, name=self.name, tag=self.family)

    def reference(self, g, shape, **attrs):
        share = _to_nchw(g, attrs["layout"]) / _count_np(shape, g.dtype, attrs)
        kernel = attrs["kernel"]
        return _scatter_np(np.broadcast_to(share[..., None, None], share.shape + kernel), shape, attrs)
