r"""From configuration to integration method: the one place ``integrator.solver`` and ``adjoint`` are read.

:func:`integration_method` turns a :class:`diffmjx.Config` (and any Diffrax objects passed in its
place) into an object with ``period(m, d, cfg, layout, dt_hint) -> (d, stats, dt_next)``: a
:class:`Method` of Diffrax objects, or one of MJX's fixed-step integrators
(:mod:`diffmjx.fixed_step`). :func:`diffmjx.step` and :func:`diffmjx.rollout` call only that.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax

from diffmjx.adjoints import InterpolatedAdjoint, SensitivityAdjoint, mode_of, state_adjoint_norm
from diffmjx.config import Config
from diffmjx.fixed_step import FIXED_STEP_METHODS, FixedStep
from diffmjx.period import diffrax_period
from diffmjx.stepsize import pid_controller

__all__ = ["DIFFRAX_SOLVERS", "Method", "diffrax_method", "integration_method"]

DIFFRAX_SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "bosh3": diffrax.Bosh3,
    "heun": diffrax.Heun,
    "midpoint": diffrax.Midpoint,
    "ralston": diffrax.Ralston,
    "euler": diffrax.Euler,
}
"""``integrator.solver`` -> its Diffrax solver class."""


class Method(NamedTuple):
    """The Diffrax objects that integrate one control period."""

    solver: diffrax.AbstractSolver
    stepsize_controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint

    carries_all_data = False  # a Diffrax period changes only qpos, qvel, act and time

    def period(self, m, d, cfg: Config, layout, dt_hint):
        """``(d, stats, dt_next)``: one control period (:func:`diffmjx.period.diffrax_period`)."""
        return diffrax_period(m, d, cfg, layout, dt_hint, self)


def diffrax_method(cfg: Config, solver=None, stepsize_controller=None, adjoint=None) -> Method:
    """The Diffrax solver, step-size controller and adjoint a Diffrax ``integrator.solver`` uses.

    Each object passed replaces the one the config names (Diffrax's own style: a custom controller
    needs no new config string); the others come from ``cfg.integrator``.

    Arguments:
        cfg: :class:`diffmjx.Config` with a Diffrax ``integrator.solver``.
        solver: a ``diffrax.AbstractSolver``, or None for ``integrator.solver``.
        stepsize_controller: a ``diffrax.AbstractStepSizeController``, or None for
            ``integrator.step_control`` with the forward solve's tolerances
            (:meth:`~diffmjx.config.IntegratorConfig.tolerances`: ``rtol``, ``atol``, divided by
            ``dto_tighten`` unless the adjoint is a backsolve one), the PID coefficients,
            ``dtmin`` and ``dtmax``.
        adjoint: a ``diffrax.AbstractAdjoint``, or None for ``integrator.adjoint``
            (``backsolve`` integrates its adjoint with the method's solver and
            ``integrator.backsolve_rtol`` / ``backsolve_atol``).

    Returns:
        :class:`Method`.
    """
    ic = cfg.integrator
    solver = DIFFRAX_SOLVERS[ic.solver]() if solver is None else solver
    if adjoint is None:
        adjoint = _adjoint(cfg, solver, stepsize_controller)
    if stepsize_controller is None:
        stepsize_controller = pid_controller(cfg, backsolve=mode_of(adjoint).continuous)
    return Method(solver, stepsize_controller, adjoint)


def _adjoint(cfg: Config, solver, stepsize_controller) -> diffrax.AbstractAdjoint:
    """The Diffrax adjoint ``integrator.adjoint`` names (its own solve's controller from ``cfg``)."""
    ic = cfg.integrator
    if ic.adjoint == "checkpoint":
        return diffrax.RecursiveCheckpointAdjoint(checkpoints=ic.checkpoints)
    if ic.adjoint == "forward":
        return diffrax.ForwardMode()
    if ic.adjoint == "sensitivity":
        return SensitivityAdjoint()
    norm = state_adjoint_norm if ic.adjoint == "interpolated" else None
    back = stepsize_controller
    if back is None:
        back = pid_controller(cfg, backsolve=True, adjoint_solve=True, norm=norm)
    if ic.adjoint == "interpolated":
        return InterpolatedAdjoint(stepsize_controller=back)
    return diffrax.BacksolveAdjoint(solver=solver, stepsize_controller=back)


def integration_method(cfg: Config, solver=None, stepsize_controller=None, adjoint=None) -> Method | FixedStep:
    """The object that integrates a control period as ``cfg`` says: MJX's fixed-step integrator for
    an ``mjx_*`` ``integrator.solver`` (no Diffrax objects allowed), else :func:`diffrax_method`."""
    if cfg.integrator.fixed_step:
        return FIXED_STEP_METHODS[cfg.integrator.solver]()
    return diffrax_method(cfg, solver, stepsize_controller, adjoint)
