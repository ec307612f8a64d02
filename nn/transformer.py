"""``TransformerEncoderLayer`` and ``TransformerDecoderLayer`` with PyTorch's
contracts (argument names, defaults, ``batch_first``, ``norm_first``, masks
as ``MultiheadAttention`` takes them), built from kiln's ``MultiheadAttention``,
``Linear``, ``LayerNorm`` and ``Dropout``; parameter names match PyTorch's,
so ``load_state_dict(torch_layer.state_dict(), layout="torch")`` loads one."""
from __future__ import annotations

from ..errors import AttrError
from .activations import gelu
from .module import Module
from .modules import Dropout, Linear
from .sequence_modules import LayerNorm, MultiheadAttention


def _relu(x):
    return x.relu()


def _activation(activation):
    if callable(activation):
        return activation
    if activation == "relu":
        return _relu
    if activation == "gelu":
        return gelu
    raise AttrError(f"got activation={activation!r}, expected 'relu', 'gelu' or a callable", where="Transformer",
                    arg="activation")


class _Layer(Module):
    """What both layers share: the feed-forward block and the norm order."""

    def __init__(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, dtype,
                 norms: int):
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        for k in range(1, norms + 1):
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = _activation(activation)
        self._norms = norms  # the feed-forward block is the last: its dropout is the last one

    def _ff(self, x):
        last = getattr(self, f"dropout{self._norms}")
        return last(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _blocks(self, x, blocks):
        """``x`` through each (sublayer, norm): pre-norm or post-norm residuals."""
        for block, norm in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


class TransformerEncoderLayer(_Layer):
    """Self-attention and a feed-forward block, each with a residual and a layer norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, dtype="float32"):
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        super().__init__(d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, dtype, 2)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        def attend(x):
            out = self.self_attn(x, x, x, attn_mask=src_mask, key_padding_mask=src_key_padding_mask,
                                 need_weights=False, is_causal=is_causal)[0]
            return self.dropout1(out)
        return self._blocks(src, [(attend, self.norm1), (self._ff, self.norm2)])


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention over ``memory`` and a feed-forward block,
    each with a residual and a layer norm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, dtype="float32"):
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 dtype=dtype)
        super().__init__(d_model, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias, dtype, 3)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False):
        def attend(x):
            return self.dropout1(self.self_attn(x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                                                need_weights=False, is_causal=tgt_is_causal)[0])

        def cross(x):
            return self.dropout2(self.multihead_attn(x, memory, memory, attn_mask=memory_mask,
                                                     key_padding_mask=memory_key_padding_mask, need_weights=False,
                                                     is_causal=memory_is_causal)[0])
        return self._blocks(tgt, [(attend, self.norm1), (cross, self.norm2), (self._ff, self.norm3)])
