"""Scaled dot-product attention as one op: ``attention(q, k, v[, mask])``.

For each batch ``b``, head ``h`` and query row ``i``::

    logit[j] = scale * sum_e q[b,h,i,e] k[b,h,j,e] + mask[b,h,i,j]   (-inf where causal and j > i)
    out[b,h,i,:] = sum_j softmax(logit)[j] v[b,h,j,:]

``q`` is (B, H, S, D), ``k`` (B, H, Sk, D), ``v`` (B, H, Sk, Dv) and the
output (B, H, S, Dv) with ``layout="bhsd"``; with ``layout="bshd"`` each is
stored with its sequence axis before its head axis, (B, S, H, D) and so on,
the layout a projection ``x W`` reshaped to heads has, so a model's
transposes into and out of heads are not kernels of their own. ``mask`` is
additive and broadcasts (numpy rules) to (B, H, S, Sk) in either layout:
BERT's (B, 1, 1, Sk) padding mask, GPT-2's (B, 1, S, Sk). ``scale``
defaults to ``1 / sqrt(D)``; ``causal`` masks the keys after each query
(``j > i``, PyTorch's ``is_causal``). A row whose logits are all ``-inf``
is NaN, as ``softmax`` makes it.

The kernel computes a block of query rows of one head at a time (its
template, ``schedules/cpu/attention.py``): their scores, the softmax and the
product with ``v`` stay in the task's cache, and the (S, Sk) score matrix is
never written to memory (flash-attention's idea, without its running
softmax: a task holds its rows' whole score rows). The export finds the
products, scale, mask and softmax a model writes out and makes them this op
(``graph.attention``).

The gradient recomputes the probabilities from ``q`` and ``k`` (nothing but
the inputs is kept) and is written with registered ops.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from . import fastmath, nanmath
from .grad import as_dtype, unbroadcast, wants_grad
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, is_static, promote, same_dim, shape_str, size, static

matmul, softmax, transpose = op_ref("matmul"), op_ref("softmax"), op_ref("transpose")

LAYOUTS = ("bhsd", "bshd")
#: the input axes of (batch, head, sequence, feature) in each layout
AXES = {"bhsd": (0, 1, 2, 3), "bshd": (0, 2, 1, 3)}
#: a symbolic count of keys is padded to a multiple of this (masked out) in the
#: kernel's score rows, so their tiles and vectors divide it: 16 float32 lanes
KEY_BLOCK = 16


def padded_keys(sk):
    """The score rows' length for ``sk`` keys: ``sk`` when static, else the
    next multiple of ``KEY_BLOCK``."""
    return sk if is_static(sk) else tirx.floordiv(sk + KEY_BLOCK - 1, KEY_BLOCK) * KEY_BLOCK


def _optional_scale(op: str, name: str, value):
    return None if value is None else A.positive_float(op, name, value)


def logical(shape, layout: str) -> tuple:
    """``shape`` (of q, k, v or the output, in ``layout``) as (B, H, S, D)."""
    return tuple(shape[a] for a in AXES[layout])


@register
class Attention(Op):
    name = "attention"
    arity = None  # q, k, v and an optional mask
    family = "attention"
    dtypes = FLOATS
    grad_inputs = None
    grad_output = False
    compute_bound = True
    attrs = {"scale": A.Attr(_optional_scale, default=None, doc="the scores' factor (default 1 / sqrt(D))"),
             "causal": A.Attr(A.boolean, default=False, doc="mask the keys after each query (j > i)"),
             "layout": A.Attr(A.one_of(*LAYOUTS), default="bhsd",
                              doc="'bhsd': (B, H, S, D) tensors; 'bshd': (B, S, H, D)")}

    def infer_shape(self, q, k, v, *mask, scale, causal, layout):
        if len(mask) > 1:
            raise ShapeError(f"got {3 + len(mask)} inputs, expected q, k, v and at most one mask", op=self.name,
                             arg="inputs")
        for arg, s in (("q", q), ("k", k), ("v", v)):
            if len(s) != 4:
                raise ShapeError(f"got {arg} of shape {shape_str(s)}, expected 4 axes ({layout})", op=self.name,
                                 arg=arg)
        (b, h, n, d), (kb, kh, sk, kd), (vb, vh, vs, dv) = (logical(s, layout) for s in (q, k, v))
        if not (same_dim(b, kb) and same_dim(h, kh) and same_dim(d, kd)):
            raise ShapeError(f"got q {shape_str(q)} and k {shape_str(k)}, expected the same batch, heads and "
                             f"features ({layout})", op=self.name, arg="k")
        if not (same_dim(b, vb) and same_dim(h, vh) and same_dim(sk, vs)):
            raise ShapeError(f"got k {shape_str(k)} and v {shape_str(v)}, expected the same batch, heads and "
                             f"keys ({layout})", op=self.name, arg="v")
        if any(static(x) == 0 for x in (sk, d)):
            raise ShapeError(f"got k of shape {shape_str(k)}: no keys or features, expected at least one",
                             op=self.name, arg="k")
        if mask:
            full = (b, h, n, sk)
            m = mask[0]
            if len(m) > 4 or not all(static(x) == 1 or same_dim(x, f) for x, f in zip(m[::-1], full[::-1])):
                raise ShapeError(f"got mask of shape {shape_str(m)}, expected one that broadcasts to "
                                 f"(B, H, S, Sk) = {shape_str(full)}", op=self.name, arg="mask")
        out = (b, h, n, dv)
        return tuple(out[a] for a in AXES[layout])

    def infer_dtype(self, *dtypes, scale, causal, layout):
        return promote(self.name, *dtypes, allowed=FLOATS)

    def flops(self, shapes, **attrs):
        b, h, n, d = logical(shapes[0], attrs["layout"])
        sk, dv = logical(shapes[1], attrs["layout"])[2], logical(shapes[2], attrs["layout"])[3]
        counts = [size((b, h, n, sk, d)), size((b, h, n, sk, dv)), size((b, h, n, sk))]
        if not all(isinstance(c, int) for c in counts):
            return 0.0
        return 2.0 * (counts[0] + counts[1]) + 4.0 * counts[2]  # the two products, then scale, mask, exp, sum

    def compute(self, q, k, v, *mask, scale, causal, layout):
        b, h, n, d = logical(q.shape, layout)
        sk, dv = logical(k.shape, layout)[2], logical(v.shape, layout)[3]
        b, h, n, d, sk, dv = _one_index_type(b, h, n, d, sk, dv)
        dt = promote(self.name, *(dtype_of(t) for t in (q, k, v, *mask)))
        if scale is not None or is_static(d):
            scale = tirx.const(_scale(scale, d), dt)
        else:  # 1 / sqrt(D) of a symbolic D
            scale = tirx.const(1, dt) / tirx.sqrt(tirx.Cast(dt, d))
        axes = AXES[layout]

        def at(t, bb, hh, s, f):  # element (batch, head, position, feature) of t in the layout, as dt
            idx = (bb, hh, s, f)
            return _as(t[tuple(idx[a] for a in axes)], dt)

        # symbolic lengths are padded: keys with zeros whose scores are masked out (``acc`` reads sk alone),
        # queries with zero rows that the output does not read
        skp, n_p = padded_keys(sk), padded_keys(n)

        def key(bb, hh, e, j):
            return at(k, bb, hh, j, e) if skp is sk else tirx.if_then_else(j < sk, at(k, bb, hh, j, e), _zero(dt))

        def query(bb, hh, i, e):
            return at(q, bb, hh, i, e) if n_p is n else tirx.if_then_else(i < n, at(q, bb, hh, i, e), _zero(dt))

        kt = te.compute((b, h, d, skp), key, name="attention_kt", tag="attention")
        re = te.reduce_axis((0, d), "re")
        score = te.compute((b, h, n_p, skp), lambda bb, hh, i, j: te.sum(query(bb, hh, i, re) * kt[bb, hh, re, j],
                                                                      axis=re), name="attention_score",
                           tag="attention")

        def logit(bb, hh, i, j):
            x = score[bb, hh, i, j] * scale
            if mask:
                m = mask[0]
                full = (bb, hh, i, j)[4 - len(m.shape):]
                value = _as(m[tuple(0 if static(e) == 1 else ix for e, ix in zip(m.shape, full))], dt)
                inside = [c for c, padded in ((i < n, n_p is not n), (j < sk, skp is not sk)) if padded]
                x = x + (tirx.if_then_else(tirx.all(*inside), value, _zero(dt)) if inside else value)
            if causal:
                x = tirx.Select(j > i, tirx.const(-math.inf, dt), x)
            return x if skp is sk else tirx.if_then_else(j < sk, x, tirx.const(-math.inf, dt))  # no mask read past

        r1, r2 = (te.reduce_axis((0, skp), f"r{k}") for k in (1, 2))
        r3 = te.reduce_axis((0, sk), "r3")
        mx = te.compute((b, h, n_p), lambda bb, hh, i: nanmath.max_reducer()(logit(bb, hh, i, r1), axis=r1),
                        name="attention_max", tag="attention")
        ex = te.compute((b, h, n_p, skp), lambda bb, hh, i, j: fastmath.exp(logit(bb, hh, i, j) - mx[bb, hh, i]),
                        name="attention_exp", tag="attention")
        total = te.compute((b, h, n_p), lambda bb, hh, i: te.sum(ex[bb, hh, i, r2], axis=r2), name="attention_sum",
                           tag="attention")
        acc = te.compute((b, h, n_p, dv), lambda bb, hh, i, f: te.sum(ex[bb, hh, i, r3] * at(v, bb, hh, r3, f),
                                                                    axis=r3), name="attention_acc", tag="attention")
        out_shape = tuple((b, h, n, dv)[a] for a in axes)

        if n_p is not n:  # the padded rows normalized first (the template's task root), the output a copy
            norm = te.compute((b, h, n_p, dv), lambda bb, hh, i, f: acc[bb, hh, i, f] / total[bb, hh, i],
                              name="attention_norm", tag="attention")

        def result(*idx):
            bb, hh, i, f = (idx[axes.index(a)] for a in range(4))  # the layout's axes back to (b, h, s, f)
            return acc[bb, hh, i, f] / total[bb, hh, i] if n_p is n else norm[bb, hh, i, f]
        return te.compute(out_shape, result, name=self.name, tag=self.family)

    def reference(self, q, k, v, *mask, scale, causal, layout):
        dt = np.result_type(q, k, v, *mask)
        q, k, v = (np.transpose(t, AXES[layout]).astype(dt) for t in (q, k, v))  # to bhsd (AXES is its own inverse)
        with np.errstate(invalid="ignore", over="ignore"):
            logit = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(_scale(scale, q.shape[-1]))
            if mask:
                logit = logit + mask[0]
            if causal:
                logit = np.where(np.triu(np.ones(logit.shape[-2:], bool), 1), -np.inf, logit)
            e = np.exp(logit - np.max(logit, axis=-1, keepdims=True))
            out = np.matmul(e / np.sum(e, axis=-1, keepdims=True), v)
        return np.ascontiguousarray(np.transpose(out, AXES[layout])).astype(q.dtype)

    def gradient(self, g, node):
        q, k, v, *mask = node.inputs
        attrs = node.attrs
        layout = attrs["layout"]
        axes = AXES[layout]
        to = (lambda t: t) if layout == "bhsd" else (lambda t: transpose(t, axes=axes))
        qh, kh, vh, gh = (to(t) for t in (q, k, v, g))
        scale = _scale(attrs["scale"], static(logical(q.shape, layout)[3]))
        logit = matmul(qh, kh, transpose_b=True) * scale
        if mask:
            logit = logit + mask[0]
        if attrs["causal"]:
            n, sk = static(logical(q.shape, layout)[2]), static(logical(k.shape, layout)[2])
            logit = logit + np.triu(np.full((n, sk), -np.inf, dtype=q.dtype), 1)
        p = softmax(logit, axis=-1)
        dv = matmul(p, gh, transpose_a=True)
        dp = matmul(gh, vh, transpose_b=True)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        dq = matmul(ds, kh) * scale if wants_grad(q) else None
        dk = matmul(ds, qh, transpose_a=True) * scale if wants_grad(k) else None
        grads = [None if t is None else as_dtype(to(t), x.dtype) for t, x in zip((dq, dk, dv), (q, k, v))]
        if mask:
            grads.append(unbroadcast(ds, mask[0].shape, mask[0].dtype) if wants_grad(mask[0]) else None)
        return tuple(grads)


def _one_index_type(*dims) -> tuple:
    """``dims`` all of one index type: int64 where a symbolic one is (an
    export's batch and sequence), so the kernel's fused loops carry no casts
    (a cast in a binding keeps TVM from vectorizing below it)."""
    if not any(not is_static(d) and str(d.ty) == "int64" for d in dims):
        return dims
    return tuple(tirx.IntImm("int64", static(d)) if is_static(d) else d for d in dims)


def _zero(dtype: str):
    return tirx.const(0, dtype)


def _as(x, dtype: str):
    return x if x.dtype == dtype else x.astype(dtype)


def _scale(scale, d) -> float:
    return scale if scale is not None else 1.0 / math.sqrt(static(d))
