"""The API reference builds from the docstrings without a warning (README: ``python docs/build_api.py``)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_api_reference_builds_without_warnings(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build_api.py"), str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "0 warnings" in run.stdout
    for page in ("diffmjx.html", "cfd.html", "diffmjx/integrate.html", "diffmjx/constraint.html"):
        assert (tmp_path / page).is_file(), page
    rollout = (tmp_path / "diffmjx" / "integrate.html").read_text()
    assert "stepsize_controller" in rollout and "Returns" in rollout
