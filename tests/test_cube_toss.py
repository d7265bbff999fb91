"""Cube toss (paper Fig. 17 setup): adaptive gradients within 1-2 % (median) of a converged solve; MJX Euler not."""

import jax
import numpy as np
import pytest

import diffmjx
from diffmjx.gradcheck import relative_errors  # floored at 5 % of the median |gradient|
from diffmjx.scenes import CUBE_TOSS, c_engine_cube_toss, cube_toss_loss, load

U0 = CUBE_TOSS["u0"]
CFG = diffmjx.Config().override("integrator.rtol=1e-7", "integrator.atol=1e-7")
# Touchdown without MuJoCo's 1e-4 impedance floor is continuous, so a gradient through it can converge
# (docs/solver.md); the references and the adaptive gradients below use it.
FLOOR0 = CFG.override("solver.impedance_floor=0")


@pytest.fixture(scope="module")
def mx():
    return load("cube_toss")[1]


# Nine shots around U0; the gradient there ranges from 0.002 to 0.77 (the cube lands on an edge).
SWEEP9 = U0 + np.linspace(-0.1, 0.1, 9)
SWEEP = SWEEP9[::2]  # the default run checks every other shot (suite budget); the median is the same
# The converged solve's loss at U0 and its central-difference gradients (step 1e-4) at SWEEP9,
# rtol = atol = 1e-12: stored, so the default run compiles only the gradients it checks;
# test_stored_references_are_the_converged_solves (slow) recomputes them.
LOSS0 = -0.2609129458128788
GRAD9 = np.array(
    [0.7176913, 0.77331594, 0.75991958, 0.68732605, 0.57590857, 0.05287295, 0.04994685, 0.13640078, 0.00189738]
)
TIGHT = FLOOR0.override("integrator.rtol=1e-12", "integrator.atol=1e-12")


@pytest.fixture(scope="module")
def truth():
    """Loss and gradient at U0 of a tightly converged solve (rtol = atol = 1e-12)."""
    return LOSS0, float(GRAD9[4])


@pytest.fixture(scope="module")
def sweep_truth():
    return GRAD9[::2]


@pytest.mark.slow  # recomputes the stored references (two compiles of the tight solve)
def test_stored_references_are_the_converged_solves(mx):
    loss = cube_toss_loss(mx, TIGHT)
    sweep, _ = diffmjx.central_differences(loss, U0, (1e-3, 3e-4, 1e-4))
    assert np.ptp(sweep) < 1e-4 * abs(sweep[-1, 0])  # the step sweep sits on a plateau
    np.testing.assert_allclose(float(jax.jit(loss)(U0)), LOSS0, rtol=1e-8)
    f = jax.jit(jax.vmap(loss))
    # to the differences' own noise: a 1e-12 solve compiled with other XLA settings moved them by up to 1.1e-6
    np.testing.assert_allclose(np.asarray((f(SWEEP9 + 1e-4) - f(SWEEP9 - 1e-4)) / 2e-4), GRAD9, rtol=1e-5, atol=3e-6)
    np.testing.assert_allclose(float(sweep[-1, 0]), GRAD9[4], rtol=1e-5)


def test_converged_solve_matches_c_engine(truth):
    loss, grad = truth
    assert abs(loss - c_engine_cube_toss(U0)) < 1e-3  # C engine, RK4 at dt 1e-5: -0.2609
    c_grad = (c_engine_cube_toss(U0 + 1e-4) - c_engine_cube_toss(U0 - 1e-4)) / 2e-4  # about +0.576
    assert abs(grad - c_grad) < 2e-3 * abs(c_grad)


# Discretize-then-optimize differentiates the accepted steps with their sizes frozen; a step that
# straddles a kink of the contact force (friction-pyramid or lift-off active-set change) carries an
# O(h * stiffness) error into the gradient, so without kink control its error scatters from shot to
# shot and from machine to machine (rtol 1e-8: 0.1-24 %; docs/results/kink_control.csv).
# integrator.kink_step shrinks every such step (auto, checkpoint's default: min(10 rtol / dto_tighten,
# 1e-7) s). The
# backsolve adjoint error-controls the adjoint ODE itself; the interpolated one too, reading the state
# from the forward solution and stepping to the kinks (under -m slow for the suite's budget; its mass
# gradient runs by default in test_interpolated_adjoint.py).
@pytest.mark.parametrize(
    ("adjoint", "tol", "median_bound", "max_bound", "kink_step"),
    [
        # suite budget: checkpoint's sweep under -m slow; by default the kink-control test
        # (test_integrators) checks its discretise-then-optimise gradient with kink control, and
        # test_linearize the same discrete solve's forward-mode derivatives through a touchdown
        pytest.param("checkpoint", 1e-7, 0.01, 0.05, "auto", marks=pytest.mark.slow),
        ("backsolve", 1e-7, 0.01, 0.05, "auto"),  # the default: kink control in the backward solve
        pytest.param("interpolated", 1e-7, 0.01, 0.05, "null", marks=pytest.mark.slow),  # suite budget
        pytest.param("checkpoint", 1e-8, 0.02, 0.15, "1e-7", marks=pytest.mark.slow),
    ],
)
def test_adaptive_gradient_median_error(mx, truth, sweep_truth, adjoint, tol, median_bound, max_bound, kink_step):
    cfg = FLOOR0.override(
        f"integrator.rtol={tol}",
        f"integrator.atol={tol}",
        f"integrator.adjoint={adjoint}",
        f"integrator.kink_step={kink_step}",
    )
    loss, grad = jax.jit(jax.vmap(jax.value_and_grad(cube_toss_loss(mx, cfg))))(SWEEP)
    assert abs(float(loss[2]) - truth[0]) < 1e-4
    err = relative_errors(np.asarray(grad), sweep_truth)
    assert np.median(err) < median_bound, (adjoint, np.round(100 * err, 2))
    assert np.max(err) < max_bound, (adjoint, np.round(100 * err, 2))


@pytest.mark.slow  # suite budget: the demo prints the same comparison
def test_fixed_step_mjx_euler_is_visibly_wrong(mx, truth):
    cfg = CFG.override("integrator.solver=mjx_euler")
    loss, grad = jax.jit(jax.value_and_grad(cube_toss_loss(mx, cfg)))(U0)
    # stock MJX, Euler at dt 0.01: loss -2.55 and gradient +6.17 (ten times the truth)
    np.testing.assert_allclose([float(loss), float(grad)], [-2.5502, 6.1678], atol=2e-3)
    assert abs(float(grad) - truth[1]) > 5 * abs(truth[1])
