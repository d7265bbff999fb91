"""Gradient modes: how one control period's solve is differentiated (see :mod:`diffmjx.integration.adjoints.base`).

``checkpoint`` and ``forward`` are Diffrax's own adjoints (:class:`Discretised`), ``backsolve``
Diffrax's ``BacksolveAdjoint`` (:class:`Backsolve`); ``interpolated`` and ``sensitivity`` are
DiffMJX's (:class:`InterpolatedAdjoint`, :class:`SensitivityAdjoint`).
"""

from diffmjx.integration.adjoints.base import Backsolve, Discretised, GradientMode, PeriodSolve, mode_of
from diffmjx.integration.adjoints.interpolated import AdjointState, InterpolatedAdjoint, state_adjoint_norm
from diffmjx.integration.adjoints.sensitivity import SensitivityAdjoint

__all__ = [
    "AdjointState",
    "Backsolve",
    "Discretised",
    "GradientMode",
    "InterpolatedAdjoint",
    "PeriodSolve",
    "SensitivityAdjoint",
    "mode_of",
    "state_adjoint_norm",
]
