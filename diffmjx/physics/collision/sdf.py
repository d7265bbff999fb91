"""MJX's signed-distance pairs with a cylinder, with a gradient that holds the contact point.

MJX collides a cylinder with a capsule, an ellipsoid or a cylinder by searching for the contact
point: ten steps of gradient descent with a line search on the two geoms' signed distance
functions (SDFs). The contact's distance is the sum of the two SDFs at the point found, its
normal their gradients' difference. The derivative of that search is NaN at most poses (every
capsule-cylinder and cylinder-cylinder pose we tried; on the MyoHand a fingernail ellipsoid
against the table cylinder 0.6 m below it), and a NaN in one pair's backward pass reaches every
other gradient through the zero cotangents.

:func:`held_point` keeps MJX's forward values to the bit and differentiates the contact at the
point found, held fixed in the second geom's frame: the distance's derivative is the SDFs' at
that point as the geoms move, the normal's the SDFs' gradients' there. The search's point moves
with the geoms too, and that term is dropped, so the derivative is an approximation: exact
where the pair makes no constraint row (its cotangent is zero, so it contributes nothing, where
MJX's gave NaN), and mostly of the right direction where it does (tests/test_collision_sdf.py).
The ellipsoid pairs without a cylinder keep MJX's search and its derivative.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from diffmjx import _mjx

PAIRS = tuple(_mjx.SDF_PAIRS)
"""Geom-type pairs given a held-point gradient here (sphere-cylinder has its own closed form,
:func:`diffmjx.physics.collision.pairs.sphere_cylinder`)."""


def _at_point(sdf1, sdf2, p, x1, r1, s1, x2, r2, s2):
    """Distance, position and normal of the contact at ``p`` (in geom 2's frame) as MJX computes them."""

    def d1(q):  # geom 1's SDF at a point of geom 2's frame
        return sdf1(r1.T @ (r2 @ q + x2 - x1), s1)

    def d2(q):
        return sdf2(q, s2)

    dist = d1(p) + d2(p)
    n = r2 @ (jax.grad(d1)(p) - jax.grad(d2)(p))
    return dist, r2 @ p + x2, _mjx.make_frame(n)


def held_point(types):
    """MJX's collider for the geom-type pair ``types`` (a key of :data:`PAIRS`) with the held-point
    gradient: forward values are MJX's to the bit; the backward pass never enters the search."""
    mjx_fn = _mjx.MJX_COLLISION_TABLE[types]
    sdf1, sdf2 = _mjx.SDF_PAIRS[types]
    ncon = mjx_fn.ncon
    sg = jax.lax.stop_gradient

    def collide(m, d, key, geom):
        held = d.replace(geom_xpos=sg(d.geom_xpos), geom_xmat=sg(d.geom_xmat))
        dist0, pos0, frame0 = mjx_fn(m.replace(geom_size=sg(m.geom_size)), held, key, geom)
        g1, g2 = jnp.repeat(jnp.asarray(geom), ncon, axis=0).T  # contacts are pair-major
        x2, r2 = held.geom_xpos[g2], held.geom_xmat[g2]
        p = jnp.einsum("kji,kj->ki", r2, pos0 - x2)  # the point found, in geom 2's frame (held)

        def at(p, a, b):
            return _at_point(
                sdf1,
                sdf2,
                p,
                d.geom_xpos[a],
                d.geom_xmat[a],
                m.geom_size[a],
                d.geom_xpos[b],
                d.geom_xmat[b],
                m.geom_size[b],
            )

        dist, pos, frame = jax.vmap(at)(p, g1, g2)
        # MJX's values forward, the held point's derivative backward
        return (dist0 + (dist - sg(dist)), pos0 + (pos - sg(pos)), frame0 + (frame - sg(frame)))  # x - x is 0

    collide.ncon = ncon
    return collide
