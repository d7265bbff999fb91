r"""The interpolated adjoint: optimise-then-discretise with the state read from the forward solution."""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from diffmjx.integration.adjoints import kinks
from diffmjx.integration.adjoints.base import (
    UNDIFFERENTIATED,
    GradientMode,
    PeriodSolve,
    period_end_state,
    solve_forward,
)
from diffmjx.integration.stepsize import with_first_step

__all__ = ["AdjointState", "InterpolatedAdjoint", "state_adjoint_norm"]


class AdjointState(NamedTuple):
    """The state of an interpolated adjoint's backward solve."""

    a_y: object  # the state adjoint (a State)
    a_args: list  # the adjoints of the differentiated args, accumulating


def state_adjoint_norm(x: AdjointState):
    """RMS norm of the state adjoint ``a_y`` only: the parameter adjoints only accumulate and would
    force tiny steps."""
    return optx.rms_norm(x.a_y)


class InterpolatedAdjoint(diffrax.AbstractAdjoint, GradientMode):
    r"""Optimise-then-discretise gradients with the state read from the forward solution.

    Like ``diffrax.BacksolveAdjoint``, each control period's gradient comes from the continuous
    adjoint equations :math:`\dot a_y = -a_y^\top \partial f/\partial y`,
    :math:`\dot a_\theta = -a_y^\top \partial f/\partial\theta`, integrated backwards with
    their own error control. Two differences:

    - The state is not integrated backwards: the backward pass re-runs the period's forward solve
      keeping Diffrax's dense output, and the adjoint solve reads the state from it (no backward
      drift of the state through dissipative contact).
    - The adjoint's rate jumps where the constraint state changes (lift-off, a friction-pyramid
      edge, stick-slip), by orders of magnitude on the cube toss. Backsolve's controller finds
      each jump by rejecting and shrinking steps (most of its extra backward steps). Here up to
      :data:`diffmjx.integration.adjoints.kinks.KINKS` changes per period are located on the interpolated
      forward solution by bisection with forward evaluations, and the adjoint solve steps to each
      as a jump time (``diffrax.ClipStepSizeController``); its own error control handles the rest.

    The forward pass (trajectory, memory kept per period) is the backsolve adjoint's; the
    backward pass holds one period's dense output (``integrator.max_steps`` steps) at a time.
    :func:`diffmjx.step` and :func:`diffmjx.rollout` carry it out; ``diffrax.diffeqsolve`` cannot.
    Measured against backsolve in ``docs/results/benchmark_adjoints.csv``.

    Attributes:
        stepsize_controller: the adjoint solve's controller; None: the forward solve's with
            the error measured on the state adjoint only.
    """

    continuous = True
    stepsize_controller: diffrax.AbstractStepSizeController | None = None

    def loop(self, **kwargs):
        raise NotImplementedError("InterpolatedAdjoint is carried out by diffmjx.step and diffmjx.rollout only")

    def warm_start(self, forward, first_step, kink_step=None):
        del kink_step
        back = self.stepsize_controller
        if back is None and isinstance(forward, diffrax.PIDController):
            back = eqx.tree_at(lambda c: c.norm, forward, state_adjoint_norm)
        if not isinstance(back, diffrax.PIDController):
            return self, first_step
        return InterpolatedAdjoint(stepsize_controller=with_first_step(back, first_step)), None

    def solve(self, term, y0, args, spec: PeriodSolve):
        back = self.stepsize_controller or spec.controller
        y1, (stats, result) = _interpolated_solve((y0, args), term, spec, back)
        return y1, stats, result


@eqx.filter_custom_vjp
def _interpolated_solve(y0_args, term, spec, back):
    """``(y1, stats)`` of one period's forward solve; its VJP is :class:`InterpolatedAdjoint`'s, whose
    backward solve runs under the controller ``back``."""
    return period_end_state(y0_args, term, spec)


@_interpolated_solve.def_fwd
def _interpolated_solve_fwd(perturbed, y0_args, term, spec, back):
    del perturbed
    return _interpolated_solve(y0_args, term, spec, back), None


@_interpolated_solve.def_bwd
def _interpolated_solve_bwd(residuals, grad_out, perturbed, y0_args, term, spec, back):
    del residuals
    y0, args = y0_args
    # the period again, keeping the dense output the adjoint solve reads the state from
    sol = solve_forward(y0_args, term, spec, diffrax.SaveAt(dense=True))
    perturbed_args = perturbed[1]
    diff = [a for a, p in zip(args, perturbed_args, strict=True) if p]

    def vf(t, a, _):
        y = sol.evaluate(t)

        def f(y, diff):
            it = iter(diff)
            full = [next(it) if p else x for x, p in zip(args, perturbed_args, strict=True)]
            return term.vf(t, y, full)

        _, vjp = jax.vjp(f, y, diff)
        return AdjointState(*jax.tree.map(jnp.negative, vjp(a.a_y)))

    g_y1 = jax.tree.map(lambda y, g: jnp.zeros_like(y) if g is None else g, y0, grad_out[0])
    a1 = AdjointState(g_y1, [jnp.zeros_like(x) for x in diff])
    if spec.code is not None and isinstance(back, diffrax.AbstractAdaptiveStepSizeController):
        back = diffrax.ClipStepSizeController(back, jump_ts=kinks.locate(sol, spec.code, args))
    dt0 = None if spec.dt0 is None else -spec.dt0
    adj = diffrax.diffeqsolve(
        diffrax.ODETerm(vf),
        spec.solver,
        t0=spec.t1,
        t1=spec.t0,
        dt0=dt0,
        y0=a1,
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=back,
        max_steps=spec.max_steps,
        throw=spec.throw,
        adjoint=UNDIFFERENTIATED,
    )
    # a backward solve that ran out of max_steps gives NaN, not a partial gradient
    ok = adj.result == diffrax.RESULTS.successful
    a_y0, a_diff = jax.tree.map(lambda x: jnp.where(ok, x[-1], jnp.nan), adj.ys)
    it = iter(a_diff)
    a_args = [next(it) if p else None for p in perturbed_args]
    a_y0 = jax.tree.map(lambda g, p: g if p else None, a_y0, perturbed[0])
    return a_y0, a_args
