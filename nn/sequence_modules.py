"""Modules of sequence models with PyTorch's contracts: ``Embedding``,
``LayerNorm`` and ``MultiheadAttention``; and the positional encodings
(``SinusoidalPositionalEncoding``, ``LearnedPositionalEncoding``) PyTorch
leaves to its tutorials.

Parameters carry PyTorch's names and layouts (``in_proj_weight`` is
(3E, E), as ``torch.nn.MultiheadAttention`` stores it), so
``load_state_dict(torch_module.state_dict(), layout="torch")`` loads a
PyTorch model's weights.
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, ShapeError
from ..graph.trace import lift
from ..te import call
from . import functional as F
from . import init
from .module import Module, Parameter
from .modules import Linear
from .tensor import Tensor


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) at integer indices:
    (...) -> (..., embedding_dim). ``weight`` starts as N(0, 1), as
    PyTorch's; the row at ``padding_idx`` starts at zero and gets no
    gradient (it reads as zeros)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype="float32"):
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise AttrError(f"got padding_idx={padding_idx}, expected an index into {num_embeddings} rows",
                            where="Embedding", arg="padding_idx")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        weight = init.randn(num_embeddings, embedding_dim, dtype=dtype).numpy().copy()
        if self.padding_idx is not None:
            weight[self.padding_idx] = 0
        self.weight = Parameter(weight)

    def forward(self, indices):
        out = F.embedding(indices, self.weight)
        if self.padding_idx is None:
            return out
        idx = indices.numpy() if isinstance(indices, Tensor) else np.asarray(indices)
        keep = (idx != self.padding_idx)[..., None].astype(str(self.weight.dtype))
        return out * Tensor(keep)


class SinusoidalPositionalEncoding(Module):
    """Adds "Attention is all you need"'s encoding of each position,
    ``pe[p, 2i] = sin(p / 10000^(2i/d))`` and ``pe[p, 2i+1] = cos(...)``, to
    (N, L, d_model) inputs ((L, N, d_model) unless ``batch_first``), then
    applies dropout. The table (``pe``, (max_len, d_model)) is a buffer: saved
    with the state, never trained."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0, batch_first: bool = True,
                 dtype="float32"):
        if d_model < 1 or max_len < 1:
            raise AttrError(f"got d_model={d_model}, max_len={max_len}, expected positive sizes",
                            where="SinusoidalPositionalEncoding", arg="d_model")
        position = np.arange(max_len, dtype="float64")[:, None]
        freq = np.exp(np.arange(0, d_model, 2, dtype="float64") * (-np.log(10000.0) / d_model))
        pe = np.zeros((max_len, d_model))
        pe[:, 0::2] = np.sin(position * freq)
        pe[:, 1::2] = np.cos(position * freq[:d_model // 2])
        self.pe = Tensor(pe.astype(dtype))
        self.dropout, self.batch_first, self.max_len = float(dropout), bool(batch_first), max_len

    def forward(self, x):
        return F.dropout(x + _positions(self, self.pe, x), self.dropout, self.training)


class LearnedPositionalEncoding(Module):
    """Adds a trained vector per position (``weight``, (max_len, d_model),
    N(0, 0.02) at the start as GPT-2's) to (N, L, d_model) inputs ((L, N,
    d_model) unless ``batch_first``), then applies dropout."""

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0, batch_first: bool = True, dtype="float32"):
        if d_model < 1 or max_len < 1:
            raise AttrError(f"got max_len={max_len}, d_model={d_model}, expected positive sizes",
                            where="LearnedPositionalEncoding", arg="max_len")
        self.weight = Parameter(init.randn(max_len, d_model, std=0.02, dtype=dtype).numpy())
        self.dropout, self.batch_first, self.max_len = float(dropout), bool(batch_first), max_len

    def forward(self, x):
        return F.dropout(x + _positions(self, self.weight, x), self.dropout, self.training)


def _positions(module, table, x):
    """The rows of ``table`` for ``x``'s positions, shaped to add to ``x``."""
    where = type(module).__name__
    if len(x.shape) != 3 or x.shape[-1] != table.shape[1]:
        raise ShapeError(f"got input of shape {tuple(x.shape)}, expected 3 dims ending in d_model={table.shape[1]}",
                         where=where, arg="x")
    length = x.shape[1] if module.batch_first else x.shape[0]
    if isinstance(length, int) and length > module.max_len:
        raise ShapeError(f"got a sequence of {length} positions, expected at most max_len={module.max_len}",
                         where=where, arg="x")
    if not isinstance(length, int):  # a traced sequence of any length: its rows are taken in the graph
        table = lift(table, x)
    rows = table if length == module.max_len else table[:length]
    return rows if module.batch_first else rows.reshape((length, 1, table.shape[1]))


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims (one kernel, with
    its gradient), then scale by ``weight`` and shift by ``bias`` (each of
    that shape) where ``elementwise_affine``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 dtype="float32"):
        dims = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not dims or not all(isinstance(d, int) and d > 0 for d in dims):
            raise AttrError(f"got normalized_shape={normalized_shape!r}, expected positive ints",
                            where="LayerNorm", arg="normalized_shape")
        self.normalized_shape, self.eps = dims, float(eps)
        self.weight = Parameter(np.ones(dims, dtype)) if elementwise_affine else None
        self.bias = Parameter(np.zeros(dims, dtype)) if elementwise_affine and bias else None

    def forward(self, x):
        if tuple(x.shape[len(x.shape) - len(self.normalized_shape):]) != self.normalized_shape:
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected trailing dims {self.normalized_shape}",
                             where="LayerNorm", arg="x")
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class MultiheadAttention(Module):
    """PyTorch's ``MultiheadAttention`` (``kdim == vdim == embed_dim``):
    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` returns
    ``(output, weights)``; inputs are (L, N, E) or, with ``batch_first``,
    (N, L, E). A bool mask is True where attention is not allowed (PyTorch's
    rule here), a float mask is added to the scores; ``attn_mask`` is (L, S)
    or (N * num_heads, L, S), ``key_padding_mask`` (N, S). ``is_causal``
    without a mask masks the keys after each query. A self-attention (one
    tensor for query, key and value) projects them as one product of its
    (N x L) rows, as PyTorch does. The heads run as one ``attention`` kernel
    on the projections' layout; the weights, when asked for, and dropout in
    training are computed apart (softmax of the scores)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False, kdim: int | None = None, vdim: int | None = None, dtype="float32"):
        if num_heads < 1 or embed_dim % num_heads:
            raise AttrError(f"got embed_dim={embed_dim} and num_heads={num_heads}, expected heads dividing it",
                            where="MultiheadAttention", arg="num_heads")
        if (kdim or embed_dim) != embed_dim or (vdim or embed_dim) != embed_dim:
            raise AttrError(f"got kdim={kdim}, vdim={vdim}, expected them equal to embed_dim={embed_dim}",
                            where="MultiheadAttention", arg="kdim")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Parameter(init.xavier_uniform(embed_dim, 3 * embed_dim, shape=(3 * embed_dim, embed_dim),
                                                            dtype=dtype))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if bias:
            self.out_proj.bias = Parameter(np.zeros(embed_dim, dtype))

    def _project(self, x, k: int | None):
        """``x`` (N, L, E) projected by part ``k`` of ``in_proj_weight`` (query,
        key or value) as (N, L, H, D); ``k`` None: all three at once, one
        product of the (N x L) rows (a self-attention's), split after."""
        e, (n, length) = self.embed_dim, x.shape[:2]
        rows = x.reshape((n * length, e))
        w, b = self.in_proj_weight, self.in_proj_bias
        if k is not None:
            w, b = w[k * e:(k + 1) * e], None if b is None else b[k * e:(k + 1) * e]
        y = call("matmul", rows, w, transpose_b=True)
        if b is not None:
            y = y + b
        heads = (n, length, self.num_heads, self.head_dim)
        return [p.reshape(heads) for p in F.chunk(y, 3, axis=1)] if k is None else y.reshape(heads)

    def _mask(self, attn_mask, key_padding_mask, n: int, length: int, keys: int, dtype: str):
        """The additive (N, H, L, S)-broadcastable mask, or None."""
        total = None
        for mask, shapes, name in ((attn_mask, ((length, keys), (n * self.num_heads, length, keys)), "attn_mask"),
                                   (key_padding_mask, ((n, keys),), "key_padding_mask")):
            if mask is None:
                continue
            mask = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
            if tuple(mask.shape) not in shapes:
                raise ShapeError(f"got {name} of shape {mask.shape}, expected one of {list(shapes)}",
                                 where="MultiheadAttention", arg=name)
            additive = np.where(mask, -np.inf, 0).astype(dtype) if mask.dtype == bool else mask.astype(dtype)
            if name == "key_padding_mask":
                additive = additive.reshape(n, 1, 1, keys)
            elif additive.ndim == 3:
                additive = additive.reshape(n, self.num_heads, length, keys)
            total = additive if total is None else total + additive
        return None if total is None else Tensor(total)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        if len(query.shape) != 3 or len(key.shape) != 3 or len(value.shape) != 3:
            raise ShapeError(f"got query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}, "
                             "expected three batched sequences (3 dims)", where="MultiheadAttention", arg="query")
        shared = query is key and key is value  # a self-attention's one input
        if not self.batch_first:
            query, key, value = (F.transpose(t, 0, 1) for t in (query, key, value))
        n, length, keys = query.shape[0], query.shape[1], key.shape[1]
        if shared:  # one product for the three projections
            q, k, v = self._project(query, None)
        else:
            q, k, v = self._project(query, 0), self._project(key, 1), self._project(value, 2)
        mask = self._mask(attn_mask, key_padding_mask, n, length, keys, str(q.dtype))
        causal = bool(is_causal) and attn_mask is None
        scale = 1.0 / float(np.sqrt(self.head_dim))
        weights = None
        if need_weights or (self.training and self.dropout > 0):
            qh, kh, vh = (F.transpose(t, 1, 2) for t in (q, k, v))  # (N, H, *, D)
            scores = call("matmul", qh, kh, transpose_b=True) * scale
            if mask is not None:
                scores = scores + mask
            if causal:
                scores = scores + np.triu(np.full((length, keys), -np.inf, str(q.dtype)), 1)
            probs = F.softmax(scores, axis=-1)
            dropped = F.dropout(probs, self.dropout) if self.training and self.dropout > 0 else probs
            out = F.transpose(dropped @ vh, 1, 2)
            weights = probs.mean(axis=1) if average_attn_weights else probs
            weights = weights if need_weights else None
        else:
            out = call("attention", *([q, k, v] + ([mask] if mask is not None else [])), scale=scale, causal=causal,
                       layout="bshd")
        out = self.out_proj(out.reshape((n, length, self.embed_dim)))
        if not self.batch_first:
            out = F.transpose(out, 0, 1)
        return out, weights
