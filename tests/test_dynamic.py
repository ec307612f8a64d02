"""Dynamic shapes: symbolic dims end to end, nn's specialize-then-generalize
policy, data-dependent ops through autograd, and clear errors when a
symbolic dim meets a size it cannot take."""
import copy
import gc

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, KilnError, ShapeError
from kiln.runtime import KernelPool
from kiln.runtime.pool import default_pool
from kiln.te import Bounded, get_op, sym

from cases import CASES
from helpers import as_list, assert_close, random_inputs

#: ops that refuse some symbolic dims by design (the sweep below makes every
#: dim > 1 symbolic, equal sizes sharing a symbol): conv2d needs a static
#: kernel size, pool gradients cannot prove the out_grad shape, broadcast_to,
#: getitem and split need the sizes their attrs name, dense_packed,
#: conv2d_packed and depthwise_conv2d_packed need their weight's static
#: panel/block width (an exported constant's; the last its channels attr too)
REFUSE_SYMBOLIC = {"conv2d", "max_pool2d_grad", "avg_pool2d_grad", "broadcast_to", "getitem", "getitem_grad",
                   "split", "dense_packed", "conv2d_packed", "from_blocked",  # the last three: a static block width
                   "depthwise_conv2d_packed",  # a static block width, and the channels its attr names
                   "conv2d_backward_data",  # a static kernel size, as conv2d
                   "winograd_conv2d_weight", "conv2d_winograd",  # a static 3x3 kernel, map and block width
                   "sgd_step", "sgd_momentum_step", "adam_step",  # the hyperparameter vector is read by index
                   "take_grad", "gather_elements_grad",  # the gradient's shape attr: the static input's
                   "lstm_cell", "lstm_cell_grad",  # the gates' width is 4x the state's: unrelated sizes cannot be
                   "dense_int8", "conv2d_int8",  # a static weight (its blocks of 4 and its panels); a symbolic M runs (test_quantize)
                   "depthwise_conv2d_int8",  # a static block width and the channels its attr names; a symbolic batch runs
                   "matmul_int8"}  # a static N (B packed in its panels); a symbolic batch, M or K runs (test_quantize_matmul)


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


def test_conv2d_backward_weight_with_a_symbolic_batch_runs_at_every_size():
    """A symbolic batch leaves the template's reduction extent unknown: it
    declines before declaring a knob, and the generic schedule serves it
    (it used to decline after, which dispatch reports as a broken template)."""
    n, attrs = sym("n"), {"kernel": 3, "padding": 1}
    kernel = kiln.build("conv2d_backward_weight", [(n, 16, 8, 8), (n, 32, 8, 8)], attrs=attrs)
    op, rng = get_op("conv2d_backward_weight"), np.random.default_rng(0)
    for batch in (1, 5):
        x, gy = (rng.standard_normal((batch, c, 8, 8)).astype("float32") for c in (16, 32))
        assert_close(kernel(x, gy), op.reference(x, gy, **op.parse_attrs(attrs)), "float32", f"batch {batch}")


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


def test_nn_generalizes_only_the_dim_a_layer_varies():
    """Two layers of one op (different channels) at many batch sizes: each gets
    its own kernel with only the batch symbolic, and every result is right."""
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv(4, 8, 3))
    x = np.random.default_rng(0).random((64, 1, 8, 8)).astype("float32")
    full = model(kiln.Tensor(x)).numpy()
    for batch in (1, 7, 3, 64, 5, 11):
        np.testing.assert_allclose(model(kiln.Tensor(x[:batch])).numpy(), full[:batch], rtol=1e-4, atol=1e-5)
    general = [k for k in model.kernel_pool.kernels("conv2d") if not isinstance(k.shapes[0][0], int)]
    assert len(general) == 2  # one per layer, shared by every later batch size
    for k in general:
        assert all(isinstance(d, int) for d in k.shapes[0][1:] + k.shapes[1])


def _symbolic(kernels):
    return [k for k in kernels if not all(isinstance(d, int) for s in k.shapes for d in s)]


def _train_steps(model, batches):
    """Forward and backward of ``model`` (8 features in, 3 classes) at each batch size."""
    rng = np.random.default_rng(0)
    for n in batches:
        loss = nn.SoftmaxLoss()(model(kiln.Tensor(rng.random((n, 8), dtype=np.float32))),
                                kiln.Tensor(rng.integers(0, 3, n).astype("int32")))
        loss.backward()


def _mlp():
    return nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))


def test_each_layer_keeps_concrete_kernels_for_its_own_first_sizes():
    """Two dense layers share an op family; each has its own budget of
    SPECIALIZE_LIMIT concrete sizes, forward and backward, then one kernel
    with only the batch symbolic."""
    model = _mlp()
    limit = model.kernel_pool.specialize_limit
    _train_steps(model, range(1, limit + 1))
    assert len(model.kernel_pool.kernels("dense")) == 2 * limit
    assert not _symbolic(model.kernel_pool.kernels())  # backward (matmul, sum) too
    _train_steps(model, [limit + 5])
    general = _symbolic(model.kernel_pool.kernels("dense"))
    assert len(general) == 2  # one per layer
    assert sorted(k.shapes[1] for k in general) == [(6, 3), (8, 6)]
    # the second layer's two gradient matmuls and the first's weight gradient (its input needs none)
    assert len(_symbolic(model.kernel_pool.kernels("matmul"))) == 3


def test_a_models_kernels_do_not_depend_on_what_ran_before_it():
    first = _mlp()
    _train_steps(first, range(1, 9))  # past the limit: the first model now runs symbolic kernels
    assert _symbolic(first.kernel_pool.kernels("dense"))
    second = _mlp()
    _train_steps(second, range(9, 9 + second.kernel_pool.specialize_limit))
    assert second.kernel_pool.kernels() and not _symbolic(second.kernel_pool.kernels())


def test_a_run_uses_the_models_pool_and_a_copy_gets_an_empty_one():
    model, loss_fn = _mlp(), nn.SoftmaxLoss()
    with model.kernel_pool.activate():  # what nn.train.run_epoch does for a step
        loss_fn(model(kiln.Tensor(np.ones((2, 8), "float32"))), kiln.Tensor(np.zeros(2, "int32"))).backward()
    assert model.kernel_pool.kernels("softmax_cross_entropy") and not loss_fn.kernel_pool.kernels()
    assert "_kernel_pool" not in "".join(model.state_dict())
    twin = copy.deepcopy(model)
    assert twin.kernel_pool is not model.kernel_pool and not twin.kernel_pool.kernels()
    with pytest.raises(AttrError, match="specialize_limit"):
        KernelPool(specialize_limit=-1)


def test_ops_outside_models_use_the_default_pool_and_a_dropped_layer_takes_its_kernels():
    x = kiln.Tensor(np.ones((3, 5), "float32"))
    (x + x).numpy()
    assert any(k.shapes == ((3, 5), (3, 5)) for k in default_pool().kernels("add"))
    pool, layer = KernelPool(), nn.ReLU()
    with pool.activate():
        layer(x).numpy()
    assert pool.kernels("relu")
    del layer
    gc.collect()
    assert not pool.kernels("relu")  # the site was the layer: its memo went with it


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


def test_nn_specializes_the_first_sizes_then_compiles_one_symbolic_kernel():
    pool = KernelPool()
    w = kiln.Tensor(np.random.default_rng(0).standard_normal((20, 5)).astype("float32"))
    with pool.activate("x @ w"):
        for rows in range(1, 11):
            x = kiln.Tensor(np.random.default_rng(rows).standard_normal((rows, 20)).astype("float32"))
            np.testing.assert_allclose((x @ w).numpy(), x.numpy() @ w.numpy(), rtol=1e-5)
    kernels = pool.kernels("matmul")
    assert len(kernels) == pool.specialize_limit + 1  # 4 specialized, then one for every other size
    symbolic = _symbolic(kernels)
    assert len(symbolic) == 1 and symbolic[0].shapes[1] == (20, 5)  # only the varying dim became symbolic


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
