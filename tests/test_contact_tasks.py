"""The contact-rich MPC tasks' premise (experiments.contact_mpc, docs/mpc.md): before the pusher
touches the box, the box's position has an exactly zero derivative with respect to the pusher's
controls, and contacts from distance give it one that points the pusher towards the box, with the
forward unchanged. (The pusher's contact with the box is frictionless: with friction, the distant
contact's pyramid edges spun the object the wrong way in the backward pass; docs/mpc.md.)

This also carries, by default, the claim that CFD's gradient is nonzero between bodies that never
touch (tests/test_cfd.py checks it through reverse-mode rollouts under -m slow)."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import scenes

SIM = diffmjx.Config().override("integrator.solver=mjx_euler", "integrator.substeps=10")  # as the study
CFD = SIM.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.1, 0.3, 1.0, 4.0]")


@pytest.fixture(scope="module")
def push():
    mj = mujoco.MjModel.from_xml_path(str(scenes.path("push")))
    return mj, mjx.put_model(mj)


def test_push_cfd_gradient_is_nonzero_where_the_plain_one_is_zero(push):
    mj, mx = push
    x_adr = mj.jnt_qposadr[mj.joint("object").id]  # the free joint's x: the box's position
    d0 = mjx.make_data(mx)

    def box_x(ctrl, cfg):  # the box's x after one control period (ten Euler steps)
        return diffmjx.step(mx, d0.replace(ctrl=ctrl), cfg).qpos[x_adr]

    # forward mode (the cheaper compile), both controls' directions in one program per config
    jac = jax.jit(
        lambda u, cfg: jax.vmap(lambda t: jax.jvp(lambda u: box_x(u, cfg), (u,), (t,)))(jnp.eye(2)), static_argnums=1
    )
    ctrl = jnp.zeros(mx.nu)
    (x_plain, plain), (x_cfd, cfd) = jac(ctrl, SIM), jac(ctrl, CFD)
    gap = float(mj.body("object").pos[0] - 0.03 - (mj.body("pusher").pos[0] + 0.02))
    assert gap > 0.04  # the pusher starts 5 cm from the box: no contact
    np.testing.assert_array_equal(np.asarray(plain), 0.0)
    assert float(cfd[0]) > 1e-6, cfd  # pushing in +x moves the box in +x, from distance ...
    np.testing.assert_array_equal(np.asarray(x_cfd), np.asarray(x_plain))  # ... in the derivative only
    assert abs(float(cfd[1])) < 1e-9 * float(cfd[0])  # and pushing sideways does not, to rounding
