"""Character (or any token) language models: ``TransformerLM`` (a GPT-style
stack of pre-norm causal encoder layers) and ``LSTMLM``. Both map tokens
(N, L) to next-token logits (N, L, vocab_size); ``kiln train --dataset
text`` trains them and ``kiln generate`` samples from them
(``nn/generate.py``)."""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, ShapeError
from .module import Module
from .modules import Linear
from .rnn import LSTM
from .sequence_modules import Embedding, LayerNorm, LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .transformer import TransformerEncoderLayer


def _tokens(where: str, tokens):
    if len(tokens.shape) != 2:
        raise ShapeError(f"got tokens of shape {tuple(tokens.shape)}, expected (batch, length)", where=where,
                         arg="tokens")
    return tokens


class TransformerLM(Module):
    """Embedding + positional encoding, ``num_layers`` pre-norm
    ``TransformerEncoderLayer`` (GELU, causal self-attention), a final
    ``LayerNorm`` and a linear head. ``max_len`` bounds the context."""

    def __init__(self, vocab_size: int, d_model: int = 128, nhead: int = 4, num_layers: int = 2,
                 dim_feedforward: int | None = None, max_len: int = 256, dropout: float = 0.1,
                 positional: str = "learned", dtype="float32"):
        if positional not in ("learned", "sinusoidal"):
            raise AttrError(f"got positional={positional!r}, expected 'learned' or 'sinusoidal'", where="TransformerLM",
                            arg="positional")
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embedding = Embedding(vocab_size, d_model, dtype=dtype)
        self.embedding.weight.data = self.embedding.weight * 0.02  # GPT-2's N(0, 0.02)
        self.positional = (LearnedPositionalEncoding(max_len, d_model, dropout, dtype=dtype) if positional == "learned"
                           else SinusoidalPositionalEncoding(d_model, max_len, dropout, dtype=dtype))
        self.layers = [TransformerEncoderLayer(d_model, nhead, dim_feedforward or 4 * d_model, dropout, "gelu",
                                               batch_first=True, norm_first=True, dtype=dtype)
                       for _ in range(num_layers)]
        self.norm = LayerNorm(d_model, dtype=dtype)
        self.head = Linear(d_model, vocab_size, dtype=dtype)

    def forward(self, tokens):
        x = self.positional(self.embedding(_tokens("TransformerLM", tokens)))
        for layer in self.layers:
            x = layer(x, is_causal=True)
        return self.head(self.norm(x))


class LSTMLM(Module):
    """Embedding, a ``num_layers`` ``LSTM`` (batch first) and a linear head.
    ``forward(tokens)`` starts from zero states; ``step(tokens, state)``
    carries them, returning ``(logits, state)`` (what generation uses)."""

    def __init__(self, vocab_size: int, embedding_dim: int = 64, hidden_size: int = 256, num_layers: int = 2,
                 dropout: float = 0.1, dtype="float32"):
        self.vocab_size = vocab_size
        self.embedding = Embedding(vocab_size, embedding_dim, dtype=dtype)
        self.lstm = LSTM(embedding_dim, hidden_size, num_layers, batch_first=True, dropout=dropout, dtype=dtype)
        self.head = Linear(hidden_size, vocab_size, dtype=dtype)

    def step(self, tokens, state=None):
        out, state = self.lstm(self.embedding(_tokens("LSTMLM", tokens)), state)
        return self.head(out), state

    def forward(self, tokens):
        return self.step(tokens)[0]


def build_language_model(name: str, vocab_size: int, max_len: int) -> Module:
    """``kiln train``'s text models at their default sizes."""
    if name == "transformer":
        return TransformerLM(vocab_size, max_len=max_len)
    if name == "lstm":
        return LSTMLM(vocab_size)
    raise AttrError(f"got {name!r}, expected 'transformer' or 'lstm'", where="build_language_model", arg="name")


def perplexity(loss: float) -> float:
    """``exp(loss)`` of a mean cross-entropy in nats (inf past float range)."""
    return float(np.exp(min(loss, 700.0)))
