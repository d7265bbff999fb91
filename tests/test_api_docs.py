"""The docs site builds without a warning: the pages (MkDocs, strict: no broken link or anchor) and
the API reference from the docstrings (pdoc) under ``api/`` (README: ``python docs/build_site.py``)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_without_warnings(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build_site.py"), str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "0 warnings" in run.stdout
    for page in ("index.html", "getting-started/index.html", "sysid/index.html", "mpc/index.html"):
        assert (tmp_path / page).is_file(), page
    for page in ("diffmjx.html", "cfd.html", "diffmjx/integration/integrate.html", "diffmjx/physics/constraint.html"):
        assert (tmp_path / "api" / page).is_file(), page
    rollout = (tmp_path / "api" / "diffmjx" / "integration" / "integrate.html").read_text()
    assert "stepsize_controller" in rollout and "Returns" in rollout
    # the nav's link to the reference resolves inside the site
    assert 'href="api/index.html"' in (tmp_path / "index.html").read_text()
