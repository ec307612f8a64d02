"""Arguments shared by subcommands: an op's inputs (``--shape``, ``--dtype``),
its attributes (``--attr k=v``), the target and tuned configs (``--records``);
value checkers for numeric flags; and the parser class that makes argparse's
own errors look like every other kiln error.

``--shape`` lists every input's shape, comma-separated, dims joined by ``x``
(``64x128,128``). Two shorthands: one shape for an op of several inputs is used
for each of them (``add --shape 1024x1024``), and ``matmul``/``dense`` take
``MxKxN`` (dense also gets its bias of N).
"""
from __future__ import annotations

import argparse
import ast
import math
from typing import NoReturn

from ..errors import AttrError, ShapeError

INT64_MAX = 2 ** 63 - 1  # TVM indexes with int64: a larger dim or element count cannot be compiled


class KilnArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors read ``kiln: error: ...`` (exit 2),
    like the errors subcommands raise; ``add_subparsers`` gives every
    subcommand's parser this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"kiln: error: {message} (see `{self.prog} --help`)\n")


def _number(kind, what: str, low: float, high: float | None = None, low_ok: bool = True):
    """An argparse ``type=`` that takes a ``kind`` number in ``[low, high]``
    (``(low, high]`` when ``low_ok`` is false)."""
    def check(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {what}") from None
        if value != value or value < low or (value == low and not low_ok) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {what}")
        return value

    check.__name__ = what
    return check


positive_int = _number(int, "a positive integer", 0, low_ok=False)
seed_int = _number(int, "an integer in [0, 2**32)", 0, 2 ** 32 - 1)
seconds = _number(float, "a number of seconds in (0, 86400]", 0.0, 86400.0, low_ok=False)


def add_op_arguments(parser: argparse.ArgumentParser, required: bool = True, records: bool = True) -> None:
    """``op --shape --dtype --attr --target`` and, unless ``records=False``
    (``kiln tune`` defines its own), ``--records`` read by ``apply_records_arg``."""
    parser.add_argument("op", nargs=None if required else "?", help="a registered op (see `kiln ops`)")
    parser.add_argument("--shape", required=required,
                        help="input shapes, e.g. 1024x1024x1024 (matmul MxKxN) or 64x128,128")
    parser.add_argument("--dtype", default="float32", help="input dtype(s), comma-separated (default float32)")
    parser.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE",
                        help="an op attribute, value as a Python literal (repeatable)")
    parser.add_argument("--target", default="cpu", help="cpu (default) or cuda[:sm_XX] (default: the GPU present's)")
    if records:
        add_records_argument(parser)


def add_records_argument(parser: argparse.ArgumentParser) -> None:
    """``--records FILE``, read by ``apply_records_arg``."""
    parser.add_argument("--records", metavar="FILE",
                        help="also use the best tuned configs in this records file (written by kiln tune "
                             "--records FILE); kiln's default records file is always read")


def apply_records_arg(args: argparse.Namespace) -> None:
    """Make ``kiln.build`` use the configs of ``--records FILE`` when it was given."""
    path = getattr(args, "records", None)
    if not path:
        return
    from ..autotune import records

    records.apply(path)


def parse_dims(op: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x")) if text.strip() not in ("", "()") else ()
    except ValueError:
        raise ShapeError(f"got {text!r}, expected dims like 64x128", op=op, arg="--shape") from None
    if any(d < 0 for d in dims):
        raise ShapeError(f"got {text!r}, expected non-negative dims", op=op, arg="--shape")
    if max(dims, default=0) > INT64_MAX or math.prod(dims) > INT64_MAX:
        raise ShapeError(f"got {text!r}, expected dims whose product fits in int64 (at most {INT64_MAX})",
                         op=op, arg="--shape")
    return dims


def input_shapes(op_name: str, text: str | None) -> list[tuple[int, ...]]:
    from ..te import get_op  # imports TVM: not at parser build time

    op = get_op(op_name)
    if text is None:
        raise ShapeError("missing, expected the input shapes, e.g. --shape 64x128,128", op=op.name, arg="--shape")
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


#: bare words a shell user writes for a boolean attr (``--attr keepdims=true``)
BOOLEAN_WORDS = {"true": True, "false": False}


def parse_attrs(op: str, items: list[str]) -> dict:
    """``--attr KEY=VALUE`` items as attrs: each value a Python literal
    (``axis=(0,2)``, ``keepdims=True``), ``true``/``false`` in any case a
    bool, any other word a string (``layout=NHWC``)."""
    attrs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AttrError(f"got {item!r}, expected KEY=VALUE", op=op, arg="--attr")
        try:
            attrs[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            word = value.strip()  # a bare word, e.g. layout=NHWC
            attrs[key.strip()] = BOOLEAN_WORDS.get(word.lower(), word)
    return attrs
