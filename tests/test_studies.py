"""Each study's quick preset runs end to end and shows its finding (multi-minute: marked slow)."""

import numpy as np
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


def test_billiard_quick(tmp_path):
    from experiments import billiard

    res = billiard.run(diffmjx.Config.from_yaml(billiard.DEFAULT_PRESET), tmp_path, quick=True, fresh=True)
    sweep, by = res["sweep"], {(r["study"], r["method"]): r for r in res["summary"]}
    miss = sweep["miss"]
    assert miss.sum() >= 2  # the sweep has shots where the balls never touch
    # plain DiffMJX: exactly no signal where the balls miss; CFD: a signal pointing towards the hit
    assert np.all(np.abs(sweep["diffmjx_grad"][miss]) < billiard.ZERO)
    assert np.all(np.abs(sweep["cfd_grad"][miss]) > 1e-4)
    assert np.all(np.sign(sweep["cfd_grad"][miss]) == np.sign(sweep["u"][miss]))
    # descent from a missing start: CFD reaches the target, plain DiffMJX never moves
    assert res["descent_cfd"][-1] < billiard.MISS_LOSS_THRESHOLD
    assert res["descent_plain"][-1] == pytest.approx(res["descent_plain"][0], abs=1e-12)
    # gravity-free variant (Fig. 19): where the balls miss, DTO unrolls long forward steps that fall
    # differently for each u, so its CFD gradient wiggles around the resolved one; backsolve's adjoint
    # solve picks its own steps: monotone on each side, and closer (quick: 1.41 vs 1.00, 6.0 vs 2.7 %)
    dto, bs = by["fig19", "cfd_checkpoint"], by["fig19", "cfd_backsolve"]
    assert dto["oscillation"] > 1.2 and bs["oscillation"] < 1.05
    assert bs["miss_median_rel_dev_resolved"] < 0.04
    assert dto["miss_median_rel_dev_resolved"] > 1.5 * bs["miss_median_rel_dev_resolved"]
    # through a hit, autodiff is right only if the contact force switches on continuously
    jump, smooth = res["hits"]
    assert jump["impedance_at_touch"] == pytest.approx(0.9) and jump["ad_rel_error_vs_fd"] > 1.0
    assert smooth["impedance_at_touch"] == 0.0 and smooth["ad_rel_error_vs_fd"] < 0.05
    assert smooth["fd_rel_diff_vs_c_engine"] < 0.05  # DiffMJX's forward agrees with the C engine
    assert (tmp_path / "billiard.png").exists() and (tmp_path / "billiard_summary.csv").exists()
