"""Batch normalization in training as two kernels instead of some thirty.

``batch_norm_train(x, gamma, beta, eps)``: ``x`` is (N, C, ...) and is
normalized per channel (axis 1) over every other axis with its batch
statistics; outputs ``y = (x - mean) / sqrt(var + eps) * gamma + beta``,
``mean`` (C,) and the biased ``var`` (C,) (for the running statistics). The
variance is computed from the centered values (two passes over ``x``), not
as E[x^2] - E[x]^2.

Its gradient is one kernel, ``batch_norm_train_grad(gy, x, gamma, gmean,
gvar, eps)`` -> ``(dx, dgamma, dbeta)``, which computes the statistics of
``x`` again (two passes over it: a gradient sees the op's inputs on every
backend, its other outputs not); with ``xhat = (x - mean) * invstd`` and M
the elements per channel,
``dbeta = sum(gy)``, ``dgamma = sum(gy * xhat)``,
``dx = gamma * invstd / M * (M gy - dbeta - xhat dgamma) + gmean / M +
2 gvar (x - mean) / M`` (the last two terms are the statistics' own
gradients, zero when only ``y`` is used).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import GradError, ShapeError
from . import attrs as A
from .oprefs import op_ref
from .registry import Op, register
from .grad import as_dtype
from .shapes import dtype_of, promote, same_dim, shape_str, size, static

FLOATS = ("float32", "float64")
batch_norm_train_grad = op_ref("batch_norm_train_grad")  # the forward's gradient: one kernel
EPS = {"eps": A.Attr(A.positive_float, default=1e-5, doc="added to the variance")}


def _check_channels(name: str, x, *per_channel) -> None:
    if len(x) < 2:
        raise ShapeError(f"got x of shape {shape_str(x)}, expected (N, C, ...)", op=name, arg="x")
    for arg, s in per_channel:
        if len(s) != 1 or not same_dim(s[0], x[1]):
            raise ShapeError(f"got {arg} of shape {shape_str(s)}, expected ({x[1]},): one value per channel",
                             op=name, arg=arg)


def _axes(ndim: int) -> tuple:
    return (0,) + tuple(range(2, ndim))


class _PerChannel:
    """Index helpers for reducing an (N, C, ...) tensor over every axis but 1."""

    def __init__(self, x):
        self.shape = tuple(x.shape)
        self.count = size([self.shape[a] for a in _axes(len(self.shape))])

    def reduce(self, tag: str) -> tuple:
        """``(reduce axes, index(c))``: x's index for channel ``c`` at the axes."""
        raxes = [te.reduce_axis((0, self.shape[a]), f"{tag}{a}") for a in _axes(len(self.shape))]

        def index(c):
            return [raxes[0], c] + raxes[1:]
        return raxes, index

    def statistics(self, x, dt: str, name: str) -> tuple:
        """The per-channel mean and biased variance of ``x`` in ``dt`` (two passes)."""
        inv = tirx.const(1.0, dt) / tirx.Cast(dt, self.count)
        r, at = self.reduce("m")
        mean = te.compute((self.shape[1],), lambda c: te.sum(x(*at(c)).astype(dt) * inv, axis=r),
                          name=f"{name}_mean", tag="norm")
        r2, at2 = self.reduce("v")

        def centered(c):
            return x(*at2(c)).astype(dt) - mean[c]
        var = te.compute((self.shape[1],), lambda c: te.sum(centered(c) * centered(c) * inv, axis=r2),
                         name=f"{name}_var", tag="norm")
        return mean, var


@register
class BatchNormTrain(Op):
    """See the module docstring."""

    name = "batch_norm_train"
    family = "norm"
    arity = 3
    multi_output = True
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False
    attrs = EPS

    def infer_shape(self, x, gamma, beta, eps):
        _check_channels(self.name, x, ("gamma", gamma), ("beta", beta))
        if any(static(x[a]) == 0 for a in _axes(len(x))):
            raise ShapeError(f"got x of shape {shape_str(x)}: no values per channel, expected at least one to take "
                             "the batch's statistics of", op=self.name, arg="x")
        return [tuple(x), (x[1],), (x[1],)]

    def infer_dtype(self, x, gamma, beta, eps):
        return [promote(self.name, x, gamma, beta)] * 3

    def compute(self, x, gamma, beta, eps):
        dt, pc = promote(self.name, dtype_of(x), dtype_of(gamma), dtype_of(beta)), _PerChannel(x)
        mean, var = pc.statistics(x, dt, self.name)
        y = te.compute(pc.shape, lambda *i: (x(*i).astype(dt) - mean[i[1]]) * te.rsqrt(var[i[1]] + tirx.const(eps, dt))
                       * gamma[i[1]].astype(dt) + beta[i[1]].astype(dt), name=self.name, tag="norm")
        return [y, mean, var]

    def reference(self, x, gamma, beta, eps):
        dt, axes = np.result_type(x, gamma, beta), _axes(x.ndim)
        x = x.astype(dt)
        mean = x.mean(axis=axes)
        var = ((x - _col(mean, x.ndim)) ** 2).mean(axis=axes)
        y = (x - _col(mean, x.ndim)) / np.sqrt(_col(var, x.ndim) + eps) * _col(gamma, x.ndim) + _col(beta, x.ndim)
        return [y.astype(dt), mean.astype(dt), var.astype(dt)]

    def gradient(self, out_grads, node):
        gy, gmean, gvar = out_grads
        if getattr(type(gy), "_kiln_recording", lambda: False)():  # autograd records this gradient (create_graph)
            raise GradError("gradients of a training-mode BatchNorm's gradient (create_graph=True through it) "
                            "are not supported", op=self.name, arg="create_graph")
        x, gamma, beta = node.inputs
        dx, dgamma, dbeta = batch_norm_train_grad(gy, x, gamma, gmean, gvar, **node.attrs)
        return as_dtype(dx, x.dtype), as_dtype(dgamma, gamma.dtype), as_dtype(dbeta, beta.dtype)

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 8.0 * n if isinstance(n, int) else 0.0


@register
class BatchNormTrainGrad(Op):
    """See the module docstring (its own gradient, a double backward through a
    training-mode BatchNorm, is refused by ``batch_norm_train``'s)."""

    name = "batch_norm_train_grad"
    family = "norm"
    arity = 5
    multi_output = True
    differentiable = False
    dtypes = FLOATS
    grad_inputs = ()
    grad_output = False
    attrs = EPS

    def infer_shape(self, gy, x, gamma, gmean, gvar, eps):
        if len(gy) != len(x) or not all(same_dim(a, b) for a, b in zip(gy, x)):
            raise ShapeError(f"got gy of shape {shape_str(gy)}, expected x's {shape_str(x)}", op=self.name, arg="gy")
        _check_channels(self.name, x, ("gamma", gamma), ("gmean", gmean), ("gvar", gvar))
        return [tuple(x), (x[1],), (x[1],)]

    def infer_dtype(self, *dtypes, eps):
        return [promote(self.name, *dtypes)] * 3

    def compute(self, gy, x, gamma, gmean, gvar, eps):
        dt = promote(self.name, *(dtype_of(t) for t in (gy, x, gamma, gmean, gvar)))
        pc = _PerChannel(x)
        count = tirx.Cast(dt, pc.count)
        mean, var = pc.statistics(x, dt, self.name)

        def invstd(c):
            return te.rsqrt(var[c] + tirx.const(eps, dt))

        r, at = pc.reduce("b")
        dbeta = te.compute((pc.shape[1],), lambda c: te.sum(gy(*at(c)).astype(dt), axis=r),
                           name=f"{self.name}_beta", tag="norm")
        r2, at2 = pc.reduce("g")
        raw = te.compute((pc.shape[1],), lambda c: te.sum(gy(*at2(c)).astype(dt) * (x(*at2(c)).astype(dt) - mean[c]),
                                                          axis=r2),
                         name=f"{self.name}_gamma_sum", tag="norm")
        dgamma = te.compute((pc.shape[1],), lambda c: raw[c] * invstd(c), name=f"{self.name}_gamma", tag="norm")

        def dx(*i):
            c, centered = i[1], x(*i).astype(dt) - mean[i[1]]
            xhat = centered * invstd(c)
            main = gamma[c].astype(dt) * invstd(c) / count * (count * gy(*i).astype(dt) - dbeta[c] - xhat * dgamma[c])
            return main + (gmean[c].astype(dt) + tirx.const(2.0, dt) * gvar[c].astype(dt) * centered) / count

        return [te.compute(pc.shape, dx, name=self.name, tag="norm"), dgamma, dbeta]

    def reference(self, gy, x, gamma, gmean, gvar, eps):
        dt = np.result_type(gy, x, gamma, gmean, gvar)
        gy, x = gy.astype(dt), x.astype(dt)
        axes, n = _axes(x.ndim), x.size // x.shape[1]
        mean = x.mean(axis=axes)
        var = ((x - _col(mean, x.ndim)) ** 2).mean(axis=axes)
        invstd = 1.0 / np.sqrt(var + eps)
        xhat = (x - _col(mean, x.ndim)) * _col(invstd, x.ndim)
        dbeta, dgamma = gy.sum(axis=axes), (gy * xhat).sum(axis=axes)
        dx = _col(gamma * invstd / n, x.ndim) * (n * gy - _col(dbeta, x.ndim) - xhat * _col(dgamma, x.ndim))
        dx = dx + (_col(gmean, x.ndim) + 2 * _col(gvar, x.ndim) * (x - _col(mean, x.ndim))) / n
        return [dx.astype(dt), dgamma.astype(dt), dbeta.astype(dt)]

    def flops(self, shapes, **attrs):
        n = size(shapes[0])
        return 12.0 * n if isinstance(n, int) else 0.0


def _col(v, ndim: int):
    """A per-channel vector shaped to broadcast over (N, C, ...)."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))
