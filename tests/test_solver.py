"""Differentiable constraint solve: forward identical to MJX's, reverse mode through iterations > 1."""

import copy

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.scenes import cube_toss_data, load

MJX_SOLVE = ("solver.min_iterations=0", "solver.max_tolerance=1")  # the model's own solver budget, as MJX


@pytest.fixture(scope="module")
def scene():
    mj, mx = load("cube_toss")  # Newton, iterations = 4, pyramidal cone, warmstart on
    d = cube_toss_data(mx)
    # resting on a corner, sliding: four active contacts with friction
    d = d.replace(qpos=d.qpos.at[2].set(0.04), qvel=d.qvel.at[0].set(0.3))
    return mj, mx, d


# suite budget: implicit under -m slow (the forward does not depend on the gradient mode; unroll checks it)
@pytest.mark.parametrize("gradient", ["unroll", pytest.param("implicit", marks=pytest.mark.slow)])
def test_forward_equals_mjx_solver(scene, gradient):
    _, mx, d = scene
    ref = jax.jit(mjx.forward)(mx, d)
    cfg = diffmjx.Config().override(f"solver.gradient={gradient}", *MJX_SOLVE)
    ours = jax.jit(lambda m, d: diffmjx.forward(m, d, cfg))(mx, d)
    assert float(jnp.abs(ref.qacc).max()) > 100.0  # contacts are active
    np.testing.assert_allclose(ours.qacc, ref.qacc, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours.qfrc_constraint, ref.qfrc_constraint, rtol=0, atol=1e-10)


def test_mjx_euler_step_equals_mjx_step(scene):
    _, mx, d = scene
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler", *MJX_SOLVE)
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
    f = jax.jit(loss)  # differences through one compiled program, not op-by-op dispatch
    fd = (float(f(-0.5 + 1e-6)) - float(f(-0.5 - 1e-6))) / 2e-6
    assert np.isfinite(g) and abs(g) > 0
    assert abs(g - fd) < 1e-4 * max(1.0, abs(fd))


def test_implicit_and_unrolled_gradients_agree_at_convergence(scene):
    mj, _, d = scene
    mj = copy.copy(mj)  # the module's fixture stays as it is
    mj.opt.iterations, mj.opt.tolerance = 100, 1e-14
    mx = mjx.put_model(mj)

    def qacc(qvel, gradient):
        return diffmjx.forward(mx, d.replace(qvel=qvel), diffmjx.Config().override(f"solver.gradient={gradient}")).qacc

    jac = {g: np.asarray(jax.jit(jax.jacrev(lambda v, g=g: qacc(v, g)))(d.qvel)) for g in ["unroll", "implicit"]}
    scale = np.abs(jac["unroll"]).max()
    assert scale > 1.0
    np.testing.assert_allclose(jac["implicit"], jac["unroll"], rtol=0, atol=1e-6 * scale)


def test_implicit_solve_factors_only_when_differentiated(scene):
    """The implicit gradient's factorisation of H is in a derivative's program and not in a
    forward-only one (a simulation does not pay for it), and forward and reverse mode agree."""
    _, mx, d = scene
    cfg = diffmjx.Config().override("solver.gradient=implicit")

    def qacc(qvel):
        return diffmjx.forward(mx, d.replace(qvel=qvel), cfg).qacc

    factorisations = lambda f: str(jax.make_jaxpr(f)(d.qvel)).count("cholesky")
    assert factorisations(jax.jacfwd(qacc)) > factorisations(qacc)  # MJX's Newton solve factors too
    fwd, rev = (np.asarray(jax.jit(j(qacc))(d.qvel)) for j in (jax.jacfwd, jax.jacrev))
    scale = np.abs(rev).max()
    assert scale > 1.0
    np.testing.assert_allclose(fwd, rev, rtol=0, atol=1e-10 * scale)


@pytest.mark.slow  # suite budget: CG is opt-in; the default Newton solve equals MJX's by default
def test_cg_forward_equals_mjx_solver(scene):
    mj, _, d = scene
    mj = copy.copy(mj)  # the module's fixture stays as it is
    mj.opt.solver = mujoco.mjtSolver.mjSOL_CG
    mx = mjx.put_model(mj)
    ref = jax.jit(mjx.forward)(mx, d)
    ours = jax.jit(lambda m, d: diffmjx.forward(m, d, diffmjx.Config().override(*MJX_SOLVE)))(mx, d)
    np.testing.assert_allclose(ours.qacc, ref.qacc, rtol=0, atol=1e-10)
    g = jax.jit(jax.grad(lambda v: diffmjx.forward(mx, d.replace(qvel=v)).qacc[2]))(d.qvel)
    assert np.all(np.isfinite(np.asarray(g))) and float(jnp.abs(g).max()) > 0


def test_default_solve_is_converged(scene):
    """Config() runs the solve to convergence (at least 16 iterations, tolerance 1e-10) whatever the
    model's budget: with a model of 1 iteration its accelerations are MJX's at 100 iterations and
    tolerance 1e-10, and differ from MJX's 1-iteration solve on this four-contact state."""
    _, _, d = scene
    mj, _ = load("cube_toss")  # its own model: this test changes the solver options
    mj.opt.iterations = 1
    mx = mjx.put_model(mj)
    d = d.replace(qpos=d.qpos.at[2].set(0.05), qvel=d.qvel.at[0].set(2.0).at[2].set(-1.0))  # fast slide: rows change
    ours = np.asarray(jax.jit(lambda m, d: diffmjx.forward(m, d).qacc)(mx, d))
    one = np.asarray(jax.jit(mjx.forward)(mx, d).qacc)
    mj.opt.iterations, mj.opt.tolerance = 100, 1e-10
    converged = np.asarray(jax.jit(mjx.forward)(mjx.put_model(mj), d).qacc)
    scale = np.abs(converged).max()
    np.testing.assert_allclose(ours, converged, rtol=0, atol=1e-8 * scale)
    assert np.abs(one - converged).max() > 1e-2 * scale  # one iteration stops short (9 % measured)
    assert diffmjx.physics.solver.solve_model(mx, diffmjx.Config().override(*MJX_SOLVE).solver) is mx


def _touchdown_qacc(mx, d, depth, floor):
    """qacc of the cube falling at 1 m/s with its lowest vertex ``depth`` below the floor."""
    cfg = diffmjx.Config().override(f"solver.impedance_floor={floor}")
    qpos = d.qpos.at[2].set(0.05 * (np.cos(np.pi / 3) + np.sin(np.pi / 3)) - depth)
    return np.asarray(
        jax.jit(lambda q: diffmjx.forward(mx, d.replace(qpos=q, qvel=d.qvel.at[2].set(-1.0)), cfg).qacc)(qpos)
    )


def test_impedance_floor_makes_touchdown_continuous(scene):
    """solimp[0] = 0 in the scene: MuJoCo's 1e-4 floor still switches on a force at zero depth;
    with solver.impedance_floor = 0 the force starts from zero."""
    _, mx, d = scene
    free = np.array([0.0, 0.0, -2.0, 0.0, 0.0, 0.0])
    jump = np.abs(_touchdown_qacc(mx, d, 1e-10, 1e-4) - free).max()
    assert jump > 1e-3  # MJX: a finite force at 1e-10 m
    assert np.abs(_touchdown_qacc(mx, d, 1e-10, 0.0) - free).max() < 1e-9 * jump / 1e-3
    # inside solimp's 1 mm width the impedance curve moves by at most the old floor, 1e-4
    mid = _touchdown_qacc(mx, d, 5e-4, 1e-4)
    np.testing.assert_allclose(_touchdown_qacc(mx, d, 5e-4, 0.0), mid, rtol=0, atol=2e-4 * np.abs(mid).max())
    # past the width both give solimp[1]: MJX's rows exactly
    np.testing.assert_array_equal(_touchdown_qacc(mx, d, 2e-3, 0.0), _touchdown_qacc(mx, d, 2e-3, 1e-4))


def test_impedance_floor_zero_differentiates(scene):
    """The rescaled rows carry reverse-mode derivatives: qacc's pose gradient matches central
    differences at a shallow touchdown (impedance on the spline, 0.3 mm deep)."""
    _, mx, d = scene
    cfg = diffmjx.Config().override("solver.impedance_floor=0")
    v = d.qvel.at[2].set(-1.0)

    def f(z):
        q = d.qpos.at[2].set(z)
        return diffmjx.forward(mx, d.replace(qpos=q, qvel=v), cfg).qacc[2]

    z = 0.05 * (np.cos(np.pi / 3) + np.sin(np.pi / 3)) - 3e-4
    g = float(jax.jit(jax.grad(f))(z))
    h, fj = 1e-8, jax.jit(f)
    fd = (float(fj(z + h)) - float(fj(z - h))) / (2 * h)
    assert abs(fd) > 1e3
    assert abs(g - fd) < 1e-5 * abs(fd)


def test_position_stages_compose_to_mjx_fwd_position(scene):
    # benchmark_vjp times MJX's pipeline stage by stage from this list: it must be the whole stage.
    from diffmjx import _mjx

    _, mx, d = scene
    ref = jax.jit(_mjx.fwd_position)(mx, d)
    ours = jax.jit(lambda d: _mjx.fwd_position_with(mx, d, _mjx.collision))(d)
    assert [n for n, _ in _mjx.position_stages()][7] == "collision"
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref), strict=True):
        np.testing.assert_array_equal(a, b)


def test_rematerialised_iterations_give_the_stored_iterations_gradient(scene):
    # solve(..., remat_iterations=True) (the default) recomputes each unrolled iteration in the
    # backward pass instead of storing it: a memory/speed change only, the Jacobian must not move.
    from diffmjx import _mjx
    from diffmjx.physics import solver

    _, mx, d = scene
    pre = jax.jit(
        lambda d: _mjx.fwd_acceleration(mx, _mjx.fwd_actuation(mx, _mjx.fwd_velocity(mx, _mjx.fwd_position(mx, d))))
    )

    def qacc(qvel, remat):
        return solver.solve(mx, pre(d.replace(qvel=qvel)), "unroll", remat_iterations=remat).qacc

    jac = {r: np.asarray(jax.jit(jax.jacrev(lambda v, r=r: qacc(v, r)))(d.qvel)) for r in (True, False)}
    scale = np.abs(jac[False]).max()
    assert scale > 1.0
    np.testing.assert_allclose(jac[True], jac[False], rtol=0, atol=1e-12 * scale)


@pytest.mark.slow  # suite budget (36 s cold): implicit and unrolled gradients stay compared by default above
def test_auto_gradient_is_implicit_for_pyramidal_and_unroll_for_elliptic_cones(scene):
    """The default solver.gradient=auto: the implicit gradient where it applies (pyramidal cones),
    the unrolled one elsewhere, so Config() runs on elliptic models too."""
    jac = {}
    for cone in (mujoco.mjtCone.mjCONE_PYRAMIDAL, mujoco.mjtCone.mjCONE_ELLIPTIC):
        mj, _ = load("cube_toss")
        mj.opt.cone = cone
        mx = mjx.put_model(mj)
        d = mjx.make_data(mx).replace(qpos=scene[2].qpos, qvel=scene[2].qvel)  # the cone sets the row count
        for g in ("auto", "unroll", "implicit"):
            if g == "implicit" and cone == mujoco.mjtCone.mjCONE_ELLIPTIC:
                with pytest.raises(ValueError, match="supports cone='pyramidal' only"):
                    diffmjx.forward(mx, d, diffmjx.Config().override(f"solver.gradient={g}"))
                continue
            cfg = diffmjx.Config().override(f"solver.gradient={g}")
            jac[cone, g] = np.asarray(
                jax.jit(jax.jacrev(lambda v, c=cfg, m=mx, d0=d: diffmjx.forward(m, d0.replace(qvel=v), c).qacc))(d.qvel)
            )
    pyr, ell = mujoco.mjtCone.mjCONE_PYRAMIDAL, mujoco.mjtCone.mjCONE_ELLIPTIC
    np.testing.assert_array_equal(jac[pyr, "auto"], jac[pyr, "implicit"])
    np.testing.assert_array_equal(jac[ell, "auto"], jac[ell, "unroll"])
    assert np.abs(jac[pyr, "auto"] - jac[pyr, "unroll"]).max() > 0  # two computations, not one
