r"""What every gradient mode shares: the period's solve description and the mode interface.

A *gradient mode* is how one control period's ``diffeqsolve`` is differentiated. The period solve
(:func:`diffmjx.integration.period.diffrax_period`) knows none by name: it turns the Diffrax adjoint of the
:class:`~diffmjx.integration.method.Method` into a mode with :func:`mode_of` and calls two methods,
:meth:`GradientMode.warm_start` and :meth:`GradientMode.solve`. Adding a mode is one class.

- :class:`Discretised`: any Diffrax adjoint whose derivative is that of the discrete solve
  (``RecursiveCheckpointAdjoint`` for ``checkpoint``, ``ForwardMode`` for ``forward``, or a
  user's own): Diffrax's ``diffeqsolve`` carries it out.
- :class:`Backsolve`: ``diffrax.BacksolveAdjoint`` (``backsolve``), with its warm start held in its
  own controller.
- :class:`diffmjx.integration.adjoints.InterpolatedAdjoint` and :class:`diffmjx.integration.adjoints.SensitivityAdjoint`
  are modes themselves, carried out by DiffMJX's own custom derivatives.
"""

from typing import Any, ClassVar, NamedTuple

import diffrax
import equinox as eqx
import jax

from diffmjx.integration.stepsize import with_first_step

__all__ = [
    "UNDIFFERENTIATED",
    "Backsolve",
    "Discretised",
    "GradientMode",
    "PeriodSolve",
    "mode_of",
    "period_end_state",
    "solve_forward",
]

# Diffrax's loop for a solve that autodiff never enters: a plain while loop (its default adjoint's
# checkpointed loop ran the cube toss's forward pass 1.5-1.9x slower)
UNDIFFERENTIATED = diffrax.ForwardMode()


class PeriodSolve(NamedTuple):
    """One period's solve, as the period hands it to a gradient mode."""

    solver: diffrax.AbstractSolver
    t0: Any
    t1: Any
    dt0: Any  # None when the controller holds the first step
    controller: diffrax.AbstractStepSizeController
    max_steps: int
    throw: bool
    code: Any = None  # code(t, y, args) -> the constraint state, where its changes are located (else None)
    coded: Any = None  # the term whose state is (y, kink sentinel), its rate (dy, constraint state) (else None)
    ignored: tuple = ()  # per traced arg: True where the vector field replaces it (no sensitivity to it)


def solve_forward(y0_args, term, spec: PeriodSolve, saveat, adjoint=UNDIFFERENTIATED):
    """One period's ``diffeqsolve`` as ``spec`` describes it, differentiated by the Diffrax
    ``adjoint`` (default: none, a solve autodiff never enters)."""
    y0, args = y0_args
    return diffrax.diffeqsolve(
        term,
        spec.solver,
        t0=spec.t0,
        t1=spec.t1,
        dt0=spec.dt0,
        y0=y0,
        args=args,
        saveat=saveat,
        stepsize_controller=spec.controller,
        max_steps=spec.max_steps,
        throw=spec.throw,
        adjoint=adjoint,
    )


def period_end_state(y0_args, term, spec: PeriodSolve):
    """``(y1, (stats, result))`` of one period's forward solve: the primal of the custom-derivative modes."""
    sol = solve_forward(y0_args, term, spec, diffrax.SaveAt(t1=True))
    return jax.tree.map(lambda x: x[-1], sol.ys), (sol.stats, sol.result)


class GradientMode(eqx.Module):
    """How one period's solve is differentiated.

    Attributes:
        continuous: optimise-then-discretise (the continuous derivative equations): the forward
            solve runs at ``rtol`` itself, without kink control.
    """

    continuous: ClassVar[bool] = False

    def warm_start(self, forward, first_step, kink_step=None):
        """``(mode, dt0)``: this mode with the period's first step held wherever its own solves need it,
        and the ``dt0`` to hand ``diffeqsolve`` (None if every controller holds it).

        Arguments:
            forward: the forward solve's ``diffrax.PIDController`` (before the warm start).
            first_step: the period's first step.
            kink_step: kink control's step in the mode's own backward solve, where it has one
                (:meth:`backward_kink_control`); None: off.
        """
        del forward, first_step, kink_step
        return self, None

    def backward_kink_control(self) -> bool:
        """Whether this mode's backward solve runs kink control (given a kink step by :meth:`warm_start`)."""
        return False

    def solve(self, term, y0, args, spec: PeriodSolve):
        """``(y1, stats, result)`` of the period's solve, differentiable as this mode differentiates it."""
        raise NotImplementedError


class Discretised(GradientMode):
    """A Diffrax adjoint differentiating the discrete solve, carried out by ``diffeqsolve``."""

    adjoint: diffrax.AbstractAdjoint

    def solve(self, term, y0, args, spec: PeriodSolve):
        sol = solve_forward((y0, args), term, spec, diffrax.SaveAt(t1=True), self.adjoint)
        return jax.tree.map(lambda x: x[-1], sol.ys), sol.stats, sol.result


class Backsolve(Discretised):
    """``diffrax.BacksolveAdjoint``: the continuous adjoint equations integrated backwards by Diffrax."""

    continuous: ClassVar[bool] = True

    def warm_start(self, forward, first_step, kink_step=None):
        # the adjoint solve starts from -dt0 when given one: hold its first step in its own
        # controller too, or keep dt0 if that controller cannot hold it
        del kink_step  # Diffrax's backward solve has no kink sentinel
        back = self.adjoint.kwargs.get("stepsize_controller")
        if not isinstance(back, diffrax.PIDController):
            return self, first_step
        kwargs = {**self.adjoint.kwargs, "stepsize_controller": with_first_step(back, first_step)}
        return Backsolve(diffrax.BacksolveAdjoint(**kwargs)), None


def mode_of(adjoint: diffrax.AbstractAdjoint) -> GradientMode:
    """The gradient mode carrying out a Diffrax adjoint (a :class:`GradientMode` is its own)."""
    if isinstance(adjoint, GradientMode):
        return adjoint
    if isinstance(adjoint, diffrax.BacksolveAdjoint):
        return Backsolve(adjoint)
    return Discretised(adjoint)
