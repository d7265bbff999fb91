"""Contact-frame helpers shared by the smoothed collision functions: unit vectors and tangent blends."""

from __future__ import annotations

import jax.numpy as jnp

from diffmjx.physics.collision.soft import soft_step

__all__ = ["blend_tangent", "smooth_frame", "unit"]


def unit(v, eps=1e-12):
    """Normalise ``v``; finite value and derivative at zero (double-where)."""
    sq = jnp.dot(v, v)
    ok = sq > eps * eps
    return jnp.where(ok, v / jnp.sqrt(jnp.where(ok, sq, 1.0)), v)


def blend_tangent(n, u, v, w):
    """Friction-frame tangent between unit tangents ``u`` (w = 0) and ``v`` (w = 1), both normal to n.

    A friction pyramid with isotropic friction is unchanged by turning its tangents by 90 degrees,
    so tangents are blended as 4*angle on the circle: no cancellation of opposite or
    perpendicular choices (only of choices 45 degrees apart, at w = 1/2 exactly). The angle is
    measured from the choice with the larger weight; at w = 0 or 1 the result is u or v exactly.
    """
    take_v = w > 0.5
    e1 = jnp.where(take_v, v, u)
    other, wo = jnp.where(take_v, u, v), jnp.where(take_v, 1.0 - w, w)
    e2 = jnp.cross(n, e1)
    c, s = jnp.dot(other, e1), jnp.dot(other, e2)
    r2 = c * c + s * s + 1e-30
    c2, s2 = (c * c - s * s) / r2, 2.0 * c * s / r2
    c4, s4 = c2 * c2 - s2 * s2, 2.0 * c2 * s2
    theta = 0.25 * jnp.arctan2(wo * s4, (1.0 - wo) + wo * c4)
    return jnp.cos(theta) * e1 + jnp.sin(theta) * e2


def smooth_frame(a, width):
    """Contact frame ``[a, b, a x b]`` like MJX's ``make_frame``, with its axis choice blended.

    MJX takes ``b`` from the world y axis unless ``|a_y| >= 0.5``, then from z: a jump of the
    friction pyramid. Here the two are blended over ``|a_y|`` in a band of ``width``;
    see :func:`blend_tangent`.
    """
    a = unit(a)
    yp = unit(jnp.array([0.0, 1.0, 0.0]) - a * a[1])
    zp = unit(jnp.array([0.0, 0.0, 1.0]) - a * a[2])
    b = blend_tangent(a, yp, zp, soft_step(jnp.abs(a[1]), 0.5, width))
    return jnp.stack([a, b, jnp.cross(a, b)])
