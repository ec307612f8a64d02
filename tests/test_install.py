"""The package as a user installs it: every subpackage in the wheel and nothing
else, the CPU-only xgboost, one version constant, ``kiln --version`` and
``python -m kiln``. (``.ci/run`` also installs the wheel in a clean
environment and runs ``kiln ops`` outside the source tree.)"""
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kiln
from kiln import version
from kiln.cli import build_parser
from kiln.runtime import cache

ROOT = Path(kiln.__file__).resolve().parent
NOT_SHIPPED = {"tests", "benchmarks", "tutorials", "docs"}
LEFT_OUT = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
                                  ".pytest_cache")


def setuptools_here_builds_wheels() -> bool:
    """setuptools 70.1+ builds wheels itself; an older one (a Python 3.11 venv
    ships 65.5) needs the `wheel` package, so pip must fetch a build environment."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2]) >= (70, 1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the tree (a build leaves files beside the sources)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=LEFT_OUT)
    isolation = ["--no-build-isolation"] if setuptools_here_builds_wheels() else []
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "-w",
                          str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (path,) = (tmp / "dist").glob("kiln-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_holds_every_package_and_module_and_nothing_else(wheel):
    names = set(wheel.namelist())
    packages = {p.parent.relative_to(ROOT) for p in ROOT.glob("**/__init__.py")
                if not ({p.parts[len(ROOT.parts)]} & (NOT_SHIPPED | {".venv", "build"}))}
    assert Path("schedules/cuda") in packages
    for package in packages:
        for module in (ROOT / package).glob("*.py"):
            if (package, module.name) != (Path("."), "setup.py"):
                assert f"kiln/{(package / module.name).as_posix()}" in names, module
    shipped_tops = {n.split("/")[1] for n in names if n.startswith("kiln/") and n.count("/") > 1}
    assert not shipped_tops & NOT_SHIPPED and "kiln/setup.py" not in names


def test_the_wheel_metadata_names_the_version_and_the_cpu_xgboost(wheel):
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    text = wheel.read(meta).decode()
    assert f"\nVersion: {kiln.__version__}\n" in text
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)", text, flags=re.M)
    assert "xgboost-cpu" in requires and "xgboost" not in requires


def test_one_version_constant():
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", kiln.__version__)
    assert cache.VERSION is kiln.__version__ is version.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'version = {attr = "kiln.version.__version__"}' in pyproject and not re.search(r'^version = "', pyproject,
                                                                                    flags=re.M)


def test_version_flag_and_help(capsys):
    import tvm

    assert "--version" in build_parser().format_help()
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"kiln {kiln.__version__} (TVM {tvm.__version__})"


def test_python_dash_m_kiln_runs_the_command(tmp_path):
    res = subprocess.run([sys.executable, "-m", "kiln", "ops"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "matmul" in res.stdout


def test_no_module_imports_the_package_root_from_below():
    """Arrows point one way: a module inside a subpackage imports sibling
    modules and subpackages, never names of the package root (``kiln``'s
    ``__init__``), which imports them."""
    import ast

    offenders = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_SHIPPED | {".venv", "build"} or len(rel.parts) == 1:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "kiln" for a in node.names):
                offenders.append(f"{rel}: import kiln")
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.module == "kiln" or (node.level == len(rel.parts) and node.module is None):
                root_names = [a.name for a in node.names
                              if not (ROOT / a.name).is_dir() and not (ROOT / f"{a.name}.py").is_file()]
                offenders += [f"{rel}: imports {n} from the package root" for n in root_names]
    assert offenders == []
