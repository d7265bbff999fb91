"""integrator.remat: the same gradient, with memory that no longer grows with the horizon."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.scenes import load


def _grad(remat: bool, periods: int):
    _, mx = load("sphere_drop")
    # checkpointed AD, whose stored internals remat trades for recomputation (and the rtol of its figures)
    ic = dataclasses.replace(
        diffmjx.Config().integrator,
        adjoint="checkpoint",
        rtol=1e-5,
        atol=1e-5,
        remat=remat,
        kink_step=None,
        dto_tighten=1.0,
    )
    cfg = dataclasses.replace(diffmjx.Config(), integrator=ic)
    ctrls = jnp.zeros((periods, 0))

    def final_height(speed):
        d = mjx.make_data(mx)
        d = d.replace(qpos=d.qpos.at[0].set(0.3), qvel=d.qvel.at[0].set(-speed))
        d, _ = diffmjx.rollout(mx, d, ctrls, cfg)
        return d.qpos[0] + 0.1 * d.qvel[0]

    compiled = jax.jit(jax.grad(final_height)).lower(1.0).compile()
    mem = compiled.memory_analysis()
    return float(compiled(1.0)), mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes


@pytest.mark.slow  # suite budget: two gradient programs of a long rollout
def test_remat_keeps_the_gradient_and_flattens_memory():
    g_short, m_short = _grad(True, 20)
    g_long, m_long = _grad(True, 200)
    g_plain, m_plain = _grad(False, 200)
    assert g_long == g_plain  # recomputation replays the same floating-point operations
    assert abs(g_long) > 0.1 and np.isfinite(g_short)  # the ball hit the floor: contact in the gradient
    assert m_long <= 1.2 * m_short  # 10x the horizon, at most 20 % more memory
    assert m_plain > 3 * m_long  # without remat every period stores its internals
