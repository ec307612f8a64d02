"""NaN and infinities through every op of the case table: each kernel agrees
with its numpy reference when float inputs hold NaN, +inf or -inf (NaN where
numpy gives NaN; exact equality for the bool and integer results of
comparisons, ``nonzero``, ``unique``...).

The cases are the table's own (same op, shapes, dtypes and attrs as
``test_ops``), so the kernels are the ones that test compiles: in one session
this file only runs them.
"""
import numpy as np
import pytest

import kiln
from kiln.te import get_op

from cases import CASES
from devices import TARGETS
from helpers import NO_CUDA_TEMPLATE, as_list, assert_close, has_cuda_template, random_inputs


FLOATS = ("float32", "float64")
SPECIALS = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf}
# float -> int casts of NaN or inf are undefined behaviour in C, and numpy's own
# answer (with an "invalid value" warning) is whatever the CPU instruction gives.
UNDEFINED = {("cast", "int32"), ("cast", "int64")}


def _special_cases():
    return [c for c in CASES if any(d in FLOATS for d in c.dtype_list())
            and (c.op, c.attrs.get("dtype")) not in UNDEFINED]


# a conv2d on a small map leaves out the products that read zero padding (te.conv.skips_padding), as
# oneDNN's kernels do, and a stride-1 data gradient those that read the zero border around gy; numpy's
# reference multiplies them, so an infinite weight gives NaN at the border there and not here
# (test_conv_packed checks the left-out products): only the image (gy) gets the specials. The depthwise kernel
# reads its zero padding through the padding's condition, which compiles to the same: no product of a padded tap
SKIPS_PADDING = ("conv2d", "conv2d_packed", "conv2d_backward_data", "depthwise_conv2d_packed")


def with_specials(arrays, value, rng, first_only=False):
    """Copies of ``arrays`` with ``value`` written at two random positions of
    each float array (of the first only, with ``first_only``)."""
    out = []
    for k, a in enumerate(arrays):
        a = np.array(a)
        if a.dtype.kind == "f" and a.size and not (first_only and k):
            flat = a.reshape(-1)
            flat[rng.choice(a.size, size=min(2, a.size), replace=False)] = value
        out.append(a)
    return out


@pytest.mark.parametrize("case", _special_cases(), ids=str)
@pytest.mark.parametrize("target", TARGETS)
def test_nan_and_inf_match_numpy(target, case):
    op = get_op(case.op)
    if target.kind == "cuda" and not has_cuda_template(case.op):
        pytest.skip(NO_CUDA_TEMPLATE)
    dtypes = case.dtype_list()
    kernel = kiln.build(case.op, case.shapes, dtypes, case.attrs, target=target)
    if not target.runs_here:
        return  # this host only compiles that width's kernels (tests/devices.py)
    attrs = op.parse_attrs(case.attrs)
    rng = np.random.default_rng(0)
    base = random_inputs(case, rng, dtypes)
    for name, value in SPECIALS.items():
        arrays = with_specials(base, value, rng, first_only=case.op in SKIPS_PADDING)
        got = as_list(kernel(*arrays))
        with np.errstate(all="ignore"):
            want = as_list(op.reference(*arrays, **attrs))
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            tol = dtypes[0] if dtypes[0] in FLOATS else "float32"
            assert_close(g, np.asarray(w), tol, f"{case} with {name}: output {i}")


def test_every_float_op_is_checked_with_nan():
    floats = {c.op for c in CASES if any(d in FLOATS for d in c.dtype_list())}
    assert floats - {c.op for c in _special_cases()} == set()


@pytest.mark.parametrize("op, args, want", [
    ("relu", [[1.0, np.nan, -2.0]], [1.0, np.nan, 0.0]),
    ("maximum", [[np.nan, 0.0, 1.0], [0.0, np.nan, 0.5]], [np.nan, np.nan, 1.0]),
    ("sign", [[np.nan, -3.0, 0.0]], [np.nan, -1.0, 0.0]),
    ("max", [[1.0, np.nan, 3.0]], np.nan),
    ("max", [[-np.inf, -np.inf]], -np.inf),
    ("cast", [[np.nan, 0.0, -0.0]], [True, False, False]),
])
def test_the_reported_cases(op, args, want):
    """The examples that swallowed NaN (or made -inf finite) before."""
    arrays = [np.asarray(a, "float32") for a in args]
    attrs = {"dtype": "bool"} if op == "cast" else {}
    got = kiln.build(op, [a.shape for a in arrays], "float32", attrs)(*arrays)
    np.testing.assert_array_equal(got, np.asarray(want, got.dtype))


@pytest.mark.parametrize("target", TARGETS)
def test_power_keeps_every_ieee_special_case(target):
    """Every pair of bases and exponents among the specials, negatives and
    integers, as numpy gives them: CUDA's fast-math powf got (-2) ** 3 and
    (-inf) ** 1.5 as NaN; integer scalar exponents are multiplications."""
    v = np.array([-2.0, -0.5, 0.0, -0.0, 0.5, 1.0, 2.0, np.nan, np.inf, -np.inf, 1.5, -1.0, 3.0], "float32")
    a, b = (x.ravel().copy() for x in np.meshgrid(v, v))
    got = kiln.build("power", [a.shape, b.shape], target=target)(a, b)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got, np.power(a, b), rtol=3e-7, atol=0)
        for n in (3, -3, 0, 2, 7):
            kernel = kiln.build("power_scalar", [v.shape], attrs={"scalar": n}, target=target)
            assert "T.pow(" not in kernel.script()
            np.testing.assert_allclose(kernel(v), np.power(v, np.float32(n)), rtol=1e-6, atol=0, err_msg=f"** {n}")


def test_power_by_an_infinite_or_nan_scalar_is_numpys():
    x = np.array([0.5, 2.0, -1.0, 1.0, -0.5, np.nan], "float32")
    with np.errstate(all="ignore"):
        for scalar in (np.inf, -np.inf, np.nan, 1e30):
            got = kiln.build("power_scalar", [x.shape], attrs={"scalar": scalar})(x)
            np.testing.assert_array_equal(got, np.power(x, np.float32(scalar)), err_msg=f"** {scalar}")
