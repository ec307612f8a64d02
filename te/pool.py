"""2-D pooling: max_pool2d, avg_pool2d (padding excluded from the average, as
PyTorch's ``count_include_pad=False``), global_avg_pool2d, and the backward ops
of the windowed pools.

``max_pool2d`` pads with -inf. Its gradient goes to every element equal to its
window's max (ties share it; PyTorch picks one).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .registry import Op, call, register
from .shapes import FLOATS, dtype_of, shape_str, size, static

POOL_ATTRS = {
    "kernel": A.Attr(A.int_tuple(2, minimum=1), doc="(h, w) window"),
    "stride": A.Attr(lambda op, name, v: None if v is None else A.int_tuple(2, minimum=1)(op, name, v),
                     default=None, doc="(h, w) stride (None: the kernel)"),
    "padding": A.Attr(A.int_tuple(2, minimum=0), default=(0, 0), doc="(h, w) padding on each side"),
    "layout": A.Attr(A.one_of("NCHW", "NHWC"), default="NCHW", doc="data layout"),
}


def _axes(layout):
    return (2, 3) if layout == "NCHW" else (1, 2)


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
        out = (n + 2 * p - k) // s + 1
        if out < 1:
            raise ShapeError(f"window {k} does not fit the padded size {n + 2 * p}", op=op, arg="kernel")
        dims.append((n, k, s, p, out))
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
    low = tirx.min_value(dtype_of(x))

    def body(*i):
        idx, inside = src(i)
        return te.max(tirx.if_then_else(inside, x(*idx), low), axis=raxes)

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

    def compute(self, x, **attrs):
        return max_pool_expr(x, self.name, self.name, **attrs)

    def reference(self, x, **attrs):
        return _to_layout(_windows_np(x, fill=-np.inf, **attrs).max(axis=(4, 5)), attrs["layout"])

    def gradient(self, g, node):
        return (call("max_pool2d_grad", node.inputs[0], g, **node.attrs),)


@register
class AvgPool2d(_Pool):
    name = "avg_pool2d"

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
        return (call("avg_pool2d_grad", g, shape=tuple(node.inputs[0].shape), **node.attrs),)


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

    def compute(self, x, g, **attrs):
        mx = max_pool_expr(x, "window_max", self.name, **attrs)  # the window maxima, recomputed
        r, windows = self.cover(tuple(x.shape), attrs)
        dt = dtype_of(x)

        def body(*i):
            o, ok = windows(i)
            hit = tirx.all(ok, x(*i) == mx(*[tirx.max(v, 0) for v in o]))
            return te.sum(tirx.if_then_else(hit, g(*[tirx.max(v, 0) for v in o]), tirx.const(0, dt)), axis=r)

        return te.compute(tuple(x.shape), body, name=self.name, tag=self.family)

    def reference(self, x, g, **attrs):
        out = np.zeros_like(x)
        xs = x.transpose(0, 3, 1, 2) if attrs["layout"] == "NHWC" else x
        gs = g.transpose(0, 3, 1, 2) if attrs["layout"] == "NHWC" else g
        res = out.transpose(0, 3, 1, 2) if attrs["layout"] == "NHWC" else out
        mx = MaxPool2d.reference(self, xs, **{**attrs, "layout": "NCHW"})
        (kh, kw), (sh, sw), (ph, pw) = attrs["kernel"], attrs["stride"] or attrs["kernel"], attrs["padding"]
        for oy in range(mx.shape[2]):
            for ox in range(mx.shape[3]):
                for y in range(max(oy * sh - ph, 0), min(oy * sh - ph + kh, xs.shape[2])):
                    for z in range(max(ox * sw - pw, 0), min(ox * sw - pw + kw, xs.shape[3])):
                        hit = xs[:, :, y, z] == mx[:, :, oy, ox]
                        res[:, :, y, z] += np.where(hit, gs[:, :, oy, ox], 0)
        return out


@register
class AvgPool2dGrad(_PoolGrad):
    """Gradient of avg_pool2d w.r.t. its input: out_grad -> the input ``shape``."""

    name = "avg_pool2d_grad"
    attrs = {**POOL_ATTRS, "shape": A.Attr(A.int_tuple(4, minimum=1), doc="the pooled input's shape")}

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
    """Mean over H and W of an NCHW input, kept as (N, C, 1, 1)."""

    name = "global_avg_pool2d"
    family = "reduction"
    dtypes = FLOATS

    def infer_shape(self, x):
        if len(x) != 4:
            raise ShapeError(f"got {shape_str(x)}, expected a 4-D NCHW input", op=self.name, arg="x")
        return (x[0], x[1], 1, 1)

    def compute(self, x):
        n, c, h, w = x.shape
        ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
        sums = te.compute((n, c, 1, 1), lambda a, b, _y, _x: te.sum(x[a, b, ry, rx], axis=[ry, rx]),
                          name="global_avg_pool2d_sum", tag="reduction")
        return te.compute((n, c, 1, 1), lambda *i: sums(*i) / tirx.Cast(dtype_of(x), h * w), name=self.name,
                          tag="reduction")

    def reference(self, x):
        return x.mean(axis=(2, 3), keepdims=True)

    def gradient(self, g, node):
        x = node.inputs[0]
        hw = float(static(x.shape[2]) * static(x.shape[3]))
        return (call("broadcast_to", call("divide_scalar", g, scalar=hw), shape=tuple(x.shape)),)
