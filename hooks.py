"""Extension points the package wires together at ``import kiln`` without
importing TVM: the layers below (``runtime``) read them, the package root
fills them with what lives above (``autotune``).

``config_sources``  where ``kiln.build`` looks for a tuned config when none
                    is given: ``source(workload, target_key) -> config or
                    None``, in order (``kiln.runtime.build.add_config_source``).
``batch_sources``   which batch sizes the tuning records hold tuned kernels
                    of some ops at: ``source(op_names, target_key) -> set of
                    ints`` (``kiln.runtime.build.tuned_batch_sizes``; what
                    ``kiln.export`` compiles batch entries for).
"""
from __future__ import annotations

from typing import Callable

config_sources: list[Callable] = []
batch_sources: list[Callable] = []
