"""Exports with a dynamic sequence length (``dynamic_seq``): one module serves
every length, its attention keeps the CPU template (keys and queries padded
to ``KEY_BLOCK`` inside the kernel), a learned positional table bounds the
length (``max_seq``), and what cannot hold is refused clearly."""
import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.errors import ExportError, ShapeError
from kiln.nn import Tensor
from kiln.nn.language_model import LSTMLM, TransformerLM
from kiln.runtime import Predictor
from kiln.te import get_op, sym


@pytest.mark.parametrize("layout,causal,mask", [("bshd", True, False), ("bhsd", False, True), ("bshd", False, False)])
def test_attention_with_symbolic_lengths_keeps_the_template_and_is_right_at_every_length(layout, causal, mask):
    length = sym("L")
    heads = (1, length, 3, 16) if layout == "bshd" else (1, 3, length, 16)
    shapes = [heads] * 3 + ([(1, 1, length, length)] if mask else [])
    attrs = {"layout": layout, "causal": causal}
    kernel = kiln.build("attention", shapes, attrs=attrs)
    assert kernel.template == "attention.schedule_attention"
    op, rng = get_op("attention"), np.random.default_rng(0)
    for n in (1, 5, 16, 17, 40):
        size = (1, n, 3, 16) if layout == "bshd" else (1, 3, n, 16)
        arrays = [rng.standard_normal(size).astype("float32") for _ in range(3)]
        if mask:
            arrays.append(np.where(rng.random((1, 1, n, n)) < 0.3, -1e9, 0).astype("float32"))
        want = op.reference(*arrays, **op.parse_attrs(attrs))
        np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-5, atol=1e-5, err_msg=f"length {n}")


def _lm():
    model = TransformerLM(40, d_model=32, nhead=2, num_layers=1, max_len=48, dropout=0.0)
    model.eval()
    return model


def test_a_language_model_exported_once_serves_every_length_up_to_its_table(tmp_path):
    model = _lm()
    predictor = Predictor(kiln.export(model, np.zeros((2, 16), "int32"), tmp_path / "lm.so", dynamic_seq=True))
    assert predictor.inputs[0].shape == (None, None) and predictor.outputs[0].shape == (None, None, 40)
    assert predictor.max_seq == 48
    rng = np.random.default_rng(1)
    for batch, length in [(1, 1), (2, 16), (3, 29), (1, 48), (2, 29)]:
        tokens = rng.integers(0, 40, (batch, length)).astype("int32")
        np.testing.assert_allclose(predictor(tokens), model(Tensor(tokens)).numpy(), rtol=1e-4, atol=1e-5)
    for bad in (np.zeros((1, 49), "int32"), np.zeros((1, 0), "int32")):
        with pytest.raises(ShapeError, match=r"expected \(N, L\) with N >= 1, 1 <= L <= 48"):
            predictor(bad)


class _Pair(nn.Module):
    """Two sequences of one length, one of features: a sum and a layer norm over positions' features."""

    def __init__(self):
        self.norm = nn.LayerNorm(4)

    def forward(self, a, b):
        return self.norm(a + b)


def test_inputs_share_the_sequence_and_a_model_without_a_table_takes_any_length(tmp_path):
    x = np.zeros((2, 5, 4), "float32")
    predictor = Predictor(kiln.export(_Pair(), (x, x), tmp_path / "pair.so", dynamic_seq=True))
    assert predictor.max_seq is None
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 300, 4)).astype("float32"), rng.standard_normal((2, 300, 4)).astype("float32")
    want = _Pair()(Tensor(a), Tensor(b)).numpy()
    np.testing.assert_allclose(predictor(a, b), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="every input's second dim is the sequence"):
        predictor(a, b[:, :7])
    with pytest.raises(ShapeError, match=r"expected \(N, L, 4\) with N >= 1, L >= 1"):
        predictor(a[:, :, :3], b[:, :, :3])


def test_what_a_dynamic_sequence_cannot_hold_is_refused_clearly(tmp_path):
    lstm = LSTMLM(40, embedding_dim=8, hidden_size=8, num_layers=1)
    with pytest.raises(ShapeError, match="the recurrence is unrolled"):
        kiln.export(lstm, np.zeros((2, 6), "int32"), tmp_path / "lstm.so", dynamic_seq=True)
    with pytest.raises(ExportError, match="expected one sequence length"):
        kiln.export(_Pair(), (np.zeros((2, 5, 4), "float32"), np.zeros((2, 6, 4), "float32")),
                    tmp_path / "pair.so", dynamic_seq=True)
    with pytest.raises(ExportError, match="expected one sequence length"):
        kiln.export(_lm(), np.zeros((2,), "int32"), tmp_path / "lm.so", dynamic_seq=True)
    assert not list(tmp_path.iterdir())
