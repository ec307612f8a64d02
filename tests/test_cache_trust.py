"""What the kernel cache loads is code: folders kiln creates are private,
folders it finds keep their mode (with a warning when anyone may write there),
and an entry holding another kernel is detected and rebuilt."""
import os
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kiln.runtime import cache
from kiln.runtime.predictor import Predictor
from test_cache import PROBE, entries, probe

README = Path(__file__).resolve().parent.parent / "README.md"


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_created_folders_are_private_and_existing_ones_keep_their_mode(monkeypatch, tmp_path):
    before = mode(tmp_path)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "a" / "b"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about
        folder = cache.kernel_dir()
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", folder)] == [0o700] * 3
    assert mode(tmp_path) == before


def test_a_world_writable_cache_folder_is_left_alone_with_one_warning(monkeypatch, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    monkeypatch.setenv("KILN_CACHE_DIR", str(shared))
    with pytest.warns(RuntimeWarning, match=f"{shared} is writable by every user"):
        folder = cache.kernel_dir()
    assert mode(shared) == 0o1777 and mode(folder) == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per folder and process
        cache.kernel_dir()


def test_another_kernels_entry_under_this_key_is_detected_and_rebuilt(tmp_path):
    """Each entry's name carries its own content hash, so a copy of another
    kernel's file renamed to this key's entry passes the hash check; before
    entries carried their key it loaded and then failed on every call."""
    probe(tmp_path, "0")
    (first,) = entries(tmp_path)
    probe(tmp_path, "1")
    (second,) = set(entries(tmp_path)) - {first}
    second.unlink()
    impostor = second.with_name(f"{second.name.split('.')[0]}.{first.name.split('.')[1]}.so")
    shutil.copyfile(first, impostor)
    res = probe(tmp_path, "1")  # the probe checks the kernel's results
    assert res["corrupt"] == 1 and res["compiled"] == 1 and not impostor.exists()
    assert len(entries(tmp_path)) == 2  # the rebuilt entry is stored again


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no folder can be created")
def test_an_unusable_cache_folder_degrades_to_memory_with_a_warning(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": "/proc/kiln-cache"}
    res = subprocess.run([sys.executable, "-c", PROBE, "0"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert '"compiled": 1' in res.stdout and "compiled kernels are kept in memory only" in res.stderr


def test_the_docs_say_loading_a_model_runs_its_code():
    assert "Load only files you trust" in Predictor.__doc__
    assert "load only files you trust" in README.read_text().lower()
