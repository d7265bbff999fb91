"""One-way layers: each public package imports on its own, and no project module imports itself back.

The import graph is read from the source (``ast``), so a cycle fails here even where the import
order happens to make it work at run time.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("diffmjx", "cfd", "experiments")


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> project modules it imports (``from a import b`` counts ``a.b`` where that is a module)."""
    files = {_module_name(root, p): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:  # `import a.b.c` of a non-module attribute: its module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages its modules import."""
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        top = mod.split(".")[0]
        out.setdefault(top, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != top)
    return out


@pytest.mark.parametrize("package", ["diffmjx", "cfd", "diffmjx.collision", "diffmjx.scenes", "diffmjx.reference"])
def test_public_package_imports_in_a_fresh_interpreter(package):
    run = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_no_import_cycle_between_project_modules():
    graph = import_graph(ROOT)
    assert "diffmjx.dynamics" in graph and "diffmjx.constraint" in graph["diffmjx.dynamics"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_layers_import_one_way():
    """``diffmjx`` is the ground floor: ``cfd`` imports it, it imports neither ``cfd`` nor the studies;
    the smoothed pair functions and box-box import nothing from each other."""
    graph = import_graph(ROOT)
    packages = package_graph(graph)
    assert packages["diffmjx"] == set()
    assert packages["cfd"] == {"diffmjx"}
    assert "experiments" not in packages["cfd"]
    assert find_cycle(packages) is None
    assert "diffmjx.collision.box_box" not in graph["diffmjx.collision.pairs"]
    assert "diffmjx.collision.pairs" not in graph["diffmjx.collision.box_box"]


def test_cycle_check_fails_on_a_reintroduced_cycle(tmp_path):
    """The checker itself: today's layout of two packages that import each other is caught, both as
    a module cycle and as packages that import both ways."""
    (tmp_path / "core").mkdir()
    (tmp_path / "plugin").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("from core.dynamics import forward\n")
    (tmp_path / "core" / "dynamics.py").write_text("from plugin import rows\n\ndef forward(): ...\n")
    (tmp_path / "core" / "consts.py").write_text("FLOOR = 1e-4\n")
    (tmp_path / "plugin" / "__init__.py").write_text("from plugin.rows import rows\n")
    (tmp_path / "plugin" / "rows.py").write_text("from core.consts import FLOOR\nfrom . import helper\n\ndef rows(): ...\n")
    (tmp_path / "plugin" / "helper.py").write_text("import core\n")
    graph = import_graph(tmp_path, ("core", "plugin"))
    assert graph["plugin.rows"] == {"core.consts", "plugin.helper"}
    assert find_cycle(graph) is not None  # core -> core.dynamics -> plugin -> plugin.rows -> plugin.helper -> core
    assert find_cycle(package_graph(graph)) == ["core", "plugin", "core"]
    (tmp_path / "plugin" / "helper.py").write_text("")
    (tmp_path / "core" / "dynamics.py").write_text("def forward(): ...\n")
    assert find_cycle(import_graph(tmp_path, ("core", "plugin"))) is None
