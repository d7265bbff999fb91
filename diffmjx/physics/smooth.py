r"""DiffMJX's view of MJX's ``kinematics``, ``com_pos`` and passive forces: the same values, written for a cheap derivative.

MJX writes its small-vector algebra one scalar at a time: a quaternion product is sixteen scalar
slices of its operands, a rotation matrix nine entries of an outer product, a 3x3 product
(``matmul_unroll``) twenty-seven. Forward, XLA fuses them; reverse mode transposes every slice into a
pad of zeros, and those pads are most of the small kernels of a gradient
(``docs/results/vjp_sources.csv``, ``benchmark_vjp_thunks.csv``).

Here the stages' per-body, per-geom, per-site and per-dof parts are contractions with constant
tensors over whole arrays:

* a quaternion product :math:`(u \otimes v)_i = \sum_{jk} P_{ijk} u_j v_k`
  (:func:`diffmjx.physics.manifold.quat_mul`) and a rotation matrix
  :math:`R_{ij}(q) = \sum_{ab} Q_{ijab} q_a q_b` (the unit quaternion's rotation as a constant
  tensor), so their derivatives are the same contractions;
* the dofs' motion axes (``cdof``) and the bodies' inertias about their roots' centres of mass
  (``cinert``) for all dofs and bodies at once, from static index arrays of the kinematic tree;
* the derivative of the bodies' rotation matrices, kept from MJX's walk, as that of their
  quaternions' (a ``custom_jvp``), and the joint springs' offsets (a quaternion difference per ball or free joint) for all joints at once
  (:func:`spring_offsets`, :func:`passive`, :func:`fwd_velocity`).

MJX still runs what is a walk down the tree (the bodies' poses, joint anchors and axes), the
subtree centres of mass and the rest of its velocity stage; its own per-body results that are
computed again here are not used, so XLA drops them. Values equal MJX's to rounding (the sums run in another order); the derivative is
JAX's derivative of these expressions, which is the rule: for a contraction with a constant tensor
it is the same contraction, so nothing is written by hand. ``tests/test_smooth.py`` checks values
and both modes' derivatives against MJX's own stages.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.manifold import quat_conj_mul, quat_log, quat_mul

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


@jax.custom_jvp
def _rotation_of(quat, mat):
    """``mat``, the rotation matrices MJX computed from the unit quaternions ``quat`` one scalar at a
    time, differentiated as :func:`unit_quat_to_mat` of ``quat``: the forward keeps MJX's values and
    program, the derivative is one contraction instead of MJX's slices."""
    return mat


@_rotation_of.defjvp
def _rotation_of_jvp(primals, tangents):
    quat, mat = primals
    dquat, _ = tangents  # the tangent of MJX's matrices is that of unit_quat_to_mat(quat): not used
    # R(q) = Q q q with Q symmetric in its last two indices, so dR = 2 Q q dq
    return mat, 2.0 * jnp.einsum("ijab,...a,...b->...ij", jnp.asarray(_Q, quat.dtype), quat, dquat)


def local_to_global(world_pos, world_quat, local_pos, local_quat):
    """Poses in the world of frames given in their parents' frames, (n, 3) and (n, 4) each."""
    pos = world_pos + jnp.einsum("nij,nj->ni", unit_quat_to_mat(world_quat), local_pos)
    return pos, unit_quat_to_mat(quat_mul(world_quat, local_quat))


def kinematics(m, d):
    """MJX's ``kinematics``; the bodies' rotation matrices differentiated through their quaternions
    at once, and the inertial frames, geoms and sites placed by :func:`local_to_global`."""
    d = _mjx.kinematics(m, d)
    xipos, ximat = local_to_global(d.xpos, d.xquat, m.body_ipos, m.body_iquat)
    d = d.replace(xmat=_rotation_of(d.xquat, d.xmat), xipos=xipos, ximat=ximat)
    if m.ngeom:
        b = np.asarray(m.geom_bodyid)
        geom_xpos, geom_xmat = local_to_global(d.xpos[b], d.xquat[b], m.geom_pos, m.geom_quat)
        d = d.replace(geom_xpos=geom_xpos, geom_xmat=geom_xmat)
    if m.nsite:
        b = np.asarray(m.site_bodyid)
        site_xpos, site_xmat = local_to_global(d.xpos[b], d.xquat[b], m.site_pos, m.site_quat)
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
    return (np.asarray(x, dtype=int) for x in (body, joint, kind, col))


def com_pos(m, d):
    """MJX's ``com_pos``; the bodies' inertias (``cinert``) and the dofs' motion axes (``cdof``)
    computed over all bodies and dofs at once."""
    d = _mjx.com_pos(m, d)
    root_com = d.subtree_com[np.asarray(m.body_rootid)]
    off = d.xipos - root_com
    mass = m.body_mass
    rot = jnp.einsum("bij,bj,bkj->bik", d.ximat, m.body_inertia, d.ximat)
    eye = jnp.eye(3, dtype=off.dtype)
    inert = rot + mass[:, None, None] * (
        jnp.sum(off * off, axis=1)[:, None, None] * eye - off[:, :, None] * off[:, None, :]
    )
    r, c = np.array([0, 1, 2, 0, 0, 1]), np.array([0, 1, 2, 1, 2, 2])
    cinert = jnp.concatenate([inert[:, r, c], off * mass[:, None], mass[:, None]], axis=1)
    d = _mjx.with_cinert(d, cinert)
    if not m.nv:
        return d
    body, joint, kind, col = _dof_layout(m)
    frame_axis = d.xmat[body, :, col]  # (nv, 3): column col of the body's frame
    axis = jnp.where(jnp.asarray(kind >= 2)[:, None], d.xaxis[joint], frame_axis)  # hinge, slide
    axis = jnp.where(jnp.asarray(kind == 0)[:, None], jnp.eye(3, dtype=off.dtype)[col], axis)
    turns = jnp.asarray((kind == 1) | (kind == 2))[:, None]
    offset = root_com[body] - d.xanchor[joint]
    ang = jnp.where(turns, axis, 0.0)
    lin = jnp.where(turns, jnp.cross(axis, offset), axis)
    return d.replace(cdof=jnp.concatenate([ang, lin], axis=1))


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
