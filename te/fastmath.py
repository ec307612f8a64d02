"""Vectorizable float32 ``exp``.

LLVM lowers a vector ``exp`` to one libm call per lane; this Cephes-style
polynomial (range reduction by ln 2, degree-5 polynomial, exponent built with
integer bit operations) vectorizes, runs ~4x faster, and stays within 3 ulp
of the exact result over the normal range (subnormal results keep the
absolute error below 1e-44). Beyond float32's range it returns inf and 0;
NaN propagates.
Other dtypes use ``tirx.exp``.
"""
from __future__ import annotations

from tvm import tirx

from . import nanmath
from .shapes import dtype_of

_HI, _LO = 88.72283905206835, -104.0  # ln(FLT_MAX); below -103.97 the result rounds to 0
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)


def exp(v):
    """``e ** v`` as a TIR expression."""
    if dtype_of(v) != "float32":
        return tirx.exp(v)
    f = lambda c: tirx.const(c, "float32")  # noqa: E731
    # Let-bound temporaries keep the expression (and its TVMScript) small.
    x, n, r = (tirx.Var(name, "float32") for name in ("exp_x", "exp_n", "exp_r"))
    p = f(_POLY[0])
    for c in _POLY[1:]:
        p = p * r + f(c)
    p = p * r * r + r + f(1.0)
    # 2^n as two factors, each a normal float, so n may run from -150 to 128:
    # results near FLT_MAX stay finite and tiny ones come out subnormal, as in libm.
    n_int = tirx.Cast("int32", n)
    half = tirx.floordiv(n_int, 2)
    low_factor = tirx.reinterpret("float32", (half + 127) << 23)
    high_factor = tirx.reinterpret("float32", (n_int - half + 127) << 23)
    body = tirx.Select(x > f(_HI), f(float("inf")), tirx.Select(x < f(_LO), f(0.0), p * low_factor * high_factor))
    body = tirx.Select(nanmath.isnan(x), x, body)
    clamped = tirx.min(tirx.max(x, f(_LO)), f(_HI))
    n_value = tirx.floor(clamped * f(_LOG2E) + f(0.5))
    body = tirx.Let(r, clamped - n * f(_LN2_HI) - n * f(_LN2_LO), body)
    body = tirx.Let(n, n_value, body)
    return tirx.Let(x, v, body)
