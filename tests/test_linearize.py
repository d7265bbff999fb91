"""diffmjx.linearize: per-period Jacobians against central differences of a converged solve.

One model (scene ``pushed_box``: a box with a free joint, pushed along x and lifted by two motors on
that joint, over a plane), three start states solved as one batch: free flight (the orientation moves on the
quaternion manifold), sliding contact (four corners on the plane, friction sliding) and a touchdown
inside the period. One compiled program for the Jacobians (vmapped over the three states); the references (central
differences of a converged solve) are stored and recomputed under ``-m slow``.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import scenes
from diffmjx.jacobians import period_map, tangent_offset
from diffmjx.physics import manifold

_QUAT = np.array([0.96, 0.2, -0.15, 0.1]) / np.linalg.norm([0.96, 0.2, -0.15, 0.1])
STARTS = {  # qpos, qvel
    "flight": (np.r_[0.0, 0.0, 0.6, _QUAT], np.array([0.3, -0.2, 0.5, 2.0, -1.0, 3.0])),
    "sliding": (np.r_[0.0, 0.0, 0.0497, 1.0, 0.0, 0.0, 0.0], np.array([0.6, 0.1, 0.0, 0.0, 0.0, 0.3])),
    "touchdown": (np.r_[0.0, 0.0, 0.062, 1.0, 0.0, 0.0, 0.0], np.array([0.2, 0.0, -1.0, 0.0, 0.0, 0.0])),
}
CTRL = np.array([1.5, 2.0])
CFG = diffmjx.Config().override("integrator.rtol=1e-10", "integrator.atol=1e-10", "solver.impedance_floor=0")
TIGHT = CFG.override("integrator.rtol=1e-12", "integrator.atol=1e-12", "integrator.kink_step=null")
# central-difference steps: the contact is stiff in the state (1e-5 leaves a 5 % truncation error in
# the sliding box's height column, 1e-7 1e-6), the controls move it gently (1e-7 would leave noise)
EPS_STATE, EPS_CTRL = 1e-7, 1e-5


@pytest.fixture(scope="module")
def model():
    mj = mujoco.MjModel.from_xml_path(str(scenes.path("pushed_box")))
    return mj, mjx.put_model(mj)


def _data(mx, name):
    q, v = STARTS[name]
    return mjx.make_data(mx).replace(qpos=jnp.asarray(q), qvel=jnp.asarray(v))


@pytest.fixture(scope="module")
def jacobians(model):
    _, mx = model
    d = _data(mx, "flight")
    qs = jnp.stack([jnp.asarray(STARTS[k][0]) for k in STARTS])
    vs = jnp.stack([jnp.asarray(STARTS[k][1]) for k in STARTS])
    lin = jax.jit(jax.vmap(lambda q, v: diffmjx.linearize(mx, d.replace(qpos=q, qvel=v), CTRL[None], CFG)))(qs, vs)
    return {k: (np.asarray(lin.A[i, 0]), np.asarray(lin.B[i, 0])) for i, k in enumerate(STARTS)}, lin


def central_differences(model):
    """Central differences of the converged period (rtol = atol = 1e-12), every column of [A | B] at
    every start, in tangent coordinates around the unperturbed end state: ``{start: (A, B)}``."""
    mj, mx = model
    layout = manifold.JointLayout.from_model(mx)
    n, nu = diffmjx.tangent_size(mx), mx.nu
    f = period_map(mx, _data(mx, "flight"), TIGHT)
    eps = np.r_[np.full(n, EPS_STATE), np.full(nu, EPS_CTRL)]
    pert = np.concatenate([np.diag(eps), -np.diag(eps)])  # (2 (n + nu), n + nu)

    def columns(q, v):
        state = (q, v, jnp.zeros(0), jnp.asarray(0.0))
        ref = f(jnp.zeros(n), jnp.asarray(CTRL), state, jnp.asarray(mj.opt.timestep))
        ends = jax.vmap(lambda p: f(p[:n], CTRL + p[n:], state, jnp.asarray(mj.opt.timestep)))(pert)
        off = jax.vmap(lambda e: tangent_offset(layout, ref, e))(ends)
        return ((off[: n + nu] - off[n + nu :]) / (2 * eps[:, None])).T  # (n, n + nu)

    qs = jnp.stack([jnp.asarray(STARTS[k][0]) for k in STARTS])
    vs = jnp.stack([jnp.asarray(STARTS[k][1]) for k in STARTS])
    cols = np.asarray(jax.jit(jax.vmap(columns))(qs, vs))
    return {k: (cols[i, :, :n], cols[i, :, n:]) for i, k in enumerate(STARTS)}


# The central differences are stored, so that the default run compiles only the Jacobians it checks
# (the converged solve's program was a third of this file's time);
# test_stored_references_are_the_converged_central_differences (slow) recomputes them.
STORED = Path(__file__).parent / "data" / "linearize_references.npz"


@pytest.fixture(scope="module")
def references():
    with np.load(STORED) as z:
        return {k: (z[f"{k}_A"], z[f"{k}_B"]) for k in STARTS}


@pytest.mark.slow  # recomputes the stored references (the converged solve's program)
def test_stored_references_are_the_converged_central_differences(model, references):
    fresh = central_differences(model)
    for k in STARTS:
        for got, stored in zip(fresh[k], references[k], strict=True):
            # the differences' own noise (1e-12 solve, steps 1e-7): compiled with the suite's XLA
            # settings instead of the defaults they moved by 2.4e-5 (sliding, B); the check below allows 2e-4
            assert np.linalg.norm(got - stored) < 1e-4 * np.linalg.norm(stored), k


def test_the_three_starts_are_in_their_regimes(jacobians):
    _, lin = jacobians
    z = np.asarray(lin.qpos[:, :, 2])  # (start, period) heights
    assert z[0, 1] > 0.5  # flight stays far above the plane
    assert abs(z[1, 1] - 0.05) < 1e-3  # sliding stays on it
    assert z[2, 0] > 0.055 and z[2, 1] < 0.05  # touchdown reaches it within the period
    assert abs(float(lin.qvel[1, 1, 0])) > 0.1  # still sliding at the period's end


@pytest.mark.parametrize("regime", list(STARTS))
def test_period_jacobians_match_central_differences(jacobians, references, regime):
    (A, B), (A_ref, B_ref) = jacobians[0][regime], references[regime]
    for name, got, ref in (("A", A, A_ref), ("B", B, B_ref)):
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert err < 2e-4, (regime, name, err, np.round(got - ref, 6))  # measured: at most 3e-5
    assert np.linalg.norm(B_ref) > 1e-3  # the controls do move the state


def test_bad_inputs_name_the_argument(model):
    _, mx = model
    d = _data(mx, "flight")
    with pytest.raises(ValueError, match="ctrls"):
        diffmjx.linearize(mx, d, np.zeros((3, 1)))
    passive = mjx.put_model(
        mujoco.MjModel.from_xml_string(
            "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>"
        )
    )
    with pytest.raises(ValueError, match="no actuators"):
        diffmjx.linearize(passive, mjx.make_data(passive), np.zeros((1, 0)))
    with pytest.raises(ValueError, match="jacobian='bad' is not allowed; choose one of: period, substep"):
        diffmjx.linearize(mx, d, np.zeros((1, 2)), jacobian="bad")
    with pytest.raises(ValueError, match="jacobian='substep' needs a fixed-step solver.*'tsit5'"):
        diffmjx.linearize(mx, d, np.zeros((1, 2)), jacobian="substep")


# A damped spring on a slide, driven by a motor: semi-implicit Euler steps it linearly, with one
# Jacobian at every state, so one substep's Jacobians held over the period are the period's exactly.
SPRING = """<mujoco><option timestep="0.05"/><worldbody><body><joint name="x" type="slide" stiffness="40"
damping="0.8"/><geom type="sphere" size=".05" mass="0.5" contype="0" conaffinity="0"/></body></worldbody>
<actuator><motor joint="x" gear="2"/></actuator></mujoco>"""


def test_a_held_substep_is_the_period_on_a_linear_system():
    mx = mjx.put_model(mujoco.MjModel.from_xml_string(SPRING))
    d = mjx.make_data(mx).replace(qpos=jnp.array([0.1]), qvel=jnp.array([-0.3]))
    u = jnp.array([[0.5], [-1.0], [0.2]])
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler", "integrator.substeps=10")
    period = diffmjx.linearize(mx, d, u, cfg)
    held = diffmjx.linearize(mx, d, u, cfg, jacobian="substep")
    np.testing.assert_allclose(held.A, period.A, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(held.B, period.B, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(held.qvel, period.qvel, rtol=1e-12, atol=1e-14)  # the same nominal states
    # the spring turns the state within a period: the period's A is far from one substep's
    assert np.abs(period.A[0] - np.eye(2)).max() > 0.1
