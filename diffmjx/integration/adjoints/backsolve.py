r"""The ``backsolve`` gradient mode: the continuous adjoint integrated backwards with the state,
under kink control."""

from __future__ import annotations

from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from diffmjx.integration.adjoints.base import UNDIFFERENTIATED, GradientMode, PeriodSolve, period_end_state
from diffmjx.integration.stepsize import with_first_step
from diffmjx.integration.wrapped import bracketing

__all__ = ["BacksolveState", "KinkAwareBacksolve"]


class BacksolveState(NamedTuple):
    """The state of :class:`KinkAwareBacksolve`'s backward solve, laid out as Diffrax's backsolve
    adjoint's ``(y, a_y, a_args, a_terms)`` (so Diffrax's ``adjoint_rms_seminorm`` and the
    saltation term's backward solver read it alike), the fourth slot holding kink control's sentinel."""

    y: object  # the state, integrated backwards from the period's end
    a_y: object  # its adjoint
    a_args: list  # per traced arg: its adjoint, accumulating; None where it is not differentiated
    sentinel: object  # kink control's BracketedSentinel, its rate the constraint state (None: no kink
    # control); its bracket written where a Runge-Kutta solver's stages bracket each kink (KinkBracketing)


class KinkAwareBacksolve(diffrax.AbstractAdjoint, GradientMode):
    r"""Optimise-then-discretise gradients: Diffrax's backsolve adjoint, with kink control in its
    backward solve.

    Per control period the backward pass integrates the state and its adjoint from the period's
    end to its start, :math:`\dot y = f`, :math:`\dot a_y = -a_y^\top \partial f/\partial y`,
    :math:`\dot a_\theta = -a_y^\top \partial f/\partial\theta`, as ``diffrax.BacksolveAdjoint``
    does (one vector-Jacobian product of the dynamics per stage). What differs:

    - The adjoint's rate jumps wherever the constraint state changes (lift-off, a friction-pyramid
      edge, stick-slip). Diffrax's solve finds each jump by rejecting steps, and its error control
      then shrinks the step over it to 1e-8 s and below (on the cube toss at ``Config()``, a third
      of its backward steps were rejected and a quarter were shorter than 10 us). Here the
      backward state carries kink control's sentinel (its rate the constraint state, as in the
      forward solve of ``checkpoint``), and the controller (:class:`diffmjx.integration.stepsize.PeriodPID`
      with ``adjoint_solve``) bisects to each kink, in the bracket the straddling step's own stages
      put around it (:class:`KinkBracketing`), and takes one step of ``kink_step`` over it.
      ``integrator.kink_step=null`` turns that off (Diffrax's behaviour).
    - The forward pass is a plain solve: nothing is added to what a simulation that is not
      differentiated computes.
    - Only the traced args the vector field reads get adjoints (the data's ``qpos``, ``qvel``,
      ``act`` and ``time``, which the state and ``t`` replace, get zeros without integrating any).

    :func:`diffmjx.step` and :func:`diffmjx.rollout` carry it out; ``diffrax.diffeqsolve``
    cannot. A ``diffrax.BacksolveAdjoint`` passed in its place runs Diffrax's own backward solve.
    A backward solve that runs out of ``integrator.max_steps`` gives NaN for that period's
    gradient, not a partial one (with ``on_budget_exhausted=raise`` it raises).

    Attributes:
        stepsize_controller: the backward solve's controller (``integrator.backsolve_rtol`` /
            ``backsolve_atol``, Diffrax's ``adjoint_rms_seminorm``).
        solver: the backward solve's solver; None: the forward's.
        kinks: whether the backward solve runs kink control (set by :meth:`warm_start`).
    """

    continuous = True
    stepsize_controller: diffrax.AbstractStepSizeController
    solver: diffrax.AbstractSolver | None = None
    kinks: bool = False

    def loop(self, **kwargs):
        raise NotImplementedError("KinkAwareBacksolve is carried out by diffmjx.step and diffmjx.rollout only")

    def backward_kink_control(self) -> bool:
        return isinstance(self.stepsize_controller, diffrax.PIDController)

    def warm_start(self, forward, first_step, kink_step=None):
        # the backward solve starts from the forward's first step too (held in its controller)
        back = self.stepsize_controller
        if not isinstance(back, diffrax.PIDController):
            return self, first_step
        back = with_first_step(back, first_step, kink_step, adjoint_solve=True)
        return KinkAwareBacksolve(back, self.solver, kinks=kink_step is not None), None

    def solve(self, term, y0, args, spec: PeriodSolve):
        y1, (stats, result) = _solve((y0, args), term, spec, self)
        return y1, stats, result


def _zeros_like(shape):
    return jnp.zeros(shape.shape, shape.dtype)


@eqx.filter_custom_vjp
def _solve(y0_args, term, spec, mode):
    """``(y1, (stats, result))`` of one period's forward solve; its VJP is :class:`KinkAwareBacksolve`'s."""
    return period_end_state(y0_args, term, spec)


@_solve.def_fwd
def _solve_fwd(perturbed, y0_args, term, spec, mode):
    del perturbed
    out = _solve(y0_args, term, spec, mode)
    return out, out[0]  # the period's end state: where the backward solve starts


@_solve.def_bwd
def _solve_bwd(y1, grad_out, perturbed, y0_args, term, spec, mode):
    args = y0_args[1]
    # the args the vector field reads and autodiff perturbs: only these get adjoints
    diff = [p and not ignored for p, ignored in zip(perturbed[1], spec.ignored, strict=True)]
    kinks = mode.kinks and spec.coded is not None
    solver = mode.solver or spec.solver
    rate = (spec.coded if kinks else term).vector_field

    def vf(t, s, args):
        def f(y, diff_args):
            it = iter(diff_args)
            full = [next(it) if d else a for a, d in zip(args, diff, strict=True)]
            if kinks:
                return rate(t, (y, None), full)  # (dy, the constraint state)
            return rate(t, y, full), None

        dy, vjp, code = jax.vjp(f, s.y, [a for a, d in zip(args, diff, strict=True) if d], has_aux=True)
        a_dy, a_diff = jax.tree.map(jnp.negative, vjp(s.a_y))
        it = iter(a_diff)
        return BacksolveState(dy, a_dy, [next(it) if d else None for d in diff], code)

    g_y1 = jax.tree.map(lambda y, g: jnp.zeros_like(y) if g is None else g, y1, grad_out[0])
    # the sentinel starts at zero: only its error estimate is read (its rate's shape: one per row)
    sentinel = jax.tree.map(_zeros_like, jax.eval_shape(lambda: rate(spec.t1, (y1, None), args)[1])) if kinks else None
    if kinks:  # the stages bracket each kink (KinkBracketing)
        solver = bracketing(solver)
    s1 = BacksolveState(y1, g_y1, [jnp.zeros_like(a) if d else None for a, d in zip(args, diff, strict=True)], sentinel)
    back = diffrax.diffeqsolve(
        diffrax.ODETerm(vf),
        solver,
        t0=spec.t1,
        t1=spec.t0,
        dt0=None if spec.dt0 is None else -spec.dt0,
        y0=s1,
        args=args,
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=mode.stepsize_controller,
        max_steps=spec.max_steps,
        throw=spec.throw,
        adjoint=UNDIFFERENTIATED,
    )
    # a backward solve that ran out of max_steps gives NaN, not a partial gradient
    ok = back.result == diffrax.RESULTS.successful
    s0 = jax.tree.map(lambda x: jnp.where(ok, x[-1], jnp.nan), back.ys)
    a_args = [
        (g if d else jnp.zeros_like(a)) if p else None
        for a, g, d, p in zip(args, s0.a_args, diff, perturbed[1], strict=True)
    ]
    a_y0 = jax.tree.map(lambda g, p: g if p else None, s0.a_y, perturbed[0])
    return a_y0, a_args
