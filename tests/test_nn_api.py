"""kiln.nn agrees with needle and PyTorch where their users will assume it:
transpose/permute, backward without a graph, Conv's pairs, reduction
argument names, the functional namespace, init helpers, gradient clipping,
one seed for everything random, label checks and the module walk."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, DataError, DTypeError, GradError, ShapeError, TargetError
from kiln.nn import data
from kiln.nn import functional as F

try:
    import torch
except ImportError:  # the numpy references below still run
    torch = None

RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 4)).astype("float32")


def t(a, grad=False):
    return kiln.Tensor(np.asarray(a, dtype="float32"), requires_grad=grad)


def test_transpose_swaps_two_axes_and_permute_reorders_all():
    x = t(A)
    np.testing.assert_array_equal(x.transpose().numpy(), A.swapaxes(-1, -2))   # needle: the last two
    np.testing.assert_array_equal(x.transpose((0, 1)).numpy(), A.swapaxes(0, 1))  # needle: a pair
    np.testing.assert_array_equal(x.transpose(0, 2).numpy(), A.swapaxes(0, 2))    # PyTorch: dim0, dim1
    np.testing.assert_array_equal(F.transpose(x, (-1, 0)).numpy(), A.swapaxes(-1, 0))
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), A.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.permute((2, 0, 1)).numpy(), A.transpose(2, 0, 1))
    np.testing.assert_array_equal(x[0].T.numpy(), A[0].T)
    w = t(A, grad=True)
    (w.transpose(0, 1) * t(A.swapaxes(0, 1))).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), A)
    with pytest.raises(AttrError, match="permute"):
        x.transpose((2, 0, 1))  # a full permutation is permute's job
    with pytest.raises(ShapeError, match="3-D"):
        x.transpose(0, 3)
    with pytest.raises(ShapeError, match="2-D"):
        x.T
    with pytest.raises(ShapeError):
        t([1.0, 2.0]).transpose()


def test_backward_without_a_graph_and_bad_tensor_arguments_are_errors():
    a = t([1.0, 2.0], grad=True)
    with kiln.no_grad():
        made_without_grad = a * a
    for value in (made_without_grad, t([1.0]) * 2, (a * a).detach()):
        with pytest.raises(GradError, match="does not require grad"):
            value.sum().backward()
    with pytest.raises(ShapeError, match="out_grad"):
        (a * a).backward(np.ones(3, "float32"))
    with pytest.raises(DTypeError, match="float"):
        kiln.Tensor([1, 2], requires_grad=True)
    with pytest.raises(DTypeError, match="dtype"):
        kiln.Tensor([1.0], dtype="flaot32")
    with pytest.raises(ShapeError, match="cannot make an array"):
        kiln.Tensor([[1.0], [1.0, 2.0]])
    (a * a).backward(np.array([1.0, 0.5], "float32"))  # an explicit out_grad of the right shape
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0])


def test_not_equal_and_truth_values_follow_the_elements():
    x, y = t([1.0, np.nan, 3.0]), t([1.0, np.nan, 4.0])
    np.testing.assert_array_equal((x != y).numpy(), [False, True, True])  # NaN != NaN, as in numpy
    np.testing.assert_array_equal((x != 3.0).numpy(), [True, True, False])
    for got, want in [(x < y, [False, False, True]), (x <= y, [True, False, True]), (x < 3.0, [True, False, False]),
                      (x <= 3.0, [True, False, True]), (2.0 < x, [False, False, True])]:
        np.testing.assert_array_equal(got.numpy(), want)  # NaN compares false, as in numpy
    flags = kiln.Tensor(np.array([True, False]))
    np.testing.assert_array_equal((flags == kiln.Tensor(np.array([True, True]))).numpy(), [True, False])
    assert not t([0.0]) and t(2.0) > 1
    with pytest.raises(ShapeError, match="ambiguous"):
        bool(x > 0)


def test_conv_takes_int_or_pair_kernel_and_stride():
    kiln.manual_seed(0)
    conv = nn.Conv(2, 3, (3, 1), stride=(2, 1))
    assert conv.weight.shape == (3, 2, 3, 1) and conv.padding == (1, 0)
    x = RNG.standard_normal((1, 2, 6, 5)).astype("float32")
    want = kiln.te.get_op("conv2d").reference(x, conv.weight.numpy(), "NCHW", (2, 1), (1, 0), (1, 1))
    np.testing.assert_allclose(conv(t(x)).numpy(), want + conv.bias.numpy()[None, :, None, None], rtol=1e-5,
                               atol=1e-5)
    assert nn.Conv(2, 3, 3, stride=2).kernel_size == (3, 3)
    for bad in (dict(kernel_size=(3, 2, 1)), dict(kernel_size=0), dict(kernel_size=3, stride=(1, 0))):
        with pytest.raises(AttrError, match="Conv"):
            nn.Conv(2, 3, **bad)


def test_reductions_take_axes_dim_and_keepdim():
    x = t(A)
    np.testing.assert_allclose(x.sum(axes=(0, 2)).numpy(), A.sum((0, 2)), rtol=1e-5)
    np.testing.assert_allclose(x.mean(dim=1, keepdim=True).numpy(), A.mean(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(x.max(axes=2).numpy(), A.max(2))
    np.testing.assert_allclose(F.summation(x, axes=(1,)).numpy(), A.sum(1), rtol=1e-5)
    np.testing.assert_allclose(F.logsumexp(x, axes=(2,)).numpy(), np.log(np.exp(A).sum(2)), rtol=1e-5)
    with pytest.raises(AttrError, match="pass one"):
        x.sum(axis=1, axes=1)
    with pytest.raises(AttrError, match="pass one"):
        x.sum(keepdims=True, keepdim=False)


def test_functional_forms_match_numpy():
    x, b = t(A), t(A + 1)
    shifted = A - A.max(-1, keepdims=True)
    log_sm = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(F.log_softmax(x).numpy(), log_sm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.softmax(x, dim=-1).numpy(), np.exp(log_sm), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(F.stack([x, b], axis=1).numpy(), np.stack([A, A + 1], 1))
    np.testing.assert_array_equal(F.cat([x, b], dim=2).numpy(), np.concatenate([A, A + 1], 2))
    parts = F.chunk(x, 2, axis=2)
    np.testing.assert_array_equal(parts[1].numpy(), A[:, :, 2:])
    np.testing.assert_array_equal(F.relu(x).numpy(), np.maximum(A, 0))
    np.testing.assert_array_equal(abs(x).numpy(), np.abs(A))
    np.testing.assert_array_equal(F.flip(x, axes=(2,)).numpy(), A[:, :, ::-1])
    np.testing.assert_allclose(F.matmul(x, x.transpose()).numpy(), A @ A.swapaxes(1, 2), rtol=1e-5)
    img = RNG.standard_normal((1, 2, 4, 4)).astype("float32")
    np.testing.assert_array_equal(F.max_pool2d(t(img), 2).numpy(), img.reshape(1, 2, 2, 2, 2, 2).max((3, 5)))
    logits, labels = RNG.standard_normal((4, 3)).astype("float32"), np.array([0, 2, 1, 2])
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    np.testing.assert_allclose(F.cross_entropy(t(logits), labels).numpy(), -logp[range(4), labels].mean(),
                               rtol=1e-5)
    np.testing.assert_array_equal(F.dropout(x, 0.5, training=False).numpy(), A)
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), 0 * A)
    with pytest.raises(AttrError, match="probability"):
        F.dropout(x, 1.5)


def test_labels_outside_the_classes_are_refused():
    logits = t(RNG.standard_normal((2, 2)))
    for labels in ([7, 0], [-1, 1], kiln.Tensor(np.array([0, 2], "int32"))):
        with pytest.raises(DataError, match=r"\[0, 2\)"):
            nn.SoftmaxLoss()(logits, labels)
    with pytest.raises(DTypeError, match="integer"):
        nn.SoftmaxLoss()(logits, np.array([0.0, 1.0]))
    assert np.isfinite(nn.SoftmaxLoss()(logits, [1, 0]).item())
    for one_hot in (lambda labels: nn.init.one_hot(3, labels), lambda labels: F.one_hot(labels, 3)):
        np.testing.assert_array_equal(one_hot(np.array([2, 0])).numpy(), np.eye(3)[[2, 0]])
        for labels in ([0, 3], [-1]):
            with pytest.raises(DataError, match=r"\[0, 3\)"):
                one_hot(labels)


def test_init_like_helpers_and_needle_signatures():
    z = nn.init.zeros_like(t(A))
    assert z.shape == A.shape and z.dtype == "float32" and not z.numpy().any()
    o = nn.init.ones_like(np.zeros((2, 2), "float64"), requires_grad=True)
    assert o.dtype == "float64" and o.requires_grad and (o.numpy() == 1).all()
    assert nn.init.zeros((2, 3)).shape == nn.init.randn(2, 3, device=kiln.cpu()).shape == (2, 3)
    assert kiln.Tensor([1.0], device=kiln.cpu()).device.kind == "cpu"
    for make in (lambda: nn.init.rand(2, device=kiln.cuda()), lambda: kiln.Tensor([1.0], device=kiln.cuda())):
        with pytest.raises(TargetError):
            make()
    with pytest.raises(AttrError):
        nn.init.zeros(2, -1)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_matches_the_formula(norm_type):
    grads = [RNG.standard_normal(s).astype("float32") for s in ((3, 4), (4,))]
    params = [nn.Parameter(np.zeros_like(g)) for g in grads] + [nn.Parameter(np.zeros(2, "float32"))]
    for p, g in zip(params, grads):
        p.grad = kiln.Tensor(g)
    flat = np.concatenate([g.ravel() for g in grads]).astype("float64")
    want = np.abs(flat).max() if norm_type == float("inf") else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    total = nn.clip_grad_norm_(params, max_norm=0.5, norm_type=norm_type)
    np.testing.assert_allclose(total.numpy(), want, rtol=1e-5)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * 0.5 / (want + 1e-6), rtol=1e-5)
    assert params[2].grad is None
    if torch is not None:
        tp = [torch.zeros(g.shape, requires_grad=True) for g in grads]
        for p, g in zip(tp, grads):
            p.grad = torch.tensor(g)
        assert float(torch.nn.utils.clip_grad_norm_(tp, 0.5, norm_type)) == pytest.approx(float(total.numpy()),
                                                                                            rel=1e-5)
        for p, k in zip(tp, params):
            np.testing.assert_allclose(p.grad.numpy(), k.grad.numpy(), rtol=1e-5)
    within = nn.clip_grad_norm_(params, max_norm=100.0, norm_type=norm_type)  # already small: unchanged
    np.testing.assert_allclose(params[0].grad.numpy(), grads[0] * 0.5 / (want + 1e-6), rtol=1e-5)
    assert float(within.numpy()) <= 0.5 + 1e-5
    with pytest.raises(AttrError):
        nn.clip_grad_norm_(params, max_norm=-1.0)
    with pytest.raises(AttrError):
        nn.clip_grad_norm_(params, max_norm=1.0, norm_type=0)


def _pipeline(seed):
    """Init, dropout, a transform without a seed and a shuffling loader without one."""
    kiln.manual_seed(seed)
    layer = nn.Linear(3, 2)
    images = np.arange(8 * 4 * 4, dtype="float32").reshape(8, 4, 4, 1)
    ds = data.NDArrayDataset(images, np.arange(8, dtype="int32"),
                             transforms=[data.RandomFlipHorizontal(0.5), data.RandomCrop(1)])
    batches = [b for epoch in range(2) for b in data.DataLoader(ds, batch_size=3, shuffle=True)]
    mask = nn.Dropout(0.5)(t(np.ones((4, 6)))).numpy()
    return [layer.weight.numpy(), mask] + [a for b in batches for a in b]


def test_one_seed_makes_init_dropout_transforms_and_shuffling_repeat():
    first, again, other = _pipeline(5), _pipeline(5), _pipeline(6)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    assert not np.array_equal(first[3], first[3 + 2 * 3])  # the second epoch has another order
    with pytest.raises(AttrError):
        kiln.manual_seed(-1)


def test_train_and_eval_reach_modules_in_dicts_like_parameters_do():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = {"drop": nn.Dropout(0.5), "norm": nn.BatchNorm1d(3)}

    net = Net().eval()
    assert not net.blocks["drop"].training and not net.blocks["norm"].training
    assert len(net.parameters()) == 2
    assert net.train().blocks["norm"].training


def test_eval_and_train_reach_dropout_and_batchnorm_in_lists_and_dicts():
    class Net(nn.Module):
        def __init__(self):
            self.stages = [nn.Dropout(0.9), nn.BatchNorm1d(4)]
            self.heads = {"drop": nn.Dropout(0.9), "norm": nn.BatchNorm1d(4)}

        def forward(self, x):
            for m in self.stages + list(self.heads.values()):
                x = m(x)
            return x

    net, x = Net(), np.random.default_rng(0).random((3, 4)).astype("float32")
    layers = net.stages + list(net.heads.values())
    net.eval()
    assert not any(m.training for m in layers)
    np.testing.assert_allclose(net(kiln.Tensor(x)).numpy(), x / np.sqrt(1 + 1e-5) ** 2, rtol=1e-5)  # no dropout
    net.train()
    assert all(m.training for m in layers)


def test_a_gradient_reading_a_value_its_op_did_not_keep_is_a_grad_error(monkeypatch):
    """An op that under-declares ``grad_inputs`` fails clearly at backward, not with garbage."""
    from kiln.te import get_op

    monkeypatch.setattr(type(get_op("multiply")), "grad_inputs", ())  # claims its gradient reads no input
    a = kiln.Tensor(np.ones((2, 3), "float32"), requires_grad=True)
    b = kiln.Tensor(np.full((2, 3), 2.0, "float32"), requires_grad=True)
    with pytest.raises(GradError, match="op 'multiply'.*grad_inputs/grad_output"):
        (a * b).sum().backward()


def test_a_deep_copied_module_owns_copies_of_its_parameters_and_their_gradients():
    import copy

    from kiln.errors import GradError
    nn.init.manual_seed(0)
    model = nn.Linear(4, 3)
    x = kiln.Tensor(np.ones((2, 4), np.float32), requires_grad=True)
    model(x).sum().backward()
    twin = copy.deepcopy(model)
    assert type(twin.weight) is type(model.weight) and twin.weight is not model.weight
    assert twin.weight.requires_grad and np.array_equal(twin.weight.grad.numpy(), model.weight.grad.numpy())
    before = model.weight.numpy()
    nn.optim.SGD(twin.parameters(), lr=1.0).step()  # in place, on the copy's own memory
    assert np.array_equal(model.weight.numpy(), before)
    np.testing.assert_allclose(twin.weight.numpy(), before - model.weight.grad.numpy(), rtol=1e-6)
    with pytest.raises(GradError, match="leaf"):
        copy.deepcopy(model(x))  # made by an op while recording: the graph's kernels do not copy
