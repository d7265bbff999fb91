r"""The segment loss: predicted toss segments against recorded ones, one residual for every fit.

A *segment* is ``horizon + 1`` consecutive recorded states (:func:`experiments.contactnets.segments`); from
its first state :func:`predict_segments` rolls the cube built by
:func:`~experiments.contactnets.cube_mjx_model` out over the next ``N = horizon`` control periods with
:func:`diffmjx.rollout`, batched over the segments (:func:`map_segments`: one segment after another on a
CPU, ``vmap`` on an accelerator). :func:`state_residuals` compares each
predicted state with the recorded one: position error (3, m), rotation-matrix difference (9,
orientations compared as rotation matrices, so no quaternion sign ambiguity) and
``sqrt(velocity_weight)`` times the free joint's velocity error (6). It is the one residual of
the three fits: :func:`segment_loss` (Adam, :func:`experiments.contactnets.train`) is the mean over
segments and predicted states of its squared norm,

    |p - p_rec|^2 + ||R(q) - R(q_rec)||_F^2 + velocity_weight * |qvel - qvel_rec|^2,

:func:`segment_residuals` (Levenberg–Marquardt, :func:`experiments.contactnets.fit_lm`) is it flattened and
scaled by ``1 / sqrt(B N)`` so that its sum of squares is :func:`segment_loss`, and the
``mujoco.sysid`` peer (:func:`experiments.contactnets.fit_mujoco_sysid`) applies it in NumPy
(``xp=numpy``) to C-engine rollouts. The paper uses position and rotation matrix only
(``train.velocity_weight`` 0).
"""

import jax.numpy as jnp
import numpy as np

from diffmjx.config import Config
from diffmjx.physics import manifold
from diffmjx.sysid import problem
from diffmjx.sysid.problem import BATCHINGS, map_segments, resolve_batching
from experiments.contactnets.model import CubeParams, cube_mjx_model

__all__ = [
    "BATCHINGS",
    "map_segments",
    "predict_segments",
    "quat_to_mat",
    "resolve_batching",
    "segment_loss",
    "segment_residuals",
    "state_residuals",
]

_PARTS = (slice(0, 3), slice(3, 12), slice(12, 18))  # position, rotation matrix, velocity of a state's residual
_FREE = manifold.JointLayout(nq=7, nv=6, lin_q=np.arange(3), lin_v=np.arange(3), quat_q=np.arange(3, 7)[None],
                             quat_v=np.arange(3, 6)[None])  # fmt: skip  # one free joint: the cube's


def quat_to_mat(q, *, xp=jnp):
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) in (w, x, y, z) order (normalised first).

    Arguments:
        q: quaternions, a JAX array (traced or not) or, with ``xp=numpy``, a NumPy array.
        xp: the array module that computes: ``jax.numpy`` (default) or ``numpy``.
    """
    return manifold.quat_to_mat(q, xp=xp)


def state_residuals(qpos, qvel, qpos_rec, qvel_rec, velocity_weight=0.0, *, xp=jnp):
    """Residual of predicted free-joint states against recorded ones, per state and component:
    :func:`diffmjx.sysid.problem.state_residuals` of one free joint with the rotation-matrix metric.

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
    w = problem.Weights(position=1.0, orientation=1.0, velocity=1.0, orientation_metric="matrix")
    r = problem.state_residuals(_FREE, qpos, qvel, qpos_rec, qvel_rec, w, xp=xp)
    return xp.concatenate([r[..., :12], xp.sqrt(velocity_weight) * r[..., 12:]], axis=-1)


def predict_segments(
    params: CubeParams, base, qpos0, qvel0, horizon: int, cfg: Config, *, batching: str = "auto", chunks: int = 1
):
    """The ``horizon`` states after each initial state, simulated with ``params``
    (:func:`diffmjx.sysid.problem.predict` of :func:`~experiments.contactnets.cube_mjx_model`, no controls).

    Arguments:
        params: physical :class:`~experiments.contactnets.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``: the options.
        qpos0, qvel0: (B, 7) and (B, 6) initial states.
        horizon: N, control periods to simulate.
        cfg: the simulation's :class:`diffmjx.Config`.
        batching, chunks: how the B rollouts run (:func:`map_segments`; ``auto`` as
            :func:`resolve_batching` says).

    Returns:
        ``(qpos, qvel)`` of shapes (B, N, 7) and (B, N, 6).
    """
    qpos0 = jnp.asarray(qpos0)
    b = qpos0.shape[0]
    empty = jnp.zeros((b, 0), qpos0.dtype)
    ctrl = jnp.zeros((b, horizon, 0), qpos0.dtype)
    qpos, qvel, _ = problem.predict(
        cube_mjx_model(params, base), base, qpos0, qvel0, empty, ctrl, cfg, batching=batching, chunks=chunks
    )
    return qpos, qvel


def _segment_state_residuals(params: CubeParams, base, qpos, qvel, cfg: Config, velocity_weight, batching, chunks):
    """(B, N, 18) :func:`state_residuals` of the N states predicted from each segment's first."""
    qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
    pq, pv = predict_segments(
        params, base, qpos[:, 0], qvel[:, 0], qpos.shape[1] - 1, cfg, batching=batching, chunks=chunks
    )
    return state_residuals(pq, pv, qpos[:, 1:], qvel[:, 1:], velocity_weight)


def segment_loss(
    params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0, batching: str = "auto", chunks: int = 1
):
    """Mean squared error of the predicted segment states (see the module docstring).

    Arguments:
        params: physical :class:`~experiments.contactnets.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``.
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) recorded segments
            (:class:`~experiments.contactnets.Segments` fields); state 0 starts the prediction.
        cfg: the simulation's :class:`diffmjx.Config`.
        velocity_weight: weight of the squared velocity error (may be traced).
        batching, chunks: how the segments run (:func:`map_segments`).

    Returns:
        The scalar loss: mean over segments and the N predicted states of the squared norm of
        :func:`state_residuals`.
    """
    sq = _segment_state_residuals(params, base, qpos, qvel, cfg, velocity_weight, batching, chunks) ** 2
    # position, rotation and velocity summed apart, then added: the loss's order of summation, so its
    # value and gradient with velocity_weight 0 (every study's) are bit for bit those of the committed results
    pos, rot, vel = (jnp.sum(sq[..., part], axis=-1) for part in _PARTS)
    return jnp.mean(pos + rot + vel)


def segment_residuals(
    params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0, batching: str = "auto", chunks: int = 1
):
    """Residuals of the predicted segment states, flat: ``sum(r**2)`` equals :func:`segment_loss`.

    :func:`state_residuals` of every predicted state, divided by ``sqrt(B * N)``.

    Arguments:
        params, base, qpos, qvel, cfg, velocity_weight, batching, chunks: as :func:`segment_loss`.

    Returns:
        A (B * N * 18,) array.
    """
    r = _segment_state_residuals(params, base, qpos, qvel, cfg, velocity_weight, batching, chunks)
    b, n = r.shape[:2]
    return r.ravel() / jnp.sqrt(b * n)
