"""The ``kiln`` command.

Each subcommand is one module of this package defining ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``; ``main`` discovers them,
so adding a subcommand is adding one file. A ``KilnError`` becomes
``kiln: error: ...`` on stderr with exit status 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from ..errors import KilnError

HELPERS = {"args", "__main__"}  # modules of this package that are not subcommands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: a tensor-expression compiler for deep learning")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name not in HELPERS:
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
