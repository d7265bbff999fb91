"""The gradient-check utility on functions with known derivatives."""

import jax.numpy as jnp
import numpy as np
import pytest

import diffmjx
from diffmjx.gradcheck import pick_plateau, tightened


def test_gradcheck_exact_on_smooth_function():
    res = diffmjx.gradcheck(lambda p: jnp.sum(jnp.sin(p["a"]) * p["b"] ** 2), {"a": jnp.array([0.3, 1.0]), "b": 2.0})
    np.testing.assert_allclose(res.ad, [4 * np.cos(0.3), 4 * np.cos(1.0), 4 * (np.sin(0.3) + np.sin(1.0))], rtol=1e-12)
    assert res.rel_error < 1e-8
    assert res.fd_sweep.shape == (len(res.steps), 3)


def test_gradcheck_flags_a_wrong_gradient():
    loss = lambda x: jnp.floor(10 * x) / 10 + x
    res = diffmjx.gradcheck(loss, 0.55, steps=(0.3, 0.2, 0.1))
    assert res.rel_error > 0.3


def test_plateau_pick_avoids_roundoff_and_truncation():
    sweep = np.array([[1.3], [1.01], [1.0001], [1.0], [1.0001], [0.7]])
    assert pick_plateau(sweep) in (2, 3, 4)


def test_tightened_solve_shows_the_discretisation_error():
    """AD agrees with differences of the same loose "solve", so only the tightened reference shows
    its error: a loss whose discretisation error grows with rtol, checked through its cfg keyword."""
    loose = diffmjx.Config().override("integrator.rtol=1e-2", "integrator.atol=1e-2", "integrator.kink_step=1e-7")

    def loss(p, cfg=loose):  # exact value sin(p); the "solver" adds 10 rtol p^2
        return jnp.sin(p) + 10.0 * cfg.integrator.rtol * p**2

    res = diffmjx.gradcheck(loss, 0.3)
    assert res.rel_error < 1e-8  # AD = FD of the same solve
    np.testing.assert_allclose(res.fd_tight, [np.cos(0.3) + 20e-5 * 0.3], rtol=1e-8)
    assert res.rel_error_tight > 0.05  # 0.2 * 0.3 / cos(0.3)
    assert "tightened" in str(res)
    tight = tightened(loose)
    assert (tight.integrator.rtol, tight.integrator.atol, tight.integrator.kink_step) == (1e-5, 1e-5, None)
    assert diffmjx.gradcheck(lambda p: jnp.sin(p), 0.3).fd_tight is None  # no cfg: nothing to tighten


def test_batched_central_differences_equal_the_serial_ones():
    loss = lambda p: jnp.sum(jnp.sin(p["a"]) * p["b"] ** 2)
    params = {"a": jnp.array([0.3, 1.0]), "b": 2.0}
    serial, _steps = diffmjx.central_differences(loss, params, (1e-2, 1e-3))
    batched, _ = diffmjx.central_differences(loss, params, (1e-2, 1e-3), batch=True)
    assert batched.shape == (2, 3)
    np.testing.assert_allclose(batched, serial, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        batched[1], [4 * np.cos(0.3), 4 * np.cos(1.0), 4 * (np.sin(0.3) + np.sin(1.0))], rtol=1e-5
    )


def test_reference_gradient_solves_the_converged_physics():
    """The reference differences the loss at the converged config (Tsit5, 1e-12, no kink control),
    whatever the user's integrator settings, and reports how well its two steps agree."""
    loose = diffmjx.Config().override("integrator.solver=bosh3", "integrator.rtol=1e-2", "integrator.kink_step=1e-7")
    seen = []

    def loss(p, cfg=loose):
        seen.append(cfg.integrator)
        return jnp.sin(p) + 10.0 * cfg.integrator.rtol * p**2

    ref = diffmjx.reference_gradient(loss, 0.3, loose)
    np.testing.assert_allclose(ref.grad, [np.cos(0.3) + 20e-11 * 0.3], rtol=1e-8)
    assert ref.agreement < 1e-6 and ref.step == 1e-4
    ic = seen[-1]
    assert (ic.solver, ic.rtol, ic.atol, ic.kink_step) == ("tsit5", 1e-12, 1e-12, None)
    conv = diffmjx.converged(loose, 1e-10, max_steps=1 << 14)
    assert (conv.integrator.rtol, conv.integrator.max_steps, conv.collision) == (1e-10, 1 << 14, loose.collision)
    with pytest.raises(ValueError, match="at least two"):
        diffmjx.reference_gradient(loss, 0.3, loose, steps=(1e-3,))


def test_central_differences_with_arguments_threads_and_array_losses():
    """Extra arguments reach the loss without a recompile per value, threads give the serial
    numbers bitwise, an array loss gets one estimate per output, and a NaN (a failed solve) stays NaN."""
    loss = lambda x, c: jnp.stack([c * jnp.sin(x[0]) * x[1], jnp.where(c > 5.0, jnp.nan, x[0] ** 3)])
    x = np.array([0.3, 2.0])
    serial, _ = diffmjx.central_differences(loss, x, (1e-3, 1e-4), args=(jnp.asarray(1.5),))
    threaded, _ = diffmjx.central_differences(loss, x, (1e-3, 1e-4), args=(jnp.asarray(1.5),), workers=2)
    batched, _ = diffmjx.central_differences(loss, x, (1e-3, 1e-4), args=(jnp.asarray(1.5),), batch=True)
    assert serial.shape == (2, 2, 2)  # (steps, parameters, outputs)
    np.testing.assert_array_equal(threaded, serial)
    np.testing.assert_allclose(batched, serial, rtol=1e-9)
    exact = np.array([[1.5 * np.cos(0.3) * 2.0, 3 * 0.3**2], [1.5 * np.sin(0.3), 0.0]])
    np.testing.assert_allclose(serial[1], exact, rtol=1e-6, atol=1e-9)
    failed, _ = diffmjx.central_differences(loss, x, (1e-3, 1e-4), args=(jnp.asarray(6.0),))
    assert np.isnan(failed[:, :, 1]).all() and np.isfinite(failed[:, :, 0]).all()
    with pytest.raises(ValueError, match="workers"):
        diffmjx.central_differences(loss, x, (1e-3,), args=(jnp.asarray(1.5),), workers=0)
