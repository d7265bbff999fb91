"""One-way layers: each public package imports on its own, no project module imports itself back,
and inside ``diffmjx`` every import goes down (or sideways) the ordered list of layers
:data:`LAYERS`.

The import graph is read from the source (``ast``), so a cycle fails here even where the import
order happens to make it work at run time.
"""

import ast
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("diffmjx", "cfd", "experiments")

# The library's internal layers, bottom first (names relative to ``diffmjx``; ``__init__`` is the
# package itself). A module may import modules of its own layer or of layers below it, never above.
# A new module must be placed here; submodules of the packages in NESTED take their parent's layer.
LAYERS = (
    (
        "_mjx",
        "registry",
        "knobs",
        "config",
        "runtime",
        "profiling",
        "checkpoint",
    ),  # MJX internals, typed config, process settings, checkpoint files
    ("physics",),  # the physics package (its docstring only) ...
    ("physics.impedance", "physics.rules"),  # MuJoCo's solimp spline; value-with-derivative rules
    (
        "physics.constraint",
        "physics.solver",
        "physics.tendon",
        "physics.manifold",
        "physics.smooth",
    ),  # rows, solve, tendons, manifold, kinematics
    ("physics.constants",),  # derived model constants (a traced mj_setConst)
    ("physics.collision.soft",),  # smoothed collision, bottom up ...
    ("physics.collision.frames",),
    ("physics.collision.pairs", "physics.collision.box_box", "physics.collision.sdf"),
    ("physics.collision.driver",),
    ("physics.collision",),  # ... up to its package
    ("physics.checks",),  # up-front validation
    ("physics.cfd",),  # contacts from distance
    ("physics.dynamics",),  # ... up to the vector field: forward
    ("integration",),  # the integration package (its docstring only) ...
    ("integration.term", "integration.stepsize", "integration.wrapped"),  # one period's Diffrax term; its
    # step-size controller; the base of DiffMJX's solver wrappers
    ("integration.adjoints",),  # gradient modes of a period's solve
    ("integration.saltation",),  # the force jump at a touchdown in a period's derivatives
    ("integration.period",),  # one Diffrax period
    ("integration.fixed_step",),  # MJX's fixed-step integrators
    ("integration.method",),  # config -> integration method
    ("integration.integrate",),  # ... up to step, rollout
    ("jacobians",),  # per-period Jacobians along a rollout (linearize)
    ("gradcheck", "reference"),  # gradient checks, C-engine references
    ("scenes",),  # scenes and their helpers
    ("mpc.ilqr",),  # iLQR iterations on the period Jacobians ...
    ("mpc.planners", "mpc.plants"),  # the MPC planner kinds and their knobs; what closed loops plan on and execute on
    ("mpc", "sysid"),  # ... the applications over the core
    ("__init__",),  # the public API
)
NESTED = ("integration.adjoints", "scenes", "sysid")


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


def layer_of(module: str, layers=LAYERS, nested=NESTED, package: str = "diffmjx") -> int | None:
    """Index in ``layers`` of ``module`` (a full dotted name under ``package``), or None if unplaced."""
    name = "__init__" if module == package else module.removeprefix(f"{package}.")
    for parent in nested:
        if name.startswith(f"{parent}."):
            name = parent
    return next((i for i, layer in enumerate(layers) if name in layer), None)


def layer_violations(graph: dict[str, set[str]], layers=LAYERS, nested=NESTED, package: str = "diffmjx") -> list[str]:
    """Messages for every module of ``package`` missing from ``layers``, every name in ``layers``
    that is no module, and every import of a module in a higher layer."""
    mods = {m for m in graph if m == package or m.startswith(f"{package}.")}
    out = [
        f"{m} is in no layer: place it in LAYERS (tests/test_layers.py)"
        for m in sorted(mods)
        if layer_of(m, layers, nested, package) is None
    ]
    known = {"__init__" if m == package else m.removeprefix(f"{package}.") for m in mods}
    out += [f"LAYERS names {n!r}, which is no module of {package}" for layer in layers for n in layer if n not in known]
    for m in sorted(mods):
        here = layer_of(m, layers, nested, package)
        for d in sorted(graph[m] & mods):
            there = layer_of(d, layers, nested, package)
            if here is not None and there is not None and there > here:
                out.append(f"{m} (layer {here}) imports {d} (layer {there}), which sits above it")
    return out


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages its modules import."""
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        top = mod.split(".")[0]
        out.setdefault(top, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != top)
    return out


PUBLIC = ("diffmjx", "cfd", "diffmjx.physics.collision", "diffmjx.scenes", "diffmjx.reference")

# One interpreter imports the third-party dependencies (most of an import's seconds), then forks a
# child per package that imports only that package: each child starts with no project module loaded.
_FORK_IMPORTS = """
import json, os, sys, traceback
import diffrax, equinox, jax, mujoco, numpy, optax
from mujoco import mjx
assert not any(n.split(".")[0] in ("diffmjx", "cfd", "experiments") for n in sys.modules)
out = {}
for package in sys.argv[1:]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            __import__(package)
            msg = ""
        except BaseException:
            msg = traceback.format_exc()
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out[package] = f.read()
    os.waitpid(pid, 0)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh_imports():
    """Package -> the traceback of importing it with no project module loaded ("" if it imported)."""
    run = subprocess.run(
        [sys.executable, "-c", _FORK_IMPORTS, *PUBLIC], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", PUBLIC)
def test_public_package_imports_in_a_fresh_interpreter(package, fresh_imports):
    assert fresh_imports[package] == "", fresh_imports[package]


def test_no_import_cycle_between_project_modules():
    graph = import_graph(ROOT)
    assert "diffmjx.physics.dynamics" in graph and "diffmjx.physics.constraint" in graph["diffmjx.physics.dynamics"]
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
    assert "diffmjx.physics.collision.box_box" not in graph["diffmjx.physics.collision.pairs"]
    assert "diffmjx.physics.collision.pairs" not in graph["diffmjx.physics.collision.box_box"]


def test_library_modules_import_down_the_layers():
    """Inside ``diffmjx`` every import goes to the importer's layer or one below it (:data:`LAYERS`),
    and every module is placed: ``_mjx`` and ``config`` at the bottom, then the solimp spline, rows
    and solve, the collision stage, checks, contacts from distance, the vector field, integration,
    and the applications on top."""
    graph = import_graph(ROOT, ("diffmjx",))
    assert "diffmjx.physics.cfd" in graph["diffmjx.physics.dynamics"]
    problems = layer_violations(graph)
    assert not problems, "\n".join(problems)


ARCHITECTURE = ROOT / "docs" / "architecture.md"
MODULE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def module_table(page: str, heading: str = "## Modules") -> str:
    """The module table of a Markdown page: the text from ``heading`` to the next ``## `` heading
    ("" if the page has no such heading)."""
    start = page.find(f"\n{heading}\n")
    if start < 0:
        return ""
    rest = page[start + len(heading) + 2 :]
    end = rest.find("\n## ")
    return rest if end < 0 else rest[:end]


def architecture_problems(modules, table: str, layers=LAYERS, nested=NESTED, package: str = "diffmjx") -> list[str]:
    """Messages for every module of ``package`` (full dotted names) whose name relative to it
    (``__init__`` for the package itself) is not backticked in ``table``; every backticked dotted
    name there that starts with a subpackage (``collision.``, ``sysid.``) and is no module; and
    every row (its module in the second column) placed above a row of a higher layer."""
    names = {"__init__" if m == package else m.removeprefix(f"{package}.") for m in modules}
    mentioned = set(re.findall(r"`([^`]+)`", table))
    out = [f"`{n}` has no row in the module table of docs/architecture.md" for n in sorted(names - mentioned)]
    subpackages = {n.split(".")[0] for n in names if "." in n}
    out += [
        f"the module table of docs/architecture.md names `{t}`, which is no module of {package}"
        for t in sorted(mentioned - names)
        if MODULE_NAME.fullmatch(t) and "." in t and t.split(".")[0] in subpackages
    ]
    rows = [m.group(1) for line in table.splitlines() if (m := re.match(r"\|[^|]*\|\s*`([^`]+)`\s*\|", line))]
    placed = [(r, layer_of(package if r == "__init__" else f"{package}.{r}", layers, nested, package)) for r in rows]
    placed = [(r, i) for r, i in placed if i is not None]
    out += [
        f"`{b}` (layer {j}) follows `{a}` (layer {i}) in the module table of docs/architecture.md: order the rows as LAYERS"
        for (a, i), (b, j) in itertools.pairwise(placed)
        if j < i
    ]
    return out


def test_architecture_page_has_a_row_for_every_module():
    """``docs/architecture.md``'s module table names every module of ``diffmjx`` (``__init__`` for
    the package), names no module that does not exist, and lists them in the order of :data:`LAYERS`.

    Submodules of the nested packages (``adjoints``, ``collision``, ``scenes``, ``sysid``) each
    need a row of their own, not only their package's: each has one concern a newcomer looks for
    (``sysid.parameter`` is where a parameter field goes, ``adjoints.sensitivity`` one gradient
    mode), and a package row alone would let a new submodule go unmentioned."""
    graph = import_graph(ROOT, ("diffmjx",))
    table = module_table(ARCHITECTURE.read_text())
    assert table, "docs/architecture.md has no '## Modules' section"
    problems = architecture_problems(set(graph), table)
    assert not problems, "\n".join(problems)


def test_architecture_check_names_missing_stale_and_misplaced_modules():
    """The checker itself, on a made-up package and page: a module with no row is named, a
    backticked subpackage name that is no module is named (a function of a plain module is not),
    and a row above a lower layer's is reported."""
    layers = (("config",), ("sysid",), ("__init__",))
    modules = {"pkg", "pkg.config", "pkg.sysid", "pkg.sysid.train"}
    page = "\n".join(
        [
            "# Page",
            "",
            "## Modules",
            "",
            "| layer | module | what it is |",
            "|---|---|---|",
            "| top | `__init__` | the API, with `config.knob` |",
            "| base | `config` | knobs |",
            "| apps | `sysid` | fits; see `sysid.gone` |",
            "",
            "## Elsewhere",
            "",
            "`sysid.train` and `sysid.other` outside the table do not count",
        ]
    )
    assert architecture_problems(modules, module_table(page), layers, ("sysid",), "pkg") == [
        "`sysid.train` has no row in the module table of docs/architecture.md",
        "the module table of docs/architecture.md names `sysid.gone`, which is no module of pkg",
        "`config` (layer 0) follows `__init__` (layer 2) in the module table of docs/architecture.md: "
        "order the rows as LAYERS",
    ]
    assert module_table("# Page\n") == ""


def mjx_private_uses(path: Path) -> list[str]:
    """Where ``path`` names MJX internals: a ``mujoco.mjx._src`` import, an ``_impl`` attribute, or
    a ``tree_replace`` key into ``_impl`` (docstrings and comments do not count)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and "_src" in (node.module or "").split("."):
            out.append(f"{path.name}:{node.lineno} imports {node.module}")
        elif isinstance(node, ast.Import) and any("_src" in a.name.split(".") for a in node.names):
            out.append(f"{path.name}:{node.lineno} imports {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr in ("_impl", "_src"):
            out.append(f"{path.name}:{node.lineno} reads .{node.attr}")
        elif isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.startswith("_impl.") for k in node.keys
        ):
            out.append(f"{path.name}:{node.lineno} replaces _impl fields")
    return out


def test_only_mjx_module_reaches_into_mjx_internals():
    """``diffmjx._mjx`` is the one module that names ``mujoco.mjx._src`` or MJX's private ``_impl``
    fields; the rest of the library and ``cfd`` call ``_mjx.<function or constant>``."""
    files = [p for pkg in ("diffmjx", "cfd") for p in sorted((ROOT / pkg).rglob("*.py")) if p.name != "_mjx.py"]
    found = [use for p in files for use in mjx_private_uses(p)]
    assert not found, "\n".join(found)
    assert mjx_private_uses(ROOT / "diffmjx" / "_mjx.py")  # the checker sees them where they are


def test_layer_check_fails_on_an_upward_import_and_an_unplaced_module():
    """The checker itself, on a made-up graph: a low module importing a high one is caught, a
    module in no layer is named, a nested package's new submodule takes its parent's layer, and a
    stale name in the list is reported."""
    layers = (("_mjx", "config"), ("dynamics",), ("sysid",), ("__init__",))
    graph = {
        "pkg": {"pkg.dynamics"},
        "pkg._mjx": set(),
        "pkg.config": {"pkg._mjx"},
        "pkg.dynamics": {"pkg.config"},
        "pkg.sysid": {"pkg.sysid.loss"},
        "pkg.sysid.loss": {"pkg.dynamics", "pkg.sysid"},  # new submodule: the sysid layer
    }
    assert layer_violations(graph, layers, ("sysid",), "pkg") == []
    graph["pkg.config"] = {"pkg.dynamics"}
    graph["pkg.newmod"] = set()
    problems = layer_violations(graph, (*layers, ("gone",)), ("sysid",), "pkg")
    assert problems == [
        "pkg.newmod is in no layer: place it in LAYERS (tests/test_layers.py)",
        "LAYERS names 'gone', which is no module of pkg",
        "pkg.config (layer 0) imports pkg.dynamics (layer 1), which sits above it",
    ]


def test_cycle_check_fails_on_a_reintroduced_cycle(tmp_path):
    """The checker itself: today's layout of two packages that import each other is caught, both as
    a module cycle and as packages that import both ways."""
    (tmp_path / "core").mkdir()
    (tmp_path / "plugin").mkdir()
    (tmp_path / "core" / "__init__.py").write_text("from core.dynamics import forward\n")
    (tmp_path / "core" / "dynamics.py").write_text("from plugin import rows\n\ndef forward(): ...\n")
    (tmp_path / "core" / "consts.py").write_text("FLOOR = 1e-4\n")
    (tmp_path / "plugin" / "__init__.py").write_text("from plugin.rows import rows\n")
    (tmp_path / "plugin" / "rows.py").write_text(
        "from core.consts import FLOOR\nfrom . import helper\n\ndef rows(): ...\n"
    )
    (tmp_path / "plugin" / "helper.py").write_text("import core\n")
    graph = import_graph(tmp_path, ("core", "plugin"))
    assert graph["plugin.rows"] == {"core.consts", "plugin.helper"}
    assert find_cycle(graph) is not None  # core -> core.dynamics -> plugin -> plugin.rows -> plugin.helper -> core
    assert find_cycle(package_graph(graph)) == ["core", "plugin", "core"]
    (tmp_path / "plugin" / "helper.py").write_text("")
    (tmp_path / "core" / "dynamics.py").write_text("def forward(): ...\n")
    assert find_cycle(import_graph(tmp_path, ("core", "plugin"))) is None


LONG_MODULE = 420  # lines; a longer module of the library says why in its docstring
LONG_REASON = "Why one file of this length"


def test_long_library_modules_state_why():
    """A module of ``diffmjx`` over about 400 lines is one concept that reads better whole, and its
    docstring says so (a sentence starting "Why one file of this length"); otherwise split it."""
    unexplained = []
    for path in sorted((ROOT / "diffmjx").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > LONG_MODULE and LONG_REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not unexplained, f"long modules without a stated reason: {', '.join(unexplained)}"


def private_crossings(root: Path = ROOT) -> list[str]:
    """Every use of a project module's private name (``_name``) from another file: ``from m import
    _name`` or ``m._name`` where ``m`` was imported as a project module. ``diffmjx._mjx``, the one
    gateway into MJX's internals, is a module, not a private name, and may be imported."""
    out = []
    files = [p for pkg in (*PACKAGES, "tests") for p in sorted((root / pkg).rglob("*.py"))]
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(root)
        modules: set[str] = set()  # local names bound to project modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                for a in node.names:
                    if a.name.startswith("_") and not (a.name == "_mjx" or a.name.startswith("__")):
                        out.append(f"{where}:{node.lineno} imports {node.module}.{a.name}")
                    elif not a.name[:1].isupper():
                        modules.add(a.asname or a.name)  # a submodule or a function: attribute access below
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PACKAGES:
                        modules.add(a.asname or a.name.split(".")[0])
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr != "_mjx"
            ):
                out.append(f"{where}:{node.lineno} uses {node.value.id}.{node.attr}")
    return out


def test_no_private_name_crosses_a_module_boundary():
    assert private_crossings() == []
