r"""From configuration to integration method: the one place ``integrator.solver`` and ``adjoint`` are read,
and where their choices are registered (:data:`diffmjx.registry.SOLVERS`, :data:`~diffmjx.registry.GRADIENT_MODES`).

:func:`integration_method` turns a :class:`diffmjx.Config` (and any Diffrax objects passed in its
place) into an object with ``period(m, d, layout, dt_hint) -> (d, stats, dt_next)``, its config bound: a
:class:`Method` of Diffrax objects, or one of MJX's fixed-step integrators
(:mod:`diffmjx.integration.fixed_step`). :func:`diffmjx.step` and :func:`diffmjx.rollout` call only that.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import diffrax

from diffmjx.config import Config
from diffmjx.integration.adjoints import (
    InterpolatedAdjoint,
    KinkAwareBacksolve,
    SensitivityAdjoint,
    mode_of,
    state_adjoint_norm,
)
from diffmjx.integration.fixed_step import MJXRK4, FixedStep, MJXEuler, MJXImplicitFast
from diffmjx.integration.period import diffrax_period
from diffmjx.integration.stepsize import pid_controller
from diffmjx.registry import GRADIENT_MODES, SOLVERS, GradientModeEntry, SolverEntry

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
"""The Diffrax tableaus among ``integrator.solver``'s choices (each registered in :data:`SOLVERS`)."""

for _name, _cls in DIFFRAX_SOLVERS.items():
    _entry = SolverEntry(
        lambda cfg, cls=_cls: cls(),
        embedded=issubclass(_cls, diffrax.AbstractAdaptiveSolver),
        runge_kutta=issubclass(_cls, diffrax.AbstractRungeKutta),
    )
    SOLVERS.register(_name, _entry)
for _name, _cls in (("mjx_euler", MJXEuler), ("mjx_rk4", MJXRK4), ("mjx_implicitfast", MJXImplicitFast)):
    SOLVERS.register(_name, SolverEntry(_cls, fixed_step=True))


class Method(NamedTuple):
    """The Diffrax objects that integrate one control period, and the config they were built from
    (bound once: a period reads its knobs from here, nobody hands it the config again)."""

    solver: diffrax.AbstractSolver
    stepsize_controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint
    cfg: object = None  # the diffmjx.Config bound (a builtin type: pdoc resolves no project name here)

    carries_all_data = False  # a Diffrax period changes only qpos, qvel, act and time

    def period(self, m, d, layout, dt_hint):
        """``(d, stats, dt_next)``: one control period (:func:`diffmjx.integration.period.diffrax_period`)."""
        if self.cfg is None:
            raise ValueError("this Method has no config bound; build it with diffmjx.diffrax_method(cfg, ...)")
        return diffrax_period(m, d, layout, dt_hint, self)


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
    solver = SOLVERS[ic.solver].build(cfg) if solver is None else solver
    if adjoint is None:
        adjoint = GRADIENT_MODES[ic.adjoint].build(cfg, solver, stepsize_controller)
    if stepsize_controller is None:
        stepsize_controller = pid_controller(cfg, backsolve=mode_of(adjoint).continuous)
    return Method(solver, stepsize_controller, adjoint, cfg)


def _backsolve(cfg: Config, solver, stepsize_controller, interpolated: bool = False):
    """``backsolve`` / ``interpolated``: the continuous adjoint, its own solve's controller from ``cfg``."""
    back = stepsize_controller
    if back is None:
        norm = state_adjoint_norm if interpolated else None
        back = pid_controller(cfg, backsolve=True, adjoint_solve=True, norm=norm)
    if interpolated:
        return InterpolatedAdjoint(stepsize_controller=back)
    return KinkAwareBacksolve(stepsize_controller=back, solver=solver)


GRADIENT_MODES.register(
    "checkpoint",
    GradientModeEntry(
        lambda cfg, solver, controller: diffrax.RecursiveCheckpointAdjoint(checkpoints=cfg.integrator.checkpoints),
        continuous=False,
        forward=False,
        saltation="step",
    ),
)
GRADIENT_MODES.register("backsolve", GradientModeEntry(_backsolve, continuous=True, forward=False, saltation="adjoint"))
GRADIENT_MODES.register(
    "interpolated",
    GradientModeEntry(functools.partial(_backsolve, interpolated=True), continuous=True, forward=False),
)
GRADIENT_MODES.register(
    "sensitivity",
    GradientModeEntry(lambda cfg, solver, controller: SensitivityAdjoint(), continuous=True, forward=True),
)
GRADIENT_MODES.register(
    "forward",
    GradientModeEntry(
        lambda cfg, solver, controller: diffrax.ForwardMode(),
        continuous=False,
        forward=True,
        reverse=False,
        saltation="step",
    ),
)


def integration_method(cfg: Config, solver=None, stepsize_controller=None, adjoint=None) -> Method | FixedStep:
    """The object that integrates a control period as ``cfg`` says: MJX's fixed-step integrator for
    an ``mjx_*`` ``integrator.solver`` (no Diffrax objects allowed), else :func:`diffrax_method`."""
    if cfg.integrator.fixed_step:
        return SOLVERS[cfg.integrator.solver].build(cfg)
    return diffrax_method(cfg, solver, stepsize_controller, adjoint)
