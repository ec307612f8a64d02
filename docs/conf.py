"""Sphinx configuration of kiln's documentation site.

The tutorials in ``../tutorials`` are rendered by sphinx-gallery, executed
(``make html``) or not (``make html-noplot``, ``-D plot_gallery=0``); the API
reference is generated from the docstrings by autosummary and autodoc.
"""
import shutil
import time
from importlib.metadata import version as installed_version
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective
from sphinx_gallery.scrapers import figure_rst, matplotlib_scraper

project = "kiln"
author = "the kiln authors"
copyright = "the kiln authors"  # noqa: A001 (the name Sphinx reads)
release = installed_version("kiln")  # the installed kiln, which autodoc documents
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["api/_templates"]
exclude_patterns = ["_build", "api/_templates"]
# sphinx_gallery_conf holds this file's scraper functions, which Sphinx cannot
# pickle into its environment cache; it rebuilds instead, and says so.
suppress_warnings = ["config.cache"]

# The docstrings are numpy-style; napoleon renders them as they are written.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autosummary_generate = True
autosummary_ignore_module_all = False  # a module's public names are its __all__
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "pydata_sphinx_theme"
html_title = f"kiln {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}


_since = {"time": 0.0}


def start_clock(gallery_conf, fname, when):
    """Before each tutorial runs, note the time: images older than it are not its own."""
    if when == "before":
        _since["time"] = time.time()


def written_images(block, block_vars, gallery_conf):
    """Show the images a tutorial writes to its directory, as its own figures.

    sphinx-gallery runs a tutorial in the tutorial's directory; a PNG that
    appears there during a code block (a tuning curve that
    ``kiln.autotune.plot`` writes and closes) is moved into the gallery's
    images, where the block's output shows it.
    """
    src = Path(block_vars["src_file"])
    since, _since["time"] = _since["time"], time.time()
    paths = block_vars["image_path_iterator"]
    images = []
    for png in sorted(src.parent.glob("*.png")):
        if png.stat().st_mtime >= since:
            image = next(paths)
            shutil.move(png, image)
            images.append(image)
    return figure_rst(images, gallery_conf["src_dir"])


sphinx_gallery_conf = {
    "examples_dirs": ["../tutorials"],
    "gallery_dirs": ["auto_tutorials"],
    "filename_pattern": r"/\d\d_",  # run every numbered tutorial when plotting is on
    "image_scrapers": (matplotlib_scraper, written_images),
    "reset_modules": ("matplotlib", start_clock),
    "download_all_examples": False,  # each tutorial is one file in the repository
    "within_subsection_order": "FileNameSortKey",
}


class SupportedOps(SphinxDirective):
    """``.. supported-ops:: onnx`` (or ``aten``): the op names ``kiln.frontend``
    imports, read from its converter tables when the site builds, so the
    list on the page is the one ``kiln ops --onnx`` / ``--aten`` prints."""

    required_arguments = 1

    def run(self):
        from kiln.frontend import supported_aten_ops, supported_onnx_ops

        lists = {"onnx": supported_onnx_ops, "aten": supported_aten_ops}
        if self.arguments[0] not in lists:
            raise self.error(f"supported-ops takes one of {', '.join(lists)}, got {self.arguments[0]!r}")
        names = [name.removeprefix("aten.") for name in lists[self.arguments[0]]()]
        paragraph = nodes.paragraph()
        for i, name in enumerate(names):
            if i:
                paragraph += nodes.Text(", ")
            paragraph += nodes.literal(name, name)
        paragraph += nodes.Text(f" ({len(names)}).")
        return [paragraph]


def setup(app):
    app.add_directive("supported-ops", SupportedOps)
