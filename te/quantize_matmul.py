"""``matmul_int8``: the product of two quantized activations (attention's
``Q @ K^T`` and ``P @ V`` in a quantized transformer), each uint8 with its
own zero point, summed in int32 and dequantized: float32 out.

With ``a ~ sa (A - za)`` and ``b ~ sb (B - zb)`` (A, B the uint8 codes),
``a @ b ~ sa sb sum_k (A - za)(B - zb)``. An 8-bit dot product instruction
multiplies uint8 by int8, so B is read as ``B' = B - 128`` (exact in int8)
and the sum taken apart:

    sum_k (A - za)(B - zb) = sum_k A B' + (128 - zb) sum_k A - za sum_k B + K za zb

The kernel packs B' per matrix in blocks of 4 along K and 16 columns, the
layout ``dense_int8``'s weight has (``vpdpbusd`` reads one block row), and
sums each row of A and each column of B beside it; its write-back applies
the three corrections and the scale. Every sum is exact in int32 while
``K * 255 * 255`` fits it: K up to ``MAX_DEPTH``.
"""
from __future__ import annotations

from tvm import te, tirx

from ..errors import AttrError, ShapeError
from . import attrs as A
from .registry import Op, register
from .shapes import is_static, same_dim, shape_str, static

#: the columns of one packed block (a ``vpdpbusd``'s 16 int32 lanes)
PANEL = 16
#: the deepest product whose sums stay exact in int32 (K * 255 * 255 < 2**31)
MAX_DEPTH = 1 << 15


def sums_read(a_zero_point: int, b_zero_point: int) -> tuple[str, ...]:
    """The stages of sums the corrections read: A's row sums unless ``(128 -
    zb)`` is 0, B's column sums unless ``za`` is."""
    return ("matmul_int8_row_sum",) * (b_zero_point != 128) + ("matmul_int8_col_sum",) * (a_zero_point != 0)


def _zero_point(name: str, value) -> int:
    if not 0 <= value <= 255:
        raise AttrError(f"got {value}, expected a uint8 zero point (0..255)", op="matmul_int8", arg=name)
    return value


@register
class MatmulInt8(Op):
    """``scale * (a - a_zero_point) @ (b - b_zero_point)``: uint8 ``a``
    (..., M, K) and ``b`` (..., K, N) with the same leading dims, the
    products summed in int32, float32 (..., M, N) out. N is static (B is
    packed in panels of it); the batch, M and K may be symbolic."""

    name = "matmul_int8"
    arity = 2
    family = "int8"  # its own template (schedules/cpu/int8_matmul.py)
    compute_bound = True
    differentiable = False
    dtypes = ("uint8",)
    attrs = {"a_zero_point": A.Attr(A.integer, default=0, doc="the uint8 code of a's 0.0"),
             "b_zero_point": A.Attr(A.integer, default=0, doc="the uint8 code of b's 0.0"),
             "scale": A.Attr(A.positive_float, default=1.0, doc="a's scale times b's: the real value of one product")}

    def check(self, shapes, dtypes=None, attrs=None):
        workload = super().check(shapes, dtypes, attrs)  # the dtypes: uint8 only (``dtypes``)
        _zero_point("a_zero_point", workload.attrs["a_zero_point"])
        _zero_point("b_zero_point", workload.attrs["b_zero_point"])
        return workload

    def infer_shape(self, a, b, a_zero_point, b_zero_point, scale):
        if len(a) < 2 or len(a) != len(b) or not all(same_dim(x, y) for x, y in zip(a[:-2], b[:-2])) or not same_dim(
                a[-1], b[-2]):
            raise ShapeError(f"got a {shape_str(a)} and b {shape_str(b)}, expected (..., M, K) and (..., K, N) with "
                             "the same leading dims", op=self.name, arg="shapes")
        if not is_static(b[-1]):
            raise ShapeError(f"got b {shape_str(b)}, expected a static N: B is packed in panels of {PANEL} columns",
                             op=self.name, arg="shapes")
        depth = static(a[-1])
        if isinstance(depth, int) and depth > MAX_DEPTH:
            raise ShapeError(f"got K = {depth}, expected at most {MAX_DEPTH}: deeper sums of uint8 products "
                             "overflow int32", op=self.name, arg="shapes")
        return (*a[:-1], b[-1])

    def infer_dtype(self, a, b, **attrs):
        return "float32"

    def compute(self, a, b, a_zero_point, b_zero_point, scale):
        *batch, m, k = a.shape
        n = b.shape[-1]
        k4, panels = (k + 3) // 4, (n + PANEL - 1) // PANEL
        whole_k = is_static(k) and static(k) % 4 == 0
        whole_n = is_static(n) and static(n) % PANEL == 0

        def packed(*i):  # B - 128 in blocks (panel, k4, 16, 4), zeros past K and N
            *bt, p, kk, j, r = i
            row, col = kk * 4 + r, p * PANEL + j
            code = b[(*bt, tirx.min(row, k - 1), tirx.min(col, n - 1))].astype("int32") - 128
            inside = [c for c, whole in ((row < k, whole_k), (col < n, whole_n)) if not whole]
            return (tirx.if_then_else(tirx.all(*inside), code, 0) if inside else code).astype("int8")
        bp = te.compute((*batch, panels, k4, PANEL, 4), packed, name="matmul_int8_pack")
        rb = te.reduce_axis((0, k), "rb")
        col_sum = te.compute((*batch, n), lambda *i: te.sum(b[(*i[:-1], rb, i[-1])].astype("int32"), axis=rb),
                             name="matmul_int8_col_sum")
        ra = te.reduce_axis((0, k), "ra")
        row_sum = te.compute((*batch, m), lambda *i: te.sum(a[(*i, ra)].astype("int32"), axis=ra),
                             name="matmul_int8_row_sum")
        rk, rr = te.reduce_axis((0, k4), "k4"), te.reduce_axis((0, 4), "r")

        def code_of_a(bt, i, kk):
            return a[(*bt, i, kk)] if whole_k else tirx.if_then_else(kk < k, a[(*bt, i, tirx.min(kk, k - 1))],
                                                                     tirx.const(0, "uint8"))
        acc = te.compute((*batch, m, panels, PANEL), lambda *i: te.sum(
            code_of_a(i[:-3], i[-3], rk * 4 + rr).astype("int32") * bp[(*i[:-3], i[-2], rk, i[-1], rr)].astype("int32"),
            axis=[rk, rr]), name="matmul_int8_acc", tag="matmul")
        za, zb = a_zero_point, b_zero_point
        fixed = tirx.Cast("int32", k) * (za * zb)
        scale_ = tirx.const(scale, "float32")

        read = sums_read(za, zb)

        def epilogue(*i):
            *bt, row, col = i
            total = acc[(*bt, row, col // PANEL, col % PANEL)] + fixed
            if row_sum.op.name in read:
                total = total + (128 - zb) * row_sum[(*bt, row)]
            if col_sum.op.name in read:
                total = total - za * col_sum[(*bt, col)]
            return total.astype("float32") * scale_
        return te.compute((*batch, m, n), epilogue, name=self.name, tag="matmul")

    def reference(self, a, b, a_zero_point, b_zero_point, scale):
        import numpy as np
        # integers whose sums stay below 2**53: exact in float64, BLAS's matmul (int64's is numpy's own loop)
        product = (a.astype(np.float64) - a_zero_point) @ (b.astype(np.float64) - b_zero_point)
        return (product * np.float32(scale)).astype(np.float32)

    def flops(self, shapes, **attrs):
        a, b = shapes
        dims = [static(d) for d in (*a, b[-1])]
        if not all(isinstance(d, int) for d in dims):
            return 0.0
        total = 2.0
        for d in dims:
            total *= d
        return total
