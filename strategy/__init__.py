"""Implementation strategies: which algorithm runs an op's workload on a target.

An op can have several implementations — a conv direct, packed in channel
blocks, as a Winograd convolution — and this package is the one place that
decides which one runs, from the ``Workload``, the target and whether the
weight is a constant. The kernel pool (an eager op), the export passes and
the compiled training step all ask ``choose``; nothing else tests an op's
name to pick an algorithm.

As in TVM's ``OpStrategy``, each op registers its strategies with a
priority (``register``): a strategy looks at the workload and returns the
``Implementation`` it would run, or None where it does not apply; ``choose``
returns the first that applies, highest priority first, else ``Direct``
(the op's own kernel, scheduled by its template). An implementation says
what to run in a form every caller can carry out without knowing the
algorithm: the op that computes the result and its attributes, the op that
prepares the weight first (a pack or a transform: run once at export where
the weight is constant, else in every call) and the channel block the input
is read in. A new variant (int8, 1x1 as a GEMM) is an op (``te/``), its
template (``schedules/``) and one strategy registered here. Grouped and
depthwise convolutions are ``conv2d``'s ``groups``: no strategy applies to
them, and the direct kernel's template schedules them
(``schedules/cpu/conv2d_grouped.py``).

>>> import kiln
>>> from kiln.te import get_op
>>> w = get_op("conv2d").check([(1, 64, 56, 56), (64, 64, 3, 3)], "float32", {"padding": 1})
>>> choose(w, kiln.cpu(), constant_weight=True).name
'winograd'
"""
from __future__ import annotations

from . import conv2d, dense  # noqa: F401 - the strategies register on import
from .base import Direct, Implementation, Packed, Strategy, Winograd, choose, register, strategies

__all__ = ["Direct", "Implementation", "Packed", "Strategy", "Winograd", "choose", "register", "strategies"]
