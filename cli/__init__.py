"""The ``kiln`` command.

Each subcommand is one module of this package defining ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``; ``main`` discovers them,
so adding a subcommand is adding one file. A ``KilnError`` becomes
``kiln: error: ...`` on stderr with exit status 2, never a traceback; so does
an invalid environment variable (``kiln.config``), checked before any
subcommand runs. ``python -m kiln`` and ``python -m kiln.cli`` run ``main``
too.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import tvm

from .. import __version__, config
from ..errors import KilnError

HELPERS = {"args", "__main__"}  # modules of this package that are not subcommands


def version_text() -> str:
    """``kiln <version> (TVM <version>)``, what ``kiln --version`` prints."""
    return f"kiln {__version__} (TVM {tvm.__version__})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: a tensor-expression compiler for deep learning")
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print kiln's and TVM's versions and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name not in HELPERS:
            importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        # first: a bad environment variable is a usage error, and some help texts show configured paths
        config.check()
        args = build_parser().parse_args(argv)
        return args.func(args) or 0
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
