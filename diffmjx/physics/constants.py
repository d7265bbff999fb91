r"""Derived model constants, differentiable: :func:`set_const`, a traced ``mj_setConst`` for MJX.

MuJoCo's compiler and ``mj_setConst`` derive fields of ``mjModel`` from others: the subtree masses,
the mass matrix's diagonal and its inverse weights at ``qpos0`` (which scale every constraint's
regulariser, so masses reach contact forces through them), the actuators' reference accelerations
(which set a muscle's strength), tendon lengths at ``qpos0``, the model statistics, and each geom's
bounding sphere and box. ``mjx.put_model`` copies them once. A model whose masses, inertias, sizes or
armatures are changed inside ``jit`` / ``grad`` / ``vmap`` (system identification, domain
randomisation) needs them recomputed from the traced values: :func:`set_const` does this, following
MuJoCo 3.17's definitions (``engine_setconst.c``, ``user_objects.cc``) leaf by leaf:

- ``body_subtreemass``: each body's mass plus its descendants'.
- ``dof_M0``: the diagonal of the composite-rigid-body mass matrix at ``qpos0`` with ``dof_armature``
  (MuJoCo adds actuator armature, which MJX does not model; tendon armature is not included).
- ``body_invweight0``: at ``qpos0``, ``A = J M^-1 J^T`` with ``J`` the 6 x nv Jacobian of the body's
  centre of mass, ``(trace A_tt / 3, trace A_rr / 3)``; ``1 / mass`` for MuJoCo's "simple" slider
  bodies; 0 for bodies welded to the world.
- ``dof_invweight0``: the diagonal blocks of ``M^-1`` averaged per joint (a free joint's
  translational and rotational three apart, a ball joint's three).
- ``tendon_invweight0``: ``J_t M^-1 J_t^T``; ``actuator_acc0``: ``|M^-1 moment|``;
  ``tendon_length0``: the tendon lengths at ``qpos0``.
- ``stat.meanmass`` (mean body mass), ``stat.meaninertia`` (``trace M / nv``), ``stat.meansize``,
  ``stat.extent`` and ``stat.center`` (the bounding box of bodies, joints, sites and geoms at
  ``qpos0``, planes counting 0.01 m or a tenth of their size).
- ``geom_rbound`` and ``geom_aabb`` of primitive geoms from ``geom_size`` (meshes and height fields
  keep theirs).

``M`` is MJX's mass matrix (CRB, ``dof_armature`` and tendon armature). Two things MuJoCo's
``mj_setConst`` does are not repeated: converting a position actuator's ``dampratio`` (already
converted in a compiled model) and filling equality constraints' anchors. Mass properties of bodies
from their geoms (the compiler's ``inertiafromgeom``) are :func:`geom_inertia` and
:func:`combine_inertia`; a body's full inertia in physically consistent log-Cholesky coordinates is
:func:`mass_properties_from_log_cholesky` and its inverse.

Why one file of this length: it mirrors one C function, ``mj_setConst`` (with the compiler's geom
inertias), field by field, so that the two can be read side by side.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.manifold import quat_to_mat

__all__ = [
    "WRITTEN_LEAVES",
    "combine_inertia",
    "general_structure",
    "geom_bounds",
    "geom_inertia",
    "geom_volume",
    "log_cholesky_from_mass_properties",
    "mass_properties_from_log_cholesky",
    "principal_axes",
    "set_const",
]

WRITTEN_LEAVES = frozenset(
    {
        "body_subtreemass",
        "dof_M0",
        "body_invweight0",
        "dof_invweight0",
        "tendon_invweight0",
        "actuator_acc0",
        "tendon_length0",
        "stat.meanmass",
        "stat.meaninertia",
        "stat.meansize",
        "stat.extent",
        "stat.center",
        "geom_rbound",
        "geom_aabb",
        "body_mass",
        "body_inertia",
        "body_ipos",
        "body_iquat",
    }
)
"""Leaves of ``mjx.Model`` that :func:`set_const` (and the mass-property ties) may change."""

_G = _mjx.GeomType
_PLANE_BOUND = 0.01  # the box half-width MuJoCo gives an infinite plane in setStat


# -------------------------------------------------------------------------------------- geoms
def geom_bounds(geom_type: np.ndarray, size, rbound0, aabb0):
    """``(geom_rbound, geom_aabb)`` of primitive geoms from their sizes (others keep ``rbound0``, ``aabb0``).

    Arguments:
        geom_type: (ngeom,) static types.
        size: (ngeom, 3) sizes (traced or not).
        rbound0, aabb0: (ngeom,) and (ngeom, 6) values for geoms that are not primitives.
    """
    size = jnp.asarray(size)
    r, h = size[:, 0], size[:, 1]
    t = np.asarray(geom_type)
    zero = jnp.zeros_like(r)
    rbound = jnp.asarray(rbound0, size.dtype)
    half = jnp.asarray(aabb0, size.dtype)[:, 3:]
    for kind, rb, hs in (
        (_G.SPHERE, r, jnp.stack([r, r, r], -1)),
        (_G.CAPSULE, r + h, jnp.stack([r, r, r + h], -1)),
        (_G.CYLINDER, jnp.sqrt(r**2 + h**2), jnp.stack([r, r, h], -1)),
        (_G.ELLIPSOID, jnp.max(size, axis=1), size),
        (_G.BOX, jnp.sqrt(jnp.sum(size**2, axis=1)), size),
    ):
        sel = t == kind
        if sel.any():
            rbound = jnp.where(sel, rb, rbound)
            half = jnp.where(sel[:, None], hs, half)
    prim = np.isin(t, [_G.SPHERE, _G.CAPSULE, _G.CYLINDER, _G.ELLIPSOID, _G.BOX])
    centre = jnp.where(prim[:, None], zero[:, None], jnp.asarray(aabb0, size.dtype)[:, :3])
    return rbound, jnp.concatenate([centre, half], axis=1)


def geom_volume(kind: int, size):
    """Volume of a solid primitive geom of ``size`` (3,) (MuJoCo's ``GetVolume``)."""
    s = jnp.asarray(size)
    r, h = s[0], s[1]
    if kind == _G.SPHERE:
        return 4.0 / 3.0 * jnp.pi * r**3
    if kind == _G.CAPSULE:
        return jnp.pi * (r**2 * 2 * h + 4.0 / 3.0 * r**3)
    if kind == _G.CYLINDER:
        return jnp.pi * r**2 * 2 * h
    if kind == _G.ELLIPSOID:
        return 4.0 / 3.0 * jnp.pi * s[0] * s[1] * s[2]
    if kind == _G.BOX:
        return 8.0 * s[0] * s[1] * s[2]
    raise ValueError(f"geom type {kind} is not a primitive with a volume")


def geom_inertia(kind: int, size, mass):
    """(3,) principal moments, in the geom's frame, of a solid primitive of ``mass`` (``SetInertia``)."""
    s = jnp.asarray(size)
    r, h = s[0], s[1]
    if kind == _G.SPHERE:
        i = 0.4 * mass * r**2
        return jnp.stack([i, i, i])
    if kind == _G.CAPSULE:
        big_h = 2 * h
        ms = mass * 4 * r / (4 * r + 3 * big_h)
        mc = mass - ms
        ixy = mc * (3 * r**2 + big_h**2) / 12 + 0.4 * ms * r**2 + ms * big_h * (3 * r + 2 * big_h) / 8
        iz = mc * r**2 / 2 + 0.4 * ms * r**2
        return jnp.stack([ixy, ixy, iz])
    if kind == _G.CYLINDER:
        big_h = 2 * h
        ixy = mass * (3 * r**2 + big_h**2) / 12
        return jnp.stack([ixy, ixy, mass * r**2 / 2])
    if kind in (_G.ELLIPSOID, _G.BOX):
        k = 5.0 if kind == _G.ELLIPSOID else 3.0
        a, b, c = s[0] ** 2, s[1] ** 2, s[2] ** 2
        return mass * jnp.stack([b + c, a + c, a + b]) / k
    raise ValueError(f"geom type {kind} is not a primitive with an inertia")


def _mat_to_quat(r):
    """Unit quaternion (w, x, y, z), w >= 0, of a rotation matrix (Shepperd's branches by the largest term)."""
    tr = jnp.trace(r)
    cands = jnp.stack([tr, r[0, 0], r[1, 1], r[2, 2]])
    k = jnp.argmax(cands)

    def from_w():
        s = 2 * jnp.sqrt(jnp.maximum(1 + tr, 1e-300))
        return jnp.stack([s / 4, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s])

    def from_axis(i):
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2 * jnp.sqrt(jnp.maximum(1 + r[i, i] - r[j, j] - r[k, k], 1e-300))
        q = jnp.zeros(4, r.dtype)
        q = q.at[0].set((r[k, j] - r[j, k]) / s).at[1 + i].set(s / 4)
        q = q.at[1 + j].set((r[j, i] + r[i, j]) / s).at[1 + k].set((r[k, i] + r[i, k]) / s)
        return q

    q = jax.lax.switch(k, [from_w, lambda: from_axis(0), lambda: from_axis(1), lambda: from_axis(2)])
    return q * jnp.where(q[0] < 0, -1.0, 1.0)


@jax.custom_jvp
def _eigh_desc(a):
    w, v = jnp.linalg.eigh(a)
    w, v = w[::-1], v[:, ::-1]  # MuJoCo's order: decreasing
    v = v.at[:, 2].multiply(jnp.sign(jnp.linalg.det(v)))  # a rotation
    return w, v


@_eigh_desc.defjvp
def _eigh_desc_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    w, v = _eigh_desc(a)
    g = v.T @ da @ v
    gap = w[None, :] - w[:, None]
    scale = jnp.maximum(jnp.max(jnp.abs(w)), 1e-300)
    distinct = jnp.abs(gap) > 1e-9 * scale
    # rotation of the axes; within a degenerate pair no rotation is defined (the tensor's change there
    # is not a rotation of the axes) and none is taken
    omega = jnp.where(distinct, g / jnp.where(distinct, gap, 1.0), 0.0)
    return (w, v), (jnp.diag(g), v @ omega)


def principal_axes(full):
    """``(moments, quat)`` of a symmetric 3 x 3 inertia: principal moments in decreasing order and the
    unit quaternion of the principal frame. Differentiable; where two moments are equal the frame's
    derivative is taken as zero (the moments' derivatives are exact)."""
    w, v = _eigh_desc(full)
    return w, _mat_to_quat(v)


def combine_inertia(masses, positions, quats, moments):
    """Mass, centre of mass and 3 x 3 inertia about it of rigid parts (MuJoCo's ``InertiaFromGeom``).

    Arguments:
        masses: (k,) part masses.
        positions, quats: (k, 3) and (k, 4) part frames in the body frame.
        moments: (k, 3) principal moments of each part in its frame.
    """
    masses = jnp.asarray(masses)
    mass = jnp.sum(masses)
    com = jnp.sum(masses[:, None] * positions, axis=0) / mass
    full = jnp.zeros((3, 3), masses.dtype)
    for i in range(masses.shape[0]):
        r = quat_to_mat(quats[i])
        d = positions[i] - com
        full = full + r @ jnp.diag(moments[i]) @ r.T + masses[i] * (jnp.dot(d, d) * jnp.eye(3) - jnp.outer(d, d))
    return mass, com, full


# ------------------------------------------------------------------------------- log-Cholesky
def _upper_chol(j):
    """Upper-triangular U with U U^T = j (a reversed lower Cholesky factor)."""
    p = np.eye(4)[::-1]
    lo = np.linalg.cholesky(p @ j @ p)
    return p @ lo @ p


def log_cholesky_from_mass_properties(mass: float, com, inertia) -> np.ndarray:
    """(10,) log-Cholesky coordinates of the pseudo-inertia of ``mass``, ``com`` (3,) and the 3 x 3
    ``inertia`` about the centre of mass (concrete; the inverse of :func:`mass_properties_from_log_cholesky`).

    Raises:
        ValueError: the properties are not physically consistent (pseudo-inertia not positive definite).
    """
    com = np.asarray(com, np.float64)
    inertia = np.asarray(inertia, np.float64)
    i_o = inertia + mass * (com @ com * np.eye(3) - np.outer(com, com))
    sigma = 0.5 * np.trace(i_o) * np.eye(3) - i_o
    j = np.zeros((4, 4))
    j[:3, :3], j[:3, 3], j[3, :3], j[3, 3] = sigma, mass * com, mass * com, mass
    try:
        u = _upper_chol(j)
    except np.linalg.LinAlgError:
        raise ValueError(
            "mass properties are not physically consistent (pseudo-inertia not positive definite: "
            "a mass <= 0 or an inertia that breaks the triangle inequality)"
        ) from None
    alpha = np.log(u[3, 3])
    u = u / u[3, 3]
    return np.array(
        [alpha, np.log(u[0, 0]), np.log(u[1, 1]), np.log(u[2, 2]), u[0, 1], u[1, 2], u[0, 2], u[0, 3], u[1, 3], u[2, 3]]
    )


def mass_properties_from_log_cholesky(theta):
    """``(mass, com (3,), inertia 3 x 3 about the com)`` of log-Cholesky coordinates ``theta`` (10,):
    ``U = e^a [[e^d1, s12, s13, t1], [0, e^d2, s23, t2], [0, 0, e^d3, t3], [0, 0, 0, 1]]``, the
    pseudo-inertia ``J = U U^T`` (Rucker and Wensing), physically consistent for every ``theta``."""
    a, d1, d2, d3, s12, s23, s13, t1, t2, t3 = (theta[i] for i in range(10))
    zero = jnp.zeros_like(a)
    u = jnp.exp(a) * jnp.array(
        [
            [jnp.exp(d1), s12, s13, t1],
            [zero, jnp.exp(d2), s23, t2],
            [zero, zero, jnp.exp(d3), t3],
            [zero, zero, zero, jnp.ones_like(a)],
        ]
    )
    j = u @ u.T
    mass = j[3, 3]
    com = j[:3, 3] / mass
    sigma = j[:3, :3]
    i_o = jnp.trace(sigma) * jnp.eye(3) - sigma
    inertia = i_o - mass * (jnp.dot(com, com) * jnp.eye(3) - jnp.outer(com, com))
    return mass, com, inertia


# ------------------------------------------------------------------------------- set_const
def _subtree_sum(parent: np.ndarray, x):
    """Each body's value plus its descendants' (bodies are in topological order)."""
    out = x
    for i in range(len(parent) - 1, 0, -1):
        out = out.at[parent[i]].add(out[i])
    return out


def _block_mean(diag, groups):
    """Mean of ``diag`` over each group of indices, written back to every member."""
    out = diag
    for g in groups:
        out = out.at[g].set(jnp.mean(diag[g]))
    return out


def _dof_groups(m) -> list[np.ndarray]:
    groups = []
    for j in range(m.njnt):
        adr, typ = int(m.jnt_dofadr[j]), int(m.jnt_type[j])
        if typ == _mjx.JointType.FREE:
            groups += [np.arange(adr, adr + 3), np.arange(adr + 3, adr + 6)]
        elif typ == _mjx.JointType.BALL:
            groups.append(np.arange(adr, adr + 3))
    return groups


def set_const(m, tendon=None):
    """``m`` with every constant that MuJoCo derives from its masses and geometry recomputed, traced.

    Recomputes, from ``m``'s own (possibly traced) ``body_mass``, ``body_inertia``, ``body_ipos``,
    ``body_iquat``, ``dof_armature``, ``geom_size``, ``geom_pos``, ``actuator_gear``, ...:
    ``body_subtreemass``, ``dof_M0``, ``body_invweight0``, ``dof_invweight0``,
    ``tendon_invweight0``, ``actuator_acc0``, ``tendon_length0``, ``stat.meanmass``,
    ``stat.meaninertia``, ``stat.meansize``, ``stat.extent``, ``stat.center``, ``geom_rbound`` and
    ``geom_aabb`` (see the module docstring for the definitions). Works under ``jit``, ``grad``,
    ``jacfwd`` and ``vmap``: write new masses with ``m.tree_replace({"body_mass": ...})`` and pass
    the result, e.g. to randomise masses per environment.

    Arguments:
        m: an ``mjx.Model``.
        tendon: the tendon stage ``(m, d) -> d`` for ``tendon_length0`` and tendon Jacobians;
            default DiffMJX's (:func:`diffmjx.physics.tendon.tendon`, MuJoCo's inside wrapping).

    Returns:
        The ``mjx.Model`` with those leaves replaced (MJX's private static copy of ``geom_rbound``
        for height-field grids is kept).
    """
    if tendon is None:
        from diffmjx.physics.tendon import tendon as diffmjx_tendon

        tendon = diffmjx_tendon
    dtype = jnp.result_type(m.body_mass.dtype, jnp.float32)
    parent = np.asarray(m.body_parentid)
    rbound, aabb = geom_bounds(m.geom_type, m.geom_size, m.geom_rbound, m.geom_aabb)
    m = m.tree_replace({"geom_rbound": rbound.astype(m.geom_rbound.dtype), "geom_aabb": aabb.astype(m.geom_aabb.dtype)})
    edits = {"body_subtreemass": _subtree_sum(parent, jnp.asarray(m.body_mass, dtype))}
    if m.nbody > 1:
        edits["stat.meanmass"] = jnp.mean(jnp.asarray(m.body_mass, dtype)[1:])

    d = _mjx.make_data(m).replace(qpos=jnp.asarray(m.qpos0, dtype))
    d = _mjx.kinematics(m, d)
    d = _mjx.com_pos(m, d)
    if m.ntendon:
        d = tendon(m, d)
    d = _mjx.crb(m, d)
    m0 = jnp.diag(_mjx.full_m(m, d))  # CRB with dof armature, no tendon armature
    if m.ntendon:
        d = _mjx.tendon_armature(m, d)
    if m.nu:
        d = _mjx.transmission(m, d)

    if m.nv:
        big_m = _mjx.full_m(m, d)
        chol = jax.scipy.linalg.cho_factor(big_m)
        solve = functools.partial(jax.scipy.linalg.cho_solve, chol)
        minv = solve(jnp.eye(m.nv, dtype=dtype))
        edits["dof_M0"] = m0
        edits["stat.meaninertia"] = jnp.trace(big_m) / m.nv
        simple = np.asarray(m.body_simple) == 2
        mass = jnp.asarray(m.body_mass, dtype)
        inv_mass = 1.0 / jnp.maximum(mass, mujoco.mjMINVAL)
        # dofs: blocks of M^-1 averaged per joint; MuJoCo's simple slider bodies: 1 / mass
        dinv = _block_mean(jnp.diag(minv), _dof_groups(m))
        dof_body = np.asarray(m.dof_bodyid)
        dof_simple = simple[dof_body]
        if dof_simple.any():
            dinv = jnp.where(dof_simple, inv_mass[dof_body], dinv)
        edits["dof_invweight0"] = dinv

        weld = np.asarray(m.body_weldid)
        moving = np.asarray(m.body_dofnum)[weld] > 0

        def body_weight(i):
            jacp, jacr = _mjx.jac(m, d, d.xipos[i], i)  # (nv, 3) each
            j6 = jnp.concatenate([jacp, jacr], axis=1).T  # (6, nv)
            a = j6 @ minv @ j6.T
            return jnp.stack([jnp.trace(a[:3, :3]) / 3, jnp.trace(a[3:, 3:]) / 3])

        ids = np.arange(m.nbody)
        bw = jax.vmap(body_weight)(ids)
        bw = jnp.where(moving[:, None], bw, 0.0)
        if simple.any():
            bw = jnp.where(simple[:, None], jnp.stack([inv_mass, jnp.zeros_like(inv_mass)], -1), bw)
        edits["body_invweight0"] = bw.at[0].set(0.0)
        if m.ntendon:
            ten_j = _mjx.tendon_fields(d).ten_J
            edits["tendon_invweight0"] = jnp.einsum("tv,vw,tw->t", ten_j, minv, ten_j)
        if m.nu:
            moment = _mjx.actuator_moment(d)
            edits["actuator_acc0"] = jnp.linalg.norm(moment @ minv, axis=1)
    if m.ntendon:
        edits["tendon_length0"] = d.ten_length
    edits.update(_statistics(m, d, dtype))
    return m.tree_replace({k: jnp.asarray(v).astype(_leaf(m, k).dtype) for k, v in edits.items()})


def _leaf(m, key):
    obj = m
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _statistics(m, d, dtype) -> dict:
    """stat.meansize, extent and center (MuJoCo's ``setStat``) at the kinematics of ``d``."""
    out = {}
    body = jnp.zeros(m.nbody, dtype)
    jb = np.asarray(m.jnt_bodyid)
    for j in range(m.njnt):
        b = int(jb[j])
        p = int(m.body_parentid[b])
        body = body.at[b].max(jnp.linalg.norm(d.xipos[b] - d.xanchor[j]))
        body = body.at[p].max(jnp.linalg.norm(d.xipos[p] - d.xanchor[j]))
    body = body.at[0].set(0.0)
    gb = np.asarray(m.geom_bodyid)
    rb0 = np.asarray(jax.lax.stop_gradient(m.geom_rbound)) if not isinstance(m.geom_rbound, jax.core.Tracer) else None
    for g in range(m.ngeom):
        b = int(gb[g])
        if b == 0:
            continue
        if rb0 is not None and not rb0[g] > 0:
            continue  # a static zero bound (planes) never counts
        reach = m.geom_rbound[g] + jnp.linalg.norm(d.xipos[b] - d.geom_xpos[g])
        body = body.at[b].max(jnp.where(m.geom_rbound[g] > 0, reach, 0.0))
    meansize = None
    if m.nbody > 1:
        meansize = jnp.mean(jnp.maximum(body[1:], 1e-5))
        out["stat.meansize"] = meansize

    pts, rads = [], []
    if m.nbody > 1:
        pts += [d.xpos[1:], d.xipos[1:]]
        rads += [jnp.zeros(m.nbody - 1, dtype)] * 2
    if m.njnt:
        pts.append(d.xanchor)
        rads.append(jnp.zeros(m.njnt, dtype))
    if m.nsite:
        pts.append(d.site_xpos)
        rads.append(jnp.zeros(m.nsite, dtype))
    if m.ngeom:
        t = np.asarray(m.geom_type)
        size = m.geom_size
        plane = jnp.where((size[:, 0] > 0) | (size[:, 1] > 0), 0.1 * jnp.maximum(size[:, 0], size[:, 1]), _PLANE_BOUND)
        r = jnp.where(m.geom_rbound > 0, m.geom_rbound, jnp.where(t == _G.PLANE, plane, 0.0))
        if (t == _G.HFIELD).any():
            r = jnp.where(t == _G.HFIELD, _hfield_bound(m), r)
        pts.append(d.geom_xpos)
        rads.append(r)
    if pts:
        p = jnp.concatenate(pts)
        rr = jnp.concatenate(rads)[:, None]
        lo, hi = jnp.min(p - rr, axis=0), jnp.max(p + rr, axis=0)
        out["stat.center"] = (lo + hi) / 2
        extent = jnp.where(hi[0] > lo[0], jnp.maximum(1e-5, jnp.max(hi - lo)), jnp.asarray(m.stat.extent, dtype))
    else:
        extent = jnp.asarray(m.stat.extent, dtype)
    out["stat.extent"] = jnp.maximum(
        extent, 2 * (meansize if meansize is not None else jnp.asarray(m.stat.meansize, dtype))
    )
    return out


def _hfield_bound(m):
    g = np.asarray(m.geom_dataid)
    hs = np.asarray(m.hfield_size)
    return jnp.asarray([0.1 * np.max(hs[i]) if i >= 0 else 0.0 for i in g])


def general_structure(m):
    """``m`` with MuJoCo's shortcuts for "simple" bodies undone: the mass matrix's full sparsity (every
    dof coupled to its ancestors) and no body flagged simple.

    MuJoCo's compiler marks a body whose inertial frame coincides with its joint frame as simple and
    drops the mass-matrix entries that are zero for it (within a free joint, between translation and
    rotation); MJX keeps that static pattern. A change that moves such a body's centre of mass or
    principal axes (a fitted ``body_ipos``, a geom moved inside the body) makes those entries nonzero:
    apply this first, so that the mass matrix, :func:`set_const` and the simulation see them.
    """
    parent = np.asarray(m.dof_parentid)
    rows = []
    for i in range(m.nv):
        chain, j = [], parent[i]
        while j >= 0:
            chain.append(int(j))
            j = parent[j]
        rows.append([*sorted(chain), i])
    nnz = np.array([len(r) for r in rows], dtype=np.asarray(m.M_rownnz).dtype)
    adr = np.concatenate([[0], np.cumsum(nnz)[:-1]]).astype(np.asarray(m.M_rowadr).dtype)
    colind = np.array([c for r in rows for c in r], dtype=np.asarray(m.M_colind).dtype)
    return m.replace(
        M_rownnz=nnz,
        M_rowadr=adr,
        M_colind=colind,
        body_simple=np.zeros_like(np.asarray(m.body_simple)),
        dof_simplenum=np.zeros_like(np.asarray(m.dof_simplenum)),
    )
