"""Contacts from distance (CFD): informative gradients between bodies that do not touch yet.

Built so far: the extended impedance and softplus reference-acceleration term
(:mod:`cfd.impedance`) and the straight-through combinator (:mod:`cfd.straight_through`).
The constraint rows out to ``w_c`` and their wiring into the integrator are not built yet.
"""

from cfd.impedance import cfd_impedance, mujoco_impedance, position_term, spline
from cfd.straight_through import straight_through

__all__ = ["cfd_impedance", "mujoco_impedance", "position_term", "spline", "straight_through"]
