"""The gradient-check utility on functions with known derivatives."""

import jax.numpy as jnp
import numpy as np

import diffmjx
from diffmjx.gradcheck import pick_plateau, tightened


def test_gradcheck_exact_on_smooth_function():
    res = diffmjx.gradcheck(lambda p: jnp.sum(jnp.sin(p["a"]) * p["b"] ** 2), {"a": jnp.array([0.3, 1.0]), "b": 2.0})
    np.testing.assert_allclose(res.ad, [4 * np.cos(0.3), 4 * np.cos(1.0), 4 * (np.sin(0.3) + np.sin(1.0))], rtol=1e-12)
    assert res.rel_error < 1e-8
    assert res.fd_sweep.shape == (len(res.steps), 3)


def test_gradcheck_flags_a_wrong_gradient():
    loss = lambda x: jnp.floor(10 * x) / 10 + x  # noqa: E731  (AD sees slope 1, the staircase has slope 2)
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
