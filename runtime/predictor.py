"""``Predictor``: run a model written by ``kiln.export`` — needs only TVM."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from .. import config
from ..errors import DTypeError, ExportError, ShapeError, tvm_message
from .elf import elf_problem

FORMAT = "kiln-model-1"


class Predictor:
    """Load an exported model and run it on numpy batches.

    Load only files you trust: an exported model is a shared library, and
    loading it runs its native code (a library's constructors run as it is
    loaded, before kiln can check that it is a kiln model at all). A file from
    someone else can do anything your user can.

    Raises ``ExportError`` for a missing, truncated or foreign file,
    ``ShapeError``/``DTypeError`` for inputs the model was not built for, and
    ``ConfigError`` for an invalid ``KILN_NUM_THREADS`` (``kiln.config``).
    """

    def __init__(self, path):
        config.check()  # the model runs on TVM's thread pool, which that sizes
        self.path = Path(path)
        if not self.path.is_file():
            raise ExportError(f"no file at {self.path}", op="Predictor", arg="path")
        problem = elf_problem(self.path)
        if problem:
            raise ExportError(f"{self.path} is not a loadable module: {problem}", op="Predictor", arg="path")
        try:
            lib = tvm.runtime.load_module(str(self.path))
        except Exception as exc:  # noqa: BLE001 - dlopen errors come back as TVM errors
            raise ExportError(f"{self.path} is not a loadable module (truncated or foreign?): "
                              f"{tvm_message(exc, 200)}", op="Predictor", arg="path") from exc
        try:
            self.vm = relax.VirtualMachine(lib, tvm.cpu())
            self.meta = json.loads(bytes(self.vm["kiln_metadata"]().numpy()).decode())
        except Exception as exc:  # noqa: BLE001 - any module without kiln's metadata is foreign
            raise ExportError(f"{self.path} is not a kiln model", op="Predictor", arg="path") from exc
        if self.meta.get("format") != FORMAT:
            raise ExportError(f"{self.path} has format {self.meta.get('format')!r}, expected {FORMAT!r}",
                              op="Predictor", arg="path")
        self.input_shape = tuple(self.meta["input_shape"])
        self.input_dtype = self.meta["input_dtype"]

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x)
        if str(x.dtype) != self.input_dtype:
            raise DTypeError(f"got {x.dtype}, expected {self.input_dtype}: the model was exported for "
                             f"{self.input_dtype} (convert with x.astype({self.input_dtype!r}))", op="Predictor",
                             arg="x")
        want = self.input_shape
        if x.ndim != len(want) or any(w is not None and w != g for w, g in zip(want, x.shape)) or x.shape[0] < 1:
            shown = "(" + ", ".join("N" if w is None else str(w) for w in want) + ")"
            raise ShapeError(f"got {x.shape}, expected {shown} with N >= 1", op="Predictor", arg="x")
        out = self.vm["main"](tvm.runtime.tensor(np.ascontiguousarray(x), tvm.cpu()))
        return out.numpy()
