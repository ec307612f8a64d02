"""The autograd ``Tensor``: data on a device as a TVM tensor, every op a
compiled kernel, gradients as graphs of registered ops (needle's design).

An op applied to Tensors goes through ``kiln.te.call`` to ``Tensor._kiln_apply``,
which runs the op's kernel and, when an input requires a gradient, records
the op, its inputs and its attributes on the result. ``backward`` walks that
graph in reverse topological order, calling each op's ``gradient`` (itself
made of registered ops) and summing gradients over fan-out.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import tvm

from ..errors import DTypeError, ShapeError
from ..runtime import build, cpu
from ..te import call
from ..te.value import ValueOps

_state = threading.local()
_kernels: dict = {}


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


def _kernel(op, shapes, dtypes, attrs):
    """``kiln.build`` behind a per-process dict: a training step calls the same
    few signatures thousands of times, so skip re-validating and re-hashing."""
    key = (op.name, shapes, dtypes, repr(sorted(attrs.items())))
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _kernels[key] = build(op, list(shapes), list(dtypes), attrs)
    return kernel


def _to_device(data, dtype=None) -> tvm.runtime.Tensor:
    if isinstance(data, tvm.runtime.Tensor):
        if dtype is not None and str(data.dtype) != str(np.dtype(dtype)):
            return tvm.runtime.tensor(data.numpy().astype(dtype), cpu().device())
        return data
    arr = np.asarray(data, dtype=dtype)
    if dtype is None and arr.dtype == np.float64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.float32)  # Python floats and lists default to float32, as in needle
    if arr.dtype == np.int64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.int32)
    if str(arr.dtype) not in ("float32", "float64", "int32", "int64", "bool"):
        raise DTypeError(f"got {arr.dtype}, expected float32, float64, int32, int64 or bool", op="Tensor",
                         arg="data")
    return tvm.runtime.tensor(np.ascontiguousarray(arr) if arr.ndim else arr.copy(), cpu().device())


class Tensor(ValueOps):
    """An n-dimensional array on a device that records ops for autograd.

    Parameters
    ----------
    data : array-like, Tensor or tvm.runtime.Tensor
    dtype : str, optional
        Python scalars and lists default to float32 (numpy arrays keep theirs).
    requires_grad : bool
    """

    def __init__(self, data, *, dtype=None, requires_grad: bool = False):
        source = data._array if isinstance(data, Tensor) else data
        self._array = _to_device(source, dtype)
        self.requires_grad = bool(requires_grad)
        self.op = None
        self.inputs: tuple = ()
        self.attrs: dict = {}
        self.grad: Tensor | None = None
        self._group: list | None = None  # all outputs of a multi-output op

    @classmethod
    def _from_array(cls, array, op=None, inputs=(), attrs=None, requires_grad=False) -> "Tensor":
        t = cls.__new__(cls)
        t._array, t.op, t.inputs, t.attrs = array, op, tuple(inputs), dict(attrs or {})
        t.requires_grad, t.grad, t._group = requires_grad, None, None
        return t

    @classmethod
    def _kiln_apply(cls, op, inputs, attrs):
        tensors = [v if isinstance(v, Tensor) else Tensor(v) for v in inputs]
        shapes = tuple(t.shape for t in tensors)
        kernel = _kernel(op, shapes, tuple(t.dtype for t in tensors), attrs)
        outs = kernel(*[t._array for t in tensors])
        record = grad_enabled() and op.differentiable and any(t.requires_grad for t in tensors)
        keep = tensors if record else ()
        if not op.multi_output:
            return cls._from_array(outs, op if record else None, keep, kernel.attrs, record)
        group = [cls._from_array(o, op if record else None, keep, kernel.attrs, record) for o in outs]
        for t in group:
            t._group = group
        return group

    # -- data -------------------------------------------------------------------
    shape = property(lambda self: tuple(int(d) for d in self._array.shape))
    dtype = property(lambda self: str(self._array.dtype))
    ndim = property(lambda self: len(self._array.shape))

    @property
    def device(self):
        return cpu()

    @property
    def data(self) -> "Tensor":
        """The same values, detached from the graph."""
        return self.detach()

    @data.setter
    def data(self, value) -> None:
        value = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype)
        if value.shape != self.shape or value.dtype != self.dtype:
            raise ShapeError(f"got {value.shape}:{value.dtype}, expected {self.shape}:{self.dtype}",
                             op="Tensor", arg="data")
        self._array = value._array

    def detach(self) -> "Tensor":
        return Tensor._from_array(self._array)

    def numpy(self) -> np.ndarray:
        return self._array.numpy()

    def item(self):
        return self.numpy().item()

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("a 0-d tensor has no length", op="Tensor", arg="len")
        return self.shape[0]

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"kiln.Tensor({self.numpy()!r}, dtype={self.dtype}{grad})"

    # -- autograd -----------------------------------------------------------------
    def backward(self, out_grad: "Tensor | None" = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` that requires it.

        ``create_graph=True`` records the gradient computation itself, so the
        gradients can be differentiated again.
        """
        if out_grad is None:
            out_grad = Tensor(np.ones(self.shape, self.dtype))
        with contextlib.nullcontext() if create_graph else no_grad():
            backprop(self, out_grad)


def backprop(root: Tensor, out_grad: Tensor) -> None:
    """Reverse-mode sweep from ``root``; gradients over fan-out are summed."""
    order = _topological(root)
    grads: dict[int, Tensor] = {id(root): out_grad}

    def add(t, g):
        prev = grads.get(id(t))
        grads[id(t)] = g if prev is None else call("add", prev, g)

    for node in reversed(order):
        outputs = node._group or [node]
        gs = [grads.pop(id(t), None) for t in outputs]
        if all(g is None for g in gs):
            continue
        if node.op is None:  # a leaf
            if node.requires_grad:
                g = gs[0]
                node.grad = g if node.grad is None else call("add", node.grad, g)
            continue
        if node._group is None:
            in_grads = node.op.gradient(gs[0], node)
        else:
            full = [g if g is not None else Tensor(np.zeros(t.shape, t.dtype)) for g, t in zip(gs, outputs)]
            in_grads = node.op.gradient(full, node)
        for inp, g in zip(node.inputs, in_grads):
            if g is not None and inp.requires_grad:
                add(inp, g)


def _topological(root: Tensor) -> list[Tensor]:
    """Nodes reachable from ``root`` (one per multi-output group), inputs first."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        node, done = stack.pop()
        node = node._group[0] if node._group else node
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((inp, False) for inp in node.inputs if id(inp) not in seen)
    return order
