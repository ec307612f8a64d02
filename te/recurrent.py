"""An LSTM step's elementwise work as one kernel, and its gradient as one more.

``lstm_cell(gates, c) -> (h, c')``: ``gates`` (N, 4H) are the step's
pre-activations ``x W_ih + b_ih + h W_hh + b_hh`` in PyTorch's order
``i, f, g, o``, ``c`` (N, H) the cell state; with ``σ`` the logistic
function, ``c' = σ(f) c + σ(i) tanh(g)`` and ``h = σ(o) tanh(c')``. Written
as ops (a split, three sigmoids, two tanhs, three products and a sum) a
step is ten kernels forward and more backward; an unrolled sequence runs it
at every step of every layer, where launching kernels costs more than the
arithmetic.

Its gradient is ``lstm_cell_grad(gates, c, dh, dc') -> (dgates, dc)``,
which computes the gates again from ``gates`` (nothing else is kept): with
``t = tanh(c')`` and ``dC = dc' + dh σ(o) (1 - t²)``, ``dgates`` holds
``dC tanh(g) σ(i)(1 - σ(i))``, ``dC c σ(f)(1 - σ(f))``, ``dC σ(i)(1 -
tanh(g)²)`` and ``dh t σ(o)(1 - σ(o))``, and ``dc = dC σ(f)``. A recorded
gradient (``create_graph``) is the same formula written with registered
ops, which can be differentiated again.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from ..errors import ShapeError
from . import fastmath
from .grad import as_dtype
from .oprefs import op_ref
from .registry import Op, register
from .shapes import FLOATS, dtype_of, promote, same_dim, shape_str

lstm_cell_grad = op_ref("lstm_cell_grad")
split, sigmoid, tanh = op_ref("split"), op_ref("sigmoid"), op_ref("tanh")
concatenate = op_ref("concatenate")


def _check(name: str, gates, c, *grads) -> None:
    """gates (N, 4H), c and each of ``grads`` (N, H)."""
    if len(gates) != 2 or len(c) != 2:
        raise ShapeError(f"got gates {shape_str(gates)} and c {shape_str(c)}, expected (N, 4H) and (N, H)", op=name,
                         arg="gates")
    if not (same_dim(gates[0], c[0]) and same_dim(gates[1], 4 * c[1])):
        raise ShapeError(f"got gates {shape_str(gates)} for c {shape_str(c)}, expected gates (N, 4H) for c (N, H)",
                         op=name, arg="gates")
    if c[1] == 0:
        raise ShapeError(f"got c of shape {shape_str(c)}, expected a state of at least one unit", op=name, arg="c")
    for k, g in enumerate(grads):
        if len(g) != 2 or not all(same_dim(a, b) for a, b in zip(g, c)):
            raise ShapeError(f"got {('dh', 'dc')[k]} of shape {shape_str(g)}, expected c's {shape_str(c)}", op=name,
                             arg=("dh", "dc")[k])


class _Gates:
    """The activated gates of one element (n, j) of a step, each bound once
    (``Let``): an activation read twice would repeat its own bindings."""

    def __init__(self, gates, hidden, dt: str):
        self.g, self.h, self.dt = gates, hidden, dt

    def raw(self, k: int, n, j):
        return self.g[n, k * self.h + j].astype(self.dt)

    def bound(self, n, j, body, extra=()):
        """``body(i, f, g, o, *extra_vars)`` with σ(i), σ(f), tanh(g), σ(o) and
        each ``(name, fn)`` of ``extra`` (``fn`` of the variables before it) bound."""
        names = ("lstm_i", "lstm_f", "lstm_g", "lstm_o") + tuple(name for name, _ in extra)
        variables = [tirx.Var(name, self.dt) for name in names]
        values = [fastmath.sigmoid(self.raw(0, n, j)), fastmath.sigmoid(self.raw(1, n, j)),
                  fastmath.tanh(self.raw(2, n, j)), fastmath.sigmoid(self.raw(3, n, j))]
        values += [fn(*variables[:4 + k]) for k, (_, fn) in enumerate(extra)]
        out = body(*variables)
        for var, value in reversed(list(zip(variables, values))):
            out = tirx.Let(var, value, out)
        return out


@register
class LSTMCellOp(Op):
    """See the module docstring."""

    name = "lstm_cell"
    arity = 2
    multi_output = True
    dtypes = FLOATS
    grad_inputs = (0, 1)
    grad_output = False

    def infer_shape(self, gates, c):
        _check(self.name, gates, c)
        return [tuple(c), tuple(c)]

    def infer_dtype(self, gates, c):
        return [promote(self.name, gates, c)] * 2

    def compute(self, gates, c):
        dt = promote(self.name, dtype_of(gates), dtype_of(c))
        act = _Gates(gates, c.shape[1], dt)
        c_new = te.compute(c.shape, lambda n, j: act.bound(n, j, lambda i, f, g, o: f * c[n, j].astype(dt) + i * g),
                           name=f"{self.name}_c", tag="injective")
        h = te.compute(c.shape, lambda n, j: fastmath.sigmoid(act.raw(3, n, j)) * fastmath.tanh(c_new[n, j]),
                       name=self.name, tag="injective")
        return [h, c_new]

    def reference(self, gates, c):
        dt = np.result_type(gates, c)
        i, f, g, o = _ref_gates(gates.astype(np.float64))
        c_new = f * c + i * g
        return [(o * np.tanh(c_new)).astype(dt), c_new.astype(dt)]

    def gradient(self, out_grads, node):
        dh, dc = out_grads
        gates, c = node.inputs
        if getattr(type(dh), "_kiln_recording", lambda: False)():  # create_graph: a differentiable graph
            dgates, dc_prev = _composed_grad(gates, c, dh, dc)
        else:
            dgates, dc_prev = lstm_cell_grad(gates, c, dh, dc)
        return as_dtype(dgates, gates.dtype), as_dtype(dc_prev, c.dtype)

    def flops(self, shapes, **attrs):
        return 0.0


@register
class LSTMCellGrad(Op):
    """See the module docstring (``lstm_cell`` records its composed form when a
    gradient is itself recorded)."""

    name = "lstm_cell_grad"
    arity = 4
    multi_output = True
    differentiable = False
    dtypes = FLOATS
    grad_inputs = ()
    grad_output = False

    def infer_shape(self, gates, c, dh, dc):
        _check(self.name, gates, c, dh, dc)
        return [tuple(gates), tuple(c)]

    def infer_dtype(self, gates, c, dh, dc):
        return [promote(self.name, gates, c, dh, dc)] * 2

    def compute(self, gates, c, dh, dc):
        dt = promote(self.name, *(dtype_of(t) for t in (gates, c, dh, dc)))
        hidden = c.shape[1]
        act = _Gates(gates, hidden, dt)
        one = tirx.const(1, dt)

        def extra(n, j):
            """t = tanh(c') and dC, bound after the gates."""
            return (("lstm_t", lambda i, f, g, o: fastmath.tanh(f * c[n, j].astype(dt) + i * g)),
                    ("lstm_dc", lambda i, f, g, o, t: dc[n, j].astype(dt) + dh[n, j].astype(dt) * o * (one - t * t)))

        # dC once per element (``_state``: every gate's activation and tanh(c')), then each gate's column reads
        # it and activates only what its formula needs (the template keeps the stage; inlined, as the generic
        # schedule would, every column recomputes all five)
        d_state = te.compute(c.shape, lambda n, j: act.bound(n, j, lambda i, f, g, o, t, d_c: d_c, extra(n, j)),
                             name=f"{self.name}_state", tag="injective")

        def dgate(n, col):
            k, j = col // hidden, col % hidden
            d_c = tirx.Var("lstm_dc", dt)  # read once, outside the branches (each would simplify its index apart)

            def body(i, f, g, o, t):
                return tirx.Select(k == 0, d_c * g * i * (one - i),
                                   tirx.Select(k == 1, d_c * c[n, j].astype(dt) * f * (one - f),
                                               tirx.Select(k == 2, d_c * i * (one - g * g),
                                                           dh[n, j].astype(dt) * t * o * (one - o))))
            return tirx.Let(d_c, d_state[n, j], act.bound(n, j, body, extra(n, j)[:1]))
        dgates = te.compute(gates.shape, dgate, name=self.name, tag="injective")
        dc_prev = te.compute(c.shape, lambda n, j: d_state[n, j] * fastmath.sigmoid(act.raw(1, n, j)),
                             name=f"{self.name}_c", tag="injective")
        return [dgates, dc_prev]

    def reference(self, gates, c, dh, dc):
        dt = np.result_type(gates, c, dh, dc)
        i, f, g, o = _ref_gates(gates.astype(np.float64))
        t = np.tanh(f * c + i * g)
        d_c = dc + dh * o * (1 - t * t)
        dgates = np.concatenate([d_c * g * i * (1 - i), d_c * c * f * (1 - f), d_c * i * (1 - g * g),
                                 dh * t * o * (1 - o)], axis=1)
        return [dgates.astype(dt), (d_c * f).astype(dt)]


def _ref_gates(gates):
    i, f, g, o = np.split(gates, 4, axis=1)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    return sig(i), sig(f), np.tanh(g), sig(o)


def _composed_grad(gates, c, dh, dc):
    """``lstm_cell_grad`` written with registered ops (differentiable)."""
    gi, gf, gg, go = split(gates, sections=4, axis=1)
    i, f, g, o = sigmoid(gi), sigmoid(gf), tanh(gg), sigmoid(go)
    t = tanh(f * c + i * g)
    d_c = dc + dh * o * (1.0 - t * t)
    dgates = concatenate(d_c * g * i * (1.0 - i), d_c * c * f * (1.0 - f), d_c * i * (1.0 - g * g),
                         dh * t * o * (1.0 - o), axis=1)
    return dgates, d_c * f
