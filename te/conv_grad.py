"""The gradients of an NCHW convolution as ops of their own.

``conv2d_backward_data(gy, w, in_size, stride, padding, dilation)``: the
gradient of the forward input (N, C, H, W) from ``gy`` (N, O, OH, OW) and the
weight ``w`` (O, C, KH, KW), ``in_size = (H, W)`` (several input sizes give
one output size under a stride):

    dx[n, c, y, x] = sum over o and the taps (i, j) with y + ph - i*dh = s*q, x + pw - j*dw = s*r
                     of gy[n, o, q, r] * w[o, c, i, j]

(``gy`` read as zero outside its rows and columns, as a forward convolution
reads its padding: an inf in ``w`` at such a tap gives NaN, except where,
as in ``conv2d``, those products are left out: stride 1 on maps of at most
16 x 16, ``data_skips_padding``). It is the
transposed convolution, with one of two TE bodies, both over a zero-padded
``gy`` (``{name}_pad``, a stage of its own) and both in ``conv2d``'s loop
structure (n, c, y, x | o, taps), so the conv2d template's steps schedule them
(``schedules/cpu/conv2d_transposed.py``):

- stride 1 (or a dilation with a stride): ``gy`` placed on the input's grid
  (``stride - 1`` zeros between its elements) convolved, stride 1, with the
  kernel flipped and its channels swapped (``_direct``), its packed weight
  blocks taken along ``w``'s input channels. Under a stride most of its
  taps fall on those zeros: it skips their products (an inf in ``w`` must
  not meet them), but spends the loop steps.
- a stride and no dilation: per phase. The input rows with one
  ``(y + ph) % sh`` read the same ``ceil(KH / sh)`` taps of every ``sh``-th
  kernel row, on consecutive rows of ``gy`` (likewise columns): a stride-1
  correlation of ``gy`` with that phase's sub-kernel, without the inserted
  zeros (ResNet-18's stride-2 3x3 layer: 4 taps per output where the placed
  grid has 9). The sub-kernels are one stage, ``{name}_taps`` (sh, sw, O,
  TH, TW, C): output channels innermost, the vectors the template loads. A
  phase with fewer taps than ``TH`` (KH not a multiple of sh) reads zero for
  the missing ones.

``conv2d_backward_weight(x, gy, kernel, stride, padding, dilation)``: ``x``
(N, C, H, W) is the forward input, ``gy`` (N, O, OH, OW) the gradient of the
forward output; the result is dw (O, C, KH, KW) with

    dw[o, c, i, j] = sum_{n, y, z} gy[n, o, y, z] * xpad[n, c, y*sh + i*dh, z*sw + j*dw]

a reduction over batch and output pixels for each output channel and each
(input channel, kernel row, kernel column). Expressed as the ordinary
convolution the gradient used to run (the batch as channels, ``gy`` as a
kernel as large as the output map), its template had a tile that suits
neither. The TE body computes it channels-last, ``(C, KH, KW, O)``, against
``gy`` transposed to (N, OH, OW, O), so a vector of output channels is
contiguous in both, then transposes the result to OIHW; the CPU template
(``schedules/cpu/conv2d_grad.py``) register-tiles output channels x
(C, KH, KW), runs the (C, KH, KW) blocks in parallel and, where it can,
folds the transpose into the tiles' write-back.

Both take ``groups`` as ``conv2d`` does: ``w`` and ``dw`` are (O, C / groups,
KH, KW), and output channel ``o`` meets only the input channels of its group
(``dx[n, c]`` sums over the O / groups channels of ``c``'s group, ``dw[o,
c]`` reads input channel ``(o // (O / groups)) * (C / groups) + c``). Their
gradients are grouped ops with the same groups. A grouped data gradient
under a stride is computed per phase where the input's rows and columns are
whole cycles of the phases (``whole_phases``: its template,
``schedules/cpu/conv2d_grouped.py``, vectorizes the columns of one phase),
else on the placed grid.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .conv import (DILATION, GROUPS, PADDING, STRIDE, _direct, _flops, _inside, backward_data, backward_weight,
                   check_groups, check_rank4, conv2d, group_start, pad_spatial, skips_padding, split_nchw, window_out)
from .grad import as_dtype, wants_grad
from .registry import Op, register
from .shapes import dtype_of, is_static, promote, same_dim, shape_str, size, static

FLOATS = ("float32", "float64")


def _check_gy(op: str, gy, in_hw, kernel, stride, padding, dilation) -> None:
    """``gy``'s (OH, OW) must be the forward output's for an input of ``in_hw``."""
    want = tuple(window_out(op, in_hw[a], kernel[a], stride[a], padding[a], dilation[a]) for a in (0, 1))
    if any(is_static(d) and static(d) != v for d, v in zip(gy[2:], want)):
        raise ShapeError(f"got gy {shape_str(gy)}, expected (N, O, {want[0]}, {want[1]}): the forward output's shape "
                         f"for an input of {shape_str(tuple(in_hw))} and these kernel, stride, padding and dilation",
                         op=op, arg="gy")


@register
class Conv2dBackwardWeight(Op):
    """See the module docstring."""

    name = "conv2d_backward_weight"
    compute_bound = True
    family = "conv2d_backward_weight"
    arity = 2
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False
    attrs = {
        "kernel": A.Attr(A.int_tuple(2, minimum=1), doc="the forward weight's (KH, KW) (int or pair)"),
        "stride": STRIDE, "padding": PADDING, "dilation": DILATION, "groups": GROUPS,
    }

    def infer_shape(self, x, gy, kernel, stride, padding, dilation, groups=1):
        check_rank4(self.name, x, "x", "NCHW")
        check_rank4(self.name, gy, "gy", "NCHW")
        if not same_dim(gy[0], x[0]):
            raise ShapeError(f"got gy {shape_str(gy)} for x {shape_str(x)}: the batches differ", op=self.name,
                             arg="gy")
        check_groups(self.name, groups, x[1], gy[1])
        _check_gy(self.name, gy, x[2:], kernel, stride, padding, dilation)
        return (gy[1], x[1] if groups == 1 else static(x[1]) // groups, kernel[0], kernel[1])

    def infer_dtype(self, x, gy, **attrs):
        return promote(self.name, x, gy)

    def compute(self, x, gy, kernel, stride, padding, dilation, groups=1):
        dt = promote(self.name, dtype_of(x), dtype_of(gy))
        n, c, _, _ = x.shape
        _, o, oh, ow = gy.shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        c = c if groups == 1 else static(c) // groups
        first = group_start(o, c, groups)
        channel = (lambda k, ci: ci) if first is None else (lambda k, ci: first(k) + ci)
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), f"{self.name}_pad")
        gyt = te.compute((n, oh, ow, o), lambda b, y, z, k: gy[b, k, y, z], name=f"{self.name}_gyt",
                         tag="injective")
        rn, ry, rz = te.reduce_axis((0, n), "rn"), te.reduce_axis((0, oh), "ry"), te.reduce_axis((0, ow), "rz")
        acc = te.compute((c, kh, kw, o), lambda ci, i, j, k: te.sum(
            xp[rn, channel(k, ci), ry * sh + i * dh, rz * sw + j * dw].astype(dt) * gyt[rn, ry, rz, k].astype(dt),
            axis=[rn, ry, rz]), name=f"{self.name}_cl", tag=self.family)
        return te.compute((o, c, kh, kw), lambda k, ci, i, j: acc[ci, i, j, k], name=self.name, tag="injective")

    def reference(self, x, gy, kernel, stride, padding, dilation, groups=1):
        (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
        xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        span = (dh * (kernel[0] - 1) + 1, dw * (kernel[1] - 1) + 1)
        win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
        win = win[:, :, :gy.shape[2], :gy.shape[3]]
        if groups == 1:
            return np.einsum("nchwyx,nohw->ocyx", win, gy).astype(np.result_type(x, gy))
        n, c, oh, ow = win.shape[:4]
        win = win.reshape(n, groups, c // groups, *win.shape[2:])
        dw_ = np.einsum("ngchwyx,ngohw->gocyx", win, gy.reshape(n, groups, -1, oh, ow))
        return dw_.reshape(-1, *dw_.shape[2:]).astype(np.result_type(x, gy))

    def gradient(self, g, node):
        """dw is bilinear in (x, gy): dx is gy convolved back through ``g``
        (the data gradient of a conv with weight ``g``), dgy the forward conv of x with ``g``."""
        x, gy = node.inputs
        attrs = {k: node.attrs[k] for k in ("stride", "padding", "dilation", "groups")}
        gx = as_dtype(backward_data(gy, g, in_size=tuple(x.shape[2:]), **attrs), x.dtype) \
            if wants_grad(x) else None
        ggy = as_dtype(conv2d(x, g, **attrs), gy.dtype) if wants_grad(gy) else None
        return gx, ggy

    def flops(self, shapes, **attrs):
        x, gy = shapes
        total = 2 * size(gy) * (static(x[1]) // attrs.get("groups", 1)) * attrs["kernel"][0] * attrs["kernel"][1]
        return float(total) if isinstance(total, int) else 0.0


def border(w_shape, padding, dilation) -> tuple:
    """The zero rows and columns a stride-1 ``conv2d_backward_data`` reads
    around ``gy`` (top and left; as many bottom and right): ``dilation * (K
    - 1) - padding``, negative where the padding is wider than the kernel."""
    return tuple(d * (static(k) - 1) - p for k, p, d in zip(w_shape[2:4], padding, dilation))


def data_skips_padding(gy_shape, out_shape, w_shape, stride, padding, dilation) -> bool:
    """Whether a ``conv2d_backward_data`` (output ``out_shape``) leaves out
    the products that read the zero border around ``gy``, as a forward conv
    leaves out its padding's (``te.conv.skips_padding``: maps of at most
    ``SKIP_PADDING_MAX``, which its template unrolls whole): stride 1, no
    side where a padding wider than the kernel crops ``gy`` instead."""
    low = border(w_shape, padding, dilation)
    return tuple(stride) == (1, 1) and min(low) >= 0 and skips_padding("NCHW", gy_shape, out_shape, low,
                                                                                     w_shape[2:4])


@register
class Conv2dBackwardData(Op):
    """See the module docstring."""

    name = "conv2d_backward_data"
    compute_bound = True
    family = "conv2d"
    arity = 2
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False
    attrs = {
        "in_size": A.Attr(A.int_tuple(2, minimum=1), doc="the forward input's (H, W) (int or pair)"),
        "stride": STRIDE, "padding": PADDING, "dilation": DILATION, "groups": GROUPS,
    }

    def infer_shape(self, gy, w, in_size, stride, padding, dilation, groups=1):
        check_rank4(self.name, gy, "gy", "NCHW")
        check_rank4(self.name, w, "w", "OIHW")
        if not (is_static(w[2]) and is_static(w[3])):
            raise ShapeError(f"got w {shape_str(w)}, expected a static kernel size", op=self.name, arg="w")
        if not same_dim(gy[1], w[0]):
            raise ShapeError(f"got gy {shape_str(gy)} with {static(gy[1])} channels but w {shape_str(w)} has "
                             f"{static(w[0])} output channels", op=self.name, arg="w")
        _check_gy(self.name, gy, in_size, (static(w[2]), static(w[3])), stride, padding, dilation)
        if groups == 1:
            return (gy[0], w[1], in_size[0], in_size[1])
        check_groups(self.name, groups, static(w[1]) * groups if is_static(w[1]) else w[1], w[0])
        return (gy[0], static(w[1]) * groups, in_size[0], in_size[1])

    def infer_dtype(self, gy, w, **attrs):
        return promote(self.name, gy, w)

    def compute(self, gy, w, in_size, stride, padding, dilation, groups=1):
        dt = promote(self.name, dtype_of(gy), dtype_of(w))
        if stride != (1, 1) and dilation == (1, 1) and (groups == 1 or whole_phases(in_size, stride)):
            return _phased(self, gy, w, in_size, stride, padding, dt, groups)
        n, o, oh, ow = gy.shape
        _, c, kh, kw = (static(d) for d in w.shape)  # c: the input channels of a group
        og = o if groups == 1 else static(o) // groups
        spans = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
        low = border(w.shape, padding, dilation)  # may be negative: a padding wider than the kernel
        grid = (in_size[0] + spans[0], in_size[1] + spans[1])

        def placed(b, k, u, v):  # gy on the input's grid, zeros between and around its elements
            sy, sx = u - low[0], v - low[1]
            inside = tirx.all(sy >= 0, sx >= 0, sy % stride[0] == 0, sx % stride[1] == 0,
                              sy // stride[0] < oh, sx // stride[1] < ow)
            return tirx.if_then_else(inside, gy[b, k, tirx.max(sy, 0) // stride[0], tirx.max(sx, 0) // stride[1]],
                                     tirx.const(0, dtype_of(gy)))

        def on_gy(u, v):  # a position of gy's (or of its border), not one of the zeros between
            return tirx.all((u - low[0]) % stride[0] == 0, (v - low[1]) % stride[1] == 0)

        gp = te.compute((n, o) + grid, placed, name=f"{self.name}_pad", tag="injective")
        out = (n, c * groups, in_size[0], in_size[1])
        keep = on_gy if stride != (1, 1) else None
        if groups == 1 and data_skips_padding(tuple(gy.shape), out, tuple(w.shape), stride, padding, dilation):
            keep = _inside(tuple(gy.shape), low)
        first = group_start(c * groups, og, groups)  # the first output channel of input channel ci's group
        if first is None:
            tap = lambda ci, k, y, z: w[k, ci, kh - 1 - y, kw - 1 - z]  # noqa: E731
        else:
            tap = lambda ci, k, y, z: w[first(ci) + k, ci % c, kh - 1 - y, kw - 1 - z]  # noqa: E731
        return _direct(self, lambda b, k, y, z: gp[b, k, y, z], tap, (og, kh, kw), out, dt,
                       lambda idx: split_nchw(idx, "NCHW"), (1, 1), dilation, keep=keep, first=first)

    def reference(self, gy, w, in_size, stride, padding, dilation, groups=1):
        """numpy's transposed convolution by its definition (the module
        docstring): each tap's products added at the input positions it
        reaches, ``gy`` read as zero outside its rows and columns (so an inf
        in ``w`` meets those zeros and gives NaN, as in a forward
        convolution's padding)."""
        (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
        n, o, oh, ow = gy.shape
        c, kh, kw = w.shape[1:]
        dx = np.zeros((n, c * groups) + tuple(in_size), np.result_type(gy, w))
        for i in range(kh):
            qy, ry = np.divmod(np.arange(in_size[0]) + ph - i * dh, sh)  # gy's row, when ry == 0
            for j in range(kw):
                qx, rx = np.divmod(np.arange(in_size[1]) + pw - j * dw, sw)
                ys, xs = np.flatnonzero(ry == 0), np.flatnonzero(rx == 0)
                inside = ((qy[ys] >= 0) & (qy[ys] < oh))[:, None] & ((qx[xs] >= 0) & (qx[xs] < ow))[None, :]
                read = gy[:, :, np.clip(qy[ys], 0, oh - 1)][:, :, :, np.clip(qx[xs], 0, ow - 1)]
                read = np.where(inside, read, 0).reshape(n, groups, o // groups, len(ys), len(xs))
                taps = w[:, :, i, j].reshape(groups, o // groups, c)
                dx[np.ix_(range(n), range(c * groups), ys, xs)] += np.einsum(
                    "ngoyx,goc->ngcyx", read, taps).reshape(n, c * groups, len(ys), len(xs))
        return dx

    def gradient(self, g, node):
        """dx is linear in (gy, w): dgy is the forward conv of ``g`` with w,
        dw the weight gradient of a conv of ``g`` whose output gradient is gy."""
        gy, w = node.inputs
        attrs = {k: node.attrs[k] for k in ("stride", "padding", "dilation", "groups")}
        ggy = as_dtype(conv2d(g, w, **attrs), gy.dtype) if wants_grad(gy) else None
        gw = as_dtype(backward_weight(g, gy, kernel=tuple(w.shape[2:]), **attrs), w.dtype) \
            if wants_grad(w) else None
        return ggy, gw

    def flops(self, shapes, **attrs):
        gy, w = shapes
        return _flops(tuple(gy), tuple(w[1:]))


def whole_phases(in_size, stride) -> bool:
    """Whether the input's rows and columns are whole cycles of the stride's
    phases: a grouped data gradient is computed per phase only then (its
    template vectorizes a phase's columns; ``schedules/cpu/conv2d_grouped.py``)."""
    return all(size % s == 0 for size, s in zip(in_size, stride))


def _phased(op: Op, gy, w, in_size, stride, padding, dt, groups: int = 1):
    """The strided transposed convolution per phase (see the module
    docstring); the sub-kernels' ``c`` channels are a group's."""
    n, o, oh, ow = gy.shape
    _, c, kh, kw = (static(d) for d in w.shape)
    per_group = o if groups == 1 else static(o) // groups
    first = group_start(c * groups, per_group, groups)  # gy's first channel in input channel ci's group
    channel = (lambda ci, r: r) if first is None else (lambda ci, r: first(ci) + r)
    local = (lambda ci: ci) if first is None else (lambda ci: ci % c)
    kernel, outs = (kh, kw), (static(oh), static(ow))
    taps = tuple(-(-k // s) for k, s in zip(kernel, stride))
    # gy's rows read: (y + p) // s + t for t < taps, on a grid with taps - 1 zero rows before gy's
    grid = tuple(max(g + t - 1, (size - 1 + p) // s + t)
                 for g, t, size, p, s in zip(outs, taps, in_size, padding, stride))
    zero = tirx.const(0, dtype_of(gy))

    def padded(b, k, y, x):
        sy, sx = y - (taps[0] - 1), x - (taps[1] - 1)
        inside = tirx.all(sy >= 0, sx >= 0, sy < oh, sx < ow)
        return tirx.if_then_else(inside, gy[b, k, tirx.max(sy, 0), tirx.max(sx, 0)], zero)

    gp = te.compute((n, o) + grid, padded, name=f"{op.name}_pad", tag="injective")

    def tap_of(a: int, phase, t):  # the kernel row (column) of phase's tap t along axis a
        return (taps[a] - 1 - t) * stride[a] + phase

    def sub_kernels(ph, pw, k, t, u, ci):
        i, j = tap_of(0, ph, t), tap_of(1, pw, u)
        real = tirx.all(i < kh, j < kw)
        return tirx.if_then_else(real, w[k, ci, tirx.min(i, kh - 1), tirx.min(j, kw - 1)],
                                 tirx.const(0, dtype_of(w)))

    wp = te.compute(tuple(stride) + (o, taps[0], taps[1], c), sub_kernels, name=f"{op.name}_taps",
                    tag="injective")
    ro, rt = te.reduce_axis((0, per_group), "ro"), te.reduce_axis((0, taps[0]), "rt")
    ru = te.reduce_axis((0, taps[1]), "ru")
    missing = any(k % s for k, s in zip(kernel, stride))  # some phase has fewer taps: they read zero

    def body(b, ci, y, x):
        py, px = y + padding[0], x + padding[1]
        ph, pw = py % stride[0], px % stride[1]
        k = channel(ci, ro)
        value = gp[b, k, py // stride[0] + rt, px // stride[1] + ru]
        if missing:
            value = tirx.if_then_else(tirx.all(tap_of(0, ph, rt) < kh, tap_of(1, pw, ru) < kw), value, zero)
        return te.sum(value.astype(dt) * wp[ph, pw, k, rt, ru, local(ci)].astype(dt), axis=[ro, rt, ru])

    return te.compute((n, c * groups) + tuple(in_size), body, name=op.name, tag=op.family)
