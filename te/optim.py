"""Fused optimizer updates: one kernel per parameter and step, one pass over
its memory, written in place (``Tensor.apply_`` maps each output onto the
input it replaces).

The hyperparameters are an input, a float32 vector ``h``, not attributes:
a learning-rate schedule or Adam's bias correction changes them every step,
and one compiled kernel serves every value. In every update the gradient is
``g + weight_decay * w`` first.

- ``sgd_step(w, g, h)``, ``h = [lr, weight_decay]``: ``w - lr * g``.
- ``sgd_momentum_step(w, g, u, h)``, ``h = [lr, weight_decay, decay, keep,
  momentum]``: ``u' = decay * u + keep * g``; ``w' = w - lr * u'``, or with
  ``nesterov`` ``w - lr * (g + momentum * u')``. (``decay`` and ``keep`` say
  how the buffer moves: needle's ``momentum, 1 - momentum``; PyTorch's
  ``momentum, 1 - dampening``, and ``0, 1`` on its first step.)
- ``adam_step(w, g, m, v, h)``, ``h = [lr, weight_decay, beta1, beta2, eps,
  1 - beta1^t, 1 - beta2^t]``: ``m' = b1 m + (1 - b1) g``, ``v' = b2 v +
  (1 - b2) g^2``, ``w' = w - lr * (m' / c1) / (sqrt(v' / c2) + eps)``.
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np
from tvm import te

from ..errors import ShapeError
from . import attrs as A
from .registry import Op, register
from .shapes import dtype_of, is_static, same_dim, shape_str, static

FLOATS = ("float32", "float64")


class _Update(Op):
    """An update of ``w`` from ``g`` and its state buffers (the inputs after
    ``g``, before ``h``): every tensor input has ``w``'s shape, ``h`` is a
    vector of ``len(HYPER)`` values; the outputs are ``w`` and the state,
    in that order, each written over its input."""

    family = "optimizer"
    differentiable = False
    grad_inputs = ()
    grad_output = False
    multi_output = True
    dtypes = FLOATS
    HYPER: tuple[str, ...] = ()
    STATE = 0  # state buffers after g
    arity = 3
    inplace = MappingProxyType({0: 0})

    def infer_shape(self, w, g, *rest, **attrs):
        *state, h = rest
        for i, s in enumerate([g] + state, start=1):
            if len(s) != len(w) or not all(same_dim(a, b) for a, b in zip(s, w)):
                raise ShapeError(f"input {i} has shape {shape_str(s)}, expected the parameter's {shape_str(w)}",
                                 op=self.name, arg=f"input {i}")
        if len(h) != 1 or not is_static(h[0]) or static(h[0]) != len(self.HYPER):  # read by index: never symbolic
            raise ShapeError(f"got hyperparameters of shape {shape_str(h)}, expected ({len(self.HYPER)},): "
                             f"[{', '.join(self.HYPER)}]", op=self.name, arg="h")
        return [tuple(w)] * (1 + self.STATE)

    def infer_dtype(self, *dtypes, **attrs):
        return [dtypes[0]] * (1 + self.STATE)

    def compute(self, w, g, *rest, **attrs):
        # each new state is a stage of its own, the new weight reads them: written over their inputs in
        # place, a stage must read only inputs not yet overwritten, so w (which every stage reads through
        # the decayed gradient) is written last, and w's rule reads the new state, never the old
        *state, h = rest
        dt, shape = dtype_of(w), tuple(w.shape)
        hyper = {name: h[k].astype(dt) for k, name in enumerate(self.HYPER)}

        def grad(i):
            return g(*i).astype(dt) + hyper["weight_decay"] * w(*i)

        def state_k(k):
            return lambda *i: self.states(grad(i), [s(*i).astype(dt) for s in state], hyper, te.sqrt, **attrs)[k]

        new_state = [te.compute(shape, state_k(k), name=f"{self.name}_state{k}", tag="injective")
                     for k in range(self.STATE)]
        new_w = te.compute(shape, lambda *i: self.weight(w(*i), grad(i), [s(*i) for s in new_state], hyper,
                                                         te.sqrt, **attrs), name=self.name, tag="injective")
        return [new_w, *new_state]

    def reference(self, w, g, *rest, **attrs):
        *state, h = rest
        hyper = {name: h[k].astype(w.dtype) for k, name in enumerate(self.HYPER)}
        grad = g.astype(w.dtype) + hyper["weight_decay"] * w
        new_state = self.states(grad, [s.astype(w.dtype) for s in state], hyper, np.sqrt, **attrs)
        return [np.asarray(x, w.dtype) for x in [self.weight(w, grad, new_state, hyper, np.sqrt, **attrs),
                                                 *new_state]]

    def states(self, g, state, h, sqrt, **attrs) -> list:
        """The new state from the decayed gradient ``g``, the state and the
        hyperparameters ``h`` (by name), as TE expressions or numpy arrays
        (``sqrt`` is the matching square root)."""
        return []

    def weight(self, w, g, new_state, h, sqrt, **attrs):
        """The new ``w`` from ``w``, ``g``, the new state and ``h``."""
        raise NotImplementedError


@register
class SgdStep(_Update):
    """Plain SGD: ``w - lr * (g + weight_decay * w)``."""

    name = "sgd_step"
    HYPER = ("lr", "weight_decay")

    def weight(self, w, g, new_state, h, sqrt):
        return w - h["lr"] * g


@register
class SgdMomentumStep(_Update):
    """SGD with a momentum buffer ``u`` (see the module docstring)."""

    name = "sgd_momentum_step"
    HYPER = ("lr", "weight_decay", "decay", "keep", "momentum")
    STATE = 1
    arity = 4
    inplace = MappingProxyType({0: 0, 1: 2})
    attrs = {"nesterov": A.Attr(A.boolean, default=False, doc="step along g + momentum * u")}

    def states(self, g, state, h, sqrt, nesterov=False):
        return [h["decay"] * state[0] + h["keep"] * g]

    def weight(self, w, g, new_state, h, sqrt, nesterov=False):
        (u,) = new_state
        return w - h["lr"] * (g + h["momentum"] * u if nesterov else u)


@register
class AdamStep(_Update):
    """Adam with bias correction (see the module docstring)."""

    name = "adam_step"
    HYPER = ("lr", "weight_decay", "beta1", "beta2", "eps", "c1", "c2")
    STATE = 2
    arity = 5
    inplace = MappingProxyType({0: 0, 1: 2, 2: 3})

    def states(self, g, state, h, sqrt):
        m, v = state
        return [h["beta1"] * m + (1 - h["beta1"]) * g, h["beta2"] * v + (1 - h["beta2"]) * g * g]

    def weight(self, w, g, new_state, h, sqrt):
        m, v = new_state
        return w - h["lr"] * (m / h["c1"]) / (sqrt(v / h["c2"]) + h["eps"])
