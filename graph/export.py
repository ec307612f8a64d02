"""Export a model's forward as one compiled module.

``export(model, example, path)`` traces the model's eval-mode forward into a
``Graph`` (``graph.trace``), optimizes it — affine chains such as eval
BatchNorm folded into the conv/dense weights (``graph.fold``), elementwise
consumers fused into their producers (``graph.fuse``), constant weights
packed into their kernel's layout or transformed for a Winograd convolution
(``graph.implement``: what ``kiln.strategy`` chooses), a channel-blocked
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
from .fuse import fuse_epilogues, fuse_pools, fuse_prologues
from .layout import block_layouts
from .implement import implement
from .lower import build_module, kernel_nodes, node_workload
from .trace import trace

FORMAT = "kiln-model-1"


def optimize(graph, target=None, winograd: bool = True):
    """Run the export passes over ``graph`` in order, in place, and return it:
    fold affine chains into weights, fuse elementwise epilogues, pre-pack
    constant weights for ``target`` (default the CPU; 3x3 stride-1 convs as
    Winograd convolutions unless ``winograd=False``), carry channel-blocked
    layouts between the packed convolutions, fuse a global pool into the
    Winograd convolution it reads and a small direct convolution into the
    Winograd convolution reading it."""
    fold_affine(graph)
    fuse_epilogues(graph)
    implement(graph, as_target(target), winograd)
    block_layouts(graph)
    fuse_pools(graph)
    fuse_prologues(graph)
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


#: the most batch sizes an export compiles entries of their own for
MAX_TUNED_BATCHES = 4


def export(model, example, path, dynamic_batch: bool = True, target=None, batches=None) -> Path:
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
    batches : sequence of int, optional
        With ``dynamic_batch``, batch sizes that get kernels of their own,
        compiled for that batch (a call of another batch size runs the
        symbolic kernels). By default, the batch sizes the tuning records
        hold tuned kernels of this model for (``kiln tune --model``), at most
        ``MAX_TUNED_BATCHES``; ``()`` for none.
    target : a CPU target (default: this machine's); the module runs on the
        CPU, so another is an ``ExportError``.

    Kernels of static shapes use the best tuning record of their workload
    where there is one; ``kiln.runtime.build.untuned()`` exports as if there
    were none.

    A model written in Python is exported the same way, after loading its
    trained weights: ``model.load_state_dict(state)`` (``state`` from
    ``model.state_dict()`` or ``kiln.nn.checkpoint.read_checkpoint``), then
    ``export(model, example, path)``.
    """
    path = check_output_path(path, "path")
    example = np.asarray(example.numpy() if hasattr(example, "numpy") else example)
    if example.ndim == 0:
        raise ExportError("got a 0-d example, expected a batch", where="kiln.export", arg="example")
    target = as_target(target)
    if target.kind != "cpu":
        raise ExportError(f"got target {target.kind}, expected the CPU: an exported module runs on the CPU "
                          "(Predictor); CUDA kernels are built and tuned one op at a time (kiln.build, kiln tune OP "
                          "--target cuda)", where="kiln.export", arg="target")
    batches = None if batches is None else _check_batches(batches)
    graph = inference_graph(model, example, target, dynamic_batch)
    meta = {"format": FORMAT, "input_shape": [None if dynamic_batch and i == 0 else int(d)
                                              for i, d in enumerate(example.shape)],
            "input_dtype": str(example.dtype), "kiln": __version__, "tvm": tvm.__version__,
            # the CPU the kernels were built for, and the instruction sets they may use (Predictor checks them)
            "cpu": target.mcpu, "isa": sorted(target.isa),
            # the kernels read the input at any address its dtype allows (graph/align.py)
            "input_align": int(example.dtype.itemsize)}
    if batches is None:
        batches = tuned_batches(graph, target) if dynamic_batch else ()
    executable = compile_module(build_module(graph, meta, target, dynamic_batch, batches), target)
    with atomic_path(path, suffix=".so") as tmp:  # an OSError becomes an OutputError naming the path
        executable.export_library(tmp)
    return path


def inference_graph(model, example: np.ndarray, target, dynamic_batch: bool = True):
    """``model``'s eval-mode forward on inputs like ``example``, traced (its
    batch dim symbolic with ``dynamic_batch``) and optimized for ``target``:
    the graph an export compiles. The model's training mode is restored."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        graph = trace(model, example, dynamic_batch)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    return optimize(graph, target)


def tuned_batches(graph, target) -> list[int]:
    """The batch sizes at which the tuning records hold a config for one of
    the (optimized, symbolic-batch) graph's kernels, the most tuned kernels
    first, at most ``MAX_TUNED_BATCHES``."""
    from ..autotune.records import batch_sizes
    from ..runtime.build import tuned_config

    counts = []
    for batch in sorted(batch_sizes({n.op.name for n in kernel_nodes(graph)}, target.key)):
        static = graph.specialized(batch)
        tuned = sum(bool(tuned_config(node_workload(n), target)) for n in kernel_nodes(static))
        if tuned:
            counts.append((-tuned, batch))
    return sorted(batch for _, batch in sorted(counts)[:MAX_TUNED_BATCHES])


def _check_batches(batches) -> tuple:
    try:
        batches = tuple(batches)
    except TypeError:
        batches = None
    if batches is None or not all(type(b) is int and b >= 1 for b in batches) or len(set(batches)) != len(batches):
        raise ExportError(f"got {batches!r}, expected distinct batch sizes >= 1", where="kiln.export", arg="batches")
    return batches


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
        raise ExportError(f"TVM could not compile the model: {tvm_message(exc, 300)}", where="kiln.export",
                          arg="model") from exc
    return executable
