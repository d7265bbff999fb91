"""DiffMJX: correct and informative gradients of MuJoCo XLA simulations.

Public API (MJX style: pure functions over stock ``mjx.Model`` / ``mjx.Data``)::

    cfg = diffmjx.Config().override("integrator.rtol=1e-6")
    d = diffmjx.step(m, d, cfg)                      # one control period
    d, traj = diffmjx.rollout(m, d, ctrls, cfg)      # N periods; jit/grad/jacfwd/vmap
    lin = diffmjx.linearize(m, d, ctrls, cfg)        # A_t, B_t of every period (iLQR, LQR)
    d, traj = diffmjx.rollout(m, d, ctrls, cfg, stepsize_controller=diffrax.PIDController(...))

Layers import one way: ``_mjx`` (MJX internals) and ``config`` at the bottom; ``impedance``,
``constraint``, ``solver``, ``collision``, ``manifold`` above them; ``dynamics`` (the vector field)
and ``integrate`` (``step`` / ``rollout``) on top. The :mod:`cfd` package sits above ``diffmjx``.
"""

from diffmjx.config import (
    CFDConfig,
    CollisionConfig,
    Config,
    IntegratorConfig,
    MuscleConfig,
    SolverConfig,
    add_cli_arguments,
    config_from_args,
)
from diffmjx.gradcheck import GradCheck, Reference, central_differences, converged, gradcheck, reference_gradient
from diffmjx.integration.integrate import Method, Stats, Trajectory, diffrax_method, rollout, step
from diffmjx.jacobians import Linearization, linearize, tangent_size
from diffmjx.physics.checks import TouchdownJumpWarning, touchdown_jumps, validate
from diffmjx.physics.constants import set_const
from diffmjx.physics.dynamics import State, forward
from diffmjx.runtime import enable_compilation_cache, enable_gpu

__all__ = [
    "CFDConfig",
    "CollisionConfig",
    "Config",
    "GradCheck",
    "IntegratorConfig",
    "Linearization",
    "Method",
    "MuscleConfig",
    "Reference",
    "SolverConfig",
    "State",
    "Stats",
    "TouchdownJumpWarning",
    "Trajectory",
    "add_cli_arguments",
    "central_differences",
    "config_from_args",
    "converged",
    "diffrax_method",
    "enable_compilation_cache",
    "enable_gpu",
    "forward",
    "gradcheck",
    "linearize",
    "reference_gradient",
    "rollout",
    "set_const",
    "step",
    "tangent_size",
    "touchdown_jumps",
    "validate",
]
