"""``kiln train`` loses nothing: bad numbers, unwritable outputs, a bad
records file and bad labels are refused before the first epoch; rows stream
as epochs end; Ctrl-C stops at a step boundary and keeps a checkpoint; long
compiles are reported."""
import argparse
import io
import os
import signal
import sys
import tempfile
import time

import numpy as np
import pytest

from kiln import nn
from kiln.cli import build_parser, main
from kiln.cli.train_run import CompileProgress
from kiln.errors import DataError
from kiln.nn import data, train
from kiln.nn.checkpoint import load_checkpoint
from kiln.runtime import cache
from helpers import run_cli




@pytest.mark.parametrize("argv", [["--epochs", "-3"], ["--epochs", "0"], ["--epochs", "2.5"], ["--batch-size", "0"],
                                  ["--lr", "-0.1"], ["--lr", "0"], ["--lr", "nan"], ["--lr", "inf"], ["--seed", "-1"]])
def test_bad_numbers_are_refused(capsys, argv):
    code, out, err = run_cli(["train", *argv], capsys)
    assert code == 2 and err.startswith("kiln: error:") and argv[0] in err and out == ""


def test_every_flag_has_help():
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command, flags in (("train", {"--dataset", "--data-dir", "--model", "--epochs", "--batch-size",
                                      "--optimizer", "--lr", "--seed", "--export", "--save", "--plot", "--json",
                                      "--records"}),
                           ("export", {"--out", "--json", "--records"})):
        helps = {flag: action.help for action in subcommands[command]._actions for flag in action.option_strings}
        assert flags <= set(helps)
        assert all(helps[flag] for flag in flags), f"kiln {command}: {[f for f in flags if not helps[f]]} lack help"


def _writable(folder) -> bool:
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _readonly_dir(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    return folder


@pytest.mark.parametrize("case,needle", [
    ("save a directory", "is a directory"), ("export under a file", "is a file, not a folder"),
    ("plot .txt", "expected a file name ending in one of"), ("plot without matplotlib", "pip install -e '.[plot]'"),
    ("save in /sys", "not writable"), ("read-only folder", "not writable"), ("same path twice", "its own path"),
    ("empty path", "empty path"), ("records missing", "does not exist"),
    ("records not records", "no valid tuning record"),
])
def test_outputs_are_checked_before_the_first_epoch(tmp_path, capsys, monkeypatch, case, needle):
    if case == "read-only folder" and os.geteuid() == 0:
        pytest.skip("root writes into a 0500 folder; the /sys case covers an unwritable folder")
    if case == "save in /sys" and _writable("/sys"):
        pytest.skip("/sys accepts new files on this machine")
    (tmp_path / "a_file").write_text("")
    (tmp_path / "notes.txt").write_text("not\na records file\n")
    args = {"save a directory": ["--save", str(tmp_path)],
            "export under a file": ["--export", str(tmp_path / "a_file" / "m.so")],
            "plot .txt": ["--plot", str(tmp_path / "loss.txt")],
            "plot without matplotlib": ["--plot", str(tmp_path / "loss.png")],
            "save in /sys": ["--save", "/sys/kiln-test.npz"],
            "read-only folder": ["--save", str(tmp_path / "ro" / "c.npz")],
            "same path twice": ["--save", str(tmp_path / "m"), "--export", str(tmp_path / "m.json")],
            "empty path": ["--export", ""],
            "records missing": ["--records", str(tmp_path / "none.jsonl")],
            "records not records": ["--records", str(tmp_path / "notes.txt")]}[case]
    if case == "plot without matplotlib":
        monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
        monkeypatch.setitem(sys.modules, "matplotlib.backend_bases", None)
    if case == "read-only folder":
        _readonly_dir(tmp_path)
    compiled = cache.stats.compiled
    code, out, err = run_cli(["train", "--epochs", "1", *args], capsys)
    assert code == 2 and err.startswith("kiln: error:") and needle in err, err
    assert out == "" and cache.stats.compiled == compiled, "the check must come before any training"


def _write_idx(path, array, magic):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


class _PlainDataset(data.Dataset):
    """A dataset that hands out items one at a time, with no label array to check up front."""

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, np.asarray(y, "int32")

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def test_labels_outside_the_classes_are_refused_before_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("t10k", 12)):
        _write_idx(tmp_path / f"{split}-images-idx3-ubyte", rng.integers(0, 255, (n, 28, 28)), 2051)
        _write_idx(tmp_path / f"{split}-labels-idx1-ubyte", np.arange(n) % 12, 2049)  # labels 0..11
    code, out, err = run_cli(["train", "--dataset", "mnist", "--data-dir", str(tmp_path), "--epochs", "1"], capsys)
    assert code == 2 and err.startswith("kiln: error:") and out == ""
    assert "mnist training set" in err and "10, 11 (4 samples)" in err and "[0, 10) for 10 classes" in err

    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    before = model.state_dict()
    x = rng.random((6, 4)).astype("float32")
    bad = data.DataLoader(data.NDArrayDataset(x, np.array([0, 1, 2, 3, -1, 2])), batch_size=2)
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(DataError, match=r"-1, 3 \(2 samples\)"):
        train.fit(model, bad, bad, opt, 1, classes=3)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])  # refused before any step
    unlabelled = data.DataLoader(_PlainDataset(x, [0, 1, 2, 5, 1, 0]), batch_size=2)  # labels seen per batch
    with pytest.raises(DataError, match=r"got labels 5 \(1 sample\)"):
        train.fit(model, unlabelled, unlabelled, opt, 1, classes=3)


class _Stdout(io.StringIO):
    """A non-terminal stdout that presses Ctrl-C ``presses`` times as soon as the
    first epoch row is flushed (so the row must be flushed while training runs)."""

    def __init__(self, presses: int):
        super().__init__()
        self.presses = presses

    def flush(self):
        super().flush()
        first_row = any(line.split("|")[0].strip() == "1" for line in self.getvalue().splitlines())
        # press only while kiln's handler is installed: the default one would abort the test session
        if first_row and self.presses and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            for _ in range(self.presses):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # let the handler run before the next press
            self.presses = 0


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path, capsys, monkeypatch, presses):
    """One press stops at the next step boundary, a second at once; both keep the checkpoint."""
    ckpt = tmp_path / "ck.npz"
    stdout = _Stdout(presses)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["train", "--epochs", "4", "--save", str(ckpt)]) == 130
    err = capsys.readouterr().err
    assert f"interrupted after 1 of 4 epochs; checkpoint written to {ckpt}" in err
    assert err.count("stopping after this step") == 1
    assert [line.split("|")[0].strip() for line in stdout.getvalue().splitlines()[2:]] == ["1"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is removed again
    model, spec = load_checkpoint(ckpt)
    assert spec["model"] == "mlp" and list(model.state_dict()) == ["1.weight", "1.bias", "3.weight", "3.bias"]


def test_compile_progress_speaks_only_when_compiling_lasts():
    count = [0]
    out = io.StringIO()
    with CompileProgress(lambda: count[0], after=0.15, every=10.0, quiet=0.1, stream=out, poll=0.01) as progress:
        for _ in range(6):
            count[0] += 1
            time.sleep(0.05)
        time.sleep(0.3)  # compiling pauses: the up-to-date count is said without waiting `every`
        assert progress.lines and progress.lines[-1].startswith("compiling kernels: 6 done (0.")
    assert out.getvalue().splitlines() == progress.lines

    quiet = io.StringIO()
    with CompileProgress(lambda: count[0], after=0.15, stream=quiet, poll=0.01) as progress:
        count[0] += 5  # a fast (warm cache) start
        time.sleep(0.3)
    assert progress.lines == [] and quiet.getvalue() == ""
