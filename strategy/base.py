"""The implementation types, the strategy registry and ``choose`` (the
package's docstring says how they fit together)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Mapping

from ..errors import AttrError


@dataclass(frozen=True, eq=False)
class Implementation:
    """How one workload runs.

    ``op`` and ``attrs``: the op that computes the result and its attributes
    (its inputs are the workload's, the weight and input replaced as below).
    ``weight_op`` and ``weight_attrs``: the op that prepares the weight (the
    second input) first, or None to read it as it is. ``in_block``: the input
    (the first) is read in blocks of this many channels (``to_blocked``
    first); 0 reads it as it lies."""

    name: ClassVar[str] = ""
    op: str
    attrs: Mapping = field(default_factory=dict)
    weight_op: str | None = None
    weight_attrs: Mapping = field(default_factory=dict)
    in_block: int = 0

    def __repr__(self) -> str:
        stages = ([f"to_blocked({self.in_block})"] if self.in_block else []) + (
            [f"{self.weight_op}({dict(self.weight_attrs)})"] if self.weight_op else []) + [self.op]
        return f"<{self.name} {' -> '.join(stages)}>"


class Direct(Implementation):
    """The op's own kernel, on its inputs as they are."""

    name = "direct"


class Packed(Implementation):
    """A constant weight packed once into the blocks the kernel reads."""

    name = "packed"


@dataclass(frozen=True, eq=False, repr=False)
class Winograd(Implementation):
    """A Winograd convolution F(``tile`` x ``tile``, 3x3): the weight
    transformed (once where it is constant), the input's tiles transformed
    and multiplied in the kernel."""

    name = "winograd"
    tile: int = 0


@dataclass(frozen=True)
class Strategy:
    """One implementation of an op: ``applies(workload, target,
    constant_weight)`` returns it, or None where it does not apply."""

    op: str
    name: str
    priority: int
    applies: Callable


_STRATEGIES: dict[str, list[Strategy]] = {}


def register(op: str, name: str, priority: int):
    """Decorator: register ``fn(workload, target, constant_weight) ->
    Implementation | None`` as the strategy ``name`` of ``op``."""
    def wrap(fn):
        listed = _STRATEGIES.setdefault(op, [])
        if any(s.name == name for s in listed):
            raise AttrError(f"op '{op}' already has a strategy named {name!r}", where="kiln.strategy", arg="name")
        listed.append(Strategy(op, name, priority, fn))
        listed.sort(key=lambda s: -s.priority)
        return fn
    return wrap


def strategies(op: str) -> list[Strategy]:
    """The strategies registered for the op named ``op``, highest priority first."""
    return list(_STRATEGIES.get(op, ()))


def choose(workload, target, constant_weight: bool = False, without=()) -> Implementation:
    """The implementation ``workload`` runs as on ``target``: the first of
    its op's strategies that applies, highest priority first, else
    ``Direct``.

    Parameters
    ----------
    workload : Workload
        The op's checked call (``Op.check``).
    target : Target
        Where it runs (``kiln.cpu()``, ``kiln.cuda()``).
    constant_weight : bool
        Whether the second input is known ahead of time (an exported
        model's weight), so preparing it costs nothing per call.
    without : collection of str
        Strategy names not to use (``("winograd",)`` where
        ``KILN_WINOGRAD=0`` or ``winograd=False`` keeps convolutions direct).
    """
    for strategy in _STRATEGIES.get(workload.op.name, ()):
        if strategy.name not in without:
            found = strategy.applies(workload, target, constant_weight)
            if found is not None:
                return found
    return Direct(workload.op.name, workload.attrs)

