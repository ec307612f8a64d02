"""``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and their cells: PyTorch's contracts,
loaded from PyTorch's own modules' weights and compared with their outputs,
final states and gradients, and with 50 steps of training; a compiled step
(whose recurrent weight gradients are one joined product) trains as the
eager one (PyTorch is the oracle: skipped without it)."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, ShapeError

torch = pytest.importorskip("torch", reason="PyTorch is these modules' oracle")

TOL = 1e-9  # float64 throughout: any difference beyond rounding is a bug


def _close(ours, theirs, tol=TOL):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)


def _pair(kind: str, **kwargs):
    torch.manual_seed(0)
    ref = getattr(torch.nn, kind)(**kwargs).double()
    ours = getattr(nn, kind)(**kwargs, dtype="float64")
    ours.load_state_dict(ref.state_dict(), layout="torch")
    return ours, ref


def _check_grads(ours, ref):
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        g = theirs[name].grad.numpy()
        np.testing.assert_allclose(p.grad.numpy(), g.T if g.ndim == 2 else g, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("layers, batch_first, bidirectional, bias, initial", [
    (1, False, False, True, False),
    (2, True, True, True, True),
    (2, False, False, False, True),
])
def test_recurrent_layers_match_pytorch(kind, layers, batch_first, bidirectional, bias, initial):
    ours, ref = _pair(kind, input_size=5, hidden_size=6, num_layers=layers, batch_first=batch_first,
                      bidirectional=bidirectional, bias=bias)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5))
    state_shape = (layers * (2 if bidirectional else 1), 3 if batch_first else 4, 6)
    states = [rng.standard_normal(state_shape) for _ in range(2 if kind == "LSTM" else 1)] if initial else None
    xt, xk = torch.tensor(x, requires_grad=True), kiln.Tensor(x, requires_grad=True)
    if states is None:
        out, final = ours(xk)
        want, want_final = ref(xt)
    elif kind == "LSTM":
        out, final = ours(xk, tuple(kiln.Tensor(s) for s in states))
        want, want_final = ref(xt, tuple(torch.tensor(s) for s in states))
    else:
        out, final = ours(xk, kiln.Tensor(states[0]))
        want, want_final = ref(xt, torch.tensor(states[0]))
    _close(out, want)
    finals = final if kind == "LSTM" else (final,)
    want_finals = want_final if kind == "LSTM" else (want_final,)
    for f, w in zip(finals, want_finals):
        _close(f, w)
    ((out * out).sum() + (finals[-1] * 3).sum()).backward()
    ((want * want).sum() + (want_finals[-1] * 3).sum()).backward()
    _close(xk.grad, xt.grad)
    _check_grads(ours, ref)


def test_relu_rnn_and_unbatched_input_match_pytorch():
    ours, ref = _pair("RNN", input_size=3, hidden_size=4, nonlinearity="relu", num_layers=2)
    x = np.random.default_rng(2).standard_normal((5, 3))
    out, h = ours(kiln.Tensor(x))
    want, want_h = ref(torch.tensor(x))
    assert out.shape == (5, 4) and h.shape == (2, 4)
    _close(out, want)
    _close(h, want_h)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells_match_pytorch(kind):
    ours, ref = _pair(kind, input_size=4, hidden_size=3)
    rng = np.random.default_rng(3)
    x, h, c = rng.standard_normal((2, 4)), rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    xk = kiln.Tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    if kind == "LSTMCell":
        out = ours(xk, (kiln.Tensor(h), kiln.Tensor(c)))
        want = ref(xt, (torch.tensor(h), torch.tensor(c)))
        _close(out[1], want[1])
        out, want = out[0], want[0]
    else:
        out, want = ours(xk, kiln.Tensor(h)), ref(xt, torch.tensor(h))
    _close(out, want)
    (out * out).sum().backward()
    (want * want).sum().backward()
    _close(xk.grad, xt.grad)
    _check_grads(ours, ref)
    unbatched = ours(kiln.Tensor(x[0]))
    assert (unbatched[0] if kind == "LSTMCell" else unbatched).shape == (3,)


def test_fifty_training_steps_of_an_lstm_classifier_match_pytorch():
    """Same weights, same batches, SGD: the losses agree at every step."""
    ours, ref = _pair("LSTM", input_size=4, hidden_size=5, num_layers=2, batch_first=True)
    head, ref_head = nn.Linear(5, 3, dtype="float64"), torch.nn.Linear(5, 3).double()
    head.load_state_dict(ref_head.state_dict(), layout="torch")
    params = ours.parameters() + head.parameters()
    opt = nn.optim.SGD(params, lr=0.1)
    ref_opt = torch.optim.SGD(list(ref.parameters()) + list(ref_head.parameters()), lr=0.1)
    rng = np.random.default_rng(4)
    losses, ref_losses = [], []
    for _ in range(50):
        x, y = rng.standard_normal((4, 3, 4)), rng.integers(0, 3, 4)
        opt.zero_grad()
        loss = nn.SoftmaxLoss()(head(ours(kiln.Tensor(x))[0][:, -1]), kiln.Tensor(y.astype("int32")))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.cross_entropy(ref_head(ref(torch.tensor(x))[0][:, -1]), torch.tensor(y))
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-8)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_compiled_step_trains_as_the_eager_one(kind):
    """The compiled step joins each recurrent weight's per-step gradient products into one product."""
    rng = np.random.default_rng(5)
    # 4 steps: each weight gradient a sum of 4 products, the fewest the join takes (MIN_PRODUCTS)
    x, y = rng.standard_normal((4, 3, 4)).astype("float32"), rng.integers(0, 6, 3).astype("int32")
    results = []
    for compiled in (False, True):
        kiln.nn.manual_seed(0)
        model = getattr(nn, kind)(4, 6)
        opt = nn.optim.SGD(model.parameters(), lr=0.5)
        loss_fn = nn.SoftmaxLoss()
        step = kiln.compile(lambda a, b: loss_fn(model(a)[0][-1], b), opt) if compiled else None
        losses = []
        for _ in range(3):
            if step is not None:
                losses.append(float(step(x, y).numpy()))
            else:
                opt.zero_grad()
                loss = loss_fn(model(kiln.Tensor(x))[0][-1], kiln.Tensor(y))
                loss.backward()
                opt.step()
                losses.append(loss.item())
        results.append((losses, model.state_dict()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    for name, value in results[0][1].items():
        np.testing.assert_allclose(results[1][1][name], value, rtol=1e-4, atol=1e-6, err_msg=name)


def test_bad_arguments_and_shapes_are_refused_clearly():
    with pytest.raises(AttrError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(AttrError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(AttrError, match="num_layers"):
        nn.GRU(3, 4, num_layers=0)
    with pytest.raises(AttrError, match="dropout"):
        nn.LSTM(3, 4, dropout=1.5)
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ShapeError, match=r"\(L, N, 3\)") as info:
        lstm(kiln.Tensor(np.zeros((5, 2, 7), "float32")))
    assert info.value.arg == "input"
    with pytest.raises(ShapeError, match=r"expected \(2, 2, 4\)") as info:
        lstm(kiln.Tensor(np.zeros((5, 2, 3), "float32")), (kiln.Tensor(np.zeros((1, 2, 4), "float32")),) * 2)
    assert info.value.arg == "h_0"
    with pytest.raises(ShapeError, match="pair"):
        lstm(kiln.Tensor(np.zeros((5, 2, 3), "float32")), kiln.Tensor(np.zeros((2, 2, 4), "float32")))
    with pytest.raises(ShapeError, match="input"):
        nn.GRUCell(3, 4)(kiln.Tensor(np.zeros((2, 5), "float32")))
