"""Vectorizable float32 ``exp``, ``tanh`` and ``erf``, and ``pow`` as numpy computes it on every target.

LLVM lowers a vector ``exp`` to one libm call per lane; this Cephes-style
polynomial (range reduction by ln 2, degree-5 polynomial, exponent built with
integer bit operations) vectorizes, runs ~4x faster, and stays within 3 ulp
of the exact result over the normal range (subnormal results keep the
absolute error below 1e-44). Beyond float32's range it returns inf and 0;
NaN propagates.
Other dtypes use ``tirx.exp``.

``tanh`` and ``erf``: LLVM lowers each to a libm call per lane too (4.5 and
8 ns an element on ``znver4``); these are rational approximations on a
clamped argument, ``x * P(x^2) / Q(x^2)`` (Eigen's ``generic_fast_tanh_float``
and ``generic_fast_erf_float`` coefficients, which TVM's ``fast_tanh`` and
``fast_erf`` use too): 0.3 ns an element, within 3e-7 (tanh) and 4e-7
(erf) of the exact result relative to it, the same absolute error near
zero. NaN propagates; +-inf give +-1. Other dtypes use TVM's.

``power``: an integer exponent up to ``MAX_SQUARINGS_POWER`` is repeated
squaring (exact signs for a negative base, no libm call), ``x ** 0.5`` is
``sqrt(x)`` as numpy takes it; any other float32 ``pow`` runs in float64, as
CUDA kernels are built with fast math, whose single-precision pow is
``exp2(b * log2(a))`` (NaN for a negative base, ``1 ** inf`` and ``inf ** 0``)
while the double-precision one keeps every IEEE special case.
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


#: integer exponents up to this run as multiplications
MAX_SQUARINGS_POWER = 64


def power(a, b):
    """``a ** b`` as a TIR expression (``b`` a constant or an expression)."""
    if isinstance(b, tirx.FloatImm):
        if b.value == 0.5:  # numpy takes x ** 0.5 as sqrt(x): (-inf) ** 0.5 is NaN there, inf for pow
            return tirx.sqrt(a)
        if abs(b.value) <= MAX_SQUARINGS_POWER and b.value == int(b.value):  # not for inf or NaN
            return _integer_power(a, int(b.value), dtype_of(b))
    dtype = dtype_of(a)
    if dtype == "float64":
        return tirx.power(a, b)
    return tirx.power(a.astype("float64"), b.astype("float64")).astype(dtype)


def _integer_power(a, n: int, dtype: str):
    """``a ** n`` by repeated squaring; ``x ** 0`` is 1, NaN included, as in numpy."""
    result, base, k = None, a, abs(n)
    while k:
        if k & 1:
            result = base if result is None else result * base
        k >>= 1
        if k:
            base = base * base
    if result is None:
        return tirx.const(1, dtype)
    return tirx.const(1, dtype) / result if n < 0 else result


_TANH_CLAMP = 7.90531110763549805  # tanh rounds to +-1 in float32 beyond it
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_TANH_TINY = 0.0004  # below it tanh(x) is x in float32
_ERF_CLAMP = 4.0  # erf rounds to +-1 in float32 beyond it
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _rational(v, name: str, clamp: float, p_coeffs, q_coeffs, tiny: float | None = None):
    """``x * P(x^2) / Q(x^2)`` at ``x`` = ``v`` clamped to +-``clamp`` (x itself below ``tiny``, +-1 at
    the clamp), NaN kept."""
    f = lambda c: tirx.const(c, "float32")  # noqa: E731
    x, x2 = tirx.Var(f"{name}_x", "float32"), tirx.Var(f"{name}_x2", "float32")

    def poly(coeffs):
        out = f(coeffs[0])
        for c in coeffs[1:]:
            out = out * x2 + f(c)
        return out

    body = x * poly(p_coeffs) / poly(q_coeffs)
    if tiny is not None:
        body = tirx.Select(tirx.abs(x) < f(tiny), x, body)
    # +-1 exactly at the clamp (the rational is a rounding short of it there): 1 + tanh(-inf) is 0
    body = tirx.Select(x >= f(clamp), f(1.0), tirx.Select(x <= f(-clamp), f(-1.0), body))
    body = tirx.Select(nanmath.isnan(x), x, tirx.Let(x2, x * x, body))
    clamped = tirx.Select(nanmath.isnan(v), v, tirx.min(tirx.max(v, f(-clamp)), f(clamp)))
    return tirx.Let(x, clamped, body)


def sigmoid(v):
    """``1 / (1 + e ** -v)`` as a TIR expression (``exp`` above for float32)."""
    one = tirx.const(1, dtype_of(v))
    return one / (one + exp(-v))


def tanh(v):
    """``tanh(v)`` as a TIR expression."""
    if dtype_of(v) != "float32":
        return tirx.tanh(v)
    return _rational(v, "tanh", _TANH_CLAMP, _TANH_P, _TANH_Q, _TANH_TINY)


def erf(v):
    """``erf(v)`` as a TIR expression."""
    if dtype_of(v) != "float32":
        return tirx.erf(v)
    return _rational(v, "erf", _ERF_CLAMP, _ERF_P, _ERF_Q)
