r"""Constraint impedance: MuJoCo's solimp spline.

MuJoCo's impedance :math:`d(r)` of a constraint violated by :math:`r` rises from ``solimp[0]`` at
:math:`r = 0` to ``solimp[1]`` at :math:`|r| = ` ``solimp[2]`` along a two-piece power spline
(``midpoint``, ``power``), clipped to ``[MINIMP, MAXIMP]``.

Its continuation to positive distance, for contacts from distance, lives with the rest of that
method in :mod:`diffmjx.physics.cfd`.
"""

from __future__ import annotations

import jax.numpy as jnp
import mujoco

__all__ = ["MAXIMP", "MINIMP", "MINVAL", "mujoco_impedance", "spline"]

MINIMP = mujoco.mjMINIMP  # MuJoCo's impedance floor (1e-4) ...
MAXIMP = mujoco.mjMAXIMP  # ... and ceiling (0.9999)
MINVAL = mujoco.mjMINVAL  # MuJoCo's least regulariser R


def spline(x, midpoint, power):
    """MuJoCo's solimp spline on [0, 1]: ``x^p / m^(p-1)`` below the midpoint, mirrored above it.

    Arguments:
        x: position along the spline; clipped to [0, 1].
        midpoint: where the two power pieces meet, in (0, 1].
        power: exponent p >= 1.

    Returns:
        The spline value in [0, 1].
    """
    x = jnp.clip(x, 0.0, 1.0)
    lo = x**power / midpoint ** (power - 1)
    # above the midpoint; guarded so midpoint = 1 (no upper piece) stays finite
    upper = jnp.maximum(1.0 - midpoint, 1e-12)
    hi = 1.0 - (1.0 - x) ** power / upper ** (power - 1)
    return jnp.where(x < midpoint, lo, hi)


def mujoco_impedance(r, solimp, floor=MINIMP):
    """MuJoCo's impedance of a constraint violated by ``r``.

    Arguments:
        r: signed distance in m (negative in penetration); only ``|r|`` matters.
        solimp: (5,) MuJoCo's ``(d0, dwidth, width, midpoint, power)``.
        floor: the least value ``d0`` and ``dwidth`` are clipped to: MuJoCo's ``MINIMP`` by
            default; 0 lets ``solimp[0] = 0`` mean zero impedance at ``r = 0``.

    Returns:
        The impedance ``d(r)`` (dimensionless).
    """
    d0, dwidth, width, mid, power = solimp
    d0, dwidth = jnp.clip(d0, floor, MAXIMP), jnp.clip(dwidth, floor, MAXIMP)
    x = jnp.abs(r) / jnp.maximum(width, 1e-15)
    d = d0 + spline(x, jnp.clip(mid, MINIMP, MAXIMP), jnp.maximum(power, 1.0)) * (dwidth - d0)
    return jnp.where(x > 1.0, dwidth, d)
