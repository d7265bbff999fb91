"""Bad input fails early and clearly; an exhausted step budget is reported, never silent."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import diffmjx
from diffmjx.scenes import cube_toss_data, load


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


def test_a_touchdown_force_jump_is_named_and_warned_about(mx):
    """MuJoCo's default solimp starts the contact force at 0.9 of its stiff value at touchdown: a
    jump that no gradient sees (experiments.box_box, nine initial velocities: median 15.8 % with it,
    0.00 % without)."""
    import warnings

    import mujoco
    from mujoco import mjx

    drop = load("box_drop")[0]
    assert diffmjx.touchdown_jumps(drop) == {"table": 0.9, "geom 1": 0.9}
    with pytest.warns(diffmjx.TouchdownJumpWarning, match="'table' \\(0.9\\)") as caught:
        diffmjx.validate(mjx.put_model(drop), diffmjx.Config())
    assert caught[0].filename == __file__  # points at the caller, not into the package
    # solimp[0] = 0 (the cube toss) starts the force from zero: nothing to say
    assert diffmjx.touchdown_jumps(mx) == {}
    drop.geom_solimp[:, 0] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diffmjx.validate(mjx.put_model(drop), diffmjx.Config())
    # an explicit contact pair carries its own solimp
    pair = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><geom name="a" size="1" solimp="0 0.9 0.001"/><body><freejoint/>'
        '<geom name="b" size="1" solimp="0 0.9 0.001"/></body></worldbody>'
        '<contact><pair geom1="a" geom2="b" solimp="0.5 0.9 0.001"/></contact></mujoco>'
    )
    assert diffmjx.touchdown_jumps(pair) == {"pair 0": 0.5}


def test_no_touchdown_warning_check_for_a_model_built_inside_a_trace():
    """A model put inside ``jit`` has traced arrays: the check must not convert them (it did)."""
    import warnings

    from mujoco import mjx

    drop = load("box_drop")[0]

    def f(x):
        m = mjx.put_model(drop)
        diffmjx.validate(m, diffmjx.Config())
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax.jit(f)(1.0)
