"""DiffMJX: correct and informative gradients of MuJoCo XLA simulations.

Public API (MJX style: pure functions over stock ``mjx.Model`` / ``mjx.Data``)::

    cfg = diffmjx.Config().override("integrator.rtol=1e-6")
    d = diffmjx.step(m, d, cfg)                      # one control period
    d, traj = diffmjx.rollout(m, d, ctrls, cfg)      # N periods; jit/grad/jacfwd/vmap
"""

from diffmjx.config import (
    CFDConfig,
    CollisionConfig,
    Config,
    IntegratorConfig,
    SolverConfig,
    add_cli_arguments,
    config_from_args,
)
from diffmjx.dynamics import State, forward
from diffmjx.gradcheck import GradCheck, central_differences, gradcheck
from diffmjx.integrate import Stats, Trajectory, rollout, step
from diffmjx.runtime import enable_compilation_cache

__all__ = [
    "CFDConfig",
    "CollisionConfig",
    "Config",
    "GradCheck",
    "IntegratorConfig",
    "SolverConfig",
    "State",
    "Stats",
    "Trajectory",
    "add_cli_arguments",
    "central_differences",
    "config_from_args",
    "enable_compilation_cache",
    "forward",
    "gradcheck",
    "rollout",
    "step",
]
