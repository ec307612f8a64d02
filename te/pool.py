"""2-D pooling: max_pool2d, avg_pool2d (padding excluded from the average, as
PyTorch's ``count_include_pad=False``), global_avg_pool2d, and the backward ops
of the windowed pools.

``max_pool2d`` pads with -inf, which never wins: padding is at most half the
window, so every window holds an input element. A window holding NaN gives
NaN. Its gradient goes, per window, to the first element (row-major in the
window) equal to the window's max, as PyTorch does on ties, or to its first NaN.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import nanmath
from .conv import window_out
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, shape_str, size, static

# the gradients' ops that have no operator (see oprefs)
max_pool2d_grad, avg_pool2d_grad = op_ref("max_pool2d_grad"), op_ref("avg_pool2d_grad")
avg_pool2d = op_ref("avg_pool2d")

POOL_ATTRS = {
    "kernel": A.Attr(A.int_tuple(2, minimum=1), doc="(h, w) window"),
    "stride": A.Attr(lambda op, name, v: None if v is None else A.int_tuple(2, minimum=1)(op, name, v),
                     default=None, doc="(h, w) stride (None: the kernel)"),
    "padding": A.Attr(A.int_tuple(2, minimum=0), default=(0, 0), doc="(h, w) padding on each side"),
    "layout": A.Attr(A.one_of("NCHW", "NHWC"), default="NCHW", doc="data layout"),
}


def _axes(layout):
    return (1, 2) if layout == "NHWC" else (2, 3)  # NCHW, and NCHWc (N, C / c, H, W, c)


def _geometry(op, x, kernel, stride, padding, layout):
    """(h axis, w axis, ((size, k, s, p, out) for h and w))."""
    if len(x) != 4:
        raise ShapeError(f"got {shape_str(x)}, expected a 4-D {layout} input", op=op, arg="x")
    stride = stride or kernel
    dims = []
    for ax, k, s, p in zip(_axes(layout), kernel, stride, padding):
        n = static(x[ax])
        if p * 2 > k:
            raise ShapeError(f"padding {p} is more than half the window {k}", op=op, arg="padding")
        dims.append((n, k, s, p, window_out(op, n, k, s, p)))
    return _axes(layout), dims


def pool_windows(op: str, x, kernel, stride, padding, layout):
    """(out shape, reduce axes, fn: out index -> (source index, in-bounds condition))."""
    (ha, wa), dims = _geometry(op, tuple(x.shape), kernel, stride, padding, layout)
    (h, kh, sh, ph, oh), (w, kw, sw, pw, ow) = dims
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    out = tuple(oh if k == ha else ow if k == wa else d for k, d in enumerate(x.shape))

    def src(i):
        yy, xx = i[ha] * sh + ry - ph, i[wa] * sw + rx - pw
        return [yy if k == ha else xx if k == wa else v for k, v in enumerate(i)], tirx.all(
            yy >= 0, yy < h, xx >= 0, xx < w)

    return out, [ry, rx], src


def max_pool_expr(x, name: str, op: str, **attrs):
    out, raxes, src = pool_windows(op, x, **attrs)
    low = nanmath.lowest(dtype_of(x))

    def body(*i):
        idx, inside = src(i)
        return nanmath.max_reducer()(tirx.if_then_else(inside, x(*idx), low), axis=raxes)

    return te.compute(out, body, name=name, tag="pool")


class _Pool(Op):
    family = "pool"
    dtypes = FLOATS
    attrs = POOL_ATTRS

    def infer_shape(self, x, kernel, stride, padding, layout):
        (ha, wa), dims = _geometry(self.name, x, kernel, stride, padding, layout)
        return tuple(dims[0][4] if k == ha else dims[1][4] if k == wa else d for k, d in enumerate(x))

    def flops(self, shapes, **attrs):
        n = size(self.infer_shape(*shapes, **attrs)) * attrs["kernel"][0] * attrs["kernel"][1]
        return float(n) if isinstance(n, int) else 0.0


def _windows_np(x, kernel, stride, padding, layout, fill):
    """(N, C, OH, OW, KH, KW) view of the padded NCHW input (numpy reference)."""
    if layout == "NHWC":
        x = x.transpose(0, 3, 1, 2)
    stride = stride or kernel
    (ph, pw), (sh, sw) = padding, stride
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=(2, 3))
    return win[:, :, ::sh, ::sw]


def _to_layout(out, layout):
    return out.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else out


@register
class MaxPool2d(_Pool):
    name = "max_pool2d"
    grad_inputs = (0,)
    grad_output = False

    def compute(self, x, **attrs):
        return max_pool_expr(x, self.name, self.name, **attrs)

    def reference(self, x, **attrs):
        return _to_layout(_windows_np(x, fill=-np.inf, **attrs).max(axis=(4, 5)), attrs["layout"])

    def gradient(self, g, node):
        return (max_pool2d_grad(node.inputs[0], g, **node.attrs),)


@register
class AvgPool2d(_Pool):
    name = "avg_pool2d"
    grad_inputs = ()
    grad_output = False

    def compute(self, x, **attrs):
        out, raxes, src = pool_windows(self.name, x, **attrs)
        dt = dtype_of(x)

        def total(*i):
            idx, inside = src(i)
            return te.sum(tirx.if_then_else(inside, x(*idx), tirx.const(0, dt)), axis=raxes)

        sums = te.compute(out, total, name="avg_pool2d_sum", tag=self.family)
        return te.compute(out, lambda *i: sums(*i) / _count(i, self.name, tuple(x.shape), attrs, dt), name=self.name,
                          tag=self.family)

    def reference(self, x, **attrs):
        total = _windows_np(x, fill=0, **attrs).sum(axis=(4, 5))
        count = _windows_np(np.ones_like(x), fill=0, **attrs).sum(axis=(4, 5))
        return _to_layout(total / count, attrs["layout"])

    def gradient(self, g, node):
        return (avg_pool2d_grad(g, shape=tuple(node.inputs[0].shape), **node.attrs),)


def _count(i, op: str, x_shape, attrs, dt):
    """Number of in-bounds elements in output position i's window."""
    (ha, wa), dims = _geometry(op, x_shape, attrs["kernel"], attrs["stride"], attrs["padding"], attrs["layout"])
    count = tirx.const(1, "int32")
    for ax, (n, k, s, p, _) in zip((ha, wa), dims):
        lo = tirx.max(i[ax] * s - p, 0)
        hi = tirx.min(i[ax] * s - p + k, n)
        count = count * (hi - lo)
    return tirx.Cast(dt, count)


class _PoolGrad(_Pool):
    """Route each output's gradient back over its window."""

    family = "pool"
    dtypes = FLOATS
    differentiable = False

    def cover(self, x_shape, attrs):
        """For input index i: windows (oh, ow) over reduce axes that may contain it."""
        (ha, wa), dims = _geometry(self.name, x_shape, attrs["kernel"], attrs["stride"], attrs["padding"],
                                   attrs["layout"])
        r = [te.reduce_axis((0, -(-k // s)), f"w{j}") for j, (_, k, s, _, _) in enumerate(dims)]

        def windows(i):
            """(output index, condition that the window exists and holds i)."""
            conds, out = [], list(i)
            for ax, rr, (_, k, s, p, o) in zip((ha, wa), r, dims):
                start = tirx.floordiv(i[ax] + p, s) - rr
                conds += [start >= 0, start < o, i[ax] + p - start * s < k]
                out[ax] = start
            return out, tirx.all(*conds)

        return r, windows


@register
class MaxPool2dGrad(_PoolGrad):
    """Gradient of max_pool2d w.r.t. its input: (x, out_grad) -> like x."""

    name = "max_pool2d_grad"
    arity = 2
    attrs = POOL_ATTRS

    def infer_shape(self, x, g, **attrs):
        want = _Pool.infer_shape(self, x, **attrs)
        if tuple(map(static, g)) != tuple(map(static, want)):
            raise ShapeError(f"got out_grad {shape_str(g)}, expected {shape_str(want)}", op=self.name, arg="g")
        return x

    def infer_dtype(self, x, g, **attrs):
        return promote(self.name, x, g)

    def compute(self, x, g, **attrs):
        first = _first_max(x, self.name, attrs)
        r, windows = self.cover(tuple(x.shape), attrs)
        (ha, wa), kw = _axes(attrs["layout"]), attrs["kernel"][1]
        (ph, pw), (sh, sw) = attrs["padding"], attrs["stride"] or attrs["kernel"]
        dt = promote(self.name, dtype_of(x), dtype_of(g))

        def body(*i):
            o, ok = windows(i)
            # Clamped: TIR's `and` may evaluate both sides, so reads stay in bounds.
            safe = [tirx.min(tirx.max(v, 0), g.shape[k] - 1) if k in (ha, wa) else v for k, v in enumerate(o)]
            # i's position inside window o, numbered as _first_max numbers it.
            at = (i[ha] + ph - o[ha] * sh) * kw + (i[wa] + pw - o[wa] * sw)
            hit = tirx.all(ok, first(*safe) == at)
            return te.sum(tirx.if_then_else(hit, g(*safe).astype(dt), tirx.const(0, dt)), axis=r)

        return te.compute(tuple(x.shape), body, name=self.name, tag=self.family)

    def reference(self, x, g, **attrs):
        if x.size == 0:
            return np.zeros(x.shape, np.result_type(x, g))
        win = _windows_np(x, fill=-np.inf, **attrs)  # (N, C, OH, OW, KH, KW)
        ky, kx = np.divmod(win.reshape(win.shape[:4] + (-1,)).argmax(axis=-1), attrs["kernel"][1])
        (ph, pw), (sh, sw) = attrs["padding"], attrs["stride"] or attrs["kernel"]
        n, c, oy, ox = np.indices(ky.shape, sparse=True)
        out = np.zeros(win.shape[:2] + _spatial(x.shape, attrs["layout"]), np.result_type(x, g))
        np.add.at(out, (n, c, oy * sh - ph + ky, ox * sw - pw + kx), _to_nchw(g, attrs["layout"]))
        return _to_layout(out, attrs["layout"])


def _first_max(x, op: str, attrs):
    """Per window: the row-major position ``ky * KW + kx`` of its first maximum."""
    mx = max_pool_expr(x, "max_pool2d_grad_max", op, **attrs)
    out, raxes, src = pool_windows(op, x, **attrs)
    (ry, rx), kh, kw = raxes, attrs["kernel"][0], attrs["kernel"][1]

    def body(*i):
        idx, inside = src(i)
        # A NaN is the max of its window (as in PyTorch): the first NaN takes the gradient.
        hit = tirx.if_then_else(inside, tirx.Or(x(*idx) == mx(*i), nanmath.isnan(x(*idx))), tirx.const(False, "bool"))
        return te.min(tirx.if_then_else(hit, ry * kw + rx, kh * kw), axis=raxes)

    return te.compute(out, body, name="max_pool2d_grad_first", tag="pool")


def _spatial(shape, layout):
    return tuple(shape[a] for a in _axes(layout))


def _to_nchw(a, layout):
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


@register
class AvgPool2dGrad(_PoolGrad):
    """Gradient of avg_pool2d w.r.t. its input: out_grad -> the input ``shape``.
    It is linear, the adjoint of avg_pool2d, so its own gradient is avg_pool2d."""

    name = "avg_pool2d_grad"
    grad_inputs = ()
    grad_output = False
    differentiable = True
    attrs = {**POOL_ATTRS, "shape": A.Attr(A.int_tuple(4, minimum=1), doc="the pooled input's shape")}

    def gradient(self, g, node):
        return (avg_pool2d(g, **{k: v for k, v in node.attrs.items() if k != "shape"}),)

    def infer_shape(self, g, shape, **attrs):
        want = _Pool.infer_shape(self, shape, **attrs)
        if tuple(map(static, g)) != tuple(want):
            raise ShapeError(f"got out_grad {shape_str(g)}, expected {shape_str(want)}", op=self.name, arg="g")
        return shape

    def compute(self, g, shape, **attrs):
        r, windows = self.cover(shape, attrs)
        dt = dtype_of(g)

        def body(*i):
            o, ok = windows(i)
            safe = [tirx.max(v, 0) for v in o]
            share = g(*safe) / _count(safe, self.name, shape, attrs, dt)
            return te.sum(tirx.if_then_else(ok, share, tirx.const(0, dt)), axis=r)

        return te.compute(shape, body, name=self.name, tag=self.family)

    def reference(self, g, shape, **attrs):
        count = _windows_np(np.ones(shape, g.dtype), fill=0, **attrs).sum(axis=(4, 5))  # NCHW
        gs = g.transpose(0, 3, 1, 2) if attrs["layout"] == "NHWC" else g
        share = gs / count
        res = np.zeros(share.shape[:2] + ((shape[2], shape[3]) if attrs["layout"] == "NCHW" else shape[1:3]), g.dtype)
        (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"] or attrs["kernel"], attrs["padding"]
        for oy in range(share.shape[2]):
            for ox in range(share.shape[3]):
                ys = slice(max(oy * sh - ph, 0), min(oy * sh - ph + kh, res.shape[2]))
                zs = slice(max(ox * sw - pw, 0), min(ox * sw - pw + kw, res.shape[3]))
                res[:, :, ys, zs] += share[:, :, oy, ox][:, :, None, None]
        return _to_layout(res, attrs["layout"])


@register
class GlobalAvgPool2d(Op):
    """Mean over H and W: NCHW (N, C, H, W) -> (N, C, 1, 1), NHWC (N, H, W, C) ->
    (N, 1, 1, C), channel-blocked NCHWc (N, B, H, W, c) -> (N, B, 1, 1, c);
    ``keepdims=False`` drops H and W."""

    name = "global_avg_pool2d"
    pools_blocked = True
    grad_inputs = ()
    grad_output = False
    family = "pool"
    dtypes = FLOATS
    attrs = {"layout": A.Attr(A.one_of("NCHW", "NHWC", "NCHWc"), default="NCHW", doc="data layout"),
             "keepdims": A.Attr(A.boolean, default=True, doc="keep H and W as size-1 dims")}

    def infer_shape(self, x, layout, keepdims):
        rank = 5 if layout == "NCHWc" else 4
        if len(x) != rank or any(isinstance(static(x[a]), int) and static(x[a]) < 1 for a in _axes(layout)):
            raise ShapeError(f"got {shape_str(x)}, expected a {rank}-D {layout} input with H, W >= 1", op=self.name,
                             arg="x")
        ha, wa = _axes(layout)
        if not keepdims:
            return tuple(d for k, d in enumerate(x) if k not in (ha, wa))
        return tuple(1 if k in (ha, wa) else d for k, d in enumerate(x))

    def compute(self, x, layout, keepdims):
        (ha, wa), dt = _axes(layout), dtype_of(x)
        ry, rx = te.reduce_axis((0, x.shape[ha]), "ry"), te.reduce_axis((0, x.shape[wa]), "rx")
        out = self.infer_shape(tuple(x.shape), layout, keepdims)

        def total(*i):
            rest = iter(v for k, v in enumerate(i) if k not in (ha, wa)) if keepdims else iter(i)
            return te.sum(x(*[ry if k == ha else rx if k == wa else next(rest) for k in range(len(x.shape))]),
                          axis=[ry, rx])

        sums = te.compute(out, total, name="global_avg_pool2d_sum", tag=self.family)
        hw = tirx.Cast(dt, x.shape[ha] * x.shape[wa])
        return te.compute(out, lambda *i: sums(*i) / hw, name=self.name, tag=self.family)

    def reference(self, x, layout, keepdims):
        return x.mean(axis=_axes(layout), keepdims=keepdims)

    def gradient(self, g, node):
        x, layout = node.inputs[0], node.attrs["layout"]
        ha, wa = _axes(layout)
        kept = tuple(1 if k in (ha, wa) else d for k, d in enumerate(x.shape))
        g = g if tuple(g.shape) == kept else g.reshape(kept)
        hw = float(static(x.shape[ha]) * static(x.shape[wa]))
        return ((g / hw).broadcast_to(x.shape),)
