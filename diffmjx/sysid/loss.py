r"""The segment loss: predicted toss segments against recorded ones, one residual for every fit.

A *segment* is ``horizon + 1`` consecutive recorded states (:func:`diffmjx.sysid.segments`); from
its first state :func:`predict_segments` rolls the cube built by
:func:`~diffmjx.sysid.cube_mjx_model` out over the next ``N = horizon`` control periods with
:func:`diffmjx.rollout`, vmapped over the segments. :func:`state_residuals` compares each
predicted state with the recorded one: position error (3, m), rotation-matrix difference (9,
orientations compared as rotation matrices, so no quaternion sign ambiguity) and
``sqrt(velocity_weight)`` times the free joint's velocity error (6). It is the one residual of
the three fits: :func:`segment_loss` (Adam, :func:`diffmjx.sysid.train`) is the mean over
segments and predicted states of its squared norm,

    |p - p_rec|^2 + ||R(q) - R(q_rec)||_F^2 + velocity_weight * |qvel - qvel_rec|^2,

:func:`segment_residuals` (Levenberg–Marquardt, :func:`diffmjx.sysid.fit_lm`) is it flattened and
scaled by ``1 / sqrt(B N)`` so that its sum of squares is :func:`segment_loss`, and the
``mujoco.sysid`` peer (:func:`diffmjx.sysid.fit_mujoco_sysid`) applies it in NumPy
(``xp=numpy``) to C-engine rollouts. The paper uses position and rotation matrix only
(``train.velocity_weight`` 0).
"""

import jax
import jax.numpy as jnp

from diffmjx._mjx import mjx
from diffmjx.config import Config
from diffmjx.integrate import rollout
from diffmjx.sysid.model import CubeParams, cube_mjx_model

__all__ = ["predict_segments", "quat_to_mat", "segment_loss", "segment_residuals", "state_residuals"]

_PARTS = (slice(0, 3), slice(3, 12), slice(12, 18))  # position, rotation matrix, velocity of a state's residual


def quat_to_mat(q, *, xp=jnp):
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) in (w, x, y, z) order (normalised first).

    Arguments:
        q: quaternions, a JAX array (traced or not) or, with ``xp=numpy``, a NumPy array.
        xp: the array module that computes: ``jax.numpy`` (default) or ``numpy``.
    """
    q = q / xp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = (q[..., i] for i in range(4))
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def state_residuals(qpos, qvel, qpos_rec, qvel_rec, velocity_weight=0.0, *, xp=jnp):
    """Residual of predicted free-joint states against recorded ones, per state and component.

    Arguments:
        qpos, qvel: (..., 7) and (..., 6) predicted states.
        qpos_rec, qvel_rec: the recorded states, same shapes.
        velocity_weight: weight of the squared velocity error (may be traced).
        xp: the array module that computes: ``jax.numpy`` (default) or ``numpy``.

    Returns:
        A (..., 18) array per state: position error (3, m), rotation-matrix difference (9, row
        major) and ``sqrt(velocity_weight)`` times the velocity error (6); its squared norm is
        ``|dp|^2 + ||dR||_F^2 + velocity_weight |dqvel|^2``.
    """
    pos = qpos[..., :3] - qpos_rec[..., :3]
    rot = quat_to_mat(qpos[..., 3:7], xp=xp) - quat_to_mat(qpos_rec[..., 3:7], xp=xp)
    vel = xp.sqrt(velocity_weight) * (qvel - qvel_rec)
    return xp.concatenate([pos, rot.reshape(*rot.shape[:-2], 9), vel], axis=-1)


def predict_segments(params: CubeParams, base, qpos0, qvel0, horizon: int, cfg: Config):
    """The ``horizon`` states after each initial state, simulated with ``params``.

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``: the options.
        qpos0, qvel0: (B, 7) and (B, 6) initial states.
        horizon: N, control periods to simulate.
        cfg: the simulation's :class:`diffmjx.Config`.

    Returns:
        ``(qpos, qvel)`` of shapes (B, N, 7) and (B, N, 6).
    """
    m = cube_mjx_model(params, base)
    d0 = mjx.make_data(base)
    ctrls = jnp.zeros((horizon, 0), d0.qpos.dtype)

    def one(qpos, qvel):
        _, traj = rollout(m, d0.replace(qpos=qpos, qvel=qvel), ctrls, cfg)
        return traj.qpos, traj.qvel

    return jax.vmap(one)(jnp.asarray(qpos0), jnp.asarray(qvel0))


def _segment_state_residuals(params: CubeParams, base, qpos, qvel, cfg: Config, velocity_weight):
    """(B, N, 18) :func:`state_residuals` of the N states predicted from each segment's first."""
    qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
    pq, pv = predict_segments(params, base, qpos[:, 0], qvel[:, 0], qpos.shape[1] - 1, cfg)
    return state_residuals(pq, pv, qpos[:, 1:], qvel[:, 1:], velocity_weight)


def segment_loss(params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0):
    """Mean squared error of the predicted segment states (see the module docstring).

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``.
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) recorded segments
            (:class:`~diffmjx.sysid.Segments` fields); state 0 starts the prediction.
        cfg: the simulation's :class:`diffmjx.Config`.
        velocity_weight: weight of the squared velocity error (may be traced).

    Returns:
        The scalar loss: mean over segments and the N predicted states of the squared norm of
        :func:`state_residuals`.
    """
    sq = _segment_state_residuals(params, base, qpos, qvel, cfg, velocity_weight) ** 2
    # position, rotation and velocity summed apart, then added: the loss's order of summation, so its
    # value and gradient with velocity_weight 0 (every study's) are bit for bit those of the committed results
    pos, rot, vel = (jnp.sum(sq[..., part], axis=-1) for part in _PARTS)
    return jnp.mean(pos + rot + vel)


def segment_residuals(params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0):
    """Residuals of the predicted segment states, flat: ``sum(r**2)`` equals :func:`segment_loss`.

    :func:`state_residuals` of every predicted state, divided by ``sqrt(B * N)``.

    Arguments:
        params, base, qpos, qvel, cfg, velocity_weight: as :func:`segment_loss`.

    Returns:
        A (B * N * 18,) array.
    """
    r = _segment_state_residuals(params, base, qpos, qvel, cfg, velocity_weight)
    b, n = r.shape[:2]
    return r.ravel() / jnp.sqrt(b * n)
