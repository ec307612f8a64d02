"""Checked references to registered ops, for code that applies an op which has
no Python operator or method (``sign``, ``one_hot``, ``conv2d``...)::

    sign = op_ref("sign")          # at module level: bound once, at import
    ...
    return (g * sign(x),)          # in a gradient: kiln.te.call("sign", x)

Gradients otherwise read as arithmetic on values (``g * node``, ``1.0 - y * y``,
``g.sum(axis, keepdims=True)``): every backend (the autograd ``Tensor``, the
exporter's tracer, the test evaluator) is a ``ValueOps``, whose operators are
references too. Op modules make their references while ``kiln.te`` is being
imported, before every op is registered, so ``kiln.te`` checks them all once
its op modules are loaded (``check_op_refs``): a misspelled name fails the
import, not the first backward pass that reaches it. A reference made after
that (a user's op module) is checked when it is made.
"""
from __future__ import annotations

import sys

from ..errors import OpNotFoundError
from .registry import _REGISTRY, call, get_op, list_ops


class OpRef:
    """The registered op ``name``, applied as ``ref(*inputs, **attrs)``.

    Parameters
    ----------
    name : str
        The op's registered name.
    module : str
        The module that made the reference (named in the error if the op is missing).
    """

    __slots__ = ("name", "module")

    def __init__(self, name: str, module: str):
        self.name, self.module = name, module

    def __call__(self, *inputs, **attrs):
        return call(self.name, *inputs, **attrs)

    @property
    def op(self):
        """The registered ``Op`` (for a caller that knows its backend)."""
        return _REGISTRY.get(self.name) or get_op(self.name)

    def __repr__(self) -> str:
        return f"<op_ref {self.name!r} in {self.module}>"


_unchecked: list[OpRef] = []  # made before check_op_refs ran: the op modules' own
_checked = False


def op_ref(name: str) -> OpRef:
    """A reference to the op ``name``, made at module level by the module that uses it."""
    ref = OpRef(name, sys._getframe(1).f_globals.get("__name__", "?"))
    if _checked:
        _check(ref)
    else:
        _unchecked.append(ref)
    return ref


def check_op_refs() -> None:
    """Check every reference made so far, and from now on each one as it is made.

    Raises
    ------
    OpNotFoundError
        Naming the missing op and the module whose reference names it.
    """
    global _checked
    for ref in _unchecked:
        _check(ref)
    _unchecked.clear()
    _checked = True


def _check(ref: OpRef) -> None:
    if ref.name not in list_ops():
        raise OpNotFoundError(f"{ref.module} makes op_ref({ref.name!r}), but no op of that name is registered "
                              "(`kiln ops` lists them)", op=ref.name, arg="op_ref")
