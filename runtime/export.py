"""Export a model's forward as one compiled module, and load it back.

``export(model, example, path)`` traces the model's forward (in eval mode)
through the same op declarations: every registered op it calls becomes a
PrimFunc in a Relax module (``BlockBuilder.emit_te`` of the op's ``compute``),
scheduled with kiln's template for that op, and the module is compiled with
``tvm.compile`` and written as one shared library with ``export_library``.

The file holds everything: the kernels, the weights (as constants of the
Relax program), and a ``kiln_metadata`` function returning UTF-8 JSON bytes
with the format name, the input shape (``null`` for a dynamic batch dim), the
input dtype and the kiln and TVM versions.
``Predictor`` needs only TVM to run it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

from ..errors import ExportError, KilnError, tvm_message
from ..outputs import atomic_path, check_output_path
from ..te.value import ValueOps
from ..te.workload import Workload
from ..version import __version__
from .device import as_target
from .lower import schedule

FORMAT = "kiln-model-1"


class _Traced(ValueOps):
    """A symbolic value while tracing: a Relax var with its shape and dtype."""

    _kiln_priority = 10  # see every op, even when a weight comes first

    def __init__(self, tracer, var, shape, dtype):
        self._tracer, self.var, self.shape, self.dtype = tracer, var, tuple(shape), str(dtype)

    ndim = property(lambda self: len(self.shape))

    @classmethod
    def _kiln_apply(cls, op, inputs, attrs):
        tracer = next(v._tracer for v in inputs if isinstance(v, _Traced))
        return tracer.apply(op, inputs, attrs)

    def detach(self):
        return self


class _Tracer:
    def __init__(self, builder: relax.BlockBuilder):
        self.bb = builder
        self.kernels: dict[str, Workload] = {}  # PrimFunc name -> the workload it computes

    def apply(self, op, inputs, attrs):
        if op.data_dependent:
            raise ExportError(f"op '{op.name}' has a data-dependent output length, which an exported module "
                              "cannot size ahead of time", op=op.name, arg="model")
        args, shapes, dtypes = [], [], []
        for v in inputs:
            if isinstance(v, _Traced):
                args.append(v.var)
                shapes.append(v.shape)
                dtypes.append(v.dtype)
            else:  # a weight or a constant: baked into the program
                arr = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                args.append(relax.const(arr))
                shapes.append(arr.shape)
                dtypes.append(str(arr.dtype))
        workload = op.check(shapes, dtypes, attrs)
        name = f"{op.name}_{len(self.kernels)}"
        self.kernels[name] = workload
        out = self.bb.emit_te(lambda *ts: op.compute(*ts, **workload.attrs), *args, primfunc_name_hint=name)
        if not op.multi_output:
            return _Traced(self, out, workload.out_shapes[0], workload.out_dtypes[0])
        return [_Traced(self, self.bb.emit(relax.TupleGetItem(out, i)), s, d)
                for i, (s, d) in enumerate(zip(workload.out_shapes, workload.out_dtypes))]


def trace(model, example: np.ndarray, dynamic_batch: bool = True, meta: dict | None = None):
    """The model's forward as a Relax module of (unscheduled) kernels, plus a
    ``kiln_metadata`` function returning ``meta`` as UTF-8 JSON bytes."""
    bb = relax.BlockBuilder()
    with bb.function("kiln_metadata", []):
        bb.emit_func_output(relax.const(np.frombuffer(json.dumps(meta or {}).encode(), dtype=np.uint8)))
    tracer = _Tracer(bb)
    shape = list(example.shape)
    if dynamic_batch:
        shape[0] = tirx.Var("batch", "int64")
    x = relax.Var("x", relax.TensorType(shape, str(example.dtype)))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = model(_Traced(tracer, x, shape, example.dtype))
            if not isinstance(out, _Traced):
                raise ExportError("the model's forward must return one tensor computed from its input",
                                  op="export", arg="model")
            result = bb.emit_output(out.var)
        bb.emit_func_output(result)
    return bb.get(), tracer.kernels


def export(model, example, path, dynamic_batch: bool = True, target=None) -> Path:
    """Compile ``model``'s eval-mode forward into one shared library at ``path``.

    Parameters
    ----------
    model : kiln.nn.Module (or any callable made of kiln ops)
    example : array-like
        An input of the right shape and dtype; with ``dynamic_batch`` its first
        dim becomes symbolic, so the module serves any batch size.
    path : str or Path
        Written atomically (temporary file, then rename); checked before
        compiling (``OutputError`` for a directory or an unwritable folder).

    A model written in Python is exported the same way, after loading its
    trained weights: ``model.load_state_dict(state)`` (``state`` from
    ``model.state_dict()`` or ``kiln.nn.checkpoint.read_checkpoint``), then
    ``export(model, example, path)``.
    """
    path = check_output_path(path, "path")
    example = np.asarray(example.numpy() if hasattr(example, "numpy") else example)
    if example.ndim == 0:
        raise ExportError("got a 0-d example, expected a batch", op="export", arg="example")
    target = as_target(target)
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    meta = {"format": FORMAT, "input_shape": [None if dynamic_batch and i == 0 else int(d)
                                              for i, d in enumerate(example.shape)],
            "input_dtype": str(example.dtype), "kiln": __version__, "tvm": tvm.__version__}
    try:
        mod, kernels = trace(model, example, dynamic_batch, meta)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    for gv, func in list(mod.functions_items()):
        if isinstance(func, tirx.PrimFunc) and gv.name_hint in kernels:
            workload = kernels[gv.name_hint]
            lowered = schedule(workload, func, workload.op.name, target)
            mod[gv] = lowered.sch.mod["main"].with_attr("global_symbol", gv.name_hint)
    with target.tvm:
        pipeline = tvm.transform.Sequential(
            cpu_pipeline.dataflow_lower_passes(target.tvm)
            + cpu_pipeline.finalize_passes(target.tvm))
    try:
        executable = tvm.compile(mod, target=target.tvm, relax_pipeline=pipeline)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's compile errors are C++ tracebacks
        raise ExportError(f"TVM could not compile the model: {tvm_message(exc, 300)}", op="export",
                          arg="model") from exc
    return _write(executable, path)


def _write(executable, path: Path) -> Path:
    with atomic_path(path, suffix=".so") as tmp:  # an OSError becomes an OutputError naming the path
        executable.export_library(tmp)
    return path
