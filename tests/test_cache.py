"""DiffMJX's compiled programs can be stored in JAX's persistent compilation cache."""

import jax
import pytest

import diffmjx
from diffmjx.scenes import cube_toss_loss, load


@pytest.mark.parametrize(
    "overrides, cacheable",
    [
        ((), True),  # the defaults: backsolve, whose adjoint solve holds its first step too
        # suite budget: the other two trace a second and third gradient program; run with -m slow
        pytest.param(("integrator.adjoint=checkpoint",), True, marks=pytest.mark.slow),
        pytest.param(("integrator.on_budget_exhausted=raise",), False, marks=pytest.mark.slow),  # a host callback
    ],
)
def test_gradient_program_has_no_host_callback(overrides, cacheable):
    """JAX never writes a program with a host callback to the persistent cache. A traced ``dt0``
    made Diffrax insert one (a run-time sign check), so no gradient was ever cached."""
    _, mx = load("cube_toss")
    cfg = diffmjx.Config().override(*overrides)
    text = jax.jit(jax.grad(cube_toss_loss(mx, cfg, horizon=2))).lower(-2.0).as_text()
    assert ("callback" not in text) == cacheable
