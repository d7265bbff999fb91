"""Cube toss (paper Fig. 17 setup): adaptive gradients within 2 % of a converged solve; MJX Euler not."""

import jax
import numpy as np
import pytest

import diffmjx
from experiments.common import CUBE_TOSS, c_engine_cube_toss, cube_toss_loss, load

U0 = CUBE_TOSS["u0"]
CFG = diffmjx.Config().override("integrator.rtol=1e-7", "integrator.atol=1e-7")


@pytest.fixture(scope="module")
def mx():
    return load("cube_toss")[1]


@pytest.fixture(scope="module")
def truth(mx):
    """Loss and central-difference gradient of a tightly converged solve (rtol = atol = 1e-12)."""
    loss = cube_toss_loss(mx, CFG.override("integrator.rtol=1e-12", "integrator.atol=1e-12"))
    sweep, _ = diffmjx.central_differences(loss, U0, (1e-3, 3e-4, 1e-4))
    assert np.ptp(sweep) < 1e-4 * abs(sweep[-1, 0])  # the step sweep sits on a plateau
    return float(jax.jit(loss)(U0)), float(sweep[-1, 0])


def test_converged_solve_matches_c_engine(truth):
    loss, grad = truth
    assert abs(loss - c_engine_cube_toss(U0)) < 1e-3  # C engine, RK4 at dt 1e-5: -0.2609
    assert 0.55 < grad < 0.60  # C engine central difference: about +0.576


@pytest.mark.parametrize("adjoint", ["checkpoint", "backsolve"])
def test_adaptive_gradient_within_2_percent(mx, truth, adjoint):
    cfg = CFG.override(f"integrator.adjoint={adjoint}")
    loss, grad = jax.jit(jax.value_and_grad(cube_toss_loss(mx, cfg)))(U0)
    assert abs(float(loss) - truth[0]) < 1e-4
    assert abs(float(grad) - truth[1]) < 0.02 * abs(truth[1]), (adjoint, float(grad), truth)


def test_fixed_step_mjx_euler_is_visibly_wrong(mx, truth):
    cfg = CFG.override("integrator.solver=mjx_euler")
    loss, grad = jax.jit(jax.value_and_grad(cube_toss_loss(mx, cfg)))(U0)
    # stock MJX, Euler at dt 0.01: loss -2.55 and gradient +6.17 (ten times the truth)
    np.testing.assert_allclose([float(loss), float(grad)], [-2.5502, 6.1678], atol=2e-3)
    assert abs(float(grad) - truth[1]) > 5 * abs(truth[1])
