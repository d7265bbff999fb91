r"""Step-size control of one control period: Diffrax's PID controller with a warm start and kink control.

:func:`pid_controller` builds the controller a :class:`diffmjx.Config` names; :class:`PeriodPID`
is what each period's solve runs, holding the warm-start step (:func:`with_first_step`) and, for
the discretise-then-optimise gradient modes, kink control.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import optimistix as optx

from diffmjx.config import Config

__all__ = ["SENTINEL_THRESHOLD", "BracketedSentinel", "PeriodPID", "first_step", "pid_controller", "with_first_step"]

# |sentinel error| / step above which the constraint state changed within the step: the rate takes
# values in {-2, -1, 0, 1}, a change moves the estimate by at least min |sum of b - b_hat over a
# subset of stages| (8e-4 for Tsit5) times the step, and no change leaves only rounding (1e-16).
SENTINEL_THRESHOLD = 1e-9


class BracketedSentinel(NamedTuple):
    """A kink sentinel with the bracket its step's stages put around a kink.

    ``bracket`` is ``(lo, hi)`` as fractions of the step: the kink lies after the latest stage time
    whose constraint state was the step start's and before the earliest whose was not. The solver
    writes it into the step's candidate state (:class:`diffmjx.integration.wrapped.KinkBracketing`;
    ``(0, 0)``, none, where the solver has no stages to bracket with); its value in an accepted state
    is not read."""

    code: object  # kink control's sentinel (its rate the constraint state)
    bracket: object  # (2,) (lo, hi), fractions of the step


class PeriodPID(diffrax.PIDController):
    """Diffrax's PID controller with DiffMJX's warm start and, optionally, kink control.

    Warm start: the first step is ``first_step`` (an array) instead of ``dt0``. Passing a traced
    ``dt0`` to ``diffeqsolve`` makes Diffrax check its sign at run time with an Equinox error,
    which compiles to a host callback, and JAX never writes programs with host callbacks to the
    persistent compilation cache. With ``dt0=None`` and the warm-start step held here there is no
    such check, so every DiffMJX gradient can be cached across processes.

    Kink control (``kink_step``): the ODE state is ``(State, sentinel)``, where the sentinel is a
    :class:`BracketedSentinel` whose code has as its rate the constraint state
    (:func:`diffmjx.physics.solver.constraint_state`) at each stage. The code's
    embedded error estimate is zero to rounding when every stage of a step saw the same constraint
    state (``b - b_hat`` sums to zero over all stages) and not otherwise (for Tsit5 no subset of
    stages sums to zero; Dopri5 and Dopri8 have stages of zero error weight, where a change seen
    by those stages alone goes unnoticed), so a step over which the constraint state changes is
    rejected and shrunk, down to ``kink_step``. The sentinel takes no part in the error norm.

    A rejected straddle also brackets the kink: it lies before the rejected step's end, and the
    controller state keeps that time until a step holds the kink (or reaches the bracket's end:
    the straddle was the trial step's own). Inside the bracket no step longer than half of what is
    left of it is tried, so the controller does not grow back across a kink it already found and
    pay another rejection for it; each trial halves the bracket or shrinks the step at least as
    Diffrax's least factor does: locating a kink takes about ``log2(step / kink_step)`` trials
    (docs/speed.md, "Kink control's bracket"). Where the solver's stages bracket the kink
    (:class:`diffmjx.integration.wrapped.KinkBracketing`: the stages before it saw the step start's
    constraint state, those after it did not), the bracket ends at the first stage that saw the
    change and the next trial steps to the middle of the stages' bracket.

    The backward solve of the ``backsolve`` adjoint (``adjoint_solve``; its state a
    :class:`diffmjx.integration.adjoints.BacksolveState`, the sentinel in its own slot) runs kink
    control too, for the adjoint's rate, which jumps at every kink (the state's only bends). Three
    rules differ there: a step of ``kink_step`` that holds a kink is taken whatever its error
    estimate (a step over a jump of the rate errs by its length times the jump, whatever the
    tableau: ``kink_step`` bounds that, where the error control alone shrank such steps to 1e-8 s
    and below); a straddle halves the step (bisection) instead of cutting it by the least factor,
    or, where the stages bracket the kink, steps to that bracket's middle (as above); and once the
    kink is held the next step is the one the controller had tried before it found the kink,
    instead of growing back from ``kink_step`` (docs/integration.md, "Kink control of the adjoint").
    """

    first_step: jax.Array | None = None
    kink_step: float | None = None
    adjoint_solve: bool = False  # the backsolve adjoint's backward solve (state: a BacksolveState)

    def _split(self, tree):
        """``(tree for the error control, the kink sentinel)`` of a state-shaped tree."""
        if self.adjoint_solve:
            return tree._replace(sentinel=None), tree.sentinel
        if self.kink_step is not None:
            return tree
        return tree, None

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        dt0 = dt0 if self.first_step is None else self.first_step
        t_next, state = super().init(terms, t0, t1, y0, dt0, args, func, error_order)
        if self.kink_step is None:
            return t_next, state
        # kink control's state: the end of the bracket around the next kink (inf: none known) and,
        # in an adjoint solve, the step to resume with once the kink is held (0: none)
        dtype = jnp.result_type(t_next)
        return t_next, (state, jnp.full((), jnp.inf, dtype), jnp.zeros((), dtype))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        (y0, _), (y1, sentinel1), (error, sentinel_error) = (
            self._split(y0),
            self._split(y1_candidate),
            self._split(y_error),
        )
        if self.kink_step is None:
            return super().adapt_step_size(t0, t1, y0, y1, args, error, error_order, controller_state)
        pid_state, bracket_end, resume = controller_state
        h = t1 - t0
        stages = None  # the stages' bracket around a kink in the step, where the solver gives one
        if isinstance(sentinel_error, BracketedSentinel):
            sentinel_error, stages = sentinel_error.code, jax.lax.stop_gradient(sentinel1.bracket)
        changed = jnp.any(jnp.abs(sentinel_error) > SENTINEL_THRESHOLD * h)
        straddles = changed & (h > 1.5 * self.kink_step)  # a step of kink_step is t1 - t0 up to rounding
        # an infinite error rejects the step at the controller's least factor, without spoiling
        # the PID history (Diffrax treats it like a failed implicit step)
        error = jax.tree.map(lambda e: jnp.where(straddles, jnp.inf, e), error)
        if self.adjoint_solve:  # a step of kink_step over the kink is taken (class docstring)
            error = jax.tree.map(lambda e: jnp.where(changed & ~straddles, 0.0, e), error)
        keep, next_t0, next_t1, jump, pid_state, result = super().adapt_step_size(
            t0, t1, y0, y1, args, error, error_order, pid_state
        )
        t1_, h_ = jax.lax.stop_gradient(t1), jax.lax.stop_gradient(h)
        new_bracket = straddles & jnp.isinf(bracket_end)
        bracket_end = jnp.where(straddles, t1_, bracket_end)  # the kink lies before the straddling step's end
        # a kept step that held the kink, or reached the bracket's end (the straddle was the trial
        # step's own, not the trajectory's), leaves no kink known ahead
        bracket_end = jnp.where(keep & (changed | (t1_ >= bracket_end)), jnp.inf, bracket_end)
        h_next = next_t1 - next_t0
        bisect = None
        if self.adjoint_solve:
            h_next = jnp.where(straddles, 0.5 * h_, h_next)  # bisection
            resume = jnp.where(new_bracket, h_, resume)  # the step tried before the kink was found
            h_next = jnp.where(keep & changed, jnp.maximum(h_next, resume), h_next)
            resume = jnp.where(keep & jnp.isinf(bracket_end), 0.0, resume)
        if stages is not None:  # bisect the stages' bracket instead of the whole step (none: lo = hi)
            lo, hi = stages[0] * h_, stages[1] * h_
            bisect = straddles & (hi > lo)
            bracket_end = jnp.where(bisect, jax.lax.stop_gradient(t0) + hi, bracket_end)
            h_bisect = jnp.maximum(0.5 * (lo + hi), self.kink_step)
        h_next = jnp.where(straddles, jnp.maximum(h_next, self.kink_step), h_next)
        # never a step known to straddle: at most half of what is left of the bracket (inf: none
        # known), but no cap below kink_step; the error control's own shrinking is not floored
        h_next = jnp.minimum(h_next, jnp.maximum(0.5 * (bracket_end - next_t0), self.kink_step))
        if bisect is not None:  # (its lower end lies beyond the step start: not capped by the bracket's half)
            h_next = jnp.where(bisect, h_bisect, h_next)
        return keep, next_t0, next_t0 + h_next, jump, (pid_state, bracket_end, resume), result


def pid_controller(cfg: Config, *, backsolve: bool, adjoint_solve: bool = False, norm=None):
    """The step-size controller ``cfg`` names.

    Arguments:
        cfg: :class:`diffmjx.Config`.
        backsolve: whether the forward solve is differentiated by an optimise-then-discretise
            adjoint (its tolerances: :meth:`~diffmjx.config.IntegratorConfig.tolerances`).
        adjoint_solve: the controller of such an adjoint's own backward solve
            (``integrator.backsolve_rtol`` / ``backsolve_atol`` where set).
        norm: the error norm; None: RMS (the forward solve's), or for an adjoint solve Diffrax's
            seminorm, which skips the parameter adjoints (they only accumulate and would otherwise
            force tiny steps).

    Returns:
        ``diffrax.ConstantStepSize`` for ``step_control=constant``, else a ``diffrax.PIDController``.
    """
    ic = cfg.integrator
    if ic.step_control == "constant":
        return diffrax.ConstantStepSize()
    rtol, atol = ic.tolerances(backsolve=backsolve)
    if adjoint_solve:
        rtol = ic.backsolve_rtol if ic.backsolve_rtol is not None else rtol
        atol = ic.backsolve_atol if ic.backsolve_atol is not None else atol
    if norm is None:
        norm = diffrax.adjoint_rms_seminorm if adjoint_solve else optx.rms_norm
    return diffrax.PIDController(
        rtol=rtol,
        atol=atol,
        pcoeff=ic.pcoeff,
        icoeff=ic.icoeff,
        dcoeff=ic.dcoeff,
        dtmin=ic.dtmin,
        dtmax=ic.dtmax,
        norm=norm,
    )


def with_first_step(controller: diffrax.PIDController, first_step, kink_step=None, *, adjoint_solve=False) -> PeriodPID:
    """``controller`` as a :class:`PeriodPID` starting from ``first_step``, with kink control down to
    ``kink_step`` (None: off); ``adjoint_solve``: the controller of the ``backsolve`` adjoint's
    backward solve (its state a :class:`diffmjx.integration.adjoints.BacksolveState`)."""
    fields = {f.name: getattr(controller, f.name) for f in dataclasses.fields(controller) if f.init}
    fields.update(first_step=first_step, kink_step=kink_step, adjoint_solve=adjoint_solve)
    return PeriodPID(**fields)


def first_step(controller, period, dt_hint, substeps: int):
    """A period's first step: ``period / substeps`` for a constant step size, else the warm-start
    hint capped at the period and at the controller's ``dtmax``."""
    if isinstance(controller, diffrax.ConstantStepSize):
        return period / substeps
    dt0 = jnp.minimum(jax.lax.stop_gradient(dt_hint), period)
    dtmax = getattr(controller, "dtmax", None)
    return dt0 if dtmax is None else jnp.minimum(dt0, dtmax)
