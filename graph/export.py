"""Export a model's forward as one compiled module.

``export(model, example, path)`` traces the model's eval-mode forward into a
``Graph`` (``graph.trace``), optimizes it — affine chains such as eval
BatchNorm folded into the conv/dense weights (``graph.fold``), elementwise
consumers fused into their producers (``graph.fuse``), constant weights
packed into their kernel's layout (``graph.prepack``), a channel-blocked
layout carried from convolution to convolution (``graph.layout``) — and lowers it to a
Relax module of kiln-scheduled kernels (``graph.lower``), compiled with
``tvm.compile`` and written as one shared library with ``export_library``.

The file holds everything: the kernels, the weights (as constants of the
Relax program), and a ``kiln_metadata`` function returning UTF-8 JSON bytes
with the format name, the input shape (``null`` for a dynamic batch dim), the
input dtype and the kiln and TVM versions. ``kiln.runtime.Predictor`` needs
only TVM to run it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline

from ..errors import ExportError, KilnError, tvm_message
from ..outputs import atomic_path, check_output_path
from ..runtime.device import as_target
from ..version import __version__
from .fold import fold_affine
from .fuse import fuse_epilogues
from .layout import block_layouts
from .prepack import prepack_weights
from .lower import build_module
from .trace import trace

FORMAT = "kiln-model-1"
def optimize(graph, target=None):
    """Run the export passes over ``graph`` in order, in place, and return it:
    fold affine chains into weights, fuse elementwise epilogues, pre-pack
    constant weights for ``target`` (default the CPU), carry channel-blocked
    layouts between the packed convolutions."""
    fold_affine(graph)
    fuse_epilogues(graph)
    prepack_weights(graph, as_target(target))
    block_layouts(graph)
    return graph


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
    try:
        graph = trace(model, example, dynamic_batch)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    meta = {"format": FORMAT, "input_shape": [None if dynamic_batch and i == 0 else int(d)
                                              for i, d in enumerate(example.shape)],
            "input_dtype": str(example.dtype), "kiln": __version__, "tvm": tvm.__version__}
    executable = compile_module(build_module(optimize(graph, target), meta, target, dynamic_batch), target)
    with atomic_path(path, suffix=".so") as tmp:  # an OSError becomes an OutputError naming the path
        executable.export_library(tmp)
    return path


def compile_module(mod, target):
    """The Relax module of scheduled kernels compiled for ``target`` (an executable)."""
    with target.tvm:
        pipeline = tvm.transform.Sequential(
            cpu_pipeline.dataflow_lower_passes(target.tvm)
            + cpu_pipeline.finalize_passes(target.tvm) + [_mark_noalias])
    try:
        executable = tvm.compile(mod, target=target.tvm, relax_pipeline=pipeline)
    except KilnError:
        raise
    except Exception as exc:  # noqa: BLE001 - TVM's compile errors are C++ tracebacks
        raise ExportError(f"TVM could not compile the model: {tvm_message(exc, 300)}", op="export",
                          arg="model") from exc
    return executable
