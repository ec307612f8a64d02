"""2-D pooling: max_pool2d, avg_pool2d, global_avg_pool2d (the windowed
pools' backward ops are in ``pool_grad.py``).

Windowed pools take x (N, C, H, W) (``layout="NHWC"``: (N, H, W, C)) and
``kernel``, ``stride`` (default: the kernel) and ``padding``: (h, w) on both
sides, or (top, left, bottom, right) — ONNX's ``pads`` order (x1_begin,
x2_begin, x1_end, x2_end). Each pad is at most half the window. The output is
``OH = (H + top + bottom - span) // stride + 1`` with ``span = dilation *
(kernel - 1) + 1``, and the same for W. ``ceil_mode=True`` rounds that
division up, so the last window may start inside the input (or its left
padding) and run past the padded edge; a last window that would start past
the input and its left padding is dropped, as PyTorch and ONNX do.

``max_pool2d`` pads with -inf, which never wins: every window holds an input
element. A window holding NaN gives NaN. ``dilation`` spaces its taps. Its
gradient goes, per window, to the first element (row-major in the window)
equal to the window's max, as PyTorch does on ties, or to its first NaN.

``avg_pool2d`` divides by the number of input elements in the window
(``count_include_pad=False``, the default, as ONNX's ``count_include_pad=0``;
PyTorch's default is True): with ``count_include_pad=True`` the explicit
padding counts too, but not the part of a ``ceil_mode`` window past the padded
edge (PyTorch's rule).

``global_avg_pool2d`` and ``max_pool2d`` run channel-blocked too
(``layout="NCHWc"``, (N, C / c, H, W, c)): the layout pass carries a
convolution's blocks through a max pool to the convolutions after it.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import nanmath
from .layout import blocked_array, plain_array
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, is_static, shape_str, size, static

# the gradients' ops that have no operator (see oprefs)
max_pool2d_grad, avg_pool2d_grad = op_ref("max_pool2d_grad"), op_ref("avg_pool2d_grad")


def _padding(op: str, name: str, value):
    """(h, w) on both sides, or (top, left, bottom, right); canonical (h, w) when symmetric."""
    if isinstance(value, (tuple, list)) and len(value) == 4:
        pads = A.int_tuple(4, minimum=0)(op, name, value)
        return pads[:2] if pads[:2] == pads[2:] else pads
    if isinstance(value, (tuple, list)) and len(value) != 2:
        raise A.AttrError(f"got {value!r}, expected (h, w) or (top, left, bottom, right)", op=op, arg=name)
    return A.int_tuple(2, minimum=0)(op, name, value)


POOL_ATTRS = {
    "kernel": A.Attr(A.int_tuple(2, minimum=1), doc="(h, w) window"),
    "stride": A.Attr(lambda op, name, v: None if v is None else A.int_tuple(2, minimum=1)(op, name, v),
                     default=None, doc="(h, w) stride (None: the kernel)"),
    "padding": A.Attr(_padding, default=(0, 0), doc="(h, w) on both sides, or (top, left, bottom, right)"),
    "ceil_mode": A.Attr(A.boolean, default=False, doc="round the output size up (PyTorch's ceil_mode)"),
    "layout": A.Attr(A.one_of("NCHW", "NHWC"), default="NCHW", doc="data layout"),
}
MAX_ATTRS = {**POOL_ATTRS, "dilation": A.Attr(A.int_tuple(2, minimum=1), default=(1, 1),
                                              doc="(h, w) spacing of the window's taps")}
#: the forward max pool's: its gradient has no blocked layout (only an exported model pools in blocks)
MAX_POOL_ATTRS = {**MAX_ATTRS, "layout": A.Attr(A.one_of("NCHW", "NHWC", "NCHWc"), default="NCHW",
                                                doc="data layout (NCHWc: channel blocks (N, C / c, H, W, c))")}
AVG_ATTRS = {**POOL_ATTRS, "count_include_pad": A.Attr(
    A.boolean, default=False, doc="divide by the window with its padding (PyTorch's default) or without (ONNX's)")}


def _axes(layout):
    return (1, 2) if layout == "NHWC" else (2, 3)  # NCHW, and NCHWc (N, C / c, H, W, c)


#: one spatial axis of a pooling: input size, kernel, stride, pads before and after, dilation, output size,
#: and the window's span ``d * (k - 1) + 1``
Axis = namedtuple("Axis", "n k s lo hi d out span")


def _out_len(op: str, n, k, s, lo, hi, d, ceil_mode):
    span, total = d * (k - 1) + 1, static(n) + lo + hi
    if ceil_mode and not is_static(n):
        raise ShapeError("ceil_mode needs static H and W", op=op, arg="shapes")
    if is_static(n) and total < span:
        raise ShapeError(f"the window spans {span} but the padded input has only {total}", op=op, arg="shapes")
    if not ceil_mode:
        return (total - span) // s + 1
    out = -(-(total - span) // s) + 1
    return out - 1 if (out - 1) * s >= static(n) + lo else out  # a window starting past the input is dropped


def _geometry(op, x, attrs):
    """((h axis, w axis), (Axis for h, Axis for w))."""
    layout = attrs["layout"]
    rank = 5 if layout == "NCHWc" else 4
    if len(x) != rank:
        raise ShapeError(f"got {shape_str(x)}, expected a {rank}-D {layout} input", op=op, arg="x")
    pads = attrs["padding"] * 2 if len(attrs["padding"]) == 2 else attrs["padding"]
    dims = []
    for j, ax in enumerate(_axes(layout)):
        k, s = attrs["kernel"][j], (attrs["stride"] or attrs["kernel"])[j]
        lo, hi, d = pads[j], pads[j + 2], attrs.get("dilation", (1, 1))[j]
        if 2 * max(lo, hi) > d * (k - 1) + 1:
            raise ShapeError(f"padding {max(lo, hi)} is more than half the window {d * (k - 1) + 1}", op=op,
                             arg="padding")
        out = _out_len(op, x[ax], k, s, lo, hi, d, attrs["ceil_mode"])
        dims.append(Axis(static(x[ax]), k, s, lo, hi, d, out, d * (k - 1) + 1))
    return _axes(layout), tuple(dims)


def pool_windows(op: str, x, attrs):
    """(out shape, reduce axes, fn: out index -> (source index, in-bounds condition))."""
    (ha, wa), (gh, gw) = _geometry(op, tuple(x.shape), attrs)
    ry, rx = te.reduce_axis((0, gh.k), "ry"), te.reduce_axis((0, gw.k), "rx")
    out = tuple(gh.out if k == ha else gw.out if k == wa else d for k, d in enumerate(x.shape))

    def src(i):
        yy, xx = i[ha] * gh.s + ry * gh.d - gh.lo, i[wa] * gw.s + rx * gw.d - gw.lo
        return [yy if k == ha else xx if k == wa else v for k, v in enumerate(i)], tirx.all(
            yy >= 0, yy < gh.n, xx >= 0, xx < gw.n)

    return out, [ry, rx], src


def max_pool_expr(x, name: str, op: str, attrs):
    out, raxes, src = pool_windows(op, x, attrs)
    low = nanmath.lowest(dtype_of(x))

    def body(*i):
        idx, inside = src(i)
        return nanmath.max_reducer()(tirx.if_then_else(inside, x(*idx), low), axis=raxes)

    return te.compute(out, body, name=name, tag="pool")


class _Pool(Op):
    family = "pool"
    dtypes = FLOATS
    attrs = POOL_ATTRS

    def infer_shape(self, x, **attrs):
        (ha, wa), (gh, gw) = _geometry(self.name, x, attrs)
        return tuple(gh.out if k == ha else gw.out if k == wa else d for k, d in enumerate(x))

    def flops(self, shapes, **attrs):
        n = size(self.infer_shape(*shapes, **attrs)) * attrs["kernel"][0] * attrs["kernel"][1]
        return float(n) if isinstance(n, int) else 0.0


# -- numpy references: windows of the padded NCHW input, and their adjoint ---------------------
def _windows_np(x, attrs, fill, past=None):
    """(N, C, OH, OW, KH, KW) windows of the NCHW input padded with ``fill``
    (and with ``past`` beyond the padded edge, where ceil_mode reaches)."""
    _, geo = _geometry("reference", x.shape, attrs)
    x = _to_nchw(x, attrs["layout"])
    x = np.pad(x, ((0, 0), (0, 0)) + tuple((g.lo, g.hi) for g in geo), constant_values=fill)
    extra = [max(0, (g.out - 1) * g.s + g.span - (g.n + g.lo + g.hi)) for g in geo]
    x = np.pad(x, ((0, 0), (0, 0), (0, extra[0]), (0, extra[1])), constant_values=fill if past is None else past)
    win = np.lib.stride_tricks.sliding_window_view(x, (geo[0].span, geo[1].span), axis=(2, 3))
    (gh, gw) = geo
    return win[:, :, ::gh.s, ::gw.s][:, :, :gh.out, :gw.out, ::gh.d, ::gw.d]


def _scatter_np(parts, x_shape, attrs):
    """The adjoint of ``_windows_np``: each window's (N, C, OH, OW, KH, KW)
    ``parts`` added back onto the (cropped) input grid, in ``attrs["layout"]``."""
    _, (gh, gw) = _geometry("reference", x_shape, attrs)
    full = np.zeros(parts.shape[:2] + tuple(max(g.lo + g.n, (g.out - 1) * g.s + g.span) for g in (gh, gw)),
                    parts.dtype)
    for ky in range(gh.k):
        for kx in range(gw.k):
            full[:, :, ky * gh.d:ky * gh.d + (gh.out - 1) * gh.s + 1:gh.s,
                 kx * gw.d:kx * gw.d + (gw.out - 1) * gw.s + 1:gw.s] += parts[..., ky, kx]
    return _to_layout(full[:, :, gh.lo:gh.lo + gh.n, gw.lo:gw.lo + gw.n], attrs["layout"])


def _to_layout(out, layout, block: int = 1):
    if layout == "NCHWc":
        return blocked_array(out, block)
    return out.transpose(0, 2, 3, 1).copy() if layout == "NHWC" else out


def _to_nchw(a, layout):
    if layout == "NCHWc":
        return plain_array(a, a.shape[1] * a.shape[4])
    return a.transpose(0, 3, 1, 2) if layout == "NHWC" else a


@register
class MaxPool2d(_Pool):
    name = "max_pool2d"
    attrs = MAX_POOL_ATTRS
    passes_blocks = True
    dtypes = FLOATS + ("uint8", "int8")  # int8 codes pool as they are (``graph/requantize.py``)
    grad_inputs = (0,)
    grad_output = False

    def compute(self, x, **attrs):
        return max_pool_expr(x, self.name, self.name, attrs)

    def reference(self, x, **attrs):
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return _to_layout(_windows_np(x, attrs, low).max(axis=(4, 5)), attrs["layout"], x.shape[-1])

    def gradient(self, g, node):
        if node.attrs["layout"] == "NCHWc":
            raise ShapeError("no gradient in channel blocks (only exported inference pools blocked)", op=self.name,
                             arg="layout")
        return (max_pool2d_grad(node.inputs[0], g, **node.attrs),)


@register
class AvgPool2d(_Pool):
    name = "avg_pool2d"
    attrs = AVG_ATTRS
    grad_inputs = ()
    grad_output = False

    def compute(self, x, **attrs):
        out, raxes, src = pool_windows(self.name, x, attrs)
        dt = dtype_of(x)

        def total(*i):
            idx, inside = src(i)
            return te.sum(tirx.if_then_else(inside, x(*idx), tirx.const(0, dt)), axis=raxes)

        sums = te.compute(out, total, name="avg_pool2d_sum", tag=self.family)
        return te.compute(out, lambda *i: sums(*i) / _count(i, self.name, tuple(x.shape), attrs, dt), name=self.name,
                          tag=self.family)

    def reference(self, x, **attrs):
        total = _windows_np(x, attrs, 0).sum(axis=(4, 5))
        return _to_layout(total / _count_np(x.shape, x.dtype, attrs), attrs["layout"])

    def gradient(self, g, node):
        return (avg_pool2d_grad(g, shape=tuple(node.inputs[0].shape), **node.attrs),)


def _count(i, op: str, x_shape, attrs, dt):
    """The divisor of output position i's window: its input elements, and with
    ``count_include_pad`` its padding (not what ceil_mode adds past that)."""
    axes, geo = _geometry(op, x_shape, attrs)
    count = tirx.const(1, "int32")
    for ax, g in zip(axes, geo):
        start = i[ax] * g.s - g.lo
        if attrs["count_include_pad"]:
            lo, hi = start, tirx.min(start + g.k, g.n + g.hi)
        else:
            lo, hi = tirx.max(start, 0), tirx.min(start + g.k, g.n)
        count = count * (hi - lo)
    return tirx.Cast(dt, count)


def _count_np(x_shape, dtype, attrs):
    """(N, C, OH, OW) divisors of avg_pool2d, as ``_count``."""
    ones = np.ones(x_shape, dtype)
    return _windows_np(ones, attrs, 1 if attrs["count_include_pad"] else 0, past=0).sum(axis=(4, 5))


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
