"""``nn.Embedding``, ``nn.LayerNorm`` and ``nn.MultiheadAttention``: PyTorch's
contracts, loaded from PyTorch's own modules' weights and compared with
their outputs and gradients (PyTorch is the oracle: skipped without it)."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import AttrError, ShapeError

torch = pytest.importorskip("torch", reason="PyTorch is these modules' oracle")


def _close(ours, theirs, tol=1e-5):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)


def test_embedding_matches_pytorch_and_its_padding_row_gets_no_gradient():
    torch.manual_seed(0)
    ref = torch.nn.Embedding(10, 6, padding_idx=2)
    ours = nn.Embedding(10, 6, padding_idx=2)
    ours.load_state_dict(ref.state_dict(), layout="torch")
    idx = np.array([[1, 2, 9], [2, 0, 3]])
    out, want = ours(kiln.Tensor(idx)), ref(torch.from_numpy(idx))
    _close(out, want)
    out.sum().backward()
    want.sum().backward()
    _close(ours.weight.grad, ref.weight.grad)
    assert not ours.weight.grad.numpy()[2].any()


@pytest.mark.parametrize("shape, affine", [((8,), True), ((3, 8), True), ((8,), False)])
def test_layer_norm_matches_pytorch(shape, affine):
    torch.manual_seed(1)
    ref = torch.nn.LayerNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.normal_()
            ref.bias.normal_()
    ours = nn.LayerNorm(shape, elementwise_affine=affine)
    ours.load_state_dict(ref.state_dict(), layout="torch")
    x = np.random.default_rng(2).standard_normal((4, 3, 8)).astype("float32")
    xt, xk = torch.tensor(x, requires_grad=True), kiln.Tensor(x, requires_grad=True)
    out, want = ours(xk), ref(xt)
    _close(out, want)
    (out * out).sum().backward()
    (want * want).sum().backward()
    _close(xk.grad, xt.grad, 1e-4)


@pytest.mark.parametrize("batch_first, masks, need_weights", [
    (True, None, False),
    (False, "bool", True),
    (True, "float", False),
    (True, "causal", False),
])
def test_multihead_attention_matches_pytorch(batch_first, masks, need_weights):
    torch.manual_seed(3)
    e, h, n, length = 16, 4, 2, 6
    ref = torch.nn.MultiheadAttention(e, h, batch_first=batch_first).double()
    ours = nn.MultiheadAttention(e, h, batch_first=batch_first, dtype="float64")
    ours.load_state_dict(ref.state_dict(), layout="torch")
    rng = np.random.default_rng(4)
    shape = (n, length, e) if batch_first else (length, n, e)
    x = rng.standard_normal(shape)
    kwargs_t, kwargs_k = {}, {}
    if masks == "bool":
        pad = np.zeros((n, length), bool)
        pad[1, -2:] = True
        attn = np.triu(np.ones((length, length), bool), 1)
        kwargs_t = {"key_padding_mask": torch.from_numpy(pad), "attn_mask": torch.from_numpy(attn)}
        kwargs_k = {"key_padding_mask": pad, "attn_mask": attn}
    elif masks == "float":
        attn = rng.standard_normal((n * h, length, length))
        kwargs_t, kwargs_k = {"attn_mask": torch.from_numpy(attn)}, {"attn_mask": attn}
    elif masks == "causal":
        causal = torch.nn.Transformer.generate_square_subsequent_mask(length, dtype=torch.float64)
        kwargs_t = {"attn_mask": causal, "is_causal": True}
        kwargs_k = {"is_causal": True}
    xt, xk = torch.tensor(x, requires_grad=True), kiln.Tensor(x, requires_grad=True)
    want, want_w = ref(xt, xt, xt, need_weights=need_weights, **kwargs_t)
    out, weights = ours(xk, xk, xk, need_weights=need_weights, **kwargs_k)
    _close(out, want, 1e-10)
    if need_weights:
        _close(weights, want_w, 1e-10)
    else:
        assert weights is None
    (out * out).sum().backward()
    (want * want).sum().backward()
    _close(xk.grad, xt.grad, 1e-9)
    _close(ours.in_proj_weight.grad, ref.in_proj_weight.grad, 1e-9)


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(AttrError, match="num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(AttrError, match="kdim"):
        nn.MultiheadAttention(8, 2, kdim=4)
    with pytest.raises(AttrError, match="normalized_shape"):
        nn.LayerNorm(0)
    with pytest.raises(ShapeError, match="trailing dims"):
        nn.LayerNorm(8)(kiln.Tensor(np.zeros((2, 4), "float32")))
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = kiln.Tensor(np.zeros((2, 3, 8), "float32"))
    with pytest.raises(ShapeError, match="key_padding_mask"):
        mha(x, x, x, key_padding_mask=np.zeros((3, 3), bool))


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_transformer_layers_match_pytorch(norm_first, activation):
    torch.manual_seed(5)
    kw = dict(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0, activation=activation, batch_first=True,
              norm_first=norm_first)
    rng = np.random.default_rng(6)
    src, mem = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 7, 16))
    pad = np.zeros((2, 7), bool)
    pad[0, -3:] = True
    causal = np.triu(np.ones((5, 5), bool), 1)
    for ref_cls, ours_cls in ((torch.nn.TransformerEncoderLayer, nn.TransformerEncoderLayer),
                              (torch.nn.TransformerDecoderLayer, nn.TransformerDecoderLayer)):
        ref = ref_cls(**kw).double().eval()
        ours = ours_cls(**kw, dtype="float64").eval()
        ours.load_state_dict(ref.state_dict(), layout="torch")
        xt, xk = torch.tensor(src, requires_grad=True), kiln.Tensor(src, requires_grad=True)
        if ref_cls is torch.nn.TransformerEncoderLayer:
            want = ref(xt, src_mask=torch.from_numpy(causal))
            out = ours(xk, src_mask=causal)
        else:
            want = ref(xt, torch.from_numpy(mem), tgt_mask=torch.from_numpy(causal),
                       memory_key_padding_mask=torch.from_numpy(pad))
            out = ours(xk, kiln.Tensor(mem), tgt_mask=causal, memory_key_padding_mask=pad)
        _close(out, want, 1e-10)
        (out * out).sum().backward()
        (want * want).sum().backward()
        _close(xk.grad, xt.grad, 1e-9)
