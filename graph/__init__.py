"""The graph layer: a model traced into a graph of op applications
(``ir``, ``trace``) or built op by op (``Graph.input``/``const``/``apply``/
``output``), passes that rewrite it (``fold``: affine chains into
conv/dense weights; ``fuse``: elementwise consumers into their producers;
``implement``: the implementation each conv and dense runs as), and its
lowering to one Relax module of kiln-scheduled kernels (``lower``, with one
entry per batch range: ``entries``), compiled (``module``) into one shared
library by ``export`` (``trace`` -> ``optimize`` -> ``build_library``) or
into a training step (``step``)."""
from .export import build_library, export, optimize
from .ir import Graph, Node, Value
from .trace import trace

__all__ = ["Graph", "Node", "Value", "build_library", "export", "optimize", "trace"]
