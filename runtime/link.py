"""Linking a compiled kernel's object file into a shared library.

TVM links through the C++ compiler driver (``g++ -shared``), which starts
``collect2`` and ``ld`` in turn: about 22 ms a kernel, more than its LLVM
code generation takes for most kernels. A kernel's object needs nothing the
driver adds but libm (its TVM runtime and libc symbols resolve when the
library is loaded into the Python process that runs it, which has them), so
``ld -shared --as-needed -lm`` links it, in about 9 ms. Anything else (a module with imports packed as C source, a
machine without ``ld``, a link that fails) goes through TVM's default.
"""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

from tvm.runtime import _ffi_api
from tvm.support import cc, utils

from .. import config as kiln_config

LD = shutil.which("ld")


def link_shared(output: str, objects, options=None, **kwargs) -> None:
    """``fcompile`` for ``export_library``: ``ld -shared`` on object files,
    else TVM's ``create_shared``."""
    objects = [objects] if isinstance(objects, str) else list(objects)
    if LD and not options and not kwargs and all(str(o).endswith(".o") for o in objects):
        done = subprocess.run([LD, "-shared", "-o", str(output), *map(str, objects), "--as-needed", "-lm"],
                              capture_output=True)
        if done.returncode == 0:
            return
    cc.create_shared(output, objects, options, **kwargs)


link_shared.output_format = "so"


def write_library(exportable, path: str, fcompile=link_shared) -> None:
    """``exportable.export_library(path, fcompile=fcompile)``, with the object
    code of a module of several LLVM modules (``graph.module`` splits a
    model's kernels into one per thread) emitted on as many threads: TVM's
    ``export_library`` emits them one after another, and emitting is most of
    writing a model's library. Anything else goes through ``export_library``."""
    mod = getattr(exportable, "mod", exportable)
    modules = mod._collect_dso_modules()
    if len(modules) < 2 or any(m.kind != "llvm" for m in modules) or not _ffi_api.RuntimeEnabled("llvm") \
            or modules[0].get_function("__tvm_is_system_module")():
        exportable.export_library(path, fcompile=fcompile)
        return
    target = modules[0].get_function("_get_target_string")()
    folder = utils.tempdir()
    files = [folder.relpath(f"lib{i}.o") for i in range(len(modules))]
    with ThreadPoolExecutor(max_workers=min(len(modules), kiln_config.num_threads())) as pool:
        list(pool.map(lambda pair: pair[0].write_to_file(pair[1]), zip(modules, files)))  # TVM releases the GIL
    if mod.imports:
        packed = folder.relpath("devc.o")
        _ffi_api.ModulePackImportsToLLVM(mod, False, target, "").write_to_file(packed)
        files.append(packed)
    fcompile(str(path), files)
