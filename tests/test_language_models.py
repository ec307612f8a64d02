"""Character language models: positional encodings, ``TransformerLM`` and
``LSTMLM``, the text data, sampling, and ``kiln train --dataset text`` /
``kiln generate`` end to end; a transformer layer trained 50 steps beside
PyTorch's (masks included) gives the same losses."""
import json

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.cli import main
from kiln.errors import DataError, ShapeError
from kiln.nn.generate import generate, sample_next
from kiln.nn.language_model import LSTMLM, TransformerLM
from kiln.nn.text import char_datasets, pydoc_corpus
from kiln.runtime import Predictor

TEXT = "def f(x):\n    return x + 1\n\n" * 40  # 1120 characters, 17 distinct


def test_sinusoidal_encoding_is_the_papers_table_and_learned_adds_its_rows():
    pe = nn.SinusoidalPositionalEncoding(6, max_len=10, batch_first=True)
    x = np.zeros((2, 4, 6), "float32")
    out = pe(kiln.Tensor(x)).numpy()
    p, i = 3, 1  # position 3, pair 1: sin and cos of p / 10000^(2i/d)
    angle = p / 10000 ** (2 * i / 6)
    np.testing.assert_allclose(out[1, p, 2 * i:2 * i + 2], [np.sin(angle), np.cos(angle)], rtol=1e-6)
    assert "pe" in dict(pe.named_buffers()) and not pe.parameters()
    seq_first = nn.SinusoidalPositionalEncoding(6, max_len=10, batch_first=False)
    np.testing.assert_allclose(seq_first(kiln.Tensor(x.transpose(1, 0, 2))).numpy().transpose(1, 0, 2), out)
    learned = nn.LearnedPositionalEncoding(10, 6)
    np.testing.assert_allclose(learned(kiln.Tensor(x)).numpy()[0], learned.weight.numpy()[:4])
    with pytest.raises(ShapeError, match="max_len=10"):
        pe(kiln.Tensor(np.zeros((1, 11, 6), "float32")))
    with pytest.raises(ShapeError, match="d_model=6"):
        pe(kiln.Tensor(np.zeros((1, 4, 5), "float32")))


def test_transformer_lm_is_causal_and_lstm_lm_carries_its_state():
    kiln.nn.manual_seed(0)
    model = TransformerLM(17, d_model=16, nhead=2, num_layers=1, max_len=8).eval()
    tokens = np.arange(8, dtype="int32").reshape(1, 8) % 17
    changed = tokens.copy()
    changed[0, 5:] = 3
    a, b = model(kiln.Tensor(tokens)).numpy(), model(kiln.Tensor(changed)).numpy()
    assert a.shape == (1, 8, 17)
    np.testing.assert_allclose(a[0, :5], b[0, :5], rtol=1e-5, atol=1e-6)  # later tokens do not reach earlier ones
    assert not np.allclose(a[0, 5:], b[0, 5:])
    lstm = LSTMLM(17, embedding_dim=8, hidden_size=12, num_layers=1).eval()
    whole = lstm(kiln.Tensor(tokens)).numpy()
    first, state = lstm.step(kiln.Tensor(tokens[:, :3]))
    rest, _ = lstm.step(kiln.Tensor(tokens[:, 3:]), state)
    np.testing.assert_allclose(np.concatenate([first.numpy(), rest.numpy()], axis=1), whole, rtol=1e-5, atol=1e-6)


def test_char_data_windows_are_shifted_by_one_and_bad_text_is_refused():
    train, val, vocab = char_datasets(TEXT, 16)
    assert len(vocab) == len(set(TEXT)) and vocab.decode(vocab.encode("return x")) == "return x"
    x, y = train.arrays
    assert x.shape[1] == 16 and x.dtype == np.int32 and len(val) >= 1
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    assert vocab.decode(x[0]) == TEXT[:16] and vocab.decode(y[0]) == TEXT[1:17]
    with pytest.raises(DataError, match="never saw") as info:
        vocab.encode("é", "--prompt")
    assert info.value.arg == "--prompt"
    with pytest.raises(DataError, match="too few"):
        char_datasets("abc", 16)
    assert len(pydoc_corpus()) > 300_000  # the built-in corpus: Python's own help texts


def test_sampling_is_seeded_greedy_at_temperature_zero_and_needs_no_padding_tricks():
    kiln.nn.manual_seed(1)
    model = TransformerLM(17, d_model=16, nhead=2, num_layers=1, max_len=8).eval()
    prompt = np.array([1, 2, 3], "int32")
    greedy = generate(model, prompt, 1, temperature=0)
    exact = model(kiln.Tensor(prompt[None])).numpy()[0, -1]  # the prompt alone, unpadded
    assert greedy[0] == int(np.argmax(exact))
    a, b = generate(model, prompt, 12, seed=5), generate(model, prompt, 12, seed=5)
    np.testing.assert_array_equal(a, b)
    assert len(generate(LSTMLM(17, 4, 8), prompt, 5)) == 5
    rng = np.random.default_rng(0)
    assert sample_next(np.array([0.0, 9.0, 1.0]), 0.5, rng, top_k=1) == 1


def test_a_transformer_layer_trains_fifty_steps_as_pytorchs_with_masks():
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle")
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).double()
    ours = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype="float64")
    ours.load_state_dict(ref.state_dict(), layout="torch")
    opt, ref_opt = nn.optim.SGD(ours.parameters(), lr=0.05), torch.optim.SGD(ref.parameters(), lr=0.05)
    causal = np.triu(np.ones((5, 5), bool), 1)
    padding = np.zeros((3, 5), bool)
    padding[1, 4] = True
    rng = np.random.default_rng(0)
    losses, ref_losses = [], []
    for _ in range(50):
        x, target = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 5, 8))
        opt.zero_grad()
        diff = ours(kiln.Tensor(x), src_mask=causal, src_key_padding_mask=padding) - kiln.Tensor(target)
        loss = (diff * diff).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        ref_opt.zero_grad()
        out = ref(torch.tensor(x), src_mask=torch.tensor(causal), src_key_padding_mask=torch.tensor(padding))
        ref_loss = ((out - torch.tensor(target)) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-8)


def test_train_text_save_export_and_generate(tmp_path, capsys):
    text, ckpt, so = tmp_path / "code.txt", tmp_path / "lm.npz", tmp_path / "lm.so"
    # 16 training windows of 8 and one validation window: one batch shape for training, and validation's
    # the one sampling runs (each batch shape compiles its kernels)
    text.write_text(TEXT[:150])
    argv = ["train", "--dataset", "text", "--data-file", str(text), "--seq-len", "8", "--batch-size", "16",
            "--epochs", "3", "--eager", "--json", "--save", str(ckpt), "--export", str(so)]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    first, _, last = res["epochs"]  # one step an epoch: Adam's first step overshoots, the next ones learn
    assert res["vocab_size"] == len(set(TEXT[:150])) and last["train_loss"] < first["train_loss"]
    assert last["val_perplexity"] == pytest.approx(np.exp(last["test_loss"]))
    assert res["export"]["matches_model"] is True and res["export"]["sequence"] == [1, 8]  # any length up to 8
    again = tmp_path / "again.so"
    assert main(["export", str(ckpt), "--out", str(again), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [None, None]
    assert Predictor(again)(np.zeros((3, 5), "int32")).shape == (3, 5, res["vocab_size"])
    assert main(["generate", str(ckpt), "--prompt", "def ", "--tokens", "20", "--json", "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["text"]) == 20 and set(out["text"]) <= set(TEXT[:150])
    assert main(["generate", str(ckpt), "--prompt", "def ", "--tokens", "20", "--json", "--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == out["text"]  # seeded
    assert main(["generate", str(ckpt), "--prompt", "é"]) == 2
    assert "never saw" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["train", "--dataset", "text", "--model", "cnn"], "expected one of transformer, lstm"),
    (["train", "--model", "lstm"], "train it with --dataset text"),
    (["train", "--seq-len", "8"], "applies to --dataset text"),
    (["train", "--dataset", "text", "--data-file", "/no/such/file.txt"], "does not exist"),
    (["train", "--dataset", "text", "--data-dir", "/tmp"], "--data-file"),
])
def test_text_training_mistakes_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kiln: error:" in err and needle in err


def test_generate_refuses_a_classifiers_checkpoint(tmp_path, capsys):
    from kiln.nn.checkpoint import save_checkpoint
    from kiln.nn.train import build_model

    ckpt = tmp_path / "mlp.npz"
    save_checkpoint(build_model("mlp", (64,), 10), ckpt, {"model": "mlp", "in_shape": [64], "classes": 10,
                                                           "dataset": "digits"})
    assert main(["generate", str(ckpt)]) == 2
    assert "language model" in capsys.readouterr().err
