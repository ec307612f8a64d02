"""The autograd ``Tensor``: data on a device as a TVM tensor, every op a
compiled kernel, gradients as graphs of registered ops (needle's design).

An op applied to Tensors goes through ``kiln.te.call`` to ``Tensor._kiln_apply``,
which pushes the op's kernel to the dependency engine (``runtime/engine.py``)
and returns at once: each Tensor's memory is an engine variable, so kernels
run in the order their data needs, independent ones concurrently, and a
Tensor's values are waited for only when read (``numpy()``). Which compiled
kernel serves the op is asked of the active site of a kernel pool
(``runtime/pool.py``): ``Module.__call__`` activates the model's pool with
the layer as the site; elsewhere the pool a run activated serves, else
the default pool.

When an input requires a gradient, the op is recorded in a ``_Node``
(``nn/autograd.py``): the op, its attributes, the pool site it ran on, the
nodes of its inputs (the graph) and only the values its ``gradient`` reads
(``Op.grad_inputs``/``grad_output``), so an activation no backward needs is
freed as soon as the user drops its Tensor.
``backward`` walks the nodes in reverse topological order; a node's gradient
runs on the node's site (a layer's backward kernels are its own), on views
that hold the saved values and stay linked to the graph (so gradients of
gradients work). Gradients over fan-out accumulate into one
buffer (add-to, in place); optimizers update parameters in place.
"""
from __future__ import annotations

import contextlib
import copy
import weakref

import numpy as np
import tvm

from ..errors import DTypeError, GradError, ShapeError, TargetError
from ..runtime import cpu
from ..runtime.kernel import actual_rows
from ..runtime import engine as _engine
from ..runtime import pool as _pool
from ..runtime.device import host_tensor
from ..te import call, get_op
from ..te.value import ValueOps
from . import record as _recording
from .autograd import _state as _grad_state
from .autograd import (_Node, _record, _topological, grad_enabled, keep_all_for_backward,  # noqa: F401
                       no_grad, saved_bytes)

_DEVICE = tvm.cpu(0)
#: the attributes every Tensor has (``__init__``'s); a subclass may add its own
_FIELDS = frozenset(("_array", "_var", "_node", "_index", "_shape", "requires_grad", "grad"))


def _meta(array) -> tuple:
    """``(dims, dtype, None)`` of a TVM tensor: a Tensor's shape and dtype, read once."""
    return tuple(int(d) for d in array.shape), str(array.dtype), None


def _to_device(data, dtype=None) -> tvm.runtime.Tensor:
    try:
        dtype = None if dtype is None else np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"got {dtype!r}, expected a dtype name such as 'float32'", where="Tensor",
                         arg="dtype") from None
    if isinstance(data, tvm.runtime.Tensor):
        if dtype is not None and str(data.dtype) != str(np.dtype(dtype)):
            return tvm.runtime.tensor(data.numpy().astype(dtype), cpu().device())
        return data
    try:
        arr = np.asarray(data, dtype=dtype)
    except (TypeError, ValueError) as exc:  # ragged nesting, or values the dtype cannot hold
        raise ShapeError(f"cannot make an array of {type(data).__name__} data: {exc}", where="Tensor",
                         arg="data") from None
    if dtype is None and arr.dtype == np.float64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.float32)  # Python floats and lists default to float32, as in needle
    if arr.dtype == np.int64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.int32)
    if str(arr.dtype) not in ("float32", "float64", "int32", "int64", "bool", "uint8", "int8"):
        raise DTypeError(f"got {arr.dtype}, expected float32, float64, int32, int64, bool (or a quantized uint8 "
                         "or int8)", where="Tensor", arg="data")
    return host_tensor(arr, _DEVICE)


class Tensor(ValueOps):
    """An n-dimensional array on a device that records ops for autograd.

    Parameters
    ----------
    data : array-like, Tensor or tvm.runtime.Tensor
    dtype : str, optional
        Python scalars and lists default to float32 (numpy arrays keep theirs).
    requires_grad : bool
        Only float tensors may require a gradient.
    device : optional
        None or ``kiln.cpu()`` (needle's argument; nn tensors live on the CPU).
    """

    def __init__(self, data, *, dtype=None, requires_grad: bool = False, device=None):
        if device is not None and getattr(device, "kind", None) != "cpu":
            raise TargetError(f"got {device!r}, expected None or kiln.cpu(): nn tensors live on the CPU",
                              where="Tensor", arg="device")
        source = data.wait()._array if isinstance(data, Tensor) else data
        self._array = _to_device(source, dtype)
        if _recording._active is not None and self._array is not source:
            _recording._active.created(self)
        self._var = _engine.default().new_var()
        self._node, self._index = None, 0
        self._shape = _meta(self._array)
        self.requires_grad = bool(requires_grad)
        if self.requires_grad and not self.dtype.startswith("float"):
            raise DTypeError(f"got {self.dtype}, expected a float dtype: only float tensors have gradients",
                             where="Tensor", arg="requires_grad")
        self.grad: Tensor | None = None

    @classmethod
    def _wrap(cls, array, var, node=None, index=0, requires_grad=False, shape=None) -> "Tensor":
        """A Tensor over an array. ``shape`` is ``(dims, dtype, name of the op
        that made or saved it)`` (read from ``array`` when not given);
        ``array=None`` is a value autograd did not keep, which may not be read."""
        t = cls.__new__(cls)
        t._array, t._var, t._node, t._index = array, var, node, index
        t._shape = shape if shape is not None else _meta(array)
        t.requires_grad, t.grad = requires_grad, None
        return t

    # -- applying ops -------------------------------------------------------------
    @classmethod
    def _kiln_apply(cls, op, inputs, attrs, out: "list | None" = None):
        cls = Tensor  # an op's result is a plain Tensor, whatever its first input (a Parameter) was
        # the path of every eager op: after the first call of a signature, dict lookups and the launch
        # one pass over the inputs (a comprehension each costs a frame of its own)
        tensors, shapes, dtypes, ins, reads, grads = [], [], [], [], [], False
        for v in inputs:
            t = v if isinstance(v, Tensor) else Tensor(v)
            if t._array is None:
                raise GradError(f"a gradient read a value of '{t._shape[2]}' that the op does not declare "
                                f"in grad_inputs/grad_output (while applying '{op.name}')", op=t._shape[2],
                                arg="grad_inputs")
            tensors.append(t)
            meta = t._shape
            shapes.append(meta[0])
            dtypes.append(meta[1])
            ins.append(t._array)
            reads.append(t._var)
            grads = grads or t.requires_grad
        site = _pool.current_site()
        found = site.dispatch(op, tuple(shapes), tuple(dtypes), attrs)
        specs, engine = found.specs, _engine._default or _engine.default()
        # run inline: the kernel takes every core itself
        if out is not None:  # each output written over an input (apply_)
            _check_inplace(op, tensors, out, specs)
            arrays, variables = [o._array for o in out], [o._var for o in out]
            engine.push(lambda: found.launch(ins, arrays), reads=reads, writes=variables, name=op.name, inline=True)
        else:
            arrays = found.outputs()
            variables = [engine.new_var()] if len(specs) == 1 else [engine.new_var() for _ in specs]
            engine.push_new(lambda: found.launch(ins, arrays), reads, variables, op.name)
        recorder = _recording._active
        if out is not None:
            if recorder is not None:
                recorder.apply(op, found.kernel.attrs, tensors, arrays, specs, None)
            return out
        if op.data_dependent:  # its length is known once it has run: wait for it
            engine.wait_for_var(variables[1])
            arrays, variables = [actual_rows(*arrays)], variables[:1]
            specs = [(tuple(int(d) for d in arrays[0].shape), specs[0][1])]
        record = grads and op.differentiable and getattr(_grad_state, "grad", True)  # grad_enabled(), inline
        node = _record(op, found.kernel.attrs, tensors, arrays, variables, specs, site) if record else None
        name = op.name
        if len(specs) == 1 and recorder is None and not op.multi_output:  # _wrap's body, without its call
            (shape, dtype), = specs
            t = cls.__new__(cls)
            t._array, t._var, t._node, t._index = arrays[0], variables[0], node, 0
            t._shape, t.requires_grad, t.grad = (shape, dtype, name), record, None
            return t
        outs = [cls._wrap(a, v, node, i, record, (s, d, name))
                for i, (a, v, (s, d)) in enumerate(zip(arrays, variables, specs))]
        if recorder is not None:
            recorder.apply(op, found.kernel.attrs, tensors, arrays, specs, outs)
        return outs if op.multi_output else outs[0]

    @staticmethod
    def _kiln_recording() -> bool:
        """Whether ops applied now are recorded (a gradient computed with
        ``create_graph=True``): an op whose gradient cannot itself be
        differentiated asks, to refuse rather than drop the second order."""
        return grad_enabled()

    def apply_(self, op_name: str, *others, **attrs) -> "Tensor":
        """``self = op(self, *others)``, written into ``self``'s memory (the op
        must declare ``inplace``); never recorded for autograd. An op with
        several outputs writes each over the input its ``inplace`` map names
        (a fused optimizer update: the weight and its state buffers)."""
        op = get_op(op_name)
        inputs = [self, *others]
        outs = [inputs[op.inplace[k]] if k in op.inplace else None for k in range(max(op.inplace, default=0) + 1)]
        for t in outs:
            if t is not None and grad_enabled() and t.requires_grad:
                raise ShapeError("an in-place update of a tensor that requires grad would corrupt its graph; "
                                 "do it under kiln.no_grad()", op=op_name, arg="out")
        Tensor._kiln_apply(op, inputs, attrs, out=outs)
        return self

    # -- data -------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape[0]

    @property
    def dtype(self) -> str:
        return self._shape[1]

    ndim = property(lambda self: len(self.shape))

    @property
    def device(self):
        return cpu()

    @property
    def op(self):
        """The op that made this tensor (None for a leaf or an untracked result)."""
        return self._node.op if self._node is not None else None

    @property
    def data(self) -> "Tensor":
        """The same values, detached from the graph."""
        return self.detach()

    @data.setter
    def data(self, value) -> None:
        value = value if isinstance(value, Tensor) else Tensor(value, dtype=self.dtype)
        if value.shape != self.shape or value.dtype != self.dtype:
            raise ShapeError(f"got {value.shape}:{value.dtype}, expected {self.shape}:{self.dtype}",
                             where="Tensor", arg="data")
        self._array, self._var, self._shape = value._array, value._var, value._shape

    def detach(self) -> "Tensor":
        return Tensor._wrap(self._array, self._var, shape=self._shape)

    def wait(self) -> "Tensor":
        """Block until every pushed op writing this tensor has run (raising its error)."""
        _engine.default().wait_for_var(self._var)
        return self

    def __deepcopy__(self, memo):
        """A tensor of the same class over a copy of the values (and of
        ``grad``), with its own engine variable: TVM's tensor deep-copies by
        pickling through bytes, 37 MB/s (``kiln.quantize``'s copy of an
        imported BERT-base took 10 s). Only a leaf copies, as in PyTorch: a
        tensor an op made for backward holds the graph's kernels."""
        if (self._node is not None and self._node.leaf is None) or self._array is None:
            raise GradError("only a leaf tensor (one no op made while recording gradients) can be deep-copied; "
                            "copy its detach()", where="Tensor", arg="deepcopy")
        out = type(self).__new__(type(self))
        memo[id(self)] = out
        extra = {k: v for k, v in self.__dict__.items() if k not in _FIELDS}  # a subclass's own attributes
        Tensor.__init__(out, np.from_dlpack(self.wait()._array), requires_grad=self.requires_grad)  # copied once
        out.__dict__.update(copy.deepcopy(extra, memo))
        out.grad = copy.deepcopy(self.grad, memo)
        return out

    def numpy(self) -> np.ndarray:
        """A copy of the values (through DLPack: 0.5 us, against 7 for TVM's ``numpy()``)."""
        return np.from_dlpack(self.wait()._array).copy()

    def item(self):
        return self.numpy().item()

    def __bool__(self) -> bool:
        """The value of a one-element tensor; any other size is ambiguous (as in PyTorch)."""
        if int(np.prod(self.shape)) != 1:
            raise ShapeError(f"the truth value of a tensor of shape {self.shape} is ambiguous; read it with "
                             ".numpy() and use .any() or .all()", where="Tensor", arg="bool")
        return bool(self.item())

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("a 0-d tensor has no length", where="Tensor", arg="len")
        return self.shape[0]

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"kiln.Tensor({self.numpy()!r}, dtype={self.dtype}{grad})"

    # -- autograd -----------------------------------------------------------------
    def _edge(self):
        """(node, output index) that gradients of this tensor flow into; a leaf
        that requires grad gets its node the first time it is used."""
        if self._node is None:
            self._node = _Node(leaf=weakref.ref(self))
        return self._node, self._index

    def backward(self, out_grad: "Tensor | None" = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` that requires it.

        ``create_graph=True`` records the gradient computation itself, so the
        gradients can be differentiated again.
        """
        if not self.requires_grad:
            raise GradError("the tensor does not require grad and has no graph: it was made under no_grad(), "
                            "detached, or from inputs none of which has requires_grad=True", where="Tensor.backward",
                            arg="self")
        if out_grad is None:
            out_grad = Tensor(np.ones(self.shape, self.dtype))
        elif not isinstance(out_grad, Tensor):
            out_grad = Tensor(out_grad, dtype=self.dtype)
        if out_grad.shape != self.shape:
            raise ShapeError(f"got {out_grad.shape}, expected the tensor's shape {self.shape}", where="Tensor.backward",
                             arg="out_grad")
        with contextlib.nullcontext() if create_graph else no_grad():
            backprop(self, out_grad)


class _NodeView(Tensor):
    """An op's output as its ``gradient`` sees it: a Tensor (holding the
    output's value when the op declared it reads it) with the op's ``inputs``
    (views too) and ``attrs``. Views stay linked to the graph, so a gradient
    computed with ``create_graph=True`` can be differentiated again."""

    def __init__(self, node: _Node, index: int = 0):
        array, var, shape, dtype = node.outputs[index]
        self._array, self._var, self._node, self._index = array, var, node, index
        self._shape = (shape, dtype, node.op.name)
        self.requires_grad, self.grad = True, None
        self.attrs = node.attrs
        self.inputs = tuple(_input_view(node, i) for i in range(len(node.inputs)))


def _input_view(node: _Node, i: int) -> Tensor:
    array, var, shape, dtype = node.inputs[i]
    parent, index = node.parents[i] or (None, 0)
    return Tensor._wrap(array, var, parent, index, parent is not None, (shape, dtype, node.op.name))


def _check_inplace(op, tensors, outs, specs) -> None:
    """Each output ``k`` goes to ``outs[k]``, which must be the input the op's
    ``inplace`` map writes it over, of the output's shape and dtype."""
    if len(outs) != len(specs) or any(op.inplace.get(k) is None or tensors[op.inplace[k]] is not o
                                      for k, o in enumerate(outs)):
        raise ShapeError(f"op '{op.name}' cannot write its outputs into the memory of its inputs "
                         f"(its in-place map: {dict(op.inplace) or 'none'})", op=op.name, arg="out")
    for o, (shape, dtype) in zip(outs, specs):
        if tuple(shape) != o.shape or dtype != o.dtype:
            raise ShapeError(f"got an output of {tuple(shape)}:{dtype}, expected {o.shape}:{o.dtype} to update "
                             "in place", op=op.name, arg="out")


def backprop(root: Tensor, out_grad: Tensor) -> None:
    """Reverse-mode sweep from ``root``, one gradient op at a time. Gradients
    over fan-out are summed: the first sum allocates a buffer, later ones add
    to it in place (add-to). With ``create_graph`` (grad enabled) the
    gradient's own graph is recorded, op by op."""
    root_node, root_index = root._edge() if root.requires_grad else (None, 0)
    if root_node is None:
        return
    order = _topological(root_node)
    grads: dict[int, list] = {}
    owned: set[int] = set()  # gradient sums made here: nobody else holds them, so add to them in place

    def add(node, index, g):
        slot = grads.setdefault(id(node), [None] * max(1, len(node.outputs)))
        prev = slot[index]
        if prev is None:
            slot[index] = g
        elif id(prev) in owned and not grad_enabled():
            prev.apply_("add", g)
        else:
            slot[index] = call("add", prev, g)
            owned.add(id(slot[index]))

    add(root_node, root_index, out_grad)
    for node in reversed(order):
        gs = grads.pop(id(node), None)
        if gs is None or all(g is None for g in gs):
            continue
        if node.op is None:
            _accumulate_leaf(node, gs[0])
            continue
        with _pool.activate(node.site):
            if len(node.outputs) == 1:
                in_grads = node.op.gradient(gs[0], _NodeView(node))
            else:  # multi-output ops take every output's gradient; the view is the first output
                full = [g if g is not None else Tensor(np.zeros(o[2], o[3])) for g, o in zip(gs, node.outputs)]
                in_grads = node.op.gradient(full, _NodeView(node, 0))
            for edge, g in zip(node.parents, in_grads):
                if g is not None and edge is not None:
                    add(edge[0], edge[1], g)


def _accumulate_leaf(node: _Node, g: Tensor) -> None:
    leaf = node.leaf()
    if leaf is None or not leaf.requires_grad:
        return  # the leaf is gone: no one can read its gradient
    if leaf.grad is None:
        leaf.grad = g
    elif not grad_enabled() and leaf.grad._node is None and getattr(leaf, "_grad_owned", False):
        leaf.grad.apply_("add", g)  # add-to: a later backward sums into the same buffer
    else:
        leaf.grad = call("add", leaf.grad, g)
        leaf._grad_owned = not grad_enabled()
