"""An eager backward pass seen repeatedly runs as one compiled module call
(nn/capture.py), with the eager sweep's numerics."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.nn import capture
from kiln.nn.zoo import build_model
from kiln.runtime.pool import Dispatch


@pytest.fixture(autouse=True)
def fresh():
    capture.forget()
    yield
    capture.forget()


def _train(name, shape, steps, monkeypatch, on: bool):
    monkeypatch.setenv("KILN_CAPTURE", "1" if on else "0")
    kiln.manual_seed(0)
    model = build_model(name, shape, 10)
    opt = nn.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn, rng, losses = nn.SoftmaxLoss(), np.random.default_rng(0), []
    for _ in range(steps):
        x = rng.random((16, *shape), dtype=np.float32)
        y = rng.integers(0, 10, 16).astype("int32")
        opt.zero_grad()
        loss = loss_fn(model(nn.Tensor(x)), nn.Tensor(y))
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    return losses, model.state_dict()


@pytest.mark.parametrize("name,shape", [("mlp-residual", (64,)), ("resnet", (1, 8, 8))])
def test_captured_backward_trains_as_the_eager_sweep(name, shape, monkeypatch):
    """Losses and weights after 12 steps (9 of them captured) against the
    eager sweep: measured equal to the last bit; allowed 1e-5."""
    eager_losses, eager_state = _train(name, shape, 12, monkeypatch, on=False)
    losses, state = _train(name, shape, 12, monkeypatch, on=True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for k in state:
        np.testing.assert_allclose(state[k], eager_state[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_a_repeated_backward_launches_no_kernel(monkeypatch):
    kiln.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10)
    x = nn.Tensor(np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32))
    y = nn.Tensor(np.arange(4, dtype="int32"))
    launches = []
    real = Dispatch.launch
    monkeypatch.setattr(Dispatch, "launch", lambda self, i, o: (launches.append(1), real(self, i, o)))
    grads = []
    for step in range(capture.REPEATS + 2):
        for p in model.parameters():
            p.grad = None
        loss = nn.SoftmaxLoss()(model(x), y)
        launches.clear()
        loss.backward()
        assert bool(launches) == (step < capture.REPEATS), (step, len(launches))
        grads.append([p.grad.numpy() for p in model.parameters()])
    for later in grads[1:]:  # the same weights and batch: the same gradients, replayed or not
        for a, b in zip(grads[0], later):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_what_is_not_captured_keeps_eager_semantics():
    """Accumulating gradients (no zero_grad), a parameter the loss does not
    reach, and create_graph all run the eager sweep and stay right."""
    w = nn.Tensor(np.array([1.0, 2.0, 3.0], "float32"), requires_grad=True)
    unused = nn.Tensor(np.ones(3, "float32"), requires_grad=True)
    for _ in range(capture.REPEATS + 2):
        w.grad = None
        (w * w).sum().backward()
        assert unused.grad is None
        np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0, 6.0])
    for _ in range(capture.REPEATS + 1):  # no zero_grad: the sums accumulate
        (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.array([2.0, 4.0, 6.0]) * (capture.REPEATS + 2))
    for _ in range(capture.REPEATS + 1):
        w.grad = None
        (w * w * w).sum().backward(create_graph=True)
        g = w.grad
        w.grad = None
        g.sum().backward()  # d/dw sum(3 w^2) = 6 w
        np.testing.assert_allclose(w.grad.numpy(), [6.0, 12.0, 18.0], rtol=1e-6)


def test_a_new_shape_is_a_new_structure(monkeypatch):
    w = nn.Tensor(np.ones((5, 3), "float32"), requires_grad=True)
    rng = np.random.default_rng(0)
    for rows in [2] * (capture.REPEATS + 1) + [7] * (capture.REPEATS + 1) + [2]:
        x = rng.random((rows, 5), dtype=np.float32)
        w.grad = None
        (nn.Tensor(x) @ w).relu().sum().backward()
        want = x.T @ ((x @ np.ones((5, 3), "float32")) > 0).astype("float32")
        np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5)


def test_a_repeated_optimizer_step_is_one_module_call(monkeypatch):
    """Adam's changing bias correction and a new learning rate reach the
    captured step as feeds; a parameter given new memory is a new step."""
    def run(on: bool):
        monkeypatch.setenv("KILN_CAPTURE", "1" if on else "0")
        capture.forget()
        kiln.manual_seed(0)
        model = build_model("mlp", (64,), 10)
        opt = nn.optim.Adam(model.parameters(), lr=0.01)
        loss_fn, rng, launched = nn.SoftmaxLoss(), np.random.default_rng(0), []
        real = Dispatch.launch
        monkeypatch.setattr(Dispatch, "launch", lambda self, i, o: (launched.append(self.kernel.op.name),
                                                                   real(self, i, o)))
        for k in range(capture.REPEATS + 6):
            if k == capture.REPEATS + 2:
                opt.lr = 0.003
                model.parameters()[0].data = model.parameters()[0].numpy() * 0.5  # new memory
            x = rng.random((16, 64), dtype=np.float32)
            y = rng.integers(0, 10, 16).astype("int32")
            opt.zero_grad()
            loss_fn(model(nn.Tensor(x)), nn.Tensor(y)).backward()
            launched.clear()
            opt.step()
            if on and k in (capture.REPEATS, capture.REPEATS + 5):  # captured, then captured again
                assert "adam_step" not in launched, k
        monkeypatch.setattr(Dispatch, "launch", real)
        return model.state_dict(), opt.t

    eager_state, eager_t = run(False)
    state, t = run(True)
    assert t == eager_t
    for k in state:
        np.testing.assert_allclose(state[k], eager_state[k], rtol=1e-5, atol=1e-6, err_msg=k)
