r"""Smoothed collision functions, drop-in for MJX's (same signature, same contact count).

Each function returns ``(dist, pos, frame)`` per contact like MJX. Contacts MJX drops are returned
with a distance blended towards 0 rather than set to MJX's sentinel: a contact row is active only
for ``dist < 0`` (``mjx`` constraint rows use ``pos < 0``), so a contact fades in continuously from
zero penetration instead of switching on at depth.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from diffmjx import _mjx
from diffmjx.collision.soft import soft_max_mask

SKIN = 1e-3  # MJX's manifold skin depth for plane-convex contacts (m)


def _plane_box(plane, box, sharpness):
    """Plane-box: the four deepest vertices, those outside MJX's 1 mm skin faded to zero depth.

    MJX keeps vertices with ``support > max(0, support.max() - 1e-3)`` and gives the rest distance
    1 (no contact). Here the skin test is a sigmoid relative to the deepest vertex, which keeps
    full weight; the ``> 0`` part needs no smoothing because ``dist = -support`` crosses the
    activation boundary continuously.
    """
    vert = box.vert
    plane_pos = box.mat.T @ (plane.pos - box.pos)
    n_local = box.mat.T @ plane.mat[:, 2]
    support = (plane_pos - vert) @ n_local
    weight = soft_max_mask(support, SKIN, sharpness)
    depth, idx = jax.lax.top_k(weight * support, 4)
    dist = -depth
    n = plane.mat[:, 2]
    pos = box.pos + vert[idx] @ box.mat.T - 0.5 * dist[:, None] * n
    frame = jnp.stack([_mjx.make_frame(n)] * 4, axis=0)
    return dist, pos, frame


def table(sharpness: float) -> dict:
    """Smoothed functions keyed by MJX geom-type pairs."""
    g = _mjx.GeomType
    return {
        (g.PLANE, g.BOX): _mjx.convex_collider(ncon=4)(
            functools.partial(_plane_box, sharpness=sharpness)
        ),
    }


SMOOTHED_PAIRS = tuple(table(1.0))
