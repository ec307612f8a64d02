"""The train suite's language models and their PyTorch twins: a
``TransformerLM`` or ``LSTMLM`` (``kiln.nn.language_model``) and a PyTorch
module of the same layers under the same parameter names, loaded with the
kiln model's weights (``state_dict(layout="torch")``). A twin returns its
logits as (N x L, vocab) rows, what PyTorch's ``cross_entropy`` takes."""
from __future__ import annotations

import numpy as np

from ..nn.language_model import LSTMLM, TransformerLM


def transformer_twin(torch, model: TransformerLM):
    nn = torch.nn
    layer = model.layers[0]
    d_model, heads = layer.self_attn.embed_dim, layer.self_attn.num_heads

    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(model.max_len, d_model))

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(model.vocab_size, d_model)
            self.positional = Positions()
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(d_model, heads, layer.linear1.out_features, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
                for _ in model.layers)
            self.norm = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, model.vocab_size)

        def forward(self, tokens):
            length = tokens.shape[1]
            x = self.embedding(tokens) + self.positional.weight[:length]
            mask = nn.Transformer.generate_square_subsequent_mask(length)
            for block in self.layers:
                x = block(x, src_mask=mask, is_causal=True)
            return self.head(self.norm(x)).reshape(-1, model.vocab_size)

    return _loaded(torch, Twin(), model)


def lstm_twin(torch, model: LSTMLM):
    nn = torch.nn
    lstm = model.lstm

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(model.vocab_size, lstm.input_size)
            self.lstm = nn.LSTM(lstm.input_size, lstm.hidden_size, lstm.num_layers, batch_first=True)
            self.head = nn.Linear(lstm.hidden_size, model.vocab_size)

        def forward(self, tokens):
            return self.head(self.lstm(self.embedding(tokens))[0]).reshape(-1, model.vocab_size)

    return _loaded(torch, Twin(), model)


def _loaded(torch, twin, model):
    twin.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                          for k, v in model.state_dict(layout="torch").items()})
    return twin
