"""The table of ONNX op types kiln converts: ``@converter("Relu")`` registers
``fn(node, *inputs)``, where ``node`` is a ``Node`` (the node's attributes,
the opset it was written for, its name) and the inputs are values
(``frontend/values.py``; None for an omitted optional input). A converter
returns one value, or a list for a node of several outputs."""
from __future__ import annotations

from typing import Callable

from ..errors import FrontendError

#: ONNX op type -> converter
CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str):
    def register(fn):
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn
    return register


class Node:
    """What a converter knows of its node."""

    __slots__ = ("op_type", "name", "attrs", "opset", "n_outputs")

    def __init__(self, op_type: str, name: str, attrs: dict, opset: int, n_outputs: int):
        self.op_type, self.name, self.attrs, self.opset, self.n_outputs = op_type, name, attrs, opset, n_outputs

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    @property
    def where(self) -> str:
        """The node as an error names it."""
        return f"{self.op_type} node {self.name!r}"

    def fail(self, problem: str) -> FrontendError:
        return FrontendError(problem, where=self.where)

    def refuse(self, key: str, value, expected: str) -> FrontendError:
        return FrontendError(f"attribute {key}={value!r} is not supported (expected {expected})", where=self.where)
