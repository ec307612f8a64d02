"""Property-based test: random shapes, dtypes, axes and attrs thrown at every op.

Each call either matches the numpy reference (values, shape and dtype) or
raises a ``KilnError`` subclass — never another exception, never a crash.
Inputs start from the case table (so every op is reached) and are mutated:
dims resized, dims added or dropped, dtypes swapped, attrs replaced by random
(often invalid) values.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
from kiln.errors import KilnError
from kiln.te import DTYPES, get_op

from cases import CASES
from helpers import Case, as_list, assert_close, random_inputs

ATTR_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-4, 4), st.floats(-3, 3, allow_nan=False),
    st.tuples(st.integers(-3, 3)), st.tuples(st.integers(-3, 3), st.integers(-3, 3)),
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
    st.sampled_from(["NCHW", "NHWC", "float64", "int32", "bogus"]),
)


@st.composite
def mutated_case(draw):
    base = draw(st.sampled_from(CASES))
    shapes = [list(s) for s in base.shapes]
    for s in shapes:
        for i in range(len(s)):
            if draw(st.integers(0, 3)) == 0:
                s[i] = draw(st.integers(1, 9))
        if draw(st.integers(0, 9)) == 0:
            s.insert(0, draw(st.integers(1, 4)))
        if s and draw(st.integers(0, 9)) == 0:
            s.pop()
    dtypes = base.dtype_list()
    if draw(st.integers(0, 4)) == 0:
        k = draw(st.integers(0, len(dtypes) - 1))
        dtypes[k] = draw(st.sampled_from(DTYPES))
    attrs = dict(base.attrs)
    op = get_op(base.op)
    for key in op.attrs:
        if draw(st.integers(0, 3)) == 0:
            attrs[key] = draw(ATTR_VALUES)
    return Case(base.op, [tuple(s) for s in shapes], dtypes, attrs, base.low, base.high, base.make)


@settings(max_examples=1000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=mutated_case(), seed=st.integers(0, 2**16))
def test_random_calls_match_numpy_or_raise_kiln_errors(case, seed):
    op = get_op(case.op)
    rng = np.random.default_rng(seed)
    try:
        arrays = random_inputs(case, rng)
    except Exception:  # noqa: BLE001 - a case's own input maker may not fit a mutated shape
        arrays = None
    try:
        kernel = kiln.build(case.op, case.shapes, case.dtypes, case.attrs)
        if arrays is None:
            return
        got = as_list(kernel(*arrays))
    except KilnError:
        return
    with np.errstate(all="ignore"):
        try:
            want = as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
        except (ValueError, IndexError, TypeError) as exc:
            pytest.fail(f"{case}: kiln accepted a call numpy rejects ({type(exc).__name__}: {exc})")
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w), str(np.asarray(w).dtype), str(case))
