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


@pytest.mark.slow  # suite budget: the flagged budget above runs by default; raising compiles a host callback
def test_budget_exhausted_can_raise(mx):
    cfg = diffmjx.Config().override(
        "integrator.max_steps=3",
        "integrator.rtol=1e-9",
        "integrator.atol=1e-9",
        "integrator.on_budget_exhausted=raise",
    )
    with pytest.raises((eqx.EquinoxRuntimeError, RuntimeError), match="max_steps|maximum number"):
        jax.block_until_ready(diffmjx.rollout(mx, cube_toss_data(mx), jnp.zeros((40, 0)), cfg))


# derivatives that do not carry the force jump at a touchdown (the default) and that do (opt-in)
NO_SALTATION = diffmjx.Config().override("integrator.saltation=false")
SALTATION = diffmjx.Config().override("integrator.saltation=true")


def test_a_touchdown_force_jump_is_named_and_warned_about(mx):
    """MuJoCo's default solimp starts the contact force at 0.9 of its stiff value at touchdown: a
    jump that derivatives without the saltation term miss (experiments.box_box, nine initial
    velocities: median 15.8 % with it, 0.00 % without). A config with the saltation term carries it
    (but for box-box contacts)."""
    import warnings

    import mujoco
    from mujoco import mjx

    drop = load("box_drop")[0]
    assert diffmjx.touchdown_jumps(drop) == {"table": 0.9, "geom 1": 0.9}
    with pytest.warns(diffmjx.TouchdownJumpWarning, match="'table' \\(0.9\\)") as caught:
        diffmjx.validate(mjx.put_model(drop), NO_SALTATION)
    assert caught[0].filename == __file__  # points at the caller, not into the package
    assert "integrator.saltation is off" in str(caught[0].message)
    with pytest.warns(diffmjx.TouchdownJumpWarning, match="integrator.adjoint=sensitivity with"):
        diffmjx.validate(mjx.put_model(drop), SALTATION.override("integrator.adjoint=sensitivity"))
    # the term carries the jump of every contact but box-box ones (the box on the table)
    assert diffmjx.touchdown_jumps(drop, SALTATION) == {"table": 0.9, "geom 1": 0.9}
    with pytest.warns(diffmjx.TouchdownJumpWarning, match="not box-box contacts"):
        diffmjx.validate(mjx.put_model(drop), SALTATION)
    ball = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body><freejoint/><geom size=".1"/></body>'
        "</worldbody></mujoco>"
    )
    assert diffmjx.touchdown_jumps(ball) == {"geom 0": 0.9, "geom 1": 0.9}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diffmjx.validate(mjx.put_model(ball), SALTATION)
    # solimp[0] = 0 (the cube toss) starts the force from zero: nothing to say
    assert diffmjx.touchdown_jumps(mx) == {}
    drop.geom_solimp[:, 0] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diffmjx.validate(mjx.put_model(drop), NO_SALTATION)
    # an explicit contact pair carries its own solimp
    pair = mujoco.MjModel.from_xml_string(
        '<mujoco><worldbody><geom name="a" size="1" solimp="0 0.9 0.001"/><body><freejoint/>'
        '<geom name="b" size="1" solimp="0 0.9 0.001"/></body></worldbody>'
        '<contact><pair geom1="a" geom2="b" solimp="0.5 0.9 0.001"/></contact></mujoco>'
    )
    assert diffmjx.touchdown_jumps(pair) == {"pair 0": 0.5}


def test_touchdown_jumps_lists_only_contacts_the_model_can_make():
    """Geoms that collide with nothing (no matching contype/conaffinity bit, an excluded body pair,
    a visual geom, a geom on its own body) keep MuJoCo's default solimp without a warning; a geom
    whose contact mixes with a zero-impedance partner is still listed."""
    import mujoco

    xml = """<mujoco><default><geom solimp="0 0.95 0.001 0.5 2"/></default><worldbody>
      <geom name="floor" type="plane" size="1 1 0.1"/>
      <body name="cube" pos="0 0 0.2"><freejoint/><geom name="cube" type="box" size=".05 .05 .05"/>
        <geom name="visual" type="sphere" size=".02" contype="0" conaffinity="0" solimp="0.9 0.95 0.001"/>
        <geom name="same_body" type="sphere" size=".01" contype="2" conaffinity="2" solimp="0.9 0.95 0.001"/></body>
      <body name="ghost" pos="1 0 0.2"><freejoint/>
        <geom name="other_bits" type="sphere" size=".05" contype="4" conaffinity="4" solimp="0.9 0.95 0.001"/></body>
      <body name="excluded" pos="2 0 0.2"><freejoint/>
        <geom name="excluded" type="sphere" size=".05" solimp="0.9 0.95 0.001"/></body>
      <body name="mixed" pos="3 0 0.2"><freejoint/>
        <geom name="mixed" type="sphere" size=".05" solimp="0.5 0.95 0.001"/></body>
    </worldbody><contact><exclude body1="world" body2="excluded"/></contact></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    # 'mixed' meets the zero-impedance floor and cube (contacts at 0.25) and 'excluded' (0.7);
    # 'excluded' is excluded from the floor but still meets 'mixed'
    jumps = diffmjx.touchdown_jumps(model)
    assert set(jumps) == {"mixed", "excluded"} and jumps["mixed"] == 0.5
    model.geom_conaffinity[model.geom("excluded").id] = 0  # now it collides with nothing
    model.geom_contype[model.geom("excluded").id] = 0
    assert diffmjx.touchdown_jumps(model) == {"mixed": 0.5}


def test_touchdown_warning_is_shown_once_per_model():
    """Tracing, vmap and every rollout call validate the same model again: one warning per model,
    another for another model, and ``filterwarnings`` silences it."""
    import warnings

    from mujoco import mjx

    drop = load("box_drop")[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            diffmjx.validate(mjx.put_model(drop), NO_SALTATION)
        drop.geom_solimp[0, 0] = 0.8  # another model
        diffmjx.validate(mjx.put_model(drop), NO_SALTATION)
    jumps = [w for w in caught if issubclass(w.category, diffmjx.TouchdownJumpWarning)]
    assert len(jumps) == 2 and "'table' (0.9)" in str(jumps[0].message) and "'table' (0.8)" in str(jumps[1].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=diffmjx.TouchdownJumpWarning)
        drop.geom_solimp[0, 0] = 0.7
        diffmjx.validate(mjx.put_model(drop), NO_SALTATION)
    # raised while JAX traces: it points at the user's code, not into JAX
    m = mjx.put_model(drop)
    with pytest.warns(diffmjx.TouchdownJumpWarning) as caught:
        jax.jit(lambda x: diffmjx.forward(m, mjx.make_data(m), NO_SALTATION).qpos[0] + x)(0.0)
    assert caught[0].filename == __file__


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


def test_touchdown_jumps_lists_limits_that_start_with_a_force():
    """A limit switches on at the end of its range with its own impedance (solimplimit, MuJoCo's
    default 0.9 at touch): limited joints and tendons are listed unless their solimplimit[0] is 0,
    they are not limited, or the model disables limits; the warning says limits and their fix."""
    import warnings

    import mujoco
    from mujoco import mjx

    xml = """<mujoco><compiler angle="radian"/><worldbody><site name="a"/>
      <body><joint name="hinge" range="-1 1"/><joint name="free_hinge" axis="1 0 0"/>
        <joint range="-1 1" axis="0 1 0" solimplimit="0 0.95 0.001"/>
        <geom size=".1" contype="0" conaffinity="0"/><site name="b" pos="0 0 .2"/></body></worldbody>
      <tendon><spatial name="cable" range="0 0.5"><site site="a"/><site site="b"/></spatial></tendon></mujoco>"""
    model = mujoco.MjModel.from_xml_string(xml)
    assert diffmjx.touchdown_jumps(model) == {"joint hinge": 0.9, "tendon cable": 0.9}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diffmjx.validate(mjx.put_model(model), NO_SALTATION)
        diffmjx.validate(mjx.put_model(model), SALTATION)
    shown = [str(w.message) for w in caught if issubclass(w.category, diffmjx.TouchdownJumpWarning)]
    assert shown[0].startswith("contacts and limits of 'joint hinge' (0.9), 'tendon cable' (0.9) start with")
    assert "solimplimit[0] = 0 for a limit" in shown[0]
    # the saltation term covers the hinge's limit, not the tendon's
    assert diffmjx.touchdown_jumps(model, SALTATION) == {"tendon cable": 0.9}
    assert shown[1].startswith("contacts and limits of 'tendon cable' (0.9) start with") and len(shown) == 2
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_LIMIT
    assert diffmjx.touchdown_jumps(model) == {}
