"""Arguments shared by subcommands: an op's inputs (``--shape``, ``--dtype``),
its attributes (``--attr k=v``) and the target.

``--shape`` lists every input's shape, comma-separated, dims joined by ``x``
(``64x128,128``). Two shorthands: one shape for an op of several inputs is used
for each of them (``add --shape 1024x1024``), and ``matmul``/``dense`` take
``MxKxN`` (dense also gets its bias of N).
"""
from __future__ import annotations

import argparse
import ast

from ..errors import AttrError, ShapeError
from ..te import get_op


def add_op_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("op", nargs=None if required else "?", help="a registered op (see `kiln ops`)")
    parser.add_argument("--shape", required=required, help="input shapes, e.g. 1024x1024x1024 (matmul MxKxN) or 64x128,128")
    parser.add_argument("--dtype", default="float32", help="input dtype(s), comma-separated (default float32)")
    parser.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE",
                        help="an op attribute, value as a Python literal (repeatable)")
    parser.add_argument("--target", default="cpu", help="cpu (default) or cuda[:sm_80]")


def parse_dims(op: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x")) if text.strip() not in ("", "()") else ()
    except ValueError:
        raise ShapeError(f"got {text!r}, expected dims like 64x128", op=op, arg="--shape") from None
    if any(d < 0 for d in dims):
        raise ShapeError(f"got {text!r}, expected non-negative dims", op=op, arg="--shape")
    return dims


def input_shapes(op_name: str, text: str) -> list[tuple[int, ...]]:
    op = get_op(op_name)
    shapes = [parse_dims(op.name, part) for part in text.split(",")]
    if op.name in ("matmul", "dense") and len(shapes) == 1 and len(shapes[0]) == 3:
        m, k, n = shapes[0]
        return [(m, k), (k, n)] + ([(n,)] if op.name == "dense" else [])
    if len(shapes) == 1 and op.arity and op.arity > 1:
        return shapes * op.arity
    return shapes


def input_dtypes(text: str, count: int) -> list[str]:
    dtypes = [d.strip() for d in text.split(",")]
    return dtypes * count if len(dtypes) == 1 else dtypes


def parse_attrs(op: str, items: list[str]) -> dict:
    attrs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AttrError(f"got {item!r}, expected KEY=VALUE", op=op, arg="--attr")
        try:
            attrs[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            attrs[key.strip()] = value.strip()  # a bare word, e.g. layout=NHWC
    return attrs
