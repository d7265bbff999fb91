"""Numerical checks of the 1-D point-mass contact-gradient model (diffmjx.scenes.point_mass) and its
study (experiments/toy_point_mass, run as a script)."""

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffmjx.scenes import point_mass as tpm

ROOT = Path(__file__).resolve().parents[1]

# Off the h = 0.1 grid on purpose (q0 on a multiple of h sits on a branch switch).
Q0S = np.linspace(0.013, 2.987, 48)
H_COARSE, H_FINE = (h for h, _ in tpm.SETTINGS)


@pytest.fixture(scope="module")
def results():
    out = {}
    for model in tpm.MODELS:
        for h, n in tpm.SETTINGS:
            res = tpm.sweep(Q0S, model, h, n)
            out[(model, h)] = (res, tpm.summarize(Q0S, res, model))
    return out


def test_settings_end_at_same_time():
    assert [h * n for h, n in tpm.SETTINGS] == pytest.approx([tpm.T_FINAL] * 2)


def test_true_solution_closed_forms():
    # Elastic: q(T) = T - q0 after a bounce, q0 - T without one.
    assert float(tpm.true_final_height(0.5, tpm.ELASTIC)) == pytest.approx(1.5)
    assert float(tpm.true_final_height(2.5, tpm.ELASTIC)) == pytest.approx(0.5)
    # Penalty: q(T) = e (T - q0 - t_c) once the contact is over.
    c = tpm.penalty_constants()
    assert c["restitution"] == pytest.approx(np.exp(-tpm.ZETA * np.pi / np.sqrt(1 - tpm.ZETA**2)))
    q0 = 0.4
    assert float(tpm.true_final_height(q0, tpm.PENALTY)) == pytest.approx(
        c["restitution"] * (tpm.T_FINAL - q0 - c["t_contact"])
    )


def test_fine_step_simulation_matches_continuous_solution(results):
    for model in tpm.MODELS:
        res, _ = results[(model, H_FINE)]
        assert np.max(np.abs(res["loss"] - res["loss_true"])) < 5e-3, model


def test_ad_matches_finite_differences(results):
    # AD differentiates the discrete map correctly; the errors below are the simulator's.
    for (model, h), (_, s) in results.items():
        assert s["median_abs_fd_minus_ad"] < 1e-4, (model, h)


def test_penalty_gradient_converges_with_small_step(results):
    fine = results[(tpm.PENALTY, H_FINE)][1]
    coarse = results[(tpm.PENALTY, H_COARSE)][1]
    assert fine["median_abs_err"] < 0.05
    assert fine["frac_wrong_sign"] == 0.0
    assert fine["median_dqN_ad_bounce"] == pytest.approx(-tpm.penalty_constants()["restitution"], abs=0.05)
    # h = 0.1: the gradient is useless (wrong magnitude by orders, often wrong sign).
    assert coarse["median_abs_err"] > 1.0
    assert coarse["median_abs_err"] > 100 * fine["median_abs_err"]
    assert coarse["frac_wrong_sign"] > 0.2


@pytest.mark.parametrize("h", [H_COARSE, H_FINE])
def test_elastic_gradient_has_wrong_sign_for_every_step_size(results, h):
    res, s = results[(tpm.ELASTIC, h)]
    bounce = tpm.bounce_mask(Q0S, tpm.ELASTIC)
    # d q_N / d q0 is +1 by AD but -1 in truth, wherever the ball bounced.
    np.testing.assert_allclose(res["dqN_ad"][bounce], 1.0, atol=1e-9)
    np.testing.assert_allclose(res["dqN_true"][bounce], -1.0, atol=1e-9)
    assert s["frac_wrong_sign_bounce"] > 0.9
    assert s["median_abs_err"] == pytest.approx(2.0)


def test_contact_models_are_typed_objects():
    # the functions take a ContactModel, never its name: a string is refused, naming the objects
    assert [m.name for m in tpm.MODELS] == ["penalty", "elastic", "elastic_mirror"]
    assert all(isinstance(m, tpm.ContactModel) for m in tpm.MODELS)
    with pytest.raises(TypeError, match="ContactModel"):
        tpm.simulate(0.5, 0.1, 20, "penalty")
    with pytest.raises(TypeError, match="PENALTY, ELASTIC"):
        tpm.kink_mask(Q0S, "elastic")


@pytest.mark.parametrize("h", [H_COARSE, H_FINE])
def test_mirrored_reflection_gradient_is_exact(results, h):
    # Mirroring the position too is the exact time-of-impact reflection at constant speed.
    _, s = results[(tpm.ELASTIC_MIRROR, h)]
    assert s["median_abs_err"] < 1e-9
    assert s["frac_wrong_sign"] == 0.0


def test_run_quick_writes_outputs(tmp_path):
    """The study's quick run (60 q0, three stiffnesses; a few seconds) writes its CSV and figure and
    prints a summary line per model and setting."""
    cmd = [sys.executable, "-m", "experiments.toy_point_mass", "--quick", "--out", str(tmp_path)]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "toy_point_mass.png").stat().st_size > 0
    lines = (tmp_path / "toy_point_mass.csv").read_text().splitlines()
    assert lines[0] == "model,h,n_steps,q0,loss,grad_ad,grad_fd,grad_true"
    assert len(lines) == 1 + 60 * len(tpm.MODELS) * len(tpm.SETTINGS)  # --quick: 60 q0
    names = [m.name for m in tpm.MODELS]
    assert {r["model"] for r in csv.DictReader(lines)} == set(names)
    steps = {f"{h:g}" for h, _ in tpm.SETTINGS}
    table = [t[:2] for t in map(str.split, run.stdout.splitlines()) if len(t) > 2 and t[0] in names and t[1] in steps]
    assert sorted(table) == sorted([m, f"{h:g}"] for m in names for h, _ in tpm.SETTINGS)  # the summary table
