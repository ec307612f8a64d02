"""The ``kiln`` command.

Each subcommand is one module of this package defining ``register(subparsers)``,
which adds its parser and sets ``func(args) -> int``; ``main`` discovers them,
so adding a subcommand is adding one file. A ``KilnError`` becomes
``kiln: error: ...`` on stderr with exit status 2, never a traceback; so does
an invalid environment variable (``kiln.config``), checked before any
subcommand runs. ``python -m kiln`` and ``python -m kiln.cli`` run ``main``
too.

Building the parser imports neither TVM, PyTorch nor numpy: a subcommand
module imports what its command needs inside ``func``, so ``--help``,
``--version`` and usage errors answer at once (``tests/test_cli_startup.py``).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import pkgutil
import sys

from .. import config
from ..version import __version__
from ..errors import KilnError
from .args import KilnArgumentParser

# modules of this package that are not subcommands
HELPERS = {"args", "tune_model", "__main__", "train_run", "train_text"}


def tvm_version() -> str:
    """TVM's version, read from its installed metadata: every command builds
    the parser, and importing TVM would add a second or more to ``kiln --help``.
    A TVM built from source may have no such metadata; then it is imported."""
    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        import tvm

        return tvm.__version__


def version_text() -> str:
    """``kiln <version> (TVM <version>)``, what ``kiln --version`` prints."""
    return f"kiln {__version__} (TVM {tvm_version()})"


def build_parser() -> argparse.ArgumentParser:
    parser = KilnArgumentParser(prog="kiln", description="kiln: a tensor-expression compiler for deep learning")
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
        status = args.func(args) or 0
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return status
    except BrokenPipeError:
        # the reader left (`kiln predict ... | head`): stop quietly, as `cat` does, with the status
        # a shell reports for a SIGPIPE death (128 + 13) so `set -o pipefail` still sees the cut
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except KilnError as exc:
        print(f"kiln: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kiln: interrupted", file=sys.stderr)
        return 130
