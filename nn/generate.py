"""Sampling text from a language model (``nn/language_model.py``).

A ``TransformerLM`` reads a window of its ``max_len`` last tokens, always
of that length: the context is padded on the right, where causal attention
keeps the padding from the positions read, so every step runs the same
kernels. An ``LSTMLM`` reads the prompt once, then one token a step,
carrying its states.
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, DataError
from .language_model import LSTMLM
from .tensor import Tensor, no_grad


def sample_next(logits: np.ndarray, temperature: float, rng: np.random.Generator, top_k: int | None = None) -> int:
    """A token drawn from ``softmax(logits / temperature)`` (among the
    ``top_k`` likeliest where given); the likeliest at temperature 0."""
    logits = np.asarray(logits, dtype="float64")
    if temperature == 0:
        return int(np.argmax(logits))
    if top_k is not None and top_k < len(logits):
        logits = np.where(logits >= np.sort(logits)[-top_k], logits, -np.inf)
    z = logits / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def generate(model, prompt_ids, tokens: int, temperature: float = 1.0, seed: int = 0,
             top_k: int | None = None) -> np.ndarray:
    """``tokens`` new token ids after ``prompt_ids`` (int array, at least one)."""
    if not isinstance(tokens, int) or tokens < 1:
        raise AttrError(f"got tokens={tokens!r}, expected a positive integer", where="generate", arg="tokens")
    if not temperature >= 0:
        raise AttrError(f"got temperature={temperature!r}, expected a number >= 0", where="generate",
                        arg="temperature")
    if top_k is not None and top_k < 1:
        raise AttrError(f"got top_k={top_k!r}, expected a positive integer", where="generate", arg="top_k")
    ids = [int(i) for i in np.asarray(prompt_ids).reshape(-1)]
    if not ids:
        raise DataError("got an empty prompt, expected at least one token", arg="prompt")
    rng = np.random.default_rng(seed)
    model.eval()
    out = []
    with no_grad(), model.kernel_pool.activate():
        if isinstance(model, LSTMLM):
            logits, state = model.step(Tensor(np.array([ids], "int32")))
            for _ in range(tokens):
                out.append(sample_next(logits.numpy()[0, -1], temperature, rng, top_k))
                logits, state = model.step(Tensor(np.array([[out[-1]]], "int32")), state)
            return np.array(out, "int32")
        width = model.max_len
        for _ in range(tokens):
            context = (ids + out)[-width:]
            window = np.zeros((1, width), "int32")
            window[0, :len(context)] = context
            logits = model(Tensor(window)).numpy()[0, len(context) - 1]
            out.append(sample_next(logits, temperature, rng, top_k))
    return np.array(out, "int32")
