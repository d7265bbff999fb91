"""Whole-toss evaluation: every toss simulated from its first recorded state, its position error.

:func:`rollout_tosses` rolls whole tosses out with the segments' prediction
(:func:`~experiments.contactnets.predict_segments`), tosses of different lengths padded to one length
(:func:`pad_tosses`) and masked: one program per set of tosses, not one per length.
:func:`trajectory_error` reports the mean position error in mm over the recorded samples. Given
``devices`` (e.g. ``jax.devices()``, every process's when several run), both split the tosses over
them (:func:`~diffmjx.sysid.batch_sharding`, the set padded to a multiple of the device count) and
return the whole result on every process.
"""

import functools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from diffmjx.config import Config
from diffmjx.sysid.distributed import batch_sharding, replicate, sharded_rows
from experiments.contactnets.config import SysidConfig
from experiments.contactnets.data import Toss
from experiments.contactnets.loss import predict_segments
from experiments.contactnets.model import CubeParams, options_model

__all__ = ["pad_tosses", "rollout_tosses", "trajectory_error"]


def pad_tosses(tosses: Mapping[str, Toss] | Sequence[Toss]):
    """Tosses of different lengths as one padded batch.

    Returns:
        ``(qpos, qvel, mask)``: (K, L, 7), (K, L, 6) and boolean (K, L) arrays, L the longest
        toss's length; padded samples repeat the toss's last state and are False in ``mask``.
    """
    items = list(tosses.values()) if isinstance(tosses, Mapping) else list(tosses)
    if not items:
        raise ValueError("no tosses given")
    length = max(t.qpos.shape[0] for t in items)
    qpos = np.zeros((len(items), length, 7))
    qvel = np.zeros((len(items), length, 6))
    mask = np.zeros((len(items), length), bool)
    for i, t in enumerate(items):
        n = t.qpos.shape[0]
        qpos[i, :n], qvel[i, :n], mask[i, :n] = t.qpos, t.qvel, True
        qpos[i, n:], qvel[i, n:] = t.qpos[-1], t.qvel[-1]
    return qpos, qvel, mask


# the segments' prediction, compiled once per padded length and simulation config; vmapped: a group holds
# tosses of similar length (sorted), so lock-step costs little, and the published errors were measured so
_toss_rollout = jax.jit(functools.partial(predict_segments, batching="vmap"), static_argnames=("horizon", "cfg"))


def _sim_and_iterations(cfg: SysidConfig | Config) -> tuple[Config, int]:
    if isinstance(cfg, SysidConfig):
        return cfg.sim, cfg.iterations
    if isinstance(cfg, Config):
        return cfg, SysidConfig(sim=cfg).iterations
    raise ValueError(f"cfg must be a SysidConfig or a diffmjx.Config, got {type(cfg).__name__}")


def _gather(x: jax.Array) -> np.ndarray:
    """The whole array on this process (an all-gather when other processes hold parts of it)."""
    return np.asarray(x if x.is_fully_addressable else multihost_utils.process_allgather(x, tiled=True))


def rollout_tosses(
    params: CubeParams,
    tosses: Mapping[str, Toss] | Sequence[Toss],
    cfg: SysidConfig | Config,
    *,
    devices: Sequence | None = None,
):
    """Simulate every toss from its first recorded state, all in one padded, vmapped rollout.

    Arguments:
        params: physical :class:`~experiments.contactnets.CubeParams`.
        tosses: :class:`~experiments.contactnets.Toss` objects (a mapping or a sequence), each of 2 or more samples.
        cfg: a :class:`SysidConfig` (its ``sim`` and model iterations) or a :class:`diffmjx.Config`
            (iterations 4 for ``mjx_*`` solvers, else 2).
        devices: None: one device, unsharded. A list (e.g. ``jax.devices()``): the tosses split
            over them, each process placing its own share; every process passes the same tosses
            and gets the whole result. With the adaptive default the result depends on the layout
            at the tolerance's level (docs/sysid.md, Sharp bits); with fixed steps it agrees to rounding.

    Returns:
        ``(qpos, qvel, mask)``: simulated states (K, L, 7) and (K, L, 6) at the recording's sample
        times (index 0 is the recorded first state) and the (K, L) mask of recorded samples.
    """
    sim, iterations = _sim_and_iterations(cfg)
    qpos, qvel, mask = pad_tosses(tosses)
    if qpos.shape[1] < 2:
        raise ValueError("tosses need two or more samples to be rolled out")
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
    horizon = qpos.shape[1] - 1
    if devices is None:
        pq, pv = _toss_rollout(params, options_model(iterations), qpos[:, 0], qvel[:, 0], horizon=horizon, cfg=sim)
    else:
        devices = list(devices)
        k = qpos.shape[0]
        idx = np.minimum(np.arange(-(-k // len(devices)) * len(devices)), k - 1)  # pad with the last toss
        batch, replicated = batch_sharding(len(idx), devices)
        p, base = replicate((params, options_model(iterations)), replicated)
        out = _toss_rollout(
            p,
            base,
            sharded_rows(qpos[:, 0], idx, batch),
            sharded_rows(qvel[:, 0], idx, batch),
            horizon=horizon,
            cfg=sim,
        )
        pq, pv = (_gather(x)[:k] for x in out)
    pq = np.concatenate([qpos[:, :1], np.asarray(pq)], axis=1)
    pv = np.concatenate([qvel[:, :1], np.asarray(pv)], axis=1)
    return pq, pv, mask


def trajectory_error(
    params: CubeParams,
    tosses: Mapping[str, Toss] | Sequence[Toss],
    cfg: SysidConfig | Config,
    *,
    per_toss: bool = False,
    devices: Sequence | None = None,
):
    """Mean position error (mm) of whole-toss rollouts from each toss's first state.

    The error of a sample is the Euclidean distance between simulated and recorded centre
    positions; it is averaged over every recorded sample after the first, padded ones masked out
    (so a long toss weighs more than a short one).

    Arguments:
        params, tosses, cfg, devices: as :func:`rollout_tosses`.
        per_toss: also return each toss's own mean.

    Returns:
        The mean error in mm, or ``(mean, per_toss_means)`` with ``per_toss``.
    """
    items = list(tosses.values()) if isinstance(tosses, Mapping) else list(tosses)
    pq, _, mask = rollout_tosses(params, items, cfg, devices=devices)
    rec, _, _ = pad_tosses(items)
    err = 1e3 * np.linalg.norm(pq[:, 1:, :3] - rec[:, 1:, :3], axis=-1)
    valid = mask[:, 1:]
    mean = float(np.sum(err * valid) / np.sum(valid))
    if per_toss:
        return mean, np.sum(err * valid, axis=1) / np.maximum(np.sum(valid, axis=1), 1)
    return mean
