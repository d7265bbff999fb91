"""MyoSuite's 39-muscle baoding hand runs through diffmjx.rollout (muscle models, tendon wrapping)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmjx
from experiments.common import mjx


@pytest.fixture(scope="module")
def hand():
    gym = pytest.importorskip("myosuite.utils").gym
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mj = gym.make("myoChallengeBaodingP1-v1").unwrapped.mj_model
    mj.opt.iterations, mj.opt.ls_iterations = 4, 16
    return mj, mjx.put_model(mj)


def test_fixed_step_rollout_of_the_baoding_hand_equals_mjx_step(hand):
    """MJX's tendon stage returns its wrap indices as int64 under x64 where make_data made int32;
    a fixed-step period keeps the dtypes it came in, so the MJX integrators run on muscle models
    (they failed with a carry type error), and two periods equal two mjx.step calls."""
    mj, mx = hand
    d = mjx.make_data(mx).replace(qpos=jnp.asarray(mj.qpos0), ctrl=0.3 * jnp.ones(mj.nu))
    u = 0.3 * jnp.ones((2, mj.nu))
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")
    ours, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, u, cfg))(d)
    ref = jax.jit(lambda d: mjx.step(mx, mjx.step(mx, d)))(d)
    assert traj.qpos.shape == (2, mj.nq)
    np.testing.assert_allclose(np.asarray(ours.qpos), np.asarray(ref.qpos), rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ours.act), np.asarray(ref.act), rtol=0, atol=1e-10)
    assert float(jnp.abs(ours.act - d.act).max()) > 1e-3  # the muscles did activate
