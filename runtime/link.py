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

from tvm.support import cc

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
