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
from diffmjx.collision.soft import soft_max_mask, soft_step

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


def _unit(v, eps=1e-12):
    """Normalise ``v``; finite value and derivative at zero (double-where)."""
    sq = jnp.dot(v, v)
    ok = sq > eps * eps
    return jnp.where(ok, v / jnp.sqrt(jnp.where(ok, sq, 1.0)), v)


def _plane_capsule(plane, cap, sharpness):
    """Plane-capsule: two end-sphere contacts; the friction frame's tangent is blended.

    MJX aligns the tangent with the capsule axis' projection onto the plane, and switches to a
    fixed axis when that projection is shorter than 0.5 -- a jump of the friction pyramid. Here
    the two directions are blended by a sigmoid in the projection length (scaled by the radius).
    """
    n, axis, radius = plane.mat[:, 2], cap.mat[:, 2], cap.size[0]
    proj = axis - n * jnp.dot(n, axis)
    proj_len = jnp.sqrt(jnp.dot(proj, proj) + 1e-30)
    fixed = jnp.where((-0.5 < n[1]) & (n[1] < 0.5), jnp.array([0.0, 1.0, 0.0]), jnp.array([0.0, 0.0, 1.0]))
    w = soft_step(proj_len, 0.5, 4.0 / (sharpness * radius))
    # A friction pyramid is unchanged by b -> -b: turn the fixed axis towards the projected one
    # so the blend never cancels.
    fixed = fixed * jnp.tanh(sharpness * radius * jnp.dot(fixed, proj))
    b = _unit(w * proj / proj_len + (1.0 - w) * fixed)
    frame = jnp.stack([n, b, jnp.cross(n, b)])
    ends = cap.pos + jnp.outer(jnp.array([1.0, -1.0]), axis * cap.size[1])
    dist = (ends - plane.pos) @ n - radius
    pos = ends - n * (radius + 0.5 * dist)[:, None]
    return dist, pos, jnp.stack([frame, frame])


def _plane_cylinder(plane, cyl, sharpness):
    """Plane-cylinder: three rim contacts with MJX's two case splits blended.

    (1) Lying almost parallel (``|n . axis| * half_length < 1 mm``) MJX swaps its second contact
    for the lowest point of the far disk; here the two candidates are blended by a sigmoid in that
    quantity, so the far disk's contact fades in rather than appearing at depth. (2) Standing
    upright, the rim direction ``vec`` is ill-defined; MJX falls back to the x axis only when its
    length is below 1e-12, here a sigmoid of width ~ 1/(sharpness * radius) blends the two.
    """
    n, radius, half = plane.mat[:, 2], cyl.size[0], cyl.size[1]
    axis = cyl.mat[:, 2]
    prj = jnp.dot(n, axis)
    axis, prj = jnp.where(prj < 0, 1.0, -1.0) * axis, jnp.where(prj < 0, 1.0, -1.0) * prj
    dist0 = jnp.dot(cyl.pos - plane.pos, n)
    vec = axis * prj - n
    vec_len = jnp.sqrt(jnp.dot(vec, vec) + 1e-30)
    upright = 1.0 - soft_step(radius * vec_len, 3.0 / sharpness, 4.0 / sharpness)
    vec = _unit((1.0 - upright) * vec / vec_len + upright * cyl.mat[:, 0]) * radius
    prjvec = jnp.dot(vec, n)
    axis, prj = axis * half, prj * half
    side = _unit(jnp.cross(vec, axis)) * radius * (jnp.sqrt(3.0) * 0.5)
    d1 = dist0 + prj + prjvec
    d2 = dist0 + prj - 0.5 * prjvec
    d3 = dist0 - prj + prjvec
    p1 = cyl.pos + axis + vec - n * d1 * 0.5
    p2 = cyl.pos + axis + side - 0.5 * vec - n * d2 * 0.5
    p2b = cyl.pos + axis - side - 0.5 * vec - n * d2 * 0.5
    p3 = cyl.pos - axis + vec - n * d3 * 0.5
    lying = 1.0 - soft_step(jnp.abs(prj), 1e-3, 4.0 / sharpness)
    dist = jnp.stack([d1, lying * d3 + (1.0 - lying) * d2, d2])
    pos = jnp.stack([p1, lying * p3 + (1.0 - lying) * p2, p2b])
    frame = jnp.stack([_mjx.make_frame(n)] * 3)
    return dist, pos, frame


def table(sharpness: float) -> dict:
    """Smoothed functions keyed by MJX geom-type pairs."""
    g = _mjx.GeomType
    return {
        (g.PLANE, g.BOX): _mjx.convex_collider(ncon=4)(
            functools.partial(_plane_box, sharpness=sharpness)
        ),
        (g.PLANE, g.CAPSULE): _mjx.primitive_collider(ncon=2)(
            functools.partial(_plane_capsule, sharpness=sharpness)
        ),
        (g.PLANE, g.CYLINDER): _mjx.primitive_collider(ncon=3)(
            functools.partial(_plane_cylinder, sharpness=sharpness)
        ),
    }


SMOOTHED_PAIRS = tuple(table(1.0))
