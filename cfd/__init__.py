"""Contacts from distance (CFD): informative gradients between bodies that do not touch yet.

The public face of the method, one layer above :mod:`diffmjx` (this package imports ``diffmjx``;
``diffmjx`` never imports it). The method itself lives in one library module,
:mod:`diffmjx.physics.cfd`, which this package re-exports under the same names. Turn CFD on with
``diffmjx.Config`` (``cfd.enabled=true``, the ``cfd`` section's knobs, or one of the ``cfd_*``
presets); the forward's constraint solve is then :func:`diffmjx.physics.cfd.accelerations`, which builds
the rows below and combines them with MJX's by the straight-through trick. The pieces, for
inspection and reuse:

- :func:`cfd_impedance`, :func:`continuation`, :func:`position_term`: the impedance continued to
  positive distance and the softplus reference-acceleration term, built on MuJoCo's own
  :func:`mujoco_impedance` and :func:`spline` (:mod:`diffmjx.physics.impedance`);
- :func:`distance_rows`: contact rows out to ``w_c``;
- :func:`cfd_contacts`: the contacts CFD builds its rows from;
- :func:`straight_through`: one function's values, another's derivatives;
- :func:`derivative_only`: a function's derivatives with a zero value, the function evaluated only
  where something differentiates (how the forward skips CFD's solve when nothing does);
- :func:`accelerations`: the forward's constraint solve under ``cfd.enabled``.
"""

from diffmjx.physics.cfd import (
    accelerations,
    cfd_contacts,
    cfd_impedance,
    continuation,
    derivative_only,
    distance_rows,
    position_term,
    straight_through,
)
from diffmjx.physics.impedance import mujoco_impedance, spline

__all__ = [
    "accelerations",
    "cfd_contacts",
    "cfd_impedance",
    "continuation",
    "derivative_only",
    "distance_rows",
    "mujoco_impedance",
    "position_term",
    "spline",
    "straight_through",
]
