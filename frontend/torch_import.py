"""``from_torch``: a PyTorch module as a kiln model, through ``torch.export``.

The module is captured by ``torch.export.export`` (in eval mode: dropout
off, BatchNorm on its running statistics) and decomposed to core ATen
(``run_decompositions``); every op of the program is checked against the
converter table (``aten_ops``, ``aten_nn``) before anything runs, the
unsupported ones listed at once. Parameters keep their ``state_dict``
names, buffers become kiln buffers, and sizes that ``torch.export`` kept
symbolic (the batch by default) are computed as the model runs.
"""
from __future__ import annotations

import functools

import numpy as np

from ..errors import FrontendError
from .aten_nn import addmm_of_transposed
from .aten_ops import ATEN
from .program import ImportedModel, InputSpec, Step, parameter
from .values import tensor_or_static

_WHERE = "kiln.frontend.from_torch"
_DROPPED_KWARGS = ("device", "layout", "pin_memory", "memory_format", "non_blocking")


def supported_aten_ops() -> list[str]:
    """The core ATen ops kiln imports.

    Returns
    -------
    list of str
        Overload names such as ``aten.convolution.default``, sorted
        (``kiln ops --aten``); Python arithmetic on sizes is imported too.
    """
    return sorted(name for name in ATEN if name.startswith("aten."))


def _torch():
    try:
        import torch
    except ImportError:
        raise FrontendError("from_torch needs PyTorch: pip install torch", where=_WHERE) from None
    return torch


def _numpy(tensor) -> np.ndarray:
    torch = _torch()
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


def _dtype(torch_dtype, what: str) -> str:
    torch = _torch()
    names = {torch.float32: "float32", torch.float64: "float64", torch.int32: "int32", torch.int64: "int64",
             torch.bool: "bool"}
    if torch_dtype not in names:
        raise FrontendError(f"{what} is {torch_dtype}; kiln computes in float32, float64, int32, int64 and bool",
                            where=_WHERE)
    return names[torch_dtype]


def _export(module, args, dynamic_shapes):
    torch = _torch()
    was_training = module.training
    module.eval()
    try:
        if dynamic_shapes is None:  # the batch dim of every tensor input, where torch.export accepts it
            batch = torch.export.Dim("batch")
            guess = tuple({0: batch} if isinstance(a, torch.Tensor) and a.ndim else None for a in args)
            # torch.export specializes a dim of size 1: a batch of one is captured as two of it
            wide = tuple(torch.cat([a, a]) if isinstance(a, torch.Tensor) and a.ndim and a.shape[0] == 1 else a
                         for a in args)
            try:
                program = torch.export.export(module, wide, dynamic_shapes=guess)
            except Exception:
                program = torch.export.export(module, args)
        else:
            program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        return program.run_decompositions()
    except FrontendError:
        raise
    except Exception as e:
        raise FrontendError(f"torch.export could not capture the module: {type(e).__name__}: {str(e)[:400]}",
                            where=_WHERE, arg="module") from None
    finally:
        module.train(was_training)


def _transposed_weights(graph, trained: set) -> set:
    """The ``t(W)`` nodes of a trained weight (``trained``: the placeholders
    of parameters) that only ``addmm`` reads as its matrix (PyTorch's
    ``linear``): each addmm reads the weight itself."""
    joined = set()
    for node in graph.nodes:
        source = node.args[0] if node.op == "call_function" and node.args else None
        if str(node.target) != "aten.t.default" or getattr(source, "op", None) != "placeholder" \
                or source.name not in trained:
            continue
        if node.users and all(str(u.target) == "aten.addmm.default" and len(u.args) > 2 and u.args[2] is node
                              and u.args[1] is not node for u in node.users):
            joined.add(node)
    return joined


def _check_ops(graph) -> None:
    unknown: dict = {}
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) not in ATEN:
            unknown.setdefault(str(node.target), []).append(node.name)
    if unknown:
        parts = [f"{op} x{len(names)} (first: {names[0]!r})" for op, names in sorted(unknown.items())]
        raise FrontendError(f"{len(unknown)} unsupported op(s): {'; '.join(parts)}. `kiln ops --aten` lists the "
                            "supported ones", where=_WHERE, arg="module")


class _Template:
    """A node's arguments with its graph inputs taken out: ``fill(values)``
    puts the values back; torch dtypes become kiln's."""

    def __init__(self, args, kwargs, env_name):
        self.inputs: list[str] = []
        self.args = self._strip(args, env_name)
        self.kwargs = {k: self._strip(v, env_name) for k, v in kwargs.items() if k not in _DROPPED_KWARGS}

    def _strip(self, value, env_name):
        torch = _torch()
        if isinstance(value, torch.fx.Node):
            self.inputs.append(env_name(value))
            return _Slot(len(self.inputs) - 1)
        if isinstance(value, (list, tuple)):
            return type(value)(self._strip(v, env_name) for v in value)
        if isinstance(value, torch.dtype):
            return _dtype(value, "a dtype argument")
        return value

    def fill(self, values):
        def put(v):
            if isinstance(v, _Slot):
                return values[v.index]
            if isinstance(v, (list, tuple)):
                return type(v)(put(x) for x in v)
            return v
        return put(self.args), {k: put(v) for k, v in self.kwargs.items()}


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


def _call(converter, template, *values):
    args, kwargs = template.fill(values)
    return converter(*args, **kwargs)


def _output_names(program, count: int) -> list[str]:
    spec = program.call_spec.out_spec
    keys = None
    try:
        if spec is not None and spec.context is not None and len(spec.children_specs) == count:
            keys = [str(k) for k in (spec.context if isinstance(spec.context, (list, tuple)) else
                                     spec.context[1] if isinstance(spec.context, tuple) else [])]
    except (AttributeError, TypeError, IndexError):
        keys = None
    if keys and len(keys) == count and all(k.isidentifier() for k in keys):
        return keys
    return ["out"] if count == 1 else [f"out{i}" for i in range(count)]


def from_torch(module, example_args, dynamic_shapes=None) -> ImportedModel:
    """A PyTorch module as a ``kiln.nn.Module``, through ``torch.export``.

    Parameters
    ----------
    module : torch.nn.Module
        Captured in eval mode (its mode is restored afterwards).
    example_args : tensor or tuple of tensors
        The forward's positional arguments, as ``torch.export`` takes them.
    dynamic_shapes : optional
        ``torch.export``'s ``dynamic_shapes`` (``torch.export.Dim`` per
        dim). By default the first dim of every input is a dynamic batch
        where ``torch.export`` accepts it, else the shapes are static.

    Returns
    -------
    ImportedModel
        Its parameters and buffers carry the module's ``state_dict`` names.

    Raises
    ------
    FrontendError
        Not a module, a capture ``torch.export`` refuses, every unsupported
        ATen op at once, an unsupported dtype.
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise FrontendError(f"got {type(module).__name__}, expected a torch.nn.Module", where=_WHERE, arg="module")
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    program = _export(module, args, dynamic_shapes)
    graph = program.graph
    _check_ops(graph)
    from torch.export.graph_signature import InputKind
    kinds = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    params, buffers, constants, inputs, names = {}, {}, {}, [], {}
    state = program.state_dict
    for node in graph.nodes:
        if node.op != "placeholder":
            continue
        spec = kinds[node.name]
        if spec.kind == InputKind.PARAMETER:
            names[node.name] = spec.target
            params[spec.target] = parameter(_numpy(state[spec.target]))
        elif spec.kind == InputKind.BUFFER:
            names[node.name] = spec.target
            value = state[spec.target] if spec.target in state else program.constants[spec.target]
            buffers[spec.target] = parameter(_numpy(value), trained=False)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            names[node.name] = f"const:{spec.target}"
            constants[names[node.name]] = tensor_or_static(_numpy(program.constants[spec.target]))
        elif spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise FrontendError(f"input {node.name!r} is not a tensor", where=_WHERE, arg="example_args")
            shape = [d if isinstance(d, int) else None for d in val.shape]
            inputs.append(InputSpec(node.name, _dtype(val.dtype, f"input {node.name!r}"), shape))
            names[node.name] = node.name
        else:
            raise FrontendError(f"program input {node.name!r} of kind {spec.kind} is not supported", where=_WHERE)

    def env_name(node):
        return names.get(node.name, node.name)

    steps, outputs = [], []
    joined = _transposed_weights(graph, {n for n, target in names.items() if target in params})
    for node in graph.nodes:
        if node in joined:  # read by its addmm
            continue
        if node.op == "call_function":
            args, converter, kind = node.args, ATEN[str(node.target)], str(node.target).removeprefix("aten.")
            if kind == "addmm.default" and args[2] in joined:
                args, converter = (*args[:2], args[2].args[0], *args[3:]), addmm_of_transposed
            template = _Template(args, node.kwargs, env_name)
            steps.append(Step(functools.partial(_call, converter, template), template.inputs, [node.name],
                              node.name, kind))
        elif node.op == "output":
            outputs = [env_name(n) for n in node.args[0]]
        elif node.op != "placeholder":
            raise FrontendError(f"graph node {node.name!r} ({node.op}) is not supported", where=_WHERE)
    out_names = _output_names(program, len(outputs))
    for name, source in zip(out_names, outputs):
        if name != source:
            steps.append(Step(lambda v: v, [source], [name], name, "output"))
    return ImportedModel(steps, inputs, out_names, params, buffers, constants, "torch")
