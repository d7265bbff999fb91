"""The contact-rich MPC tasks' premise (experiments.contact_mpc, docs/mpc.md): before the pusher
touches the box, the box's position has an exactly zero derivative with respect to the pusher's
controls, and contacts from distance give it one that points the pusher towards the box, with the
forward unchanged. Checked with the pusher's friction restored (``scenes.geom_pair_friction``):
CFD's rows push along the normal only until the bodies touch (``cfd.friction=contact``, the
default), while the paper's rows (``distance``) drag the box sideways with a pusher sliding past.

This also carries, by default, the claim that CFD's gradient is nonzero between bodies that never
touch (tests/test_cfd.py checks it through reverse-mode rollouts under -m slow)."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import mpc, scenes

SIM = diffmjx.Config().override("integrator.solver=mjx_euler", "integrator.substeps=10")  # as the study
CFD = SIM.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.1, 0.3, 1.0, 4.0]")


@pytest.fixture(scope="module")
def push():
    """The push scene with the pusher's friction restored (the scene's own pair is frictionless, as
    the contact study's rows were made; the frictional case is the harder one for CFD)."""
    mj = scenes.geom_pair_friction(mujoco.MjModel.from_xml_path(str(scenes.path("push"))))
    return mj, mjx.put_model(mj)


@pytest.mark.slow  # suite budget: by default the elliptic-cone test below makes the same claims on the push
# with friction (zero without CFD, the forward unchanged, along the normal only), in one Euler step
def test_push_cfd_gradient_is_nonzero_where_the_plain_one_is_zero(push):
    mj, mx = push
    x_adr = mj.jnt_qposadr[mj.joint("object").id]  # the free joint's x, y: the box's position
    d0 = mjx.make_data(mx)

    def box_xy(ctrl, cfg):  # the box's x and y after one control period (ten Euler steps)
        return diffmjx.step(mx, d0.replace(ctrl=ctrl), cfg).qpos[x_adr : x_adr + 2]

    # forward mode (the cheaper compile), both controls' directions in one program per config
    jac = jax.jit(
        lambda u, cfg: jax.vmap(lambda t: jax.jvp(lambda u: box_xy(u, cfg), (u,), (t,)))(jnp.eye(2)), static_argnums=1
    )
    ctrl = jnp.zeros(mx.nu)
    (x_plain, plain), (x_cfd, cfd) = jac(ctrl, SIM), jac(ctrl, CFD)
    gap = float(mj.body("object").pos[0] - 0.03 - (mj.body("pusher").pos[0] + 0.02))
    assert gap > 0.04  # the pusher starts 5 cm from the box: no contact
    np.testing.assert_array_equal(np.asarray(plain), 0.0)
    # rows: the pusher's control in x, in y; columns: the box's x, y
    assert float(cfd[0, 0]) > 1e-6, cfd  # pushing in +x moves the box in +x, from distance ...
    np.testing.assert_array_equal(np.asarray(x_cfd), np.asarray(x_plain))  # ... in the derivative only
    # pushing sideways moves the box neither along the push nor sideways (the normal is along x)
    assert np.abs(np.asarray(cfd)[[0, 1, 1], [1, 0, 1]]).max() < 1e-9 * float(cfd[0, 0]), cfd


@pytest.mark.slow  # suite budget: the default rows' normal-only gradient is checked by default below
def test_the_papers_rows_drag_the_box_sideways_from_a_distance(push):
    """The paper's rows (cfd.friction=distance): the friction pyramid acts at a distance, so a
    pusher sliding sideways past the box drags it sideways in the derivative (8e-5 of the push's
    own effect after one period), where the default rows give exactly zero."""
    mj, mx = push
    x_adr = mj.jnt_qposadr[mj.joint("object").id]
    d0 = mjx.make_data(mx)
    box_y = lambda uy: diffmjx.step(mx, d0.replace(ctrl=jnp.stack([0.0, uy])), CFD.override("cfd.friction=distance"))
    box_x = lambda ux: diffmjx.step(mx, d0.replace(ctrl=jnp.stack([ux, 0.0])), CFD.override("cfd.friction=distance"))
    sideways = float(jax.jit(jax.grad(lambda u: box_y(u).qpos[x_adr + 1]))(0.0))
    along = float(jax.jit(jax.grad(lambda u: box_x(u).qpos[x_adr]))(0.0))
    assert along > 1e-6 and abs(sideways) > 1e-6 * along, (along, sideways)


def test_cfd_builds_elliptic_rows_that_push_along_the_normal_only_from_a_distance():
    """Elliptic cones, the pusher 5 cm from the box: without CFD the box's derivative is exactly zero;
    with it the forward is unchanged, CFD's friction rows are dropped from a distance and the normal
    row pushes. One Euler step (MJX's elliptic line search has a NaN derivative at zero tangential force, so a
    resting box's multi-step gradient is NaN with or without CFD; docs/cfd.md)."""
    mj = scenes.geom_pair_friction(mujoco.MjModel.from_xml_path(str(scenes.path("push"))))
    mj.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    mx = mjx.put_model(mj)
    x_adr = mj.jnt_qposadr[mj.joint("object").id]
    d0 = mjx.make_data(mx)
    one = CFD.override("integrator.substeps=1", "solver.gradient=unroll")
    plain_one = one.override("cfd.enabled=false")
    box_xy = lambda u, cfg: diffmjx.step(mx, d0.replace(ctrl=u), cfg).qpos[x_adr : x_adr + 2]
    # both controls' directions in one forward-mode program per config
    jac = jax.jit(
        lambda u, cfg: jax.vmap(lambda t: jax.jvp(lambda u: box_xy(u, cfg), (u,), (t,)))(jnp.eye(mx.nu)),
        static_argnums=1,
    )
    u0 = jnp.zeros(mx.nu)
    (x_plain, plain), (x_cfd, cfd) = jac(u0, plain_one), jac(u0, one)  # rows: the controls x, y; columns: box x, y
    assert float(mj.body("object").pos[0] - 0.03 - (mj.body("pusher").pos[0] + 0.02)) > 0.04  # 5 cm apart
    np.testing.assert_array_equal(np.asarray(plain), 0.0)  # without CFD: no contact, no derivative
    np.testing.assert_array_equal(np.asarray(x_cfd), np.asarray(x_plain))  # CFD: the derivative only
    cfd = np.asarray(cfd)
    assert cfd[0, 0] > 1e-6, cfd
    assert np.abs(cfd[[0, 1, 1], [1, 0, 1]]).max() < 1e-9 * cfd[0, 0], cfd


def test_ilqr_moves_the_box_from_a_start_out_of_contact_with_its_defaults(push):
    """iLQR with the planner's defaults (keep_best: only steps that lower the cost) and contacts from
    distance at *their* defaults, on the push with the pusher's friction restored: the pusher starts
    5 cm from the box, where the box's cost does not depend on the controls and CFD's gradient is
    small against the effort's curvature. The Newton steps alone barely move the pusher, so no step
    lowers the cost and every iteration is rejected; with the default ``ilqr_reach`` (the same
    direction at a fixed share of the control range) three iterations reach the box and push it
    (cost 0.5 -> 0.486, 0.483, 0.306 measured)."""
    mj, mx = push
    sim = SIM.override("cfd.enabled=true")
    obj = mj.body("object").id
    d0 = mjx.make_data(mx).replace(mocap_pos=jnp.asarray([[0.25, 0.0, 0.001]]))

    def cost(d, ctrl):
        return jnp.sum((d.xpos[obj, :2] - d.mocap_pos[0, :2]) ** 2) + 1e-3 * jnp.sum(ctrl**2)

    cfg = mpc.PlannerConfig(kind="ilqr", horizon=8, execute=4, iterations=3)
    planner = mpc.make_planner(cfg, sim)
    kw = dict(
        line_search=cfg.line_search,
        retries=cfg.ilqr_retries,
        descent=cfg.keep_best,
        jacobian=planner.method.jacobian,
    )

    @jax.jit
    def three_iterations(reach):  # one program for both settings: reach's values are traced
        def body(state, _):
            state = mpc.ilqr.iteration(mx, d0, state, cost, sim, reach=reach, **kw)[0]
            return state, state.cost

        return jax.lax.scan(body, mpc.ilqr.init(jnp.zeros((8, 2)), cfg.regularization), None, length=3)

    newton, costs = three_iterations(jnp.zeros(len(cfg.ilqr_reach)))  # rescaled by 0: never cheaper
    idle = float(costs[0])  # a rejected iteration keeps the plan and its cost: the idle plan's
    assert np.isfinite(idle) and idle > 0.1, idle
    np.testing.assert_allclose(np.asarray(costs), idle, rtol=0.01)  # rejected, or steps that gain nothing
    assert float(jnp.max(jnp.abs(newton.u))) < 0.01  # stayed on the plateau
    state, costs = three_iterations(jnp.asarray(cfg.ilqr_reach))
    # the cost sees only the box (and a 1e-3 effort): a lower cost is a box moved towards the target
    assert float(state.cost) < 0.8 * idle, (float(state.cost), idle)
