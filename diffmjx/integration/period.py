r"""One control period of a Diffrax solver: the ODE of :mod:`diffmjx.physics.dynamics` over ``[t, t + timestep]``.

:func:`diffrax_period` puts the pieces together and names none of them: the vector field term
(:class:`diffmjx.integration.term.PeriodTerm`), the step-size controller with warm start and kink control
(:mod:`diffmjx.integration.stepsize`) and the gradient mode (:mod:`diffmjx.integration.adjoints`), then retracts the
positions onto the quaternion manifold.
"""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp

from diffmjx.integration import saltation
from diffmjx.integration.adjoints import PeriodSolve, mode_of
from diffmjx.integration.stepsize import first_step, with_first_step
from diffmjx.integration.term import PeriodTerm
from diffmjx.integration.wrapped import bracketing
from diffmjx.physics import manifold
from diffmjx.physics.dynamics import clamp_act

__all__ = ["Stats", "diffrax_period"]


class Stats(NamedTuple):
    """Integrator statistics of one control period (stacked over periods by ``rollout``)."""

    accepted: jax.Array  # accepted steps
    rejected: jax.Array  # rejected steps
    budget_exhausted: jax.Array  # True if max_steps ran out before the period's end


def diffrax_period(m, d, layout, dt_hint, method):
    """``(d, stats, dt_next)``: ``d`` advanced by one period with the Diffrax ``method``.

    Arguments:
        m: ``mjx.Model``; ``opt.timestep`` is the period.
        d: ``mjx.Data`` at the period's start (``ctrl`` held).
        layout: the model's :class:`diffmjx.physics.manifold.JointLayout`.
        dt_hint: the first step the adaptive controller tries (capped at the period).
        method: the :class:`diffmjx.integration.method.Method` (solver, step-size controller, adjoint, and the
            :class:`diffmjx.Config` they were built from).

    Returns:
        The data with ``qpos``, ``qvel``, ``act`` and ``time`` advanced, the period's
        :class:`Stats`, and the next period's first step (the mean accepted step of this one).
    """
    cfg = method.cfg
    ic = cfg.integrator
    period = jax.lax.stop_gradient(m.opt.timestep)
    t0 = jax.lax.stop_gradient(d.time)
    field = PeriodTerm(m, d, cfg, layout)
    mode = mode_of(method.adjoint)

    controller = method.stepsize_controller
    # the warm-start step goes to the controller, not to diffeqsolve (see PeriodPID); the
    # continuous modes run without kink control (their adjoint solves have their own error control)
    warm = isinstance(controller, diffrax.PIDController)
    kink_step = ic.kink_step_used(backsolve=mode.continuous, rtol=_static_rtol(controller))
    kinks = warm and not mode.continuous and kink_step is not None and field.nefc > 0

    # the backsolve adjoint's backward solve runs kink control of its own: its adjoint's rate
    # jumps at every kink (KinkAwareBacksolve)
    back_kink_step = None
    if warm and field.nefc > 0 and mode.backward_kink_control():
        back_kink_step = ic.backward_kink_step(_static_rtol(mode.stepsize_controller))

    dt0 = first_step(controller, period, dt_hint, ic.substeps)
    if warm:
        controller = with_first_step(controller, dt0, kink_step if kinks else None)
        mode, dt0 = mode.warm_start(method.stepsize_controller, dt0, back_kink_step)
    # the force jump at each touchdown in the derivatives (integrator.saltation)
    mode, solver = saltation.carry_jumps(mode, method.solver, field, m, d, kinks)
    if kinks:  # each straddling step's stages bracket the kink for the controller
        solver = bracketing(solver)
    spec = PeriodSolve(
        solver=solver,
        t0=t0,
        t1=t0 + period,
        dt0=dt0,
        controller=controller,
        max_steps=ic.max_steps,
        throw=ic.on_budget_exhausted == "raise",
        code=field.state_code if field.pyramidal else None,
        coded=field.term(True) if back_kink_step is not None else None,
        ignored=field.ignored(),
    )
    y1, sol_stats, result = mode.solve(field.term(kinks), field.y0(m, d, kinks), field.args, spec)
    if kinks:
        y1 = y1[0]
    qpos = manifold.normalize_quats(layout, manifold.retract(layout, d.qpos, y1.xi))
    d = d.replace(qpos=qpos, qvel=y1.qvel, act=clamp_act(m, y1.act), time=t0 + period)
    accepted = sol_stats["num_accepted_steps"]
    stats = Stats(
        accepted=accepted,
        rejected=sol_stats["num_rejected_steps"],
        budget_exhausted=result == diffrax.RESULTS.max_steps_reached,
    )
    # Next period's first trial step: the mean accepted step of this one.
    dt_next = period / jnp.maximum(accepted, 1)
    return d, stats, dt_next


def _static_rtol(controller) -> float | None:
    """A step-size controller's ``rtol`` where it is a number (None: none, or traced)."""
    rtol = getattr(controller, "rtol", None)
    return rtol if isinstance(rtol, (int, float)) else None
