"""Differentiable constraint solve: forward identical to MJX's, reverse mode through iterations > 1."""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmjx
from experiments.common import cube_toss_data, load, mjx


@pytest.fixture(scope="module")
def scene():
    mj, mx = load("cube_toss")  # Newton, iterations = 4, pyramidal cone, warmstart on
    d = cube_toss_data(mx)
    # resting on a corner, sliding: four active contacts with friction
    d = d.replace(qpos=d.qpos.at[2].set(0.04), qvel=d.qvel.at[0].set(0.3))
    return mj, mx, d


@pytest.mark.parametrize("gradient", ["unroll", "implicit"])
def test_forward_equals_mjx_solver(scene, gradient):
    _, mx, d = scene
    ref = jax.jit(mjx.forward)(mx, d)
    ours = jax.jit(lambda m, d: diffmjx.forward(m, d, diffmjx.Config().override(f"solver.gradient={gradient}")))(mx, d)
    assert float(jnp.abs(ref.qacc).max()) > 100.0  # contacts are active
    np.testing.assert_allclose(ours.qacc, ref.qacc, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours.qfrc_constraint, ref.qfrc_constraint, rtol=0, atol=1e-10)


def test_mjx_euler_step_equals_mjx_step(scene):
    _, mx, d = scene
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")
    ref = jax.jit(mjx.step)(mx, d)
    ours = jax.jit(lambda d: diffmjx.step(mx, d, cfg))(d)
    np.testing.assert_allclose(ours.qpos, ref.qpos, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours.qvel, ref.qvel, rtol=0, atol=1e-10)


def test_grad_through_step_with_four_iterations(scene):
    mj, mx, d = scene
    assert mj.opt.iterations == 4
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")

    def loss(vz):
        return diffmjx.step(mx, d.replace(qvel=d.qvel.at[2].set(vz)), cfg).qvel[2]

    g = float(jax.jit(jax.grad(loss))(-0.5))
    fd = (float(loss(-0.5 + 1e-6)) - float(loss(-0.5 - 1e-6))) / 2e-6
    assert np.isfinite(g) and abs(g) > 0
    assert abs(g - fd) < 1e-4 * max(1.0, abs(fd))


def test_implicit_and_unrolled_gradients_agree_at_convergence(scene):
    mj, _, d = scene
    mj.opt.iterations, mj.opt.tolerance = 100, 1e-14
    mx = mjx.put_model(mj)

    def qacc(qvel, gradient):
        return diffmjx.forward(mx, d.replace(qvel=qvel), diffmjx.Config().override(f"solver.gradient={gradient}")).qacc

    jac = {g: np.asarray(jax.jit(jax.jacrev(lambda v, g=g: qacc(v, g)))(d.qvel)) for g in ["unroll", "implicit"]}
    scale = np.abs(jac["unroll"]).max()
    assert scale > 1.0
    np.testing.assert_allclose(jac["implicit"], jac["unroll"], rtol=0, atol=1e-6 * scale)


def test_cg_forward_equals_mjx_solver(scene):
    mj, _, d = scene
    mj.opt.solver = mujoco.mjtSolver.mjSOL_CG
    mx = mjx.put_model(mj)
    ref = jax.jit(mjx.forward)(mx, d)
    ours = jax.jit(lambda m, d: diffmjx.forward(m, d))(mx, d)
    np.testing.assert_allclose(ours.qacc, ref.qacc, rtol=0, atol=1e-10)
    g = jax.jit(jax.grad(lambda v: diffmjx.forward(mx, d.replace(qvel=v)).qacc[2]))(d.qvel)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.abs(g).max()) > 0
