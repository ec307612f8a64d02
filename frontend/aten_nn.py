"""Core ATen neural-network ops and reductions, converted to kiln ops
(registered in ``aten_ops.ATEN``)."""
from __future__ import annotations

import numpy as np

from ..errors import FrontendError
from ..te import call
from . import ops
from .aten_ops import aten
from .values import dim, is_kiln, materialize, shape_of


def _pair(v, n=2):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * n if len(v) == 1 else v)


@aten("convolution.default")
def convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    n = len(shape_of(w)) - 2
    if n not in (1, 2):
        raise FrontendError(f"a {n}-D convolution; kiln has 1-D and 2-D ones", where="aten.convolution")
    if transposed:
        if n != 2:
            raise FrontendError("a 1-D transposed convolution is not supported", where="aten.convolution")
        stride, padding, dilation, out_pad = (_pair(v) for v in (stride, padding, dilation, output_padding))
        kernel = shape_of(w)[2:]
        full = [(s_ - 1) * st + d * (k - 1) + 1 + op for s_, st, d, k, op in
                zip(shape_of(x)[2:], stride, dilation, kernel, out_pad)]
        attrs = {"in_size": tuple(full), "stride": stride, "dilation": dilation}
        if groups != 1:
            attrs["groups"] = groups
        y = call("conv2d_backward_data", x, materialize(w, "conv_transpose"), **attrs)
        if any(padding):
            y = ops.slice_(y, list(padding), [full[0] - padding[0], full[1] - padding[1]], [2, 3], [1, 1])
        return y if b is None else ops.binary("add", y, ops.reshape(b, [1, -1, 1, 1]))
    stride, padding, dilation = (_pair(v, n) for v in (stride, padding, dilation))
    pads = tuple(padding) * 2
    return ops.conv2d(x, w, b, stride, pads, dilation, groups)


@aten("_native_batch_norm_legit_no_training.default")
def batch_norm(x, weight, bias, mean, var, momentum, eps):
    factor = ops.unary("reciprocal", ops.unary("sqrt", ops.binary("add", var, np.float32(eps)), np.sqrt),
                       np.reciprocal)
    if weight is not None:
        factor = ops.binary("multiply", factor, weight)
    shift = ops.binary("multiply", ops.unary("negate", mean, np.negative), factor)
    if bias is not None:
        shift = ops.binary("add", shift, bias)
    shape = [1, -1] + [1] * (len(x.shape) - 2)
    y = ops.binary("add", ops.binary("multiply", x, ops.reshape(factor, shape)), ops.reshape(shift, shape))
    return [y, None, None]


@aten("_native_batch_norm_legit_functional.default", "_native_batch_norm_legit.default")
def batch_norm_training(*args, **kwargs):
    raise FrontendError("a BatchNorm in training mode; call module.eval() before from_torch", where="aten.batch_norm")


@aten("native_layer_norm.default")
def layer_norm(x, normalized_shape, weight, bias, eps):
    axis = len(x.shape) - len(normalized_shape)
    dtype = str(x.dtype)
    weight = np.ones(tuple(normalized_shape), dtype) if weight is None else weight
    bias = np.zeros(tuple(normalized_shape), dtype) if bias is None else bias
    return [call("layer_norm", x, materialize(weight, "layer_norm"), materialize(bias, "layer_norm"), axis=axis,
                 eps=float(eps)), None, None]


@aten("max_pool2d_with_indices.default")
def max_pool(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel = _pair(kernel_size)
    stride = _pair(stride) if stride else kernel
    attrs = {"kernel": kernel, "stride": stride, "padding": _pair(padding)}
    if _pair(dilation) != (1, 1):
        attrs["dilation"] = _pair(dilation)
    if ceil_mode:
        attrs["ceil_mode"] = True
    return [call("max_pool2d", x, **attrs), None]


@aten("avg_pool2d.default")
def avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise FrontendError("avg_pool2d with divisor_override is not supported", where="aten.avg_pool2d")
    kernel = _pair(kernel_size)
    attrs = {"kernel": kernel, "stride": _pair(stride) if stride else kernel, "padding": _pair(padding),
             "count_include_pad": bool(count_include_pad)}
    if ceil_mode:
        attrs["ceil_mode"] = True
    return call("avg_pool2d", x, **attrs)


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default")
def adaptive_avg_pool(x, output_size):
    out = _pair(output_size)
    h, w = shape_of(x)[2:]
    if out == (1, 1):
        return call("global_avg_pool2d", x)
    if h % out[0] or w % out[1]:
        raise FrontendError(f"adaptive average pooling of {h}x{w} to {out[0]}x{out[1]}: kiln needs the output size "
                            "to divide the input's", where="aten.adaptive_avg_pool2d")
    kernel = (h // out[0], w // out[1])
    return call("avg_pool2d", x, kernel=kernel, stride=kernel)


@aten("addmm.default")
def addmm(bias, a, b, beta=1, alpha=1):
    if beta == 1 and alpha == 1 and is_kiln(a) and len(shape_of(bias)) == 1:
        return call("dense", a, materialize(b, "addmm"), materialize(bias, "addmm"))
    y = ops.matmul(a, b)
    if alpha != 1:
        y = y * float(alpha)
    return ops.binary("add", y, bias if beta == 1 else ops.binary("multiply", bias, np.float32(beta)))


def addmm_of_transposed(bias, a, w, beta=1, alpha=1):
    """``addmm(bias, a, t(w))`` for a weight ``w`` (out, in) that the
    transpose reads alone (PyTorch's ``linear``; ``torch_import`` joins the
    two): a matmul reading ``w`` transposed in place, then the bias. A
    training step then neither transposes the weight nor its gradient; an
    export makes it a dense layer again (``graph.transposes``)."""
    if beta == 1 and alpha == 1 and is_kiln(a) and len(shape_of(bias)) == 1 and len(shape_of(a)) == 2:
        y = call("matmul", a, materialize(w, "addmm"), transpose_b=True)
        return ops.binary("add", y, bias)
    return addmm(bias, a, ops.transpose(w), beta, alpha)


@aten("mm.default", "bmm.default", "matmul.default")
def mm(a, b):
    return ops.matmul(a, b)


@aten("_softmax.default", "softmax.int")
def softmax(x, d, half_to_float=False):
    return call("softmax", x, axis=d % len(x.shape))


@aten("_log_softmax.default", "log_softmax.int")
def log_softmax(x, d, half_to_float=False):
    return call("log_softmax", x, axis=d % len(x.shape))


def _dims(x, dims):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    return [dims] if isinstance(dims, int) else list(dims)


@aten("mean.dim")
def mean(x, dims=None, keepdim=False, dtype=None):
    return ops.reduce("mean", x, _dims(x, dims), keepdim)


@aten("sum.dim_IntList")
def sum_(x, dims=None, keepdim=False, dtype=None):
    if dtype is not None:
        x = ops.cast(x, dtype)
    elif str(x.dtype) == "bool":
        x = ops.cast(x, "int64")
    return ops.reduce("sum", x, _dims(x, dims), keepdim)


@aten("sum.default")
def sum_all(x, dtype=None):
    return sum_(x, None, False, dtype)


@aten("amax.default")
def amax(x, dims=(), keepdim=False):
    return ops.reduce("max", x, _dims(x, dims), keepdim)


@aten("amin.default")
def amin(x, dims=(), keepdim=False):
    return ops.reduce("min", x, _dims(x, dims), keepdim)


@aten("any.dim", "any.dims", "any.default")
def any_(x, dims=None, keepdim=False):
    as_int = ops.cast(x, "int32")
    return ops.binary("greater", ops.reduce("max", as_int, _dims(x, dims), keepdim), np.asarray(0, "int32"))


@aten("all.dim", "all.dims", "all.default")
def all_(x, dims=None, keepdim=False):
    as_int = ops.cast(x, "int32")
    return ops.binary("greater", ops.reduce("min", as_int, _dims(x, dims), keepdim), np.asarray(0, "int32"))


def _arg(name):
    def convert(x, d=None, keepdim=False):
        if d is None:
            x, d = ops.reshape(x, [-1]), 0
        if not is_kiln(x):
            out = getattr(np, name)(np.asarray(x), axis=d)
            return np.expand_dims(out, d) if keepdim else out
        return call(name, x, axis=d % len(x.shape), keepdims=bool(keepdim))
    return convert


aten("argmax.default")(_arg("argmax"))
aten("argmin.default")(_arg("argmin"))


@aten("cumsum.default")
def cumsum(x, d, dtype=None):
    if dtype is not None:
        x = ops.cast(x, dtype)
    elif str(x.dtype) == "bool":
        x = ops.cast(x, "int64")
    if not is_kiln(x):
        return np.cumsum(np.asarray(x), axis=d)
    return call("cumsum", x, axis=d % len(x.shape))


def _upsample(x, output_size, scales, mode, align_corners=False):
    h, w = shape_of(x)[2:]
    if output_size is None:
        output_size = [int(np.floor(h * scales[0])), int(np.floor(w * scales[1]))]
    attrs = {"size": tuple(int(dim(s)) for s in output_size), "mode": mode}
    if mode == "nearest":
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    else:
        attrs["coordinate_transformation_mode"] = "align_corners" if align_corners else "pytorch_half_pixel"
    return call("resize2d", x, **attrs)


@aten("upsample_nearest2d.vec")
def upsample_nearest(x, output_size, scale_factors):
    return _upsample(x, output_size, scale_factors, "nearest")


@aten("upsample_bilinear2d.vec")
def upsample_bilinear(x, output_size, align_corners, scale_factors):
    return _upsample(x, output_size, scale_factors, "linear", align_corners)


@aten("native_dropout.default")
def dropout(x, p, train):
    if train:
        raise FrontendError("dropout in training mode; call module.eval() before from_torch", where="aten.dropout")
    return [x, None]
