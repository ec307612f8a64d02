"""Recurrent cells with PyTorch's contracts (``RNNCell``, ``LSTMCell``,
``GRUCell``) and the steps ``RNN``, ``LSTM`` and ``GRU`` (``rnn.py``) unroll.

Arguments, gate orders (LSTM ``i, f, g, o``; GRU ``r, z, n``, with ``n =
tanh(W_in x + b_in + r * (W_hn h + b_hn))``), shapes and initial states are
PyTorch's; parameters have its names (``weight_ih``, ``bias_hh``). Like
``Linear``'s, a weight is kept as the transpose of PyTorch's, (in, gates),
so each product is one ``dense`` kernel; ``layout="torch"`` state dicts
transpose it.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import AttrError, ShapeError
from ..te import call
from . import functional as F
from . import init
from .module import Module, Parameter
from .state import TRANSPOSED
from .tensor import Tensor

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}


def _affine(x, weight, bias):
    """``x @ weight + bias`` for a 2-D ``x``: one ``dense`` kernel."""
    return call("dense", x, weight, bias) if bias is not None else x @ weight


def _rnn_step(xw, h, w_hh, b_hh, nonlinearity: str):
    pre = xw + _affine(h, w_hh, b_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def _lstm_step(xw, state, w_hh, b_hh):
    """``(h, c)`` after one step: the gates' activations and the state update are one ``lstm_cell`` kernel."""
    h, c = state
    h, c = call("lstm_cell", xw + _affine(h, w_hh, b_hh), c)
    return h, c


def _gru_step(xw, h, w_hh, b_hh):
    xr, xz, xn = F.chunk(xw, 3, axis=1)
    hr, hz, hn = F.chunk(_affine(h, w_hh, b_hh), 3, axis=1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (h - n)  # (1 - z) n + z h


def _uniform(hidden: int, shape: tuple, dtype: str) -> Parameter:
    """PyTorch's initialization of every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H))."""
    bound = 1.0 / float(np.sqrt(hidden))
    return Parameter(init.rand(*shape, low=-bound, high=bound, dtype=dtype).numpy())


def _check_size(where: str, name: str, value, minimum: int = 1) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise AttrError(f"got {name}={value!r}, expected an integer >= {minimum}", where=where, arg=name)
    return int(value)


class _Cell(Module):
    """What the three cells share: the parameters of one step."""

    mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype="float32"):
        where = type(self).__name__
        self.input_size = _check_size(where, "input_size", input_size)
        self.hidden_size = _check_size(where, "hidden_size", hidden_size)
        gates = _GATES[self.mode] * hidden_size
        self.weight_ih = _uniform(hidden_size, (input_size, gates), dtype)
        self.weight_hh = _uniform(hidden_size, (hidden_size, gates), dtype)
        self.bias_ih = _uniform(hidden_size, (gates,), dtype) if bias else None
        self.bias_hh = _uniform(hidden_size, (gates,), dtype) if bias else None

    def torch_layout(self) -> dict:
        return {"weight_ih": TRANSPOSED, "weight_hh": TRANSPOSED}

    def _input(self, x):
        if len(x.shape) not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeError(f"got input of shape {tuple(x.shape)}, expected (N, {self.input_size}) or "
                             f"({self.input_size},)", where=type(self).__name__, arg="input")
        return x.reshape((1, self.input_size)) if len(x.shape) == 1 else x

    def _state(self, hx, n: int, unbatched: bool, dtype: str, name: str = "hx"):
        if hx is None:
            return Tensor(np.zeros((n, self.hidden_size), dtype))
        want = (self.hidden_size,) if unbatched else (n, self.hidden_size)
        if tuple(hx.shape) != want:
            raise ShapeError(f"got {name} of shape {tuple(hx.shape)}, expected {want}", where=type(self).__name__,
                             arg=name)
        return hx.reshape((1, self.hidden_size)) if unbatched else hx


class RNNCell(_Cell):
    """One step of an Elman RNN: ``h' = act(x W_ih + b_ih + h W_hh + b_hh)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 dtype="float32"):
        if nonlinearity not in ("tanh", "relu"):
            raise AttrError(f"got nonlinearity={nonlinearity!r}, expected 'tanh' or 'relu'", where="RNNCell",
                            arg="nonlinearity")
        super().__init__(input_size, hidden_size, bias, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):  # noqa: A002  (PyTorch's name)
        x = self._input(input)
        h = self._state(hx, x.shape[0], len(input.shape) == 1, str(x.dtype))
        out = _rnn_step(_affine(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                        self.nonlinearity)
        return out.reshape((self.hidden_size,)) if len(input.shape) == 1 else out


class LSTMCell(_Cell):
    """One LSTM step: ``forward(input, (h, c))`` returns ``(h', c')``."""

    mode = "LSTM"

    def forward(self, input, hx=None):  # noqa: A002
        x = self._input(input)
        unbatched = len(input.shape) == 1
        h0, c0 = (None, None) if hx is None else hx
        state = (self._state(h0, x.shape[0], unbatched, str(x.dtype), "h"),
                 self._state(c0, x.shape[0], unbatched, str(x.dtype), "c"))
        h, c = _lstm_step(_affine(x, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        return (h.reshape((self.hidden_size,)), c.reshape((self.hidden_size,))) if unbatched else (h, c)


class GRUCell(_Cell):
    """One GRU step: ``forward(input, h)`` returns ``h'``."""

    mode = "GRU"

    def forward(self, input, hx=None):  # noqa: A002
        x = self._input(input)
        h = self._state(hx, x.shape[0], len(input.shape) == 1, str(x.dtype))
        out = _gru_step(_affine(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return out.reshape((self.hidden_size,)) if len(input.shape) == 1 else out
