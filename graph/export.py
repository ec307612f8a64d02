"""Export a model's forward as one compiled module.

``export(model, example, path)`` is three steps, each public for a graph
that did not come from a traced model (a frontend's): ``trace`` the model's
eval-mode forward into a ``Graph`` (``graph.trace``); ``optimize`` it —
affine chains such as eval BatchNorm folded into the conv/dense weights
(``graph.fold``), GELU written as its formula made one op
(``graph.patterns``), elementwise consumers fused into their producers
(``graph.fuse``), constant weights packed into their kernel's layout or
transformed for a Winograd convolution (``graph.implement``: what
``kiln.strategy`` chooses), a channel-blocked layout carried from
convolution to convolution (``graph.layout``); and ``build_library``: lower
it to a Relax module of kiln-scheduled kernels (``graph.lower``, one entry
function per batch range: ``graph.entries``), compile it (``graph.module``)
and write it as one shared library (``runtime.link.write_library``: the
thread modules' object code emitted in parallel).

The file holds everything: the kernels, the weights (as constants of the
Relax program), and a ``kiln_metadata`` function returning UTF-8 JSON bytes
in format ``kiln-model-2`` (``runtime/metadata.py``): the inputs and outputs
(names, shapes with ``null`` for the batch dim and, exported with
``dynamic_seq``, the sequence dim; dtypes), what a call returns,
the CPU and instruction sets the kernels were built for, the entry functions,
and the kiln and TVM versions. ``kiln.runtime.Predictor`` needs only TVM to
run it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tvm
from tvm.support.cc import create_shared

from ..errors import ExportError
from ..outputs import atomic_path, check_output_path
from ..runtime.build import tuned_batch_sizes, tuned_config
from ..runtime.device import as_target
from ..runtime.link import write_library
from ..runtime.metadata import FORMAT
from ..te.shapes import is_static
from ..version import __version__
from .attention import fuse_attention
from .fold import fold_affine
from .fuse import fuse_epilogues, fuse_pools, fuse_prologues
from .patterns import fuse_activations
from .implement import implement
from .ir import Graph
from .layout import block_layouts
from .qdq import by_multiplier, share_fake_quant
from .requantize import requantize
from .lower import build_module, kernel_nodes, node_workload
from .module import compile_module
from .trace import trace
from .transposes import dense_of_constants, fold_transposes

#: the most batch sizes an export compiles entries of their own for
MAX_TUNED_BATCHES = 4


def optimize(graph, target=None, winograd: bool = True):
    """Run the export passes over ``graph`` in order, in place, and return it:
    make an activation written out as arithmetic (GELU's formula) its op,
    fold transposes of activations into the products reading them, make a
    product with a constant matrix a dense layer, fold affine chains into
    weights, fuse elementwise epilogues, pre-pack constant weights for
    ``target`` (default the CPU; 3x3 stride-1 convs as Winograd
    convolutions unless ``winograd=False``), carry channel-blocked
    layouts between the packed convolutions, fuse a global pool into the
    Winograd convolution it reads and a small direct convolution into the
    Winograd convolution reading it, and make a layer read only by int8
    convolutions write their uint8 codes. A QDQ file's value that its int8
    readers and its residual adds fake-quantize alike is fake-quantized
    once, by its producer, and an int8 product's epilogue quantizes by a
    multiplier (``graph.qdq``)."""
    fuse_activations(graph)
    share_fake_quant(graph)
    fold_transposes(graph)
    fuse_attention(graph)
    dense_of_constants(graph)
    fold_affine(graph)
    fuse_epilogues(graph)
    implement(graph, as_target(target), winograd)
    block_layouts(graph)
    fuse_pools(graph)
    fuse_prologues(graph)
    requantize(graph)
    by_multiplier(graph)
    return graph


def export(model, example, path, dynamic_batch: bool = True, target=None, batches=None, *,
           dynamic_seq: bool = False) -> Path:
    """Compile ``model``'s eval-mode forward into one shared library at ``path``.

    Parameters
    ----------
    model : kiln.nn.Module (or any callable made of kiln ops)
        Its forward returns one tensor, a tuple or list of them, or a dict of
        them (named outputs; ``Predictor`` then returns a dict).
    example : array-like, tuple of them, or dict of them by name
        Inputs of the right shapes and dtypes: one array (the input ``x``),
        the forward's positional arguments (named after its parameters), or
        its keyword arguments (``graph.trace``). With ``dynamic_batch`` the
        first dim of every input becomes the one symbolic batch (they must
        agree on it), so the module serves any batch size.
    path : str or Path
        Written atomically (temporary file, then rename); checked before
        compiling (``OutputError`` for a directory or an unwritable folder).
    batches : sequence of int, optional
        With ``dynamic_batch``, batch sizes that get kernels of their own,
        compiled for that batch (a call of another batch size runs the
        symbolic kernels). By default, the batch sizes the tuning records
        hold tuned kernels of this model for (``kiln tune --model``), at most
        ``MAX_TUNED_BATCHES``; ``()`` for none.
    target : Target, optional
        A CPU target (default: this machine's); the module runs on the CPU,
        so another is an ``ExportError``.
    dynamic_seq : bool
        The second dim of every input becomes the one symbolic sequence
        length, so the module serves any length (up to the table a model
        reads by position, ``max_len``: the metadata's ``max_seq``). A model
        that unrolls a recurrence needs its length: ``ShapeError``.

    Notes
    -----
    Kernels of static shapes use the best tuning record of their workload
    where there is one; ``kiln.runtime.build.untuned()`` exports as if there
    were none.

    A model written in Python is exported the same way, after loading its
    trained weights: ``model.load_state_dict(state)`` (``state`` from
    ``model.state_dict()`` or ``kiln.nn.checkpoint.read_checkpoint``), then
    ``export(model, example, path)``.
    """
    path = check_output_path(path, "path")
    target = _cpu_target(target, "kiln.export")
    batches = None if batches is None else _check_batches(batches, "kiln.export")
    graph = inference_graph(model, example, target, dynamic_batch, where="kiln.export", dynamic_seq=dynamic_seq)
    return build_library(graph, path, target, batches if dynamic_batch else ())


def inference_graph(model, example, target, dynamic_batch: bool = True, *, where: str = "kiln.graph.trace",
                    dynamic_seq: bool = False):
    """``model``'s eval-mode forward on inputs like ``example``, traced (its
    batch dim symbolic with ``dynamic_batch``, its sequence dim with
    ``dynamic_seq``; ``where`` names the caller in errors) and optimized for ``target``: the graph an export compiles. The
    model's training mode is restored."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        graph = trace(model, example, dynamic_batch, dynamic_seq=dynamic_seq, where=where)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    return optimize(graph, target)


def build_library(graph: Graph, path, target=None, batches=None) -> Path:
    """Compile an optimized ``graph`` into one shared library at ``path``
    (written atomically) with its metadata, and return the path.

    The graph's inputs are batches: a symbolic first dim, the same variable
    in every input that has one, makes the module serve any batch size (one
    entry function per batch range, and one per size of ``batches``: by
    default the sizes the tuning records hold tuned kernels of the graph
    for). Its outputs named with ``Graph.output`` make a call return a dict.
    ``target``: a CPU target (default: this machine's).
    """
    path = check_output_path(path, "path")
    target = _cpu_target(target, "build_library")
    meta = metadata(graph, target)
    dynamic = any(spec["shape"][0] is None for spec in meta["inputs"])
    if batches is None:
        batches = tuned_batches(graph, target) if dynamic else ()
    batches = _check_batches(batches, "build_library") if dynamic else ()
    executable = compile_module(build_module(graph, meta, target, dynamic, batches), target)
    with atomic_path(path, suffix=".so") as tmp:  # an OSError becomes an OutputError naming the path
        write_library(executable, tmp, fcompile=create_shared)
    return path


def metadata(graph: Graph, target) -> dict:
    """The ``kiln_metadata`` of ``graph``'s module built for ``target``
    (``runtime/metadata.py``, the entries aside); ``ExportError`` for inputs
    that are not batches or whose batch dims differ."""
    def fail(problem: str) -> ExportError:
        return ExportError(problem, where="build_library", arg="graph")

    if not graph.inputs or not graph.outputs:
        raise fail(f"got {len(graph.inputs)} inputs and {len(graph.outputs)} outputs, expected at least one of each")
    batch = next((v.shape[0] for v in graph.inputs if v.shape and not is_static(v.shape[0])), None)
    seq = next((v.shape[1] for v in graph.inputs if len(v.shape) > 1 and not is_static(v.shape[1])), None)
    for v in graph.inputs:
        if not v.name.isidentifier() or v.name == "out" or sum(u.name == v.name for u in graph.inputs) > 1:
            raise fail(f"input {v.name!r}: expected an identifier of its own other than 'out' (Predictor's keyword "
                       "for the output buffers)")
        if not v.shape or not all(is_static(d) for d in v.shape[2:]) or not (
                is_static(v.shape[0]) or v.shape[0].same_as(batch)) or len(v.shape) > 1 and not (
                is_static(v.shape[1]) or v.shape[1].same_as(seq)):
            raise fail(f"input {v.name!r} has shape {tuple(map(str, v.shape))}, expected a batch (N, ...) whose "
                       "first dim (the batch) and second (the sequence) alone may be symbolic, each the same "
                       "variable in every input")
    named = len(graph.output_names) == len(graph.outputs) and None not in graph.output_names
    names = graph.output_names if named else ["out"] if len(graph.outputs) == 1 else \
        [f"out{i}" for i in range(len(graph.outputs))]
    return {"format": FORMAT, "kiln": __version__, "tvm": tvm.__version__,
            # the CPU the kernels were built for, and the instruction sets they may use (Predictor checks them)
            "cpu": target.mcpu, "isa": sorted(target.isa),
            # "align": the kernels read each input at any address its dtype allows (graph/align.py)
            "inputs": [{**_spec(v.name, v), "align": np.dtype(v.dtype).itemsize} for v in graph.inputs],
            "outputs": [_spec(name, v) for name, v in zip(names, graph.outputs)],
            "returns": "dict" if named else "array" if len(graph.outputs) == 1 else "tuple",
            **({} if seq is None else _sequence_limit(graph, seq))}


def _sequence_limit(graph: Graph, seq) -> dict:
    """``{"max_seq": n}`` where a node reads a table by position (a learned
    positional encoding's first ``seq`` rows: at most its ``max_len``), else
    nothing: any length runs."""
    bounds = [bound for node in graph.nodes for name, bound in node.op.dim_bounds(
        [v.shape for v in node.inputs], **node.attrs).items() if name == seq.name]
    return {"max_seq": min(bounds)} if bounds else {}


def _spec(name: str, value) -> dict:
    return {"name": name, "shape": [int(d) if is_static(d) else None for d in value.shape], "dtype": value.dtype}


def _cpu_target(target, where: str):
    target = as_target(target)
    if target.kind != "cpu":
        raise ExportError(f"got target {target.kind}, expected the CPU: an exported module runs on the CPU "
                          "(Predictor); CUDA kernels are built and tuned one op at a time (kiln.build, kiln tune OP "
                          "--target cuda)", where=where, arg="target")
    return target


def tuned_batches(graph, target) -> list[int]:
    """The batch sizes at which the tuning records hold a config for one of
    the (optimized, symbolic-batch) graph's kernels, the most tuned kernels
    first, at most ``MAX_TUNED_BATCHES``."""
    counts = []
    for batch in sorted(tuned_batch_sizes({n.op.name for n in kernel_nodes(graph)}, target)):
        static = graph.specialized(batch)
        tuned = sum(bool(tuned_config(node_workload(n), target)) for n in kernel_nodes(static))
        if tuned:
            counts.append((-tuned, batch))
    return sorted(batch for _, batch in sorted(counts)[:MAX_TUNED_BATCHES])


def _check_batches(batches, where: str) -> tuple:
    try:
        batches = tuple(batches)
    except TypeError:
        batches = None
    if batches is None or not all(type(b) is int and b >= 1 for b in batches) or len(set(batches)) != len(batches):
        raise ExportError(f"got {batches!r}, expected distinct batch sizes >= 1", where=where, arg="batches")
    return batches
