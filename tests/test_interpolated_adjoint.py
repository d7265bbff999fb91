"""The interpolated adjoint: the backsolve adjoint's forward pass, gradients with respect to model parameters.

Its accuracy over a sweep of shots runs with the other adjoints in test_cube_toss.py.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmjx
from diffmjx.integration.adjoints import AdjointState, InterpolatedAdjoint, kinks
from diffmjx.scenes import cube_toss_data, load

HORIZON = 15  # through touchdown (about 0.06 s), the first bounce and sliding
CFG = diffmjx.Config()


@pytest.fixture(scope="module")
def mx():
    return load("cube_toss")[1]


def _final_y(mx, cfg):
    """Final sideways position as a function of the cube's mass (a model leaf: Diffrax ``args``)."""
    ctrls = jnp.zeros((HORIZON, mx.nu))

    def loss(mass):
        m = mx.replace(body_mass=mx.body_mass.at[1].set(mass))
        d, traj = diffmjx.rollout(m, cube_toss_data(m), ctrls, cfg)
        return d.qpos[1], traj.stats.accepted.sum()

    return loss


@pytest.mark.slow  # suite budget: an opt-in mode, like the sensitivity mode's gradient; its kink search runs by default
def test_mass_gradient_matches_converged_differences(mx):
    mass = float(mx.body_mass[1])
    interp = _final_y(mx, CFG.override("integrator.adjoint=interpolated"))
    (value, _), grad = jax.jit(jax.value_and_grad(interp, has_aux=True))(mass)
    ref = jax.jit(lambda m: _final_y(mx, diffmjx.converged(CFG))(m)[0])
    # the forward pass is an rtol-1e-7 solve (measured 3.6e-7 m from the converged one); that it is
    # backsolve's, step for step, is checked under -m slow (one more compile)
    assert abs(float(value) - float(ref(mass))) < 1e-5
    h = 1e-4 * mass
    fd = float((ref(mass + h) - ref(mass - h)) / (2 * h))
    assert abs(fd) > 1e-4  # the mass moves the slide: a gradient that is not just zero
    # measured: -0.1191468 against differences -0.1191468 (steps 1e-3 and 1e-4 of the mass agree to
    # 5e-7): 2e-7 off; backsolve's gradient, -0.1191433, is 3e-5 off and would fail this bound
    assert abs(float(grad) - fd) < 1e-5 * abs(fd), (float(grad), fd)


@pytest.mark.slow  # suite budget: a third compile of the same rollout
def test_forward_pass_is_backsolves_step_for_step(mx):
    mass = float(mx.body_mass[1])
    interp = _final_y(mx, CFG.override("integrator.adjoint=interpolated"))
    (value, steps), _ = jax.jit(jax.value_and_grad(interp, has_aux=True))(mass)
    b_value, b_steps = jax.jit(_final_y(mx, CFG))(mass)
    assert int(steps) == int(b_steps)
    np.testing.assert_allclose(float(value), float(b_value), rtol=1e-12)


def test_config_names_the_interpolated_adjoint():
    """The config string builds the object (its adjoint solve error-controls the state adjoint only),
    and the object cannot be handed to Diffrax itself."""
    method = diffmjx.diffrax_method(CFG.override("integrator.adjoint=interpolated", "integrator.backsolve_rtol=1e-6"))
    adjoint = method.adjoint
    assert isinstance(adjoint, InterpolatedAdjoint)
    assert adjoint.stepsize_controller.rtol == 1e-6 and method.stepsize_controller.rtol == CFG.integrator.rtol
    a_y, a_args = jnp.array([3.0, 4.0]), [jnp.array([1e6])]
    state = AdjointState(a_y, a_args)
    assert float(adjoint.stepsize_controller.norm(state)) == pytest.approx(np.sqrt(12.5))
    assert CFG.override("integrator.adjoint=interpolated").integrator.tolerances() == (1e-7, 1e-7)
    with pytest.raises(NotImplementedError, match="diffmjx.step and diffmjx.rollout"):
        adjoint.loop()


def _ramp():
    """Dense solution of y' = 1 from y(0) = -0.1 over [0, 1] in two steps of 0.5: y(t) = t - 0.1."""
    term = diffrax.ODETerm(lambda t, y, args: jnp.ones_like(y))
    return diffrax.diffeqsolve(
        term,
        diffrax.Tsit5(),
        0.0,
        1.0,
        0.5,
        jnp.array([-0.1]),
        max_steps=4,
        saveat=diffrax.SaveAt(dense=True),
        stepsize_controller=diffrax.ConstantStepSize(),
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (lambda y: jnp.zeros(1), []),  # no change: all inf
        (lambda y: (y > 0.2) * 1.0, [0.3]),  # one change
        (lambda y: jnp.concatenate([y > 0, y > 0.2]) * 1.0, [0.1, 0.3]),  # two in one step, found in order
        (lambda y: jnp.concatenate([y > 0, y > 1e-14]) * 1.0, [0.1, 0.1 + 1e-14]),  # 1e-14 s apart: both
        (lambda y: jnp.floor(20 * y), [0.05 * (k + 1) for k in range(8)]),  # 18 changes: the first 8
    ],
)
def test_kinks_are_located_on_the_dense_solution(code, expected):
    found = np.asarray(jax.jit(lambda: kinks.locate(_ramp(), lambda t, y, args: code(y), None))())
    assert found.shape == (8,)
    np.testing.assert_allclose(found[: len(expected)], expected, rtol=0, atol=1e-13)
    assert np.all(np.isinf(found[len(expected) :]))
