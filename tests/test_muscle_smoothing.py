"""``muscle.tausmooth``: the smooth surrogate of the muscle activation switch (paper App. C.1).

A one-muscle arm: the forward equals MuJoCo's C engine for the same model with ``tausmooth`` set
in MJCF, and the derivative of ``act_dot`` in the control is continuous through ``ctrl = act``
with the surrogate (central differences across the switch agree with AD) and kinked without it.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx

ARM = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <site name="anchor" pos="0 0 0.3"/>
    <body>
      <joint name="elbow" type="hinge" axis="0 1 0" limited="true" range="-1.5 1.5"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="1"/>
      <site name="insertion" pos="0.15 0 0.02"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="path"><site site="anchor"/><site site="insertion"/></spatial>
  </tendon>
  <actuator>
    <muscle tendon="path" name="biceps" {extra}/>
  </actuator>
</mujoco>
"""

# (ctrl, act, qpos): on both sides of the activation switch, at it, and at the clamps
STATES = [(0.5, 0.2, 0.3), (0.2, 0.5, -0.4), (0.4, 0.4, 0.1), (0.41, 0.4, 0.0), (1.2, 0.7, 0.5), (-0.1, 0.05, -1.0)]


def _c_act_dot(extra):
    mj = mujoco.MjModel.from_xml_string(ARM.format(extra=extra))
    out = []
    for ctrl, act, q in STATES:
        d = mujoco.MjData(mj)
        d.qpos[:], d.act[:], d.ctrl[:] = q, act, ctrl
        mujoco.mj_forward(mj, d)
        out.append((d.act_dot[0], d.qacc[0]))
    return np.array(out)


@pytest.fixture(scope="module")
def arm():
    mj = mujoco.MjModel.from_xml_string(ARM.format(extra=""))
    return mj, mjx.put_model(mj)


def _forward_fn(mx, tausmooth):
    cfg = diffmjx.Config().override(f"muscle.tausmooth={'null' if tausmooth is None else tausmooth}")

    @jax.jit
    def f(ctrl, act, q):
        d = mjx.make_data(mx).replace(qpos=jnp.array([q]), act=jnp.array([act]), ctrl=jnp.array([ctrl]))
        d = diffmjx.forward(mx, d, cfg)
        return d.act_dot[0], d.qacc[0]

    return f


@pytest.mark.parametrize("tausmooth", [None, 0.0, 0.3])
def test_forward_equals_the_c_engine_with_the_same_tausmooth(arm, tausmooth):
    """None keeps the model's own (MuJoCo's default 0); a value is the MJCF attribute's model."""
    _, mx = arm
    f = _forward_fn(mx, tausmooth)
    ours = np.array([[float(v) for v in f(*s)] for s in STATES])
    ref = _c_act_dot("" if tausmooth is None else f'tausmooth="{tausmooth}"')
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-9)
    if tausmooth == 0.3:  # the blend is visible: (0.41, 0.4) sits inside it
        hard = _c_act_dot("")
        assert abs(hard[3, 0] - ref[3, 0]) > 0.1 * abs(hard[3, 0])


def test_surrogate_makes_the_control_derivative_continuous_through_the_switch(arm):
    """At ctrl = act + 1e-4 the hard switch's AD derivative is the activation slope, while a
    central difference of step 1e-3 straddles the switch and averages in the deactivation slope
    (tau_deact / tau_act = 4 here, at act 0.4: the two slopes differ by a factor 4 x (0.5 + 1.5
    act)^2). With ``tausmooth`` the derivative is continuous and the two agree."""
    _, mx = arm
    act, q, h = 0.4, 0.1, 1e-3
    u = act + 1e-4

    def rel_gap(tausmooth):
        f = _forward_fn(mx, tausmooth)
        ad = float(jax.grad(lambda c: f(c, act, q)[0])(u))
        cd = (float(f(u + h, act, q)[0]) - float(f(u - h, act, q)[0])) / (2 * h)
        return abs(ad - cd) / abs(cd)

    assert rel_gap(None) > 0.2  # measured 0.46: the kink
    assert rel_gap(0.3) < 1e-3  # measured 4e-5: smooth (the step is well inside the blend)
