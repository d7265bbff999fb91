r"""The segment loss: predicted toss segments against recorded ones, one residual for every fit.

A *segment* is ``horizon + 1`` consecutive recorded states (:func:`diffmjx.sysid.segments`); from
its first state :func:`predict_segments` rolls the cube built by
:func:`~diffmjx.sysid.cube_mjx_model` out over the next ``N = horizon`` control periods with
:func:`diffmjx.rollout`, batched over the segments (:func:`map_segments`: one segment after another on a
CPU, ``vmap`` on an accelerator). :func:`state_residuals` compares each
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

BATCHINGS = ("auto", "vmap", "map")
"""How :func:`map_segments` runs a batch: ``vmap``, ``map`` (one after another) or ``auto``."""


def resolve_batching(batching: str, cfg: Config) -> str:
    """``auto`` made concrete: ``map`` for an adaptive integrator on a CPU, else ``vmap``.

    Only adaptive solves differ in length between segments; fixed steps (MJX's integrators,
    ``step_control=constant``) run the same count everywhere, where ``vmap`` is the faster (a
    fixed-step Fig. 9 step of 16 segments: 8-10 ms vmapped, 19-35 ms mapped, on 2 CPU cores).
    """
    if batching not in BATCHINGS:
        raise ValueError(f"batching={batching!r} is not allowed; choose one of: {', '.join(BATCHINGS)}")
    if batching != "auto":
        return batching
    ic = cfg.integrator
    adaptive = ic.step_control == "pid" and not ic.solver.startswith("mjx_")
    return "map" if adaptive and jax.default_backend() == "cpu" else "vmap"


def map_segments(fn, xs, batching: str = "auto", chunks: int = 1):
    """``fn`` applied to every row of the arrays ``xs``, stacked: ``vmap``, or one row after another.

    Segments of one minibatch differ in stiffness: an adaptive solve of a resting cube takes ten
    times the steps of one in flight. Under ``vmap`` every segment runs in lock-step until the
    slowest finishes (and each solver iteration until the slowest converges), which an
    accelerator's parallel lanes pay for gladly and a CPU does not: there ``map`` (``lax.map``, each
    segment its own step count) ran a sysid gradient of 64 segments 2.4x faster than ``vmap``
    (converged solve, ``deepest`` rule; docs/sysid.md). Results agree to the solve's tolerance, not
    bitwise (the batched kernels round differently, and the step controller follows).
    :func:`resolve_batching` chooses between the two from a simulation config.

    Arguments:
        fn: function of one row of each array in ``xs``.
        xs: tuple of arrays with a common leading (batch) axis.
        batching: ``vmap`` or ``map`` (``auto`` is resolved by :func:`resolve_batching`).
        chunks: with ``map``, the batch is cut into this many equal chunks that are vmapped (each
            run one row after another): one per device when the batch axis is sharded, so each
            device maps over its own rows. Ignored unless it divides the batch.

    Returns:
        ``fn``'s outputs with the batch axis in front.
    """
    if batching not in ("vmap", "map"):
        raise ValueError(f"batching={batching!r} is not allowed here; choose vmap or map (resolve_batching resolves auto)")
    if batching == "vmap":
        return jax.vmap(fn)(*xs)
    b = jnp.shape(xs[0])[0]
    if chunks <= 1 or b % chunks:
        return jax.lax.map(lambda row: fn(*row), tuple(xs))
    split = tuple(jnp.reshape(x, (chunks, b // chunks, *jnp.shape(x)[1:])) for x in xs)
    out = jax.vmap(lambda *c: jax.lax.map(lambda row: fn(*row), c))(*split)
    return jax.tree.map(lambda y: jnp.reshape(y, (b, *y.shape[2:])), out)


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


def predict_segments(params: CubeParams, base, qpos0, qvel0, horizon: int, cfg: Config, *, batching: str = "auto",
                     chunks: int = 1):  # fmt: skip
    """The ``horizon`` states after each initial state, simulated with ``params``.

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``: the options.
        qpos0, qvel0: (B, 7) and (B, 6) initial states.
        horizon: N, control periods to simulate.
        cfg: the simulation's :class:`diffmjx.Config`.
        batching, chunks: how the B rollouts run (:func:`map_segments`; ``auto`` as
            :func:`resolve_batching` says).

    Returns:
        ``(qpos, qvel)`` of shapes (B, N, 7) and (B, N, 6).
    """
    m = cube_mjx_model(params, base)
    d0 = mjx.make_data(base)
    ctrls = jnp.zeros((horizon, 0), d0.qpos.dtype)

    def one(qpos, qvel):
        _, traj = rollout(m, d0.replace(qpos=qpos, qvel=qvel), ctrls, cfg)
        return traj.qpos, traj.qvel

    return map_segments(one, (jnp.asarray(qpos0), jnp.asarray(qvel0)), resolve_batching(batching, cfg), chunks)


def _segment_state_residuals(params: CubeParams, base, qpos, qvel, cfg: Config, velocity_weight, batching, chunks):
    """(B, N, 18) :func:`state_residuals` of the N states predicted from each segment's first."""
    qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
    pq, pv = predict_segments(params, base, qpos[:, 0], qvel[:, 0], qpos.shape[1] - 1, cfg, batching=batching,
                              chunks=chunks)  # fmt: skip
    return state_residuals(pq, pv, qpos[:, 1:], qvel[:, 1:], velocity_weight)


def segment_loss(params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0, batching: str = "auto",
                 chunks: int = 1):  # fmt: skip
    """Mean squared error of the predicted segment states (see the module docstring).

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``.
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) recorded segments
            (:class:`~diffmjx.sysid.Segments` fields); state 0 starts the prediction.
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


def segment_residuals(params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0, batching: str = "auto",
                      chunks: int = 1):  # fmt: skip
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
