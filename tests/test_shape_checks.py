"""Shapes and dtypes at the edges: zero-size dims (numpy's result or a
ShapeError, never a TVM error), dims that do not fit int64, and the one dtype
promotion rule of the multi-input ops."""
import numpy as np
import pytest

import kiln
from kiln.errors import DTypeError, KilnError, ShapeError
from kiln.te import get_op, list_ops

from cases import CASES
from helpers import Case, as_list, assert_close, random_inputs

FIRST = {}
for _c in CASES:
    FIRST.setdefault(_c.op, _c)


def _zeroed(case: Case, where: str) -> Case:
    """``case`` with the first (or last) dim of every input set to 0."""
    def zero(shape):
        k = 0 if where == "first" else len(shape) - 1
        return tuple(0 if i == k else d for i, d in enumerate(shape))
    return Case(case.op, [zero(s) for s in case.shapes], case.dtypes, case.attrs, case.low, case.high, case.make)


def check_numpy_or_shape_error(case: Case) -> str:
    """Build and run ``case``: it matches numpy or is refused with ShapeError."""
    op = get_op(case.op)
    try:
        kernel = kiln.build(case.op, case.shapes, case.dtype_list(), case.attrs)
    except ShapeError:
        return "refused"
    arrays = random_inputs(case, np.random.default_rng(0))
    got = as_list(kernel(*arrays))
    with np.errstate(all="ignore"):
        try:
            want = as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
        except (ValueError, IndexError) as exc:
            pytest.fail(f"{case}: kiln computed a call numpy refuses ({exc})")
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w), "float64", str(case))
    return "computed"


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("name", sorted(FIRST))
def test_zero_size_dims_compute_numpy_or_raise_shape_error(name, where):
    check_numpy_or_shape_error(_zeroed(FIRST[name], where))


@pytest.mark.parametrize("case, outcome", [
    (Case("mean", [(0,)]), "computed"),                     # NaN, as numpy
    (Case("sum", [(3, 0)], attrs={"axis": 1}), "computed"),  # zeros
    (Case("matmul", [(0, 4), (4, 4)]), "computed"),          # an empty (0, 4)
    (Case("matmul", [(3, 0), (0, 2)]), "computed"),          # zeros: a sum of nothing
    (Case("concatenate", [(0, 3), (2, 3)]), "computed"),
    (Case("relu", [(0,)]), "computed"),
    (Case("max", [(0, 3)], attrs={"axis": 0}), "refused"),  # numpy raises: no identity
    (Case("softmax", [(2, 0)]), "refused"),
    (Case("batch_norm_train", [(0, 3, 4, 5), (3,), (3,)]), "refused"),  # no statistics of nothing
    (Case("batch_norm_train", [(2, 3, 0), (3,), (3,)]), "refused"),
])
def test_zero_size_examples(case, outcome):
    assert check_numpy_or_shape_error(case) == outcome


def test_zero_size_dims_are_refused_on_cuda_with_a_shape_error():
    with pytest.raises(ShapeError, match="zero-size"):
        kiln.build("relu", [(0, 4)], target=kiln.cuda("sm_80"))


@pytest.mark.parametrize("shape, match", [
    ((99999999999999999999,), "dim 0 is 99999999999999999999"),
    ((2**40, 2**40), "elements, more than 2\\*\\*63 - 1"),
    ((3, -1), "dim 1 is -1"),
    ((2.0,), "expected ints"),
    ((True, 3), "expected ints"),
])
def test_dims_that_do_not_fit_are_shape_errors(shape, match):
    with pytest.raises(ShapeError, match=match) as info:
        kiln.build("relu", [shape])
    assert info.value.op == "relu" and info.value.arg == "input 0"


def test_numpy_int_dims_are_accepted():
    out_shapes = get_op("add").check([(np.int64(3), np.int32(2)), (2,)], ["float32"] * 2).out_shapes
    assert out_shapes == ((3, 2),) and all(type(d) is int for d in out_shapes[0])


# -- promotion: numpy's result_type, for every op of several inputs ------------------
MIXED = [
    Case("power", [(4, 5), (4, 5)], ["float32", "int64"], low=0.5),
    Case("power", [(3,), (3,)], ["int32", "float32"], low=0.5),
    Case("conv2d", [(1, 3, 4, 4), (2, 3, 1, 1)], ["float64", "float32"]),
    Case("dense", [(1, 6), (6, 2), (2,)], ["float64", "float32", "float32"]),
    Case("matmul", [(4, 3), (3, 2)], ["float32", "float64"]),
    Case("add", [(8, 3), (3,)], ["int32", "float32"]),
    Case("stack", [(5,), (5,)], ["bool", "float32"]),
    Case("concatenate", [(2,), (3,)], ["bool", "int32"]),
    Case("max_pool2d_grad", [(1, 2, 5, 7), (1, 2, 3, 4)], ["float64", "float32"],
         attrs={"kernel": 3, "stride": 2, "padding": 1}),
]


@pytest.mark.parametrize("case", MIXED, ids=str)
def test_mixed_dtypes_promote_as_numpy(case):
    dtypes = case.dtype_list()
    out_dtypes = get_op(case.op).check(case.shapes, dtypes, case.attrs).out_dtypes
    assert out_dtypes[0] == str(np.result_type(*dtypes))
    assert check_numpy_or_shape_error(case) == "computed"


def test_every_op_of_several_inputs_promotes():
    """No multi-input op refuses a float/int mix the promotion rule gives a float for."""
    for name in list_ops():
        op = get_op(name)
        if op.arity is not None and op.arity < 2 or name in (
                "masked_select", "masked_scatter", "softmax_cross_entropy", "where",  # mask or labels: not promoted
                "take", "take_grad", "gather_elements", "gather_elements_grad",  # nor indices
                "dense_int8", "conv2d_int8", "depthwise_conv2d_int8", "dequantize_add",
                "matmul_int8"):  # nor quantized operands: their dtypes are fixed
            continue
        case = FIRST[name]
        dtypes = ["float64"] + ["float32"] * (len(case.shapes) - 1)
        try:
            out = op.check(case.shapes, dtypes, case.attrs).out_dtypes
        except KilnError as exc:
            pytest.fail(f"{name} refused float64 with float32: {exc}")
        all64 = op.check(case.shapes, ["float64"] * len(dtypes), case.attrs).out_dtypes
        assert out[0] == all64[0], name  # float64, or bool for a comparison


def test_power_of_two_integer_tensors_is_refused_clearly():
    with pytest.raises(DTypeError, match="promote to int32"):
        kiln.build("power", [(3,), (3,)], "int32")


def test_gradients_keep_the_input_dtype_when_an_op_promotes():
    a = kiln.Tensor(np.array([1.0, 2.0], "float32"), requires_grad=True)
    y = a ** kiln.Tensor(np.array([0, 2], "int64"))
    assert y.dtype == "float64"
    y.sum().backward()
    assert a.grad.dtype == "float32"
    np.testing.assert_allclose(a.grad.numpy(), [0.0, 4.0])


@pytest.mark.parametrize("op", ["concatenate", "stack"])
def test_joining_0d_inputs_matches_numpy(op):
    # numpy refuses to concatenate 0-d arrays and stacks them into a vector; kiln does the same, never an IndexError
    a, b = np.float32(1.5), np.float32(-2.0)
    try:
        want = getattr(np, op)([a, b])
    except ValueError:
        with pytest.raises(ShapeError, match=op):
            kiln.build(op, [(), ()])
        return
    np.testing.assert_array_equal(kiln.build(op, [(), ()])(np.asarray(a), np.asarray(b)), want)


def _past_int32(case: Case) -> Case | None:
    """``case`` with its first input's first dim grown (in every input that
    shares it) until that input has more than 2**31 - 1 elements; None where
    the op's rules refuse it."""
    shape = case.shapes[0] if case.shapes else ()
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    rest = int(np.prod(shape[1:], dtype=np.int64))
    grown = 2**31 // rest + 1
    shapes = [(grown, *s[1:]) if len(s) and s[0] == shape[0] else s for s in case.shapes]
    try:
        get_op(case.op).check(shapes, case.dtype_list(), case.attrs)
    except KilnError:
        return None
    return Case(case.op, shapes, case.dtypes, case.attrs)


@pytest.mark.parametrize("name", sorted(FIRST))
def test_past_int32_indices_every_op_builds_with_int64_or_refuses_clearly(name):
    """A tensor of more than 2**31 - 1 elements: the kernel is declared with
    int64 dims (kiln.runtime.lower) and builds, or is refused with a
    ShapeError naming the limit, never TVM's overflow text. Compiled only."""
    case = _past_int32(FIRST[name])
    if case is None:
        pytest.skip(f"{name}'s shape rules tie its first dim to its attributes")
    try:
        kiln.build(case.op, case.shapes, case.dtype_list(), case.attrs)
    except ShapeError as exc:
        assert "2**31 - 1 elements" in str(exc) and "Check failed" not in str(exc)


@pytest.mark.parametrize("op, shapes", [
    ("add", [(2,) * 32] * 2),  # 2**32 elements: TVM's int32 literal overflowed
    ("add", [(2,) * 33] * 2),  # 2**33: its index split divided by zero
    ("matmul", [(256, 256, 256, 256), (256, 256)]),
])
def test_the_reported_past_int32_shapes(op, shapes):
    try:
        kiln.build(op, shapes)
    except ShapeError as exc:
        assert "2**31 - 1 elements" in str(exc) and "Check failed" not in str(exc)


@pytest.mark.parametrize("op, shapes, attrs, what", [
    ("conv2d", [(1, 6, 8, 8), (4, 2, 3, 3)], {"groups": 4}, "6 input channels"),
    ("conv2d", [(1, 8, 8, 8), (6, 2, 3, 3)], {"groups": 4}, "6 output channels"),
    ("conv2d", [(1, 8, 8, 6), (3, 3, 2, 4)], {"groups": 4, "layout": "NHWC"}, "6 input channels"),
    ("conv2d_backward_data", [(1, 6, 8, 8), (6, 1, 3, 3)], {"groups": 4, "in_size": 8, "padding": 1},
     "6 output channels"),
    ("conv2d_backward_weight", [(1, 6, 8, 8), (1, 8, 8, 8)], {"groups": 4, "kernel": 3, "padding": 1},
     "6 input channels"),
])
def test_groups_must_divide_the_channels(op, shapes, attrs, what):
    """A channel count the groups do not divide is a ShapeError naming the op
    and ``groups``, before TVM is called; a weight whose input channels are not
    C / groups names the weight."""
    with pytest.raises(ShapeError, match=what) as info:
        get_op(op).check(shapes, "float32", attrs)
    assert info.value.op == op and info.value.arg == "groups"
    with pytest.raises(ShapeError, match="per group") as info:
        get_op("conv2d").check([(1, 8, 8, 8), (8, 4, 3, 3)], "float32", {"groups": 4})
    assert info.value.arg == "w"
