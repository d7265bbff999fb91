"""Contact-free tumbling box: exact quaternion integration against MuJoCo's C engine, and gradients."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.scenes import load, path

OMEGA0 = np.array([0.2, 10.0, 0.2])  # spin about the intermediate axis (unstable): real tumbling
V0 = np.array([0.1, -0.05, 0.02])
PERIODS = 100  # 1 s
# at 1e-10 whatever the adjoint (dto_tighten 1: checkpoint and forward mode too)
TIGHT = diffmjx.Config().override("integrator.rtol=1e-10", "integrator.atol=1e-10", "integrator.dto_tighten=1")
W = jnp.array([0.3, -0.2, 0.5, 1.0, -0.7, 0.4, 0.9])  # loss weights on the final qpos


@pytest.fixture(scope="module")
def scene():
    return load("tumbling_box")


def _data(mx, omega):
    d = mjx.make_data(mx)
    return d.replace(qvel=jnp.concatenate([jnp.asarray(V0), omega]))


def _loss(mx, cfg):
    ctrls = jnp.zeros((PERIODS, 0))

    def loss(omega):
        d, _ = diffmjx.rollout(mx, _data(mx, omega), ctrls, cfg)
        return jnp.dot(W, d.qpos)

    return loss


def test_matches_c_engine_rk4(scene):
    _mj, mx = scene
    d, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, jnp.zeros((PERIODS, 0)), TIGHT))(_data(mx, jnp.asarray(OMEGA0)))
    ref = mujoco.MjModel.from_xml_path(str(path("tumbling_box")))
    ref.opt.timestep = 1e-5
    data = mujoco.MjData(ref)
    data.qvel[:] = np.r_[V0, OMEGA0]
    for _ in range(100_000):
        mujoco.mj_step(ref, data)
    assert np.max(np.abs(np.asarray(d.qpos) - data.qpos)) < 1e-6
    # the body really tumbles: the spin leaves the intermediate axis
    assert float(np.abs(np.asarray(traj.qvel[:, 3])).max()) > 5.0
    assert not bool(traj.stats.budget_exhausted.any())


def test_quaternion_norm_over_10000_periods(scene):
    _, mx = scene
    _, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, jnp.zeros((10_000, 0))))(_data(mx, jnp.asarray(OMEGA0)))
    norms = np.linalg.norm(np.asarray(traj.qpos[:, 3:7]), axis=1)
    assert np.max(np.abs(norms - 1.0)) < 1e-9
    assert np.all(np.isfinite(np.asarray(traj.qvel)))


@pytest.fixture(scope="module")
def fd_reference(scene):
    _, mx = scene
    cfg = TIGHT.override("integrator.rtol=1e-12", "integrator.atol=1e-12")
    sweep, _ = diffmjx.central_differences(_loss(mx, cfg), jnp.asarray(OMEGA0), (3e-5, 1e-5))
    # the tumble is chaotic, so truncation error needs small steps; both sit on the plateau
    np.testing.assert_allclose(sweep[0], sweep[1], rtol=2e-6)
    return sweep[1]


# suite budget: both adjoints and forward mode under -m slow; by default test_linearize differentiates a
# tumbling free flight through the quaternion manifold, and the cube-toss sweep checks backsolve's gradient
@pytest.mark.slow
@pytest.mark.parametrize("adjoint", ["checkpoint", "backsolve"])
def test_gradient_wrt_initial_angular_velocity(scene, fd_reference, adjoint):
    _, mx = scene
    cfg = TIGHT.override(f"integrator.adjoint={adjoint}")
    grad = np.asarray(jax.jit(jax.grad(_loss(mx, cfg)))(jnp.asarray(OMEGA0)))
    rel = np.linalg.norm(grad - fd_reference) / np.linalg.norm(fd_reference)
    assert rel < 1e-5, (adjoint, grad, fd_reference, rel)


@pytest.mark.slow  # suite budget: test_linearize checks forward-mode derivatives through a tumbling free flight by default
def test_jacfwd_with_forward_mode_matches_reverse(scene, fd_reference):
    _, mx = scene
    loss = _loss(mx, TIGHT.override("integrator.adjoint=forward"))
    jac = np.asarray(jax.jit(jax.jacfwd(loss))(jnp.asarray(OMEGA0)))
    rel = np.linalg.norm(jac - fd_reference) / np.linalg.norm(fd_reference)
    assert rel < 1e-5, (jac, fd_reference, rel)
