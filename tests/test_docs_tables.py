"""Every table of measured figures in README.md and docs/ is what docs/build_tables.py writes from the CSV."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tables_equal_what_the_committed_csv_gives():
    run = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build_tables.py"), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_changed_figure_is_caught(tmp_path, monkeypatch):
    """A typed-over number in a marked table makes the check fail, naming the file and table."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import build_tables
    finally:
        sys.path.pop(0)
    doc = tmp_path / "page.md"
    doc.write_text("<!-- table: demo -->\n| a |\n|---|\n| 1 |\n<!-- /table -->\n")
    monkeypatch.setattr(build_tables, "TABLES", {"demo": lambda: "| a |\n|---|\n| 2 |\n"})
    monkeypatch.setattr(build_tables, "documents", lambda: [doc])
    monkeypatch.setattr(build_tables, "ROOT", tmp_path)
    assert build_tables.stale() == ["page.md: demo"]
    build_tables.main([])
    assert "| 2 |" in doc.read_text() and build_tables.stale() == []


def test_a_table_in_a_list_item_keeps_its_indent(monkeypatch):
    """Markers indented alike (a table inside a list item) indent the written table with them."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import build_tables
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(build_tables, "TABLES", {"demo": lambda: "| a |\n|---|\n| 2 |\n"})
    page = "- item:\n\n  <!-- table: demo -->\n  | a |\n  |---|\n  | 1 |\n  <!-- /table -->\n\n  more\n"
    assert build_tables.render(page, "page.md") == page.replace("| 1 |", "| 2 |")


# A number with a decimal point or an exponent (0.62, 1.2e-05, 1e3): what a measured figure looks like.
NUMBER = re.compile(r"\d\.\d|\d[eE][-+]?\d")
MARKED = re.compile(r"<!-- table: [\w-]+ -->\n.*?<!-- /table -->", re.S)

# Typed tables that hold no measurement, by page and the start of their header row.
NOT_MEASURED = {
    # configuration: defaults, allowed values and meanings of the config fields
    ("docs/config.md", "| field | default | allowed | meaning |"),
    # the constraint solver's knobs and their defaults
    ("docs/solver.md", "| knob | where | effect |"),
    # the planner's knobs: the two presets' values
    ("docs/mpc.md", "| field | default | quick preset | meaning |"),
    # the toy's contact models: their equations and closed-form constants, not measurements
    ("docs/toy_point_mass.md", "| model | step | true continuous-time `q(T)` |"),
    # the study index: a command per row, what it measures, its run time and outputs (no results: those are the studies' pages' written tables)
    ("docs/index.md", "| command | what it shows | outputs |"),
    # the sysid parameters: which MjModel fields, which element names them, how many columns each has
    ("docs/sysid.md", "| field | element | columns |"),
    # the cube sysid's training knobs and their defaults
    ("docs/sysid.md", "| knob | default | meaning |"),
    # the smoothed pairs: MJX's case splits (its thresholds) against DiffMJX's blends
    ("docs/collision.md", "| pair | MJX's split | DiffMJX |"),
    # the gradient-mode decision table: advice; its one number is the reference solve's tolerance
    ("docs/gradient-modes.md", "| if you have ... | use ... | what it costs |"),
}


def typed_measured_tables(text: str) -> list[tuple[int, str]]:
    """(line, header row) of every Markdown table outside the table markers that holds a number with a
    decimal point or an exponent."""
    text = MARKED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"\s*\|\s*:?-", lines[i + 1]):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            if NUMBER.search("\n".join(lines[i:j])):
                out.append((i + 1, lines[i].strip()))
            i = j
        else:
            i += 1
    return out


def test_measured_tables_are_written_not_typed():
    """Every table of figures in README.md and docs/*.md sits between table markers, unless listed above."""
    allowed = NOT_MEASURED
    typed, used = [], set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        page = str(path.relative_to(ROOT))
        for line, header in typed_measured_tables(path.read_text()):
            hit = {(p, h) for p, h in allowed if p == page and header.startswith(h)}
            used |= hit
            if not hit:
                typed.append(f"{page}:{line}: {header[:80]}")
    assert not typed, "typed tables of figures; write them with docs/build_tables.py:\n" + "\n".join(typed)
    assert used == allowed, f"allowlist entries that match no table: {sorted(allowed - used)}"


def test_a_typed_table_is_found():
    page = (
        "| a | b |\n|---|---|\n| x | 0.62 |\n\n"
        "<!-- table: demo -->\n| a | b |\n|---|---|\n| x | 1.2e-05 |\n<!-- /table -->\n\n"
        "  | knob | default |\n  |---|---|\n  | n | 3 |\n\n"
        "  | c | d |\n  |---|---|\n  | y | 1e3 |\n"
    )
    assert typed_measured_tables(page) == [(1, "| a | b |"), (15, "| c | d |")]
