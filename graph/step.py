"""A graph with static shapes — a whole training step — as one compiled module.

``compile_graph`` drops the work no output needs (``Graph.prune``), fuses
elementwise consumers into their producers (``graph.fuse``), runs each node
as the implementation ``kiln.strategy`` chooses (``graph.implement``: 3x3
stride-1 convolutions and their data gradients as Winograd convolutions,
their weights transformed in every call), lowers the graph to one Relax
function of kiln-scheduled kernels (``graph.lower``) and compiles it with
the exporter's pipeline (``graph.module``), whose static memory planning
reuses the intermediates' buffers. A call is one VM call: the inputs in,
the outputs (a tuple when several) back. The export's passes that fold
constants into weights and carry blocked layouts between packed
convolutions have nothing to do in a training step, whose weights change
every call.

Compiled modules go through the kernel cache (``runtime/cache.py``: memory,
then disk, atomically written and content-checked) under a key describing
the optimized graph — its nodes, shapes, attributes and constants — with the
target and the code that compiles it, so a rerun of the same training step
loads its module instead of compiling it.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from .. import config as kiln_config
from ..runtime import cache
from ..runtime.device import as_target, check_runs_here
from ..schedules import config_key
from ..te.workload import digest
from ..version import __version__
from .products import join_products, transpose_once
from .entries import static_config
from .fuse import fuse_epilogues
from .ir import Graph
from .implement import implement
from .lower import kernel_nodes, node_workload, schedule_kernels, to_relax, tuned_of
from .module import compile_module
from .transposes import fold_transposes


class _StepExecutable:
    """A compiled step as the kernel cache holds it (``module``: the
    executable, or the library it was stored as)."""

    def __init__(self, module):
        self.module = module


def compile_graph(graph: Graph, target=None, winograd: bool | None = None):
    """The graph's compiled function (rewriting ``graph`` in place) and the
    objects that keep its code alive."""
    target = as_target(target)
    optimize_step(graph, target, winograd)

    def build():
        mod, kernels = to_relax(graph, "main")
        executable = compile_module(schedule_kernels(mod, kernels, target, static_config), target,
                                    where="compiled step")
        return _StepExecutable(executable), executable

    held = cache.get(graph_key(graph, target), _StepExecutable, build)
    check_runs_here(target, where="compiled step")
    vm = relax.VirtualMachine(held.module, tvm.cpu())
    return vm["main"], (held, vm)


def optimize_step(graph: Graph, target=None, winograd: bool | None = None) -> Graph:
    """A step's passes, in place: drop the work no output needs, fold
    transposes into the products reading them, join a sum of products (a
    recurrent weight's gradient over its steps) into one product, lay out
    once a weight many products read transposed, fuse
    elementwise consumers
    into their producers, run each node as the implementation
    ``kiln.strategy`` chooses on ``target`` (default the CPU;
    ``winograd=False`` rules Winograd out; None: ``KILN_WINOGRAD``, on by
    default)."""
    graph.prune()
    fold_transposes(graph)
    join_products(graph)
    transpose_once(graph)
    fuse_epilogues(graph)
    implement(graph, as_target(target), kiln_config.winograd() if winograd is None else winograd)
    return graph


def describe(graph: Graph) -> dict:
    """The graph as JSON-able text: inputs, nodes (op, attributes, epilogue,
    operands by position) and outputs; constants by the hash of their bytes."""
    names: dict[int, str] = {}

    def ref(v) -> str:
        if id(v) not in names:
            if v.is_const:
                data = np.ascontiguousarray(v.data)
                names[id(v)] = f"const:{v.dtype}:{list(v.shape)}:{hashlib.sha256(data.tobytes()).hexdigest()}"
            else:
                raise ValueError(f"{v!r} is read before it is made")
        return names[id(v)]

    for i, v in enumerate(graph.inputs):
        names[id(v)] = f"in{i}:{v.dtype}:{[str(d) for d in v.shape]}"
    nodes = []
    for k, node in enumerate(graph.nodes):
        nodes.append({"op": node.op.name, "attrs": repr(sorted(node.attrs.items())),
                      "epilogue": [(op.name, repr(sorted(attrs.items())), len(others))
                                   for op, attrs, others in node.epilogue],
                      "operands": [ref(v) for v in node.operands()]})
        for j, v in enumerate(node.outputs):
            names[id(v)] = f"n{k}.{j}:{v.dtype}:{[str(d) for d in v.shape]}"
    return {"inputs": [names[id(v)] for v in graph.inputs], "nodes": nodes,
            "outputs": [ref(v) for v in graph.outputs]}


@functools.lru_cache(maxsize=None)
def _graph_code() -> str:
    """Hash of the graph layer's code (how a graph becomes a module)."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def graph_key(graph: Graph, target) -> str:
    """The cache key of the graph's module: the graph, the tuned configs its
    kernels will use (a new record makes a new module), the target and the
    code that compiles it."""
    tuned = [config_key(tuned_of(node_workload(n), target)) for n in kernel_nodes(graph)]
    return digest({"graph": describe(graph), "tuned": tuned, "target": target.build_key, "kiln": __version__, "tvm": tvm.__version__,
                   "code": cache.code_fingerprint(), "graph_code": _graph_code(), "entry": cache.ENTRY_FORMAT})
