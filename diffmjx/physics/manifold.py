r"""Lie-group stage maps for free and ball joints.

Within one control period DiffMJX integrates positions in *local coordinates* around the period's
start configuration :math:`q_0`: the ODE state holds :math:`\xi \in \mathbb{R}^{n_v}` and the
configuration is :math:`q = q_0 \boxplus \xi` (``retract``). Hinge, slide and the translation of free
joints are linear, :math:`q = q_0 + \xi`. A ball or free-joint orientation is
:math:`q = q_0 \otimes \operatorname{Exp}(\xi)`, with MuJoCo's convention that the angular velocity
of these joints is expressed in the body (child) frame.

Because :math:`\omega = J_r(\xi)\,\dot\xi`, the local-coordinate ODE is
:math:`\dot\xi = J_r^{-1}(\xi)\,\omega` (``dexp_inv``). Any Runge--Kutta method applied to this
ODE is a Runge--Kutta--Munthe-Kaas method: every stage lies exactly on the unit-quaternion manifold
and the method keeps its classical order, with no renormalisation and no R^4 drift.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx


@dataclasses.dataclass(frozen=True, eq=False)
class JointLayout:
    """Static index maps between qpos (size nq) and tangent vectors (size nv)."""

    nq: int
    nv: int
    lin_q: np.ndarray  # qpos entries that move linearly
    lin_v: np.ndarray  # their dofs
    quat_q: np.ndarray  # (k, 4) qpos entries of each quaternion (w, x, y, z)
    quat_v: np.ndarray  # (k, 3) dofs of each body-frame angular velocity

    @classmethod
    def from_model(cls, m) -> JointLayout:
        lin_q, lin_v, quat_q, quat_v = [], [], [], []
        for j, typ in enumerate(np.asarray(m.jnt_type)):
            qa, va = int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])
            if typ == _mjx.JointType.FREE:
                lin_q += [qa, qa + 1, qa + 2]
                lin_v += [va, va + 1, va + 2]
                quat_q.append(list(range(qa + 3, qa + 7)))
                quat_v.append(list(range(va + 3, va + 6)))
            elif typ == _mjx.JointType.BALL:
                quat_q.append(list(range(qa, qa + 4)))
                quat_v.append(list(range(va, va + 3)))
            else:
                lin_q.append(qa)
                lin_v.append(va)
        as_idx = lambda x, shape: np.asarray(x, dtype=np.int32).reshape(shape)
        return cls(
            nq=int(m.nq),
            nv=int(m.nv),
            lin_q=as_idx(lin_q, (-1,)),
            lin_v=as_idx(lin_v, (-1,)),
            quat_q=as_idx(quat_q, (-1, 4)),
            quat_v=as_idx(quat_v, (-1, 3)),
        )


def _safe_norm(v, axis=-1):
    """Norm with a finite derivative at zero (double-where)."""
    sq = jnp.sum(v * v, axis=axis)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def _hamilton_tensor() -> np.ndarray:
    """P with (u v)_i = sum_jk P_ijk u_j v_k for quaternions (w, x, y, z)."""
    p = np.zeros((4, 4, 4))
    p[0, 0, 0] = 1  # u v = (u0 v0 - u.v, u0 v + v0 u + u x v)
    for i in range(1, 4):
        p[0, i, i] = -1
        p[i, 0, i] = 1
        p[i, i, 0] = 1
    for i, j, k in ((1, 2, 3), (2, 3, 1), (3, 1, 2)):
        p[i, j, k] = 1
        p[i, k, j] = -1
    return p


_HAMILTON = _hamilton_tensor()


def quat_mul(u, v):
    """Hamilton product of (..., 4) quaternions in (w, x, y, z) order, as one contraction with a
    constant tensor: no scalar slices, so its reverse-mode derivative is the same contraction rather
    than a pad per component (docs/speed.md)."""
    return jnp.einsum("ijk,...j,...k->...i", jnp.asarray(_HAMILTON, jnp.result_type(u, v)), u, v)


def quat_exp(phi):
    """Unit quaternion of the rotation vector ``phi`` (..., 3): (cos |phi|/2, sin(|phi|/2) phi/|phi|)."""
    theta = _safe_norm(phi)
    half = 0.5 * theta
    small = theta < 1e-4
    t_safe = jnp.where(small, 1.0, theta)
    # sin(theta/2)/theta, with its Taylor series near zero
    s = jnp.where(small, 0.5 - theta**2 / 48.0, jnp.sin(half) / t_safe)
    return jnp.concatenate([jnp.cos(half)[..., None], s[..., None] * phi], axis=-1)


def quat_to_mat(q, *, xp=jnp):
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) (w, x, y, z; normalised first);
    ``xp``: ``jax.numpy`` (default) or ``numpy``."""
    q = q / xp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = (q[..., i] for i in range(4))
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def quat_log(q, *, xp=jnp):
    """Rotation vector (..., 3) of unit quaternions (..., 4) (w, x, y, z): axis times angle in
    [0, pi], with finite derivatives at the identity (``xp``: ``jax.numpy`` or ``numpy``)."""
    q = q * xp.where(q[..., :1] < 0, -1.0, 1.0)  # the shorter way round
    w, v = q[..., 0], q[..., 1:]
    n2 = xp.sum(v * v, axis=-1)
    small = n2 < 1e-16
    n = xp.sqrt(xp.where(small, 1.0, n2))
    w_safe = xp.where(small, 1.0, w)
    scale = xp.where(small, 2.0 / xp.where(small, w, 1.0) * (1.0 - n2 / 3.0), 2.0 * xp.arctan2(n, w_safe) / n)
    return v * scale[..., None]


def quat_conj_mul(u, v):
    """``conj(u) * v`` of (..., 4) unit quaternions: the rotation from ``u`` to ``v`` in ``u``'s frame."""
    return quat_mul(u * jnp.array([1.0, -1.0, -1.0, -1.0], dtype=u.dtype), v)


def _skew(w):
    x, y, z = jnp.moveaxis(w, -1, 0)
    o = jnp.zeros_like(x)
    return jnp.stack([jnp.stack([o, -z, y], -1), jnp.stack([z, o, -x], -1), jnp.stack([-y, x, o], -1)], -2)


def right_jacobian_inv(phi):
    r"""Inverse right Jacobian of SO(3): :math:`J_r^{-1}(\phi) = I + \tfrac12[\phi]_\times + c(\theta)[\phi]_\times^2`."""
    theta = _safe_norm(phi)
    small = theta < 1e-3
    t = jnp.where(small, 1.0, theta)
    c = jnp.where(
        small,
        1.0 / 12.0 + theta**2 / 720.0,
        1.0 / t**2 - (1.0 + jnp.cos(t)) / (2.0 * t * jnp.sin(t)),
    )
    k = _skew(phi)
    eye = jnp.eye(3, dtype=phi.dtype)
    return eye + 0.5 * k + c[..., None, None] * (k @ k)


def retract(layout: JointLayout, qpos0, xi):
    """Configuration ``qpos0 ⊞ xi``: linear joints add, quaternions right-multiply by Exp(xi)."""
    q = qpos0
    if layout.lin_q.size:
        q = q.at[layout.lin_q].add(xi[layout.lin_v])
    if layout.quat_q.size:
        quats = quat_mul(qpos0[layout.quat_q], quat_exp(xi[layout.quat_v]))
        q = q.at[layout.quat_q].set(quats)
    return q


def difference(layout: JointLayout, qpos0, qpos1):
    """Tangent vector ``xi`` (size nv) with ``retract(layout, qpos0, xi) == qpos1``: linear joints
    subtract, quaternions give ``Log(conj(q0) q1)`` (body frame, the shorter way round), MuJoCo's
    ``mj_differentiatePos`` convention times the time step."""
    xi = jnp.zeros(layout.nv, dtype=jnp.result_type(qpos0, qpos1))
    if layout.lin_q.size:
        xi = xi.at[layout.lin_v].set(qpos1[layout.lin_q] - qpos0[layout.lin_q])
    if layout.quat_q.size:
        rel = quat_conj_mul(qpos0[layout.quat_q], qpos1[layout.quat_q])
        xi = xi.at[layout.quat_v].set(quat_log(rel))
    return xi


def dexp_inv(layout: JointLayout, xi, qvel):
    """Local-coordinate velocity ``xi_dot`` that moves ``qpos0 ⊞ xi`` with generalized velocity qvel."""
    if not layout.quat_q.size:
        return qvel
    omega = qvel[layout.quat_v]
    rot = jnp.einsum("kij,kj->ki", right_jacobian_inv(xi[layout.quat_v]), omega)
    return qvel.at[layout.quat_v].set(rot)


def normalize_quats(layout: JointLayout, qpos):
    """Project every joint quaternion back to unit norm (guards round-off across many periods)."""
    if not layout.quat_q.size:
        return qpos
    quats = qpos[layout.quat_q]
    return qpos.at[layout.quat_q].set(quats / _safe_norm(quats)[..., None])
