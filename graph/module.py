"""A Relax module of scheduled kernels compiled for the CPU: what an export
writes as one library (``graph.export``) and what a compiled training step
runs (``graph.step``)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import tvm
from tvm import relax
from tvm.relax import _ffi_api as relax_api
from tvm.relax import vm_build
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

from .. import config as kiln_config
from ..errors import ExportError, KilnError, tvm_message

#: kernels a compile job gets at least: a module of fewer kernels than twice this compiles as one
MIN_KERNELS_PER_JOB = 8


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
    executable); TVM's failure is an ``ExportError`` naming ``where``.

    This is ``tvm.compile`` (``relax.build``: the Relax pipeline, the VM's
    bytecode, the kernels' code, linked) except that the kernels are split
    into one module per thread (``kiln.config.num_threads``), each compiled
    by LLVM on its own thread (TVM's compile releases the GIL) and imported
    by the first: LLVM's optimization of one module is serial, and a
    ResNet's training step holds a hundred kernels."""
    with target.tvm:
        pipeline = tvm.transform.Sequential(
            cpu_pipeline.dataflow_lower_passes(target.tvm)
            + cpu_pipeline.finalize_passes(target.tvm) + [_mark_noalias])
    try:
        with target.tvm:
            mod = pipeline(mod)
        attrs = dict(mod.attrs) if mod.attrs else {}
        builder = relax.ExecBuilder()
        mod = vm_build._vmcodegen(builder, mod, "bytecode")
        kernels = vm_build._filter_tir(mod)
        lib = _compile_kernels(kernels, target.tvm) if kernels is not None else None
        executable = vm_build.VMExecutable(relax_api.VMLink(
            builder, target.tvm, lib, list(attrs.get("external_mods", [])),
            dict(attrs.get("const_name_to_constant", {}))))
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's compile errors are C++ tracebacks
        raise ExportError(f"TVM could not compile the model: {tvm_message(exc, 300)}", where=where,
                          arg="model") from exc
    return executable


def _compile_kernels(kernels: tvm.IRModule, target):
    """The kernels' code: one LLVM module, importing the others where they were split into several."""
    funcs = list(kernels.functions_items())
    jobs = min(kiln_config.num_threads(), len(funcs) // MIN_KERNELS_PER_JOB)
    if jobs <= 1:
        return tvm.tirx.build(kernels, target=target)
    funcs.sort(key=lambda item: item[0].name_hint)  # dealt round-robin: each job gets kernels of every kind

    def build(k: int):
        return tvm.tirx.build(tvm.IRModule(dict(funcs[k::jobs]), attrs=kernels.attrs), target=target)

    with ThreadPoolExecutor(jobs) as pool:
        first, *others = pool.map(build, range(jobs))
    for lib in others:
        first.import_module(lib)
    return first
