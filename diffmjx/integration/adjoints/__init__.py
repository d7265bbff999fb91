"""Gradient modes: how one control period's solve is differentiated (see :mod:`diffmjx.integration.adjoints.base`).

``checkpoint`` and ``forward`` are Diffrax's own adjoints (:class:`Discretised`); ``backsolve``,
``interpolated`` and ``sensitivity`` are DiffMJX's (:class:`KinkAwareBacksolve`,
:class:`InterpolatedAdjoint`, :class:`SensitivityAdjoint`). A ``diffrax.BacksolveAdjoint`` passed
in place of the config's runs as :class:`Backsolve`.
"""

from diffmjx.integration.adjoints.backsolve import BacksolveState, KinkAwareBacksolve
from diffmjx.integration.adjoints.base import Backsolve, Discretised, GradientMode, PeriodSolve, mode_of
from diffmjx.integration.adjoints.interpolated import AdjointState, InterpolatedAdjoint, state_adjoint_norm
from diffmjx.integration.adjoints.sensitivity import SensitivityAdjoint

__all__ = [
    "AdjointState",
    "Backsolve",
    "BacksolveState",
    "Discretised",
    "GradientMode",
    "InterpolatedAdjoint",
    "KinkAwareBacksolve",
    "PeriodSolve",
    "SensitivityAdjoint",
    "mode_of",
    "state_adjoint_norm",
]
