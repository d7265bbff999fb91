"""Bad input fails early and clearly; an exhausted step budget is reported, never silent."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import diffmjx
from experiments.common import cube_toss_data, load


@pytest.fixture(scope="module")
def mx():
    return load("cube_toss")[1]


@pytest.mark.parametrize(
    "override, field",
    [
        ("integrator.solver=rk45", "integrator.solver"),
        ("integrator.adjoint=magic", "integrator.adjoint"),
        ("integrator.rtol=-1e-6", "integrator.rtol"),
        ("integrator.atol=-1", "integrator.atol"),
        ("integrator.max_steps=0", "integrator.max_steps"),
    ],
)
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        diffmjx.Config().override(override)


def test_ctrls_of_wrong_shape(mx):
    d = cube_toss_data(mx)
    for bad in (jnp.zeros((10, 2)), jnp.zeros(10), jnp.zeros((2, 3, 0))):
        with pytest.raises(ValueError, match="ctrls"):
            diffmjx.rollout(mx, d, bad)


def test_euler_needs_constant_steps(mx):
    cfg = diffmjx.Config().override("integrator.solver=euler")
    with pytest.raises(ValueError, match="integrator.step_control"):
        diffmjx.step(mx, cube_toss_data(mx), cfg)


def test_budget_exhausted_is_flagged(mx):
    cfg = diffmjx.Config().override("integrator.max_steps=3", "integrator.rtol=1e-9", "integrator.atol=1e-9")
    _, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, jnp.zeros((40, 0)), cfg))(cube_toss_data(mx))
    flags = traj.stats.budget_exhausted
    assert bool(flags.any())
    assert int(traj.stats.accepted.max()) <= 3


def test_budget_exhausted_can_raise(mx):
    cfg = diffmjx.Config().override(
        "integrator.max_steps=3", "integrator.rtol=1e-9", "integrator.atol=1e-9",
        "integrator.on_budget_exhausted=raise",
    )  # fmt: skip
    with pytest.raises((eqx.EquinoxRuntimeError, RuntimeError), match="max_steps|maximum number"):
        jax.block_until_ready(diffmjx.rollout(mx, cube_toss_data(mx), jnp.zeros((40, 0)), cfg))
