"""kiln's errors name what they are about as it reads: ``op '...'`` only for a
registered operator, anything else (a class, a function, a dataset) by
``where=``."""
import os
import pathlib
import pickle
import re

import pytest

import kiln
from kiln.errors import AttrError, KilnError

PACKAGE = pathlib.Path(kiln.__file__).parent


def test_where_reads_before_the_argument_and_survives_pickling():
    err = AttrError("got 'val', expected 'train' or 'test'", where="dataset 'mnist'", arg="split")
    assert str(err) == "dataset 'mnist', argument 'split': got 'val', expected 'train' or 'test'"
    assert err.op is None and err.where == "dataset 'mnist'"
    back = pickle.loads(pickle.dumps(err))  # errors cross worker processes
    assert str(back) == str(err) and (back.op, back.arg, back.where) == (None, "split", "dataset 'mnist'")
    assert str(KilnError("x", op="add", arg="y")) == "op 'add', argument 'y': x"


def _sources():
    """The package's Python files, its tests and hidden folders (a virtual environment) left out."""
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "tests"]
        yield from (pathlib.Path(folder, f) for f in files if f.endswith(".py"))


def test_every_op_a_message_names_is_a_registered_op():
    named = {}
    for path in _sources():
        for found in re.finditer(r"\bop=([\"'])([^\"']*)\1", path.read_text()):
            named.setdefault(found.group(2), []).append(str(path.relative_to(PACKAGE)))
    assert named, "no op= found: the pattern no longer matches the code"
    assert {name: files for name, files in named.items() if name not in kiln.te.list_ops()} == {}


def test_errors_about_what_is_not_an_op_read_naturally(tmp_path):
    from kiln.nn import data
    from kiln.runtime import Predictor

    with pytest.raises(KilnError) as info:
        data.mnist(tmp_path, "val")
    assert str(info.value) == "dataset 'mnist', argument 'split': got 'val', expected 'train' or 'test'"
    with pytest.raises(KilnError) as info:
        Predictor(tmp_path / "none.so")
    assert str(info.value) == f"Predictor, argument 'path': no file at {tmp_path / 'none.so'}"
    assert info.value.op is None
