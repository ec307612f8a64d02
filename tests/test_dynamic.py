"""Dynamic shapes: symbolic dims end to end, nn's specialize-then-generalize
policy, data-dependent ops through autograd, and clear errors when a
symbolic dim meets a size it cannot take."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import KilnError, ShapeError
from kiln.nn import tensor as nn_tensor
from kiln.te import Bounded, get_op, sym

from cases import CASES
from helpers import as_list, assert_close, random_inputs

#: ops that refuse some symbolic dims by design (the sweep below makes every
#: dim > 1 symbolic, equal sizes sharing a symbol): conv2d needs a static
#: kernel size, pool gradients cannot prove the out_grad shape, broadcast_to,
#: getitem and split need the sizes their attrs name
REFUSE_SYMBOLIC = {"conv2d", "max_pool2d_grad", "avg_pool2d_grad", "broadcast_to", "getitem", "getitem_grad",
                   "split"}


def test_one_symbolic_kernel_serves_every_size_and_stays_vectorized():
    n = sym("n")
    kernel = kiln.build("dense", [(n, 100), (100, 40), (40,)], attrs={"relu": True})
    assert "T.vectorized" in kernel.script() and "T.parallel" in kernel.script()
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((100, 40)).astype("float32"), rng.standard_normal(40).astype("float32")
    for rows in (1, 5, 6, 7, 64, 301):  # below, at and past the 6-row register tile
        x = rng.standard_normal((rows, 100)).astype("float32")
        np.testing.assert_allclose(kernel(x, w, b), np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)
    assert kiln.build("dense", [(n, 100), (100, 40), (40,)], attrs={"relu": True}) is kernel  # one cache entry


def _first_case_per_op():
    first = {}
    for case in CASES:
        if not get_op(case.op).data_dependent:
            first.setdefault(case.op, case)
    return list(first.values())


@pytest.mark.parametrize("case", _first_case_per_op(), ids=str)
def test_every_op_runs_with_symbolic_dims_or_refuses_them_clearly(case):
    op, dtypes = get_op(case.op), case.dtype_list()
    syms = {}
    general = [tuple(syms.setdefault(d, sym(f"s{d}")) if d > 1 else d for d in s) for s in case.shapes]
    try:
        kernel = kiln.build(case.op, general, dtypes, case.attrs)
    except KilnError as exc:
        assert case.op in REFUSE_SYMBOLIC, f"{case.op} refused symbolic dims: {exc}"
        return
    arrays = random_inputs(case, np.random.default_rng(0), dtypes)
    want = as_list(op.reference(*arrays, **op.parse_attrs(case.attrs)))
    for got, ref in zip(as_list(kernel(*arrays)), want):
        assert_close(got, np.asarray(ref), "float32", str(case))


@pytest.mark.parametrize("symbolic", ["n", "nc", "nhw", "no", "ncohw"])
def test_conv2d_with_symbolic_dims_at_many_sizes(symbolic):
    """Symbolic batch/input channels keep the tiled template; symbolic output
    channels or spatial dims take the generic schedule (the tiled write-back
    cannot be bounded), and every size is right."""
    base = dict(n=2, c=4, h=8, w=8, o=8)
    dims = {k: sym(k) if k in symbolic else v for k, v in base.items()}
    kernel = kiln.build("conv2d", [(dims["n"], dims["c"], dims["h"], dims["w"]), (dims["o"], dims["c"], 3, 3)],
                        attrs={"padding": 1})
    conv, rng = get_op("conv2d"), np.random.default_rng(0)
    for sizes in [(1, 1, 8, 8, 4), (7, 4, 4, 5, 8), (3, 5, 7, 9, 9), (64, 1, 8, 8, 4)]:
        n, c, h, w, o = (v if k in symbolic else base[k] for k, v in zip("nchwo", sizes))
        x, wt = rng.standard_normal((n, c, h, w)).astype("float32"), rng.standard_normal((o, c, 3, 3)).astype("float32")
        want = conv.reference(x, wt, **conv.parse_attrs({"padding": 1}))
        np.testing.assert_allclose(kernel(x, wt), want, rtol=1e-4, atol=1e-4)


def test_nn_generalizes_only_the_dim_a_layer_varies(monkeypatch):
    """Two layers of one op (different channels) at many batch sizes: each gets
    its own kernel with only the batch symbolic, and every result is right."""
    monkeypatch.setattr(nn_tensor, "_seen", {})
    monkeypatch.setattr(nn_tensor, "_kernels", {})
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv(4, 8, 3))
    x = np.random.default_rng(0).random((64, 1, 8, 8)).astype("float32")
    full = model(kiln.Tensor(x)).numpy()
    for batch in (1, 7, 3, 64, 5, 11):
        np.testing.assert_allclose(model(kiln.Tensor(x[:batch])).numpy(), full[:batch], rtol=1e-4, atol=1e-5)
    convs = [k for (k, _), key in zip(nn_tensor._kernels.values(), nn_tensor._kernels) if key[0] == "conv2d"]
    general = {id(k): k for k in convs if not isinstance(k.shapes[0][0], int)}
    assert len(general) == 2  # one per layer, shared by every later batch size
    for k in general.values():
        assert all(isinstance(d, int) for d in k.shapes[0][1:] + k.shapes[1])


def test_a_symbolic_dim_that_cannot_hold_is_a_clear_error():
    n = sym("n")
    add = kiln.build("add", [(n, 4), (n, 4)])
    with pytest.raises(ShapeError, match=r"add.*input 1.*\(5, 4\).*signature"):
        add(np.ones((3, 4), "float32"), np.ones((5, 4), "float32"))
    k = sym("k")
    matmul = kiln.build("matmul", [(n, k), (k, 5)])
    with pytest.raises(ShapeError, match="matmul"):
        matmul(np.ones((2, 3), "float32"), np.ones((4, 5), "float32"))  # inner dims differ at run time
    with pytest.raises(ShapeError, match="inner dims"):
        kiln.build("matmul", [(n, k), (sym("j"), 5)])  # two different symbols cannot be proven equal


def test_nn_specializes_the_first_sizes_then_compiles_one_symbolic_kernel(monkeypatch):
    monkeypatch.setattr(nn_tensor, "_seen", {})
    monkeypatch.setattr(nn_tensor, "_kernels", {})
    w = kiln.Tensor(np.random.default_rng(0).standard_normal((20, 5)).astype("float32"))
    for rows in range(1, 11):
        x = kiln.Tensor(np.random.default_rng(rows).standard_normal((rows, 20)).astype("float32"))
        np.testing.assert_allclose((x @ w).numpy(), x.numpy() @ w.numpy(), rtol=1e-5)
    kernels = {id(k) for (k, _), key in zip(nn_tensor._kernels.values(), nn_tensor._kernels) if key[0] == "matmul"}
    assert len(kernels) == nn_tensor.SPECIALIZE_LIMIT + 1  # 4 specialized, then one for every other size
    symbolic = [k for k, _ in nn_tensor._kernels.values() if not all(isinstance(d, int) for d in k.shapes[0])]
    assert symbolic and symbolic[0].shapes[1] == (20, 5)  # only the varying dim became symbolic


def test_data_dependent_shapes_are_bounded():
    assert get_op("masked_select").infer_shape((3, 4), (3, 4)) == (Bounded(0, 12),)
    assert get_op("nonzero").infer_shape((2, 5)) == (Bounded(0, 10), 2)
    assert get_op("unique").infer_shape((6,)) == (Bounded(1, 6),)
    assert "?[0..12]" in str(get_op("masked_select").infer_shape((3, 4), (3, 4)))
    with pytest.raises(ShapeError, match="static dims"):
        get_op("unique").infer_shape((sym("n"),))


def test_masked_select_through_autograd_and_downstream_ops():
    rng = np.random.default_rng(1)
    for _ in range(6):  # lengths vary from call to call
        xs = rng.standard_normal((4, 6)).astype("float32")
        mask = rng.random((4, 6)) < 0.4
        x = kiln.Tensor(xs, requires_grad=True)
        picked = x.masked_select(kiln.Tensor(mask))
        assert picked.shape == (int(mask.sum()),)
        loss = (picked * picked).sum() + picked.exp().sum()
        loss.backward()
        np.testing.assert_allclose(loss.numpy(), (xs[mask] ** 2).sum() + np.exp(xs[mask]).sum(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), np.where(mask, 2 * xs + np.exp(xs), 0), rtol=1e-5)


def test_nonzero_and_unique_on_tensors():
    rng = np.random.default_rng(2)
    xs = rng.integers(-2, 3, (5, 4)).astype("int32")
    t = kiln.Tensor(xs)
    np.testing.assert_array_equal(t.nonzero().numpy(), np.argwhere(xs))
    np.testing.assert_array_equal(t.unique().numpy(), np.unique(xs))
    counts = kiln.Tensor(np.zeros((3, 3), "float32")).nonzero()
    assert counts.shape == (0, 2)  # nothing selected: an empty result, not an error


def test_masked_scatter_never_reads_past_its_values():
    # more true positions than values: the ones without a value stay zero (no read past the buffer)
    mask = np.array([[True, False, True], [True, True, True]])
    got = kiln.build("masked_scatter", [(3,), (2, 3)], ["float64", "bool"])(np.array([1.0, 2.0, 3.0]), mask)
    np.testing.assert_array_equal(got, [[1.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
