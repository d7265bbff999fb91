r"""DiffMJX's view of MJX's ``kinematics`` and ``com_pos``: the same values, written for a cheap derivative.

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
  (``cinert``) for all dofs and bodies at once, from static index arrays of the kinematic tree.

MJX still runs what is a walk down the tree (the bodies' poses, joint anchors and axes) and the
subtree centres of mass; its own per-body results that are computed again here are not used, so XLA
drops them. Values equal MJX's to rounding (the sums run in another order); the derivative is
JAX's derivative of these expressions, which is the rule: for a contraction with a constant tensor
it is the same contraction, so nothing is written by hand. ``tests/test_smooth.py`` checks values
and both modes' derivatives against MJX's own stages.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.manifold import quat_mul

__all__ = ["com_pos", "kinematics", "local_to_global", "unit_quat_to_mat"]


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
    """MJX's ``kinematics``; the inertial frames, geoms and sites placed by :func:`local_to_global`."""
    d = _mjx.kinematics(m, d)
    xipos, ximat = local_to_global(d.xpos, d.xquat, m.body_ipos, m.body_iquat)
    d = d.replace(xipos=xipos, ximat=ximat)
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
