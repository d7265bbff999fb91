"""Each study's quick preset runs end to end and shows its finding (multi-minute: marked slow)."""

import pytest

import diffmjx

pytestmark = pytest.mark.slow


def test_cube_toss_demo_quick(tmp_path):
    from experiments import cube_toss

    rows = cube_toss.run(diffmjx.Config.from_yaml(cube_toss.DEFAULT_PRESET), tmp_path, quick=True)
    diff, mjx_euler = rows[0], rows[3]
    assert diff["rel_error"] < 0.02
    assert mjx_euler["rel_error"] > 1.0
    assert (tmp_path / "cube_toss.csv").exists() and (tmp_path / "cube_toss.png").exists()


def test_tossed_primitives_quick(tmp_path):
    from experiments import tossed_primitives as tp

    cfg = diffmjx.Config.from_yaml(tp.DEFAULT_PRESET)
    table = tp.run(cfg, tmp_path, quick=True)
    by = {(t["primitive"], t["method"]): t for t in table}
    for kind in ("ball", "cube", "capsule", "cylinder", "ellipsoid"):
        # DiffMJX is an order of magnitude closer to the converged gradient than MJX at dt 0.002
        assert by[kind, "diffmjx"]["median_sweep_error"] < 0.1 * by[kind, "mjx"]["median_sweep_error"]
    assert (tmp_path / "tossed_primitives_table.md").exists()
