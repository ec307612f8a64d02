"""2-D convolution, in two layouts, and the layout helpers pooling shares.

``conv2d(x, w)`` is the cross-correlation deep learning calls convolution:

- ``layout="NCHW"`` (PyTorch): x (N, C, H, W), w (O, C, KH, KW) -> (N, O, OH, OW);
- ``layout="NHWC"`` (TensorFlow, needle): x (N, H, W, C), w (KH, KW, C, O) -> (N, OH, OW, O);

with ``OH = (H + 2 * pad_h - dil_h * (KH - 1) - 1) // stride_h + 1`` (and the
same for W). Padding is symmetric and zero. There is no bias: the ``nn`` layer
adds it. The padded input is an intermediate injective block (``conv2d_pad``),
which the schedules inline into the reduction.

``groups=G`` splits the channels into G groups: output channel ``o`` reads
only the ``C / G`` input channels of its group ``o // (O / G)``, and the
weight holds ``C / G`` input channels, (O, C / G, KH, KW) or (KH, KW, C / G,
O); C and O must be multiples of G. ``groups = C`` is a depthwise
convolution (O / C outputs per input channel, the channel multiplier). Its
gradients are the grouped ``conv2d_backward_data`` and
``conv2d_backward_weight`` (``te/conv_grad.py``) with the same G; its CPU
template is ``schedules/cpu/conv2d_grouped.py``.

The ops for a constant weight packed once (``pack_conv2d_weight``,
``conv2d_packed``) are in ``conv_packed.py``.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .grad import as_dtype, wants_grad
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, is_static, promote, same_dim, shape_str, size, static

# the gradients' ops that have no operator (see oprefs)
conv2d, dilate = op_ref("conv2d"), op_ref("dilate")
backward_data, backward_weight = op_ref("conv2d_backward_data"), op_ref("conv2d_backward_weight")

LAYOUT = A.Attr(A.one_of("NCHW", "NHWC"), default="NCHW", doc="NCHW (weights OIHW) or NHWC (weights HWIO)")
STRIDE = A.Attr(A.int_tuple(2, minimum=1), default=(1, 1), doc="step of the window (int or pair)")
PADDING = A.Attr(A.int_tuple(2, minimum=0), default=(0, 0), doc="zeros added on both sides of H, W")
DILATION = A.Attr(A.int_tuple(2, minimum=1), default=(1, 1), doc="spacing of the kernel taps")
OUT_BLOCK = A.Attr(A.positive_int, doc="output channels per block")
GROUPS = A.Attr(A.positive_int, default=1, doc="channel groups, each of O / groups outputs reading its C / groups "
                "inputs (groups = C: depthwise)")


def spatial_axes(layout: str) -> tuple[int, int]:
    """The (H, W) axes of a 4-D tensor in ``layout``."""
    return (2, 3) if layout == "NCHW" else (1, 2)


def split_nchw(dims, layout: str) -> tuple:
    """``(n, c, h, w)`` from dims (or indices) given in ``layout`` order."""
    n, a, b, c = dims
    return (n, a, b, c) if layout == "NCHW" else (n, c, a, b)


def join_nchw(layout: str, n, c, h, w) -> tuple:
    """Dims (or indices) ``n, c, h, w`` in ``layout`` order."""
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


def check_rank4(op: str, shape, arg: str, layout: str) -> None:
    if len(shape) != 4:
        raise ShapeError(f"got {shape_str(shape)}, expected a 4-D {layout} tensor", op=op, arg=arg)
    for d in shape[1:]:
        if is_static(d) and static(d) < 1:
            raise ShapeError(f"got {shape_str(shape)}, expected non-batch dims >= 1", op=op, arg=arg)


def check_groups(op: str, groups: int, channels, outputs) -> None:
    """``groups`` must divide the input ``channels`` and the ``outputs``
    (static wherever there is more than one group)."""
    if groups == 1:
        return
    for dim, what in ((channels, "input"), (outputs, "output")):
        if not is_static(dim):
            raise ShapeError(f"got {groups} groups of a symbolic number of {what} channels, expected static "
                             "channels", op=op, arg="groups")
        if static(dim) % groups:
            raise ShapeError(f"got {groups} groups for {static(dim)} {what} channels, expected a divisor of the "
                             f"{what} channels", op=op, arg="groups")


def group_start(outputs, per_group: int, groups: int):
    """``first(o)``: the first of the ``per_group`` channels output channel
    ``o`` (of ``outputs``) reads in its group; None for one group."""
    if groups == 1:
        return None
    step = static(outputs) // groups
    return lambda o: o // step * per_group


def window_out(op: str, dim, kernel: int, stride: int, pad: int, dilation: int = 1):
    """Output length of a sliding window over ``dim`` (padded by ``pad`` both sides)."""
    span = dilation * (kernel - 1) + 1
    if is_static(dim) and static(dim) + 2 * pad < span:
        raise ShapeError(f"the window spans {span} but the padded input has only {static(dim) + 2 * pad}",
                         op=op, arg="shapes")
    return (static(dim) + 2 * pad - span) // stride + 1


def pad_spatial(x, layout: str, padding: tuple, fill, name: str, far: tuple = (0, 0)):
    """``x`` (4-D in ``layout``, or NCHW[c]c with layout ``NCHW``) with
    ``padding`` rows/columns of ``fill`` on both sides of H and W, and
    ``far`` more past their far edges; ``x`` itself when there is none."""
    ph, pw = padding
    if not (ph or pw or any(far)):
        return x
    ha, wa = spatial_axes(layout)  # NCHW's also hold for a blocked (N, C / c, H, W, c)
    shape = list(x.shape)
    h, w = shape[ha], shape[wa]
    shape[ha], shape[wa] = h + 2 * ph + far[0], w + 2 * pw + far[1]

    def body(*i):
        inside = tirx.all(i[ha] >= ph, i[ha] < h + ph, i[wa] >= pw, i[wa] < w + pw)
        src = list(i)
        src[ha], src[wa] = i[ha] - ph, i[wa] - pw
        return tirx.if_then_else(inside, x(*src), fill)

    return te.compute(shape, body, name=name, tag="injective")


def crop(t, axes: tuple, starts: tuple, lengths: tuple):
    """``t[start:start + length]`` along each of ``axes`` (a getitem when it cuts)."""
    shape = tuple(t.shape)
    if all(s == 0 and static(shape[a]) == n for a, s, n in zip(axes, starts, lengths)):
        return t
    index = [slice(None)] * len(shape)
    for a, s, n in zip(axes, starts, lengths):
        index[a] = slice(s, s + n, 1)
    return t[tuple(index)]


def _kernel_dims(w, layout: str) -> tuple:
    """``(O, I, KH, KW)`` of a weight shape in ``layout``'s convention."""
    return tuple(w) if layout == "NCHW" else (w[3], w[2], w[0], w[1])


@register
class Conv2d(Op):
    """``conv2d(x, w)``: see the module docstring for layouts and shapes."""

    name = "conv2d"
    compute_bound = True
    fold_weight_axis = 0  # w is OIHW
    grad_inputs = (0, 1)
    grad_output = False
    arity = 2
    family = "conv2d"
    dtypes = FLOATS
    attrs = {
        "layout": LAYOUT,
        "stride": STRIDE, "padding": PADDING, "dilation": DILATION, "groups": GROUPS,
    }

    def infer_shape(self, x, w, layout, stride, padding, dilation, groups=1):
        check_rank4(self.name, x, "x", layout)
        check_rank4(self.name, w, "w", "OIHW" if layout == "NCHW" else "HWIO")
        return _out_shape(self.name, x, w, _kernel_dims(w, layout), layout, stride, padding, dilation, groups)

    def infer_dtype(self, x, w, **attrs):
        return promote(self.name, x, w)

    def compute(self, x, w, layout, stride, padding, dilation, groups=1):
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), layout, stride, padding, dilation, groups)
        dt = promote(self.name, dtype_of(x), dtype_of(w))
        tap = (lambda o, c, y, z: w[o, c, y, z]) if layout == "NCHW" else (lambda o, c, y, z: w[y, z, c, o])
        xp = pad_spatial(x, layout, padding, tirx.const(0, dtype_of(x)), "conv2d_pad")
        # a grouped conv's template copies the padding per task: a test per product would only cost there
        skip = groups == 1 and skips_padding(layout, tuple(x.shape), out, padding, tuple(w.shape[2:4]))
        keep = _inside(tuple(x.shape), padding) if skip else None
        kernel = _kernel_dims(tuple(w.shape), layout)
        return _direct(self, lambda n, c, y, z: xp(*join_nchw(layout, n, c, y, z)), tap, kernel[1:], out, dt,
                       lambda idx: split_nchw(idx, layout), stride, dilation, keep,
                       group_start(kernel[0], static(kernel[1]), groups))

    def reference(self, x, w, layout, stride, padding, dilation, groups=1):
        if layout == "NHWC":
            return _conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), stride, padding,
                              dilation, groups).transpose(0, 2, 3, 1)
        return _conv_nchw(x, w, stride, padding, dilation, groups)

    def flops(self, shapes, **attrs):
        x, w = shapes
        return _flops(self.infer_shape(x, w, **attrs), _kernel_dims(w, attrs["layout"])[1:])

    def gradient(self, g, node):
        x, w = node.inputs
        attrs = node.attrs
        window = {k: attrs[k] for k in ("stride", "padding", "dilation")}
        groups = attrs.get("groups", 1)
        nchw = attrs["layout"] == "NCHW"
        if not wants_grad(w):
            gw = None
        elif nchw:  # the weight gradient's own op and template (te/conv_grad.py)
            gw = backward_weight(x, g, kernel=tuple(w.shape[2:]), groups=groups, **window)
        elif groups == 1:
            gw = _grad_w(g, x, w, "NHWC", **window)
        else:  # the NCHW op on transposed values (HWIO is OIHW transposed)
            gw = backward_weight(x.permute(0, 3, 1, 2), g.permute(0, 3, 1, 2), kernel=tuple(w.shape[:2]),
                                 groups=groups, **window).permute(2, 3, 1, 0)
        if not wants_grad(x):
            gx = None
        elif nchw:  # the transposed convolution as an op (te/conv_grad.py)
            gx = backward_data(g, w, in_size=tuple(x.shape[2:]), groups=groups, **window)
        elif groups == 1:
            gx = _grad_x(g, x, w, "NHWC", **window)
        else:
            gx = backward_data(g.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), in_size=tuple(x.shape[1:3]),
                               groups=groups, **window).permute(0, 2, 3, 1)
        return (as_dtype(gx, x.dtype) if gx is not None else None,
                as_dtype(gw, w.dtype) if gw is not None else None)


def _out_shape(op: str, x, w, kernel: tuple, layout: str, stride, padding, dilation, groups: int = 1) -> tuple:
    """The output shape of a convolution of ``x`` with weight ``w`` whose
    ``kernel = (O, I, KH, KW)`` (I per group); checks the kernel size is
    static and the channels and groups agree."""
    n, c, h, wd = split_nchw(x, layout)
    o, i, kh, kw = kernel
    if not (is_static(kh) and is_static(kw)):
        raise ShapeError(f"got w {shape_str(w)}, expected a static kernel size", op=op, arg="w")
    check_groups(op, groups, c, o)
    if groups > 1 and not (is_static(i) and static(c) == static(i) * groups):
        raise ShapeError(f"got x {shape_str(x)} with {static(c)} channels but w {shape_str(w)} expects {static(i)} "
                         f"per group x {groups} groups ({layout})", op=op, arg="w")
    if groups == 1 and not same_dim(c, i):
        raise ShapeError(f"got x {shape_str(x)} with {static(c)} channels but w {shape_str(w)} expects "
                         f"{static(i)} ({layout})", op=op, arg="w")
    oh = window_out(op, h, static(kh), stride[0], padding[0], dilation[0])
    ow = window_out(op, wd, static(kw), stride[1], padding[1], dilation[1])
    return join_nchw(layout, n, o, oh, ow)


#: a conv2d whose output map is at most this many rows and columns leaves out the products of padded taps
#: (``skips_padding``); a template unrolls the map so the test is a constant of each product
SKIP_PADDING_MAX = 16
#: the most products per output channel (output positions x kernel taps) of
#: an unrolled map: a 16 x 16 map under a 3x3 kernel. LLVM's time grows with
#: the unrolled code: a 7x7 stem on a 16 x 16 map (12,544) took 17 s to compile
SKIP_PADDING_MAX_STEPS = 16 * 16 * 9


def skips_padding(layout: str, x_shape, out_shape, padding, kernel) -> bool:
    """Whether an NCHW conv2d leaves out the products that read its zero
    padding instead of multiplying by zero, as oneDNN's kernels do: on a 7x7
    map with a 3x3 kernel 18% of the products, on 14x14 9%. Only for static
    maps of at most ``SKIP_PADDING_MAX`` rows and columns and
    ``SKIP_PADDING_MAX_STEPS`` products per channel (``kernel``: its rows and
    columns), which a template unrolls whole (each product's test then folds
    away); elsewhere the test would stay in the loop."""
    dims = (*x_shape[2:4], *out_shape[2:4], *kernel)
    if layout != "NCHW" or not any(padding) or not all(isinstance(static(d), int) for d in dims):
        return False
    oh, ow, kh, kw = (static(d) for d in (*out_shape[2:4], *kernel))
    return max(oh, ow) <= SKIP_PADDING_MAX and oh * ow * kh * kw <= SKIP_PADDING_MAX_STEPS


def _inside(x_shape, padding):
    """``keep(y, x)`` for a padded input: the position is not padding."""
    (ph, pw), (h, w) = padding, x_shape[2:4]
    return lambda y, x: tirx.all(y >= ph, y < h + ph, x >= pw, x < w + pw)


def _direct(op: Op, read, tap, kernel: tuple, out: tuple, dt: str, split, stride, dilation, keep=None, first=None):
    """The direct convolution producing ``out``: the one TE body behind
    ``conv2d`` and ``conv2d_packed``, which differ only in where a value
    lives. ``read(n, c, y, x)`` is the zero-padded input (``conv2d_pad``),
    ``tap(o, c, ky, kx)`` the weight over ``kernel = (I, KH, KW)``, and
    ``split(index)`` an output index as ``(n, o, y, x)``, ``o`` whatever
    ``tap`` takes. ``keep(y, x)``, when given, says which input positions
    the sum takes: a product elsewhere is left out, not multiplied by zero.
    ``first(o)``, for a grouped convolution, is the first input channel of
    ``o``'s group: ``read`` then takes channel ``first(o) + c`` (``tap``
    still ``c``, the channel within the group)."""
    ci, kh, kw = kernel
    rc, ry, rx = te.reduce_axis((0, ci), "rc"), te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    (sh, sw), (dh, dw) = stride, dilation

    def body(*idx):
        n, o, i, j = split(idx)
        y, x = i * sh + ry * dh, j * sw + rx * dw
        c = rc if first is None else first(o) + rc
        product = read(n, c, y, x).astype(dt) * tap(o, rc, ry, rx).astype(dt)
        if keep is not None:
            product = tirx.if_then_else(keep(y, x), product, tirx.const(0, dt))
        return te.sum(product, axis=[rc, ry, rx])

    return te.compute(out, body, name=op.name, tag=op.family)


def _flops(out: tuple, kernel: tuple) -> float:
    """Multiply-adds (x2) of a convolution producing ``out`` with ``kernel = (I, KH, KW)``; 0 when symbolic."""
    total = 2 * size(out) * static(kernel[0]) * static(kernel[1]) * static(kernel[2])
    return float(total) if isinstance(total, int) else 0.0


def _conv_nchw(x, w, stride, padding, dilation, groups: int = 1):
    (ph, pw), (sh, sw), (dh, dw) = padding, stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2:]
    span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    # optimize: BLAS's products over a copy of the windows (the plain einsum loops in numpy: 20x slower on a
    # 256-channel 3x3 layer at 56 x 56, 4.3 s; kiln.quantize's error report reads two per layer). Grouped,
    # the products are small and the copy costs more (a depthwise layer 5x, 32 groups of 8 channels 2x)
    if groups == 1:
        return np.einsum("nchwyx,ocyx->nohw", win, w, optimize=True).astype(np.result_type(x, w))
    n, c, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, c // groups, oh, ow, kh, kw)
    out = np.einsum("ngchwyx,gocyx->ngohw", win, w.reshape(groups, -1, *w.shape[1:]))
    return out.reshape(n, -1, oh, ow).astype(np.result_type(x, w))


def _dilate(g, axes: tuple, stride: tuple):
    """``g`` with ``stride - 1`` zeros after each element along each of ``axes``
    (length ``n * stride``): the output gradient on the input's grid."""
    if stride[0] == stride[1]:
        return dilate(g, axes=axes, dilation=stride[0] - 1) if stride[0] > 1 else g
    for a, s in zip(axes, stride):
        g = dilate(g, axes=(a,), dilation=s - 1) if s > 1 else g
    return g


def _grad_x(g, x, w, layout, stride, padding, dilation):
    """A full (padding ``dil * (K - 1)``) convolution of the dilated output
    gradient with the flipped kernel, channels swapped; its padded-input
    gradient is then cropped to the unpadded input."""
    axes = spatial_axes(layout)
    _, _, kh, kw = _kernel_dims(tuple(w.shape), layout)
    if layout == "NCHW":
        wt = w.flip((2, 3)).permute(1, 0, 2, 3)
    else:
        wt = w.flip((0, 1)).permute(0, 1, 3, 2)
    full = ((kh - 1) * dilation[0], (kw - 1) * dilation[1])
    gx = conv2d(_dilate(g, axes, stride), wt, layout=layout, padding=full, dilation=dilation)
    # The full convolution covers every padded-input position (it may run past the end).
    return crop(gx, axes, padding, tuple(static(x.shape[a]) for a in axes))


def _grad_w(g, x, w, layout, stride, padding, dilation):
    """A convolution of the input (batch and channels swapped) with the dilated
    output gradient as kernel, strided by the forward dilation."""
    axes = spatial_axes(layout)
    _, _, kh, kw = _kernel_dims(tuple(w.shape), layout)
    # Trailing zeros of the dilation would make the kernel overrun the input: cut them.
    taps = tuple((static(g.shape[a]) - 1) * s + 1 for a, s in zip(axes, stride))
    gd = crop(_dilate(g, axes, stride), axes, (0, 0), taps)
    if layout == "NCHW":
        xt, gt, back = x.permute(1, 0, 2, 3), gd.permute(1, 0, 2, 3), (1, 0, 2, 3)
    else:
        xt, gt, back = x.permute(3, 1, 2, 0), gd.permute(1, 2, 0, 3), (1, 2, 0, 3)
    gw = conv2d(xt, gt, layout=layout, padding=padding, stride=dilation)
    return crop(gw, axes, (0, 0), (kh, kw)).permute(back)
