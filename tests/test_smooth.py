"""DiffMJX's kinematics, com_pos and velocity stage (diffmjx.physics.smooth, diffmjx.physics.rules) against MJX's own stages:
values and derivatives in both modes, under jit and vmap, on models with every joint type, sites, a
mocap body, springs, dampers, tendons, gravity compensation and fluid forces; a gradient through a
contact rollout against the same with MJX's stages."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from diffmjx import _mjx
from diffmjx.physics import manifold, rules, smooth

jax.config.update("jax_enable_x64", True)

XML = """
<mujoco>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body mocap="true" pos=".3 .1 .5" quat=".9 .1 .3 .2"><geom type="sphere" size=".05" contype="0" conaffinity="0"/></body>
    <body name="free" pos="0 0 .4" quat=".8 .2 .5 .1">
      <freejoint/>
      <geom type="box" size=".1 .07 .05" pos=".02 0 .01" quat=".9 .3 0 .1"/>
      <site pos=".1 .0 .05"/>
      <body pos=".15 0 0" quat=".7 .1 .7 .1">
        <joint type="ball"/>
        <geom type="capsule" size=".02 .1" pos="0 0 .1"/>
        <body pos="0 0 .2">
          <joint type="hinge" axis=".3 1 .2" pos="0 .01 0"/>
          <joint type="slide" axis="1 0 .5"/>
          <inertial pos=".01 .02 .03" quat=".6 .4 .3 .2" mass=".3" diaginertia=".01 .02 .015"/>
          <geom type="sphere" size=".03"/>
          <site pos="0 .02 .04" quat=".5 .5 .5 .5"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

FIELDS = (
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "subtree_com",
    "xanchor",
    "xaxis",
    "cdof",
    "cinert",
)


def _get(d, f):
    return _mjx.cinert(d) if f == "cinert" else getattr(d, f)


@pytest.fixture(scope="module")
def setup():
    m = mujoco.MjModel.from_xml_string(XML)
    mx = _mjx.mjx.put_model(m)
    d0 = _mjx.make_data(mx)
    rng = np.random.default_rng(0)
    qs = np.stack([m.qpos0 + 0.4 * rng.standard_normal(m.nq) for _ in range(2)])
    qs[:, 3:7] /= np.linalg.norm(qs[:, 3:7], axis=1, keepdims=True)
    return mx, d0, jnp.asarray(qs), rng


def _outputs(stage_k, stage_c, mx, d0):
    def f(q):
        d = stage_c(mx, stage_k(mx, d0.replace(qpos=q)))
        return jnp.concatenate([jnp.ravel(_get(d, f)) for f in FIELDS])

    return f


def _both_modes(ref, mine, xs, rng):
    """(values, JVPs, VJPs) of ``ref`` and of ``mine`` at the rows of ``xs``, along the same random
    tangents and cotangents, under jit and vmap."""
    t = jnp.asarray(rng.standard_normal(xs.shape))
    w = jnp.asarray(rng.standard_normal((xs.shape[0], ref(xs[0]).size)))

    def all_of(f):
        jvp = lambda x, t: jax.jvp(f, (x,), (t,))
        vjp = lambda x, w: jax.vjp(f, x)[1](w)[0]
        return jax.jit(lambda x, t, w: (*jax.vmap(jvp)(x, t), jax.vmap(vjp)(x, w)))

    return all_of(ref)(xs, t, w), all_of(mine)(xs, t, w)


def test_values_and_both_derivatives_are_mjxs(setup):
    mx, d0, qs, rng = setup
    ref = _outputs(_mjx.kinematics, _mjx.com_pos, mx, d0)
    mine = _outputs(smooth.kinematics, smooth.com_pos, mx, d0)
    (va, ja, ga), (vb, jb, gb) = _both_modes(ref, mine, qs, rng)
    assert float(jnp.max(jnp.abs(va))) > 0.1  # the poses are not trivial
    np.testing.assert_allclose(vb, va, rtol=0, atol=1e-13)
    np.testing.assert_allclose(jb, ja, rtol=0, atol=1e-10)
    np.testing.assert_allclose(gb, ga, rtol=0, atol=1e-10)


def test_quaternion_algebra_is_mujocos(setup):
    *_, rng = setup
    u, v = rng.standard_normal((2, 5, 4))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    prod, mats = np.zeros((5, 4)), np.zeros((5, 9))
    for i in range(5):
        mujoco.mju_mulQuat(prod[i], u[i], v[i])
        mujoco.mju_quat2Mat(mats[i], u[i])
    np.testing.assert_allclose(manifold.quat_mul(jnp.asarray(u), jnp.asarray(v)), prod, atol=1e-15)
    np.testing.assert_allclose(smooth.unit_quat_to_mat(jnp.asarray(u)).reshape(5, 9), mats, atol=1e-15)


BOX_DROP = """
<mujoco>
  <option timestep="0.002"/>
  <default><geom solimp="0 0.95 0.001 0.5 2"/></default>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body pos="0 0 .06" quat=".97 .1 .2 .05"><freejoint/><geom type="box" size=".05 .04 .03"/></body>
  </worldbody>
</mujoco>
"""


def test_a_gradient_through_a_contact_rollout_is_mjxs_to_rounding(monkeypatch):
    """A tilted box dropped onto the plane (corners in contact from the first steps, friction on):
    the gradient of its end pose with respect to its start velocity, with DiffMJX's kinematics,
    com_pos and velocity stage and with MJX's own stages in their place, ten semi-implicit Euler steps: the same to
    rounding. A stand-in that is not MJX's kinematics changes the result (the swap takes effect)."""
    import diffmjx
    from diffmjx.physics import dynamics

    m = mujoco.MjModel.from_xml_string(BOX_DROP)
    mx = _mjx.mjx.put_model(m)
    d0 = _mjx.make_data(mx)
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")
    ctrl = jnp.zeros((10, 0))

    def end_pose(v):
        d, _ = diffmjx.rollout(mx, d0.replace(qvel=v), ctrl, cfg)
        return jnp.sum(d.qpos * jnp.arange(1.0, 8.0)), jnp.max(jnp.abs(_mjx.efc_force(d)))

    def gradient():  # traced anew each call: the stages are looked up when traced
        return jax.jit(jax.value_and_grad(end_pose, has_aux=True))(jnp.asarray([0.3, -0.2, -0.4, 2.0, -1.0, 1.5]))

    (value, force), ours = gradient()
    assert float(force) > 0.1  # the box is pressing on the plane at the end
    assert float(jnp.max(jnp.abs(ours))) > 0.01  # the start velocity does move the end pose
    monkeypatch.setattr(dynamics.smooth, "kinematics", _mjx.kinematics)
    monkeypatch.setattr(dynamics.smooth, "com_pos", _mjx.com_pos)
    monkeypatch.setattr(dynamics.smooth, "fwd_velocity", _mjx.fwd_velocity)
    (value_mjx, _), theirs = gradient()
    np.testing.assert_allclose(float(value), float(value_mjx), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-9, atol=1e-12)
    shifted = lambda m, d: _mjx.kinematics(m, d.replace(qpos=d.qpos.at[2].add(1e-3)))  # the box 1 mm higher
    monkeypatch.setattr(dynamics.smooth, "kinematics", shifted)
    value_shifted = jax.jit(end_pose)(jnp.asarray([0.3, -0.2, -0.4, 2.0, -1.0, 1.5]))[0]  # a forward suffices
    assert abs(float(value_shifted) - float(value)) > 1e-6  # the swap reaches the traced program


SPRINGS = """
<mujoco>
  <option density="1.2" viscosity="0.01"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="free" pos="0 0 .4" quat=".8 .2 .5 .1" gravcomp=".4">
      <freejoint/>
      <geom type="box" size=".1 .07 .05" pos=".02 0 .01"/>
      <site name="a" pos=".1 0 .05"/>
      <body pos=".15 0 0" quat=".7 .1 .7 .1">
        <joint type="ball" stiffness="3" damping=".2" springref="0"/>
        <geom type="capsule" size=".02 .1" pos="0 0 .1"/>
        <body pos="0 0 .2">
          <joint name="h" type="hinge" axis=".3 1 .2" pos="0 .01 0" stiffness="2" springref=".3" damping=".1"/>
          <joint name="s" type="slide" axis="1 0 .5" stiffness="5" damping=".3"/>
          <geom type="sphere" size=".03"/>
          <site name="b" pos="0 .02 .04"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial stiffness="40" damping=".5" springlength=".1 .15"><site site="a"/><site site="b"/></spatial>
    <fixed stiffness="7" damping=".2" springlength=".05"><joint joint="h" coef="1"/><joint joint="s" coef="-.5"/></fixed>
  </tendon>
</mujoco>
"""


def test_passive_forces_and_both_derivatives_are_mjxs():
    """DiffMJX's velocity stage (every joint spring at once) against MJX's on springs of every joint
    type (a free joint's too: stiffness set after compiling), dampers, tendon springs and dampers,
    gravity compensation and fluid forces: values, JVPs and VJPs with respect to (qpos, qvel), under
    jit and vmap. A spring's derivative at its own reference is right where MJX's is zero."""
    m = mujoco.MjModel.from_xml_string(SPRINGS)
    m.jnt_stiffness[0] = 4.0
    m.qpos_spring[:7] = [0.1, -0.2, 0.5, 0.6, 0.0, 0.8, 0.0]
    mx = _mjx.mjx.put_model(m)
    d0 = _mjx.make_data(mx)
    rng = np.random.default_rng(1)
    qs = np.stack([m.qpos0 + 0.4 * rng.standard_normal(m.nq) for _ in range(3)])
    for a in (3, 7):
        qs[:, a : a + 4] /= np.linalg.norm(qs[:, a : a + 4], axis=1, keepdims=True)
    x = jnp.asarray(np.concatenate([qs, rng.standard_normal((3, m.nv))], axis=1))
    fields = ("qfrc_passive", "qfrc_gravcomp", "qfrc_bias", "cvel", "cdof_dot")

    def outputs(velocity):
        def f(x):
            d = d0.replace(qpos=x[: m.nq], qvel=x[m.nq :])
            for stage in (_mjx.kinematics, _mjx.com_pos, _mjx.tendon, _mjx.transmission, velocity):
                d = stage(mx, d)
            return jnp.concatenate([jnp.ravel(getattr(d, k)) for k in fields])

        return f

    ref, mine = outputs(_mjx.fwd_velocity), outputs(smooth.fwd_velocity)
    (va, ja, ga), (vb, jb, gb) = _both_modes(ref, mine, x, rng)
    passive = np.asarray(va[:, : m.nv])
    assert np.min(np.abs(passive)) > 1e-3 and np.max(np.abs(va[:, m.nv : 2 * m.nv])) > 1e-3  # every dof sprung
    np.testing.assert_allclose(vb, va, rtol=0, atol=1e-12)
    np.testing.assert_allclose(jb, ja, rtol=0, atol=1e-10)
    np.testing.assert_allclose(gb, ga, rtol=0, atol=1e-10)

    # a stiffness of zero being fitted (traced) still moves the forces: -offset per unit stiffness
    mx0 = mx.replace(jnt_stiffness=jnp.zeros_like(mx.jnt_stiffness))
    dpos = jax.jit(lambda x: _mjx.tendon(mx0, _mjx.com_pos(mx0, _mjx.kinematics(mx0, d0.replace(qpos=x[: m.nq])))))(
        x[0]
    )
    dk = jax.jacfwd(lambda k: smooth.passive(mx0.replace(jnt_stiffness=k), dpos).qfrc_passive)(mx0.jnt_stiffness)
    offsets = smooth.spring_offsets(mx0, dpos.qpos, mx0.qpos_spring)
    np.testing.assert_allclose(dk, -np.eye(m.njnt)[m.dof_jntid] * np.asarray(offsets)[:, None], atol=1e-14)
    assert np.min(np.abs(offsets)) > 1e-3

    # at the reference: the rotation vector's derivative is the identity (MJX's is zero there)
    qrest = jnp.asarray(m.qpos_spring)
    layout = manifold.JointLayout.from_model(m)
    jac = jax.jacfwd(lambda dq: smooth.spring_offsets(mx, manifold.retract(layout, qrest, dq), qrest))(jnp.zeros(m.nv))
    np.testing.assert_allclose(jac, np.eye(m.nv), atol=1e-12)


def test_value_with_derivative_keeps_the_value_and_takes_the_functions_derivative():
    """The rule returns the value it is given, differentiates as ``fn`` in both modes and under
    vmap (only the inputs that carry a tangent pushed through), and a program that differentiates
    nothing never calls ``fn``."""
    calls = []

    def fn(x, y):
        calls.append(1)
        return jnp.sin(x) * y, x**2

    def f(x, y):  # the value is off by 1e-3 and has a derivative of its own, which is dropped
        return rules.value_with_derivative(fn, (jnp.sin(x) * y + 1e-3 * x, x**2), x, y)

    x, y = jnp.array([0.3, -1.2]), jnp.array([2.0, 0.5])
    jax.jit(f)(x, y)
    assert not calls  # traced for the value only
    np.testing.assert_allclose(f(x, y)[0], jnp.sin(x) * y + 1e-3 * x)
    tx = jnp.array([1.0, -2.0])
    np.testing.assert_allclose(jax.jvp(lambda x: f(x, y), (x,), (tx,))[1][0], jnp.cos(x) * y * tx, rtol=1e-15)
    w = (jnp.array([0.7, 1.1]), jnp.array([-0.4, 0.9]))
    ours = jax.vmap(lambda x, y: jax.vjp(f, x, y)[1](w))(x[None] + jnp.zeros((3, 1)), y[None] * jnp.ones((3, 1)))
    theirs = jax.vjp(fn, x, y)[1](w)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, np.broadcast_to(b, a.shape), rtol=1e-15)
