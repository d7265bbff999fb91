"""Gradient fidelity at the library defaults on a small fixed subset of the fidelity suite's scenes
(``diffmjx.scenes.fidelity``; the study ``experiments.fidelity`` runs all of them).

Every figure is a relative gradient error against central differences of a 1e-12 solve, asserted
with a wide margin to its measured value (in the comments), so rounding on another machine
cannot move it across its bound.
"""

import subprocess
import sys
from pathlib import Path

import jax
import pytest

import diffmjx
from diffmjx.scenes import fidelity

ROOT = Path(__file__).resolve().parents[1]

jax.config.update("jax_enable_x64", True)


def _errors(family, shots, horizon, *overrides):
    sc = fidelity.scene(family, 0)
    states = {k: v[shots] for k, v in fidelity.shots(sc, 5, 0).items()}
    mx = fidelity.model(sc)
    cfg = diffmjx.Config().override(*overrides)
    ref = fidelity.truth(mx, cfg, states, horizon)
    assert (ref["agreement"] < fidelity.TRUTH_AGREEMENT).all()  # the reference itself converged
    res = fidelity.measure(mx, cfg, states, ref, horizon)
    assert not res["exhausted"].any() and not res["wrong_sign"].any()
    return res["rel_error"]


@pytest.fixture(scope="module")
def first_bounce():
    """Box-plane, the 3 m/s drop (shot 3), gradient of the position after its first bounce."""
    return {rule: _errors("box-plane", [3], 3, f"collision.plane_box={rule}") for rule in ("deepest", "mjx")}


@pytest.mark.slow  # suite budget: a rule's regression study; the defaults' tests below stay in the default run
def test_plane_box_rule_fixes_the_first_bounce(first_bounce):
    # measured: 0.02 % with every penetrating corner a contact; 21 % with MJX's 1 mm skin, at any
    # tolerance and with either adjoint (a dropped corner comes back at depth: a force jump)
    assert first_bounce["deepest"][0] < 0.01
    assert first_bounce["mjx"][0] > 0.05


@pytest.mark.slow  # suite budget: tests/test_cube_toss.py checks the same toss at the same defaults on nine shots
def test_defaults_on_the_readme_snippet():
    # measured at the defaults (docs/results/fidelity.csv): README 0.10 %
    assert _errors("readme", [0], fidelity.scene("readme", 0).horizon)[0] < 0.01


@pytest.mark.slow  # suite budget: another family's compile; the README snippet above stays in the default run
def test_defaults_on_sphere_box():
    # measured at the defaults (docs/results/fidelity.csv): sphere-box <= 0.01 %
    assert (_errors("sphere-box", [0, 1, 3], 20) < 0.01).all()


@pytest.mark.slow  # suite budget (95 s cold): the converged default solve stays covered by test_solver
def test_defaults_converge_the_constraint_solve_in_resting_and_sliding_contact():
    # measured at the defaults (docs/results/fidelity.csv): 0.01 % (box settling onto four corners,
    # box-plane shot 0) and 0.004 % (capsule sliding on a plane, capsule-plane shot 1); with the
    # scenes' own 4 solver iterations they were 6.7 % and 13 % (fidelity_solver_budget.csv,
    # fidelity_capsule.csv), at every adjoint and tolerance
    assert _errors("box-plane", [0], fidelity.HORIZON)[0] < 0.01
    assert _errors("capsule-plane", [1], fidelity.HORIZON)[0] < 0.01


@pytest.mark.slow  # suite budget: a rule's regression study; the defaults' tests above stay in the default run
def test_plane_cylinder_rule_fixes_a_cylinder_landing_on_its_side():
    # measured (cylinder-plane shot 0, docs/results/fidelity.csv): 0.00 % at the defaults; 17.8 % with
    # MJX's rule, whose far-end contact appears at depth as the axis levels off
    assert _errors("cylinder-plane", [0], fidelity.HORIZON)[0] < 0.01
    assert _errors("cylinder-plane", [0], fidelity.HORIZON, "collision.plane_cylinder=mjx")[0] > 0.05


def test_timeline_names_a_bad_shot_before_running_anything(tmp_path):
    """The study's ``--timeline FAMILY:SHOT`` (run as a script) stops on a shot the family does not
    have, naming the valid range, before it computes or writes anything."""
    for spec, message in (("box-box:12", "FAMILY:SHOT with SHOT in 0..9"),):  # one run: a process costs 6 s
        cmd = [sys.executable, "-m", "experiments.fidelity", "--timeline", spec, "--out", str(tmp_path)]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        assert run.returncode != 0 and "ValueError" in run.stderr and message in run.stderr, run.stderr[-3000:]
    assert not list(tmp_path.iterdir())
