"""Trace a model's forward into a ``Graph``: the model runs once on a symbolic
value whose every op is recorded instead of computed (needs nothing from nn:
any callable made of kiln ops traces)."""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ..errors import ExportError
from ..te.value import ValueOps
from .ir import Graph, Value


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


class _Tracer:
    def __init__(self):
        self.graph = Graph()
        self._consts: dict[int, tuple] = {}  # id(source) -> (source, Value): one constant per weight

    def const(self, source) -> Value:
        found = self._consts.get(id(source))
        if found is None:
            data = np.ascontiguousarray(source.numpy() if hasattr(source, "numpy") else np.asarray(source))
            value = Value(data.shape, str(data.dtype), data=data, name=f"c{len(self._consts)}")
            found = self._consts[id(source)] = (source, value)  # the source is kept so its id stays unique
        return found[1]

    def apply(self, op, inputs, attrs):
        if op.data_dependent:
            raise ExportError(f"op '{op.name}' has a data-dependent output length, which an exported module "
                              "cannot size ahead of time", op=op.name, arg="model")
        values = [v.value if isinstance(v, _Symbol) else self.const(v) for v in inputs]
        workload = op.check([v.shape for v in values], [v.dtype for v in values], attrs)
        node = self.graph.add(op, workload.attrs, values, list(zip(workload.out_shapes, workload.out_dtypes)))
        outs = [_Symbol(self, v) for v in node.outputs]
        return outs if op.multi_output else outs[0]


def trace(model, example: np.ndarray, dynamic_batch: bool = True) -> Graph:
    """The graph of ``model(x)`` for inputs like ``example`` (its first dim
    symbolic with ``dynamic_batch``)."""
    tracer = _Tracer()
    shape = tuple(tirx.Var("batch", "int64") if dynamic_batch and i == 0 else int(d)
                  for i, d in enumerate(example.shape))
    x = Value(shape, str(example.dtype), name="x")
    tracer.graph.inputs.append(x)
    out = model(_Symbol(tracer, x))
    if not isinstance(out, _Symbol):
        raise ExportError("the model's forward must return one tensor computed from its input",
                          where="kiln.export", arg="model")
    tracer.graph.outputs.append(out.value)
    return tracer.graph
