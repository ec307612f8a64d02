"""Trace a model's forward into a ``Graph``: the model runs once on symbolic
values whose every op is recorded instead of computed (needs nothing from nn:
any callable made of kiln ops traces).

The example gives the forward's arguments: one array (the one input, named
``x``), a tuple or list of arrays (positional arguments, named after the
forward's parameters), or a dict of arrays (keyword arguments by name). The
forward returns one tensor, a tuple or list of them, or a dict of them
(named outputs).
"""
from __future__ import annotations

import inspect

import numpy as np
from tvm import tirx

from ..errors import DTypeError, ExportError
from ..te.shapes import DTYPES
from ..te.value import ValueOps
from .ir import SEQ, Graph, Value


class _Symbol(ValueOps):
    """A traced value: ops on it become graph nodes."""

    _kiln_priority = 10  # see every op, even when a weight comes first

    def __init__(self, tracer: "_Tracer", value: Value):
        self._tracer, self.value = tracer, value

    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: len(self.value.shape))

    @classmethod
    def _kiln_apply(cls, op, inputs, attrs):
        tracer = next(v._tracer for v in inputs if isinstance(v, _Symbol))
        return tracer.apply(op, inputs, attrs)

    def detach(self):
        return self


def lift(value, like):
    """``value`` (an array or a Tensor) as a constant of the trace ``like``
    (a traced value) belongs to, so that ops on it alone are recorded too:
    an op whose output shape is symbolic cannot run eagerly. ``value`` itself
    when it is already traced, or ``like`` is not."""
    if isinstance(value, _Symbol) or not isinstance(like, _Symbol):
        return value
    return _Symbol(like._tracer, like._tracer.const(value))


class _Tracer:
    def __init__(self):
        self.graph = Graph()
        self._consts: dict[int, tuple] = {}  # id(source) -> (source, Value): one constant per weight

    def const(self, source) -> Value:
        found = self._consts.get(id(source))
        if found is None:
            value = self.graph.const(source.numpy() if hasattr(source, "numpy") else np.asarray(source))
            found = self._consts[id(source)] = (source, value)  # the source is kept so its id stays unique
        return found[1]

    def apply(self, op, inputs, attrs):
        values = [v.value if isinstance(v, _Symbol) else self.const(v) for v in inputs]
        outs = [_Symbol(self, v) for v in self.graph.apply(op, values, attrs)]
        return outs if op.multi_output else outs[0]


def trace(model, example, dynamic_batch: bool = True, *, dynamic_seq: bool = False,
          where: str = "kiln.graph.trace") -> Graph:
    """The graph of ``model``'s forward on inputs like ``example``.

    Parameters
    ----------
    model : callable made of kiln ops (a ``kiln.nn.Module``)
    example : array-like, tuple/list of them, or dict of them by name
        One input (named after the forward's one parameter, else ``x``); the forward's positional arguments (named
        after its parameters where its signature says, else ``in0``,
        ``in1``...); or its keyword arguments (the dict's keys, identifiers),
        in the order of the forward's parameters (keys only a ``**kwargs``
        takes after them). Each is an array of at least one dim and of one
        of ``kiln.te.DTYPES``.
    dynamic_batch : bool
        Every input's first dim becomes the one symbolic batch, so the inputs
        must agree on it.
    dynamic_seq : bool
        Every input's second dim becomes the one symbolic sequence length
        (``seq``): tokens (N, L) or features (N, L, E) of any length. The
        inputs must agree on it, and the forward must not need it as a
        number (an unrolled recurrence does: ``ExportError``).
    where : str
        The function named in errors (``kiln.export`` passes its own name).

    Notes
    -----
    The graph's inputs carry the names, its outputs the forward's structure:
    one unnamed output for a tensor, one per item of a tuple or list,
    ``output_names`` from a dict's keys.
    """
    names, arrays, call = _arguments(model, example, where)
    batch = None
    if dynamic_batch:
        firsts = {name: a.shape[0] for name, a in zip(names, arrays)}
        if len(set(firsts.values())) > 1:
            shown = ", ".join(f"{n} {d}" for n, d in firsts.items())
            raise ExportError(f"the inputs' first dims differ ({shown}), expected one batch size: with "
                              "dynamic_batch the first dim of every input is the batch", where=where, arg="example")
        batch = tirx.Var("batch", "int64")
    seq = _sequence(names, arrays, where) if dynamic_seq else None
    tracer = _Tracer()
    inputs = [tracer.graph.input(name, _symbolic(a.shape, batch, seq), str(a.dtype)) for name, a in zip(names, arrays)]
    out = call([_Symbol(tracer, v) for v in inputs])
    for name, value in _results(out, where):
        tracer.graph.output(value, name)
    return tracer.graph


def _sequence(names: list, arrays: list, where: str):
    """The symbolic sequence length of inputs that all have a second dim of one length."""
    seconds = {name: a.shape[1] if a.ndim > 1 else None for name, a in zip(names, arrays)}
    if None in seconds.values() or len(set(seconds.values())) > 1:
        shown = ", ".join(f"{n} {'none' if d is None else d}" for n, d in seconds.items())
        raise ExportError(f"the inputs' second dims are {shown}, expected one sequence length: with dynamic_seq "
                          "the second dim of every input is the sequence", where=where, arg="example")
    return tirx.Var(SEQ, "int64")


def _symbolic(shape: tuple, batch, seq) -> tuple:
    """``shape`` with its first dim ``batch`` and its second ``seq`` where those are set."""
    dims = list(shape)
    if batch is not None:
        dims[0] = batch
    if seq is not None:
        dims[1] = seq
    return tuple(dims)


def _arguments(model, example, where: str) -> tuple[list[str], list[np.ndarray], object]:
    """``(input names, example arrays, call)``: ``call(values)`` runs the
    forward on values given in the names' order."""
    params = _parameters(model)
    positional = None if params is None or any(p.kind is p.VAR_POSITIONAL for p in params) else \
        [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if isinstance(example, dict):
        if not example or not all(isinstance(k, str) and k.isidentifier() for k in example):
            raise ExportError(f"got a dict with keys {list(example)}, expected keyword arguments: one or more "
                              "identifiers", where=where, arg="example")
        known = [] if params is None else [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = [k for k in example if k not in known]
        if params is not None and unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise ExportError(f"got {', '.join(unknown)}, which the forward does not take; its parameters: "
                              f"{', '.join(known) or 'none'}", where=where, arg="example")
        names = [k for k in known if k in example] + unknown
        by_position = positional is not None and names == positional[:len(names)]  # Module.__call__: no keywords

        def call(values):
            return model(*values) if by_position else model(**dict(zip(names, values)))
        return names, [_array(example[n], n, where) for n in names], call
    items = list(example) if isinstance(example, (tuple, list)) else [example]
    if not items:
        raise ExportError("got no inputs, expected an array, a tuple of arrays or a dict of them", where=where,
                          arg="example")
    if len(items) == 1:  # the forward's one parameter names it where it is an identifier of its own
        names = positional[:1] if positional and len(positional) == 1 and positional[0] != "out" else ["x"]
    elif positional is not None and len(positional) >= len(items):
        names = positional[:len(items)]
    else:
        names = [f"in{i}" for i in range(len(items))]
    return names, [_array(a, n, where) for n, a in zip(names, items)], lambda values: model(*values)


def _parameters(model) -> list | None:
    """The forward's parameters (``inspect.Parameter``), None where its signature is unknown."""
    try:
        return list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        return None


def _array(value, name: str, where: str) -> np.ndarray:
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.ndim == 0:
        raise ExportError(f"input {name!r} is 0-d, expected a batch (at least one dim)", where=where,
                          arg="example")
    if str(array.dtype) not in DTYPES:
        raise DTypeError(f"input {name!r} is {array.dtype}, expected one of {', '.join(DTYPES)}", where=where,
                         arg="example")
    return array


def _results(out, where: str) -> list[tuple[str | None, Value]]:
    """The forward's result as ``[(name or None, value)]``."""
    if isinstance(out, _Symbol):
        return [(None, out.value)]
    if isinstance(out, dict):
        items = list(out.items())
        if not items or not all(isinstance(k, str) and k for k, _ in items):
            items = None
    elif isinstance(out, (tuple, list)) and out:
        items = [(None, v) for v in out]
    else:
        items = None
    if items is None or not all(isinstance(v, _Symbol) for _, v in items):
        raise ExportError("the model's forward must return a tensor computed from its inputs, a tuple or list of "
                          "them, or a dict of them by name", where=where, arg="model")
    return [(k, v.value) for k, v in items]
