"""The recorded graph of autograd: whether ops are recorded (``no_grad``),
one ``_Node`` per recorded op application, what each node keeps for backward
(only the values its op's gradient declares it reads), and the walks over it.

The reverse sweep itself and the views a gradient reads live with the
``Tensor`` (``nn/tensor.py``), which it creates.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

_state = threading.local()
_keep_all = False  # True: save every input and output for backward (to measure what the declarations save)


def grad_enabled() -> bool:
    return getattr(_state, "grad", True)


@contextlib.contextmanager
def no_grad():
    """Run ops without recording them for autograd."""
    before = grad_enabled()
    _state.grad = False
    try:
        yield
    finally:
        _state.grad = before


def keep_all_for_backward(keep: bool) -> None:
    """Save every input and output of recorded ops, ignoring what their gradients
    declare they read (the behaviour before the declarations; for comparisons)."""
    global _keep_all
    _keep_all = bool(keep)


class _Node:
    """One recorded op application: the op, its attrs, the nodes its inputs
    came from (``(node, output index)``, or None where an input needs no
    gradient), and, per input and output, ``(array, var, shape, dtype)`` with
    the array and var only where the op's gradient reads that value; ``site``
    is the kernel-pool site the op ran on, where its gradient runs too."""

    __slots__ = ("op", "attrs", "parents", "inputs", "outputs", "leaf", "site", "__weakref__")

    def __init__(self, op=None, attrs=None, parents=(), inputs=(), outputs=(), leaf=None, site=None):
        self.op, self.attrs, self.parents = op, attrs or {}, tuple(parents)
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.leaf = leaf  # leaf nodes: a weakref to the leaf Tensor whose .grad they fill
        self.site = site


def _record(op, attrs, tensors, arrays, variables, specs, site) -> _Node:
    """The node of one op application on ``site``: its parents, and of its
    inputs and outputs only the values the op's gradient declares it reads."""
    grad_inputs, grad_output = op.grad_saves(attrs)
    every = _keep_all or grad_inputs is None
    inputs, parents = [], []  # one loop: every op with an input that requires grad comes here
    for i, t in enumerate(tensors):
        meta = t._shape
        inputs.append((t._array, t._var, meta[0], meta[1]) if every or i in grad_inputs
                      else (None, None, meta[0], meta[1]))
        if not t.requires_grad:
            parents.append(None)
        elif t._node is not None:  # t._edge() without its call, on a path every recorded op takes
            parents.append((t._node, t._index))
        else:
            parents.append(t._edge())
    keep_out = _keep_all or grad_output
    if len(specs) == 1:
        (shape, dtype), = specs
        outputs = ((arrays[0], variables[0], shape, dtype) if keep_out else (None, None, shape, dtype),)
    else:
        outputs = tuple((a, v, s, d) if keep_out else (None, None, s, d)
                        for a, v, (s, d) in zip(arrays, variables, specs))
    node = _Node.__new__(_Node)  # the fields directly: __init__'s conversions cost a microsecond here
    node.op, node.attrs, node.parents, node.inputs, node.outputs = op, attrs, tuple(parents), tuple(inputs), outputs
    node.leaf, node.site = None, site
    return node


def saved_bytes(t) -> int:
    """Bytes of the distinct arrays the autograd graph behind ``t`` keeps for backward."""
    if t._node is None:
        return 0
    seen, total = set(), 0
    for node in _topological(t._node):
        for array, _, shape, dtype in node.inputs + node.outputs:
            if array is not None and id(array) not in seen:
                seen.add(id(array))
                total += int(np.prod(shape)) * np.dtype(dtype).itemsize
    return total


def _topological(root: _Node) -> list[_Node]:
    """Nodes reachable from ``root``, inputs first."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((p[0], False) for p in node.parents if p is not None and id(p[0]) not in seen)
    return order
