"""A graph with static shapes — a whole training step — as one compiled module.

``compile_graph`` drops the work no output needs (``Graph.prune``), fuses
elementwise consumers into their producers (``graph.fuse``), lowers the
graph to one Relax function of kiln-scheduled kernels (``graph.lower``) and
compiles it with the exporter's pipeline, whose static memory planning
reuses the intermediates' buffers. A call is one VM call: the inputs in,
the outputs (a tuple when several) back. The passes that need constant
weights (folding, pre-packing, blocked layouts) have nothing to do in a
training step, whose weights change every call.
"""
from __future__ import annotations

import tvm
from tvm import relax

from ..runtime.device import as_target
from .export import compile_module
from .fuse import fuse_epilogues
from .ir import Graph
from .lower import static_config, schedule_kernels, to_relax


def compile_graph(graph: Graph, target=None):
    """The graph's compiled function (rewriting ``graph`` in place) and the
    executable that keeps its code alive."""
    target = as_target(target)
    graph.prune()
    fuse_epilogues(graph)
    mod, kernels = to_relax(graph, "main")
    executable = compile_module(schedule_kernels(mod, kernels, target, static_config), target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"], (executable, vm)
