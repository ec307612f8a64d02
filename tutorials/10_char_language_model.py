"""
Train a character language model and sample from it
===================================================

You will learn how to:

* turn a text into next-character training windows with a character
  vocabulary (``kiln.nn.text``), here Python's own help texts, which every
  Python ships (no download);
* build a small GPT-style transformer from ``kiln.nn`` modules with
  PyTorch's contracts (``Embedding``, ``LearnedPositionalEncoding``, causal
  ``TransformerEncoderLayer``, ``LayerNorm``) — ``TransformerLM`` is this
  model, ready-made;
* train it with compiled steps and read its validation perplexity;
* sample text at a few temperatures;
* export it once for every sequence length (``dynamic_seq``);
* run the same data through an ``LSTM`` and compare.

Run: ``python tutorials/10_char_language_model.py`` (``KILN_TUTORIAL_SMALL=1``
for a quick run). The same model trains from the command line with
``kiln train --dataset text --save lm.npz`` and samples with ``kiln generate
lm.npz --prompt "def "``.
"""
# %%
# Data
# ----
#
# ``pydoc_corpus()`` joins the help texts of ``pydoc_data.topics`` (about
# 465,000 characters). ``char_datasets`` keeps the first 90% for training
# and the last 10% for validation, cut into windows of ``SEQ`` characters;
# each window's labels are the same characters one position later.
import os
import tempfile
from pathlib import Path

import numpy as np

import kiln
from kiln import nn
from kiln.nn import data
from kiln.nn.generate import generate
from kiln.nn.language_model import perplexity
from kiln.nn.text import char_datasets, pydoc_corpus
from kiln.nn.train import fit
from kiln.runtime import Predictor

SMALL = os.environ.get("KILN_TUTORIAL_SMALL") == "1"
SEQ, EPOCHS = (16, 1) if SMALL else (64, 3)
WIDTH, LAYERS = (32, 1) if SMALL else (128, 2)  # the transformer's d_model and layers

text = pydoc_corpus()
if SMALL:
    text = text[:20_000]
train_set, val_set, vocab = char_datasets(text, SEQ)
print(f"{len(text)} characters, {len(vocab)} distinct; {len(train_set)} training and {len(val_set)} validation "
      f"windows of {SEQ}")
x, y = train_set[0]
print(repr(vocab.decode(x)), "->", repr(vocab.decode(y)))

# %%
# The model
# ---------
#
# Tokens (N, L) become vectors, plus a learned vector per position; each
# pre-norm encoder layer attends causally (``is_causal=True``: a position sees
# itself and the ones before it), so every position predicts the next
# character at once. The attention runs as one ``attention`` kernel per block
# of query rows of a head.


class CharTransformer(nn.Module):
    def __init__(self, vocab_size, d_model=WIDTH, heads=4, layers=LAYERS, max_len=SEQ):
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional = nn.LearnedPositionalEncoding(max_len, d_model)
        self.layers = [nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.1, activation="gelu",
                                                  batch_first=True, norm_first=True) for _ in range(layers)]
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.max_len = max_len  # generate() reads windows of this length

    def forward(self, tokens):
        x = self.positional(self.embedding(tokens) * 0.1)
        for layer in self.layers:
            x = layer(x, is_causal=True)
        return self.head(self.norm(x))  # (N, L, vocabulary) logits


kiln.manual_seed(0)
model = CharTransformer(len(vocab))
print(sum(p.numpy().size for p in model.parameters()), "parameters")

# %%
# Train
# -----
#
# ``SoftmaxLoss`` takes (N, L, V) logits with (N, L) labels: the mean loss
# over every position. Perplexity is ``exp`` of that loss: how many
# characters the model is choosing among, on average. ``fit`` compiles each
# training step into one module call.
train_loader = data.DataLoader(train_set, batch_size=32, shuffle=True, seed=0)
val_loader = data.DataLoader(val_set, batch_size=64)
opt = nn.optim.Adam(model.parameters(), lr=3e-3)
history = fit(model, train_loader, val_loader, opt, EPOCHS, classes=len(vocab))
for e in history.epochs:
    print(f"epoch {e.epoch}: train perplexity {perplexity(e.train_loss):.2f}, "
          f"validation perplexity {perplexity(e.test_loss):.2f} ({e.seconds:.1f} s)")

# %%
# Sample
# ------
#
# ``generate`` feeds the model a window of its last ``max_len`` characters
# and draws the next one from ``softmax(logits / temperature)``: at 0 always
# the likeliest, higher for more surprise.
for temperature in (0.0, 0.5, 1.0):
    ids = generate(model, vocab.encode("The "), tokens=80, temperature=temperature, seed=0)
    print(f"T={temperature}: {'The ' + vocab.decode(ids)!r}")

# %%
# Export for any length
# ---------------------
#
# ``kiln.export(..., dynamic_seq=True)`` compiles one module whose inputs'
# second dim (the sequence) is symbolic too: it serves every length up to
# the positional table's (``max_seq``), and its attention kernel keeps the
# CPU template by padding keys and queries inside the kernel.
path = kiln.export(model, np.zeros((1, SEQ), "int32"), Path(tempfile.mkdtemp()) / "lm.so", dynamic_seq=True)
predictor = Predictor(path)
print("inputs", predictor.inputs, "max_seq", predictor.max_seq)
model.eval()
for length in (5, SEQ):
    tokens = np.array([vocab.encode(text[:length])], "int32")
    got, want = predictor(tokens), model(kiln.Tensor(tokens)).numpy()
    print(f"length {length}: logits {got.shape}, largest difference from the model {np.abs(got - want).max():.1e}")
    assert np.allclose(got, want, rtol=1e-3, atol=1e-4)

# %%
# An LSTM on the same data
# ------------------------
#
# ``nn.LSTM`` takes PyTorch's arguments; the recurrence is unrolled over the
# window, each step one ``dense`` kernel on the state and one ``lstm_cell``
# kernel for the gates. Compiled, the per-step products of each recurrent
# weight's gradient become one product over the joined steps.


class CharLSTM(nn.Module):
    def __init__(self, vocab_size, hidden=2 * WIDTH):
        self.embedding = nn.Embedding(vocab_size, 32)
        self.lstm = nn.LSTM(32, hidden, num_layers=LAYERS, batch_first=True)
        self.head = nn.Linear(hidden, vocab_size)

    def forward(self, tokens):
        return self.head(self.lstm(self.embedding(tokens))[0])


kiln.manual_seed(0)
lstm = CharLSTM(len(vocab))
lstm_history = fit(lstm, train_loader, val_loader, nn.optim.Adam(lstm.parameters(), lr=3e-3), EPOCHS,
                   classes=len(vocab))
print(f"LSTM: validation perplexity {perplexity(lstm_history.epochs[-1].test_loss):.2f}, transformer: "
      f"{perplexity(history.epochs[-1].test_loss):.2f}")

# %%
# Check
# -----
#
# Both models learned: far below the perplexity of guessing uniformly among
# the vocabulary, and the samples use its characters only.
uniform = len(vocab)
for name, h in (("transformer", history), ("LSTM", lstm_history)):
    assert perplexity(h.epochs[-1].test_loss) < uniform / 2, (name, h.table())
assert set(vocab.decode(generate(model, vocab.encode("def "), tokens=20, seed=1))) <= set(vocab.chars)
print("ok")
