"""DiffMJX's wrappers of a Diffrax Runge–Kutta solver: their shared base (all but the step passed
through) and :class:`KinkBracketing`, whose steps bracket a kink with their stages."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp

from diffmjx.integration.stepsize import BracketedSentinel

__all__ = ["KinkBracketing", "PassThroughSolver", "bracketing", "stage_times"]


class PassThroughSolver(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """A wrapper of ``solver`` (a Runge–Kutta one, or a wrapper of one) that defines only ``step``:
    its terms, interpolation, orders, initial state and vector field are the wrapped solver's.
    Subclasses declare the ``solver`` field and implement ``step``."""

    @property
    def scan_kind(self):
        # Diffrax reads (and, where None, replaces) a Runge-Kutta solver's scan kind by its adjoint:
        # a wrapper passes its solver's, so the replacement lands there
        return getattr(self.solver, "scan_kind", None)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


def stage_times(solver) -> tuple | None:
    """The stage times (fractions of a step) of ``solver``'s Butcher tableau, or of the solver a
    wrapper wraps; None if it has none."""
    while not hasattr(solver, "tableau"):
        solver = getattr(solver, "solver", None)
        if solver is None:
            return None
    tableau = solver.tableau
    return (float(tableau.c1), *(float(c) for c in tableau.c))


def bracketing(solver):
    """``solver`` wrapped in :class:`KinkBracketing` where it has stages to bracket a kink with (a
    Butcher tableau, its own or a wrapped solver's); else ``solver`` unchanged."""
    stages = stage_times(solver)
    return solver if stages is None else KinkBracketing(solver, stages)


def _is_sentinel(x) -> bool:
    return isinstance(x, BracketedSentinel)


class KinkBracketing(PassThroughSolver):
    """A Runge–Kutta solver whose steps also bracket a kink with their stages, for kink control.

    Every stage evaluates the constraint state (the sentinel's rate, in the step's dense output):
    in a step over a kink, the stages before it saw the step start's state and those after it did
    not, so the kink lies between the latest stage time of the first kind and the earliest of the
    second. That bracket, as fractions of the step, goes into the candidate state's
    :class:`diffmjx.integration.stepsize.BracketedSentinel` (wherever the state holds one: the
    forward solve's ``(State, sentinel)``, the backward solve's sentinel slot), where the controller
    reads it: it costs no evaluation. (A stage's state is the tableau's estimate, not the solution,
    so a bracket can miss a kink that lies within rounding of a stage: the controller then finds it
    by bisection.)

    Attributes:
        solver: the solver (a Runge–Kutta one, or a wrapper of one).
        c: the stage times, fractions of the step, in the order of the dense output's stages
            (:func:`stage_times`).
    """

    solver: diffrax.AbstractSolver
    c: tuple

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, err, dense, state, result = self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        (sentinel,) = [x for x in jax.tree.leaves(dense["k"], is_leaf=_is_sentinel) if _is_sentinel(x)]
        k = sentinel.code  # (stages, rows): each stage's constraint state times the step
        c = jnp.asarray(self.c, k.dtype)
        differs = jnp.any(k != k[0], axis=1)
        hi = jnp.min(jnp.where(differs, c, 1.0))
        lo = jnp.max(jnp.where(~differs & (c < hi), c, 0.0)) * jnp.any(differs)  # no kink: the whole step
        bracket = jax.lax.stop_gradient(jnp.stack([lo, hi]))

        def put(x):
            return x._replace(bracket=bracket.astype(x.bracket.dtype)) if _is_sentinel(x) else x

        return jax.tree.map(put, y1, is_leaf=_is_sentinel), err, dense, state, result
