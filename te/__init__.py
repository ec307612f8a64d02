"""Operators declared once, as TVM tensor expressions, with their shape, dtype
and gradient rules. ``get_op(name)`` and ``list_ops()`` expose the registry."""
from .attrs import Attr
from .registry import Op, call, get_op, list_ops, register
from .shapes import DTYPES, Bounded, sym

# Importing the op families registers their ops.
from . import conv, dynamic, elementwise, indexing, matmul, pool, reduction, scalar_ops, shape_ops, softmax  # noqa: E402,F401

__all__ = ["Attr", "Bounded", "DTYPES", "Op", "call", "get_op", "list_ops", "register", "sym"]
