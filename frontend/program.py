"""``ImportedModel``: a ``kiln.nn.Module`` that runs an imported graph.

A frontend turns a model file or program into a list of ``Step`` s (a
converter bound to its node's attributes, the names of its inputs and
outputs) over named values: the model's inputs, its weights (``Parameter``
s named after the source: ONNX initializer names, PyTorch ``state_dict``
names), static constants and the steps' outputs. ``forward`` walks the
steps in order, each on its own kernel-pool site (so each layer keeps its
own concrete kernels, as a hand-written model's layers do), and drops every
value after its last use, so a deep network holds only what is still to be
read. Everything downstream takes it as any kiln model: ``kiln.export``,
``Predictor``, ``kiln.compile``, ``kiln tune --model``.
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import numpy as np

from ..errors import FrontendError, KilnError
from ..nn.modules import Module, Parameter
from ..runtime import pool as _pool
from .values import ANCHOR, is_kiln, kiln_dtype, shape_of


class Step:
    """One node of the imported graph: ``fn(*values) -> value or list``."""

    __slots__ = ("fn", "inputs", "outputs", "name", "kind", "frees", "__weakref__")

    def __init__(self, fn: Callable, inputs: Sequence[str], outputs: Sequence[str], name: str, kind: str):
        self.fn, self.inputs, self.outputs, self.name, self.kind = fn, tuple(inputs), tuple(outputs), name, kind
        self.frees: tuple = ()

    def __repr__(self) -> str:
        return f"Step({self.kind} {self.name!r}: {', '.join(self.inputs)} -> {', '.join(self.outputs)})"


class InputSpec:
    """A model input: its name, dtype and shape.

    Parameters
    ----------
    name : str
        The name the model takes it by (an identifier).
    dtype : str
        One of ``kiln.te.DTYPES``.
    shape : sequence of int or None
        None for a symbolic dim (any size).
    source : str, optional
        Its name in the source graph, where that is not an identifier.
    """

    def __init__(self, name: str, dtype: str, shape: Sequence, source: str | None = None):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.source = name if source is None else source  # the name in the source graph

    def __repr__(self) -> str:
        dims = "x".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


class ImportedModel(Module):
    """A model imported by ``kiln.frontend`` (``from_onnx``, ``from_torch``).

    Call it with the source model's inputs, positionally or by name; it
    returns one tensor, or a dict of named outputs when the source has
    several. Its parameters are the source's weights under their source
    names (``state_dict()`` keys), trainable like any kiln model's.

    Attributes
    ----------
    inputs : list of InputSpec
        The inputs the model takes, in order.
    output_names : list of str
        The outputs' names in the source (the keys of a dict result).
    source : str
        ``"onnx"`` or ``"torch"``.
    qdq : list of (node name, op type, "int8" or "float", why)
        An ONNX QDQ model's quantized products: fused into kiln's int8
        kernels, or left on the dequantized float path and why
        (``frontend/onnx_qdq.py``); empty for other models.
    """

    _unprefixed = ("params", "buffers")

    def __init__(self, steps, inputs, output_names, params, buffers, constants, source: str):
        self.params = dict(params)       # name -> Parameter
        self.buffers = dict(buffers)     # name -> Tensor (saved, not trained)
        self._constants = dict(constants)  # name -> static numpy value
        self._steps = list(steps)
        self.inputs = list(inputs)
        self.output_names = list(output_names)
        self.source = source
        self.qdq: list = []  # an ONNX QDQ model's products: (node, op type, "int8" or "float", why)
        self._plan_frees()
        self.forward = self._make_forward()

    def _plan_frees(self) -> None:
        last = {}
        for k, step in enumerate(self._steps):
            for name in step.inputs:
                last[name] = k
        keep = set(self.output_names)
        for k, step in enumerate(self._steps):
            step.frees = tuple(n for n in dict.fromkeys(step.inputs) if last.get(n) == k and n not in keep
                               and n not in self.params and n not in self.buffers and n not in self._constants)

    def _make_forward(self):
        params = [inspect.Parameter(spec.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for spec in self.inputs]

        def forward(*args, **kwargs):
            return self._run(args, kwargs)

        forward.__signature__ = inspect.Signature(params)
        forward.__doc__ = "Run the imported graph: " + ", ".join(map(repr, self.inputs))
        return forward

    def __call__(self, *args, **kwargs):
        outer = _pool.active_site()
        pool = self.kernel_pool if outer is None else outer.pool
        with _pool.activate(pool.site(self)):
            return self.forward(*args, **kwargs)

    def __getstate__(self):  # the bound forward is rebuilt, not copied
        state = dict(self.__dict__)
        state.pop("forward", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.forward = self._make_forward()

    def _bind(self, args, kwargs) -> dict:
        names = [spec.name for spec in self.inputs]
        if len(args) > len(names):
            raise FrontendError(f"got {len(args)} inputs, the model takes {len(names)}: {', '.join(names)}",
                                where="ImportedModel", arg="inputs")
        given = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise FrontendError(f"got an input named {key!r}; the model's inputs: {', '.join(names)}",
                                    where="ImportedModel", arg=key)
            if key in given:
                raise FrontendError("given twice (by position and by name)", where="ImportedModel", arg=key)
            given[key] = value
        missing = [n for n in names if n not in given]
        if missing:
            raise FrontendError(f"missing input(s) {', '.join(missing)}; the model takes {', '.join(names)}",
                                where="ImportedModel", arg=missing[0])
        env = {}
        for spec in self.inputs:
            env[spec.source] = self._check_input(spec, given[spec.name])
        return env

    def _check_input(self, spec: InputSpec, value):
        if not is_kiln(value):
            from ..nn.tensor import Tensor
            array = np.asarray(value)
            if array.dtype == np.float64 and spec.dtype == "float32":
                array = array.astype(np.float32)
            value = Tensor(array)
        dtype, shape = kiln_dtype(value), shape_of(value)
        if dtype != spec.dtype:
            raise FrontendError(f"got {dtype}, expected {spec.dtype}", where="ImportedModel", arg=spec.name)
        if len(shape) != len(spec.shape) or any(
                want is not None and isinstance(got, int) and got != want for got, want in zip(shape, spec.shape)):
            want = "x".join("?" if d is None else str(d) for d in spec.shape)
            raise FrontendError(f"got shape {tuple(shape)}, expected [{want}] (? = any size)",
                                where="ImportedModel", arg=spec.name)
        return value

    def _run(self, args, kwargs):
        env = self._bind(args, kwargs)
        env.update(self.params)
        env.update(self.buffers)
        env.update(self._constants)
        site = _pool.active_site()
        pool = site.pool if site is not None else self.kernel_pool
        from ..nn.tensor import Tensor
        traced = next((v for v in env.values() if is_kiln(v) and not isinstance(v, Tensor)), None)
        token = ANCHOR.set(traced)
        try:
            return self._walk(env, pool)
        finally:
            ANCHOR.reset(token)

    def _walk(self, env, pool):
        for step in self._steps:
            values = [env[name] if name else None for name in step.inputs]
            with pool.activate(step):
                try:
                    out = step.fn(*values)
                except KilnError as e:
                    if isinstance(e, FrontendError) and " node " in (e.where or ""):
                        raise
                    raise FrontendError(f"{e}", where=f"{step.kind} node {step.name!r}") from e
            if len(step.outputs) == 1:
                env[step.outputs[0]] = out
            else:
                for name, value in zip(step.outputs, out):
                    if name:
                        env[name] = value
            for name in step.frees:
                env.pop(name, None)
        outs = [self._result(name, env[name]) for name in self.output_names]
        return outs[0] if len(outs) == 1 else dict(zip(self.output_names, outs))

    def _result(self, name, value):
        if is_kiln(value):
            return value
        from ..nn.tensor import Tensor
        array = np.asarray(value)
        if array.dtype == object:
            raise FrontendError(f"output {name!r} is a shape with a symbolic dim", where="ImportedModel")
        return Tensor(array)

    def summary(self) -> str:
        """The model's inputs, outputs, op counts and weights, one per line."""
        counts: dict = {}
        for step in self._steps:
            counts[step.kind] = counts.get(step.kind, 0) + 1
        size = sum(int(np.prod(p.shape)) for p in self.params.values())
        lines = [f"imported from {self.source}: {len(self._steps)} nodes, {len(self.params)} weights "
                 f"({size:,} values)",
                 "inputs: " + ", ".join(map(repr, self.inputs)),
                 "outputs: " + ", ".join(self.output_names),
                 "ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))]
        if self.qdq:
            floats = [r for r in self.qdq if r[2] == "float"]
            lines.append(f"quantized (QDQ): {len(self.qdq) - len(floats)} ops run int8 kernels, {len(floats)} the "
                         "dequantized float path" + "".join(f"\n  {name} ({op}): {why}" for name, op, _, why in floats))
        return "\n".join(lines)


def parameter(array, trained: bool = True):
    """A weight as a ``Parameter`` (float32 unless the source says float64),
    or as a buffer (a plain Tensor) when not ``trained``."""
    from ..nn.tensor import Tensor
    array = np.asarray(array)
    if array.dtype.kind == "f" and array.dtype != np.float64:
        array = array.astype(np.float32)
    array = np.ascontiguousarray(array)
    return Parameter(array, requires_grad=array.dtype.kind == "f") if trained else Tensor(array)
