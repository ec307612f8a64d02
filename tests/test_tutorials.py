"""Every tutorial runs to its final check at small sizes."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parent.parent / "tutorials").glob("[0-9][0-9]_*.py"))


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 4


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_runs(path, tmp_path):
    env = {**os.environ, "KILN_TUTORIAL_SMALL": "1", "MPLBACKEND": "Agg"}
    res = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
