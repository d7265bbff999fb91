r"""DiffMJX's view of MJX's ``kinematics``, ``com_pos`` and passive forces: MJX's values, with a cheap derivative.

MJX writes its small-vector algebra one scalar at a time: a quaternion product is sixteen scalar
slices of its operands, a rotation matrix nine entries of an outer product, a 3x3 product
(``matmul_unroll``) twenty-seven. Forward, XLA fuses them; reverse mode transposes every slice into a
pad of zeros, and those pads are most of the small kernels of a gradient
(``docs/results/vjp_sources.csv``, ``benchmark_vjp_thunks.csv``).

Here MJX's stages run as they are, and their per-body, per-geom, per-site and per-dof outputs are
differentiated (:func:`diffmjx.physics.rules.value_with_derivative`) as contractions with
constant tensors over whole arrays:

* a quaternion product :math:`(u \otimes v)_i = \sum_{jk} P_{ijk} u_j v_k`
  (:func:`diffmjx.physics.manifold.quat_mul`) and a rotation matrix
  :math:`R_{ij}(q) = \sum_{ab} Q_{ijab} q_a q_b` (the unit quaternion's rotation as a constant
  tensor), so their derivatives are the same contractions: the bodies' rotation matrices and
  the inertial frames, geoms and sites placed on them (:func:`local_to_global`);
* the dofs' motion axes (``cdof``) and the bodies' inertias about their roots' centres of mass
  (``cinert``) for all dofs and bodies at once, from static index arrays of the kinematic tree.

The joint springs' offsets (a quaternion difference per ball or free joint) are computed for all
joints at once (:func:`spring_offsets`, :func:`passive`, :func:`fwd_velocity`): the one place
where values differ from MJX's, by rounding (the sums run in another order). MJX still
differentiates its walk down the tree (the bodies' poses, joint anchors and axes), the subtree
centres of mass and the rest of its velocity stage. ``tests/test_smooth.py`` checks values and
both modes' derivatives against MJX's own stages.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.manifold import quat_conj_mul, quat_log, quat_mul
from diffmjx.physics.rules import value_with_derivative

__all__ = [
    "com_pos",
    "fwd_velocity",
    "kinematics",
    "local_to_global",
    "passive",
    "spring_offsets",
    "unit_quat_to_mat",
]


def _quat_mat_tensor() -> np.ndarray:
    q = np.zeros((3, 3, 4, 4))
    # R = (w^2 - v.v) I + 2 v v^T + 2 w [v]_x, v = (x, y, z)
    for i in range(3):
        q[i, i, 0, 0] = 1
        for k in range(1, 4):
            q[i, i, k, k] = -1
        for j in range(3):
            q[i, j, i + 1, j + 1] += 1
            q[i, j, j + 1, i + 1] += 1
    for i, j, k in ((0, 1, 3), (1, 2, 1), (2, 0, 2)):  # [v]_x: (i, j) = -v_k, (j, i) = +v_k
        q[i, j, 0, k] -= 1
        q[i, j, k, 0] -= 1
        q[j, i, 0, k] += 1
        q[j, i, k, 0] += 1
    return q


_Q = _quat_mat_tensor()


def unit_quat_to_mat(q):
    """Rotation matrices of unit quaternions (w, x, y, z), over leading axes: MJX's formula, not
    normalised first (:func:`diffmjx.physics.manifold.quat_to_mat` normalises)."""
    return jnp.einsum("ijab,...a,...b->...ij", jnp.asarray(_Q, q.dtype), q, q)


def local_to_global(world_pos, world_quat, local_pos, local_quat):
    """Poses in the world of frames given in their parents' frames, (n, 3) and (n, 4) each."""
    pos = world_pos + jnp.einsum("nij,nj->ni", unit_quat_to_mat(world_quat), local_pos)
    return pos, unit_quat_to_mat(quat_mul(world_quat, local_quat))


def kinematics(m, d):
    """MJX's ``kinematics``, its values; the bodies' rotation matrices differentiated as the
    rotations of their quaternions, and the inertial frames, geoms and sites as
    :func:`local_to_global` of their bodies' poses (:func:`diffmjx.physics.rules.value_with_derivative`)."""
    d = _mjx.kinematics(m, d)
    xmat = value_with_derivative(unit_quat_to_mat, d.xmat, d.xquat)
    place = lambda bodies: lambda pos, quat, lpos, lquat: local_to_global(pos[bodies], quat[bodies], lpos, lquat)
    xipos, ximat = value_with_derivative(
        place(slice(None)), (d.xipos, d.ximat), d.xpos, d.xquat, m.body_ipos, m.body_iquat
    )
    d = d.replace(xmat=xmat, xipos=xipos, ximat=ximat)
    if m.ngeom:
        geom_xpos, geom_xmat = value_with_derivative(
            place(np.asarray(m.geom_bodyid)), (d.geom_xpos, d.geom_xmat), d.xpos, d.xquat, m.geom_pos, m.geom_quat
        )
        d = d.replace(geom_xpos=geom_xpos, geom_xmat=geom_xmat)
    if m.nsite:
        site_xpos, site_xmat = value_with_derivative(
            place(np.asarray(m.site_bodyid)), (d.site_xpos, d.site_xmat), d.xpos, d.xquat, m.site_pos, m.site_quat
        )
        d = d.replace(site_xpos=site_xpos, site_xmat=site_xmat)
    return d


def _dof_layout(m):
    """Per dof: its body, its joint, its kind (0 free translation, 1 rotation about a column of the
    body frame, 2 hinge, 3 slide) and, for kinds 0 and 1, which axis."""
    jtype, jbody = np.asarray(m.jnt_type), np.asarray(m.jnt_bodyid)
    body, joint, kind, col = [], [], [], []
    for j, t in enumerate(jtype):
        jb = int(jbody[j])
        if t == _mjx.JointType.FREE:
            entries = [(0, c) for c in range(3)] + [(1, c) for c in range(3)]
        elif t == _mjx.JointType.BALL:
            entries = [(1, c) for c in range(3)]
        elif t == _mjx.JointType.HINGE:
            entries = [(2, 0)]
        else:
            entries = [(3, 0)]
        for k, c in entries:
            body.append(jb)
            joint.append(j)
            kind.append(k)
            col.append(c)
    return tuple(np.asarray(x, dtype=int) for x in (body, joint, kind, col))  # reused by every trace of the rule


def _inertias(rootid, subtree_com, xipos, ximat, mass, inertia):
    """(nbody, 10) every body's inertia about its root's subtree centre of mass, MJX's ``cinert``."""
    off = xipos - subtree_com[rootid]
    rot = jnp.einsum("bij,bj,bkj->bik", ximat, inertia, ximat)
    eye = jnp.eye(3, dtype=off.dtype)
    inert = rot + mass[:, None, None] * (
        jnp.sum(off * off, axis=1)[:, None, None] * eye - off[:, :, None] * off[:, None, :]
    )
    r, c = np.array([0, 1, 2, 0, 0, 1]), np.array([0, 1, 2, 1, 2, 2])
    return jnp.concatenate([inert[:, r, c], off * mass[:, None], mass[:, None]], axis=1)


def _motion_axes(layout, rootid, subtree_com, xmat, xaxis, xanchor):
    """(nv, 6) every dof's motion axis about its root's subtree centre of mass, MJX's ``cdof``."""
    body, joint, kind, col = layout
    frame_axis = xmat[body, :, col]  # (nv, 3): column col of the body's frame
    axis = jnp.where(jnp.asarray(kind >= 2)[:, None], xaxis[joint], frame_axis)  # hinge, slide
    axis = jnp.where(jnp.asarray(kind == 0)[:, None], jnp.eye(3, dtype=xmat.dtype)[col], axis)
    turns = jnp.asarray((kind == 1) | (kind == 2))[:, None]
    offset = subtree_com[rootid[body]] - xanchor[joint]
    return jnp.concatenate([jnp.where(turns, axis, 0.0), jnp.where(turns, jnp.cross(axis, offset), axis)], axis=1)


def com_pos(m, d):
    """MJX's ``com_pos``, its values; the bodies' inertias (``cinert``) and the dofs' motion axes
    (``cdof``) differentiated as expressions over all bodies and dofs at once
    (:func:`diffmjx.physics.rules.value_with_derivative`)."""
    d = _mjx.com_pos(m, d)
    rootid = np.asarray(m.body_rootid)
    cinert = value_with_derivative(
        lambda *a: _inertias(rootid, *a),
        _mjx.cinert(d),
        d.subtree_com,
        d.xipos,
        d.ximat,
        m.body_mass,
        m.body_inertia,
    )
    d = _mjx.with_cinert(d, cinert)
    if not m.nv:
        return d
    layout = _dof_layout(m)
    cdof = value_with_derivative(
        lambda *a: _motion_axes(layout, rootid, *a), d.cdof, d.subtree_com, d.xmat, d.xaxis, d.xanchor
    )
    return d.replace(cdof=cdof)


def _spring_layout(m):
    """Static index arrays of the joint springs: the qpos and dof addresses of every scalar
    coordinate (hinge, slide, a free joint's position), the (k, 4) qpos and (k, 3) dof addresses of
    every quaternion (ball, a free joint's orientation), and the permutation that puts the
    scalars' offsets followed by the quaternions' rotation vectors into dof order."""
    jtype, qadr, dadr = (np.asarray(x, dtype=int) for x in (m.jnt_type, m.jnt_qposadr, m.jnt_dofadr))
    sq, sd, rq, rd = [], [], [], []
    for t, q, v in zip(jtype, qadr, dadr, strict=True):
        if t == _mjx.JointType.FREE:
            sq, sd = [*sq, q, q + 1, q + 2], [*sd, v, v + 1, v + 2]
            rq.append(range(q + 3, q + 7))
            rd.append(range(v + 3, v + 6))
        elif t == _mjx.JointType.BALL:
            rq.append(range(q, q + 4))
            rd.append(range(v, v + 3))
        else:
            sq, sd = [*sq, q], [*sd, v]
    rq, rd = np.asarray(rq, dtype=int).reshape(-1, 4), np.asarray(rd, dtype=int).reshape(-1, 3)
    order = np.argsort(np.concatenate([np.asarray(sd, dtype=int), rd.ravel()]))
    return np.asarray(sq, dtype=int), rq, order


def spring_offsets(m, qpos, qpos_spring):
    """(nv,) each dof's offset from its spring's reference, MJX's ``qpos - qpos_spring`` per joint:
    the coordinate's difference for hinges, slides and a free joint's position, the rotation vector
    from the reference to ``qpos`` (in the reference's frame) for ball joints and a free joint's
    orientation. For all joints at once; the rotation vector's derivative is finite and right at
    the reference itself (MJX's own is zero there, and its value is zero within about 1e-8 rad)."""
    sq, rq, order = _spring_layout(m)
    rot = quat_log(quat_conj_mul(qpos_spring[rq], qpos[rq]))
    return jnp.concatenate([qpos[sq] - qpos_spring[sq], rot.ravel()])[order]


def _known_zero(x) -> bool:
    """Whether ``x`` is a constant (not traced) whose every entry is zero."""
    return not isinstance(x, jax.core.Tracer) and not np.any(np.asarray(x))


def passive(m, d):
    """MJX's passive forces: joint springs (:func:`spring_offsets`) and dampers, tendon springs
    and dampers, gravity compensation and fluid forces, MJX's values; the joint springs of all joints
    at once instead of one joint at a time (a quaternion difference is 32 scalar slices in MJX's),
    and none at all when every joint's stiffness is a constant zero (MJX computes the offsets and
    multiplies them by zero)."""
    dtype = d.qvel.dtype
    zero = jnp.zeros(m.nv, dtype)
    if _mjx.passive_disabled(m):  # MJX's rule: either flag zeroes every passive force
        return d.replace(qfrc_passive=zero, qfrc_gravcomp=zero)
    dof_joint = np.asarray(m.dof_jntid, dtype=int)
    qfrc = -m.dof_damping * d.qvel
    if not _known_zero(m.jnt_stiffness):  # a traced stiffness (being fitted) always counts
        qfrc = qfrc - m.jnt_stiffness[dof_joint] * spring_offsets(m, d.qpos, m.qpos_spring)
    if m.ntendon:
        below, above = m.tendon_lengthspring.T - d.ten_length
        spring = jnp.where(below > 0, m.tendon_stiffness * below, 0.0)
        spring = jnp.where(above < 0, m.tendon_stiffness * above, spring)
        damper = -m.tendon_damping * _mjx.ten_velocity(d)
        qfrc = qfrc + _mjx.tendon_fields(d).ten_J.T @ (spring + damper)
    gravcomp = zero
    if m.flg_gravcomp and not m.opt.disableflags & _mjx.DisableBit.GRAVITY:
        gravcomp = _mjx.gravcomp(m, d)
        qfrc = qfrc + gravcomp * (1 - m.jnt_actgravcomp[dof_joint])
    if _mjx.has_fluid(m):
        qfrc = qfrc + _mjx.fluid(m, d)
    return d.replace(qfrc_passive=qfrc, qfrc_gravcomp=gravcomp)


def fwd_velocity(m, d):
    """MJX's ``fwd_velocity`` with :func:`passive` as its passive-force stage."""
    return _mjx.fwd_velocity_with(m, d, passive)
