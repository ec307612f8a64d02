"""``kiln.nn.functional.scaled_dot_product_attention``: PyTorch's contract
(ranks 3 and 4, bool and float masks, causal, scale), forward and gradients
against numpy and, where it is installed, PyTorch itself."""
import numpy as np
import pytest

import kiln
from kiln.errors import ShapeError
from kiln.nn import functional as F


def _reference(q, k, v, mask=None, causal=False, scale=None):
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if mask is not None:
        s = s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask)
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("shape, mask, causal", [
    ((2, 3, 7, 8), None, False),
    ((2, 3, 7, 8), "bool", False),
    ((2, 7, 8), "float", True),
    ((1, 2, 16, 4), None, True),
])
def test_matches_numpy_forward(shape, mask, causal):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype("float32") for _ in range(3))
    m = None
    if mask == "bool":
        m = rng.random(shape[:-2] + (shape[-2], shape[-2])) < 0.7
        m[..., 0] = True  # every query sees a key
    elif mask == "float":
        m = rng.standard_normal((shape[-2], shape[-2])).astype("float32")
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal).numpy()
    np.testing.assert_allclose(out, _reference(q, k, v, m, causal), rtol=1e-5, atol=1e-5)


def test_gradients_match_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is the gradients' oracle")
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 2, 6, 4)) for _ in range(3)]
    mask = rng.standard_normal((6, 6))
    ours = [kiln.Tensor(a, requires_grad=True) for a in arrays]
    out = F.scaled_dot_product_attention(*ours, attn_mask=mask, is_causal=True, scale=0.7)
    (out * out).sum().backward()
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    # PyTorch's own function takes a mask or is_causal, not both: its math, written out
    s = theirs[0] @ theirs[1].transpose(-1, -2) * 0.7 + torch.tensor(mask)
    s = s.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(s, -1) @ theirs[2]
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-10)
    for mine, their in zip(ours, theirs):
        np.testing.assert_allclose(mine.grad.numpy(), their.grad.numpy(), rtol=1e-9, atol=1e-9)


def test_bad_inputs_are_refused_clearly():
    x = np.zeros((2, 3, 4), "float32")
    with pytest.raises(ShapeError, match="rank 3"):
        F.scaled_dot_product_attention(x, x, x[0])
    with pytest.raises(ShapeError, match="dropout"):
        F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)
    with pytest.raises(ShapeError, match="broadcasts"):
        F.scaled_dot_product_attention(x, x, x, attn_mask=np.zeros((5, 5), "float32"))
