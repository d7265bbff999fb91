"""Every table of measured figures in README.md and docs/ is what docs/build_tables.py writes from the CSV."""

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
