"""A Relax module of scheduled kernels compiled for the CPU: what an export
writes as one library (``graph.export``) and what a compiled training step
runs (``graph.step``)."""
from __future__ import annotations

import tvm
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

from ..errors import ExportError, KilnError, tvm_message


@tvm.transform.module_pass(opt_level=0, name="kiln.MarkNoAlias")
def _mark_noalias(mod, _ctx):
    """Mark the VM's shape function ``tirx.noalias`` like the kernels: TVM
    gives a module's kernels their ``noalias``, 64-byte-aligned inner function
    only when every PrimFunc in it has the attribute, and without it LLVM
    cannot keep a register tile's accumulators in registers (the exported
    dense and conv kernels ran 2-3x slower than the same kernels built alone).
    The shape function writes one buffer, so the promise holds."""
    for gv, func in list(mod.functions_items()):
        if isinstance(func, tvm.tirx.PrimFunc) and not func.attrs.get("tirx.noalias", False):
            mod[gv] = func.with_attr("tirx.noalias", True)
    return mod


def compile_module(mod, target, where: str = "kiln.export"):
    """The Relax module of scheduled kernels compiled for ``target`` (an
    executable); TVM's failure is an ``ExportError`` naming ``where``."""
    with target.tvm:
        pipeline = tvm.transform.Sequential(
            cpu_pipeline.dataflow_lower_passes(target.tvm)
            + cpu_pipeline.finalize_passes(target.tvm) + [_mark_noalias])
    try:
        executable = tvm.compile(mod, target=target.tvm, relax_pipeline=pipeline)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's compile errors are C++ tracebacks
        raise ExportError(f"TVM could not compile the model: {tvm_message(exc, 300)}", where=where,
                          arg="model") from exc
    return executable
