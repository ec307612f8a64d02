"""Extension points the package wires together at ``import kiln`` without
importing TVM: the layers below (``runtime``) read them, the package root
fills them with what lives above (``autotune``).

``config_sources``  where ``kiln.build`` looks for a tuned config when none
                    is given: ``source(workload, target_key) -> config or
                    None``, in order (``kiln.runtime.build.add_config_source``).
"""
from __future__ import annotations

from typing import Callable

config_sources: list[Callable] = []
