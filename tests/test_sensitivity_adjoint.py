"""The sensitivity mode: period Jacobians carried forward by Magnus quadrature on the forward's steps.

Its accuracy over a sweep of shots is measured with the other modes in
``experiments/benchmark_adjoints.py``. Here: the quadrature on small ODEs with known derivatives
(a kink in time located and split at; parameter and state columns; jvp and grad), a mass gradient
of the cube through touchdown against converged differences (``slow``: a 40 s compile), and the
config plumbing.
"""

import diffrax
import jax
import jax.numpy as jnp
import pytest

import diffmjx
from diffmjx.integration.adjoints import PeriodSolve, SensitivityAdjoint
from diffmjx.integration.adjoints.sensitivity import sensitivity_solve
from diffmjx.scenes import cube_toss_data, load

HORIZON = 15  # through touchdown (about 0.06 s), the first bounce and sliding (as the interpolated adjoint's test)
CFG = diffmjx.Config()


def _final_y(mx, cfg):
    """Final sideways position as a function of the cube's mass (a model leaf: a parameter of the vector field)."""
    ctrls = jnp.zeros((HORIZON, mx.nu))

    def loss(mass):
        m = mx.replace(body_mass=mx.body_mass.at[1].set(mass))
        d, _ = diffmjx.rollout(m, cube_toss_data(m), ctrls, cfg)
        return d.qpos[1]

    return loss


def _solve_dict(code=None, ignored=(False,)):
    return PeriodSolve(
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=1.0,
        dt0=0.1,
        max_steps=256,
        throw=False,
        ignored=ignored,
        code=code,
        controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
    )


def test_linear_ode_derivatives_are_exact():
    """y' = -k y: y(1) = y0 exp(-k); d/dk = -y(1), d/dy0 = exp(-k). The Jacobian is constant, so
    the Magnus steps are exact and only the forward solution's own error (rtol 1e-8) remains."""
    term = diffrax.ODETerm(lambda t, y, args: -args[0] * y)

    def y1(y0, k):
        return sensitivity_solve((y0, [k]), term, _solve_dict())[0]

    y0, k = jnp.array([2.0]), jnp.array(0.7)
    (value, (t_y0, t_k)) = y1(y0, k), jax.jacfwd(y1, argnums=(0, 1))(y0, k)
    g_y0, g_k = jax.grad(lambda y0, k: y1(y0, k)[0], argnums=(0, 1))(y0, k)
    exact = 2.0 * jnp.exp(-0.7)
    assert abs(float(value[0]) - float(exact)) < 1e-7
    assert abs(float(t_k[0]) + float(exact)) < 1e-7 and abs(float(g_k) - float(t_k[0])) < 1e-15
    assert abs(float(t_y0[0, 0]) - float(jnp.exp(-0.7))) < 1e-7 and abs(float(g_y0[0]) - float(t_y0[0, 0])) < 1e-15


def test_kinks_in_time_are_split_at():
    """y' = k max(t - 0.3, 0): d y(1) / dk = 0.245. The rate's slope jumps at t = 0.3; with the kink
    located (a constraint-state-like code that flips there) both sides are polynomials the Gauss
    points integrate exactly. An ignored argument (like the data's qvel) gets no column."""
    term = diffrax.ODETerm(lambda t, y, args: args[0] * jnp.maximum(t - 0.3, 0.0) + 0.0 * args[1])

    def code(t, y, args):
        return jnp.atleast_1d(t > 0.3).astype(y.dtype)

    def y1(k, ignored_arg):
        solve = _solve_dict(code=code, ignored=(False, True))
        return sensitivity_solve((jnp.array([1.0]), [k, ignored_arg]), term, solve)[0][0]

    g_k, g_other = jax.grad(y1, argnums=(0, 1))(jnp.array(2.0), jnp.array(5.0))
    assert abs(float(g_k) - 0.245) < 1e-12, float(g_k)
    assert float(g_other) == 0.0


@pytest.mark.slow  # suite budget: a 40 s compile; the quadrature itself is checked above
def test_mass_gradient_matches_converged_differences():
    mx = load("cube_toss")[1]
    mass = float(mx.body_mass[1])
    value, grad = jax.jit(jax.value_and_grad(_final_y(mx, CFG.override("integrator.adjoint=sensitivity"))))(mass)
    ref = jax.jit(_final_y(mx, diffmjx.converged(CFG)))  # the same program as the interpolated adjoint's test
    assert abs(float(value) - float(ref(mass))) < 1e-5  # backsolve's forward pass: an rtol-1e-7 solve
    h = 1e-4 * mass
    fd = float((ref(mass + h) - ref(mass - h)) / (2 * h))
    assert abs(fd) > 1e-4  # the mass moves the slide: a gradient that is not just zero
    # measured: -0.11914675 against differences -0.11914676 (steps 1e-3 and 1e-4 of the mass agree
    # to 5e-7): 1.2e-7 off (the interpolated adjoint 2e-7, backsolve 3e-5)
    assert abs(float(grad) - fd) < 1e-5 * abs(fd), (float(grad), fd)


def test_config_names_the_sensitivity_adjoint():
    """The config string builds the object, the forward solve runs at rtol itself without kink
    control (as backsolve's), and the object cannot be handed to Diffrax itself."""
    cfg = CFG.override("integrator.adjoint=sensitivity")
    method = diffmjx.diffrax_method(cfg)
    assert isinstance(method.adjoint, SensitivityAdjoint)
    assert method.stepsize_controller.rtol == CFG.integrator.rtol
    assert cfg.integrator.tolerances() == (1e-7, 1e-7)
    assert cfg.integrator.kink_step_used() is None
    with pytest.raises(NotImplementedError, match="diffmjx.step and diffmjx.rollout"):
        method.adjoint.loop()
