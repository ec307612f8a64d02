"""Autograd Tensor, modules, init and optimizers."""
import gc

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, GradError, ShapeError


def t(a, grad=False):
    return kiln.Tensor(np.asarray(a, dtype="float32"), requires_grad=grad)


def test_backward_matches_hand_derivatives_and_sums_fan_out():
    x = t([[1.0, -2.0, 3.0]], grad=True)
    w = t([[0.5], [1.0], [-1.0]], grad=True)
    y = x @ w                      # (1, 1)
    z = (y * y + y).sum()          # y used twice: gradients summed
    z.backward()
    yv = (x.numpy() @ w.numpy()).item()
    np.testing.assert_allclose(w.grad.numpy(), x.numpy().T * (2 * yv + 1), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), w.numpy().T * (2 * yv + 1), rtol=1e-6)


def test_broadcasting_operators_and_numpy_on_either_side():
    a = t(np.arange(6).reshape(2, 3), grad=True)
    b = t([1.0, 2.0, 3.0], grad=True)
    out = (np.ones((2, 3), "float32") - a * b / 2.0 + 1) ** 2
    np.testing.assert_allclose(out.numpy(), (1 - a.numpy() * b.numpy() / 2 + 1) ** 2, rtol=1e-6)
    out.sum().backward()
    assert a.grad.shape == (2, 3) and b.grad.shape == (3,)


def test_higher_order_gradients():
    a = t([1.0, 2.0, -3.0], grad=True)
    (a * a * a).sum().backward(create_graph=True)
    first = a.grad
    np.testing.assert_allclose(first.numpy(), 3 * a.numpy() ** 2)
    a.grad = None
    first.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 6 * a.numpy())


def test_gradients_accumulate_across_backward_calls_and_skip_unreached_leaves():
    """Without clearing ``.grad``, each backward sums into it (the second
    allocates the sum, later ones add in place); a leaf the loss does not
    reach keeps ``.grad`` None."""
    w = t([1.0, 2.0, 3.0], grad=True)
    unused = t(np.ones(3), grad=True)
    for k in range(1, 5):
        (w * w).sum().backward()
        assert unused.grad is None
        np.testing.assert_allclose(w.grad.numpy(), np.array([2.0, 4.0, 6.0]) * k)


def test_detach_no_grad_and_data_setter():
    a = t([1.0, 2.0], grad=True)
    assert a.detach().requires_grad is False
    with kiln.no_grad():
        assert (a * 2).requires_grad is False
    a.data = np.array([5.0, 6.0], "float32")
    np.testing.assert_array_equal(a.numpy(), [5.0, 6.0])
    with pytest.raises(ShapeError):
        a.data = np.zeros(3, "float32")


def test_multi_output_op_gradients():
    x = t(np.arange(6).reshape(2, 3), grad=True)
    top, bottom = kiln.te.call("split", x, axis=0, sections=2)
    (top * 2 + bottom * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2, 2], [3, 3, 3]])


def test_module_parameters_train_eval_and_layers():
    nn.init.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Dropout(0.5), nn.BatchNorm1d(5), nn.Linear(5, 2))
    assert len(model.parameters()) == 6
    x = t(np.random.default_rng(0).random((8, 4)))
    model.train()
    model(x)
    bn = model.modules[3]
    assert not np.allclose(bn.running_mean.numpy(), 0)
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())  # eval: dropout off, running stats


def test_layernorm_and_batchnorm_match_numpy():
    x = np.random.default_rng(0).random((6, 5)).astype("float32")
    ln = nn.LayerNorm1d(5)(t(x)).numpy()
    want = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln, want, rtol=1e-4, atol=1e-5)
    bn = nn.BatchNorm1d(5)(t(x)).numpy()
    np.testing.assert_allclose(bn, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError):
        nn.BatchNorm1d(4)(t(x))


def test_init_distributions_follow_fan_in_fan_out():
    nn.init.manual_seed(0)
    w = nn.init.xavier_uniform(300, 200).numpy()
    assert np.abs(w).max() <= np.sqrt(6 / 500) + 1e-6
    k = nn.init.kaiming_normal(400, 100).numpy()
    assert abs(k.std() - np.sqrt(2) / np.sqrt(400)) < 0.005
    nn.init.manual_seed(3)
    a = nn.init.rand(5).numpy()
    nn.init.manual_seed(3)
    assert np.array_equal(a, nn.init.rand(5).numpy())
    with pytest.raises(AttrError):
        nn.init.kaiming_uniform(3, 3, nonlinearity="bogus")


def test_sgd_momentum_and_weight_decay_follow_the_formula():
    w = nn.Parameter(np.array([1.0, -2.0], "float32"))
    opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref, u = w.numpy().copy(), np.zeros(2)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        g = 2 * ref + 0.01 * ref
        u = 0.9 * u + 0.1 * g
        ref = ref - 0.1 * u
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5)


def test_adam_bias_correction():
    w = nn.Parameter(np.array([1.0, -2.0], "float32"))
    opt = kiln.optim.Adam([w], lr=0.1)
    ref, m, v = w.numpy().astype("float64"), 0, 0
    for step in range(1, 4):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        g = 2 * ref
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        ref = ref - 0.1 * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5)


def test_training_memory_stays_flat_over_1000_steps():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    x = t(np.random.default_rng(0).random((32, 8)))
    y = kiln.Tensor(np.random.default_rng(1).integers(0, 3, 32).astype("int32"))

    def live_tensors():
        gc.collect()
        return sum(isinstance(o, kiln.Tensor) for o in gc.get_objects())

    counts = []
    for step in range(1000):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if step in (99, 999):
            counts.append(live_tensors())
    assert counts[1] <= counts[0], f"live tensors grew from {counts[0]} to {counts[1]}"
    assert loss.item() < 1.0


def test_backward_skips_the_gradients_of_inputs_that_need_none():
    # the data's gradient of the first layer (a matmul as large as the weights') is never computed
    nn.init.manual_seed(0)
    x, w = np.random.default_rng(0).random((4, 3)).astype("float32"), np.ones((3, 2), "float32")
    for xt in (kiln.Tensor(x), kiln.Tensor(x, requires_grad=True)):
        wt, pool = kiln.Tensor(w, requires_grad=True), kiln.runtime.pool.KernelPool()
        with pool.activate():
            (xt @ wt).sum().backward()
        shapes = sorted(k.shapes for k in pool.kernels("matmul"))
        np.testing.assert_allclose(wt.grad.numpy(), np.repeat(x.sum(0)[:, None], 2, 1), rtol=1e-6)
        if xt.requires_grad:
            assert len(shapes) == 3 and xt.grad is not None  # the forward, the weight's and the data's gradients
            np.testing.assert_allclose(xt.grad.numpy(), np.full((4, 3), 2.0), rtol=1e-6)
        else:
            assert len(shapes) == 2 and xt.grad is None  # the forward and the weight's gradient only


def test_batchnorm2d_training_matches_torch_and_refuses_double_backward():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the op table checks batch_norm_train")
    rng = np.random.default_rng(0)
    x, gy = rng.standard_normal((6, 3, 4, 5)).astype("float32"), rng.standard_normal((6, 3, 4, 5)).astype("float32")
    bn = nn.BatchNorm2d(3)
    bn.weight.data, bn.bias.data = t(rng.random(3)), t(rng.random(3))
    xt = kiln.Tensor(x, requires_grad=True)
    y = bn(xt)
    (y * t(gy)).sum().backward()
    ref = torch.nn.BatchNorm2d(3, momentum=0.1)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(bn.weight.numpy()))
        ref.bias.copy_(torch.from_numpy(bn.bias.numpy()))
    xr = torch.from_numpy(x).requires_grad_()
    yr = ref(xr)
    (yr * torch.from_numpy(gy)).sum().backward()
    np.testing.assert_allclose(y.numpy(), yr.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.bias.grad.numpy(), ref.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    # the running variance is the biased one (needle's): torch keeps the unbiased
    n = x.size // 3
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3)), rtol=1e-5)
    assert abs(float(ref.running_var[0]) - (0.9 + 0.1 * x[:, 0].var() * n / (n - 1))) < 1e-5
    loss = (bn(kiln.Tensor(x, requires_grad=True)) * t(gy)).sum()
    with pytest.raises(GradError, match="batch_norm_train.*create_graph"):
        loss.backward(create_graph=True)
