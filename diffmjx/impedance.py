r"""Constraint impedance: MuJoCo's solimp spline, and its continuation to positive distance (CFD).

MuJoCo's impedance :math:`d(r)` of a constraint violated by :math:`r` rises from ``solimp[0]`` at
:math:`r = 0` to ``solimp[1]`` at :math:`|r| = ` ``solimp[2]`` along a two-piece power spline
(``midpoint``, ``power``), clipped to ``[MINIMP, MAXIMP]``.

Contacts from distance keep it for :math:`r \le 0` and continue it for :math:`0 < r < w_c` with a
second spline of the same family, parametrised by ``cfd.solimp = (d_c, d_0, w_c, m_c, p_c)``:

.. math:: d(r) = d_c + y\!\left(\tfrac{w_c - r}{w_c};\, m_c, p_c\right)(d_0 - d_c), \qquad
          d(r) = d_c \text{ for } r \ge w_c,

so the continuation leaves :math:`r = 0` at :math:`d_0` and lands flat on :math:`d_c` at
:math:`r = w_c`. With ``d_0 = solimp[0]``, ``power, p_c > 1`` and ``m_c < 1`` it is C1 at both joins.
The position term of the reference acceleration, :math:`k\,d(r)\,\max(0, -r)` in MuJoCo, becomes
:math:`k\,d(r)\,\operatorname{softplus}(-s r)/s`.

The public face of the continuation is the :mod:`cfd` package, which sits above this one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco

__all__ = ["MAXIMP", "MINIMP", "MINVAL", "cfd_impedance", "continuation", "mujoco_impedance", "position_term", "spline"]

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


def continuation(r, cfd_solimp):
    """The CFD spline alone, for 0 <= r <= w_c: from ``d_0`` at r = 0, flat onto ``d_c`` at ``w_c``.

    Arguments:
        r: signed distance in m.
        cfd_solimp: (5,) ``(d_c, d_0, w_c, m_c, p_c)``.

    Returns:
        The continued impedance.
    """
    d_c, d_0, w_c, m_c, p_c = cfd_solimp
    return d_c + spline((w_c - r) / w_c, m_c, p_c) * (d_0 - d_c)


def cfd_impedance(r, solimp, cfd_solimp, floor=MINIMP):
    """Impedance for signed distance ``r``: MuJoCo's for r <= 0, the CFD continuation above.

    Arguments:
        r: signed distance in m.
        solimp: (5,) MuJoCo's solimp of the contact.
        cfd_solimp: (5,) ``(d_c, d_0, w_c, m_c, p_c)``.
        floor: least impedance inside contact, as in :func:`mujoco_impedance`.

    Returns:
        The impedance ``d(r)``; ``d_c`` for ``r >= w_c``.
    """
    d_c, w_c = cfd_solimp[0], cfd_solimp[2]
    inside = mujoco_impedance(r, solimp, floor)
    return jnp.where(r <= 0, inside, jnp.where(r < w_c, continuation(r, cfd_solimp), d_c))


def position_term(r, sharpness):
    """``softplus(-s r) / s``: the reference acceleration's ``max(0, -r)``, smoothed.

    Arguments:
        r: signed distance in m.
        sharpness: s in 1/m.

    Returns:
        The smoothed penetration depth in m.
    """
    return jax.nn.softplus(-sharpness * r) / sharpness
