"""Functional forms of kiln's ops, as PyTorch's ``torch.nn.functional`` and
needle's ``ops`` offer them: each applies one registered op (or a Tensor
method that does) through ``kiln.te.call``, so it runs as a compiled kernel,
is differentiable where the op is, and is traced by the exporter like the
methods are. Argument names follow numpy (``axis``/``keepdims``), with
needle's ``axes`` and PyTorch's ``dim``/``keepdim`` accepted where they apply.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from ..errors import AttrError
from ..te import attrs as A
from ..te import call
from ..te.value import ValueOps, pick_alias
from . import init, record
from .activations import (clamp, elu, erf, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu,  # noqa: F401
                          relu6, silu, softplus)
from .attention import scaled_dot_product_attention  # noqa: F401
from .data import check_labels
from .tensor import Tensor


def relu(x):
    """max(x, 0), elementwise."""
    return call("relu", x)


def sigmoid(x):
    """1 / (1 + exp(-x)), elementwise."""
    return call("sigmoid", x)


def tanh(x):
    """The hyperbolic tangent, elementwise."""
    return call("tanh", x)


def exp(x):
    """e to the power of ``x``, elementwise."""
    return call("exp", x)


def log(x):
    """The natural logarithm, elementwise."""
    return call("log", x)


def sqrt(x):
    """The square root, elementwise."""
    return call("sqrt", x)


def negate(x):
    """``-x``, elementwise."""
    return call("negate", x)


def maximum(a, b):
    """Elementwise maximum, broadcasting (NaN where either input is NaN)."""
    return call("maximum", a, b)


def matmul(a, b):
    """numpy's matmul: batched, with 1-D operands promoted as numpy does."""
    return call("matmul", a, b)


def softmax(x, axis: int = -1, *, dim: int | None = None):
    """Softmax along ``axis`` (PyTorch's ``dim``)."""
    return x.softmax(axis, dim=dim)


def log_softmax(x, axis: int = -1, *, dim: int | None = None):
    """The logarithm of the softmax along ``axis`` (PyTorch's ``dim``)."""
    return x.log_softmax(axis, dim=dim)


def logsumexp(x, axes=None, keepdims: bool = False, *, axis=None, dim=None, keepdim=None):
    """``log(sum(exp(x)))`` over ``axes`` (needle's argument name; all axes by default)."""
    return x.logsumexp(axis, keepdims, axes=axes, dim=dim, keepdim=keepdim)


def summation(x, axes=None, keepdims: bool = False, *, axis=None, dim=None, keepdim=None):
    """needle's name for ``sum``."""
    return x.sum(axis, keepdims, axes=axes, dim=dim, keepdim=keepdim)


def sum(x, axis=None, keepdims: bool = False, *, axes=None, dim=None, keepdim=None):  # noqa: A001
    """The sum over ``axis`` (all axes by default)."""
    return x.sum(axis, keepdims, axes=axes, dim=dim, keepdim=keepdim)


def mean(x, axis=None, keepdims: bool = False, *, axes=None, dim=None, keepdim=None):
    """The mean over ``axis`` (all axes by default)."""
    return x.mean(axis, keepdims, axes=axes, dim=dim, keepdim=keepdim)


def max(x, axis=None, keepdims: bool = False, *, axes=None, dim=None, keepdim=None):  # noqa: A001
    """The maximum over ``axis`` (all axes by default)."""
    return x.max(axis, keepdims, axes=axes, dim=dim, keepdim=keepdim)


def reshape(x, shape: Sequence[int]):
    """``x``'s elements in a tensor of ``shape`` (of the same size)."""
    return x.reshape(tuple(shape))


def broadcast_to(x, shape: Sequence[int]):
    """``x`` broadcast to ``shape`` by numpy's rules."""
    return x.broadcast_to(shape)


def transpose(x, axes=None, dim1=None):
    """Swap two axes (the last two by default), as needle and PyTorch do."""
    return x.transpose(axes, dim1)


def permute(x, *dims):
    """Reorder all axes: ``permute(x, 1, 0, 2)`` or ``permute(x, (1, 0, 2))``."""
    return x.permute(*dims)


def flip(x, axes=None, *, axis=None, dims=None):
    """Reverse the elements along ``axes`` (all by default)."""
    return x.flip(axis, axes=axes, dims=dims)


def pad(x, pad_width, value=0):
    """numpy's constant ``pad``: ``pad_width`` is ``((before, after), ...)``, one pair per axis."""
    return call("pad", x, pad_width=pad_width, value=value)


def stack(tensors: Sequence, axis: int = 0, *, dim: int | None = None):
    """Join values of one shape along a new axis."""
    return call("stack", *tensors, axis=_axis("stack", axis, dim))


def concatenate(tensors: Sequence, axis: int = 0, *, dim: int | None = None):
    """Join values along an existing axis."""
    return call("concatenate", *tensors, axis=_axis("concatenate", axis, dim))


cat = concatenate


def chunk(x, chunks: int, axis: int = 0, *, dim: int | None = None) -> list:
    """``chunks`` equal parts along ``axis`` (PyTorch's ``chunk``, numpy's ``split`` with an int)."""
    return call("split", x, sections=chunks, axis=_axis("chunk", axis, dim))


def where(condition, a, b):
    """``a`` where ``condition`` (bool) holds, else ``b``, broadcasting."""
    return call("where", condition, a, b)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the last ``len(normalized_shape)`` dims (one kernel,
    with its gradient); ``weight``/``bias`` default to ones and zeros."""
    dims = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    dtype = str(x.dtype)
    weight = Tensor(np.ones(dims, dtype)) if weight is None else weight
    bias = Tensor(np.zeros(dims, dtype)) if bias is None else bias
    return call("layer_norm", x, weight, bias, axis=len(x.shape) - len(dims), eps=float(eps))


def embedding(indices, weight):
    """Rows of ``weight`` (num_embeddings, dim) at ``indices`` (int): the
    lookup's gradient adds into the rows it read."""
    return call("take", weight, indices, axis=0)


def one_hot(labels, num_classes: int, dtype: str = "float32"):
    """Integer labels (...) in ``[0, num_classes)`` -> (..., num_classes) rows of
    the identity; host labels outside that range raise (see ``cross_entropy``)."""
    return call("one_hot", _host_labels(labels, num_classes, "one_hot"), num_classes=num_classes, dtype=dtype)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """PyTorch's NCHW convolution (``torch.nn.functional.conv2d``).

    Parameters
    ----------
    x : Tensor
        (N, C, H, W).
    weight : Tensor
        (O, C / groups, KH, KW).
    bias : Tensor, optional
        (O,).
    stride, dilation : int or (int, int)
    padding : int, (int, int), 'same' or 'valid'
        Zeros on both sides of H and W. ``'same'`` keeps H and W (stride 1
        only); where the dilated kernel's span is even, the extra row or
        column goes after, as in PyTorch. ``'valid'`` is 0.
    groups : int, default 1
        Channel groups: input and output channels are split into ``groups``
        parts, and part ``g`` of the output sees part ``g`` of the input.

    Returns
    -------
    Tensor
        (N, O, OH, OW).
    """
    (top, bottom), (left, right) = _conv_pads("conv2d", padding, tuple(weight.shape[2:]), stride, dilation)
    if (top, left) != (bottom, right):  # the conv pads symmetrically; the rest goes after, as PyTorch's 'same'
        near_h, near_w = min(top, bottom), min(left, right)
        x = pad(x, ((0, 0), (0, 0), (top - near_h, bottom - near_h), (left - near_w, right - near_w)))
        top, left = near_h, near_w
    y = call("conv2d", x, weight, stride=stride, padding=(top, left), dilation=dilation, groups=groups)
    return y if bias is None else y + bias.reshape(1, bias.shape[0], 1, 1)


def _conv_pads(where: str, padding, kernel: tuple, stride, dilation) -> tuple:
    """``((top, bottom), (left, right))``: the zeros PyTorch's ``padding``
    argument (an int, a pair, ``'same'`` or ``'valid'``) adds around H and W
    for a ``kernel`` (kh, kw) at ``stride`` and ``dilation``."""
    if not isinstance(padding, str):
        ph, pw = A.int_tuple(2, minimum=0)(where, "padding", padding)
        return (ph, ph), (pw, pw)
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding != "same":
        raise AttrError(f"got {padding!r}, expected an int, an (h, w) pair, 'same' or 'valid'", where=where,
                        arg="padding")
    if A.int_tuple(2, minimum=1)(where, "stride", stride) != (1, 1):
        raise AttrError(f"got 'same' with stride {stride!r}: 'same' keeps H and W at stride 1 only (as in "
                        "PyTorch)", where=where, arg="padding")
    spans = [d * (k - 1) for d, k in zip(A.int_tuple(2, minimum=1)(where, "dilation", dilation), kernel)]
    return tuple((span // 2, span - span // 2) for span in spans)


def conv(x, weight, stride=1, padding=0):
    """needle's NHWC convolution: x (N, H, W, C), weight (KH, KW, C, O)."""
    return call("conv2d", x, weight, stride=stride, padding=padding, layout="NHWC")


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """NCHW max pooling, with ``torch.nn.functional.max_pool2d``'s arguments.

    Parameters
    ----------
    x : Tensor
        (N, C, H, W).
    kernel_size, padding, dilation : int or (int, int)
        The window, the padding on both sides of H and W (at most half the
        window; it never wins the max), the spacing of the window's taps.
    stride : int or (int, int), optional
        The kernel by default.
    ceil_mode : bool, default False
        Round the output size up: a last window that starts inside the input
        or its near padding is kept.
    return_indices : bool
        False only: kiln does not return the argmax.

    Returns
    -------
    Tensor
        (N, C, OH, OW).
    """
    _only("max_pool2d", "return_indices", return_indices, False)
    return call("max_pool2d", x, kernel=kernel_size, stride=stride, padding=padding, dilation=dilation,
                ceil_mode=ceil_mode)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override=None):
    """NCHW average pooling, with ``torch.nn.functional.avg_pool2d``'s arguments.

    Parameters
    ----------
    x : Tensor
        (N, C, H, W).
    kernel_size, padding : int or (int, int)
        The window and the padding on both sides of H and W (at most half
        the window).
    stride : int or (int, int), optional
        The kernel by default.
    ceil_mode : bool, default False
        Round the output size up, as ``max_pool2d``.
    count_include_pad : bool, default True
        Divide by the window's size with its padding, as PyTorch does by
        default; False: by the number of input elements in the window.
    divisor_override : None
        None only.

    Returns
    -------
    Tensor
        (N, C, OH, OW).
    """
    _only("avg_pool2d", "divisor_override", divisor_override, None)
    return call("avg_pool2d", x, kernel=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                count_include_pad=count_include_pad)


def _only(where: str, arg: str, value, supported) -> None:
    """PyTorch's argument ``arg`` is accepted at its ``supported`` value only."""
    if type(value) is not type(supported) or value != supported:
        raise AttrError(f"got {value!r}; kiln supports {supported!r} only", where=where, arg=arg)


def dropout(x, p: float = 0.5, training: bool = True):
    """Zero each element with probability ``p`` and scale the rest by
    ``1 / (1 - p)`` while ``training``; the mask comes from the seeded family
    (``kiln.manual_seed``)."""
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0 <= p <= 1:
        raise AttrError(f"got {p!r}, expected a probability in [0, 1]", where="dropout", arg="p")
    if not training or p == 0:
        return x
    if p == 1:
        return x * 0.0
    return x * _mask(tuple(x.shape), 1 - p, x.dtype) * (1.0 / (1 - p))


def _mask(shape: tuple, keep: float, dtype: str):
    """Bernoulli(``keep``) values of ``dtype``; under ``kiln.compile``'s
    recorder a random feed, drawn afresh at every compiled call."""
    recorder = record.active()
    if recorder is None or not recorder.on_thread():
        return init.randb(*shape, p=keep, dtype=dtype)
    with recorder.random_feed(lambda: init.randb(*shape, p=keep, dtype=dtype)._array):
        return init.randb(*shape, p=keep, dtype=dtype)


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of ``logits`` (N, C) against integer class
    ``labels`` (N,) in ``[0, C)``.

    The kernel cannot tell a label outside ``[0, C)`` from "no class" (it would
    return a loss), so the labels are checked here: numpy labels at once, a
    Tensor's after waiting for that tensor alone (its values are host data in
    practice). A traced value's labels are not known, so not checked.
    """
    shape = logits.shape if hasattr(logits, "shape") else np.shape(logits)
    classes = shape[-1] if len(shape) and isinstance(shape[-1], int) else None
    return call("softmax_cross_entropy", logits, _host_labels(labels, classes, "cross_entropy"))


def _host_labels(labels, classes, where: str):
    """``labels`` as a kiln value, checked against ``classes`` where the values are known."""
    if isinstance(labels, ValueOps) and not isinstance(labels, Tensor):
        return labels
    values = check_labels(labels.numpy() if isinstance(labels, Tensor) else labels, classes, where)
    return labels if isinstance(labels, Tensor) else Tensor(values.astype("int32"))


def _axis(op: str, axis: int, dim: int | None) -> int:
    """numpy's ``axis`` or PyTorch's ``dim`` (``axis`` keeps its default of 0)."""
    return axis if dim is None else pick_alias(op, axis=axis or None, dim=dim)
