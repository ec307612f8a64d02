"""Package discovery for kiln's layout; everything else is in pyproject.toml.

The repository root is the package ``kiln`` (``package-dir = {"kiln" = "."}``).
setuptools' ``[tool.setuptools.packages.find]`` names the packages it finds
relative to the folder it searches and cannot prefix them, so it would install
``te``, ``nn``, ... as top-level packages; here every package found under the
root (a folder with an ``__init__.py``) becomes ``kiln.<name>``, so a new
subpackage ships without being listed anywhere.
"""
from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

NOT_SHIPPED = ["tests", "benchmarks", "tutorials", "build", "dist", "venv"]


class BuildPy(build_py):
    """Every module of the root package except this file (it would ship as ``kiln.setup``)."""

    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir) if m[:2] != ("kiln", "setup")]


setup(packages=["kiln", *(f"kiln.{name}" for name in find_packages(
          where=".", exclude=[pattern for top in NOT_SHIPPED for pattern in (top, f"{top}.*")]))],
      cmdclass={"build_py": BuildPy})
