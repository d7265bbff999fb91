"""Lie-group stage maps: exact quaternions, and the local-coordinate ODE moves with body angular velocity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffmjx.physics import manifold
from diffmjx.scenes import load


@pytest.fixture(scope="module")
def layout():
    return manifold.JointLayout.from_model(load("tumbling_box")[1])


def test_layout_free_joint(layout):
    np.testing.assert_array_equal(layout.lin_q, [0, 1, 2])
    np.testing.assert_array_equal(layout.quat_q, [[3, 4, 5, 6]])
    np.testing.assert_array_equal(layout.quat_v, [[3, 4, 5]])


@pytest.mark.parametrize("phi", [[0.0, 0.0, 0.0], [1e-6, -2e-6, 3e-7], [0.3, -1.2, 0.7], [2.0, 1.0, -0.5]])
def test_exp_is_unit_and_matches_axis_angle(phi):
    phi = jnp.array(phi)
    q = manifold.quat_exp(phi)
    assert abs(float(jnp.linalg.norm(q)) - 1.0) < 1e-15
    theta = float(jnp.linalg.norm(phi))
    assert np.isclose(float(q[0]), np.cos(theta / 2), atol=1e-15)
    assert np.all(np.isfinite(np.asarray(jax.jacfwd(manifold.quat_exp)(phi))))


def test_dexp_inv_gives_body_angular_velocity(layout):
    """d/dt (q0 ⊗ Exp(xi(t))) with xi' = Jr^-1(xi) w equals q ⊗ (0, w)/2 (body frame)."""
    rng = np.random.default_rng(0)
    q0 = jnp.concatenate([jnp.zeros(3), jnp.array(rng.normal(size=4))])
    q0 = q0.at[3:].set(q0[3:] / jnp.linalg.norm(q0[3:]))
    xi = jnp.array(rng.normal(size=6)) * 0.8
    qvel = jnp.array(rng.normal(size=6))
    xidot = manifold.dexp_inv(layout, xi, qvel)
    qdot = jax.jvp(lambda x: manifold.retract(layout, q0, x), (xi,), (xidot,))[1]
    q = manifold.retract(layout, q0, xi)
    expected = 0.5 * manifold.quat_mul(q[3:], jnp.concatenate([jnp.zeros(1), qvel[3:]]))
    np.testing.assert_allclose(qdot[3:], expected, atol=1e-12)
    np.testing.assert_allclose(qdot[:3], qvel[:3], atol=1e-15)
