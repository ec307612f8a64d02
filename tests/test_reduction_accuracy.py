"""Long float32 reductions are as accurate as numpy's: their sums accumulate
in float64 (``kiln.te.reduction.accumulator``), so over 1e5-1e6 positive
terms (where rounding errors add up instead of cancelling) the error against
a float64 computation is float32's last rounding, at most numpy's pairwise
error or two roundings. ``benchmarks/reduction_accuracy.py`` gives both
errors and times side by side."""
import numpy as np
import pytest

import kiln
from kiln.te import get_op

ROUNDING = 2 * np.finfo(np.float32).eps  # two float32 roundings, relative


@pytest.mark.parametrize("op, shape, attrs", [
    ("sum", (1_000_000,), {}), ("mean", (1_000_000,), {}), ("sum", (100, 10_000), {"axis": 1}),
    ("sum", (10_000, 100), {"axis": 0}), ("mean", (64, 16, 32, 32), {"axis": (0, 2, 3)}),
    ("logsumexp", (10, 100_000), {"axis": 1}),
])
def test_a_long_float32_reduction_is_as_accurate_as_numpys(op, shape, attrs):
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    ref = get_op(op)
    parsed = ref.parse_attrs(attrs)
    want = np.asarray(ref.reference(x.astype("float64"), **parsed))
    error = lambda got: float(np.max(np.abs(np.asarray(got, "float64") - want) / np.abs(want)))  # noqa: E731
    got = kiln.build(op, [shape], attrs=attrs)(x)
    assert got.dtype == np.float32
    assert error(got) <= max(error(ref.reference(x, **parsed)), ROUNDING), (error(got), op, shape)


def test_the_cross_entropy_mean_over_a_large_batch_is_as_accurate_as_numpys():
    rng = np.random.default_rng(1)
    logits, labels = rng.random((100_000, 10), dtype=np.float32) * 4, rng.integers(0, 10, 100_000).astype("int32")
    ref = get_op("softmax_cross_entropy")
    want = float(ref.reference(logits.astype("float64"), labels))
    got = kiln.build("softmax_cross_entropy", [logits.shape, labels.shape], ["float32", "int32"])(logits, labels)
    numpy_error = abs(float(ref.reference(logits, labels)) - want) / want
    assert abs(float(got) - want) / want <= max(numpy_error, ROUNDING)
