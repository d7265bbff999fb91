"""What DiffMJX's wrappers of a Diffrax Runge–Kutta solver share: all but the step passed through."""

from __future__ import annotations

import diffrax

__all__ = ["PassThroughSolver"]


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
