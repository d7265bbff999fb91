"""Contacts from distance: the extended impedance spline and the straight-through combinator."""

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mujoco import mjx

import diffmjx
from cfd import cfd_impedance, continuation, derivative_only, mujoco_impedance, position_term, straight_through
from diffmjx.scenes import box_corner_heights, load

params = st.tuples(
    st.floats(0.01, 0.5),  # MuJoCo d0
    st.floats(0.6, 0.99),  # MuJoCo dwidth
    st.floats(1e-4, 0.05),  # MuJoCo width
    st.floats(0.1, 0.9),  # MuJoCo midpoint
    st.floats(1.5, 6.0),  # MuJoCo power
    st.floats(0.0, 0.9),  # d_c as a fraction of d_0
    st.floats(1e-3, 1.0),  # w_c
    st.floats(0.1, 0.9),  # m_c
    st.floats(1.5, 6.0),  # p_c
)


def _split(p):
    d0, dw, width, mid, power, frac, w_c, m_c, p_c = p
    return (d0, dw, width, mid, power), (frac * d0, d0, w_c, m_c, p_c)


_imp = jax.jit(jax.vmap(cfd_impedance, in_axes=(0, None, None)))
_left = jax.jit(jax.value_and_grad(mujoco_impedance))
_right = jax.jit(jax.value_and_grad(continuation))


@settings(max_examples=60, deadline=None)
@given(p=params)
def test_extended_impedance_is_c1_monotone_and_bounded(p):
    solimp, cfd_solimp = (jnp.asarray(x) for x in _split(p))
    w_c, d_c = float(cfd_solimp[2]), float(cfd_solimp[0])
    # joins: value and slope of the two pieces agree exactly at r = 0 and at r = w_c
    (v0l, g0l), (v0r, g0r) = _left(0.0, solimp), _right(0.0, cfd_solimp)
    assert abs(float(v0l) - float(v0r)) < 1e-12 and abs(float(g0l)) < 1e-12 and abs(float(g0r)) < 1e-12
    v1, g1 = _right(w_c, cfd_solimp)
    assert abs(float(v1) - d_c) < 1e-12 and abs(float(g1)) < 1e-12
    r = jnp.linspace(-2 * float(solimp[2]), 1.5 * w_c, 2001)
    d = np.asarray(_imp(r, solimp, cfd_solimp))
    assert np.all((d >= 0) & (d < 1))
    outside = np.asarray(r) > 0
    assert np.all(np.diff(d[outside]) <= 1e-12)  # non-increasing away from contact
    inside = np.asarray(r) <= 0
    assert np.all(np.diff(d[inside]) <= 1e-12)  # rising with penetration depth (r decreasing)
    assert float(d[-1]) == pytest.approx(d_c)


def test_mujoco_impedance_matches_mjx():
    """Contact rows' D = 1/R with R = invweight (1 - d) / d: recover d from MJX and compare."""
    mj, mx = load("cube_toss")
    d = mjx.make_data(mx).replace(qpos=jnp.array([0, 0, 0.0496, 1, 0, 0, 0]))
    d = jax.jit(mjx.forward)(mx, d)
    pos = np.asarray(d._impl.efc_pos)
    r_ = 1.0 / np.asarray(d._impl.efc_D)
    # for equal invweight rows, d/(1-d) ratios between rows equal the R ratio inverted
    imp = np.asarray(jax.vmap(lambda r: mujoco_impedance(r, jnp.asarray(mj.geom_solimp[1])))(pos))
    active = pos < 0
    ratio = (imp / (1 - imp))[active] * r_[active]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_position_term_is_a_smoothed_relu():
    r = jnp.array([-0.01, -1e-3, 0.0, 1e-3, 0.01])
    s = 1e4
    np.testing.assert_allclose(position_term(r, s), np.maximum(0, -np.asarray(r)), atol=np.log(2) / s + 1e-15)
    assert float(position_term(0.01, s)) > 0  # positive beyond contact: a force from distance


def test_straight_through_values_and_gradients():
    f = lambda x: jnp.sin(x)
    g = lambda x: x**3
    h = lambda x: straight_through({"a": f(x)}, {"a": g(x)})["a"]
    x = 0.7
    assert float(h(x)) == float(f(x))
    assert float(jax.grad(h)(x)) == pytest.approx(3 * x**2, rel=1e-14)


def test_derivative_only_is_evaluated_only_where_differentiated():
    """Zeros in value, g's derivatives under jvp, grad, vmap and a grad of a vmapped scan; g absent
    from an undifferentiated program."""
    g = lambda x, k: {"a": jnp.cos(x) * k}
    x = jnp.array([0.1, 0.7, 2.0])
    h = lambda x, k=3.0: x**2 + derivative_only(g, {"a": x**2}, x, k)["a"]
    assert "cos" not in str(jax.make_jaxpr(h)(x))
    np.testing.assert_array_equal(jax.jit(h)(x), x**2)
    value, tangent = jax.jvp(h, (x,), (jnp.ones(3),))
    np.testing.assert_array_equal(value, x**2)
    np.testing.assert_allclose(tangent, 2 * x - 3 * jnp.sin(x), rtol=1e-14)
    np.testing.assert_allclose(jax.grad(lambda x: h(x).sum())(x), 2 * x - 3 * jnp.sin(x), rtol=1e-14)
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda x: h(x)))(x), 2 * x - 3 * jnp.sin(x), rtol=1e-14)
    # the derivative in k through a vmapped scan (how sysid differentiates fixed-step rollouts), equal to
    # the straight-through's that evaluates g
    ref = lambda x, k=3.0: x**2 + (g(x, k)["a"] - jax.lax.stop_gradient(g(x, k)["a"]))
    run = lambda k, h: jax.vmap(lambda x0: jax.lax.scan(lambda c, _: (h(c, k) / 4, None), x0, None, length=2)[0])(
        jnp.stack([x, 2 * x])
    ).sum()
    np.testing.assert_allclose(jax.grad(run)(3.0, h), jax.grad(run)(3.0, ref), rtol=1e-14)
    assert jax.grad(run)(3.0, h) != 0.0


@pytest.mark.parametrize(
    "solimp, field",
    [
        ((0.0, 0.01, 0.0, 0.5, 2.0), r"cfd\.solimp\[2\]"),
        ((0.0, 1.2, 0.1, 0.5, 2.0), r"cfd\.solimp\[1\]"),
        ((0.0, 0.01, 0.1, 0.5, 0.5), r"cfd\.solimp\[4\]"),
        ((0.0, 0.01, 0.1, 0.0, 2.0), r"cfd\.solimp\[3\]"),
        ((0.01, 0.0, 1.0, 1.0, 4.0), r"cfd\.solimp\[0\].*<= cfd\.solimp\[1\]"),  # the sysid prose's reading
    ],
)
def test_invalid_cfd_parameters_name_the_field(solimp, field):
    with pytest.raises(ValueError, match=field):
        diffmjx.Config().override(f"cfd.solimp={list(solimp)}")


del mujoco


# --- wiring: contacts from distance inside the dynamics ------------------------------------------

BASE = diffmjx.Config().override("integrator.rtol=1e-7", "integrator.atol=1e-7")
_MJX_FORWARD = jax.jit(mjx.forward)  # one compile per model; run eagerly, MJX's forward compiles op by op (~15 s)
CFD = BASE.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.9, 0.1, 0.5, 2.0]")


def _two_balls(cfg, periods=50):
    """``v0 -> rollout`` of the two-ball scene (not jitted: callers differentiate it)."""
    _, mx = load("two_balls")  # cue ball pushed along x towards the eight ball 0.3 m away

    def run(v0):
        d = mjx.make_data(mx).replace(qvel=jnp.array([v0, 0.0]))
        return diffmjx.rollout(mx, d, jnp.zeros((periods, 0)), cfg)

    return run


@functools.cache
def _two_balls_jit(cfg):
    """One compiled rollout per config, shared by every test and parameter that runs it."""
    return jax.jit(_two_balls(cfg))


# 0.3: the balls never touch (suite budget: tests/test_contact_tasks.py checks a forward of bodies apart by default);
# 1.0: they collide
@pytest.mark.parametrize("v0", [pytest.param(0.3, marks=pytest.mark.slow), 1.0])
def test_straight_through_forward_is_unchanged(v0):
    plain = _two_balls_jit(BASE)(v0)
    cfd = _two_balls_jit(CFD)(v0)
    for a, b in zip(jax.tree.leaves(plain[1]), jax.tree.leaves(cfd[1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # suite budget: the two-ball and sphere-drop scenes make the claim by default
def test_cube_toss_forward_is_unchanged_with_cfd():
    from diffmjx.scenes import cube_toss_loss

    _, mx = load("cube_toss")
    cfd = BASE.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.01, 0.01, 0.5, 4.0]")
    a = float(jax.jit(cube_toss_loss(mx, BASE, horizon=40))(-2.0))
    b = float(jax.jit(cube_toss_loss(mx, cfd, horizon=40))(-2.0))
    assert a == b


@pytest.mark.parametrize(
    "scene, reaches, push",  # reaches: a pair moves within w_c = 0.2 m, so CFD has rows to act with
    [
        ("sphere_drop", True, None),
        pytest.param("box_drop", True, None, marks=pytest.mark.slow),  # suite budget
        pytest.param("billiard", True, None, marks=pytest.mark.slow),  # suite budget: sphere_drop makes the claim
        pytest.param("box_pair", True, (8, -1.0), marks=pytest.mark.slow),  # suite budget; the upper box sinks
        # towards the lower one, 0.125 m below
        ("tumbling_box", False, None),
        ("actuated_hinge", False, None),
    ],  # these two have no contact pairs
)
def test_every_scene_keeps_its_forward_with_cfd(scene, reaches, push):
    """The other scenes of the test suite and studies, 30 periods from their model pose: with CFD in
    straight-through mode every leaf of the trajectory is bitwise the trajectory without it; applied
    in the forward (``cfd.in_forward``) the same CFD changes it wherever it has rows."""
    _, mx = load(scene)
    d = mjx.make_data(mx)
    if push is not None:
        d = d.replace(qvel=d.qvel.at[push[0]].set(push[1]))
    ctrls = 0.5 * jnp.ones((30, mx.nu))
    wide = BASE.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.9, 0.2, 0.5, 2.0]")

    def run(cfg):
        return jax.jit(lambda d: diffmjx.rollout(mx, d, ctrls, cfg))(d)

    plain, cfd, hover = run(BASE), run(wide), run(wide.override("cfd.in_forward=true"))
    assert not np.any(np.asarray(plain[1].stats.budget_exhausted))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(cfd), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert bool(np.any(np.asarray(hover[0].qpos) != np.asarray(plain[0].qpos))) == reaches


# suite budget: all under -m slow; tests/test_contact_tasks.py makes the claim by default (a pusher 5 cm
# from a box: exactly zero derivative without CFD, a positive one with it, the forward unchanged)
@pytest.mark.slow
@pytest.mark.parametrize("adjoint", ["forward", "checkpoint", "backsolve"])
def test_gradient_between_bodies_that_never_touch(adjoint):
    """Eight-ball displacement w.r.t. cue speed: exactly 0 without CFD (no contact row exists, so no
    adjoint has anything to carry: checked in forward mode, the cheaper compile), positive with it."""
    loss = lambda cfg: lambda v: _two_balls(cfg)(v)[0].qpos[1]
    plain = float(jax.jit(jax.jacfwd(loss(BASE.override("integrator.adjoint=forward"))))(0.3))
    diff = jax.jacfwd if adjoint == "forward" else jax.grad
    with_cfd = float(jax.jit(diff(loss(CFD.override(f"integrator.adjoint={adjoint}"))))(0.3))
    assert plain == 0.0
    assert with_cfd > 1e-3  # a faster cue ball would push the eight ball further: the right sign
    assert float(_two_balls_jit(CFD)(0.3)[0].qpos[1]) == 0.0  # while the eight ball has not moved at all


def test_cfd_in_forward_makes_bodies_hover():
    """cfd.in_forward applies the forces from distance physically: the eight ball is pushed."""
    d, _ = _two_balls_jit(CFD.override("cfd.in_forward=true"))(0.3)
    assert float(d.qpos[1]) > 1e-3


def test_cfd_rows_of_a_hovering_box_come_from_its_lowest_corners():
    """MJX's plane-box reports four vertices of a hovering box that are not its lowest ones (its
    manifold rule assumes penetration). CFD takes DiffMJX's plane-box for its rows, so with
    ``collision.smooth`` off the force from distance is the one of the four lowest corners: the
    same as with smoothing on, and the forward with straight-through CFD stays MJX's."""
    from cfd import cfd_contacts
    from diffmjx import _mjx

    _, mx = load("cube_toss")  # a 10 cm cube above a plane, gravity -2
    quat = np.array([0.92, 0.38, 0.05, 0.0])
    qpos = jnp.concatenate([jnp.array([0.0, 0.0, 0.12]), quat / np.linalg.norm(quat)])
    d = mjx.make_data(mx).replace(qpos=qpos)
    off = BASE.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.01, 0.1, 1.0, 2.0]", "collision.smooth=false")
    on = off.override("collision.smooth=true")

    lowest = box_corner_heights(mx, qpos)[:4]
    assert lowest[-1] < 0.1  # all four within w_c
    dist = np.sort(np.asarray(_mjx.contact(cfd_contacts(mx, _MJX_FORWARD(mx, d), off)).dist))
    np.testing.assert_allclose(dist, lowest, atol=1e-12)

    hover = jax.jit(lambda c: diffmjx.forward(mx, d, c).qacc, static_argnums=0)
    a_off, a_on = hover(off.override("cfd.in_forward=true")), hover(on.override("cfd.in_forward=true"))
    np.testing.assert_allclose(a_off, a_on, rtol=1e-9, atol=1e-12)
    assert float(a_on[2]) > -2.0 + 1e-3  # the forces from distance do push the cube up
    # straight-through: the forward is MJX's (free fall: nothing touches)
    np.testing.assert_array_equal(hover(off), _MJX_FORWARD(mx, d).qacc)


@pytest.mark.parametrize("floor", [0.0, 1e-4])
def test_cfd_rows_fade_out_at_w_c_with_impedance_floor_zero(floor):
    """With solver.impedance_floor = 0 and d_c = 0 a row's impedance goes to 0 as r -> w_c (the
    row switches off continuously); with MuJoCo's floor it stays at 1e-4 up to w_c and jumps."""
    from cfd import distance_rows
    from diffmjx import _mjx
    from diffmjx.physics import constraint
    from diffmjx.scenes import primitive

    _, mx = primitive("ball")  # radius 0.05
    w_c = 0.1
    cfg = CFD.override(f"cfd.solimp=[0.0, 0.01, {w_c}, 1.0, 2.0]").cfd

    def impedance(height):  # of the ball's contact rows: d = 1 / (1 + w D^-1) from D and the row weight w
        d = _MJX_FORWARD(mx, mjx.make_data(mx).replace(qpos=jnp.array([0.0, 0.0, height, 1.0, 0.0, 0.0, 0.0])))
        rows, _ = constraint.contact_rows(mx, _mjx.contact(d))
        efc_d = np.asarray(_mjx.efc(distance_rows(mx, d, cfg, floor))[1])[rows]
        deep = _MJX_FORWARD(mx, d.replace(qpos=d.qpos.at[2].set(0.0)))  # 5 cm deep: MJX's impedance 0.95
        weight = (1 / np.asarray(_mjx.efc(deep)[1])[rows]) * 0.95 / 0.05
        return efc_d * weight / (1 + efc_d * weight)

    inside = impedance(0.05 + w_c - 1e-6)  # 1 um inside w_c
    if floor == 0.0:
        assert np.all(inside < 1e-10)  # d_0 (1e-6 / w_c)^2 = 1e-12
    else:
        np.testing.assert_allclose(inside, 1e-4, rtol=1e-6)
    np.testing.assert_allclose(impedance(0.05 + 0.5 * w_c), 0.01 * 0.5**2, rtol=1e-6)  # the spline itself


@pytest.mark.parametrize("name", ["cfd_billiard", "cfd_mpc", "cfd_sysid"])
def test_cfd_presets_taper_off_from_contact(name):
    """The paper's CFD presets load, and each impedance falls from d_0 just outside contact to d_c
    at w_c (the sysid tuple read as printed: d_c = 0, d_0 = 0.01, w_c = 1 cm)."""
    from pathlib import Path

    cfg = diffmjx.Config.from_yaml(Path(diffmjx.__file__).parent / "presets" / f"{name}.yaml")
    d_c, d_0, w_c, _, _ = cfg.cfd.solimp
    assert cfg.cfd.enabled
    mj = (0.1, 0.95, 0.001, 0.5, 2.0) if name == "cfd_mpc" else (d_0, 0.95, 0.001, 0.5, 2.0)
    r = np.linspace(1e-9, w_c, 200)
    d = np.asarray(
        jax.vmap(lambda x: cfd_impedance(x, jnp.asarray(mj), jnp.asarray(cfg.cfd.solimp), 0.0))(jnp.asarray(r))
    )
    assert d[0] == pytest.approx(d_0, abs=1e-6) and d[-1] == pytest.approx(d_c, abs=1e-9)
    assert np.all(np.diff(d) <= 1e-15)
