"""ONNX neural-network ops: convolutions, pooling, normalizations, Gemm and
MatMul, softmax, LRN and resizing."""
from __future__ import annotations

import math

import numpy as np

from ..te import call
from . import ops
from .onnx_table import converter
from .values import dim, ints, is_kiln, known, materialize, shape_of


def _spatial_pads(node, in_sizes, kernel, strides, dilations) -> tuple:
    """(begins..., ends...) from ``pads`` or ``auto_pad``."""
    auto = node.attr("auto_pad", "NOTSET")
    n = len(in_sizes)
    if auto in ("NOTSET", b"NOTSET"):
        pads = node.attr("pads") or [0] * (2 * n)
        return tuple(int(p) for p in pads)
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return (0,) * (2 * n)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.refuse("auto_pad", auto, "NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return tuple(begins + ends)


def _conv_geometry(node, x_shape, kernel):
    n = len(kernel)
    strides = tuple(node.attr("strides") or [1] * n)
    dilations = tuple(node.attr("dilations") or [1] * n)
    in_sizes = [dim(d) for d in x_shape[2:]]
    if not all(isinstance(s, int) for s in in_sizes):
        raise node.fail("a symbolic spatial size; kiln's convolutions need static image sizes")
    return strides, dilations, _spatial_pads(node, in_sizes, kernel, strides, dilations)


@converter("Conv")
def conv(node, x, w, b=None):
    kernel = tuple(shape_of(w)[2:])
    if len(kernel) not in (1, 2):
        raise node.fail(f"a {len(kernel)}-D convolution; kiln has 1-D and 2-D convolutions")
    strides, dilations, pads = _conv_geometry(node, x.shape, kernel)
    if len(kernel) == 1:
        pads = (pads[0], pads[1])
    else:
        pads = (pads[0], pads[1], pads[2], pads[3])
    return ops.conv2d(x, w, b, strides, pads, dilations, int(node.attr("group", 1)))


def _transposed_pads(node, full, sizes, strides) -> tuple:
    """(begins, ends) cropped off a transposed convolution's ``full`` output
    (negative: zeros added), from ``pads``, ``output_shape`` or ``auto_pad``."""
    n = len(full)
    auto, target = node.attr("auto_pad", "NOTSET"), node.attr("output_shape")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise node.refuse("auto_pad", auto, "NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    if auto == "VALID":
        return (0,) * n, (0,) * n
    if target is None and auto != "NOTSET":
        target = [size * s for size, s in zip(sizes, strides)]
    if target is None:
        pads = node.attr("pads") or [0] * (2 * n)
        return tuple(pads[:n]), tuple(pads[n:])
    total = [f - int(t) for f, t in zip(full, list(target)[-n:])]
    if auto == "SAME_UPPER":
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    return tuple(t - t // 2 for t in total), tuple(t // 2 for t in total)


@converter("ConvTranspose")
def conv_transpose(node, x, w, b=None):
    kernel = tuple(shape_of(w)[2:])
    n = len(kernel)
    if n not in (1, 2):
        raise node.fail(f"a {n}-D transposed convolution; kiln has 1-D and 2-D ones")
    strides = tuple(node.attr("strides") or [1] * n)
    dilations = tuple(node.attr("dilations") or [1] * n)
    out_pad = tuple(node.attr("output_padding") or [0] * n)
    sizes = [dim(d) for d in shape_of(x)[2:]]
    full = [(size - 1) * s + d * (k - 1) + 1 + op for size, s, d, k, op in
            zip(sizes, strides, dilations, kernel, out_pad)]
    begins, ends = _transposed_pads(node, full, sizes, strides)
    if n == 1:  # as a 2-D one of height 1
        x, w = ops.unsqueeze(x, [2]), ops.unsqueeze(w, [2])
        full, strides, dilations, begins, ends = [1, *full], (1, *strides), (1, *dilations), (0, *begins), (0, *ends)
    # the transposed conv is the data gradient of a conv with no padding; the padding crops its output
    attrs = {"in_size": tuple(full), "stride": tuple(strides), "dilation": tuple(dilations)}
    group = int(node.attr("group", 1))
    if group != 1:
        attrs["groups"] = group
    y = call("conv2d_backward_data", x, materialize(w, "ConvTranspose"), **attrs)
    y = ops.pad(y, [(0, 0), (0, 0)] + [(-lo, -hi) for lo, hi in zip(begins, ends)])
    if n == 1:
        y = ops.squeeze(y, [2])
    if b is not None:
        y = ops.binary("add", y, ops.reshape(b, [1, -1] + [1] * n))
    return y


def _pool(node, x, kind: str):
    kernel = tuple(node.attr("kernel_shape"))
    if len(kernel) not in (1, 2):
        raise node.fail(f"a {len(kernel)}-D pooling; kiln has 1-D and 2-D pooling")
    if kind == "max" and node.n_outputs > 1:
        raise node.fail("the Indices output of MaxPool is not supported")
    strides, dilations, pads = _conv_geometry(node, x.shape, kernel)
    if len(kernel) == 1:
        x = ops.unsqueeze(x, [2])
        kernel, strides, dilations = (1, *kernel), (1, *strides), (1, *dilations)
        pads = (0, pads[0], 0, pads[1])
        return ops.squeeze(_pool2d(node, x, kind, kernel, strides, dilations, pads), [2])
    return _pool2d(node, x, kind, kernel, strides, dilations, pads)


def _pool2d(node, x, kind, kernel, strides, dilations, pads):
    top, left, bottom, right = pads
    attrs = {"kernel": kernel, "stride": strides,
             "padding": (top, left) if (top, left) == (bottom, right) else (top, left, bottom, right)}
    if node.attr("ceil_mode", 0):
        attrs["ceil_mode"] = True
    if kind == "max":
        if tuple(dilations) != (1, 1):
            attrs["dilation"] = tuple(dilations)
        return call("max_pool2d", x, **attrs)
    if tuple(dilations) != (1, 1):
        raise node.refuse("dilations", list(dilations), "1 for average pooling")
    attrs["count_include_pad"] = bool(node.attr("count_include_pad", 0))
    return call("avg_pool2d", x, **attrs)


@converter("MaxPool")
def max_pool(node, x):
    # a quantized model's codes pool as they are: a max of codes is the code of the max
    return _pool(node, x, "max")


@converter("AveragePool")
def avg_pool(node, x):
    return _pool(node, x, "avg")


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node, x):
    axes = tuple(range(2, len(x.shape)))
    if node.op_type == "GlobalAveragePool" and len(axes) == 2:
        return call("global_avg_pool2d", x)
    return ops.reduce("mean" if node.op_type == "GlobalAveragePool" else "max", x, axes, True)


def _per_channel(v, rank):
    return ops.reshape(v, [1, -1] + [1] * (rank - 2))


@converter("BatchNormalization")
def batch_norm(node, x, scale, bias, mean, var):
    if node.n_outputs > 1 or node.attr("training_mode", 0):
        raise node.fail("training-mode BatchNormalization is not supported (export the model in eval mode)")
    eps = float(node.attr("epsilon", 1e-5))
    factor = ops.binary("divide", scale, ops.unary("sqrt", ops.binary("add", var, np.float32(eps)), np.sqrt))
    shift = ops.binary("subtract", bias, ops.binary("multiply", mean, factor))
    rank = len(x.shape)
    return ops.binary("add", ops.binary("multiply", x, _per_channel(factor, rank)), _per_channel(shift, rank))


@converter("InstanceNormalization")
def instance_norm(node, x, scale, bias):
    eps = float(node.attr("epsilon", 1e-5))
    rank = len(x.shape)
    axes = tuple(range(2, rank))
    mean = ops.reduce("mean", x, axes, True)
    centred = ops.binary("subtract", x, mean)
    var = ops.reduce("mean", ops.binary("multiply", centred, centred), axes, True)
    y = ops.binary("divide", centred, ops.unary("sqrt", ops.binary("add", var, np.float32(eps)), np.sqrt))
    return ops.binary("add", ops.binary("multiply", y, _per_channel(scale, rank)), _per_channel(bias, rank))


@converter("LayerNormalization")
def layer_norm(node, x, scale, bias=None):
    axis = int(node.attr("axis", -1)) % len(x.shape)
    eps = float(node.attr("epsilon", 1e-5))
    if bias is None:
        bias = np.zeros(shape_of(x)[axis:], dtype=np.dtype(str(x.dtype)))
    scale = ops.expand(scale, shape_of(x)[axis:])
    bias = ops.expand(bias, shape_of(x)[axis:])
    if node.n_outputs > 1:
        return _layer_norm_with_stats(x, scale, bias, axis, eps)
    return call("layer_norm", x, materialize(scale, "LayerNormalization"), materialize(bias, "LayerNormalization"),
                axis=axis, eps=eps)


def _layer_norm_with_stats(x, scale, bias, axis: int, eps: float) -> list:
    """LayerNormalization's Y, Mean and InvStdDev outputs, op by op (the
    ``layer_norm`` kernel keeps its statistics to itself)."""
    axes = tuple(range(axis, len(x.shape)))
    mean = ops.reduce("mean", x, axes, True)
    centred = ops.binary("subtract", x, mean)
    var = ops.reduce("mean", ops.binary("multiply", centred, centred), axes, True)
    inv_std = ops.unary("reciprocal", ops.unary("sqrt", ops.binary("add", var, np.float32(eps)), np.sqrt),
                        np.reciprocal)
    y = ops.binary("add", ops.binary("multiply", ops.binary("multiply", centred, inv_std), scale), bias)
    return [y, mean, inv_std]


@converter("Gemm")
def gemm(node, a, b, c=None):
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    ta, tb = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    if ta:
        a = ops.transpose(a)
    n = shape_of(b)[0 if tb else 1]
    if c is not None and beta == 1.0 and alpha == 1.0 and is_kiln(a) and shape_of(c) == (n,):
        return call("dense", a, materialize(ops.transpose(b) if tb else b, "Gemm"), materialize(c, "Gemm"))
    y = call("matmul", materialize(a, "Gemm"), materialize(b, "Gemm"), transpose_b=tb)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = ops.binary("add", y, c if beta == 1.0 else ops.binary("multiply", c, np.float32(beta)))
    return y


@converter("MatMul")
def matmul(node, a, b):
    return ops.matmul(a, b)


def _softmax(node, x, name):
    rank = len(x.shape)
    if node.opset >= 13:
        return call(name, x, axis=int(node.attr("axis", -1)) % rank)
    axis = int(node.attr("axis", 1)) % rank  # before 13: over the dims from axis on, flattened
    if axis == rank - 1:
        return call(name, x, axis=axis)
    shape = shape_of(x)
    return ops.reshape(call(name, ops.flatten(x, axis), axis=1), shape)


@converter("Softmax")
def softmax(node, x):
    return _softmax(node, x, "softmax")


@converter("LogSoftmax")
def log_softmax(node, x):
    return _softmax(node, x, "log_softmax")


@converter("LRN")
def lrn(node, x):
    return call("lrn", x, size=int(node.attr("size")), alpha=float(node.attr("alpha", 1e-4)),
                beta=float(node.attr("beta", 0.75)), bias=float(node.attr("bias", 1.0)))


_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


def _resize_shape(node, x, scales, sizes, axes=None) -> list:
    """A Resize's output shape from ``sizes`` (and ``keep_aspect_ratio_policy``)
    or ``scales``, given for ``axes`` (None: every axis)."""
    in_shape = [dim(d) for d in shape_of(x)]
    rank = len(in_shape)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    out = list(in_shape)
    sizes = [] if sizes is None else ints(sizes, "sizes", node.where)
    if sizes:
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise node.refuse("keep_aspect_ratio_policy", policy, "stretch, not_larger or not_smaller")
        ratios = [s / in_shape[a] for a, s in zip(axes, sizes)]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        for a, size in zip(axes, sizes):
            out[a] = int(size) if policy == "stretch" else int(scale * in_shape[a] + 0.5)
        return out
    factors = known(scales, "scales", node.where).astype(np.float64).reshape(-1)
    for a, factor in zip(axes, factors):
        out[a] = int(math.floor(in_shape[a] * factor))
        if out[a] != in_shape[a] * factor:  # resize2d's scale is the ratio of the sizes
            raise node.fail(f"scale {factor:g} of a dim of {in_shape[a]} gives {out[a]} values, a ratio of "
                            f"{out[a] / in_shape[a]:g}; kiln interpolates at the ratio of the sizes, so it takes "
                            "sizes, or scales that give whole sizes")
    return out


def _resize(node, x, shape, mode, transform, nearest):
    """``resize2d`` of ``x`` to ``shape`` (a function of the input's shape: read once the modes are known)."""
    if mode not in ("nearest", "linear"):
        raise node.refuse("mode", mode, "'nearest' or 'linear'")
    if node.attr("antialias", 0):
        raise node.refuse("antialias", 1, "0")
    if transform not in _TRANSFORMS:
        raise node.refuse("coordinate_transformation_mode", transform, ", ".join(_TRANSFORMS))
    in_shape, out = shape_of(x), shape()
    if len(in_shape) != 4 or tuple(out[:2]) != tuple(in_shape[:2]):
        raise node.fail(f"resizing {tuple(in_shape)} to {tuple(out)}; kiln resizes the last two dims of NCHW "
                        "images")
    attrs = {"size": tuple(out[2:]), "mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    return call("resize2d", x, **attrs)


@converter("Resize")
def resize(node, x, roi=None, scales=None, sizes=None):
    mode = node.attr("mode", "nearest")
    if node.opset < 11:  # (X, scales), asymmetric coordinates
        return _resize(node, x, lambda: _resize_shape(node, x, roi, None), mode, "asymmetric", "floor")
    return _resize(node, x, lambda: _resize_shape(node, x, scales, sizes, node.attr("axes")), mode,
                   node.attr("coordinate_transformation_mode", "half_pixel"),
                   node.attr("nearest_mode", "round_prefer_floor"))


@converter("Upsample")
def upsample(node, x, scales=None):
    scales = node.attr("scales") if scales is None else scales
    return _resize(node, x, lambda: _resize_shape(node, x, scales, None), node.attr("mode", "nearest"),
                   "asymmetric", "floor")
