r"""Smoothed collision functions, drop-in for MJX's (same signature, same contact count).

Each function returns ``(dist, pos, frame)`` per contact like MJX. Contacts MJX drops are returned
with a distance blended towards 0 rather than set to MJX's sentinel: a contact row is active only
for ``dist < 0`` (``mjx`` constraint rows use ``pos < 0``), so a contact fades in continuously from
zero penetration instead of switching on at depth.

Why one file of this length: one function per geom pair (each under about 60 lines) over shared
smoothing helpers; a new pair is added here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.collision.frames import blend_tangent, smooth_frame, unit
from diffmjx.physics.collision.soft import soft_max_mask, soft_step

SKIN = 1e-3  # MJX's manifold skin depth for plane-convex contacts (m)


def _box_support(plane, box):
    """Penetration depth of each box vertex below the plane (negative above it)."""
    return (box.mat.T @ (plane.pos - box.pos) - box.vert) @ (box.mat.T @ plane.mat[:, 2])


def _box_contacts(plane, box, depth_score):
    """The four vertices of largest ``depth_score`` as contacts at distance ``-depth_score``."""
    depth, idx = jax.lax.top_k(depth_score, 4)
    dist = -depth
    n = plane.mat[:, 2]
    pos = box.pos + box.vert[idx] @ box.mat.T - 0.5 * dist[:, None] * n
    frame = jnp.stack([_mjx.make_frame(n)] * 4, axis=0)
    return dist, pos, frame


def plane_box_deepest(plane, box, sharpness=None):
    """Plane-box as MuJoCo's C engine: every penetrating vertex is a contact (the four deepest).

    MJX keeps only vertices within a 1 mm skin of the deepest one, so in an impact that presses a
    box in deeper than 1 mm a penetrating corner is dropped, and comes back at depth when the box
    turns: the contact force jumps, and no gradient through the impact is right (the jump's term
    is missing at every tolerance, for every adjoint). Here the four deepest vertices are contacts
    at their true distances. A vertex enters or leaves at distance 0, or swaps with the fifth
    deepest, which is above the plane unless the box is half sunk, so the force is continuous
    (with ``solimp[0] = 0`` and ``solver.impedance_floor = 0``) and needs no smoothing;
    ``sharpness`` is ignored. Non-penetrating vertices keep their true (positive) distance, which
    contacts from distance use.
    """
    return _box_contacts(plane, box, _box_support(plane, box))


def plane_box(plane, box, sharpness):
    """Plane-box: the four deepest vertices, penetrating ones outside MJX's 1 mm skin faded to zero depth.

    MJX keeps vertices with ``support > max(0, support.max() - 1e-3)`` and gives the rest distance
    1 (no contact). Here the skin test is a sigmoid relative to the deepest vertex, which keeps
    full weight; the ``> 0`` part needs no smoothing because ``dist = -support`` crosses the
    activation boundary continuously. Vertices above the plane keep their true (positive)
    distance whatever their weight: they are inactive either way, and contacts from distance
    (``cfd``) need the real gap of a hovering box, not a fade towards touching.
    """
    support = _box_support(plane, box)
    weight = soft_max_mask(support, SKIN, sharpness)
    return _box_contacts(plane, box, weight * support + (1.0 - weight) * jnp.minimum(support, 0.0))


def plane_capsule(plane, cap, sharpness):
    """Plane-capsule: two end-sphere contacts; the friction frame's tangent is blended.

    MJX aligns the tangent with the capsule axis' projection onto the plane, and switches to a
    fixed axis when that projection is shorter than 0.5 -- a jump of the friction pyramid. Here
    the two directions are blended (``blend_tangent``) over a band of the projection length.
    """
    n, axis, radius = plane.mat[:, 2], cap.mat[:, 2], cap.size[0]
    proj = axis - n * jnp.dot(n, axis)
    proj_len = jnp.sqrt(jnp.dot(proj, proj) + 1e-30)
    fixed = jnp.where((-0.5 < n[1]) & (n[1] < 0.5), jnp.array([0.0, 1.0, 0.0]), jnp.array([0.0, 0.0, 1.0]))
    w = soft_step(proj_len, 0.5, 4.0 / (sharpness * radius))
    b = blend_tangent(n, unit(fixed - n * jnp.dot(n, fixed)), proj / proj_len, w)
    frame = jnp.stack([n, b, jnp.cross(n, b)])
    ends = cap.pos + jnp.outer(jnp.array([1.0, -1.0]), axis * cap.size[1])
    dist = (ends - plane.pos) @ n - radius
    pos = ends - n * (radius + 0.5 * dist)[:, None]
    return dist, pos, jnp.stack([frame, frame])


UPRIGHT_TILT = 0.02
"""Tilt (sine, about 1.1 deg) below which ``plane_cylinder_deepest`` anchors its rim points to the
body.

MJX and the C engine put the first rim point below the tilt direction, whose azimuth is undefined
upright and turns by 180 deg as a cylinder rocking on its end passes through upright: its three
rim contacts swing round the disk while all of them press into the plane, and the contact force
with them -- at the very pose a cylinder landing on its end settles to. Discretise-then-optimise
gradients through that swing were 90 % off (fidelity cylinder-plane rolling shot). Here the rim
direction is that of ``tilt + a x``, with ``x`` the body's x axis and ``a`` this value up to this
tilt, fading to 0 at three times it (a C1 step): upright the three points stay put on the body,
beyond 3.4 deg they are MJX's exactly. A continuous rim direction must still turn somewhere (a
map from the tilt disk to the circle that winds once at its edge cannot be continuous inside),
so the turn is moved to one tilt of this size in one direction, away from upright, where
cylinders come to rest."""


def cylinder_candidates(plane, cyl, sharpness, anchored=False):
    """The plane-cylinder contact candidates: the near disk's lowest rim point, its two rim points at
    +-120 deg and the far disk's lowest rim point, as ``(n, (d1, d2, d3), (p1, p2, p2b, p3), prj)``.

    Standing upright, the rim direction ``vec`` (towards the lowest rim point) is ill-defined; MJX
    falls back to the x axis only when its length is below 1e-12, and with ``sharpness`` a sigmoid
    of width ~ 1/(sharpness * radius) blends the two. ``anchored``: see :data:`UPRIGHT_TILT`.
    """
    n, radius, half = plane.mat[:, 2], cyl.size[0], cyl.size[1]
    axis = cyl.mat[:, 2]
    prj = jnp.dot(n, axis)
    axis, prj = jnp.where(prj < 0, 1.0, -1.0) * axis, jnp.where(prj < 0, 1.0, -1.0) * prj
    dist0 = jnp.dot(cyl.pos - plane.pos, n)
    vec = axis * prj - n
    vec_len = jnp.sqrt(jnp.dot(vec, vec) + 1e-30)
    if anchored:
        # vec_len is the sine of the tilt; the anchor's weight is 1 up to UPRIGHT_TILT, 0 from 3x it
        anchor = UPRIGHT_TILT * (1.0 - soft_step(vec_len, 2.0 * UPRIGHT_TILT, 2.0 * UPRIGHT_TILT))
        # beyond 3x the tilt, MJX's own arithmetic (bitwise)
        vec = jnp.where(anchor > 0, unit(vec + anchor * cyl.mat[:, 0]), vec / vec_len) * radius
    elif sharpness is None:
        vec = jnp.where(vec_len < 1e-12, cyl.mat[:, 0], vec / vec_len) * radius
    else:
        upright = 1.0 - soft_step(radius * vec_len, 3.0 / sharpness, 4.0 / sharpness)
        vec = unit((1.0 - upright) * vec / vec_len + upright * cyl.mat[:, 0]) * radius
    prjvec = jnp.dot(vec, n)
    axis, prj = axis * half, prj * half
    side = unit(jnp.cross(vec, axis)) * radius * (jnp.sqrt(3.0) * 0.5)
    d1 = dist0 + prj + prjvec
    d2 = dist0 + prj - 0.5 * prjvec
    d3 = dist0 - prj + prjvec
    p1 = cyl.pos + axis + vec - n * d1 * 0.5
    p2 = cyl.pos + axis + side - 0.5 * vec - n * d2 * 0.5
    p2b = cyl.pos + axis - side - 0.5 * vec - n * d2 * 0.5
    p3 = cyl.pos - axis + vec - n * d3 * 0.5
    return n, (d1, d2, d3), (p1, p2, p2b, p3), prj


def plane_cylinder(plane, cyl, sharpness):
    """Plane-cylinder: three rim contacts with MJX's two case splits blended.

    (1) Lying almost parallel (``|n . axis| * half_length < 1 mm``) MJX swaps its second contact
    for the lowest point of the far disk; here the two candidates are blended by a sigmoid in that
    quantity. (2) Standing upright: see :func:`cylinder_candidates`. MJX's rule itself is kept: the
    far disk's point fades in over a fraction of a millimetre of tilt, at whatever depth it has
    (``collision.plane_cylinder=mjx``; :func:`plane_cylinder_deepest` does not).
    """
    n, (d1, d2, d3), (p1, p2, p2b, p3), prj = cylinder_candidates(plane, cyl, sharpness)
    lying = 1.0 - soft_step(jnp.abs(prj), 1e-3, 4.0 / sharpness)
    dist = jnp.stack([d1, lying * d3 + (1.0 - lying) * d2, d2])
    pos = jnp.stack([p1, lying * p3 + (1.0 - lying) * p2, p2b])
    frame = jnp.stack([_mjx.make_frame(n)] * 3)
    return dist, pos, frame


def plane_cylinder_deepest(plane, cyl, sharpness=None):
    """Plane-cylinder whose second contact is the lower of the far disk's lowest rim point and the
    near disk's rim point at 120 deg (the third is its mirror image).

    MJX takes the far disk's point only while the axis is within 1 mm of parallel to the plane. A
    cylinder landing on its side penetrates more than that, so the far end's contact appears at
    depth as the axis levels off (and vanishes at depth as it tilts up): the force jumps, and
    gradients through the landing were 18 % off at every tolerance (``experiments.fidelity``,
    cylinder-plane). Here the slot changes hands where both candidates are at the same height, far
    above the plane in any contact: the contact set is continuous. With ``sharpness`` the hand-over
    is a C1 step of width 4/sharpness in the height difference. Nearly upright the rim points are
    anchored to the body (:data:`UPRIGHT_TILT`), so that a cylinder rocking on its end does not
    swing its contacts round the disk.
    """
    n, (d1, d2, d3), (p1, p2, p2b, p3), _ = cylinder_candidates(plane, cyl, sharpness, anchored=True)
    if sharpness is None:
        far = (d3 < d2).astype(d1.dtype)
    else:
        far = soft_step(d2 - d3, 0.0, 4.0 / sharpness)
    dist = jnp.stack([d1, far * d3 + (1.0 - far) * d2, d2])
    pos = jnp.stack([p1, far * p3 + (1.0 - far) * p2, p2b])
    frame = jnp.stack([_mjx.make_frame(n)] * 3)
    return dist, pos, frame


def _segment_point(a, b, p):
    """Closest point to ``p`` on segment ab (the clamp is continuous; MJX's 1e-6 regulariser kept)."""
    ab = b - a
    t = jnp.dot(p - a, ab) / (jnp.dot(ab, ab) + 1e-6)
    return a + jnp.clip(t, 0.0, 1.0) * ab


def _sphere_sphere(p1, r1, p2, r2, coincident=None):
    """Contact of two spheres; ``coincident``: the normal where the centres coincide (else the
    regularised zero vector)."""
    delta = p2 - p1
    norm = jnp.sqrt(jnp.dot(delta, delta) + 1e-30)
    n = delta / norm
    if coincident is not None:
        n = jnp.where(jnp.dot(delta, delta) < 1e-30, coincident, n)
    dist = norm - (r1 + r2)
    return dist, p1 + n * (r1 + 0.5 * dist), n


def sphere_capsule(sphere, cap, sharpness):
    """Sphere-capsule: closest axis point, with MJX's friction-frame axis switch blended."""
    seg = cap.mat[:, 2] * cap.size[1]
    pt = _segment_point(cap.pos - seg, cap.pos + seg, sphere.pos)
    dist, pos, n = _sphere_sphere(sphere.pos, sphere.size[0], pt, cap.size[0])
    return dist, pos, smooth_frame(n, 4.0 / (sharpness * cap.size[0]))


def sphere_cylinder(sphere, cyl, sharpness=None):
    """Sphere-cylinder in closed form, with finite derivatives everywhere.

    MJX collides this pair by a signed-distance search whose derivative was NaN at every pose
    we checked (beside, above, inside, on the axis, on the rim), and the NaN reaches every other contact's
    gradient through the zero cotangents of the backward pass. Here, in the cylinder's frame,
    the nearest surface point is on the side, a cap or the rim; a centre inside the cylinder
    takes the nearer of side and cap. Every square root and division is guarded (double where),
    on the axis and on the rim included. The friction frame is MJX's ``make_frame`` (``sharpness``
    None) or its blended form.
    """
    radius, half, rho = cyl.size[0], cyl.size[1], sphere.size[0]
    p = cyl.mat.T @ (sphere.pos - cyl.pos)
    r2 = p[0] * p[0] + p[1] * p[1]
    off_axis = r2 > 1e-24
    r = jnp.sqrt(jnp.where(off_axis, r2, 1.0))
    radial = jnp.where(off_axis, jnp.array([p[0], p[1], 0.0]) / r, jnp.array([1.0, 0.0, 0.0]))
    r = jnp.where(off_axis, r, 0.0)
    axial = jnp.array([0.0, 0.0, 1.0]) * jnp.where(p[2] >= 0.0, 1.0, -1.0)
    out_r, out_h = r - radius, jnp.abs(p[2]) - half
    # side, cap or inside: the larger of the two signed gaps, along its direction
    face_s = jnp.maximum(out_r, out_h)
    face_n = jnp.where(out_r >= out_h, radial, axial)
    # rim: the nearest point of the rim circle
    delta = p - (radial * radius + axial * half)
    d2 = jnp.dot(delta, delta)
    apart = d2 > 1e-24
    rim_s = jnp.sqrt(jnp.where(apart, d2, 1.0))
    rim_n = jnp.where(apart, delta / rim_s, unit(radial + axial))
    rim_s = jnp.where(apart, rim_s, 0.0)
    on_rim = (out_r > 0.0) & (out_h > 0.0)
    s = jnp.where(on_rim, rim_s, face_s)
    n = -(cyl.mat @ jnp.where(on_rim, rim_n, face_n))  # from the sphere towards the cylinder
    dist = s - rho
    pos = sphere.pos + n * (rho + 0.5 * dist)
    frame = _mjx.make_frame(n) if sharpness is None else smooth_frame(n, 4.0 / (sharpness * radius))
    return dist, pos, frame


def sphere_box(sphere, box, sharpness=None):
    """Sphere-box in closed form: the true signed distance, apart or touching.

    MJX collides this pair as a sphere against a convex mesh and reports distance 1 for every
    separated pose, so contacts from distance see no sphere near a box (a ball beside a racket
    gets no row and no gradient). Here, in the box's frame, a centre outside the box is nearest
    to the clamped point (face, edge or corner; the square root double-where guarded), and a
    centre inside is pushed out through the face of least depth, as MuJoCo's C engine does. The
    friction frame is MJX's ``make_frame`` (``sharpness`` None) or its blended form.
    """
    return _sphere_box_at(sphere.pos, sphere.size[0], box, sharpness)


def _sphere_box_at(centre, rho, box, sharpness=None):
    """:func:`sphere_box` of the sphere of radius ``rho`` at ``centre``."""
    half = box.size
    p = box.mat.T @ (centre - box.pos)
    delta = p - jnp.clip(p, -half, half)
    d2 = jnp.dot(delta, delta)
    outside = d2 > 1e-24
    s_out = jnp.sqrt(jnp.where(outside, d2, 1.0))
    n_out = jnp.where(outside, delta / s_out, 0.0)
    gap = jnp.abs(p) - half  # all negative inside: the face of least depth has the largest
    axis = jnp.argmax(gap)
    n_in = jax.nn.one_hot(axis, 3, dtype=p.dtype) * jnp.where(p[axis] >= 0.0, 1.0, -1.0)
    s = jnp.where(outside, s_out, gap[axis])
    n = -(box.mat @ jnp.where(outside, n_out, n_in))  # from the sphere towards the box
    dist = s - rho
    pos = centre + n * (rho + 0.5 * dist)
    frame = _mjx.make_frame(n) if sharpness is None else smooth_frame(n, 4.0 / (sharpness * rho))
    return dist, pos, frame


def _segment_box_nearest(a, b, half, iterations: int = 48):
    """Parameter t in [0, 1] of the point of segment a-b (box frame) nearest to the box
    ``|x_i| <= half_i``, by golden-section search on the squared distance (convex in t). No
    derivative flows through t: at the minimiser the distance's derivative in t is zero (or t
    sits on an end), so the distance's derivative is right without it."""
    a, b, half = jax.lax.stop_gradient((a, b, half))

    def gap2(t):
        p = a + t * (b - a)
        delta = p - jnp.clip(p, -half, half)
        return jnp.dot(delta, delta)

    g = 0.5 * (jnp.sqrt(5.0) - 1.0)

    def shrink(_, ends):
        lo, hi = ends
        t1, t2 = hi - g * (hi - lo), lo + g * (hi - lo)
        left = gap2(t1) <= gap2(t2)
        return jnp.where(left, lo, t1), jnp.where(left, t2, hi)

    lo, hi = jax.lax.fori_loop(0, iterations, shrink, (jnp.zeros_like(a[0]), jnp.ones_like(a[0])))
    ends = jnp.array([0.0, 0.5 * (lo + hi), 1.0], dtype=a.dtype)
    return ends[jnp.argmin(jax.vmap(gap2)(ends))]


_CB_DEPTH_BAND = 1e-4  # m: capsule-box face/edge hand-over band in depth (and in depth difference)
_CB_LENGTH_BAND = 1e-3  # m: the face contacts fade over this much of the clipped axis length
_CB_PARALLEL = 0.99  # |cos| above which an edge direction counts as the face's normal (MJX's threshold)
_CB_PARALLEL_BAND = 0.004


def _capsule_box_touching(a, b, r, half):
    """Capsule (axis a-b, radius r) against the box ``|x_i| <= half_i``, all in the box's frame:
    two contacts (depth (2,), pos (2, 3), normal (2, 3) from the capsule into the box).

    The two cases of MJX's capsule-convex routine, a face contact (the axis clipped to the face
    of least penetration, its two ends projected on it) and an edge contact (the box edge nearest
    the axis), are both built and blended by one weight instead of switched, so no contact
    appears, disappears or moves at depth. The edge takes over (weight 1) where MJX would switch
    to it: one end of the face contact stops penetrating, the edge penetrates less than both face
    ends, or the clipped axis shrinks to a point (the capsule leaves the face). It gives way to
    the face where its direction turns within MJX's |cos| = 0.99 of the face normal or it stops
    penetrating. The edge point shares a slot with the nearer face end (position, normal and
    depth blended); the other face end keeps its own slot with its depth scaled by the face weight.
    """
    d = b - a
    # face of least penetration: axis k, outward sign sg
    lo_end = jnp.minimum(a, b)
    hi_end = jnp.maximum(a, b)
    pen = jnp.concatenate([half - (-hi_end - r), half - (lo_end - r)])  # faces -x,-y,-z, +x,+y,+z
    f = jnp.argmin(pen)
    k, sg = f % 3, jnp.where(f >= 3, 1.0, -1.0)
    out_n = sg * jnp.eye(3, dtype=a.dtype)[k]
    # clip the axis to the face's rectangle (the two other coordinates within the box)
    small = jnp.abs(d) < 1e-12
    safe = jnp.where(small, 1.0, d)
    t_a, t_b = (-half - a) / safe, (half - a) / safe
    inside = jnp.abs(a) <= half
    lo = jnp.where(small, jnp.where(inside, -jnp.inf, jnp.inf), jnp.minimum(t_a, t_b))
    hi = jnp.where(small, jnp.where(inside, jnp.inf, -jnp.inf), jnp.maximum(t_a, t_b))
    other = jnp.arange(3) != k
    t0 = jnp.maximum(0.0, jnp.max(jnp.where(other, lo, -jnp.inf)))
    t1 = jnp.minimum(1.0, jnp.min(jnp.where(other, hi, jnp.inf)))
    clip_len = jnp.maximum(t1 - t0, 0.0) * jnp.linalg.norm(d)
    ts = jnp.clip(jnp.stack([t0, t1]), 0.0, 1.0)
    axis_pts = a[None] + ts[:, None] * d[None]
    face_depth = half[k] - (sg * axis_pts[:, k] - r)
    surf = axis_pts - r * out_n  # the capsule's surface points towards the face
    face_pos = 0.5 * (surf + (surf - (jnp.dot(surf, out_n) - half[k])[:, None] * out_n[None]))

    # edge of the box nearest the axis
    signs = jnp.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], dtype=a.dtype)
    eye = jnp.eye(3, dtype=a.dtype)

    def edge(m, sgn):
        i, j = (m + 1) % 3, (m + 2) % 3
        mid = sgn[0] * half[i] * eye[i] + sgn[1] * half[j] * eye[j]
        pe, pc = _segment_pair_closest(mid, half[m] * eye[m], 0.5 * (a + b), 0.5 * d)
        return pe, pc, sgn[0] * eye[i], sgn[1] * eye[j]

    ms = jnp.repeat(jnp.arange(3), 4)
    pe, pc, fa, fb = jax.vmap(edge)(ms, jnp.tile(signs, (3, 1)))
    gap = jnp.linalg.norm(pe - pc + 1e-30, axis=1)
    e = jnp.argmin(gap)
    pe, pc, fa, fb, gap = pe[e], pc[e], fa[e], fb[e], gap[e]
    edge_n = unit(pe - pc)
    edge_depth = r - gap
    edge_pos = 0.5 * (pe + pc + r * edge_n)
    front = (jnp.dot(edge_n, fa) < 0) & (jnp.dot(edge_n, fb) < 0)

    # the weight of the edge contact
    min_face = jnp.min(face_depth)
    lifted = 1.0 - soft_step(min_face, 0.5 * _CB_DEPTH_BAND, _CB_DEPTH_BAND)
    shallower = soft_step(min_face - edge_depth, 0.5 * _CB_DEPTH_BAND, _CB_DEPTH_BAND)
    off_face = 1.0 - soft_step(clip_len, 0.5 * _CB_LENGTH_BAND, _CB_LENGTH_BAND)
    want = 1.0 - (1.0 - lifted) * (1.0 - shallower) * (1.0 - off_face)
    parallel = soft_step(jnp.abs(jnp.dot(edge_n, out_n)), _CB_PARALLEL, _CB_PARALLEL_BAND)
    pen_gate = soft_step(edge_depth, 0.5 * _CB_DEPTH_BAND, _CB_DEPTH_BAND)
    w = want * (1.0 - parallel) * pen_gate * front
    wf = (1.0 - w) * (1.0 - off_face)  # a face contact needs the axis over the face, as in MJX

    near = jnp.argmin(jnp.sum((face_pos - edge_pos) ** 2, axis=1))
    depth = jnp.where(face_depth > 0, wf * face_depth, face_depth)
    normal = jnp.broadcast_to(-out_n, (2, 3))
    blend_n = unit(-wf * out_n + w * edge_n + 1e-12 * edge_n)
    depth = depth.at[near].set(wf * face_depth[near] + w * edge_depth)
    pos = face_pos.at[near].set(wf * face_pos[near] + w * edge_pos)
    normal = normal.at[near].set(blend_n)
    return depth, pos, normal


def _segment_pair_closest(p0, d0, p1, d1):
    """Closest points of the segments ``p0 + s d0`` and ``p1 + t d1``, s, t in [-1, 1]."""
    r = p0 - p1
    a, b, c, e, f = d0 @ d0, d0 @ d1, d1 @ d1, d0 @ r, d1 @ r
    den = a * c - b * b
    ok = den > 1e-12 * a * c
    s = jnp.clip(jnp.where(ok, (b * f - c * e) / jnp.where(ok, den, 1.0), 0.0), -1.0, 1.0)
    t = jnp.clip((b * s + f) / c, -1.0, 1.0)
    s = jnp.clip((b * t - e) / a, -1.0, 1.0)
    return p0 + s * d0, p1 + t * d1


def capsule_box(cap, box, sharpness=None):
    """Capsule-box: a continuous two-point manifold when touching, the true distance when apart.

    Touching (the axis within the radius of the box), the face and edge contacts of MJX's
    capsule-convex routine are blended instead of switched (:func:`_capsule_box_touching`): MJX
    jumps from two face contacts to one edge contact at depth when one face end lifts off, which
    the fidelity suite's capsule-box family measured as gradient errors of 5-19 % on sliding,
    rolling and tumbling shots. Away from those switches (both face ends in, the edge not in
    play) the contacts equal MJX's. Apart, MJX reports distance 1 for both contacts, so contacts
    from distance would see no capsule near a box: the first contact is instead the nearest point
    pair (the axis point nearest the box by :func:`_segment_box_nearest`, its distance
    double-where guarded), the second distance 1. At the switch both first contacts are at
    distance 0. ``box`` is MJX's ``ConvexInfo`` of the box.
    """
    axis = cap.mat[:, 2] * cap.size[1]
    a, b = box.mat.T @ (cap.pos - axis - box.pos), box.mat.T @ (cap.pos + axis - box.pos)
    t = _segment_box_nearest(a, b, box.size)
    p = a + t * (b - a)
    delta = p - jnp.clip(p, -box.size, box.size)
    d2 = jnp.dot(delta, delta)
    apart = d2 > cap.size[0] ** 2
    s = jnp.sqrt(jnp.where(apart, d2, 1.0))
    n_apart = -jnp.where(apart, delta / s, jnp.array([0.0, 0.0, 1.0], dtype=p.dtype))  # capsule to box
    dist_apart = jnp.where(apart, s, cap.size[0]) - cap.size[0]
    pos_apart = p + n_apart * (cap.size[0] + 0.5 * dist_apart)
    depth, pos, normal = _capsule_box_touching(a, b, cap.size[0], box.size)
    dist = jnp.where(apart, jnp.array([dist_apart, 1.0], dtype=p.dtype), -depth)
    pos = jnp.where(apart, pos.at[0].set(pos_apart), pos)
    normal = jnp.where(apart, normal.at[0].set(n_apart), normal)
    pos = box.pos + pos @ box.mat.T
    normal = normal @ box.mat.T
    if sharpness is None:
        return dist, pos, jax.vmap(_mjx.make_frame)(normal)
    return dist, pos, jax.vmap(lambda v: smooth_frame(v, 4.0 / (sharpness * cap.size[0])))(normal)


# MuJoCo 3.17's capsule-box (``mjraw_CapsuleBox``), rebuilt: the C engine finds the capsule-axis
# point nearest the box among the axis's two ends (each against the face it projects onto) and the
# box's twelve edges, adds a second axis point by the relative orientation of axis and box, and
# collides a sphere of the capsule's radius at each point with the box.
_MINVAL = 1e-15  # MuJoCo's mjMINVAL: the tie tolerance of the edge search and its parallel test


def _safe_div(num, den):
    """``num / den`` where ``den != 0``, else +inf (the C engine's comparisons then skip it), with a
    finite derivative in the branch not taken."""
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.inf)


# the box's twelve edges in the C engine's order: along axis j, from the corner with bit j clear
_EDGE_AXIS = np.array([j for j in range(3) for c in range(8) if not c & (1 << j)])
_EDGE_CORNER = np.array([c for j in range(3) for c in range(8) if not c & (1 << j)])
_EDGE_MID = np.array(
    [[0.0 if k == j else (1.0 if c & (1 << k) else -1.0) for k in range(3)] for j, c in zip(_EDGE_AXIS, _EDGE_CORNER)]
)


def _engine_edge(p, h, half, j, mid):
    """Closest points of the capsule's axis and the box edge along axis ``j`` through ``half * mid``,
    clamped as the C engine clamps them: ``(d2, x2, x1, s1, s2, ok)``, the squared distance, the
    axis and edge parameters in [-1, 1], which end each sits at (0, 1, 2: low end, middle, high end),
    and whether the two are not parallel."""
    e = jax.nn.one_hot(j, 3, dtype=p.dtype)
    hj, sj = h @ e, half @ e
    dif = half * mid - p
    ma, mb, mc = sj**2, -sj * hj, jnp.dot(h, h)
    u, v = -sj * (dif @ e), jnp.dot(h, dif)
    det = ma * mc - mb * mb
    ok = jnp.abs(det) >= _MINVAL
    det = jnp.where(ok, det, 1.0)
    x1, x2 = (mc * u - mb * v) / det, (ma * v - mb * u) / det
    s1 = jnp.where(x1 > 1, 2, jnp.where(x1 < -1, 0, 1))
    x2 = jnp.where(x1 > 1, (v - mb) / mc, jnp.where(x1 < -1, (v + mb) / mc, x2))
    x1 = jnp.clip(x1, -1.0, 1.0)
    hi, lo = x2 > 1, x2 < -1
    x1_re = jnp.where(hi, (u - mb) / ma, (u + mb) / ma)  # an axis end: the edge point re-solved
    s1 = jnp.where(hi | lo, jnp.where(x1_re > 1, 2, jnp.where(x1_re < -1, 0, s1)), s1)
    x1 = jnp.where(hi | lo, jnp.clip(x1_re, -1.0, 1.0), x1)
    s2 = jnp.where(hi, 2, jnp.where(lo, 0, 1))
    x2 = jnp.clip(x2, -1.0, 1.0)
    gap = dif - x2 * h + sj * x1 * e
    return jnp.dot(gap, gap), x2, x1, s1, s2, ok


def _engine_nearest(p, h, half, bound):
    """The C engine's search for the axis point nearest the box, in the box's frame (capsule centre
    ``p``, half-axis ``h``): the axis's ends against the faces they project onto (an end beyond two
    faces is left to the edges), then the twelve edges, an edge winning only if nearer by
    ``_MINVAL``. Returns a dict of the winner: ``t`` (axis parameter in [-1, 1]), ``s`` (edge
    parameter), ``kind`` (-3 / -1: the -1 / +1 end over a face; ``3 * s1 + s2`` for an edge; -4:
    none nearer than ``bound``), ``face`` (the axis the end is clamped on, -1 inside), ``corner``
    (the edge's corner nearest, bits x, y, z set on the positive side) and ``edge`` (its axis)."""
    ends = jnp.array([-1.0, 1.0], dtype=p.dtype)
    e = p[None] + ends[:, None] * h[None]
    out = jnp.abs(e) > half
    d2_end = jnp.sum((jnp.clip(e, -half, half) - e) ** 2, axis=1)
    d2_end = jnp.where(jnp.sum(out, axis=1) <= 1, d2_end, jnp.inf)
    i = jnp.argmin(d2_end)  # the -1 end on a tie, as the C engine's order
    end_ok = d2_end[i] < bound
    face = jnp.max(jnp.where(out[i], jnp.arange(3), -1))

    d2, x2, x1, s1, s2, ok = jax.vmap(_engine_edge, (None, None, None, 0, 0))(p, h, half, _EDGE_AXIS, _EDGE_MID)
    d2 = jnp.where(ok, d2, jnp.inf)
    k = jnp.argmin(d2)
    edge_ok = d2[k] < jnp.where(end_ok, d2_end[i], bound) - _MINVAL
    kind = jnp.where(edge_ok, 3 * s1[k] + s2[k], jnp.where(end_ok, 2 * i - 3, -4))
    return dict(
        t=jnp.where(edge_ok, x2[k], jnp.where(end_ok, ends[i], 0.0)),
        s=jnp.where(edge_ok, x1[k], 0.0),
        kind=kind.astype(jnp.int32),
        face=jnp.where(edge_ok | ~end_ok, -1, face).astype(jnp.int32),
        corner=(jnp.asarray(_EDGE_CORNER)[k] + jnp.left_shift(1, jnp.asarray(_EDGE_AXIS)[k]) * (s1[k] == 2)).astype(
            jnp.int32
        ),
        edge=jnp.asarray(_EDGE_AXIS)[k].astype(jnp.int32),
    )


def _engine_second(best, p, axis, h, half):
    """The C engine's second axis point, as an offset along the axis from the first, and whether
    there is one: along the box's edge or face from the corner, edge or face found nearest, up to
    where the axis leaves the box's extent (or its own other end)."""
    ah = jnp.abs(h)
    axisdir = (h[0] > 0) * 1 + (h[1] > 0) * 2 + (h[2] > 0) * 4
    t, kind = best["t"], best["kind"]

    def bit(x, k):
        return jnp.bitwise_and(x, jnp.left_shift(1, k)) != 0

    def cross(k):  # the axis's length across the box along k, in half-axes
        return _safe_div(2 * half[k], ah[k])

    # a box corner nearest: along the corner's edge (axis steep in it) or across its face
    c = jnp.bitwise_xor(axisdir, best["corner"])
    flip = (c == 3) | (c == 5) | (c == 6)
    mul = jnp.where(flip, -1.0, 1.0)
    c = jnp.where(flip, 7 - c, c)
    ax = jnp.where(c == 1, 0, jnp.where(c == 2, 1, 2))
    along = axis[ax] ** 2 > 0.5
    de, dp = 1 - mul * t, 1 + mul * t
    on_edge = mul * jnp.minimum(de, cross(ax))
    on_face = -mul * jnp.minimum(dp, jnp.minimum(cross((ax + 1) % 3), cross((ax + 2) % 3)))
    corner_sec = jnp.where(along, on_edge, on_face)
    corner_has = (c != 0) & (c != 7)

    # the middle of an edge nearest: crossing it, over the face the axis is flatter to
    e = best["edge"]
    c = jnp.bitwise_and(jnp.bitwise_xor(axisdir, best["corner"]), 7 - jnp.left_shift(1, e))
    edge_has = (c == 1) | (c == 2) | (c == 4)
    a1, a2 = (e + 1) % 3, (e + 2) % 3
    a1 = jnp.where(jnp.abs(axis[a1]) > jnp.abs(axis[a2]), a2, a1)
    a2 = 3 - e - a1
    mul = jnp.where(bit(c, a2), 1.0, -1.0)
    sec = jnp.minimum(1 - mul * t, cross(a2))
    e2 = jnp.where(bit(axisdir, e) == bit(c, a2), 1 - best["s"], 1 + best["s"])
    edge_sec = mul * jnp.minimum(sec, _safe_div(half[e] * e2, ah[e]))

    # an end nearest, over a face: towards the other end, up to where the axis leaves the face
    mul = jnp.where(kind == -3, 1.0, -1.0)
    start = p - mul * h
    sec = jnp.asarray(2.0, p.dtype)
    for i in range(3):
        for side in (half[i], -half[i]):
            x = _safe_div((side - start[i]) * mul, h[i])
            sec = jnp.where((i != best["face"]) & (x > 0) & (x < sec), x, sec)
    face_sec = mul * sec
    face_has = best["face"] != -1

    is_face, is_corner = kind < 0, (kind >= 0) & (kind // 3 != 1)
    sec = jnp.where(is_face, face_sec, jnp.where(is_corner, corner_sec, edge_sec))
    has = (kind != -4) & jnp.where(is_face, face_has, jnp.where(is_corner, corner_has, edge_has))
    return sec, has


def capsule_box_spheres(cap, box, sharpness=None):
    """Capsule-box as MuJoCo's C engine (3.17) makes it: two spheres of the capsule's radius on its
    axis, each collided with the box (:func:`sphere_box`, the C engine's sphere-box).

    The first sphere sits at the axis point nearest the box (an end over a face, or the closest
    point to one of the box's twelve edges); the second, where the C engine puts one, further
    along the axis: along the box's edge or across its face from the corner or edge found, up to
    where the axis leaves the box (or its own other end). A capsule pressed into a box's edge gets
    a contact on each face (MJX's rule: one, on the face of least penetration). Both slots report
    their true distances, apart or touching; a missing second sphere is distance 1. The choices are
    the C engine's hard switches: derivatives follow the branch taken. ``box`` is MJX's
    ``ConvexInfo`` of the box; ``sharpness``, if given, blends the friction frames as
    :func:`sphere_box` does (under ``collision.smooth`` the collision table takes the blended
    :func:`capsule_box` instead).
    """
    half = box.size
    axis = box.mat.T @ cap.mat[:, 2]  # in the box's frame; the C engine's ties break on its rounding
    h = axis * cap.size[1]
    p = box.mat.T @ (cap.pos - box.pos)
    bound = 2 * (cap.size[0] + cap.size[1] + jnp.sum(half))
    best = _engine_nearest(p, h, half, bound)
    sec, has = _engine_second(best, p, axis, h, half)
    found = best["kind"] != -4

    def sphere_at(t):
        return _sphere_box_at(cap.pos + t * (cap.mat[:, 2] * cap.size[1]), cap.size[0], box, sharpness)

    (d1, p1, f1), (d2, p2, f2) = sphere_at(best["t"]), sphere_at(best["t"] + jnp.where(has, sec, 0.0))
    dist = jnp.stack([jnp.where(found, d1, 1.0), jnp.where(has, d2, 1.0)])
    return dist, jnp.stack([p1, p2]), jnp.stack([f1, f2])


PARALLEL = 1e-8
"""MuJoCo 3.17's capsule-capsule treats axes as parallel where ``det <= PARALLEL * |h1|^2 |h2|^2`` (the
determinant of the closest-point equations, axes scaled by the half-lengths): sin(angle) <= 1e-4."""


def capsule_capsule_paired(cap1, cap2):
    """Capsule-capsule as MuJoCo's C engine (3.17) makes it: two contact slots, unsmoothed.

    Axes that are not parallel (:data:`PARALLEL`) have one contact, at the closest points of the two
    segments (the second slot empty): the lines' closest points, then a parameter outside its segment
    clipped to the end and the other re-solved, as the C engine does (MJX's construction puts them up
    to 1e-5 m from the C engine's near parallel). Parallel axes (a foot lying across another, a
    planar model's capsules) have two, where MJX has one at the middle of the overlap: the ends of
    the overlap, each end of the first capsule paired with its projection on the second, or, where
    that falls off the second, the second's nearer end with its projection on the first. Slots are
    reported at their true distances; a row exists only within the pair's margin, as for any contact.

    Arguments:
        cap1, cap2: MJX ``GeomInfo`` of the two capsules (``pos``, ``mat``, ``size``).

    Returns:
        ``(dist, pos, frame)`` of shapes (2,), (2, 3), (2, 3, 3); the empty slot has distance 1.
    """
    h1, h2 = cap1.mat[:, 2] * cap1.size[1], cap2.mat[:, 2] * cap2.size[1]
    r1, r2 = cap1.size[0], cap2.size[0]
    # closest points as parameters x1, x2 in [-1, 1] along the half-axes h1, h2
    dif = cap1.pos - cap2.pos
    ma, mb, mc = jnp.dot(h1, h1), -jnp.dot(h1, h2), jnp.dot(h2, h2)
    u, v = -jnp.dot(h1, dif), jnp.dot(h2, dif)
    det = ma * mc - mb * mb
    parallel = det <= PARALLEL * ma * mc
    safe = jnp.where(parallel, 1.0, det)  # no NaN in either branch's derivative

    def contact(x1, x2):
        dist, pos, n = _sphere_sphere(cap1.pos + x1 * h1, r1, cap2.pos + x2 * h2, r2, _crossed_normal(h1, h2))
        return dist, pos, _mjx.make_frame(n)

    # general: the unconstrained solution, clipped one parameter at a time, the other re-solved
    x1, x2 = (mc * u - mb * v) / safe, (ma * v - mb * u) / safe
    x2 = jnp.where(x1 > 1, (v - mb) / mc, jnp.where(x1 < -1, (v + mb) / mc, x2))
    x1 = jnp.clip(x1, -1.0, 1.0)
    x1 = jnp.where(x2 > 1, jnp.clip((u - mb) / ma, -1, 1), jnp.where(x2 < -1, jnp.clip((u + mb) / ma, -1, 1), x1))
    general = contact(x1, jnp.clip(x2, -1.0, 1.0))

    # parallel: the ends of the overlap, from capsule 1's -1 end, then its +1 end
    def end(sign):
        y2 = (v - sign * mb) / mc  # capsule 1's end on capsule 2's axis
        y1 = jnp.where(y2 < -1, jnp.clip((u + mb) / ma, -1, 1), jnp.where(y2 > 1, jnp.clip((u - mb) / ma, -1, 1), sign))
        return contact(y1, jnp.clip(y2, -1.0, 1.0))

    first, second = end(-1.0), end(1.0)
    slot0 = tuple(jnp.where(parallel, a, b) for a, b in zip(first, general))
    slot1 = (jnp.where(parallel, second[0], 1.0), second[1], second[2])
    return tuple(jnp.stack(x) for x in zip(slot0, slot1))


def _crossed_normal(h1, h2):
    """The C engine's normal where two capsules' closest points coincide (their axes cross): the unit
    cross product of the axes, or x where they are parallel."""
    c = jnp.cross(h1, h2)
    sq = jnp.dot(c, c)
    crossed = sq > 1e-30
    norm = jnp.sqrt(jnp.where(crossed, sq, 1.0))  # no 0/0 in the branch not taken (its derivative too)
    return jnp.where(crossed, c / norm, jnp.array([1.0, 0.0, 0.0], c.dtype))


def capsule_capsule(cap1, cap2, sharpness):
    """Capsule-capsule: closest points between the axes, MJX's end-point case split blended.

    MJX clips the closest points of the two lines to the segments, recomputes each against the
    other segment, and keeps whichever of the two recomputed pairs is closer -- a switch between
    two different point pairs. Here the pairs are blended by a C1 step in their distance gap.
    """
    a0, a1 = cap1.pos - cap1.mat[:, 2] * cap1.size[1], cap1.pos + cap1.mat[:, 2] * cap1.size[1]
    b0, b1 = cap2.pos - cap2.mat[:, 2] * cap2.size[1], cap2.pos + cap2.mat[:, 2] * cap2.size[1]
    da, db = a1 - a0, b1 - b0
    la, lb = jnp.sqrt(jnp.dot(da, da) + 1e-30), jnp.sqrt(jnp.dot(db, db) + 1e-30)
    ua, ub = da / la, db / lb
    mid_a, mid_b = a0 + 0.5 * da, b0 + 0.5 * db
    trans = mid_a - mid_b
    c, ta_, tb_ = jnp.dot(ua, ub), jnp.dot(ua, trans), jnp.dot(ub, trans)
    t_a = (-ta_ + c * tb_) / (1.0 - c * c + 1e-6)
    t_b = tb_ + t_a * c
    best_a = mid_a + ua * jnp.clip(t_a, -0.5 * la, 0.5 * la)
    best_b = mid_b + ub * jnp.clip(t_b, -0.5 * lb, 0.5 * lb)
    new_a = _segment_point(a0, a1, best_b)
    new_b = _segment_point(b0, b1, best_a)
    d1 = jnp.linalg.norm(new_a - best_b + 1e-30)
    d2 = jnp.linalg.norm(best_a - new_b + 1e-30)
    w = soft_step(d2 - d1, 0.0, 4.0 / sharpness)  # 1 where MJX keeps (new_a, best_b)
    pa = w * new_a + (1.0 - w) * best_a
    pb = w * best_b + (1.0 - w) * new_b
    dist, pos, n = _sphere_sphere(pa, cap1.size[0], pb, cap2.size[0])
    return dist, pos, smooth_frame(n, 4.0 / (sharpness * jnp.minimum(cap1.size[0], cap2.size[0])))
