"""softmax, log_softmax, one_hot and the softmax cross-entropy loss.

All are computed with the max subtracted first, so large logits do not
overflow. The loss takes integer class labels; a label outside ``[0, C)``
cannot be checked when the kernel is compiled and reads as "no class"
(contributes only the log-sum-exp term) — validate labels at the data boundary.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import DTypeError, ShapeError
from . import attrs as A
from . import fastmath, nanmath
from .oprefs import op_ref
from .reduction import accumulator
from .registry import Op, register
from .shapes import FLOATS, INTS, dtype_of, normalize_axis, same_dim, shape_str, size, static

one_hot = op_ref("one_hot")  # the cross-entropy's gradient: an op with no operator (see oprefs)


def _row_stages(x, axis):
    """(max over axis, sum of exp(x - max) over axis), both keepdims-shaped."""
    shape = tuple(x.shape)
    kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
    r1 = te.reduce_axis((0, shape[axis]), "r1")
    r2 = te.reduce_axis((0, shape[axis]), "r2")

    def at(i, r):
        return [r if k == axis else v for k, v in enumerate(i)]

    mx = te.compute(kept, lambda *i: nanmath.max_reducer()(x(*at(i, r1)), axis=r1), name="row_max", tag="softmax")
    total = te.compute(kept, lambda *i: te.sum(fastmath.exp(x(*at(i, r2)) - mx(*i)), axis=r2), name="row_sum",
                       tag="softmax")
    return mx, total


def _kept(i, axis):
    return [0 if k == axis else v for k, v in enumerate(i)]


class RowOp(Op):
    family = "softmax"
    dtypes = FLOATS
    attrs = {"axis": A.Attr(A.integer, default=-1, doc="the axis to normalize over")}

    def infer_shape(self, x, axis):
        if len(x) == 0:
            raise ShapeError("got a 0-d input, expected at least one axis", op=self.name, arg="x")
        normalize_axis(self.name, axis, len(x))
        if static(x[normalize_axis(self.name, axis, len(x))]) == 0:
            raise ShapeError("cannot normalize over a zero-length axis", op=self.name, arg="axis")
        return x

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 4.0 * n if isinstance(n, int) else 0.0


@register
class Softmax(RowOp):
    name = "softmax"
    normalizes_rows = True
    grad_inputs = ()
    grad_output = True

    def compute(self, x, axis):
        """exp(x - max) is its own stage so a schedule can compute it once per
        element (the generic schedule inlines it into both of its readers)."""
        axis = normalize_axis(self.name, axis, len(x.shape))
        shape = tuple(x.shape)
        kept = tuple(1 if i == axis else d for i, d in enumerate(shape))
        r1, r2 = te.reduce_axis((0, shape[axis]), "r1"), te.reduce_axis((0, shape[axis]), "r2")
        at = lambda i, r: [r if k == axis else v for k, v in enumerate(i)]  # noqa: E731
        mx = te.compute(kept, lambda *i: nanmath.max_reducer()(x(*at(i, r1)), axis=r1), name="row_max", tag="softmax")
        e = te.compute(shape, lambda *i: fastmath.exp(x(*i) - mx(*_kept(i, axis))), name="row_exp", tag="softmax")
        total = te.compute(kept, lambda *i: te.sum(e(*at(i, r2)), axis=r2), name="row_sum", tag="softmax")
        return te.compute(shape, lambda *i: e(*i) / total(*_kept(i, axis)), name=self.name, tag=self.family)

    def reference(self, x, axis):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)

    def gradient(self, g, node):
        axis = node.attrs["axis"]
        gs = g * node
        return (gs - node * gs.sum(axis, keepdims=True),)


@register
class LogSoftmax(RowOp):
    name = "log_softmax"
    grad_inputs = ()
    grad_output = True

    def compute(self, x, axis):
        axis = normalize_axis(self.name, axis, len(x.shape))
        mx, total = _row_stages(x, axis)
        return te.compute(x.shape, lambda *i: x(*i) - mx(*_kept(i, axis)) - tirx.log(total(*_kept(i, axis))),
                          name=self.name, tag=self.family)

    def reference(self, x, axis):
        s = x - np.max(x, axis=axis, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))

    def gradient(self, g, node):
        axis = node.attrs["axis"]
        return (g - node.exp() * g.sum(axis, keepdims=True),)


@register
class OneHot(Op):
    name = "one_hot"
    dtypes = INTS
    differentiable = False
    attrs = {"num_classes": A.Attr(A.positive_int, doc="number of classes C"),
             "dtype": A.Attr(A.dtype_name, default="float32", doc="output dtype")}

    def infer_shape(self, labels, num_classes, dtype):
        return tuple(labels) + (num_classes,)

    def infer_dtype(self, labels, num_classes, dtype):
        return dtype

    def compute(self, labels, num_classes, dtype):
        one, zero = tirx.const(1, dtype), tirx.const(0, dtype)
        return te.compute(tuple(labels.shape) + (num_classes,),
                          lambda *i: tirx.Select(labels(*i[:-1]) == tirx.Cast(dtype_of(labels), i[-1]), one, zero),
                          name=self.name, tag="injective")

    def reference(self, labels, num_classes, dtype):
        return (labels[..., None] == np.arange(num_classes)).astype(dtype)


@register
class SoftmaxCrossEntropy(Op):
    """Mean over the batch of ``-log softmax(logits)[i, labels[i]]``: logits (N, C), labels (N,)."""

    name = "softmax_cross_entropy"
    grad_inputs = (0, 1)
    grad_output = False
    arity = 2
    family = "softmax"
    dtypes = FLOATS + INTS

    def infer_shape(self, logits, labels):
        if len(logits) != 2 or len(labels) != 1 or not same_dim(logits[0], labels[0]):
            raise ShapeError(f"got logits {shape_str(logits)} and labels {shape_str(labels)}, expected (N, C) and (N,)",
                             op=self.name, arg="shapes")
        if static(logits[1]) == 0 or static(logits[0]) == 0:
            raise ShapeError(f"got logits {shape_str(logits)}, expected N >= 1 and C >= 1", op=self.name, arg="logits")
        return ()

    def infer_dtype(self, logits, labels):
        if logits not in FLOATS or labels not in INTS:

            raise DTypeError(f"got logits {logits} and labels {labels}, expected float logits and int labels",
                             op=self.name, arg="dtypes")
        return logits

    def compute(self, logits, labels):
        n, c = logits.shape
        dt = dtype_of(logits)
        mx, total = _row_stages(logits, 1)
        rc = te.reduce_axis((0, c), "rc")
        picked = te.compute((n,), lambda i: te.sum(tirx.Select(
            labels[i] == tirx.Cast(dtype_of(labels), rc), logits[i, rc], tirx.const(0, dt)), axis=rc), name="picked",
            tag="softmax")
        rn = te.reduce_axis((0, n), "rn")
        acc = accumulator(dt)  # the batch's losses summed in float64 (te/reduction.py)
        loss = te.compute((), lambda: te.sum((mx[rn, 0] + tirx.log(total[rn, 0]) - picked[rn]).astype(acc), axis=rn),
                          name="loss_sum", tag="softmax")
        return te.compute((), lambda: (loss() / tirx.Cast(acc, n)).astype(dt), name=self.name, tag=self.family)

    def reference(self, logits, labels):
        logp = LogSoftmax.reference(self, logits, 1)
        return np.asarray(-np.mean(logp[np.arange(len(labels)), labels]), dtype=logits.dtype)

    def gradient(self, g, node):
        logits, labels = node.inputs
        n = logits.shape[0]
        diff = logits.softmax(axis=1) - one_hot(labels, num_classes=int(static(logits.shape[1])), dtype=logits.dtype)
        return diff * (g / float(static(n))), None
