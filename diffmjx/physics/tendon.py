"""Tendon lengths and moment arms whose reverse-mode derivatives are finite.

MJX's tendon stage gives the same lengths, but its sphere / cylinder wrapping evaluates
``arcsin``, ``arccos`` and ``sqrt`` on both sides of every case split (``jnp.where`` keeps one):
the discarded side is often outside the function's domain, and its NaN derivative, multiplied by
the zero cotangent of the branch ``where`` dropped, is still NaN. Through one muscle model (MyoSuite's
baoding hand) every tendon's length derivative came out NaN. The stage here computes the same
quantities with every such function guarded twice (its argument is replaced by a safe value where
the branch is not taken, and its output by the branch's value), so the forward values match MJX's
and the derivatives are those of the branch actually taken.

The Newton solve of an inside wrap (a side site inside the wrapping circle) is differentiated
through its fixed number of iterations, as the forward computes it, so finite differences of the
forward and the gradient agree.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import _mjx

__all__ = ["tendon", "wrap"]

MINVAL = mujoco.mjMINVAL
_JOINT = int(mujoco.mjtWrap.mjWRAP_JOINT)
_PULLEY = int(mujoco.mjtWrap.mjWRAP_PULLEY)
_SITE = int(mujoco.mjtWrap.mjWRAP_SITE)
_SPHERE = int(mujoco.mjtWrap.mjWRAP_SPHERE)
_CYLINDER = int(mujoco.mjtWrap.mjWRAP_CYLINDER)


# -- guarded elementary functions --------------------------------------------------------------


def _arcsin(x):
    """``arcsin`` with a zero derivative (not NaN) where ``|x| >= 1``; ±pi/2 beyond the domain."""
    ok = jnp.abs(x) < 1
    return jnp.where(ok, jnp.arcsin(jnp.where(ok, x, 0.0)), jnp.sign(x) * (jnp.pi / 2))


def _arccos(x):
    """``arccos`` with a zero derivative (not NaN) where ``|x| >= 1``; 0 or pi beyond the domain."""
    ok = jnp.abs(x) < 1
    return jnp.where(ok, jnp.arccos(jnp.where(ok, x, 0.0)), jnp.where(x > 0, 0.0, jnp.pi))


def _sqrt(x):
    """``sqrt`` of a value that may be zero or (in a discarded branch) negative: 0 there, derivative 0."""
    ok = x > 0
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1.0)), 0.0)


def _cross2(a, b):
    return a[0] * b[1] - a[1] * b[0]


def _crosses(p1, p2, p3, p4):
    """Whether segment p1-p2 crosses segment p3-p4 (both 2-D); False for (near) parallel ones."""
    e1, e2, off = p2 - p1, p4 - p3, p1 - p3
    det = _cross2(e1, e2)
    s = _mjx.safe_div(_cross2(e2, off), det)
    t = _mjx.safe_div(_cross2(e1, off), det)
    hit = (s >= 0) & (s <= 1) & (t >= 0) & (t <= 1)
    return jnp.where(jnp.abs(det) < MINVAL, False, hit)


# -- 2-D wrapping around a circle of radius r at the origin -------------------------------------


def _arc_length(t0, t1, larger, r):
    """Length of the arc from tangent point t0 to t1: the short way, or the long way if ``larger``."""
    c = jnp.dot(_mjx.normalize(t0), _mjx.normalize(t1))
    ang = _arccos(jnp.clip(c, -1.0, 1.0))
    turn = _cross2(t1, t0)
    long_way = ((turn > 0) & larger) | ((turn < 0) & ~larger)
    return r * jnp.where(long_way, 2 * jnp.pi - ang, ang)


def _wrap_outside(e, side, has_side, r):
    """Shortest path from e[:2] to e[2:] around the circle, on the side of ``side`` when given.

    Returns (arc length or -1 if the path does not wrap, the two tangent points as 4 numbers).
    """
    a, b = e[:2], e[2:]
    la2, lb2, r2 = a @ a, b @ b, r * r
    ab = b - a
    dd = ab @ ab
    s = jnp.clip(-(ab @ a) / jnp.maximum(MINVAL, dd), 0.0, 1.0)
    near = a + s * ab  # point of the segment nearest the centre
    # the straight segment clears the circle, or passes on the side site's side: no wrap
    clears = (near @ near > r2) & (~has_side | (side @ near >= 0))

    ha = jnp.sqrt(jnp.maximum(MINVAL, la2 - r2))
    hb = jnp.sqrt(jnp.maximum(MINVAL, lb2 - r2))
    la2s, lb2s = jnp.maximum(MINVAL, la2), jnp.maximum(MINVAL, lb2)

    def candidate(sgn):
        ta = jnp.array([a[0] * r2 + sgn * r * a[1] * ha, a[1] * r2 - sgn * r * a[0] * ha]) / la2s
        tb = jnp.array([b[0] * r2 - sgn * r * b[1] * hb, b[1] * r2 + sgn * r * b[0] * hb]) / lb2s
        score = jnp.where(has_side, _mjx.normalize(ta + tb) @ side, -((ta - tb) @ (ta - tb)))
        score = jnp.where(_crosses(a, ta, b, tb), -10000.0, score)
        return jnp.stack([ta, tb]), score

    tangents, scores = jax.vmap(candidate)(jnp.array([1.0, -1.0]))
    k = jnp.argmax(scores)
    t = tangents[k]
    arc = _arc_length(t[0], t[1], k != 0, r)
    bad = (la2 < r2) | (lb2 < r2) | (r < MINVAL) | (dd < MINVAL) | clears | _crosses(a, t[0], b, t[1])
    return jnp.where(bad, -1.0, arc), jnp.where(bad, 0.0, t.reshape(-1))


def _wrap_inside(e, r, iters, tol, z0):
    """Path from e[:2] to e[2:] touching the circle from inside at one point (MuJoCo's inside wrap).

    Solves ``asin(A z) + asin(B z) - 2 asin(z) + G = 0`` by ``iters`` Newton steps from ``z0``.
    Returns (0 if it wraps else -1, the contact point twice as 4 numbers).
    """
    a, b = e[:2], e[2:]
    la, lb = _mjx.norm(a), _mjx.norm(b)
    ab = b - a
    dd = ab @ ab
    no_wrap = (la <= r) | (lb <= r) | (r < MINVAL) | (la < MINVAL) | (lb < MINVAL)
    s = -(ab @ a) / jnp.maximum(MINVAL, dd)
    no_wrap |= (dd > MINVAL) & (s > 0) & (s < 1) & (_mjx.norm(a + s * ab) <= r)

    A = r / jnp.maximum(MINVAL, la)
    B = r / jnp.maximum(MINVAL, lb)
    cos_g = (la * la + lb * lb - dd) / jnp.maximum(MINVAL, 2 * la * lb)
    no_wrap |= cos_g < -1 + MINVAL
    fallback = cos_g > 1 - MINVAL
    G = _arccos(cos_g)

    def residual(z):
        return _arcsin(A * z) + _arcsin(B * z) - 2 * _arcsin(z) + G

    z = jnp.asarray(z0, dtype=e.dtype)
    f = residual(z)
    fallback |= f > 0

    def newton(carry, _):
        z, f, failed = carry
        slope = (
            A / jnp.maximum(MINVAL, _sqrt(1 - z * z * A * A))
            + B / jnp.maximum(MINVAL, _sqrt(1 - z * z * B * B))
            - 2 / jnp.maximum(MINVAL, _sqrt(1 - z * z))
        )
        done = jnp.abs(f) <= tol
        z_new = z - (1 - done) * _mjx.safe_div(f, slope)
        f_new = residual(z_new)
        failed |= (slope > -MINVAL) | (z_new > z) | (f_new > tol)
        return (z_new, f_new, failed), None

    (z, _, failed), _ = jax.lax.scan(newton, (z, f, jnp.bool_(False)), None, iters)
    fallback |= failed

    ccw = _cross2(a, b) > 0
    ref = _mjx.normalize(jnp.where(ccw, a, b))
    ang = _arcsin(z) - jnp.where(ccw, _arcsin(A * z), _arcsin(B * z))
    c, sn = jnp.cos(ang), jnp.sin(ang)
    pnt = r * jnp.array([c * ref[0] - sn * ref[1], sn * ref[0] + c * ref[1]])
    pnt = jnp.where(fallback, r * _mjx.normalize(0.5 * (a + b)), pnt)
    pnt = jnp.where(no_wrap, 0.0, pnt)
    return jnp.where(no_wrap, -1.0, 0.0), jnp.concatenate([pnt, pnt])


def wrap(x0, x1, xpos, xmat, radius, side, has_side, is_sphere, inside: bool, iters, tol, z0):
    """Wrap the straight segment x0-x1 around a sphere or cylinder (MuJoCo's ``mju_wrap``).

    Arguments:
        x0, x1: (3,) end points (global).
        xpos, xmat: the wrapping geom's position (3,) and rotation (3, 3).
        radius: its radius.
        side: (3,) the side site's position (global); read only where ``has_side``.
        has_side: whether a side site is given.
        is_sphere: sphere (else cylinder, whose axis is the geom's z).
        inside: the side site lies inside the geom (static): wrap from inside.
        iters, tol, z0: the inside wrap's Newton settings (MJX's model constants).

    Returns:
        ``(length, p0, p1)``: the length of the wrapped arc (-1 if the segment does not wrap) and the
        two tangent points (global; zeros if it does not wrap).
    """
    p0 = xmat.T @ (x0 - xpos)
    p1 = xmat.T @ (x1 - xpos)
    at_origin = (_mjx.norm(p0) < MINVAL) | (_mjx.norm(p1) < MINVAL)

    # the 2-D plane of the wrap: (p0, p1, centre) for a sphere, the xy plane for a cylinder
    u = _mjx.normalize(p0)
    n, n_len = _mjx.normalize_with_norm(jnp.cross(p0, p1))
    n_alt = _mjx.normalize(jnp.cross(u, jnp.ones(3).at[jnp.argmax(u)].set(0.0)))
    n = jnp.where(n_len < MINVAL, n_alt, n)
    v = _mjx.normalize(jnp.cross(n, u))
    u = jnp.where(is_sphere, u, jnp.array([1.0, 0.0, 0.0]))
    v = jnp.where(is_sphere, v, jnp.array([0.0, 1.0, 0.0]))
    e = jnp.array([p0 @ u, p0 @ v, p1 @ u, p1 @ v])
    s = xmat.T @ (side - xpos)
    s2 = _mjx.normalize(jnp.array([s @ u, s @ v])) * radius

    if inside:
        arc, t = _wrap_inside(e, radius, iters, tol, z0)
    else:
        arc, t = _wrap_outside(e, s2, has_side, radius)
    bad = at_origin | (arc < 0)
    q0 = u * t[0] + v * t[1]
    q1 = u * t[2] + v * t[3]

    # cylinder: the path climbs the axis in proportion to the planar length travelled
    l0 = _sqrt((p0[0] - q0[0]) ** 2 + (p0[1] - q0[1]) ** 2)
    l1 = _sqrt((p1[0] - q1[0]) ** 2 + (p1[1] - q1[1]) ** 2)
    total = l0 + arc + l1
    z0_ = p0[2] + (p1[2] - p0[2]) * _mjx.safe_div(l0, total)
    z1_ = p0[2] + (p1[2] - p0[2]) * _mjx.safe_div(l0 + arc, total)
    rise = jnp.abs(z1_ - z0_)
    arc = jnp.where(is_sphere, arc, _sqrt(arc * arc + rise * rise))
    q0 = jnp.where(is_sphere, q0, q0.at[2].set(z0_))
    q1 = jnp.where(is_sphere, q1, q1.at[2].set(z1_))

    return (
        jnp.where(bad, -1.0, arc),
        jnp.where(bad, 0.0, xmat @ q0 + xpos),
        jnp.where(bad, 0.0, xmat @ q1 + xpos),
    )


# -- the stage ---------------------------------------------------------------------------------


def _counts_per_tendon(m, wrap_ids) -> np.ndarray:
    ids = np.asarray(wrap_ids)
    return np.array([np.sum((ids >= a) & (ids < a + n)) for a, n in zip(m.tendon_adr, m.tendon_num)], dtype=int)


def tendon(m, d):
    """Tendon lengths ``ten_length`` and moment arms ``ten_J`` (MJX's tendon stage, NaN-free derivatives).

    Same outputs as MJX's stage (fixed tendons, pulleys, site-to-site segments and sphere / cylinder
    wrapping with and without side sites, including wrapping from inside), including the wrap-path
    fields MuJoCo's viewer reads; integer fields keep the dtypes ``d`` has.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` after kinematics and ``com_pos``.

    Returns:
        ``d`` with ``ten_length``, ``ten_J`` and the wrap-path fields set.
    """
    if not m.ntendon:
        return d
    wtype = np.asarray(m.wrap_type)
    objid = np.asarray(m.wrap_objid)
    prm = np.asarray(m.wrap_prm)
    adr, num = np.asarray(m.tendon_adr), np.asarray(m.tendon_num)
    site_body, geom_body = np.asarray(m.site_bodyid), np.asarray(m.geom_bodyid)

    def segment(p0, p1, b0, b1):
        """Length of p0-p1 and its derivative w.r.t. the dofs (p0 on body b0, p1 on b1)."""
        dif = p1 - p0
        length = _mjx.norm(dif)
        unit = jnp.where(length < MINVAL, jnp.array([1.0, 0.0, 0.0]), _mjx.safe_div(dif, length))
        jac = _mjx.jac(m, d, p1, b1)[0] - _mjx.jac(m, d, p0, b0)[0]
        return length, jnp.where(b0 != b1, jac @ unit, jnp.zeros(m.nv))

    segments = jax.vmap(segment)

    # fixed tendons: linear in the joint positions
    (w_jnt,) = np.nonzero(wtype == _JOINT)
    (t_jnt,) = np.nonzero(np.isin(adr, w_jnt))
    jnt = objid[w_jnt]
    per_jnt = np.repeat(np.arange(t_jnt.size), num[t_jnt])
    length = (
        jnp.zeros_like(d.ten_length)
        .at[t_jnt]
        .set(jax.ops.segment_sum(prm[w_jnt] * d.qpos[np.asarray(m.jnt_qposadr)[jnt]], per_jnt, t_jnt.size))
    )
    fields = _mjx.tendon_fields(d)
    moment = (
        jnp.zeros_like(fields.ten_J).at[np.repeat(t_jnt, num[t_jnt]), np.asarray(m.jnt_dofadr)[jnt]].set(prm[w_jnt])
    )

    # pulleys divide the length of every later wrap of their tendon
    (w_pul,) = np.nonzero(wtype == _PULLEY)
    divisor = np.ones(m.nwrap)
    for a, n in zip(adr, num):
        for w in w_pul:
            if a <= w < a + n:
                divisor[w : a + n] = max(MINVAL, prm[w])

    def add_per_tendon(length, moment, wraps, seg_len, seg_mom):
        """Divide the segments starting at ``wraps`` by their pulley divisors, add them to their tendons."""
        if wraps.size:
            seg_len = seg_len / divisor[wraps]
            seg_mom = seg_mom / divisor[wraps][:, None]
        count = _counts_per_tendon(m, wraps)
        (tendons,) = np.nonzero(count > 0)
        per = np.repeat(np.arange(tendons.size), count[tendons])
        length = length.at[tendons].add(jax.ops.segment_sum(seg_len, per, tendons.size))
        moment = moment.at[tendons].add(jax.ops.segment_sum(seg_mom, per, tendons.size))
        return length, moment, tendons, per

    # straight site-to-site segments (consecutive sites of one tendon)
    (w_site,) = np.nonzero(wtype == _SITE)
    starts = w_site[:-1][np.diff(w_site) == 1]
    starts = np.setdiff1d(starts, adr[1:] - 1)
    s0, s1 = objid[starts], objid[starts + 1]
    seg_len, seg_mom = segments(d.site_xpos[s0], d.site_xpos[s1], site_body[s0], site_body[s1])
    length, moment, _, _ = add_per_tendon(length, moment, starts, seg_len, seg_mom)

    # site - sphere/cylinder - site
    (w_geom,) = np.nonzero((wtype == _SPHERE) | (wtype == _CYLINDER))
    a_site, geom, b_site = objid[w_geom - 1], objid[w_geom], objid[w_geom + 1]
    xa, xb = d.site_xpos[a_site], d.site_xpos[b_site]
    side_id = np.round(prm[w_geom]).astype(int)
    wrap_in = _mjx.wrap_inside(m)
    inside = np.asarray(wrap_in.is_inside, dtype=bool)
    consts = (wrap_in.maxiter, wrap_in.tolerance, wrap_in.z_init)
    args = (
        xa,
        xb,
        d.geom_xpos[geom],
        d.geom_xmat[geom],
        m.geom_size[geom, 0],
        d.site_xpos[side_id],
        jnp.asarray(side_id >= 0),
        jnp.asarray(wtype[w_geom] == _SPHERE),
    )
    arc = jnp.zeros(w_geom.size, dtype=d.ten_length.dtype)
    g0 = jnp.zeros((w_geom.size, 3), dtype=d.ten_length.dtype)
    g1 = jnp.zeros((w_geom.size, 3), dtype=d.ten_length.dtype)
    for flag in (True, False):
        (idx,) = np.nonzero(inside == flag)
        if idx.size:
            out = jax.vmap(lambda *x, f=flag: wrap(*x, f, *consts))(*(x[idx] for x in args))
            arc, g0, g1 = arc.at[idx].set(out[0]), g0.at[idx].set(out[1]), g1.at[idx].set(out[2])
    missed = arc < 0
    bg, ba, bb = geom_body[geom], site_body[a_site], site_body[b_site]
    straight_len, straight_mom = segments(xa, xb, ba, bb)
    in_len, in_mom = segments(xa, g0, ba, bg)
    _on_len, on_mom = segments(g0, g1, bg, bg)  # the arc replaces the chord g0-g1
    out_len, out_mom = segments(g1, xb, bg, bb)
    geom_len = jnp.where(missed, straight_len, in_len + arc + out_len)
    geom_mom = jnp.where(missed[:, None], straight_mom, in_mom + on_mom + out_mom)
    length, moment, t_geom, per_geom = add_per_tendon(length, moment, w_geom, geom_len, geom_mom)

    # wrap path for the viewer: pulleys, sites, then the tangent points of geoms that wrapped
    int_t = fields.wrap_obj.dtype
    slot_pul, slot_site, slot_geom, count = [], [], [], 0
    for w in wtype:
        if w == _PULLEY:
            slot_pul.append(count)
        elif w == _SITE:
            slot_site.append(count)
        elif w in (_SPHERE, _CYLINDER):
            slot_geom += [count, count + 1]
            count += 1
        else:
            continue
        count += 1
    order = np.argsort(np.array(slot_pul + slot_site + slot_geom, dtype=int))
    skipped = jnp.zeros(count, dtype=bool).at[np.array(slot_geom, dtype=int)].set(jnp.repeat(missed, 2))
    sort = jnp.argsort(skipped)
    pts = jnp.concatenate(
        [jnp.zeros((w_pul.size, 3)), d.site_xpos[objid[w_site]], jnp.stack([g0, g1], axis=1).reshape(-1, 3)]
    )[order]
    wrap_xpos = jnp.concatenate([pts[sort], jnp.zeros((2 * m.nwrap - count, 3))]).reshape(m.nwrap, 6)
    obj = jnp.concatenate(
        [
            jnp.full(w_pul.size, -2, dtype=int_t),
            jnp.full(w_site.size, -1, dtype=int_t),
            jnp.repeat(jnp.where(missed, 0, geom).astype(int_t), 2),
        ]
    )[order]
    wrap_obj = jnp.concatenate([obj[sort], jnp.zeros(2 * m.nwrap - count, dtype=int_t)]).reshape(m.nwrap, 2)

    wrapnum = jnp.asarray(_counts_per_tendon(m, w_pul) + _counts_per_tendon(m, w_site), dtype=int_t)
    wrapnum = wrapnum.at[t_geom].add(jax.ops.segment_sum(jnp.where(missed, 0, 2).astype(int_t), per_geom, t_geom.size))
    wrapadr = jnp.concatenate([jnp.zeros(1, dtype=int_t), jnp.cumsum(wrapnum)[:-1].astype(int_t)])

    return _mjx.with_tendon(
        d,
        length,
        _mjx.TendonFields(
            ten_J=moment,
            ten_wrapadr=wrapadr.astype(fields.ten_wrapadr.dtype),
            ten_wrapnum=wrapnum.astype(fields.ten_wrapnum.dtype),
            wrap_xpos=wrap_xpos.astype(fields.wrap_xpos.dtype),
            wrap_obj=wrap_obj,
        ),
    )
