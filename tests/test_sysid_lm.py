"""Levenberg–Marquardt identification (optimistix, forward-mode Jacobians): residuals, a short fit."""

import jax
import numpy as np
import pytest
from conftest import near_table_segments
from mujoco import mjx

from diffmjx import sysid

jax.config.update("jax_enable_x64", True)

HORIZON = 4


@pytest.fixture(scope="module")
def setup():
    """Eight sliding training segments near the table (seeded), the quick preset's simulation with CFD."""
    qpos, qvel = near_table_segments(8, HORIZON)
    cfg = sysid.SysidConfig.load("quick", ["cfd.enabled=true", "train.inits={side_length: 0.095}"])
    return cfg, qpos, qvel


@pytest.mark.slow  # suite budget: identify's Levenberg-Marquardt (tests/test_sysid_generic.py) fits by default
def test_residuals_square_to_the_segment_loss(setup):
    cfg, qpos, qvel = setup
    base = mjx.put_model(sysid.cube_mjmodel(iterations=cfg.iterations))
    p = sysid.CubeParams(side_length=0.1)
    r = sysid.segment_residuals(p, base, qpos, qvel, cfg.sim, velocity_weight=0.3)
    loss = sysid.segment_loss(p, base, qpos, qvel, cfg.sim, velocity_weight=0.3)
    assert r.shape == (8 * HORIZON * 18,)
    np.testing.assert_allclose(float(np.sum(np.asarray(r) ** 2)), float(loss), rtol=1e-12)
    # both are the one residual of the predicted states: the loss its mean squared norm per state
    pq, pv = sysid.predict_segments(p, base, qpos[:, 0], qvel[:, 0], HORIZON, cfg.sim)
    states = np.asarray(sysid.state_residuals(pq, pv, qpos[:, 1:], qvel[:, 1:], 0.3))
    np.testing.assert_allclose(np.mean(np.sum(states**2, axis=-1)), float(loss), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(r), states.ravel() / np.sqrt(8 * HORIZON), rtol=1e-12)


@pytest.mark.slow  # suite budget: a full LM fit; the residual test above checks its objective in the default run
def test_lm_reduces_the_loss_and_moves_the_side_towards_the_cube(setup):
    cfg, qpos, qvel = setup
    res = sysid.fit_lm(cfg, qpos, qvel, steps=4, progress=False)
    h = res.history
    assert len(h.step) >= 2 and np.isfinite(h.loss).all()
    assert np.all(np.diff(h.loss) <= 0)  # the accepted iterate's loss never rises
    assert h.loss[-1] < 0.9 * res.loss_init
    side = float(res.params.side_length)
    assert abs(side - 0.1048) < abs(0.095 - 0.1048)
    np.testing.assert_array_equal(res.params.solref, sysid.CubeParams().solref)  # not free: untouched
    with pytest.raises(ValueError, match="steps=0 is invalid"):
        sysid.fit_lm(cfg, qpos, qvel, steps=0)


@pytest.mark.slow  # suite budget: three short LM fits
def test_lm_resumes_from_its_checkpoint_with_the_same_trial_points(setup, tmp_path):
    cfg, qpos, qvel = setup
    qpos, qvel = qpos[:4], qvel[:4]
    whole = sysid.fit_lm(cfg, qpos, qvel, steps=5, progress=False)
    ckpt = tmp_path / "lm.npz"
    # stopped after 3 steps: past the first (always accepted) one, so the trust region's saved
    # step size is one the fit has changed, and the resume must carry it
    first = sysid.fit_lm(cfg, qpos, qvel, steps=3, progress=False, checkpoint=ckpt)
    assert ckpt.exists() and len(first.history.step) == 3
    assert float(np.load(ckpt)["step_size"]) != 1.0
    resumed = sysid.fit_lm(cfg, qpos, qvel, steps=5, progress=False, checkpoint=ckpt)
    np.testing.assert_array_equal(resumed.history.step, whole.history.step)
    np.testing.assert_array_equal(resumed.history.accepted, whole.history.accepted)
    # the same trial points to rounding: the restart re-evaluates the last accepted iterate
    np.testing.assert_allclose(resumed.history.loss, whole.history.loss, rtol=1e-9)
    np.testing.assert_allclose(resumed.history.params.side_length, whole.history.params.side_length, rtol=1e-9)
    assert resumed.loss_init == whole.loss_init
    # a finished fit is read back without a step
    again = sysid.fit_lm(cfg, qpos, qvel, steps=5, progress=False, checkpoint=ckpt)
    np.testing.assert_array_equal(again.history.loss, resumed.history.loss)
    with pytest.raises(ValueError, match="holds 5 steps, more than steps=4"):
        sysid.fit_lm(cfg, qpos, qvel, steps=4, progress=False, checkpoint=ckpt)
    with pytest.raises(ValueError, match="rtol: 1e-06 .checkpoint. vs 1e-05 .now."):
        sysid.fit_lm(cfg, qpos, qvel, steps=5, progress=False, checkpoint=ckpt, rtol=1e-5)
