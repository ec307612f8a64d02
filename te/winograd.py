"""Winograd convolution F(2x2, 3x3) for inference with a constant 3x3 weight.

The output is computed in 2x2 tiles from 4x4 input tiles (Lavin and Gray,
"Fast Algorithms for Convolutional Neural Networks"): with ``U = G w G^T``
(the weight transform, once, at export) and ``V = B^T d B`` (each input
tile's transform), a tile is ``A^T [sum over channels of U * V] A``. Each of
the 16 positions of a tile is a matrix product of (tiles x I) by (I x O): 16
multiplies per 4 outputs where a direct 3x3 convolution needs 36. ``B`` and
``A`` hold only 0 and +-1, so the transforms are additions.

- ``winograd_conv2d_weight(w, oc)``: w (O, I, 3, 3) -> U as channel blocks
  (ceil(O / oc), 4, 4, I, oc), zeros past channel O (the layout of
  ``pack_conv2d_weight``'s blocks, the taps replaced by the 16 positions);
- ``conv2d_winograd(x, U)``: stride 1, no dilation; the attrs and layouts of
  ``conv2d_packed`` (``out_channels``, ``padding``, ``in_block``,
  ``out_block``). Its stages: ``_input`` (B^T along rows), ``_v`` (B along
  columns), ``_gemm`` (the 16 products), ``_rows`` (A^T), then the output (A).

Rounding differs from a direct convolution (the transforms add and halve):
about 1e-6 relative on float32 (``tests/test_winograd.py`` states it).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import attrs as A
from .conv import OUT_BLOCK, PADDING, _plain_input, check_rank4, output_channel_blocks, pad_spatial, window_out
from .layout import blocked_array, blocks, plain_array
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, same_dim, shape_str, size, static

#: the weight transform G (4 x 3), B^T (4 x 4) and A^T (2 x 4) of F(2x2, 3x3)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])
TILE, OUT = 4, 2


def _combine(matrix: np.ndarray, row, get):
    """``sum_a matrix[row, a] * get(a)`` for a loop variable ``row``, written
    as the additions its nonzero +-1 entries make (a Select over the rows,
    which an unrolled ``row`` folds to one expression)."""
    def terms(r):
        out = None
        for a, m in enumerate(matrix[r]):
            if m:
                t = get(a)
                out = (t if m > 0 else -t) if out is None else (out + t if m > 0 else out - t)
        return out

    expr = terms(len(matrix) - 1)
    for r in range(len(matrix) - 2, -1, -1):
        expr = tirx.Select(row == r, terms(r), expr)
    return expr


def _constant(matrix: np.ndarray, i, j, dtype: str):
    """``matrix[i, j]`` for loop variables i, j, as a Select over the nonzero entries."""
    expr = tirx.const(0, dtype)
    for (r, c), v in np.ndenumerate(matrix):
        if v:
            expr = tirx.Select(tirx.all(i == r, j == c), tirx.const(float(v), dtype), expr)
    return expr


def check_3x3(op: str, w, arg: str = "w") -> None:
    if len(w) != 4 or static(w[2]) != 3 or static(w[3]) != 3:
        raise ShapeError(f"got {shape_str(w)}, expected a 3x3 OIHW weight (O, I, 3, 3)", op=op, arg=arg)


@register
class WinogradConv2dWeight(Op):
    """A 3x3 OIHW weight's Winograd transform ``G w G^T`` as channel blocks
    (ceil(O / oc), 4, 4, I, oc); channels past O are 0."""

    name = "winograd_conv2d_weight"
    differentiable = False
    dtypes = FLOATS
    attrs = {"oc": OUT_BLOCK}

    def infer_shape(self, w, oc):
        check_rank4(self.name, w, "w", "OIHW")
        check_3x3(self.name, w)
        return (blocks(w[0], oc), TILE, TILE, w[1], oc)

    def compute(self, w, oc):
        o, dt = w.shape[0], dtype_of(w)
        ra, rb = te.reduce_axis((0, 3), "ra"), te.reduce_axis((0, 3), "rb")

        def body(b, e, u, i, j):  # the clamped index keeps the padded lanes' read in bounds
            tap = tirx.if_then_else(b * oc + j < o, w[tirx.min(b * oc + j, o - 1), i, ra, rb], tirx.const(0, dt))
            return te.sum(_constant(G, e, ra, dt) * tap * _constant(G, u, rb, dt), axis=[ra, rb])

        return te.compute(self.infer_shape(tuple(w.shape), oc), body, name=self.name, tag="reduction")

    def reference(self, w, oc):
        return output_channel_blocks(np.einsum("ea,oiab,ub->oeui", G, w, G).astype(w.dtype), oc)


@register
class Conv2dWinograd(Op):
    """A 3x3, stride-1 ``conv2d(x, w)`` (NCHW) with w given as
    ``winograd_conv2d_weight``'s blocks (B, 4, 4, I, oc) -> (N, out_channels,
    OH, OW); ``in_block`` and ``out_block`` as ``conv2d_packed``'s."""

    name = "conv2d_winograd"
    differentiable = False
    arity = 2
    family = "conv2d_winograd"
    dtypes = FLOATS
    attrs = {"out_channels": A.Attr(A.positive_int, doc="O, the output channels (the blocks may pad past it)"),
             "padding": PADDING,
             "in_block": A.Attr(A.non_negative_int, default=0, doc="0: x is NCHW; c: x is NCHW[c]c"),
             "out_block": A.Attr(A.boolean, default=False, doc="write NCHW[oc]c blocks instead of NCHW")}

    def infer_shape(self, x, w, out_channels, padding, in_block, out_block):
        oc = static(w[4]) if len(w) == 5 else None
        if not isinstance(oc, int) or oc < 1 or static(w[1]) != TILE or static(w[2]) != TILE \
                or not same_dim(w[0], blocks(out_channels, oc)):
            raise ShapeError(f"got w {shape_str(w)}, expected (ceil(O / oc), 4, 4, I, oc) Winograd blocks holding "
                             f"O = out_channels = {out_channels} channels", op=self.name, arg="w")
        x = _plain_input(self.name, x, w, in_block, channels_axis=3)
        check_rank4(self.name, x, "x", "NCHW")
        if not same_dim(x[1], w[3]):
            raise ShapeError(f"got x {shape_str(x)} with {static(x[1])} channels but w {shape_str(w)} expects "
                             f"{static(w[3])}", op=self.name, arg="w")
        if not all(isinstance(static(d), int) for d in x[2:]):
            raise ShapeError(f"got x {shape_str(x)}, expected a static height and width (the tiles are planned "
                             "from them)", op=self.name, arg="x")
        oh, ow = (window_out(self.name, x[a], 3, 1, padding[a - 2]) for a in (2, 3))
        return (x[0], w[0], oh, ow, w[4]) if out_block else (x[0], out_channels, oh, ow)

    def infer_dtype(self, x, w, **attrs):
        return promote(self.name, x, w)

    def compute(self, x, w, out_channels, padding, in_block, out_block):
        out = self.infer_shape(tuple(x.shape), tuple(w.shape), out_channels, padding, in_block, out_block)
        dt = promote(self.name, dtype_of(x), dtype_of(w))
        n, ci, oc = x.shape[0], w.shape[3], static(w.shape[4])
        oh, ow = static(out[2]), static(out[3])
        th, tw = -(-oh // OUT), -(-ow // OUT)
        # the padded input, reaching the last tile's far edge (zeros past the padding too)
        far = (OUT * th - oh, OUT * tw - ow)
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), "conv2d_winograd_pad", far)
        read = (lambda b, c, y, z: xp[b, c // in_block, y, z, c % in_block]) if in_block else \
            (lambda b, c, y, z: xp[b, c, y, z])
        tiles = th * tw
        rows_t = te.compute((n, tiles, TILE, TILE, ci), lambda b, p, e, v, c: _combine(
            BT, e, lambda a: read(b, c, (p // tw) * OUT + a, (p % tw) * OUT + v).astype(dt)),
            name=self.name + "_input", tag="injective")
        vt = te.compute((n, TILE, TILE, tiles, ci), lambda b, e, u, p, c: _combine(
            BT, u, lambda v: rows_t[b, p, e, v, c]), name=self.name + "_v", tag="injective")
        rc = te.reduce_axis((0, ci), "rc")
        gemm = te.compute((n, w.shape[0], TILE, TILE, tiles, oc), lambda b, kb, e, u, p, k: te.sum(
            vt[b, e, u, p, rc] * w[kb, e, u, rc, k].astype(dt), axis=rc), name=self.name + "_gemm", tag="reduction")
        rows_m = te.compute((n, w.shape[0], OUT, TILE, tiles, oc), lambda b, kb, i, u, p, k: _combine(
            AT, i, lambda e: gemm[b, kb, e, u, p, k]), name=self.name + "_rows", tag="injective")

        def tile_out(b, kb, y, z, k):
            return _combine(AT, z % OUT, lambda u: rows_m[b, kb, y % OUT, u, (y // OUT) * tw + z // OUT, k])

        if out_block:
            body = tile_out
        else:
            def body(b, o, y, z):
                return tile_out(b, o // oc, y, z, o % oc)
        return te.compute(out, body, name=self.name, tag=self.family)

    def reference(self, x, w, out_channels, padding, in_block, out_block):
        x = plain_array(x, w.shape[3]) if in_block else x
        u = w.transpose(1, 2, 3, 0, 4).reshape(TILE, TILE, w.shape[3], -1)  # (4, 4, I, blocks x oc)
        n, _, h, wd = x.shape
        oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
        th, tw = -(-oh // OUT), -(-ow // OUT)
        xp = np.zeros((n, x.shape[1], OUT * th + 2, OUT * tw + 2), x.dtype)
        xp[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd] = x
        d = np.lib.stride_tricks.sliding_window_view(xp, (TILE, TILE), axis=(2, 3))[:, :, ::OUT, ::OUT]
        v = _additions(BT, _additions(BT, d, 4), 5)  # (N, I, th, tw, e, u)
        m = np.einsum("ncsteu,euco->nosteu", v, u.astype(v.dtype))  # (N, O, th, tw, e, u)
        y = _additions(AT, _additions(AT, m, 4), 5)  # (N, O, th, tw, 2, 2)
        y = y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, OUT * th, OUT * tw)[:, :, :oh, :ow]
        y = y.astype(np.result_type(x, w))
        return blocked_array(y, w.shape[4]) if out_block else y[:, :out_channels]

    def flops(self, shapes, **attrs):
        """Those of the direct 3x3 convolution it replaces (what its GFLOPS compare with)."""
        x, w = shapes
        total = 2 * size(self.infer_shape(x, w, **attrs)) * static(w[3]) * 9
        return float(total) if isinstance(total, int) else 0.0


def _additions(matrix: np.ndarray, a: np.ndarray, axis: int) -> np.ndarray:
    """``matrix`` applied along ``axis`` of ``a`` as the kernel does it: the
    additions of its nonzero +-1 entries, no product with a zero (through
    which a NaN or an infinity would reach every position)."""
    rows = []
    for row in matrix:
        terms = [np.take(a, k, axis=axis) * float(m) for k, m in enumerate(row) if m]
        rows.append(sum(terms[1:], terms[0]))
    return np.stack(rows, axis=axis)
