"""``scaled_dot_product_attention``: PyTorch's contract on kiln's ``attention`` op.

``q`` is (..., L, E), ``k`` (..., S, E), ``v`` (..., S, Ev), with the same
leading dims (batch, heads); the result is (..., L, Ev). ``attn_mask``
broadcasts to (..., L, S): a bool mask marks the positions that take part
(PyTorch's rule; a row with none gives NaN, as PyTorch does), a float mask
is added to the scores. ``is_causal`` lets query ``i`` see keys ``j <= i``;
``scale`` defaults to ``1 / sqrt(E)``. The op runs one kernel per block of
query rows of a head, whose scores never reach memory; its gradient
recomputes the probabilities. Inputs of one or two leading dims are viewed
as (batch, heads) for the op, which takes four.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..te import call
from .tensor import Tensor


def _as_tensor(x):
    return x if isinstance(x, Tensor) else Tensor(np.asarray(x))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None):
    """``softmax(query keyᵀ * scale + mask) value`` (PyTorch's
    ``torch.nn.functional.scaled_dot_product_attention``, without dropout)."""
    q, k, v = (_as_tensor(t) for t in (query, key, value))
    if dropout_p:
        raise ShapeError(f"got dropout_p={dropout_p}, expected 0: attention dropout is not supported",
                         op="attention", arg="dropout_p")
    rank = len(q.shape)
    if not 3 <= rank <= 4 or len(k.shape) != rank or len(v.shape) != rank:
        raise ShapeError(f"got query {q.shape}, key {k.shape} and value {v.shape}, expected three tensors of "
                         "rank 3 (batch, seq, features) or 4 (batch, heads, seq, features)", op="attention",
                         arg="query")
    if rank == 3:
        q, k, v = (t.reshape((t.shape[0], 1) + tuple(t.shape[1:])) for t in (q, k, v))
    args = [q, k, v]
    if attn_mask is not None:
        mask = _as_tensor(attn_mask)
        if mask.dtype == "bool":
            zeros = np.zeros((), q.dtype)
            mask = call("where", mask, Tensor(zeros), Tensor(np.array(-np.inf, q.dtype)))
        if rank == 3 and len(mask.shape) == 3:
            mask = mask.reshape((mask.shape[0], 1) + tuple(mask.shape[1:]))
        args.append(mask)
    out = call("attention", *args, scale=scale, causal=is_causal)
    return out.reshape(tuple(out.shape[:1]) + tuple(out.shape[2:])) if rank == 3 else out
