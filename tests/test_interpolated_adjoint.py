"""The interpolated adjoint: the backsolve adjoint's forward pass, gradients with respect to model parameters.

Its accuracy over a sweep of shots runs with the other adjoints in test_cube_toss.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffmjx
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


def test_mass_gradient_matches_converged_differences(mx):
    mass = float(mx.body_mass[1])
    interp = _final_y(mx, CFG.override("integrator.adjoint=interpolated"))
    (value, steps), grad = jax.jit(jax.value_and_grad(interp, has_aux=True))(mass)
    # the forward pass is the backsolve adjoint's, step for step
    b_value, b_steps = jax.jit(_final_y(mx, CFG))(mass)
    assert float(value) == float(b_value) and int(steps) == int(b_steps)
    ref = jax.jit(lambda m: _final_y(mx, diffmjx.converged(CFG))(m)[0])
    h = 1e-4 * mass
    fd = float((ref(mass + h) - ref(mass - h)) / (2 * h))
    assert abs(fd) > 1e-4  # the mass moves the slide: a gradient that is not just zero
    assert abs(float(grad) - fd) < 1e-3 * abs(fd), (float(grad), fd)


def test_config_names_the_interpolated_adjoint():
    """The config string builds the object (its adjoint solve error-controls the state adjoint only),
    and the object cannot be handed to Diffrax itself."""
    method = diffmjx.diffrax_method(CFG.override("integrator.adjoint=interpolated", "integrator.backsolve_rtol=1e-6"))
    adjoint = method.adjoint
    assert isinstance(adjoint, diffmjx.integrate.InterpolatedAdjoint)
    assert adjoint.stepsize_controller.rtol == 1e-6 and method.stepsize_controller.rtol == CFG.integrator.rtol
    a_y, a_args = jnp.array([3.0, 4.0]), [jnp.array([1e6])]
    assert float(adjoint.stepsize_controller.norm((a_y, a_args))) == pytest.approx(np.sqrt(12.5))
    assert CFG.override("integrator.adjoint=interpolated").integrator.tolerances() == (1e-7, 1e-7)
    with pytest.raises(NotImplementedError, match="diffmjx.step and diffmjx.rollout"):
        adjoint.loop()
