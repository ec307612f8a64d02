"""Layers that stay layers: every import in the package (at module level or
inside a function) points down the layer order, and no modules import each
other in a circle.

The order (DESIGN.md, "Layout"): ``te`` < ``schedules`` < ``strategy`` <
``runtime`` < ``graph`` < ``nn`` < ``frontend`` < ``autotune`` < ``bench`` <
``cli``; the modules at the package root below them (``errors``, ``config``,
``version``, ``outputs``, ``hooks``, ``tvm_import``) import no layer, and
``__main__`` (``python -m kiln``) is the command's. A
package's ``__init__`` gathers its modules' public names, so an import of a
name from a package counts as an arrow to the package's layer, but not as an
edge of a circle (``from ..te import get_op`` in ``te/conv.py`` is no circle
with ``te/__init__.py`` importing ``te/conv.py``).
"""
from __future__ import annotations

import ast
from pathlib import Path

import kiln

ROOT = Path(kiln.__file__).resolve().parent
LAYERS = ("te", "schedules", "strategy", "runtime", "graph", "nn", "frontend", "autotune", "bench", "cli")
BASE = ("errors", "config", "version", "outputs", "hooks", "tvm_import")
NOT_SHIPPED = {"tests", "benchmarks", "tutorials", "docs", ".venv", "build"}


def _modules() -> dict[str, Path]:
    """Dotted name (relative to ``kiln``; a package by its own name) -> file."""
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_SHIPPED or rel.parts[0].endswith(".egg-info") or rel == Path("setup.py"):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _imports(name: str, path: Path) -> set[str]:
    """The kiln modules ``name`` imports (a name imported from a package
    counts as that package, or as its submodule when it is one)."""
    package = name.split(".") if name in PACKAGES else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name[len("kiln."):] for a in node.names if a.name.startswith("kiln.")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("kiln."):
                module = node.module[len("kiln."):]
            else:
                continue
            targets = [f"{module}.{a.name}".lstrip(".") for a in node.names] + [module]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int | None:
    top = "cli" if name == "__main__" else name.split(".")[0]
    if top in BASE:
        return -1
    return LAYERS.index(top) if top in LAYERS else None


def test_every_module_belongs_to_a_layer():
    assert [name for name in MODULES if name and _layer(name) is None] == []


def test_imports_point_down_the_layers():
    upward = [f"{name} -> {target}" for name, targets in GRAPH.items() if name
              for target in sorted(targets) if target and _layer(target) > _layer(name)]
    assert upward == []


def _circles(edges: dict) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circles():
    edges = {name: {t for t in targets if t not in PACKAGES} for name, targets in GRAPH.items()
             if name not in PACKAGES}
    assert _circles(edges) == []


def test_the_check_sees_an_upward_import_and_a_circle():
    """The checks above are not vacuous: they see what they guard against."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "runtime.build" in GRAPH["runtime.pool"] and _layer("runtime.pool") > _layer("te.registry")
    assert "graph.ir" in GRAPH["graph.lower"]
    assert "strategy.base" in GRAPH["strategy.conv2d"] and "schedules.cpu.conv2d_defaults" in GRAPH["strategy.conv2d"]
    assert "errors" in GRAPH["schedules.dispatch"] and _layer("errors") < _layer("te.registry")
