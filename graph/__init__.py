"""The graph layer: a model traced into a graph of op applications
(``ir``, ``trace``), passes that rewrite it (``fold``: affine chains into
conv/dense weights; ``fuse``: elementwise consumers into their producers),
and its lowering to one Relax module of kiln-scheduled kernels (``lower``),
which ``export`` compiles into one shared library."""
from .export import export, optimize
from .ir import Graph, Node, Value
from .trace import trace

__all__ = ["Graph", "Node", "Value", "export", "optimize", "trace"]
