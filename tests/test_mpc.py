"""Planners (diffmjx.mpc) on a small actuated slider: they lower the cost, the closed loop keeps its
contract, sampling is the same sharded over two devices, and rollout's observation hook."""

import dataclasses
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import mpc
from diffmjx.mpc import plants

SLIDER = """
<mujoco>
  <option timestep="0.05"/>
  <worldbody>
    <body name="cart">
      <joint name="x" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size="0.05 0.05 0.05" mass="1"/>
      <site name="tip" pos="0.05 0 0"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" ctrlrange="-1 1" ctrllimited="true"/></actuator>
</mujoco>
"""
TARGET = 0.3
SIM = diffmjx.Config().override("integrator.solver=mjx_euler")


def cost(d, ctrl):
    """Distance of the site to the target, read from the observed Data, plus a small effort term."""
    return (d.site_xpos[0, 0] - 0.05 - TARGET) ** 2 + 1e-3 * jnp.sum(ctrl**2)


@pytest.fixture(scope="module")
def slider():
    mj = mujoco.MjModel.from_xml_string(SLIDER)
    mx = mjx.put_model(mj)
    return mx, mjx.make_data(mx)


def test_rollout_observes_each_period_end_state_and_returns_step_sizes(slider):
    mx, d0 = slider
    u = jnp.linspace(-1.0, 1.0, 5)[:, None]
    _, traj = jax.jit(
        lambda d: diffmjx.rollout(mx, d, u, diffmjx.Config(), observe=lambda d: (d.site_xpos[0], d.ctrl))
    )(d0)
    site, ctrl = traj.obs
    np.testing.assert_allclose(np.asarray(site[:, 0]), np.asarray(traj.qpos[:, 0]) + 0.05, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(ctrl), np.asarray(u))  # each period's own control
    dt = np.asarray(traj.dt)
    assert dt.shape == (5,) and np.all(dt > 0) and np.all(dt <= 0.05 + 1e-15)
    _, plain = diffmjx.rollout(mx, d0, u, diffmjx.Config())
    assert plain.obs is None
    with pytest.raises(ValueError, match="observe must be a function"):
        diffmjx.rollout(mx, d0, u, diffmjx.Config(), observe=3)


def _do_nothing_cost(mx, d0, steps):
    return float(mpc.plan_cost(mx, d0, jnp.zeros((steps, 1)), cost, SIM)[0]) / steps


# suite budget: all under -m slow (the closed loop equals the one-program plan, resumes from its
# checkpoint and iLQR reaches Adam's cost on the slider, by default)
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sampling", "gradient", "hybrid"])
def test_closed_loop_planners_drive_the_slider_to_its_target(slider, kind):
    mx, d0 = slider
    cfg = mpc.PlannerConfig.load(
        "quick",
        [
            f"kind={kind}",
            "horizon=12",
            "execute=4",
            "iterations=6",
            "learning_rate=0.1",
            "samples=16",
            "noise_scale=0.3",
        ],
    )
    planner = mpc.make_planner(cfg, SIM)
    out = mpc.closed_loop(mx, d0, cost, planner, steps=16, key=jax.random.PRNGKey(0), progress=False)
    assert out.qpos.shape == (16, 1) and out.ctrl.shape == (16, 1) and out.cost.shape == (16,)
    assert out.plan_time_s.shape == (4,) and out.plan_cost.shape == (4,) and out.jit_time_s > 0
    assert np.all(np.abs(out.ctrl) <= 1.0)  # controls kept in the actuator's range
    # the executed cost is the cost of the executed states
    np.testing.assert_allclose(out.cost[-1], (out.qpos[-1, 0] - TARGET) ** 2 + 1e-3 * out.ctrl[-1, 0] ** 2, rtol=1e-9)
    idle = (0.0 - TARGET) ** 2
    assert out.cost[-4:].mean() < 0.25 * idle, out.cost  # it got there (and stayed near)
    assert out.cost.mean() < 0.7 * _do_nothing_cost(mx, d0, 16)


@pytest.mark.slow  # suite budget: the iLQR comparison below checks the same on a 30-iteration plan
def test_gradient_planner_keeps_its_lowest_cost_iterate(slider):
    mx, d0 = slider
    cfg = mpc.PlannerConfig(kind="gradient", horizon=8, execute=4, iterations=5, learning_rate=2.5, clip_norm=None)
    plan, info = jax.jit(
        lambda d: mpc.make_planner(cfg, SIM).plan(mx, d, jnp.zeros((8, 1)), cost, jax.random.PRNGKey(0))
    )(d0)
    trace = np.asarray(info["trace"])
    assert float(info["cost"]) <= trace.min() + 1e-12  # never worse than any iterate it saw
    np.testing.assert_allclose(float(mpc.plan_cost(mx, d0, plan, cost, SIM)[0]), float(info["cost"]), rtol=1e-12)


# suite budget: gradient by default (every kind runs through the same loop); ilqr and hybrid under -m slow
@pytest.mark.parametrize("kind", ["gradient", *(pytest.param(k, marks=pytest.mark.slow) for k in ("ilqr", "hybrid"))])
def test_closed_loop_iterations_equal_the_one_program_plan(slider, kind):
    """closed_loop runs the gradient iterations as a Python loop over one compiled step (a scan of
    a large model's gradient compiles far slower); its first plan is planner.plan's."""
    mx, d0 = slider
    cfg = mpc.PlannerConfig(kind=kind, horizon=8, execute=4, iterations=4, learning_rate=0.15, samples=4)
    planner = mpc.make_planner(cfg, SIM)
    key = jax.random.PRNGKey(5)
    plant = None
    if kind == "gradient":  # and: first_iterations is the first plan step's count, and ``plant`` is
        # what executes (ten times the damping here: the C engine's steps of the executed controls)
        loop = mpc.make_planner(dataclasses.replace(cfg, iterations=1, first_iterations=4), SIM)
        mj = mujoco.MjModel.from_xml_string(SLIDER)
        mj.dof_damping[:] = 1.0
        plant = mjx.put_model(mj)
        with pytest.raises(ValueError, match="plant's"):
            mpc.closed_loop(
                mx,
                d0,
                cost,
                loop,
                4,
                key,
                plant=mjx.put_model(mujoco.MjModel.from_xml_string(SLIDER.replace('"0.05"', '"0.02"'))),
            )
    out = mpc.closed_loop(
        mx, d0, cost, loop if plant is not None else planner, steps=4, key=key, progress=False, plant=plant
    )
    _, sub = jax.random.split(key)
    _, sub = jax.random.split(_)  # closed_loop's key for its first plan step
    plan, info = jax.jit(lambda d, k: planner.plan(mx, d, jnp.zeros((8, 1)), cost, k))(d0, sub)
    np.testing.assert_allclose(out.plan_cost[0], float(info["cost"]), rtol=1e-12)
    np.testing.assert_allclose(out.ctrl, np.asarray(plan)[:4], rtol=1e-12, atol=1e-15)
    if plant is not None:
        data, moved = mujoco.MjData(mj), []
        for u in out.ctrl:
            data.ctrl[:] = u
            mujoco.mj_step(mj, data)
            moved.append(data.qpos.copy())
        np.testing.assert_allclose(out.qpos, np.asarray(moved), rtol=1e-9, atol=1e-12)


def test_contacts_only_with_keeps_the_objects_pairs_and_adds_none():
    """A planning model without the hand's self-contacts: every pair of the object's geoms stays,
    every other pair goes, and a geom that collides with nothing still collides with nothing."""
    xml = """
    <mujoco><worldbody><geom name="floor" type="plane" size="1 1 0.1"/>
      <body name="a" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
      <body name="b" pos="0 0 2"><freejoint/><geom type="capsule" size="0.1 0.2"/>
        <geom type="sphere" size="0.05" contype="0" conaffinity="0"/></body>
      <body name="ball" pos="0 0 3"><freejoint/><geom type="sphere" size="0.1"/></body>
    </worldbody></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    pairs = lambda model: {tuple(sorted(p)) for p in plants.filtered_pairs(model)}
    kept = pairs(mpc.contacts_only_with(mj, ["ball"]))
    ball = int(mj.body("ball").geomadr[0])
    assert kept == {p for p in pairs(mj) if ball in p} and len(kept) == 3  # floor, a, b's capsule
    assert pairs(mpc.contacts_only_with(mj, ["ball", "a"])) == {p for p in pairs(mj) if ball in p or 1 in p}
    # ``among``: the pairs among these geoms stay as well (a's sphere and b's capsule), not theirs with the floor
    assert pairs(mpc.contacts_only_with(mj, ["ball"], among=[1, 2])) == kept | {(1, 2)}
    with pytest.raises(ValueError, match="no body 'hand'"):
        mpc.contacts_only_with(mj, ["hand"])
    with pytest.raises(ValueError, match="among: no geom 'nail'"):
        mpc.contacts_only_with(mj, ["ball"], among=["nail"])


def test_ilqr_reaches_adams_final_cost_in_a_tenth_of_the_iterations(slider):
    """On the slider's plan (8 periods from rest), 3 iLQR iterations end at or below the cost that 30
    Adam iterations reach (a fifth below doing nothing: 8 periods cannot reach the target), and each accepted iteration lowers the cost."""
    mx, d0 = slider
    nominal = jnp.zeros((8, 1))
    adam = mpc.PlannerConfig(kind="gradient", horizon=8, execute=4, iterations=30, learning_rate=0.1)
    ilqr = mpc.PlannerConfig(kind="ilqr", horizon=8, execute=4, iterations=3)
    plan = lambda cfg: jax.jit(lambda d: mpc.make_planner(cfg, SIM).plan(mx, d, nominal, cost, jax.random.PRNGKey(0)))(
        d0
    )
    (u_adam, info_adam), (u_ilqr, info_ilqr) = plan(adam), plan(ilqr)
    idle = float(mpc.plan_cost(mx, d0, nominal, cost, SIM)[0])
    c_adam, c_ilqr = float(info_adam["cost"]), float(info_ilqr["cost"])
    assert c_ilqr <= c_adam * (1 + 1e-3) and c_ilqr < 0.8 * idle, (c_ilqr, c_adam, idle)  # measured: 0.568, 0.568, 0.72
    # Adam keeps its lowest-cost iterate, and its reported cost is its plan's
    assert c_adam <= np.asarray(info_adam["trace"]).min() + 1e-12
    np.testing.assert_allclose(float(mpc.plan_cost(mx, d0, u_adam, cost, SIM)[0]), c_adam, rtol=1e-12)
    trace = np.asarray(info_ilqr["trace"])  # the cost each iteration started from
    assert np.all(np.diff(trace) <= 0) and trace[0] == pytest.approx(idle, rel=1e-9)
    assert np.all(np.abs(np.asarray(u_ilqr)) <= 1.0)  # projected onto ctrlrange
    np.testing.assert_allclose(float(mpc.plan_cost(mx, d0, u_ilqr, cost, SIM)[0]), c_ilqr, rtol=1e-9)


def test_ilqr_retries_a_rejected_round_at_larger_mu_on_the_same_jacobians(slider):
    """A cost of the cart's distance (not squared) to a target 1 cm off has no curvature, so at a tiny
    ``mu`` every candidate step drives the cart at full force far past it: the round is rejected.
    Without retries the iteration keeps the plan and raises ``mu``; with them it tries again around
    ``1000 mu`` and ``10^6 mu`` and takes exactly the step that an iteration starting from that
    ``mu`` on the same plan (so the same Jacobians) takes, which lowers the cost. (``mu`` on ``Q_uu``,
    whose scale these ``mu`` are chosen for; the retries do not depend on where ``mu`` goes.)"""
    from diffmjx.mpc import ilqr

    mx, d0 = slider
    near = lambda d, ctrl: jnp.sqrt((d.qpos[0] - 0.01) ** 2 + 1e-8)
    run = jax.jit(
        lambda s, retries: ilqr.iteration(mx, d0, s, near, SIM, retries=retries, state_regularization=False),
        static_argnums=1,
    )
    tiny = ilqr.init(jnp.zeros((8, 1)), 1e-9)
    kept, info = run(tiny, 0)
    assert not bool(info["accepted"]) and float(kept.mu) == pytest.approx(1e-5)
    np.testing.assert_array_equal(np.asarray(kept.u), 0.0)
    retried, info_r = run(tiny, 2)
    assert bool(info_r["accepted"]) and float(retried.cost) < 0.9 * float(info_r["cost"])
    # the first later round that is accepted is the iteration from its mu
    later = [run(ilqr.init(tiny.u, mu), 0) for mu in (1e-6, 1e-3)]
    first = next(s for s, i in later if bool(i["accepted"]))
    # two programs: equal to their rounding
    np.testing.assert_allclose(np.asarray(retried.u), np.asarray(first.u), rtol=1e-12, atol=1e-15)
    assert float(retried.cost) == pytest.approx(float(first.cost), rel=1e-12)
    with pytest.raises(ValueError, match="retries=-1 is out of range"):
        ilqr.iteration(mx, d0, tiny, near, SIM, retries=-1)


def _random_lq(rng, H=5, n=4, nu=2):
    """A linear system's period matrices and a convex quadratic running cost of (end state, control)."""
    A = np.eye(n) + 0.3 * rng.normal(size=(H, n, n))
    B = rng.normal(size=(H, n, nu))
    M = rng.normal(size=(H, n + nu, n + nu))
    h = M @ np.swapaxes(M, 1, 2) / (n + nu) + 0.1 * np.eye(n + nu)
    return A, B, rng.normal(size=(H, n + nu)), h


def _gains_step(A, B, g, h, mu, state):
    """The controls' step and the states it moves: iLQR's backward pass, then its gains rolled out
    through the linear system from an unperturbed start."""
    from diffmjx.mpc.ilqr import backward_pass

    H, n, nu = B.shape
    zero = np.zeros((H, nu))
    k, K = backward_pass(*(jnp.asarray(a) for a in (A, B, g, h)), mu, n, zero, zero, False, state)
    dx, dus, dxs = np.zeros(n), [], []
    for t in range(H):
        du = np.asarray(k[t]) + np.asarray(K[t]) @ dx
        dx = A[t] @ dx + B[t] @ du
        dus.append(du), dxs.append(dx)
    return np.asarray(dus), np.asarray(dxs)


@pytest.mark.parametrize("state", [True, False])
def test_ilqr_backward_pass_solves_a_linear_quadratic_problem_exactly(state):
    """On a linear system with a quadratic running cost, iLQR's step at vanishing ``mu`` is the
    problem's exact minimiser (the normal equations of the cost over all controls at once), with
    ``mu`` added to ``Q_uu`` or to the next state's value Hessian alike."""
    rng = np.random.default_rng(1)
    A, B, g, h = _random_lq(rng)
    H, n, nu = B.shape
    # every period's (end state, control) as a linear map of all the controls
    G = np.zeros((H, n + nu, H * nu))
    for t in range(H):
        for s in range(t + 1):
            phi = np.eye(n)
            for r in range(s + 1, t + 1):
                phi = A[r] @ phi
            G[t, :n, s * nu : (s + 1) * nu] = phi @ B[s]
        G[t, n:, t * nu : (t + 1) * nu] = np.eye(nu)
    hess = np.einsum("tia,tij,tjb->ab", G, h, G)
    grad = np.einsum("tia,ti->a", G, g)
    exact = -np.linalg.solve(hess, grad).reshape(H, nu)
    du, _ = _gains_step(A, B, g, h, 1e-10, state)
    np.testing.assert_allclose(du, exact, rtol=1e-6, atol=1e-9 * np.abs(exact).max())


def test_adam_steps_in_fractions_of_the_control_range():
    """The same slider with its motor's control range ten times wider and its gear ten times smaller
    (the same forces) gets the same plan in its own units: ``learning_rate`` is a fraction of the
    range, so a user's choice of control units does not change what the planner does."""
    wide = SLIDER.replace('<motor joint="x" ctrlrange="-1 1"', '<motor joint="x" gear="0.1" ctrlrange="-10 10"')
    assert wide != SLIDER
    cfg = mpc.PlannerConfig(kind="gradient", horizon=4, execute=4, iterations=3, learning_rate=0.1, clip_norm=None)
    effort = lambda scale: (
        lambda d, ctrl: (d.site_xpos[0, 0] - 0.05 - TARGET) ** 2 + 1e-3 * jnp.sum((ctrl / scale) ** 2)
    )
    plans = []
    for xml, scale in ((SLIDER, 1.0), (wide, 10.0)):
        mx = mjx.put_model(mujoco.MjModel.from_xml_string(xml))
        plan, _ = mpc.make_planner(cfg, SIM).plan(mx, mjx.make_data(mx), jnp.zeros((4, 1)), effort(scale), None)
        plans.append(np.asarray(plan) / scale)
    assert np.abs(plans[0]).max() > 0.5  # it moved: three steps of 0.1 of the range [-1, 1], 0.6
    # equal but for Adam's eps (1e-8 against gradients ten times smaller in the wide units): measured
    # 7e-5 relative; in control units the wide slider's plan would move a tenth as far
    np.testing.assert_allclose(plans[1], plans[0], rtol=1e-3)


def test_ilqr_state_regularisation_does_not_depend_on_the_controls_units():
    """Measuring every control in units ``s`` times smaller (``B / s``, the cost's control derivatives
    scaled to match) leaves the step that state regularisation takes, in states and in physical
    controls, as it was (but for the ``CONTROL_FLOOR`` share of ``mu`` on ``Q_uu``); regularising
    ``Q_uu`` instead changes it."""
    rng = np.random.default_rng(2)
    A, B, g, h = _random_lq(rng)
    n = A.shape[1]
    s = 10.0
    scale = np.concatenate([np.ones(n), np.full(B.shape[2], 1 / s)])
    g2, h2 = g * scale, h * scale[:, None] * scale[None, :]
    change = {}
    for state in (True, False):
        du, dx = _gains_step(A, B, g, h, 10.0, state)
        du2, dx2 = _gains_step(A, B / s, g2, h2, 10.0, state)
        change[state] = max(np.abs(du2 / s - du).max() / np.abs(du).max(), np.abs(dx2 - dx).max() / np.abs(dx).max())
    assert change[True] < 1e-3 and change[False] > 0.1, change  # measured: 1.5e-4 (the floor), 0.99


def test_psd_zeroes_negative_curvature_and_leaves_a_convex_hessian_bit_for_bit():
    """iLQR's convexified cost Hessian: an indefinite matrix becomes the nearest positive
    semidefinite one (its eigenvectors, eigenvalues floored at zero); a positive semidefinite one
    with exactly zero eigenvalues (a cost of positions only: no curvature in velocities or
    controls), whose rounding may put them at -1e-17, is returned unchanged, bit for bit."""
    from diffmjx.mpc.ilqr import psd

    rng = np.random.default_rng(1)
    V = np.linalg.qr(rng.normal(size=(5, 5)))[0]
    h = V @ np.diag([-2.0, -0.5, 0.0, 1.0, 3.0]) @ V.T
    out = np.asarray(jax.jit(psd)(h))
    np.testing.assert_allclose(out, V @ np.diag([0.0, 0.0, 0.0, 1.0, 3.0]) @ V.T, atol=1e-12)
    J = rng.normal(size=(2, 5))  # a Gauss-Newton Hessian J'J of rank 2
    convex = J.T @ J
    assert np.array_equal(np.asarray(jax.jit(psd)(convex)), convex)


PENDULUM = """
<mujoco>
  <option timestep="0.05"/>
  <worldbody>
    <body pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 0.5" size="0.03" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor joint="hinge" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def test_ilqr_pumps_a_hanging_pendulum_whose_cost_curves_downwards():
    """A torque-limited pendulum hanging near its bottom, cost ``1 - cos`` of its angle from upright:
    the cost is curved downwards there, and iLQR on its exact Hessian (the planner suite's
    pendulum) took steps of 1e-5 per iteration and never swung it. With the convexified Hessian
    (the default) the first iteration lowers the plan's cost by more than a tenth (measured: from
    59.96 to 49.12 over 30 periods, a pump one way then the other)."""
    from diffmjx.mpc import ilqr

    mx = mjx.put_model(mujoco.MjModel.from_xml_string(PENDULUM))
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray([np.pi + 0.1]), qvel=jnp.asarray([0.3]))
    hang = lambda d, ctrl: 1.0 - jnp.cos(d.qpos[0]) + 1e-3 * jnp.sum(ctrl**2)
    sim = SIM.override("integrator.substeps=10")
    one = jax.jit(lambda s: ilqr.iteration(mx, d0, s, hang, sim))
    state, info = one(ilqr.init(jnp.zeros((30, 1))))
    assert bool(info["accepted"]) and float(state.cost) < 0.9 * float(info["cost"]), (state.cost, info["cost"])
    assert np.all(np.abs(np.asarray(state.u)) <= 1.0)


def test_box_qp_meets_the_optimality_conditions_of_its_bounded_qp():
    """iLQR's per-period QP under control bounds (projected Newton): on 64 random convex QPs with
    some controls at a bound, the step stays in its box and meets the KKT conditions: zero gradient
    on the free controls, a gradient pushing outwards on the clamped ones; ``free`` names them."""
    from diffmjx.mpc.ilqr import box_qp

    rng = np.random.default_rng(0)
    n, count = 6, 64
    M = rng.normal(size=(count, n, n))
    Q = M @ np.swapaxes(M, 1, 2) + 1e-2 * np.eye(n)
    q = rng.normal(size=(count, n)) * rng.uniform(0.1, 10.0, (count, 1))
    u = np.where(rng.uniform(size=(count, n)) < 0.3, 0.0, rng.uniform(0.0, 1.0, (count, n)))
    lo, hi = -u, 1.0 - u  # controls in [0, 1], some at the lower bound
    k, free = jax.jit(jax.vmap(box_qp))(Q, q, lo, hi)
    k, free = np.asarray(k), np.asarray(free)
    grad = q + np.einsum("bij,bj->bi", Q, k)
    at_lo, at_hi = np.isclose(k, lo, rtol=0, atol=1e-12), np.isclose(k, hi, rtol=0, atol=1e-12)
    assert np.all(k >= lo - 1e-12) and np.all(k <= hi + 1e-12)
    scale = np.abs(q).max(axis=1, keepdims=True)
    assert np.all(np.abs(np.where(at_lo | at_hi, 0.0, grad)) <= 1e-9 * scale)
    assert np.all(np.where(at_lo, grad, 0.0) >= -1e-9 * scale) and np.all(np.where(at_hi, grad, 0.0) <= 1e-9 * scale)
    assert np.array_equal(free, ~((at_lo & (grad > 0)) | (at_hi & (grad < 0))))
    assert 0 < (~free).sum() < free.size  # both kinds occur


def test_closed_loop_resumes_from_its_checkpoint(slider, tmp_path):
    """A loop run in pieces through ``checkpoint`` executes what one uninterrupted run does, bit for
    bit (the sampling noise's key included); a call whose plan steps were all saved returns them
    without compiling; another loop's file raises before anything compiles."""
    mx, d0 = slider
    cfg = mpc.PlannerConfig(kind="sampling", horizon=8, execute=4, samples=4, noise_scale=0.3)
    planner, key, path = mpc.make_planner(cfg, SIM), jax.random.PRNGKey(3), tmp_path / "loop.npz"
    whole = mpc.closed_loop(mx, d0, cost, planner, steps=12, key=key, progress=False)
    first = mpc.closed_loop(mx, d0, cost, planner, steps=4, key=key, progress=False, checkpoint=path)
    assert path.is_file() and first.resumed_plan_steps == 0
    rest = mpc.closed_loop(mx, d0, cost, planner, steps=12, key=key, progress=False, checkpoint=path)
    assert rest.resumed_plan_steps == 1 and rest.plan_cost.shape == rest.plan_time_s.shape == (3,)
    for name in ("qpos", "qvel", "act", "ctrl", "cost", "plan_cost"):
        np.testing.assert_array_equal(getattr(rest, name), getattr(whole, name), err_msg=name)
    assert rest.plan_time_s[0] == first.plan_time_s[0]  # the saved plan step's own time
    short = mpc.closed_loop(mx, d0, cost, planner, steps=6, key=key, progress=False, checkpoint=path)
    assert short.resumed_plan_steps == 2 and short.jit_time_s < 0.1  # all saved: nothing compiled
    np.testing.assert_array_equal(short.qpos, whole.qpos[:6])
    other = mpc.make_planner(dataclasses.replace(cfg, noise_scale=0.5), SIM)
    with pytest.raises(ValueError, match="another closed loop"):
        mpc.closed_loop(mx, d0, cost, other, steps=8, key=key, progress=False, checkpoint=path)


def test_sampling_under_a_time_budget_draws_more_batches_and_never_a_worse_plan(slider):
    """With ``time_budget``, sampling's iterations are further batches of ``sample_batch``
    candidates (at most ``iterations``), so it fills a plan step as the iterative planners do; the
    first batch is the unbudgeted planner's own, so its first plan is never worse. (Where the budget
    stops the iterations is the closed loop's own rule, tested for every kind by
    ``test_closed_loop_executes_on_the_c_engine_and_stops_iterating_at_its_time_budget``.)"""
    mx, d0 = slider
    cfg = mpc.PlannerConfig(kind="sampling", horizon=8, execute=4, samples=4, sample_batch=4, noise_scale=0.3)
    key = jax.random.PRNGKey(5)
    plain = mpc.closed_loop(mx, d0, cost, mpc.make_planner(cfg, SIM), steps=4, key=key, progress=False)
    timed_cfg = dataclasses.replace(cfg, time_budget=60.0, iterations=3)
    timed = mpc.closed_loop(mx, d0, cost, mpc.make_planner(timed_cfg, SIM), steps=4, key=key, progress=False)
    assert plain.iterations.tolist() == [0] and timed.iterations.tolist() == [3]
    assert timed.plan_cost[0] <= plain.plan_cost[0]


def vector_cost(d, ctrl):
    return jnp.stack([d.qpos[0], ctrl[0]])  # a vector, not a scalar


def nan_after_a_while(d, ctrl):
    """Finite for the first 0.1 s, NaN after (a user's cost that divides by a vanishing distance)."""
    return jnp.where(d.time > 0.1 + 1e-9, jnp.nan, 0.0) + ctrl[0] ** 2


def test_a_bad_cost_raises_naming_the_cost_and_the_period_before_anything_is_executed(slider):
    mx, d0 = slider
    planner = mpc.make_planner(mpc.PlannerConfig(kind="sampling", horizon=4, execute=2, samples=2), SIM)
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match=r"cost function 'vector_cost' returns shape \(2,\)"):
        mpc.closed_loop(mx, d0, vector_cost, planner, steps=2, key=key, progress=False)
    with pytest.raises(ValueError, match="cost function 'vector_cost' returns shape"):
        planner.plan(mx, d0, jnp.zeros((4, 1)), vector_cost, key)
    with pytest.raises(
        ValueError, match="cost function 'nan_after_a_while' returned nan at period 2 of the first plan"
    ):
        mpc.closed_loop(mx, d0, nan_after_a_while, planner, steps=2, key=key, progress=False)


def nan_for_large_controls(d, ctrl):
    return cost(d, ctrl) + jnp.where(jnp.abs(ctrl[0]) > 0.5, jnp.nan, 0.0)


def test_closed_loop_counts_the_iterations_it_skipped(slider):
    """Adam's first step (learning rate 1) takes every control to the range's end, where the cost is
    NaN: the two iterations after it are skipped, counted per plan step and warned about."""
    mx, d0 = slider
    cfg = mpc.PlannerConfig(kind="gradient", horizon=4, execute=4, iterations=3, learning_rate=0.5)
    with pytest.warns(RuntimeWarning, match="2 planner iterations in 1 of 1 plan steps were skipped"):
        out = mpc.closed_loop(
            mx, d0, nan_for_large_controls, mpc.make_planner(cfg, SIM), 4, jax.random.PRNGKey(0), progress=False
        )
    assert out.skipped.tolist() == [2] and np.isfinite(out.plan_cost).all()


def test_closed_loop_executes_on_the_c_engine_and_stops_iterating_at_its_time_budget(slider):
    """A ``mujoco.MjModel`` plant: each executed control is held for the planning model's period in
    mj_steps of the plant's finer timestep, exactly as a hand-written C-engine loop does, and the
    executed costs are the cost of those states. A tiny time budget runs one iteration per plan step."""
    mx, d0 = slider
    fine = mujoco.MjModel.from_xml_string(SLIDER.replace('"0.05"', '"0.01"'))
    cfg = mpc.PlannerConfig(kind="gradient", horizon=4, execute=2, iterations=3, learning_rate=0.15, time_budget=1e-6)
    out = mpc.closed_loop(
        mx, d0, cost, mpc.make_planner(cfg, SIM), 6, jax.random.PRNGKey(0), progress=False, plant=fine
    )
    assert out.iterations.tolist() == [1, 1, 1]
    data, moved = mujoco.MjData(fine), []
    for u in out.ctrl:
        data.ctrl[:] = u
        for _ in range(5):
            mujoco.mj_step(fine, data)
        moved.append(data.qpos.copy())
    np.testing.assert_array_equal(out.qpos, np.asarray(moved))
    expected = (np.asarray(moved)[:, 0] - TARGET) ** 2 + 1e-3 * out.ctrl[:, 0] ** 2  # the site is 5 cm ahead
    np.testing.assert_allclose(out.cost, expected, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="must divide"):
        odd = mujoco.MjModel.from_xml_string(SLIDER.replace('"0.05"', '"0.03"'))
        mpc.closed_loop(mx, d0, cost, mpc.make_planner(cfg, SIM), 2, jax.random.PRNGKey(0), progress=False, plant=odd)


def test_a_c_engine_plant_warns_where_refsafe_softens_the_planners_contacts(slider):
    """MuJoCo's refsafe raises a solref time constant below twice the integration step to that: an
    adaptive planner steps at the 50 ms period (0.02 s raised to 0.1 s), the plant at 10 ms does not
    raise it. Euler at 10 substeps (5 ms) or refsafe off: no warning."""
    mx, _ = slider
    fine = mujoco.MjModel.from_xml_string(SLIDER.replace('"0.05"', '"0.01"'))
    with pytest.warns(UserWarning, match=r"refsafe: the planning model raises solref time constants below 0.1 s"):
        plants.CEnginePlant(fine, mx, cost, diffmjx.Config())
    off = SLIDER.replace('<option timestep="0.05"/>', '<option timestep="0.05"><flag refsafe="disable"/></option>')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plants.CEnginePlant(fine, mx, cost, SIM.override("integrator.substeps=10"))
        plants.CEnginePlant(fine, mjx.put_model(mujoco.MjModel.from_xml_string(off)), cost, diffmjx.Config())


def test_planner_overrides_are_checked_after_all_are_applied():
    """The quick preset's execute is 8: a shorter horizon given with a shorter execute is valid,
    in either order (each override used to be checked on its own, against the preset's other value)."""
    for overrides in (["horizon=6", "execute=3"], ["execute=3", "horizon=6"]):
        cfg = mpc.PlannerConfig.load("quick", overrides)
        assert (cfg.horizon, cfg.execute) == (6, 3)
    with pytest.raises(ValueError, match="planner.execute=8 .* <= planner.horizon=6"):
        mpc.PlannerConfig.load("quick", ["horizon=6"])
    cfg = diffmjx.Config().override("integrator.rtol=1e-4", "integrator.rtol=1e-5")
    assert cfg.integrator.rtol == 1e-5  # a field given twice: the last value


def test_coloured_noise_has_unit_variance_and_brown_correlation():
    white = np.asarray(mpc.coloured_noise(jax.random.PRNGKey(1), (400, 64, 2), 0.0))
    brown = np.asarray(mpc.coloured_noise(jax.random.PRNGKey(1), (400, 64, 2), 2.0))
    assert brown.shape == (400, 64, 2)
    for x in (white, brown):
        assert 0.85 < x.var() < 1.15
    lag1 = lambda x: np.mean(x[:, 1:] * x[:, :-1]) / x.var()
    assert abs(lag1(white)) < 0.05 and lag1(brown) > 0.9


def test_planner_config_validates_and_presets_load():
    # the paper's settings are the defaults but for the planner and Adam's step, chosen on the planner
    # suite (docs/mpc.md): iLQR with contacts from distance, and 0.1 of each actuator's range (the
    # paper: Adam without CFD, 0.01 of MyoHand's muscle range)
    assert mpc.PlannerConfig.load("paper") == mpc.PlannerConfig(kind="gradient", cfd=False, learning_rate=0.01)
    assert mpc.PlannerConfig().learning_rate == 0.1
    assert (mpc.PlannerConfig().kind, mpc.PlannerConfig().cfd) == ("ilqr", True)
    quick = mpc.PlannerConfig.load("quick")
    assert quick.horizon < 256 and quick.iterations < 32
    with pytest.raises(
        ValueError, match="planner.kind='newton' is not allowed; choose one of: gradient, sampling, hybrid, ilqr"
    ):
        mpc.PlannerConfig(kind="newton")
    with pytest.raises(ValueError, match="planner.execute=20 .* <= planner.horizon=10"):
        mpc.PlannerConfig(horizon=10, execute=20)
    with pytest.raises(ValueError, match="unknown planner preset 'fast'; choose one of: paper, quick"):
        mpc.PlannerConfig.load("fast")
    with pytest.raises(ValueError, match="expected planner.KEY=VALUE"):
        mpc.PlannerConfig().override("planner.rate=1")
    with pytest.raises(
        ValueError, match="planner.ilqr_regularization='states' is not allowed; choose one of: control, state"
    ):
        mpc.PlannerConfig(ilqr_regularization="states")
    with pytest.raises(ValueError, match="planner.ilqr_cost_hessian='gauss' is not allowed; choose one of: psd, exact"):
        mpc.PlannerConfig(ilqr_cost_hessian="gauss")
    with pytest.raises(ValueError, match="planner.ilqr_reuse=-1 .* >= 0"):
        mpc.PlannerConfig(ilqr_reuse=-1)


def test_the_default_planner_plans_with_contacts_from_distance_where_it_differentiates():
    """PlannerConfig() is iLQR with CFD: make_planner turns on the simulation config's cfd.enabled
    (keeping its cfd section) for the kinds that differentiate their plans, never for sampling, and
    cfd=false leaves the simulation config as given."""
    sim = diffmjx.Config().override("integrator.solver=mjx_euler", "cfd.solimp=[0.0, 0.1, 0.3, 1.0, 4.0]")
    planned = mpc.make_planner(sim=sim).sim
    assert mpc.make_planner(sim=sim).method.__class__ is mpc.ILQRMethod
    assert planned.cfd.enabled and planned.cfd.solimp == sim.cfd.solimp
    assert planned == sim.override("cfd.enabled=true")  # nothing else changed
    for kind in ("gradient", "hybrid"):
        assert mpc.make_planner(mpc.PlannerConfig(kind=kind), sim).sim.cfd.enabled
    assert mpc.make_planner(mpc.PlannerConfig(kind="sampling"), sim).sim == sim
    assert mpc.make_planner(mpc.PlannerConfig(cfd=False), sim).sim == sim
    assert mpc.make_planner(mpc.PlannerConfig(cfd=False), planned).sim == planned
    assert mpc.PlannerConfig.load(None, ["cfd=false"]).cfd is False  # text at the edge
    with pytest.raises(ValueError, match="planner.cfd"):
        mpc.PlannerConfig(cfd="yes")


def _ilqr_step(cfg, sim):
    """One step of the iLQR planner of ``cfg`` (its sampled plans off) on a zero plan, for tests that
    replace ``ilqr.iteration`` to see what it is given."""
    method = mpc.PLANNERS["ilqr"](dataclasses.replace(cfg, ilqr_explore=0), sim)
    carry, _ = method.init(None, None, jnp.zeros((cfg.horizon, 1)), None, jax.random.PRNGKey(0), None)
    return method.step(None, None, carry, None, 0.01)


@pytest.mark.parametrize("where", ["control", "state"])
def test_ilqr_regularization_knob_reaches_the_iteration(monkeypatch, where):
    """``planner.ilqr_regularization`` is what the iLQR planner's iteration gets, as a bool, and
    ``planner.ilqr_reuse`` its chord rounds."""
    from diffmjx.mpc import ilqr

    seen = {}
    monkeypatch.setattr(ilqr, "iteration", lambda *a, **kw: (seen.update(kw), (a[2], {"cost": 0.0, "finite": True}))[1])
    cfg = mpc.PlannerConfig(kind="ilqr", horizon=2, execute=1, ilqr_regularization=where, ilqr_reuse=3)
    _ilqr_step(cfg, SIM)
    assert seen["state_regularization"] is (where == "state") and seen["reuse"] == 3
    assert seen["convex"] is True  # planner.ilqr_cost_hessian's default, psd
    _ilqr_step(dataclasses.replace(cfg, ilqr_cost_hessian="exact"), SIM)
    assert seen["convex"] is False


def test_ilqr_jacobian_knob_resolves_against_the_planning_model(monkeypatch):
    """``planner.ilqr_jacobian``: ``auto`` holds a substep where the planning model steps at fixed
    steps and takes whole periods otherwise; ``substep`` on an adaptive model is refused, naming the knob."""
    from diffmjx.mpc import ilqr

    seen = {}
    monkeypatch.setattr(ilqr, "iteration", lambda *a, **kw: (seen.update(kw), (a[2], {"cost": 0.0, "finite": True}))[1])
    euler = diffmjx.Config().override("integrator.solver=mjx_euler", "integrator.substeps=4")
    adaptive = diffmjx.Config()
    for choice, sim, expected in (
        ("period", euler, "period"),
        ("auto", euler, "substep"),
        ("auto", adaptive, "period"),
        ("substep", euler, "substep"),
    ):
        cfg = mpc.PlannerConfig(kind="ilqr", horizon=2, execute=1, ilqr_jacobian=choice)
        _ilqr_step(cfg, sim)
        assert seen["jacobian"] == expected, (choice, sim.integrator.solver)
    cfg = mpc.PlannerConfig(kind="ilqr", horizon=2, execute=1, ilqr_jacobian="substep")
    with pytest.raises(ValueError, match="planner.ilqr_jacobian='substep' needs a fixed-step planning model"):
        mpc.make_planner(cfg, adaptive)  # when the planner is built, before anything is traced
    with pytest.raises(
        ValueError, match="planner.ilqr_jacobian='held' is not allowed; choose one of: period, substep, auto"
    ):
        mpc.PlannerConfig(ilqr_jacobian="held")


def test_ilqr_reach_knob_is_passed_on_and_validated(monkeypatch):
    """``planner.ilqr_reach`` reaches ``ilqr.iteration`` as given (a list from YAML or the command
    line becomes a tuple; ``[]`` turns it off), and a share outside (0, 1] is refused by name."""
    from diffmjx.mpc import ilqr

    seen = {}
    monkeypatch.setattr(ilqr, "iteration", lambda *a, **kw: (seen.update(kw), (a[2], {"cost": 0.0, "finite": True}))[1])
    base = mpc.PlannerConfig(kind="ilqr", horizon=2, execute=1)
    assert base.ilqr_reach == (0.1, 0.3)
    for text, expected in (("[0.2]", (0.2,)), ("[]", ()), ("[0.05, 1]", (0.05, 1.0))):
        cfg = base.override(f"ilqr_reach={text}")
        _ilqr_step(cfg, SIM)
        assert seen["reach"] == expected, text
    for bad in ([0.0], [1.5], [-0.1], "0.1", [True]):
        with pytest.raises(ValueError, match=r"planner.ilqr_reach=.* is invalid; expected a list of shares"):
            mpc.PlannerConfig(ilqr_reach=bad)


def test_ilqr_explores_where_its_model_sees_a_flat_cost(slider):
    """A cost that is flat in the controls (1 per period until the cart is 2 cm along, then 0, plus
    effort) gives iLQR a zero Newton step: without ``ilqr_explore`` two iterations leave the plan at
    rest; with it, the plans sampled around iLQR's find the cheaper region, and the cost each
    iteration reports never rises."""
    mx, d0 = slider
    flat = lambda d, ctrl: jnp.where(d.qpos[0] > 0.02, 0.0, 1.0) + 1e-3 * jnp.sum(ctrl**2)
    nominal = jnp.zeros((16, 1))

    def plan(explore):
        cfg = mpc.PlannerConfig(kind="ilqr", horizon=16, execute=4, iterations=2, ilqr_explore=explore)
        return jax.jit(lambda d: mpc.make_planner(cfg, SIM).plan(mx, d, nominal, flat, jax.random.PRNGKey(1)))(d0)

    (u_still, info_still), (u_moved, info_moved) = plan(0), plan(8)
    np.testing.assert_array_equal(np.asarray(u_still), 0.0)
    assert float(info_still["cost"]) == 16.0
    assert float(info_moved["cost"]) < 15.0, float(info_moved["cost"])
    assert np.all(np.diff(np.asarray(info_moved["trace"])) <= 0)
    np.testing.assert_allclose(
        float(mpc.plan_cost(mx, d0, u_moved, flat, SIM)[0]), float(info_moved["cost"]), rtol=1e-12
    )
    with pytest.raises(ValueError, match="planner.ilqr_explore=-1 is out of range"):
        mpc.PlannerConfig(ilqr_explore=-1)


def test_ilqr_chord_rounds_are_the_next_iterations_where_the_jacobians_do_not_change(monkeypatch):
    """The slider without control limits has linear dynamics (MJX's Euler step of a damped cart:
    ``A_t``, ``B_t`` the same for every plan), so a chord round, which keeps the iteration's Jacobians
    and takes the cost's derivatives at the plan the previous round accepted, is the next full
    iteration exactly: one iteration with ``reuse=2`` ends where three iterations without it end
    (retries off, so a rejected round would end both alike), having linearised once. The cost, a
    smoothed distance, is not quadratic, so every round has work left."""
    from diffmjx.mpc import ilqr

    calls = []
    linearize = ilqr.linearize
    monkeypatch.setattr(ilqr, "linearize", lambda *a, **kw: (calls.append(1), linearize(*a, **kw))[1])
    mx = mjx.put_model(mujoco.MjModel.from_xml_string(SLIDER.replace('ctrlrange="-1 1" ctrllimited="true"', "")))
    d0 = mjx.make_data(mx)
    near = lambda d, ctrl: jnp.sqrt((d.qpos[0] - 0.1) ** 2 + 1e-4) + 1e-2 * jnp.sum(ctrl**2)
    run = jax.jit(lambda s, reuse: ilqr.iteration(mx, d0, s, near, SIM, retries=0, reuse=reuse), static_argnums=1)
    s0 = ilqr.init(jnp.zeros((8, 1)), 10.0)
    chord, info = run(s0, 2)
    assert int(info["rounds"]) == 3 and bool(info["accepted"]) and len(calls) == 1
    full, costs = s0, []
    for _ in range(3):
        full, i = run(full, 0)
        assert int(i["rounds"]) == 1
        costs.append(float(full.cost))
    assert costs[0] > costs[1] > costs[2]  # each round had a step to take (measured 0.672, 0.553, 0.515)
    np.testing.assert_allclose(np.asarray(chord.u), np.asarray(full.u), rtol=1e-9, atol=1e-12)
    assert float(chord.cost) == pytest.approx(costs[2], rel=1e-9) and float(chord.mu) == float(full.mu)
    with pytest.raises(ValueError, match="reuse=-1 is out of range"):
        ilqr.iteration(mx, d0, s0, near, SIM, reuse=-1)


SHARDED = """
import os
import jax, jax.numpy as jnp, numpy as np, mujoco
jax.config.update("jax_enable_x64", True)
import diffmjx
from diffmjx import mpc
from mujoco import mjx
import tests.test_mpc as t
assert len(jax.devices()) == 2, jax.devices()
mx = mjx.put_model(mujoco.MjModel.from_xml_string(t.SLIDER))
d0 = mjx.make_data(mx)
out = []
for shard in (True, False):
    cfg = mpc.PlannerConfig(kind="sampling", horizon=8, execute=4, samples=8, noise_scale=0.3, shard=shard)
    d, key = mpc.replicate((d0, jax.random.PRNGKey(3)))
    plan, info = jax.jit(lambda d, k: mpc.make_planner(cfg, t.SIM).plan(mx, d, jnp.zeros((8, 1)), t.cost, k))(d, key)
    out.append((np.asarray(plan), np.asarray(info["trace"])))
print("PLAN_GAP", np.abs(out[0][0] - out[1][0]).max(), "COST_GAP", np.abs(out[0][1] - out[1][1]).max())
"""


@pytest.mark.slow  # suite budget: a subprocess with two host devices compiles the sampler twice
def test_sampling_sharded_over_two_devices_equals_unsharded():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SHARDED)], env=env, cwd=root, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    words = res.stdout.split()
    plan_gap, cost_gap = float(words[words.index("PLAN_GAP") + 1]), float(words[words.index("COST_GAP") + 1])
    assert plan_gap <= 1e-12 and cost_gap <= 1e-12
