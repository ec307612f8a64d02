"""TVM without PyTorch: ``import tvm`` imports PyTorch when it is installed
(``tvm_ffi`` tries it eagerly, for DLPack exchange with torch tensors), which
adds 2-5 s to every ``import kiln``, ``kiln --help`` included. kiln hands
TVM numpy arrays only, so while TVM itself is being imported an import of
``torch`` from it fails as if PyTorch were absent; before and after, PyTorch
imports as usual (a user's ``import torch``, TVM's own frontends at call
time). A process that imported PyTorch before TVM keeps TVM's torch support.

``install()`` (called by ``import kiln``) adds the import hook, a test of the
module name for every later import (the hook stays: a finder cannot leave
``sys.meta_path`` while the import system walks it).
"""
from __future__ import annotations

import sys


def _tvm_initializing() -> bool:
    """Whether ``tvm`` or ``tvm_ffi`` is being imported right now."""
    for name in ("tvm", "tvm_ffi"):
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
            return True
    return False


class _TorchWhileTvmImports:
    """A meta-path finder refusing ``torch`` while TVM initializes."""

    def find_spec(self, name, path=None, target=None):
        if (name == "torch" or name.startswith("torch.")) and _tvm_initializing():
            raise ImportError("PyTorch is not imported while TVM initializes (kiln.tvm_import)", name=name)
        return None


_finder = _TorchWhileTvmImports()


def install() -> None:
    """Guard TVM's first import (nothing to do once TVM or PyTorch is imported)."""
    if "tvm" in sys.modules or "torch" in sys.modules or _finder in sys.meta_path:
        return
    sys.meta_path.insert(0, _finder)
