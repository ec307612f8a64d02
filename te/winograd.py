"""Winograd convolution F(m x m, 3x3): a 3x3 weight transformed once at
export (a constant), or in every call of a training step (``kiln.strategy.conv2d``).

The output is computed in m x m tiles (m = 2 or 4) from (m + 2) x (m + 2)
input tiles (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks"): with ``U = G w G^T`` (the weight transform) and
``V = B^T d B`` (each input tile's transform), a tile is ``A^T [sum over
channels of U * V] A``. Each of the (m + 2)^2 positions of a tile is a
matrix product of (tiles x I) by (I x O): F(2x2, 3x3) does 16 multiplies per
4 outputs and F(4x4, 3x3) 36 per 16 where a direct 3x3 convolution needs 36
per output. F(2x2, 3x3)'s ``B`` and ``A`` hold only 0 and +-1 (its
transforms are additions); F(4x4, 3x3)'s hold small integers and round more.

- ``winograd_conv2d_weight(w, oc, tile)``: w (O, I, 3, 3) -> U as channel
  blocks (ceil(O / oc), m + 2, m + 2, I, oc) for output tiles of ``tile``
  = m, zeros past channel O (the layout of ``pack_conv2d_weight``'s blocks,
  the taps replaced by the positions); with ``flip``, the kernel of the
  stride-1 data gradient, w's channels swapped and its taps rotated (I
  blocks of O channels);
- ``conv2d_winograd(x, U)``: stride 1, no dilation, m read from U's shape;
  the attrs and layouts of ``conv2d_packed`` (``out_channels``, ``padding``,
  ``in_block``, ``out_block``). Its stages: ``_input`` (B^T along rows),
  ``_v`` (B along columns), ``_gemm`` (the products), ``_rows`` (A^T), then
  the output (A).

Rounding differs from a direct convolution (the transforms add, halve and
scale): on float32 about 1e-6 of the output's magnitude for m = 2 and 1e-5
for m = 4 (``tests/test_winograd.py`` states what it measured).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from .conv import OUT_BLOCK, PADDING, check_rank4, pad_spatial, window_out
from .conv_packed import IN_BLOCK, OUT_CHANNELS, WRITE_BLOCKS, _plain_input, output_channel_blocks
from .layout import blocked_array, blocks, plain_array
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, same_dim, shape_str, size, static

#: for each output tile m: the weight transform G ((m + 2) x 3), B^T and A^T (m x (m + 2))
TRANSFORMS = {
    2: (np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: (np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])),
}


def output_tile(w_shape) -> int | None:
    """m, the output tile of Winograd weight blocks (B, m + 2, m + 2, I, oc);
    None where that dim is not a number."""
    span = static(w_shape[1])
    return span - 2 if isinstance(span, int) else None


def _tiling(w_shape) -> tuple:
    """m, m + 2 and the B^T and A^T of Winograd weight blocks (B, m + 2, m + 2, I, oc)."""
    step = output_tile(w_shape)
    _, bt, at = TRANSFORMS[step]
    return step, step + 2, bt, at


def _tile(op: str, name: str, value) -> int:
    value = A.integer(op, name, value)
    if value not in TRANSFORMS:
        raise AttrError(f"got {value!r}, expected an output tile of {' or '.join(map(str, TRANSFORMS))}",
                        op=op, arg=name)
    return value


def _combine(matrix: np.ndarray, row, get, dtype: str):
    """``sum_a matrix[row, a] * get(a)`` for a loop variable ``row``, written
    as the additions its nonzero entries make, a product only where one is
    not +-1 (a Select over the rows, which an unrolled ``row`` folds to one
    expression)."""
    def terms(r):
        out = None
        for a, m in enumerate(matrix[r]):
            if m:
                t = get(a)
                if abs(m) != 1:
                    t = t * tirx.const(float(abs(m)), dtype)
                out = (t if m > 0 else -t) if out is None else (out + t if m > 0 else out - t)
        return out

    expr = terms(len(matrix) - 1)
    for r in range(len(matrix) - 2, -1, -1):
        expr = tirx.Select(row == r, terms(r), expr)
    return expr


def check_3x3(op: str, w, arg: str = "w") -> None:
    if len(w) != 4 or static(w[2]) != 3 or static(w[3]) != 3:
        raise ShapeError(f"got {shape_str(w)}, expected a 3x3 OIHW weight (O, I, 3, 3)", op=op, arg=arg)


@register
class WinogradConv2dWeight(Op):
    """A 3x3 OIHW weight's Winograd transform ``G w G^T`` for output tiles of
    ``tile`` as channel blocks (ceil(O / oc), tile + 2, tile + 2, I, oc);
    channels past O are 0."""

    name = "winograd_conv2d_weight"
    differentiable = False
    dtypes = FLOATS
    attrs = {"oc": OUT_BLOCK, "tile": A.Attr(_tile, default=2, doc="m, the output tile: F(m x m, 3x3), 2 or 4"),
             "flip": A.Attr(A.boolean, default=False,
                            doc="transform the data gradient's kernel instead: w's channels swapped, its taps "
                                "rotated 180 degrees (``conv2d_backward_data`` at stride 1 as a convolution)")}

    def infer_shape(self, w, oc, tile, flip):
        check_rank4(self.name, w, "w", "OIHW")
        check_3x3(self.name, w)
        o, i = (w[1], w[0]) if flip else (w[0], w[1])
        return (blocks(o, oc), tile + 2, tile + 2, i, oc)

    def compute(self, w, oc, tile, flip):
        """Three stages: the taps in blocks of ``oc`` channels (``_taps``: (B,
        3, 3, I, oc), zeros past O), ``G`` along the kernel's rows
        (``_rows``), then along its columns; each a sum of ``G``'s nonzero
        entries' terms (``_combine``), so a schedule that unrolls the
        positions leaves no product with a zero and no select."""
        o, dt, G = w.shape[1 if flip else 0], dtype_of(w), TRANSFORMS[tile][0]
        shape = self.infer_shape(tuple(w.shape), oc, tile, flip)
        blocks_, span, i_ = shape[0], shape[1], shape[3]

        def tap(b, a, c, i, j):  # the clamped index keeps the padded lanes' read in bounds
            k = tirx.min(b * oc + j, o - 1)
            read = w[i, k, 2 - a, 2 - c] if flip else w[k, i, a, c]
            return tirx.if_then_else(b * oc + j < o, read, tirx.const(0, dt))

        taps = te.compute((blocks_, 3, 3, i_, oc), tap, name=self.name + "_taps", tag="injective")
        rows = te.compute((blocks_, span, 3, i_, oc), lambda b, e, c, i, j: _combine(
            G, e, lambda a: taps[b, a, c, i, j], dt), name=self.name + "_rows", tag="injective")
        return te.compute(shape, lambda b, e, u, i, j: _combine(G, u, lambda c: rows[b, e, c, i, j], dt),
                          name=self.name, tag="injective")

    def reference(self, w, oc, tile, flip):
        """``G w G^T`` as the kernel computes it: along the kernel's rows, then
        its columns, the sum of ``G``'s nonzero entries' terms (a NaN or an
        infinity in a tap reaches only the positions whose terms read it)."""
        G = TRANSFORMS[tile][0]
        w = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1] if flip else w
        u = _additions(G, _additions(G, w, 2), 3)  # (O, I, t, t)
        return output_channel_blocks(u.transpose(0, 2, 3, 1).astype(w.dtype), oc)


@register
class Conv2dWinograd(Op):
    """A 3x3, stride-1 ``conv2d(x, w)`` (NCHW) with w given as
    ``winograd_conv2d_weight``'s blocks (B, m + 2, m + 2, I, oc) -> (N,
    out_channels, OH, OW) in m x m tiles; ``in_block`` and ``out_block`` as
    ``conv2d_packed``'s."""

    name = "conv2d_winograd"
    channel_blocked = True
    image_block_tasks = True
    differentiable = False
    arity = 2
    family = "conv2d_winograd"
    dtypes = FLOATS
    attrs = {"out_channels": OUT_CHANNELS, "padding": PADDING, "in_block": IN_BLOCK, "out_block": WRITE_BLOCKS}

    def infer_shape(self, x, w, out_channels, padding, in_block, out_block):
        oc = static(w[4]) if len(w) == 5 else None
        if not isinstance(oc, int) or oc < 1 or output_tile(w) not in TRANSFORMS or static(w[2]) != static(w[1]) \
                or not same_dim(w[0], blocks(out_channels, oc)):
            tiles = " or ".join(str(m + 2) for m in TRANSFORMS)
            raise ShapeError(f"got w {shape_str(w)}, expected (ceil(O / oc), t, t, I, oc) Winograd blocks (t = "
                             f"{tiles}) holding O = out_channels = {out_channels} channels", op=self.name, arg="w")
        x = _plain_input(self.name, x, w[3] if len(w) == 5 else None, in_block)
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
        step, span, BT, AT = _tiling(w.shape)
        th, tw = -(-oh // step), -(-ow // step)
        # the padded input, reaching the last tile's far edge (zeros past the padding too)
        far = (step * th - oh, step * tw - ow)
        xp = pad_spatial(x, "NCHW", padding, tirx.const(0, dtype_of(x)), "conv2d_winograd_pad", far)
        read = (lambda b, c, y, z: xp[b, c // in_block, y, z, c % in_block]) if in_block else \
            (lambda b, c, y, z: xp[b, c, y, z])
        tiles = th * tw
        rows_t = te.compute((n, tiles, span, span, ci), lambda b, p, e, v, c: _combine(
            BT, e, lambda a: read(b, c, (p // tw) * step + a, (p % tw) * step + v).astype(dt), dt),
            name=self.name + "_input", tag="injective")
        vt = te.compute((n, span, span, tiles, ci), lambda b, e, u, p, c: _combine(
            BT, u, lambda v: rows_t[b, p, e, v, c], dt), name=self.name + "_v", tag="injective")
        rc = te.reduce_axis((0, ci), "rc")
        gemm = te.compute((n, w.shape[0], span, span, tiles, oc), lambda b, kb, e, u, p, k: te.sum(
            vt[b, e, u, p, rc] * w[kb, e, u, rc, k].astype(dt), axis=rc), name=self.name + "_gemm", tag="reduction")
        rows_m = te.compute((n, w.shape[0], step, span, tiles, oc), lambda b, kb, i, u, p, k: _combine(
            AT, i, lambda e: gemm[b, kb, e, u, p, k], dt), name=self.name + "_rows", tag="injective")

        def tile_out(b, kb, y, z, k):
            return _combine(AT, z % step, lambda u: rows_m[b, kb, y % step, u, (y // step) * tw + z // step, k], dt)

        if out_block:
            body = tile_out
        else:
            def body(b, o, y, z):
                return tile_out(b, o // oc, y, z, o % oc)
        return te.compute(out, body, name=self.name, tag=self.family)

    def reference(self, x, w, out_channels, padding, in_block, out_block):
        x = plain_array(x, w.shape[3]) if in_block else x
        step, span, BT, AT = _tiling(w.shape)
        u = w.transpose(1, 2, 3, 0, 4).reshape(span, span, w.shape[3], -1)  # (t, t, I, blocks x oc)
        n, _, h, wd = x.shape
        oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
        th, tw = -(-oh // step), -(-ow // step)
        xp = np.zeros((n, x.shape[1], step * th + 2, step * tw + 2), x.dtype)
        xp[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd] = x
        d = np.lib.stride_tricks.sliding_window_view(xp, (span, span), axis=(2, 3))[:, :, ::step, ::step]
        v = _additions(BT, _additions(BT, d, 4), 5)  # (N, I, th, tw, e, u)
        m = np.einsum("ncsteu,euco->nosteu", v, u.astype(v.dtype))  # (N, O, th, tw, e, u)
        y = _additions(AT, _additions(AT, m, 4), 5)  # (N, O, th, tw, m, m)
        y = y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, step * th, step * tw)[:, :, :oh, :ow]
        y = y.astype(np.result_type(x, w))
        return blocked_array(y, w.shape[4]) if out_block else y[:, :out_channels]

    def flops(self, shapes, **attrs):
        """Those of the direct 3x3 convolution it replaces (what its GFLOPS compare with)."""
        x, w = shapes
        total = 2 * size(self.infer_shape(x, w, **attrs)) * static(w[3]) * 9
        return float(total) if isinstance(total, int) else 0.0

    def kernel_flops(self, shapes, **attrs):
        """Those of its matrix products: per image, channel block and tile
        position, tiles x I x oc multiply-adds (the transforms' additions
        not counted, a bound the products alone set)."""
        x, w = shapes
        out = self.infer_shape(x, w, **attrs)
        step, span, _, _ = _tiling(w)
        n, oh, ow, blocks_, i, oc = (static(d) for d in (out[0], out[2], out[3], w[0], w[3], w[4]))
        total = 2 * n * blocks_ * span * span * -(-oh // step) * -(-ow // step) * i * oc
        return float(total) if isinstance(total, int) else 0.0


def _additions(matrix: np.ndarray, a: np.ndarray, axis: int) -> np.ndarray:
    """``matrix`` applied along ``axis`` of ``a`` as the kernel does it: the
    sum of its nonzero entries' terms, no product with a zero (through which
    a NaN or an infinity would reach every position)."""
    rows = []
    for row in matrix:
        terms = [np.take(a, k, axis=axis) * float(m) for k, m in enumerate(row) if m]
        rows.append(sum(terms[1:], terms[0]))
    return np.stack(rows, axis=axis)
