"""Each study's quick preset runs end to end and shows its finding (multi-minute: marked slow).

The studies run as scripts (``python -m experiments.<study> --quick --out DIR``) and the checks read
the CSV files they write: tests import no study module.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _run(study: str, out: Path, *args: str, **env: str) -> None:
    """Run ``experiments.<study>`` with ``--quick --out out`` and ``args``; ``env`` on top of ours."""
    cmd = [sys.executable, "-m", f"experiments.{study}", "--quick", "--out", str(out), *args]
    run = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]


def _rows(path: Path) -> list[dict]:
    """The rows of a study's CSV, numbers as floats (other cells as written)."""

    def cell(value: str):
        try:
            return float(value)
        except ValueError:
            return value

    with open(path, newline="") as f:
        return [{k: cell(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _columns(path: Path) -> dict[str, np.ndarray]:
    """A study's CSV of numbers as one array per column."""
    rows = _rows(path)
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def test_cube_toss_demo_quick(tmp_path):
    _run("cube_toss", tmp_path)
    rows = _rows(tmp_path / "cube_toss.csv")
    diff, mjx_euler = rows[0], rows[3]
    assert diff["rel_error"] < 0.02
    assert mjx_euler["rel_error"] > 1.0
    assert (tmp_path / "cube_toss.csv").exists() and (tmp_path / "cube_toss.png").exists()


def test_tossed_primitives_quick(tmp_path):
    _run("tossed_primitives", tmp_path)
    by = {(t["primitive"], t["method"]): t for t in _rows(tmp_path / "tossed_primitives_table.csv")}
    for kind in ("ball", "cube", "capsule", "cylinder", "ellipsoid"):
        # DiffMJX is an order of magnitude closer to the converged gradient than MJX at dt 0.002
        assert by[kind, "diffmjx"]["median_sweep_error"] < 0.1 * by[kind, "mjx"]["median_sweep_error"]
    assert (tmp_path / "tossed_primitives_table.md").exists()


ZERO = 1e-20  # experiments.billiard.ZERO: |dL/du| below this is zero (a miss leaves 1e-31 to 4e-21)
MISS_LOSS_THRESHOLD = 0.01  # experiments.billiard.MISS_LOSS_THRESHOLD: the descent reached the target (m)


def test_billiard_quick(tmp_path):
    _run("billiard", tmp_path, "--fresh", DIFFMJX_STAGE_CACHE=str(tmp_path / "stages"))
    sweep = _columns(tmp_path / "billiard.csv")
    by = {(r["study"], r["method"]): r for r in _rows(tmp_path / "billiard_summary.csv")}
    descent = _columns(tmp_path / "billiard_descent.csv")
    miss = sweep["miss"] == 1.0
    assert miss.sum() >= 2  # the sweep has shots where the balls never touch
    # plain DiffMJX: exactly no signal where the balls miss; CFD: a signal pointing towards the hit
    assert np.all(np.abs(sweep["diffmjx_grad"][miss]) < ZERO)
    assert np.all(np.abs(sweep["cfd_grad"][miss]) > 1e-4)
    assert np.all(np.sign(sweep["cfd_grad"][miss]) == np.sign(sweep["u"][miss]))
    # descent from a missing start: CFD reaches the target, plain DiffMJX never moves
    assert descent["loss_cfd"][-1] < MISS_LOSS_THRESHOLD
    assert descent["loss_plain"][-1] == pytest.approx(descent["loss_plain"][0], abs=1e-12)
    # gravity-free variant (Fig. 19): where the balls miss, DTO unrolls long forward steps that fall
    # differently for each u, so its CFD gradient wiggles around the resolved one; backsolve's adjoint
    # solve picks its own steps: monotone on each side, and closer (quick: 1.41 vs 1.00, 6.0 vs 2.7 %)
    dto, bs = by["fig19", "cfd_checkpoint"], by["fig19", "cfd_backsolve"]
    assert dto["oscillation"] > 1.2 and bs["oscillation"] < 1.05
    assert bs["miss_median_rel_dev_resolved"] < 0.04
    assert dto["miss_median_rel_dev_resolved"] > 1.5 * bs["miss_median_rel_dev_resolved"]
    # through a hit, autodiff is right only if the contact force switches on continuously
    jump, smooth = _rows(tmp_path / "billiard_hit_check.csv")
    assert jump["impedance_at_touch"] == pytest.approx(0.9) and jump["ad_rel_error_vs_fd"] > 1.0
    assert smooth["impedance_at_touch"] == 0.0 and smooth["ad_rel_error_vs_fd"] < 0.05
    assert smooth["fd_rel_diff_vs_c_engine"] < 0.05  # DiffMJX's forward agrees with the C engine
    assert (tmp_path / "billiard.png").exists() and (tmp_path / "billiard_summary.csv").exists()


def test_planner_suite_quick(tmp_path):
    """Two tasks, every planner, one start, two plan steps on the C engine: rows for every planner,
    the time ratios near the calibrated budget, scores that say success exactly below 1."""
    _run("planner_suite", tmp_path, "--tasks", "pendulum", "reacher")
    rows = _rows(tmp_path / "planner_suite.csv")
    assert {(r["task"], r["planner"]) for r in rows} == {
        (t, p)
        for t in ("pendulum", "reacher")
        for p in ("sampling", "gradient", "gradient_cfd", "ilqr_cfd", "hybrid_cfd")
    }
    for r in rows:
        assert (r["success"] == "True") == (r["score"] < 1.0)
        assert 0.2 < r["time_ratio"] < 3.0, r
    assert (tmp_path / "planner_suite.png").exists() and (tmp_path / "planner_suite_summary.csv").exists()
