"""The contact-rich MPC tasks' premise (experiments.contact_mpc, docs/mpc.md): before the pusher
touches the box, the box's position has an exactly zero gradient with respect to the pusher's
controls, and contacts from distance give it one that points the pusher towards the box. (The pusher's
contact with the box is frictionless: with friction, the distant contact's pyramid edges spun the
object the wrong way in the backward pass; docs/mpc.md.)"""

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
    obj = mj.body("object").id
    d0 = mjx.make_data(mx)

    def box_x(ctrl, cfg):  # the box's x after one control period (ten Euler steps)
        d = diffmjx.step(mx, d0.replace(ctrl=ctrl), cfg)
        return diffmjx.forward(mx, d, cfg).xpos[obj, 0]

    grad = jax.jit(jax.grad(box_x), static_argnums=1)
    ctrl = jnp.zeros(mx.nu)
    plain, cfd = np.asarray(grad(ctrl, SIM)), np.asarray(grad(ctrl, CFD))
    gap = float(mj.body("object").pos[0] - 0.03 - (mj.body("pusher").pos[0] + 0.02))
    assert gap > 0.04  # the pusher starts 5 cm from the box: no contact
    np.testing.assert_array_equal(plain, 0.0)
    # pushing in +x moves the box in +x (from distance), pushing sideways does not (to rounding)
    assert cfd[0] > 1e-6, cfd
    assert abs(cfd[1]) < 1e-9 * cfd[0], cfd
    # the forward trajectory is MJX's: contacts from distance act in the backward pass only
    d_plain = diffmjx.step(mx, d0.replace(ctrl=jnp.array([1.0, 0.0])), SIM)
    d_cfd = diffmjx.step(mx, d0.replace(ctrl=jnp.array([1.0, 0.0])), CFD)
    np.testing.assert_array_equal(np.asarray(d_plain.qpos), np.asarray(d_cfd.qpos))
