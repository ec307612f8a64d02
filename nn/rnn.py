"""``RNN``, ``LSTM`` and ``GRU`` with PyTorch's contracts: layers, ``bias``,
``batch_first``, ``dropout`` between layers, ``bidirectional``, initial
states, unbatched inputs; parameters named as PyTorch names them
(``weight_ih_l0``, ``bias_hh_l1_reverse``...) and kept transposed as
``Linear``'s are (``layout="torch"`` loads PyTorch's).

The recurrence is unrolled over the sequence: per layer and direction, the
input's products for every step are one ``dense`` kernel over the (L x N)
rows, then each step is one ``dense`` on the state and the gates'
elementwise ops (``rnn_cells.py``). ``kiln.compile`` records the unrolled
steps of a sequence length as one module (its graph passes fuse the gates'
ops); another length records another.
"""
from __future__ import annotations

import numpy as np

from ..errors import AttrError, ShapeError
from . import functional as F
from .module import Module
from .rnn_cells import _GATES, _affine, _check_size, _gru_step, _lstm_step, _rnn_step, _uniform
from .state import TRANSPOSED
from .tensor import Tensor


class _RNNBase(Module):
    mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, dtype="float32"):
        where = type(self).__name__
        self.input_size = _check_size(where, "input_size", input_size)
        self.hidden_size = _check_size(where, "hidden_size", hidden_size)
        self.num_layers = _check_size(where, "num_layers", num_layers)
        if not 0 <= float(dropout) < 1:
            raise AttrError(f"got dropout={dropout!r}, expected a probability in [0, 1)", where=where, arg="dropout")
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        self._directions = 2 if bidirectional else 1
        gates = _GATES[self.mode] * hidden_size
        for layer in range(num_layers):
            fan_in = input_size if layer == 0 else hidden_size * self._directions
            for suffix in self._suffixes():
                name = f"l{layer}{suffix}"
                setattr(self, f"weight_ih_{name}", _uniform(hidden_size, (fan_in, gates), dtype))
                setattr(self, f"weight_hh_{name}", _uniform(hidden_size, (hidden_size, gates), dtype))
                if bias:
                    setattr(self, f"bias_ih_{name}", _uniform(hidden_size, (gates,), dtype))
                    setattr(self, f"bias_hh_{name}", _uniform(hidden_size, (gates,), dtype))

    def _suffixes(self):
        return ("", "_reverse")[:self._directions]

    def torch_layout(self) -> dict:
        return {f"weight_{kind}_l{layer}{suffix}": TRANSPOSED for layer in range(self.num_layers)
                for suffix in self._suffixes() for kind in ("ih", "hh")}

    def _params(self, layer: int, suffix: str):
        name = f"l{layer}{suffix}"
        return (getattr(self, f"weight_ih_{name}"), getattr(self, f"bias_ih_{name}", None),
                getattr(self, f"weight_hh_{name}"), getattr(self, f"bias_hh_{name}", None))

    def _step(self, xw, state, w_hh, b_hh):
        raise NotImplementedError

    def _input(self, x):
        """``x`` as time-major (L, N, I), and whether it came unbatched."""
        where = type(self).__name__
        if len(x.shape) not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected (L, N, {self.input_size})"
                             f"{' as (N, L, I) with batch_first' if self.batch_first else ''} or "
                             f"(L, {self.input_size}) unbatched", where=where, arg="input")
        if x.shape[-2] == 0 or (len(x.shape) == 3 and 0 in x.shape[:2]):
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected at least one step and sample",
                             where=where, arg="input")
        steps = x.shape[1] if self.batch_first and len(x.shape) == 3 else x.shape[0]
        if not isinstance(steps, (int, np.integer)):
            raise ShapeError(f"got a sequence of symbolic length {steps}, expected a known one: the recurrence is "
                             "unrolled over the steps (export with a fixed sequence length)", where=where, arg="input")
        if len(x.shape) == 2:
            return x.reshape((x.shape[0], 1, self.input_size)), True
        return (F.transpose(x, 0, 1) if self.batch_first else x), False

    def _initial(self, hx, n: int, unbatched: bool, dtype: str, name: str):
        """Per (layer, direction), the (N, H) initial state from ``hx`` (zeros without one)."""
        count = self.num_layers * self._directions
        if hx is None:
            zero = Tensor(np.zeros((n, self.hidden_size), dtype))
            return [zero] * count
        want = (count, self.hidden_size) if unbatched else (count, n, self.hidden_size)
        if tuple(hx.shape) != want:
            raise ShapeError(f"got {name} of shape {tuple(hx.shape)}, expected {want} (layers x directions, "
                             f"{'' if unbatched else 'batch, '}hidden_size)", where=type(self).__name__, arg=name)
        parts = F.chunk(hx, count, axis=0) if count > 1 else [hx]
        return [p.reshape((n, self.hidden_size)) for p in parts]

    def _run(self, x, states: list):
        """Every layer and direction over time-major ``x``: (outputs (L, N, D*H), final states)."""
        length, n = x.shape[0], x.shape[1]
        finals = []
        for layer in range(self.num_layers):
            rows = x.reshape((length * n, x.shape[2]))
            outs = []
            for d, suffix in enumerate(self._suffixes()):
                w_ih, b_ih, w_hh, b_hh = self._params(layer, suffix)
                projected = _affine(rows, w_ih, b_ih)  # every step's input products: one kernel
                xws = F.chunk(projected, length, axis=0) if length > 1 else [projected]
                state = states[layer * self._directions + d]
                hs = [None] * length
                for t in (range(length - 1, -1, -1) if d else range(length)):
                    state = self._step(xws[t], state, w_hh, b_hh)
                    hs[t] = state[0] if isinstance(state, tuple) else state
                finals.append(state)
                outs.append(F.stack(hs, axis=0))
            x = outs[0] if len(outs) == 1 else F.concatenate(outs, axis=2)
            if self.training and self.dropout and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        return x, finals

    def _output(self, out, unbatched: bool):
        if unbatched:
            return out.reshape((out.shape[0], out.shape[2]))
        return F.transpose(out, 0, 1) if self.batch_first else out

    @staticmethod
    def _stacked(states: list, unbatched: bool):
        joined = F.stack(states, axis=0)
        return joined.reshape((joined.shape[0], joined.shape[2])) if unbatched else joined


class RNN(_RNNBase):
    """An Elman RNN, ``h_t = act(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh)`` with
    ``nonlinearity`` 'tanh' or 'relu'. ``forward(input, hx=None)`` returns
    ``(output, h_n)``: output (L, N, D*H) ((N, L, D*H) with ``batch_first``),
    h_n (num_layers*D, N, H)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype="float32"):
        if nonlinearity not in ("tanh", "relu"):
            raise AttrError(f"got nonlinearity={nonlinearity!r}, expected 'tanh' or 'relu'", where="RNN",
                            arg="nonlinearity")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype)

    def _step(self, xw, h, w_hh, b_hh):
        return _rnn_step(xw, h, w_hh, b_hh, self.nonlinearity)

    def forward(self, input, hx=None):  # noqa: A002  (PyTorch's name)
        x, unbatched = self._input(input)
        out, finals = self._run(x, self._initial(hx, x.shape[1], unbatched, str(x.dtype), "hx"))
        return self._output(out, unbatched), self._stacked(finals, unbatched)


class GRU(RNN):
    """A gated recurrent unit (gates r, z, n as PyTorch orders them);
    ``forward(input, hx=None)`` returns ``(output, h_n)`` as ``RNN``'s."""

    mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, dtype="float32"):
        super().__init__(input_size, hidden_size, num_layers, "tanh", bias, batch_first, dropout, bidirectional,
                         dtype)

    def _step(self, xw, h, w_hh, b_hh):
        return _gru_step(xw, h, w_hh, b_hh)


class LSTM(_RNNBase):
    """A long short-term memory network (gates i, f, g, o as PyTorch orders
    them). ``forward(input, hx=None)``, ``hx = (h_0, c_0)`` each
    (num_layers*D, N, H), returns ``(output, (h_n, c_n))``; ``proj_size``
    other than 0 is not supported."""

    mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 dtype="float32"):
        if proj_size != 0:
            raise AttrError(f"got proj_size={proj_size!r}; kiln supports 0 only", where="LSTM", arg="proj_size")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype)

    def _step(self, xw, state, w_hh, b_hh):
        return _lstm_step(xw, state, w_hh, b_hh)

    def forward(self, input, hx=None):  # noqa: A002
        x, unbatched = self._input(input)
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise ShapeError("got hx that is not a pair, expected (h_0, c_0)", where="LSTM", arg="hx")
        h0, c0 = (None, None) if hx is None else hx
        n, dtype = x.shape[1], str(x.dtype)
        states = list(zip(self._initial(h0, n, unbatched, dtype, "h_0"), self._initial(c0, n, unbatched, dtype, "c_0")))
        out, finals = self._run(x, states)
        return self._output(out, unbatched), (self._stacked([h for h, _ in finals], unbatched),
                                              self._stacked([c for _, c in finals], unbatched))
