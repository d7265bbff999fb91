r"""Smoothed box-box collision: MJX's separating-axis choice blended over its candidates.

MJX's ``box_box`` runs a separating axis test over 21 axes (6 face normals of each box and the 9
edge-edge cross products), keeps the single axis of least overlap, clips the incident face
against the reference face on that axis and keeps four points of the clipped polygon (or, for an
edge-edge axis, only the deepest of them). Which axis wins is a hard ``argmin``: when a box tips
over an edge, or when two stacked boxes swap which one is the reference, the contact set jumps
from four points to one, or to a different face.

Here every axis is a candidate manifold, built with MJX's own clipping and its rule for picking
four points of the clipped polygon (each pick blended over near-ties, see ``_four_points``), and
the candidates are blended with weights from :func:`soft_argmin_weights`: compact support, so
away from a tie exactly one candidate (MJX's) has weight 1, and at an exact tie the lower index
wins, as in MJX (a face axis and its opposite always tie; the lower index decides which box is the
reference, and stacked boxes tie permanently). The candidates' four slots are matched to the
winner's by the permutation that moves the points least before blending, so slot ``i`` of the
blend mixes corresponding corners, not arbitrary ones. Three more switches are blended:
MJX's "prefer a face axis" rule, the reduction of an edge-edge contact to its deepest point, and
the cut at zero penetration (points that do not penetrate keep their true, positive distance
instead of MJX's sentinel 1, so they switch on continuously and CFD sees them).

Kept hard (sharp bits, documented in ``docs/collision.md``): the incident face of each candidate,
which clipped points count as valid (penetrating by more than 1e-6 m; a newly valid point can
still displace another from its slot), the sign of each axis (it flips only for boxes
interpenetrating past their centres), and the exclusion of near-parallel edge pairs (faded out,
steeply).

Why one file of this length: the smoothed box-box pipeline (separating axes, reference face,
clipping, contact slots) is one collision function whose stages share their frames and masks.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.collision.frames import smooth_frame, unit
from diffmjx.physics.collision.soft import soft_argmin_weights, soft_step

_PERMS = np.array(list(itertools.permutations(range(4))))  # (24, 4) slot matchings
_VALID_DEPTH = 1e-6  # MJX keeps clipped points penetrating deeper than this
_PREFER_FACE = 0.99  # MJX uses an edge axis only if |best face axis . edge axis| < this


def _pick(points, values, score, width):
    """``points[argmax(score)]`` and ``values[argmax(score)]``, blended over near-ties."""
    w = soft_argmin_weights(-score, width)
    return w @ points, w @ values


def _filler(dist, score, width):
    """Distance of a slot whose point is a filler (score ~ 0: it repeats other points) made
    non-penetrating, fading in over a band of ``width`` in the selection score. MJX instead
    duplicates a valid point there, so the slot's force jumps when a new point turns valid and
    takes the slot; as an inactive filler it takes it at zero depth."""
    real = soft_step(score, 2.0 * width, 2.0 * width)
    return real * dist + (1.0 - real) * jnp.maximum(dist, 0.0)


def _four_points(pts, dist, valid, normal, width, scale):
    """MJX's choice of four points of the clipped polygon, each argmax blended over near-ties.

    The rule is MJX's: the first valid point ``a``; ``b`` farthest from ``a``; ``c`` farthest from
    the line ``ab``; ``d`` farthest from the lines ``ac`` and ``bc``. Scores are divided by
    ``scale`` so that ``width`` is a length. Two ties need care:

    - ``c`` is the farther of the best point on either side of ``ab``. For a rectangular patch
      (stacked boxes) the two sides tie exactly and ``d`` is then the other one, so MJX's set of
      points is the same either way. Both branches are built, the second's ``c``/``d`` slots
      swapped to match the first's, and blended: the corners stay corners.
    - With only two valid points (a tilted box on an edge), MJX picks ``c`` and ``d`` by rounding
      noise, so its duplicated points, and with them the stiffness at each end, flip under tiny pose
      changes; here the tie gives the midpoint.
    """
    penalty = jnp.where(valid, 0.0, -1e6)
    first = jnp.argmax(valid)
    a, da = pts[first], dist[first]
    b, db = _pick(pts, dist, jnp.sum((a - pts) ** 2, axis=1) / scale + penalty, width)
    side = (a - pts) @ jnp.cross(normal, a - b) / scale

    def branch(sign):
        c, dc = _pick(pts, dist, sign * side + penalty, width)
        ac, bc = jnp.cross(normal, a - c), jnp.cross(normal, b - c)
        score_d = (jnp.abs((b - pts) @ bc) + jnp.abs((a - pts) @ ac)) / scale + 2.0 * penalty
        d, dd = _pick(pts, dist, score_d, width)
        # d duplicates a, b or c when no valid point lies off the triangle: make it inactive
        dd = _filler(dd, jnp.max(score_d), width)
        return jnp.max(sign * side + penalty), jnp.stack([dc, dd]), jnp.stack([c, d])

    top_p, dist_p, pos_p = branch(1.0)
    top_m, dist_m, pos_m = branch(-1.0)
    swap = jnp.sum((pos_m - pos_p) ** 2) > jnp.sum((pos_m[::-1] - pos_p) ** 2)
    dist_m, pos_m = jnp.where(swap, dist_m[::-1], dist_m), jnp.where(swap, pos_m[::-1], pos_m)
    w = soft_step(top_m - top_p, 0.0, width)  # MJX takes c from the side with the farther point
    dist_cd, pos_cd = w * dist_m + (1.0 - w) * dist_p, w * pos_m + (1.0 - w) * pos_p
    # c lies on the line ab when only two points are valid (a box tipped on an edge)
    dist_cd = dist_cd.at[0].set(_filler(dist_cd[0], jnp.maximum(top_p, top_m), width))
    return jnp.concatenate([jnp.stack([da, db]), dist_cd]), jnp.concatenate([jnp.stack([a, b]), pos_cd])


def _clip_faces(a_ref, ref, inc, faces_a, faces_b, normals_a, normals_b):
    """MJX's clipping of one box's incident face ``inc`` against the other's reference face ``ref``
    (box a's if ``a_ref``, else box b's): the clipped points projected onto the reference plane,
    their penetration depths (positive: penetrating), which lie inside the clip, and the reference
    normal."""
    ref_face = jnp.where(a_ref, faces_a[ref], faces_b[ref])
    ref_norm = jnp.where(a_ref, normals_a[ref], normals_b[ref])
    inc_face = jnp.where(a_ref, faces_b[inc], faces_a[inc])
    inc_norm = jnp.where(a_ref, normals_b[inc], normals_a[inc])
    incident, inside = _mjx.clip_polygon(ref_face, inc_face, ref_norm, inc_norm)
    on_ref = _mjx.project_polygon(incident, ref_face[0], ref_norm)
    return on_ref, (on_ref - incident) @ ref_norm, inside, ref_norm


def _candidate(axis, sign, faces_a, faces_b, normals_a, normals_b, width, scale):
    """MJX's face manifold on one axis: four clipped reference points and their distances."""
    da, db = normals_a @ axis, normals_b @ axis
    a_ref = sign > 0  # box a's face most along the axis is the reference, b's most against it incident
    ref, inc = jnp.where(a_ref, jnp.argmax(da), jnp.argmax(db)), jnp.where(a_ref, jnp.argmin(db), jnp.argmin(da))
    ref_pts, depth, inside, ref_norm = _clip_faces(a_ref, ref, inc, faces_a, faces_b, normals_a, normals_b)
    valid = inside & (depth > _VALID_DEPTH)
    # MJX: dist = -depth if valid else 1. Here points inside the clip polygon keep -depth also when
    # they do not penetrate (positive: inactive, continuous through zero); points outside it are
    # clamped to non-penetrating.
    dist = jnp.where(inside, -depth, jnp.maximum(-depth, 0.0))
    return _four_points(ref_pts, dist, valid, ref_norm, width, scale)


def _box_box_local(faces_a, faces_b, verts_a, verts_b, normals_a, normals_b, edges_a, sharpness, size):
    """Blended contacts of box a (given in b's frame) against box b: (dist (4,), pos (4, 3), n (3,))."""
    width = 4.0 / sharpness
    edges_b = jnp.eye(3, dtype=verts_a.dtype)
    cross = jnp.cross(jnp.tile(edges_a, (3, 1)), jnp.repeat(edges_b, 3, axis=0))  # MJX's axis order
    cross_sq = jnp.sum(cross * cross, axis=1)
    n_faces = normals_a.shape[0] + normals_b.shape[0]
    # degenerate edge axes get a well-defined placeholder so no candidate computes NaNs
    edge_axes = jnp.where((cross_sq < 1e-6)[:, None], normals_b[:1], cross)
    edge_axes = edge_axes / jnp.linalg.norm(edge_axes, axis=1, keepdims=True)
    axes = jnp.concatenate([normals_a, normals_b, edge_axes])

    pa, pb = verts_a @ axes.T, verts_b @ axes.T  # (8, 21) supports
    dist1 = pa.max(0) - pb.min(0)
    dist2 = pb.max(0) - pa.min(0)
    sign = jnp.where(dist1 > dist2, -1.0, 1.0)
    overlap = jnp.minimum(dist1, dist2)
    # MJX gives edge axes with |cross|^2 < 1e-6 the overlap 1e6; here that penalty fades in just
    # above the threshold, continuously
    fade = jnp.concatenate([jnp.ones(n_faces), soft_step(cross_sq, 2e-6, 2e-6)])
    overlap = overlap + (1.0 - fade) * 1e6
    weights = soft_argmin_weights(overlap, width)
    winner = jnp.argmin(overlap)

    dist, pos = jax.vmap(_candidate, in_axes=(0, 0, None, None, None, None, None, None))(
        axes, sign, faces_a, faces_b, normals_a, normals_b, width, size
    )

    # edge-edge axes: MJX keeps only the deepest point, unless a face axis is nearly parallel
    face_w = soft_argmin_weights(overlap[:n_faces], width)
    face_dot = jnp.abs(axes[n_faces:] @ axes[:n_faces].T) @ face_w
    edge = 1.0 - soft_step(face_dot, _PREFER_FACE, 4.0 / (sharpness * size))
    edge = jnp.concatenate([jnp.zeros(n_faces), edge])
    deepest = jax.vmap(soft_argmin_weights, in_axes=(0, None))(dist, width)
    reduced = deepest * dist + (1.0 - deepest) * jnp.maximum(dist, 0.0)
    dist = edge[:, None] * reduced + (1.0 - edge[:, None]) * dist

    # match every candidate's slots to the winner's before blending
    ref = pos[winner]
    cost = jnp.sum((pos[:, _PERMS, :] - ref[None, None]) ** 2, axis=(2, 3))  # (21, 24)
    perm = jnp.asarray(_PERMS)[jnp.argmin(cost, axis=1)]  # (21, 4)
    dist = jnp.take_along_axis(dist, perm, axis=1)
    pos = jnp.take_along_axis(pos, perm[:, :, None], axis=1)
    normal = unit(weights @ (sign[:, None] * axes))
    return weights @ dist, jnp.einsum("k,kij->ij", weights, pos), normal


def box_box(b1, b2, sharpness):
    """Smoothed box-box contacts ``(dist (4,), pos (4, 3), frame (4, 3, 3))``, MJX's conventions."""
    rot = b2.mat.T @ b1.mat
    shift = b2.mat.T @ (b1.pos - b2.pos)
    size = jnp.minimum(jnp.min(b1.size), jnp.min(b2.size))  # turns widths of unitless blends into lengths
    dist, pos, n = _box_box_local(
        shift + b1.face @ rot.T,
        b2.face,
        shift + b1.vert @ rot.T,
        b2.vert,
        b1.face_normal @ rot.T,
        b2.face_normal,
        rot.T,
        sharpness,
        size,
    )
    pos = b2.pos + pos @ b2.mat.T
    n = b2.mat @ n
    frame = smooth_frame(n, 4.0 / (sharpness * size))
    return dist, pos, jnp.stack([frame] * 4)


_EDGE_DEGENERATE = 1e-6  # MJX: edge-edge axes with |e1 x e2|^2 below this are not candidates
_SAME_POINT = 1e-9  # m: clipped points closer than this are one polygon vertex (clipping reports each twice)
_HANDOVER_WIDTH = 1e-4  # m of overlap difference: the widest band of the face-face and face-edge hand-overs
_HANDOVER_MIN = 1e-5  # m: the narrowest (at a touchdown a band shrinking with the depth was a jump)
_PARALLEL_WIDTH = 0.004  # of |cos|: the face-preference gate at _PREFER_FACE is handed over within this band
SLOTS = 8  # contacts per box pair: every vertex of the clipped polygon (at most eight), as the C engine
_MERGE_WIDTH = 1e-4  # m: polygon vertices closer than this share their depth (see _shares)
_EDGE_MARGIN = 0.05  # C engine: a nearly parallel edge axis must separate better by this share of the face's overlap


def fill_slots(pts, depth, valid, n):
    """The distinct valid polygon points, deepest first, in ``n`` slots: the indices of the
    points taken (n,) and whether each slot is used (n,). A box's face clipped by another's has at
    most eight vertices (MJX's clipping reports each twice), so with ``n = 8`` every one is a
    contact, as in the C engine."""
    later = jnp.arange(pts.shape[0])[:, None] > jnp.arange(pts.shape[0])[None, :]
    close = jnp.sum((pts[:, None] - pts[None]) ** 2, axis=-1) <= _SAME_POINT**2
    valid = valid & ~jnp.any(later & close & valid[None, :], axis=1)  # clipping reports vertices twice
    top = jnp.argsort(jnp.where(valid, -depth, jnp.inf))[:n]
    return top, valid[top]


def _shares(pts, depth, valid, band):
    """How much of its depth each clipped point keeps, so the polygon's contacts change
    continuously where its vertices split or merge.

    Where a corner of the incident face crosses the reference face's rim, one polygon vertex
    becomes two that start at the same place and depth (and two merge into one the other way):
    the C engine's contact count jumps there, at depth. MJX's clipping reports every vertex in
    fixed raw slots that move continuously through such a crossing, so here a point gives way to
    every earlier (lower raw index) valid point within ``band`` of it: its share is the product
    over those points of a C1 step of their squared distance (0 where they coincide, 1 from
    ``band`` apart), eased in by the earlier point's own depth (a C1 step over ``band``), since
    points also appear at zero depth. Coincident points thus count once, by the earliest of them,
    and a point that splits off fades in from zero; points farther apart than ``band`` keep all
    of their depth, as in the C engine."""
    n = pts.shape[0]
    earlier = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]  # [i, j]: j comes before i
    gap2 = jnp.sum((pts[:, None] - pts[None]) ** 2, axis=-1)
    apart = soft_step(gap2, 0.5 * band**2, band**2)
    present = jnp.where(valid, soft_step(depth, 0.5 * band, band), 0.0)
    return jnp.prod(jnp.where(earlier, 1.0 - (1.0 - apart) * present[None, :], 1.0), axis=1)


def _segment_closest(p0, d0, p1, d1):
    """Closest points of the segments ``p0 + s d0`` and ``p1 + t d1``, s, t in [-1, 1]."""
    r = p0 - p1
    a, b, c, e, f = d0 @ d0, d0 @ d1, d1 @ d1, d0 @ r, d1 @ r
    den = a * c - b * b
    s = jnp.clip(jnp.where(den > 1e-12, (b * f - c * e) / jnp.where(den > 1e-12, den, 1.0), 0.0), -1.0, 1.0)
    t = jnp.clip((b * s + f) / c, -1.0, 1.0)
    s = jnp.clip((b * t - e) / a, -1.0, 1.0)
    return p0 + s * d0, p1 + t * d1


def box_box_clipped(b1, b2, sharpness=None):
    """Box-box as MuJoCo's C engine builds it: the reference face is the face of the box whose
    axis separates least, and every distinct penetrating point of the clipped polygon is a contact.

    MJX's ``box_box`` differs in two ways that change the physics (``docs/collision.md``):

    - It takes the reference face from the box below the other along the winning axis, not from
      the box that owns the axis. A box's face axis and its opposite tie, and the lower index
      wins, so for a box resting on a corner or an edge on a larger box MJX often measures the
      depth along the small box's tilted face normal: the corner is reported ``1 / cos(tilt)``
      too deep (45 % at 46 degrees), at the wrong point.
    - It always fills four slots, repeating points when the clipped polygon has fewer: one
      penetrating corner is four identical contacts (four times the stiffness at touchdown), and
      when a second corner touches, the first drops to two or three copies, so the force jumps.

    Here a face axis's own box is the reference; the incident face is clipped against it with
    MJX's clipping; every distinct penetrating point of the polygon (at most eight:
    :data:`SLOTS` slots per box pair, which :func:`diffmjx.physics.collision.allocate` makes room for) is
    a contact at its true depth along the reference normal, placed midway between the two
    surfaces, as the C engine does, so a point enters or leaves only at zero depth; unused slots
    get MJX's sentinel distance 1. When an edge-edge axis separates least (and is not within
    |cos| 0.99 of the best face axis while separating less than 5 % better: the C engine's
    preference for the face), the contact is the closest pair of the two support edges, at their
    gap along the axis.

    Three switches of the C engine's rule are handed over continuously instead (C1 steps with
    compact support, so outside their bands the contacts are the C engine's): where the best face
    axes of the two boxes nearly tie, the normal turns from one box's face normal to the other's
    (a band of overlap difference 5 % of the face axis's overlap wide, within 0.01-0.1 mm:
    ``_HANDOVER_MIN``, ``_HANDOVER_WIDTH``; relative, so shallow contacts are the C engine's too); where the best
    edge-edge axis overtakes the face axis, the polygon's depths scale down to zero while the edge
    point's scale up (the same band); and so they do across the face preference (a band of 0.004
    in the cosine and the same band in overlap). Left: a polygon of eight points (a box turned on
    the other's face) gives up its shallowest point to an edge point at once.
    Polygon vertices that split or merge where a corner crosses the other face's rim share their
    depth (:func:`_shares`), so a split-off point fades in from zero instead of appearing at depth.

    ``sharpness`` (1/m, ``collision.sharpness`` under ``collision.smooth``) smooths the construction
    itself: every hand-over band above widens to at least ``4 / sharpness`` (in overlap and in the
    merge of polygon vertices; ``4 / (sharpness * size)`` in the cosine, ``size`` the smaller box's
    smallest half-size), and the choice among the nine edge-edge axes, a hard ``argmin`` above, is
    blended over near-ties (:func:`~diffmjx.physics.collision.soft.soft_argmin_weights`, compact support):
    the edge point, its depth and normal mix those of the axes within ``4 / sharpness`` of the
    least overlap; and each box's support edge along an edge axis, a hard choice of side by the sign
    of a cosine, slides from one side of a face parallel to the axis to the other over the cosine
    band (the gap along the axis, and so the depth, is the support edges' either way). Every blend
    has compact support, so away from a switch the contacts are the unsmoothed ones, and as
    ``sharpness`` grows they converge to them (the C engine's). ``None``: nothing is widened.
    """
    blend = 0.0 if sharpness is None else 4.0 / sharpness  # m
    rot = b2.mat.T @ b1.mat  # box 1's axes (columns) in box 2's frame
    shift = b2.mat.T @ (b1.pos - b2.pos)
    faces_a, normals_a, verts_a = shift + b1.face @ rot.T, b1.face_normal @ rot.T, shift + b1.vert @ rot.T
    faces_b, normals_b, verts_b = b2.face, b2.face_normal, b2.vert
    axes_a, axes_b = rot.T, jnp.eye(3, dtype=rot.dtype)  # rows
    cross = jnp.cross(jnp.repeat(axes_a, 3, axis=0), jnp.tile(axes_b, (3, 1)))  # (9, 3): a_i x b_j at 3 i + j
    cross_sq = jnp.sum(cross**2, axis=1)
    degenerate = cross_sq < _EDGE_DEGENERATE
    edge_axes = (
        jnp.where(degenerate[:, None], axes_b[:1], cross) / jnp.sqrt(jnp.where(degenerate, 1.0, cross_sq))[:, None]
    )
    axes = jnp.concatenate([axes_a, axes_b, edge_axes])  # (15, 3)
    pa, pb = verts_a @ axes.T, verts_b @ axes.T
    below = pa.max(0) - pb.min(0)  # overlap if box 1 is on the negative side
    above = pb.max(0) - pa.min(0)
    overlap = jnp.minimum(below, above) + jnp.concatenate([jnp.zeros(6), jnp.where(degenerate, 1e6, 0.0)])
    n12 = jnp.where((below <= above)[:, None], axes, -axes)  # from box 1 towards box 2

    face = jnp.argmin(overlap[:6])

    # face axis: its own box is the reference, its face that looks at the other box
    n = n12[face]
    own_a = face < 3
    ref_n = jnp.where(own_a, n, -n)
    ref_i = jnp.where(own_a, jnp.argmax(normals_a @ ref_n), jnp.argmax(normals_b @ ref_n))
    inc_i = jnp.where(own_a, jnp.argmin(normals_b @ ref_n), jnp.argmin(normals_a @ ref_n))
    on_ref, depth, inside, ref_norm = _clip_faces(own_a, ref_i, inc_i, faces_a, faces_b, normals_a, normals_b)
    valid = inside & (depth > 0.0)
    top, new = fill_slots(on_ref, depth, valid, SLOTS)
    share = _shares(on_ref, depth, valid, jnp.maximum(_MERGE_WIDTH, blend))[top]
    face_pts, face_depth = on_ref[top], jnp.where(new, depth[top], 0.0)
    face_pos = face_pts - 0.5 * face_depth[:, None] * ref_norm

    size = jnp.minimum(jnp.min(b1.size), jnp.min(b2.size))
    cos_band = _PARALLEL_WIDTH if sharpness is None else jnp.maximum(_PARALLEL_WIDTH, 4.0 / (sharpness * size))

    # edge-edge axis: the closest pair of the support edges of the two boxes along it
    def edge_contact(k):
        n_k = n12[6 + k]
        i, j = k // 3, k % 3
        mask_a, mask_b = jnp.arange(3) != i, jnp.arange(3) != j
        cos_a, cos_b = axes_a @ n_k, axes_b @ n_k
        sgn_a = jnp.where(cos_a >= 0, 1.0, -1.0)  # box 1's extreme towards box 2
        sgn_b = jnp.where(cos_b >= 0, -1.0, 1.0)  # box 2's extreme towards box 1
        mid_a = shift + (jnp.where(mask_a, sgn_a * b1.size, 0.0)) @ axes_a
        mid_b = (jnp.where(mask_b, sgn_b * b2.size, 0.0)) @ axes_b
        # The gap along the axis is the support edges' (both edges are perpendicular to it), and
        # continuous. Their position is not: where a box's face is parallel to the axis, its
        # support edge flips from one side of the face to the other (a box lying across the other's
        # face: the point jumps by the face's width). Smoothed, the side is a C1 blend over
        # cos_band of the cosine, so the point slides across the face instead.
        gap = (mid_b - mid_a) @ n_k
        if sharpness is not None:
            sgn_a = 2.0 * soft_step(cos_a, 0.0, cos_band) - 1.0
            sgn_b = 1.0 - 2.0 * soft_step(cos_b, 0.0, cos_band)
            mid_a = shift + (jnp.where(mask_a, sgn_a * b1.size, 0.0)) @ axes_a
            mid_b = (jnp.where(mask_b, sgn_b * b2.size, 0.0)) @ axes_b
        ca, cb = _segment_closest(mid_a, b1.size[i] * axes_a[i], mid_b, b2.size[j] * axes_b[j])
        return 0.5 * (ca + cb), gap  # the C engine's: the witness points' gap along the axis

    if sharpness is None:
        k = jnp.argmin(overlap[6:])  # the best edge-edge axis (degenerate ones are out by 1e6)
        n_edge, o_edge = n12[6 + k], overlap[6 + k]
        edge_pos, edge_dist = edge_contact(k)
    else:  # near-ties of edge axes blended: their points, gaps, normals and overlaps
        w_k = soft_argmin_weights(overlap[6:], blend)
        pos_k, dist_k = jax.vmap(edge_contact)(jnp.arange(9))
        n_edge = unit(w_k @ n12[6:])
        o_edge, edge_pos, edge_dist = w_k @ overlap[6:], w_k @ pos_k, w_k @ dist_k

    # When box 1's and box 2's best face axes separate about equally (a tilted box at the other's
    # edge), the reference switches boxes. The points and depths carry over (they are the same
    # polygon), but the normal would turn by the tilt at once: a jump in the contact force that no
    # gradient sees. Hand it over continuously instead, over an overlap band 5 % of the face's overlap
    # wide, within [_HANDOVER_MIN, _HANDOVER_WIDTH]: at a fixed 0.1 mm shallow contacts were blended
    # throughout; shrinking to zero with the depth, the hand-over at a touchdown was a jump.
    fa, fb = jnp.argmin(overlap[:3]), 3 + jnp.argmin(overlap[3:6])
    band = jnp.maximum(jnp.clip(_EDGE_MARGIN * jnp.abs(overlap[face]), _HANDOVER_MIN, _HANDOVER_WIDTH), blend)
    wa = soft_step(overlap[fb] - overlap[fa], 0.0, band)
    face_n = wa * n12[fa] + (1.0 - wa) * n12[fb]
    face_n = face_n / jnp.maximum(jnp.linalg.norm(face_n), 1e-12)

    # The face polygon and the edge-edge point are handed over the same way. Where the edge axis
    # overtakes the face axis (a box tipping over the other's edge) the contact set would jump from
    # the polygon to one point; instead, within the band, the polygon's depths scale down to zero
    # while the edge point's scale up from zero, so each force fades in or out continuously (from
    # zero at zero depth where solimp[0] = 0, as after a touchdown). The edge point takes a slot the
    # polygon leaves free, else its shallowest point's (a polygon of eight: the one jump left).
    # The C engine's preference for the face: an edge axis within |cos| 0.99 of the best face axis
    # gives way to it unless it separates better by 5 % of the face's overlap (_EDGE_MARGIN). Both
    # conditions are handed over the same way, over _PARALLEL_WIDTH of |cos| and the band in
    # overlap (as wide as the margin, so an edge flat on a face, o_edge = o_face, is a face): a box
    # rocking on the other's edge crosses them in contact, and a hard gate turns the normal at once.
    o_face = overlap[face]
    parallel = soft_step(jnp.abs(axes[face] @ n_edge), _PREFER_FACE, cos_band)
    margin = _EDGE_MARGIN * jnp.abs(o_face)
    not_better = soft_step(o_edge - (o_face - margin), 0.0, band)
    w_edge = soft_step(o_face - o_edge, 0.0, band) * (1.0 - parallel * not_better)
    w_face = 1.0 - w_edge
    used = new & (w_face > 0.0)
    dist = jnp.where(used, -w_face * share * face_depth, 1.0)
    slot = jnp.argmin(jnp.where(used, face_depth, -1.0))  # a free slot first, else the shallowest
    put = w_edge > 0.0
    edge_dist = jnp.where(edge_dist < 0.0, w_edge * edge_dist, edge_dist)  # separated: its distance
    dist = dist.at[slot].set(jnp.where(put, edge_dist, dist[slot]))
    pos = face_pos.at[slot].set(jnp.where(put, edge_pos, face_pos[slot]))
    pos = b2.pos + pos @ b2.mat.T
    normals = jnp.broadcast_to(face_n, (SLOTS, 3)).at[slot].set(jnp.where(put, n_edge, face_n))
    return dist, pos, jax.vmap(lambda v: _mjx.make_frame(b2.mat @ v))(normals)
