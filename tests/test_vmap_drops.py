"""vmap of 20 ball drops (paper Fig. 20): each environment refines its steps only around its own impact."""

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

import diffmjx
from diffmjx.scenes import load

HEIGHTS = np.linspace(0.15, 1.0, 20)
SPEED = 1.0
RADIUS = 0.05
PERIODS = 110


def test_step_sizes_shrink_only_at_own_impact():
    _, mx = load("sphere_drop")
    ctrls = jnp.zeros((PERIODS, 0))

    def run(h):
        d = mjx.make_data(mx)
        d = d.replace(qpos=d.qpos.at[0].set(h), qvel=d.qvel.at[0].set(-SPEED))
        return diffmjx.rollout(mx, d, ctrls)[1]

    traj = jax.jit(jax.vmap(run))(jnp.asarray(HEIGHTS))
    steps = np.asarray(traj.stats.accepted)  # (20, PERIODS): accepted steps in each 0.01 s period
    assert steps.shape == (20, PERIODS)
    impact = np.floor((HEIGHTS - RADIUS) / SPEED / 0.01).astype(int)
    for i in range(20):
        busiest = int(np.argmax(steps[i]))
        assert abs(busiest - impact[i]) <= 2, (i, busiest, impact[i])
        far = np.abs(np.arange(PERIODS) - impact[i]) > 4
        # away from its own impact an environment takes the coarsest steps, whatever the others do
        assert steps[i, far].max() <= 2, (i, steps[i])
        assert steps[i].max() >= 4 * steps[i, far].max()
    # everyone bounced back up
    assert np.all(np.asarray(traj.qvel[:, -1, 0]) > 0)
