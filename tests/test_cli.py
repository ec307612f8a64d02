"""The ``kiln`` command: ops, show, bench; errors exit 2 with one line."""
import json
import subprocess
import sys

import pytest

from kiln.cli import main


def test_ops_lists_every_registered_op(capsys):
    assert main(["ops", "--json"]) == 0
    names = {o["name"] for o in json.loads(capsys.readouterr().out)["ops"]}
    import kiln
    assert names == set(kiln.te.list_ops())


def test_ops_table_keeps_its_columns_apart(capsys):
    from kiln.cli.ops import describe
    from kiln.te import list_ops

    assert main(["ops"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    starts = [0] + [header.index(name) for name in ("family", "inputs", "grad", "attrs")]
    for name, line in zip(list_ops(), lines):  # conv2d_backward_weight is its own family: the widest entries
        op = describe(name)
        cells = [line.ljust(starts[-1])[a:b] for a, b in zip(starts, starts[1:])]  # a row without attrs ends early
        assert [c.rstrip() for c in cells] == [name, op["family"], str(op["inputs"]),
                                               "yes" if op["differentiable"] else "no"], line
        assert all(c.endswith("  ") for c in cells), line  # a gap after every column


def test_show_prints_template_config_and_script(capsys):
    assert main(["show", "matmul", "--shape", "64x32x48"]) == 0
    out = capsys.readouterr().out
    assert "template: matmul.schedule_matmul" in out and "tile_m=" in out and "T.parallel" in out


@pytest.mark.parametrize("op,shape,unit", [("add", "65536", "GB/s"), ("matmul", "128x128x128", "GFLOPS"),
                                           ("sum", "256x256", "GB/s")])
def test_bench_reports_kiln_numpy_and_their_ratio(capsys, op, shape, unit):
    assert main(["bench", op, "--shape", shape, "--repeat", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    key = "gflops" if unit == "GFLOPS" else "gbps"
    assert res["unit"] == unit and res["kiln"][key] > 0 and res["numpy"][key] > 0
    assert res["ratio"] == pytest.approx(res["numpy"]["median_s"] / res["kiln"]["median_s"])


@pytest.mark.parametrize("argv,needle", [(["bench", "nope", "--shape", "4"], "no op named"),
                                         (["bench", "add", "--shape", "4xq"], "--shape"),
                                         (["show", "sum", "--shape", "4x4", "--attr", "axis=5"], "out of range"),
                                         (["show", "add", "--shape", "4", "--target", "cuda:sm_12"], "sm_80, sm_86")])
def test_errors_are_one_line_and_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kiln: error:") and needle in err and "Traceback" not in err


def test_attrs_take_literals_and_the_shell_words_for_booleans():
    from kiln.cli.args import parse_attrs
    got = parse_attrs("sum", ["axis=(0, 2)", "keepdims=true", "layout=NHWC", "flip=FALSE", "scalar=0.5"])
    assert got == {"axis": (0, 2), "keepdims": True, "layout": "NHWC", "flip": False, "scalar": 0.5}
    assert main(["show", "sum", "--shape", "4x4", "--attr", "axis=1", "--attr", "keepdims=true"]) == 0


def test_console_entry_point_runs():
    res = subprocess.run([sys.executable, "-m", "kiln.cli", "ops"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "matmul" in res.stdout
