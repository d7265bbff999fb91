r"""Identify the cube's parameters from toss segments with Adam: the loop, its sharding and checkpoints.

The loop follows the paper's App. E.2. :func:`train` runs Adam (optax's ``scale_by_adam``, b1 0.5,
b2 0.9, eps 1e-6, the paper's settings, times ``-train.learning_rate``) on the segment loss
(:func:`~experiments.contactnets.segment_loss`) over the unconstrained coordinates
(:func:`~experiments.contactnets.to_unconstrained`) of the free parameters only; the others stay at their
initial values. Minibatches are drawn without replacement from a permutation seeded by
``(train.seed, epoch)``, sharded over every visible device (a 1-D mesh on the batch axis,
:func:`batch_sharding`), and the state (parameters, optimiser state, history) is checkpointed after
every step, so a run that is stopped (or run in pieces, ``stop_after``) resumes after its last
finished step and ends exactly where an uninterrupted one does. The segments of a minibatch are
simulated one after another on a CPU and in lock-step on a GPU (``train.batching``). The loop is the
library's one Adam loop (:func:`diffmjx.sysid.train.adam_loop`, also :func:`diffmjx.sysid.identify`'s);
what is the study's is its coordinates, its loss and its history of :class:`CubeParams`.

Several processes (:func:`diffmjx.sysid.distributed.initialize`) run the same loop: every process
draws the same permutation, places only its own devices' rows of each minibatch, and receives the
same all-reduced loss and gradient; process 0 alone writes the checkpoint and shows the progress bar.

All knobs sit in :class:`~experiments.contactnets.SysidConfig`: sections ``data``
(:class:`~experiments.contactnets.DataConfig`), ``train`` (:class:`~experiments.contactnets.TrainConfig`) and ``sim``
(the simulation's :class:`diffmjx.Config`).

Why one file of this length: the Adam loop, its minibatch schedule, sharding and checkpoints are
one resumable loop whose state is saved and restored as a whole.
"""

import functools
import hashlib
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from diffmjx.config import Config
from diffmjx.sysid.distributed import batch_sharding, replicate
from diffmjx.sysid.train import ADAM, adam_loop
from experiments.contactnets.config import FREE_PARAMS, SysidConfig
from experiments.contactnets.data import Segments, load_split, segments
from experiments.contactnets.loss import segment_loss
from experiments.contactnets.model import PARAM_SHAPES, CubeParams, from_unconstrained, options_model, to_unconstrained

__all__ = ["CHECKPOINT", "History", "TrainResult", "train"]

CHECKPOINT = "checkpoint.npz"


class History(NamedTuple):
    """One entry per optimiser step (steps numbered from 1 over all epochs)."""

    step: np.ndarray  # (S,) int
    epoch: np.ndarray  # (S,) int, from 0
    loss: np.ndarray  # (S,) minibatch loss at the parameters *before* the step
    params: CubeParams  # physical parameters *after* the step, each field stacked (S, ...)
    wall_s: np.ndarray  # (S,) wall time of the step (the first of a process includes the JIT)


class TrainResult(NamedTuple):
    """What :func:`train` returns."""

    params: CubeParams  # final physical parameters (NumPy)
    history: History
    resumed_epochs: int  # whole epochs read from a checkpoint (0: started fresh)
    resumed_steps: int = 0  # steps read from a checkpoint (0: started fresh)


@functools.cache
def _step_fn(sim: Config, batching: str = "auto", chunks: int = 1):
    """One jitted Adam step ``(theta, opt_state, lr, fixed, vw, base, qpos, qvel) -> (theta, opt_state, loss, grad)``.

    ``theta`` holds the free parameters' unconstrained coordinates and ``fixed`` the others; the
    learning rate and velocity weight are arguments, so neither costs a compilation."""
    scale = optax.scale_by_adam(**ADAM)

    def loss(theta, fixed, vw, base, qpos, qvel):
        params = from_unconstrained(CubeParams(**fixed, **theta))
        return segment_loss(params, base, qpos, qvel, sim, velocity_weight=vw, batching=batching, chunks=chunks)

    def step(theta, opt_state, lr, fixed, vw, base, qpos, qvel):
        value, grad = jax.value_and_grad(loss)(theta, fixed, vw, base, qpos, qvel)
        updates, opt_state = scale.update(grad, opt_state, theta)
        theta = jax.tree.map(lambda t, u: t - lr * u, theta, updates)
        return theta, opt_state, value, grad

    return jax.jit(step)


@jax.jit
def _from_theta(theta, fixed):
    return from_unconstrained(CubeParams(**fixed, **theta))


def _physical(theta, fixed, init: CubeParams) -> CubeParams:
    """Physical parameters: the free ones from ``theta``, the fixed ones exactly as given (the model
    sees them through the unconstrained round trip, a relative 1e-16 off)."""
    now = _from_theta(theta, fixed)
    return CubeParams(
        **{n: np.asarray(getattr(init, n) if n in fixed else getattr(now, n), np.float64) for n in FREE_PARAMS}
    )


def _fingerprint(cfg: SysidConfig, qpos: np.ndarray, qvel: np.ndarray) -> str:
    """What a checkpoint must match to be resumed: the config (but epochs, checkpoint_dir, batching) and the data."""
    d = cfg.to_dict()
    # batching moves results by rounding only, like another machine: a run may resume under another
    d["train"] = {k: v for k, v in d["train"].items() if k not in ("epochs", "checkpoint_dir", "batching")}
    digest = hashlib.sha256(np.ascontiguousarray(qpos).tobytes() + np.ascontiguousarray(qvel).tobytes())
    return json.dumps({"config": d, "data": digest.hexdigest()}, sort_keys=True)


def _history(hist: dict) -> History:
    params = CubeParams(
        **{n: np.asarray(hist.get(f"params/{n}", []), np.float64).reshape((-1, *PARAM_SHAPES[n])) for n in FREE_PARAMS}
    )
    return History(
        step=np.asarray(hist["step"], np.int64),
        epoch=np.asarray(hist["epoch"], np.int64),
        loss=np.asarray(hist["loss"], np.float64),
        params=params,
        wall_s=np.asarray(hist["wall_s"], np.float64),
    )


def train(
    cfg: SysidConfig,
    data: Segments | None = None,
    *,
    progress: bool = True,
    devices: Sequence | None = None,
    desc: str = "sysid",
    stop_after: int | None = None,
) -> TrainResult:
    """Fit the free parameters to recorded segments with Adam (see the module docstring).

    Arguments:
        cfg: the :class:`SysidConfig`.
        data: training segments of ``train.horizon + 1`` states; None: the training split of
            ``data.path`` (:func:`load_split`) cut at ``data.horizon``.
        progress: show a tqdm progress bar (loss and side length in mm).
        devices: devices to shard minibatches over; default all visible (with several processes, all
            of theirs: :mod:`diffmjx.sysid.distributed`).
        desc: the progress bar's label.
        stop_after: return after this many steps of this call (the checkpoint holds them), to run a
            long fit in pieces; None: run to ``train.epochs``.

    Returns:
        :class:`TrainResult`: final physical parameters and the per-step :class:`History` (a
        resumed run's history includes the checkpointed steps).

    Raises:
        ValueError: too few segments for one minibatch or for ``train.steps_per_epoch``, a batch size
            that the devices do not divide, a checkpoint of another configuration or of more epochs,
            processes that disagree on the configuration, the data or the checkpoint.
        FloatingPointError: a non-finite loss or gradient (the last checkpoint is kept).
    """
    if not jax.config.jax_enable_x64:  # as identify warns: a whole fit in float32 is easy to miss
        warnings.warn(
            "contactnets.train runs in float32 (jax_enable_x64 is off); call diffmjx.enable_compilation_cache() "
            "(float64 and a compile cache) or jax.config.update('jax_enable_x64', True) first",
            stacklevel=2,
        )
    tc = cfg.train
    if data is None:
        tosses, train_names, _, _ = load_split(cfg.data)
        data = segments(tosses, train_names, cfg.data.horizon)
    qpos_all = np.asarray(data.qpos, np.float64)
    qvel_all = np.asarray(data.qvel, np.float64)
    if qpos_all.ndim != 3 or qpos_all.shape[1:] != (tc.horizon + 1, 7) or qvel_all.shape[:2] != qpos_all.shape[:2]:
        raise ValueError(
            f"segments of shape {qpos_all.shape} / {qvel_all.shape}; expected (S, train.horizon + 1 = "
            f"{tc.horizon + 1}, 7) and (S, {tc.horizon + 1}, 6)"
        )
    init = tc.initial_params()
    z0 = to_unconstrained(init)
    theta = {k: jnp.asarray(getattr(z0, k)) for k in tc.free}
    fixed = {k: jnp.asarray(getattr(z0, k)) for k in FREE_PARAMS if k not in tc.free}
    batch, replicated = batch_sharding(tc.batch_size, devices, knob="train.batch_size")
    step_fn = _step_fn(cfg.sim, tc.batching, batch.mesh.size)  # map: each device over its own rows
    fixed, base, lr, vw = replicate(
        (fixed, options_model(cfg.iterations), np.float64(tc.learning_rate), np.float64(tc.velocity_weight)), replicated
    )

    def step(theta, opt_state, batches):
        ((qp, qv),) = batches
        return step_fn(theta, opt_state, lr, fixed, vw, base, qp, qv)

    def record(theta) -> dict:
        now = _physical(theta, fixed, init)
        return {f"params/{n}": np.asarray(getattr(now, n)) for n in FREE_PARAMS}

    loop = adam_loop(
        step,
        theta,
        [(qpos_all, qvel_all)],
        [tc.batch_size],
        epochs=tc.epochs,
        steps_per_epoch=tc.steps_per_epoch,
        seed=tc.seed,
        fingerprint=_fingerprint(cfg, qpos_all, qvel_all),
        checkpoint_path=Path(tc.checkpoint_dir) / CHECKPOINT if tc.checkpoint_dir else None,
        devices=devices,
        progress=progress,
        desc=desc,
        stop_after=stop_after,
        record=record,
        postfix=lambda loss, rec: {"side_mm": f"{1e3 * float(rec['params/side_length']):.2f}"},
        hint="choose another train.checkpoint_dir",
        knobs={
            "batch_size": "train.batch_size",
            "steps_per_epoch": "train.steps_per_epoch",
            "epochs": "train.epochs",
            "checkpoint": "train.checkpoint_dir",
        },
    )
    steps = tc.steps_per_epoch or len(qpos_all) // tc.batch_size
    return TrainResult(
        params=_physical(loop.theta, fixed, init),
        history=_history(loop.history),
        resumed_epochs=loop.resumed // steps,
        resumed_steps=loop.resumed,
    )
