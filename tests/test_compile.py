"""kiln.compile: a whole training step (or any function of Tensors) recorded
from one eager run and replayed as one module call per signature."""
import warnings

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, BuildError, ShapeError
from kiln.nn.compiled import CompileWarning
from kiln.nn.zoo import build_model
from kiln.runtime import cache
from kiln.runtime.pool import Dispatch

SHAPES = {"mlp": (64,), "mlp-residual": (64,), "cnn": (1, 8, 8), "resnet": (1, 8, 8)}


def _twins(name, seed=0):
    kiln.manual_seed(seed)
    a = build_model(name, SHAPES[name], 10)
    kiln.manual_seed(seed)
    b = build_model(name, SHAPES[name], 10)
    return a, b


def _batches(shape, n, batch, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.random((batch, *shape), dtype=np.float32), rng.integers(0, 10, batch).astype("int32"))
            for _ in range(n)]


def _eager_step(model, opt, loss_fn, x, y):
    opt.zero_grad()
    loss = loss_fn(model(nn.Tensor(x)), nn.Tensor(y))
    loss.backward()
    opt.step()
    return float(loss.numpy())


def _state_gap(a, b) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float(np.max(np.abs(sa[k] - sb[k]))) for k in sa)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_compiled_step_matches_eager_over_50_steps(name):
    """Same losses and parameters (and BatchNorm running statistics) as eager
    mode: measured equal to the last bit on the CPU; allowed 1e-5 relative."""
    eager, compiled = _twins(name)
    loss_fn = nn.SoftmaxLoss()
    opt_e = nn.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    opt_c = nn.optim.SGD(compiled.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    step = kiln.compile(lambda x, y: loss_fn(compiled(x), y), opt_c)
    for x, y in _batches(SHAPES[name], 50, 16):
        want = _eager_step(eager, opt_e, loss_fn, x, y)
        got = float(step(x, y).numpy())
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert step.signatures == 1
    assert _state_gap(eager, compiled) < 1e-5


def test_replay_launches_no_kernel_and_retraces_on_a_new_batch(monkeypatch):
    eager, compiled = _twins("cnn")
    loss_fn = nn.SoftmaxLoss()
    opt_e = nn.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = nn.optim.SGD(compiled.parameters(), lr=0.1)
    step = kiln.compile(lambda x, y: loss_fn(compiled(x), y), opt_c)
    data = _batches(SHAPES["cnn"], 3, 8) + _batches(SHAPES["cnn"], 2, 5, seed=1) + _batches(SHAPES["cnn"], 1, 8, 2)
    launches = []
    real = Dispatch.launch
    monkeypatch.setattr(Dispatch, "launch", lambda self, i, o: (launches.append(1), real(self, i, o)))
    for k, (x, y) in enumerate(data):
        want = _eager_step(eager, opt_e, loss_fn, x, y)
        launches.clear()
        got = float(step(x, y).numpy())
        traced = k in (0, 3)  # the first call of each batch size runs (and records) the eager step
        assert bool(launches) == traced, (k, len(launches))
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert step.signatures == 2
    assert _state_gap(eager, compiled) < 1e-5


def test_adam_steps_learning_rate_changes_and_new_parameter_memory_apply_each_call():
    """The optimizer's bookkeeping (Adam's step count, a new lr) runs in
    Python at every call and reaches the module as its hyperparameters; a
    parameter given new memory (``.data =``) is read from it at the next call."""
    eager, compiled = _twins("mlp")
    loss_fn = nn.SoftmaxLoss()
    opt_e, opt_c = nn.optim.Adam(eager.parameters(), lr=0.01), nn.optim.Adam(compiled.parameters(), lr=0.01)
    step = kiln.compile(lambda x, y: loss_fn(compiled(x), y), opt_c)
    for k, (x, y) in enumerate(_batches(SHAPES["mlp"], 12, 16)):
        if k == 6:
            opt_e.lr = opt_c.lr = 0.002
            for model in (eager, compiled):
                model.parameters()[0].data = model.parameters()[0].numpy() * 0.5
        want = _eager_step(eager, opt_e, loss_fn, x, y)
        assert float(step(x, y).numpy()) == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert opt_c.t == opt_e.t == 12
    assert _state_gap(eager, compiled) < 1e-5


def test_a_function_without_optimizer_and_several_results():
    kiln.manual_seed(0)
    model = build_model("cnn", SHAPES["cnn"], 10)
    model.eval()
    f = kiln.compile(lambda x: (model(x), model(x).relu()))
    for x, _ in _batches(SHAPES["cnn"], 3, 4):
        logits, positive = f(x)
        with kiln.no_grad():
            want = model(nn.Tensor(x)).numpy()
        np.testing.assert_allclose(logits.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(positive.numpy(), np.maximum(want, 0), rtol=1e-5, atol=1e-6)
    assert f.signatures == 1 and not logits.requires_grad


def test_a_second_function_of_the_same_graph_reuses_the_compiled_module():
    kiln.manual_seed(0)
    model = build_model("mlp", SHAPES["mlp"], 10)
    x = _batches(SHAPES["mlp"], 1, 3)[0][0]
    kiln.compile(lambda t: model(t))(x)
    before = cache.stats.compiled
    f = kiln.compile(lambda t: model(t))
    f(x)
    assert cache.stats.compiled == before and f.signatures == 1


def _untraceable(fn, model, opt, needle):
    step = kiln.compile(fn, opt)
    x, y = _batches(SHAPES["mlp"], 1, 8)[0]
    with pytest.warns(CompileWarning, match=needle):
        first = float(step(x, y).numpy())
    before = [p.numpy() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per reason, not one per call
        second = float(step(x, y).numpy())
    assert step.signatures == 0 and np.isfinite([first, second]).all()
    assert any(not np.array_equal(a, p.numpy()) for a, p in zip(before, model.parameters())), "eager steps train"


def test_what_cannot_be_recorded_runs_eagerly_with_one_warning():
    kiln.manual_seed(0)
    model = build_model("mlp", SHAPES["mlp"], 10)
    loss_fn = nn.SoftmaxLoss()
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    noisy = lambda x, y: loss_fn(model(x) + nn.init.rand(x.shape[0], 10), y)  # noqa: E731 - host noise, no feed
    _untraceable(noisy, model, opt, "random numbers on the host")
    kept = []
    _untraceable(lambda x, y: kept.append(model(x)) or loss_fn(kept[-1], y), model, opt, "outlives the function")
    _untraceable(lambda x, y: loss_fn(model(x), y) + kiln.te.call("nonzero", y).shape[0] * 0.0, model, opt,
                 "data-dependent")


def _dropout_run(compiled: bool) -> list:
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10))
    opt, loss_fn = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), nn.SoftmaxLoss()
    x, y = _batches(SHAPES["mlp"], 1, 16)[0]
    if compiled:
        step = kiln.compile(lambda a, b: loss_fn(model(a), b), opt)
        losses = [float(step(x, y).numpy()) for _ in range(6)]
        assert step.signatures == 1
        return losses
    losses, xt, yt = [], nn.Tensor(x), nn.Tensor(y)
    for _ in range(6):
        opt.zero_grad()
        loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    return losses


def test_dropout_masks_are_drawn_afresh_at_every_compiled_call():
    """A dropout mask is a feed of the compiled step, drawn on the host at
    every call from the seeded family: the same draws, in the same order, as
    eager steps (measured bit-equal; allowed 1e-5 relative)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compiled, not run eagerly
        compiled = _dropout_run(True)
    np.testing.assert_allclose(compiled, _dropout_run(False), rtol=1e-5)
    kiln.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5))  # training mode: each call its own mask
    f = kiln.compile(lambda t: model(t))
    x = _batches((64,), 1, 4)[0][0]
    first, second = f(x).numpy(), f(x).numpy()
    assert f.signatures == 1 and not np.array_equal(first == 0, second == 0)


def test_bad_arguments_are_kiln_errors():
    kiln.manual_seed(0)
    model = build_model("mlp", SHAPES["mlp"], 10)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(AttrError, match="expected a callable"):
        kiln.compile(3)
    with pytest.raises(AttrError, match="kiln.optim optimizer"):
        kiln.compile(lambda x: x, optimizer="sgd")
    x = _batches(SHAPES["mlp"], 1, 4)[0][0]
    with pytest.raises(AttrError, match="expected a Tensor or a tuple of Tensors"):
        kiln.compile(lambda t: 3.0)(x)
    with pytest.raises(ShapeError, match="0-d loss"):
        kiln.compile(lambda t: model(t), opt)(x)
    inner = kiln.compile(lambda t: model(t))
    with pytest.raises(BuildError, match="do not nest"):
        kiln.compile(lambda t: inner(t))(x)


def test_parameters_and_optimizer_state_are_updated_in_their_own_memory():
    """The module writes the updates over the caller's buffers (call_tir_inplace),
    as eager ``apply_`` does: a tensor sharing a parameter's memory sees them."""
    kiln.manual_seed(0)
    model = build_model("cnn", SHAPES["cnn"], 10)
    opt = nn.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    step = kiln.compile(lambda x, y: loss_fn(model(x), y), opt)
    x, y = _batches(SHAPES["cnn"], 1, 8)[0]
    step(x, y)
    weight = model.parameters()[0]
    alias, where = weight.detach(), weight._array.data_ptr()
    momentum = opt.u[0]._array.data_ptr()
    before = alias.numpy().copy()
    step(x, y)
    assert weight._array.data_ptr() == where and opt.u[0]._array.data_ptr() == momentum
    assert not np.array_equal(alias.numpy(), before)
    np.testing.assert_array_equal(alias.numpy(), weight.numpy())


def _conv_net(seed):
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Conv(1, 8, 3), nn.ReLU(), nn.GlobalAvgPool2d(), nn.Linear(8, 10))


def test_a_conv_bias_and_relu_fuse_into_the_conv_in_a_compiled_step():
    """The bias is reshaped after the conv in the recorded order; the fused
    conv takes the add's place, so bias and relu are its write-back (not a
    pass over the activations of their own), and the step still trains as
    eager mode does."""
    loss_fn = nn.SoftmaxLoss()
    (x, y), = _batches((1, 8, 8), 1, 16)
    probe = _conv_net(7)
    graph = kiln.compile(lambda x, y: loss_fn(probe(x), y)).graph(nn.Tensor(x), nn.Tensor(y))
    convs = [n for n in graph.nodes if n.op.name == "conv2d"]
    assert [[op.name for op, _, _ in n.epilogue] for n in convs] == [["add", "relu"]]
    a, b = _conv_net(7), _conv_net(7)
    opt_a, opt_b = nn.optim.SGD(a.parameters(), lr=0.1), nn.optim.SGD(b.parameters(), lr=0.1)
    step = kiln.compile(lambda x, y: loss_fn(a(x), y), opt_a)
    for x, y in _batches((1, 8, 8), 5, 16, seed=1):
        got = float(step(nn.Tensor(x), nn.Tensor(y)).numpy())
        assert got == pytest.approx(_eager_step(b, opt_b, loss_fn, x, y), rel=1e-5, abs=1e-6)
    assert _state_gap(a, b) < 1e-5
