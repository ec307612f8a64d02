"""The documentation site builds without warnings, and what it documents has docstrings.

The build is the one CI runs (``make -C docs html-noplot`` with ``-W --keep-going``):
the tutorials are rendered but not executed; ``tests/test_tutorials.py`` runs them.
"""
import ast
import html as html_lib
import importlib
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
# the modules docs/api/index.rst documents
MODULES = ["kiln", "kiln.te", "kiln.nn", "kiln.nn.functional", "kiln.autotune", "kiln.runtime", "kiln.frontend",
           "kiln.graph", "kiln.bench", "kiln.strategy"]
# what a build writes into docs/ (.gitignore lists them)
GENERATED = ("_build", "auto_tutorials", "generated", "sg_execution_times.rst")


def public_names(module) -> list[str]:
    """A module's ``__all__``, else the functions and classes it defines without a leading underscore."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, value in vars(module).items()
            if not name.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__]


def test_the_api_page_names_the_documented_modules():
    listed = re.findall(r"^   (kiln\S*)$", (ROOT / "docs" / "api" / "index.rst").read_text(), re.MULTILINE)
    assert listed == MODULES


@pytest.mark.parametrize("modname", MODULES)
def test_public_names_have_docstrings(modname):
    module = importlib.import_module(modname)
    assert inspect.getdoc(module), f"{modname} has no module docstring"
    names = public_names(module)
    assert names, f"{modname} has no public names"
    documented = [name for name in names if inspect.ismodule(value := getattr(module, name))
                  or inspect.isroutine(value) or inspect.isclass(value)]
    missing = [name for name in documented if not inspect.getdoc(getattr(module, name))]
    assert not missing, f"public names of {modname} without a docstring: {missing}"


def tutorial_title(path: Path) -> str:
    """The reST title that opens a tutorial's docstring (the gallery's name for it)."""
    lines = ast_docstring(path).strip().splitlines()
    assert len(lines) >= 2 and re.fullmatch(r"=+", lines[1]) and len(lines[1]) >= len(lines[0]), \
        f"{path.name}'s docstring does not open with a title underlined with '='"
    return lines[0]


def ast_docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.name)
def test_tutorials_have_a_title_and_sections(path):
    tutorial_title(path)
    headings = re.findall(r"^# %%\n# (.+)\n# -+\n", path.read_text(), re.MULTILINE)
    assert len(headings) >= 3, f"{path.name} has {len(headings)} section headings"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")
    pytest.importorskip("sphinx_gallery", reason="the docs extra is not installed: pip install -e '.[docs]'")
    # A copy of the sources beside a link to the tutorials: what the build generates (the gallery's
    # pages, the API's) stays out of the tree, and each test worker builds its own.
    out = tmp_path_factory.mktemp("site")
    shutil.copytree(ROOT / "docs", out / "docs", ignore=shutil.ignore_patterns(*GENERATED))
    (out / "tutorials").symlink_to(ROOT / "tutorials")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-D", "plot_gallery=0",
                          "-d", str(out / "doctrees"), str(out / "docs"), str(out / "html")],
                         capture_output=True, text=True, timeout=600)
    return res, out / "html"


def test_the_site_builds_without_warnings(site):
    res, html = site
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert (html / "index.html").is_file()


def dump_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of ``page`` after headless Chromium has rendered it (scripts run)."""
    res = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (Debian's chromium package)")
def test_a_browser_finds_the_gallery_and_the_api(site, tmp_path):
    _, html = site  # whether the build warned is the test above's to say
    index = dump_dom(html / "index.html", tmp_path)
    assert 'href="auto_tutorials/index.html"' in index, "the index does not link the gallery"
    assert 'href="api/index.html"' in index, "the index does not link the API reference"
    api = dump_dom(html / "api" / "index.html", tmp_path)
    for modname in MODULES:
        assert f'href="generated/{modname}.html"' in api, f"the API reference does not link {modname}'s page"
    gallery = dump_dom(html / "auto_tutorials" / "index.html", tmp_path)
    entries = re.findall(r'<div class="sphx-glr-thumbcontainer"[^>]*><img [^>]*src="([^"]+)">\s*'
                         r'<p><a class="reference internal" href="([^"]+)">.*?'
                         r'<div class="sphx-glr-thumbnail-title">([^<]+)</div>', gallery, re.DOTALL)
    assert [(thumb, href, html_lib.unescape(title).replace("\u2019", "'")) for thumb, href, title in entries] == [
        (f"../_images/sphx_glr_{path.stem}_thumb.png", f"{path.stem}.html", tutorial_title(path)) for path in TUTORIALS]
    assert all((html / "auto_tutorials" / thumb).is_file() for thumb, _, _ in entries)
