"""``kiln --help``, ``--version``, every subcommand's ``--help`` and argparse's
usage errors answer without importing TVM, PyTorch or numpy (TVM alone costs
a second or more), with the same output and exit status as ever; so does
``import kiln`` for TVM and PyTorch. Each case runs in a fresh interpreter:
this one has imported them long ago."""
import importlib.metadata
import json
import os
import pkgutil
import subprocess
import sys

import pytest

import kiln
from kiln import cli

HEAVY = ("tvm", "torch", "numpy")

# runs `kiln ARGS...` as the `kiln` script does, then writes the heavy modules it imported to OUT
SCRIPT = """
import json, sys
from kiln.cli import main
out, argv = sys.argv[1], sys.argv[2:]
try:
    status = main(argv)
except SystemExit as exc:  # --help, --version and usage errors exit from parse_args
    status = exc.code
with open(out, "w") as f:
    json.dump([m for m in {heavy!r} if m in sys.modules], f)
sys.exit(status)
""".format(heavy=HEAVY)


def run_fresh(tmp_path, argv, env=None):
    """``kiln argv`` in a new interpreter: (exit status, stdout, stderr, heavy modules it imported)."""
    out = tmp_path / "imported.json"
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(out), *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    return res.returncode, res.stdout, res.stderr, json.loads(out.read_text())


def subcommands() -> list[str]:
    """The subcommands, found as ``kiln.cli.build_parser`` finds them."""
    return sorted(m.name for m in pkgutil.iter_modules(cli.__path__) if m.name not in cli.HELPERS)


def test_import_kiln_imports_neither_tvm_nor_torch(tmp_path):
    code = "import sys, kiln; print([m for m in ('tvm', 'torch') if m in sys.modules])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_help(tmp_path):
    status, out, err, heavy = run_fresh(tmp_path, ["--help"])
    assert status == 0, err
    assert out.startswith("usage: kiln") and all(name in out for name in subcommands())
    assert heavy == []


def test_version(tmp_path):
    import tvm

    status, out, err, heavy = run_fresh(tmp_path, ["--version"])
    assert status == 0, err
    assert out == f"kiln {kiln.__version__} (TVM {tvm.__version__})\n"
    assert heavy == []


def test_the_version_without_tvms_metadata_comes_from_tvm(monkeypatch):
    """A TVM built from source may be installed without distribution metadata."""
    import tvm

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert cli.tvm_version() == tvm.__version__


@pytest.mark.parametrize("command", subcommands())
def test_subcommand_help(tmp_path, command):
    status, out, err, heavy = run_fresh(tmp_path, [command, "--help"])
    assert status == 0, err
    assert out.startswith(f"usage: kiln {command}")
    assert heavy == []


USAGE_ERRORS = [
    (["frobnicate"], "kiln: error: argument COMMAND: invalid choice: 'frobnicate' (choose from "),
    (["tune", "add", "--trials", "abc"],
     "kiln: error: argument --trials: got 'abc', expected a positive integer (see `kiln tune --help`)\n"),
    (["tune", "--model", "cnn", "--budget", "5x"], "kiln: error: argument --budget: got '5x', expected a duration"),
    (["train", "--lr", "x"], "kiln: error: argument --lr: got 'x', expected a positive finite number"),
    (["train", "--model", "foo"], "kiln: error: argument --model: invalid choice: 'foo'"),
    (["predict"], "kiln: error: the following arguments are required: model, --input (see `kiln predict --help`)\n"),
    (["ops", "--bogus"], "kiln: error: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("argv,message", USAGE_ERRORS, ids=[" ".join(argv) for argv, _ in USAGE_ERRORS])
def test_usage_errors(tmp_path, argv, message):
    status, out, err, heavy = run_fresh(tmp_path, argv)
    assert status == 2
    assert out == "" and err.startswith(message) and err.count("\n") == 1, err
    assert heavy == []


def test_a_bad_environment_variable_is_a_usage_error(tmp_path):
    env = dict(os.environ, KILN_NUM_THREADS="abc")
    status, out, err, heavy = run_fresh(tmp_path, ["--help"], env=env)
    assert status == 2 and out == ""
    assert err.startswith("kiln: error: environment variable KILN_NUM_THREADS='abc'"), err
    assert heavy == []
