"""SGD: needle's dampened momentum by default, PyTorch's update (dampening,
Nesterov) on request — checked against numpy always and torch.optim.SGD
when PyTorch is installed."""
import numpy as np
import pytest

from kiln import nn
from kiln.errors import AttrError

W0 = np.array([1.0, -2.0], "float32")
STEPS = 4


def _kiln_steps(**options) -> np.ndarray:
    """``STEPS`` SGD steps on sum(w^2) from ``W0``; the weights after each step."""
    w = nn.Parameter(W0.copy())
    opt = nn.optim.SGD([w], **options)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        out.append(w.numpy().copy())
    return np.array(out)


def _numpy_steps(lr, momentum=0.0, weight_decay=0.0, dampening=None, nesterov=False) -> np.ndarray:
    """The documented formulas, in float64."""
    w, u, out = W0.astype("float64"), None, []
    for _ in range(STEPS):
        g = 2 * w + weight_decay * w
        if momentum:
            if dampening is None:  # needle: u starts at 0 and every step is dampened by (1 - momentum)
                u = momentum * (0 if u is None else u) + (1 - momentum) * g
            else:  # PyTorch: the first step takes g whole
                u = g if u is None else momentum * u + (1 - dampening) * g
            g = g + momentum * u if nesterov else u
        w = w - lr * g
        out.append(w)
    return np.array(out)


CONFIGS = [dict(lr=0.1), dict(lr=0.1, momentum=0.9, weight_decay=0.01),
           dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.01), dict(lr=0.1, momentum=0.9, dampening=0.5),
           dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01)]


@pytest.mark.parametrize("options", CONFIGS, ids=str)
def test_sgd_follows_the_documented_formula(options):
    np.testing.assert_allclose(_kiln_steps(**options), _numpy_steps(**options), rtol=1e-5)


def test_the_default_is_needles_and_differs_from_pytorchs_from_the_first_step():
    needle = _kiln_steps(lr=0.1, momentum=0.9)
    pytorch = _kiln_steps(lr=0.1, momentum=0.9, dampening=0.0)
    np.testing.assert_allclose(needle[0], W0 - 0.1 * 0.1 * 2 * W0, rtol=1e-6)  # (1 - m) g on the first step
    np.testing.assert_allclose(pytorch[0], W0 - 0.1 * 2 * W0, rtol=1e-6)       # g on the first step


@pytest.mark.parametrize("options", CONFIGS[2:], ids=str)
def test_sgd_with_dampening_matches_torch_step_for_step(options):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the numpy formula test covers SGD")
    w = torch.tensor(W0.copy(), requires_grad=True)
    opt = torch.optim.SGD([w], **options)
    want = []
    for _ in range(STEPS):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        want.append(w.detach().numpy().copy())
    np.testing.assert_allclose(_kiln_steps(**options), np.array(want), rtol=1e-5)


@pytest.mark.parametrize("options,arg", [(dict(lr=float("nan")), "lr"), (dict(lr=float("inf")), "lr"),
                                         (dict(lr=-1.0), "lr"), (dict(lr=0.1, momentum=1.0), "momentum"),
                                         (dict(lr=0.1, momentum=0.9, dampening=1.5), "dampening"),
                                         (dict(lr=0.1, momentum=0.9, nesterov=True), "nesterov"),
                                         (dict(lr=0.1, nesterov=True, dampening=0.0), "nesterov"),
                                         (dict(lr=0.1, weight_decay=float("nan")), "weight_decay")])
def test_bad_sgd_settings_are_refused(options, arg):
    with pytest.raises(AttrError, match=f"argument '{arg}'"):
        nn.optim.SGD([nn.Parameter(W0.copy())], **options)


@pytest.mark.parametrize("options,arg", [(dict(eps=0.0), "eps"), (dict(weight_decay=-1.0), "weight_decay"),
                                         (dict(lr=float("nan")), "lr")])
def test_bad_adam_settings_are_refused(options, arg):
    with pytest.raises(AttrError, match=f"argument '{arg}'"):
        nn.optim.Adam([nn.Parameter(W0.copy())], **options)
