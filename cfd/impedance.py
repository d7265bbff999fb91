r"""Impedance and reference acceleration extended to positive signed distance (contacts from distance).

MuJoCo's impedance :math:`d(r)` rises from ``solimp[0]`` at :math:`r = 0` to ``solimp[1]`` at
:math:`|r| = ` ``solimp[2]`` along a two-piece power spline (``midpoint``, ``power``). CFD keeps it
for :math:`r \le 0` and continues it for :math:`0 < r < w_c` with a second spline of the same
family, parametrised by ``cfd.solimp = (d_c, d_0, w_c, m_c, p_c)``:

.. math:: d(r) = d_c + y\!\left(\tfrac{w_c - r}{w_c};\, m_c, p_c\right)(d_0 - d_c), \qquad
          d(r) = d_c \text{ for } r \ge w_c,

so the continuation leaves :math:`r = 0` at :math:`d_0` and lands flat on :math:`d_c` at
:math:`r = w_c`. With ``d_0 = solimp[0]``, ``power, p_c > 1`` and ``m_c < 1`` it is C1 at both joins.
The position term of the reference acceleration, :math:`k\,d(r)\,\max(0, -r)` in MuJoCo, becomes
:math:`k\,d(r)\,\operatorname{softplus}(-s r)/s`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from diffmjx._mjx import MAXIMP, MINIMP  # MuJoCo's 1e-4 and 0.9999


def spline(x, midpoint, power):
    """MuJoCo's solimp spline on [0, 1]: ``x^p / m^(p-1)`` below the midpoint, mirrored above it."""
    x = jnp.clip(x, 0.0, 1.0)
    lo = x**power / midpoint ** (power - 1)
    # above the midpoint; guarded so midpoint = 1 (no upper piece) stays finite
    upper = jnp.maximum(1.0 - midpoint, 1e-12)
    hi = 1.0 - (1.0 - x) ** power / upper ** (power - 1)
    return jnp.where(x < midpoint, lo, hi)


def mujoco_impedance(r, solimp, floor=MINIMP):
    """MuJoCo's impedance of a constraint violated by ``r`` (``solimp`` = d0, dwidth, width, mid, power).

    ``floor`` is the least value ``d0`` and ``dwidth`` are clipped to: MuJoCo's ``mjMINIMP`` by
    default; 0 lets ``solimp[0] = 0`` mean zero impedance at ``r = 0``.
    """
    d0, dwidth, width, mid, power = solimp
    d0, dwidth = jnp.clip(d0, floor, MAXIMP), jnp.clip(dwidth, floor, MAXIMP)
    x = jnp.abs(r) / jnp.maximum(width, 1e-15)
    d = d0 + spline(x, jnp.clip(mid, MINIMP, MAXIMP), jnp.maximum(power, 1.0)) * (dwidth - d0)
    return jnp.where(x > 1.0, dwidth, d)


def continuation(r, cfd_solimp):
    """The CFD spline alone, for 0 <= r <= w_c: from ``d_0`` at r = 0, flat onto ``d_c`` at ``w_c``."""
    d_c, d_0, w_c, m_c, p_c = cfd_solimp
    return d_c + spline((w_c - r) / w_c, m_c, p_c) * (d_0 - d_c)


def cfd_impedance(r, solimp, cfd_solimp, floor=MINIMP):
    """Impedance for signed distance ``r``: MuJoCo's for r <= 0 (``floor`` as in
    :func:`mujoco_impedance`), the CFD continuation above."""
    d_c, w_c = cfd_solimp[0], cfd_solimp[2]
    inside = mujoco_impedance(r, solimp, floor)
    return jnp.where(r <= 0, inside, jnp.where(r < w_c, continuation(r, cfd_solimp), d_c))


def position_term(r, sharpness):
    """``softplus(-s r) / s``: the reference acceleration's ``max(0, -r)``, smoothed (units of r)."""
    return jax.nn.softplus(-sharpness * r) / sharpness
