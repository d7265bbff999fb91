"""Contacts from distance (CFD): informative gradients between bodies that do not touch yet.

The public face of the method, one layer above :mod:`diffmjx` (this package imports ``diffmjx``;
``diffmjx`` never imports it). Turn CFD on with ``diffmjx.Config`` (``cfd.enabled=true``, the
``cfd`` section's knobs, or one of the ``cfd_*`` presets); the pipeline then builds the rows below
and combines them with MJX's by the straight-through trick. The pieces, for inspection and reuse:

- :func:`cfd_impedance`, :func:`continuation`, :func:`position_term`: the impedance continued to
  positive distance and the softplus reference-acceleration term (:mod:`diffmjx.impedance`), built
  on MuJoCo's own :func:`mujoco_impedance` and :func:`spline`;
- :func:`make_constraint`: contact rows out to ``w_c`` (:func:`diffmjx.constraint.from_distance`);
- :func:`cfd_contacts`: the contacts CFD builds its rows from;
- :func:`straight_through`: one function's values, another's derivatives.
"""

from diffmjx.constraint import from_distance as make_constraint
from diffmjx.dynamics import cfd_contacts, straight_through
from diffmjx.impedance import cfd_impedance, continuation, mujoco_impedance, position_term, spline

__all__ = [
    "cfd_contacts",
    "cfd_impedance",
    "continuation",
    "make_constraint",
    "mujoco_impedance",
    "position_term",
    "spline",
    "straight_through",
]
