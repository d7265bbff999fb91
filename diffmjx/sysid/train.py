r"""Identify the cube's parameters from toss segments with Adam: the loop, its sharding and checkpoints.

The loop follows the paper's App. E.2. :func:`train` runs Adam (optax's ``scale_by_adam``, b1 0.5,
b2 0.9, eps 1e-6, the paper's settings, times ``-train.learning_rate``) on the segment loss
(:func:`~diffmjx.sysid.segment_loss`) over the unconstrained coordinates
(:func:`~diffmjx.sysid.to_unconstrained`) of the free parameters only; the others stay at their
initial values. Minibatches are drawn without replacement from a permutation seeded by
``(train.seed, epoch)``, sharded over every visible device (a 1-D mesh on the batch axis,
:func:`batch_sharding`), and the state (parameters, optimiser state, history) is checkpointed after
every step, so a run that is stopped (or run in pieces, ``stop_after``) resumes after its last
finished step and ends exactly where an uninterrupted one does. The segments of a minibatch are
simulated one after another on a CPU and in lock-step on a GPU (``train.batching``).

Several processes (:func:`diffmjx.sysid.distributed.initialize`) run the same loop: every process
draws the same permutation, places only its own devices' rows of each minibatch, and receives the
same all-reduced loss and gradient; process 0 alone writes the checkpoint and shows the progress bar.

All knobs sit in :class:`~diffmjx.sysid.SysidConfig`: sections ``data``
(:class:`~diffmjx.sysid.DataConfig`), ``train`` (:class:`~diffmjx.sysid.TrainConfig`) and ``sim``
(the simulation's :class:`diffmjx.Config`).

Why one file of this length: the Adam loop, its minibatch schedule, sharding and checkpoints are
one resumable loop whose state is saved and restored as a whole.
"""

import functools
import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

from diffmjx import checkpoint
from diffmjx.config import Config
from diffmjx.sysid.config import FREE_PARAMS, SysidConfig
from diffmjx.sysid.data import Segments, load_split, segments
from diffmjx.sysid.distributed import batch_sharding, replicate, sharded_rows
from diffmjx.sysid.loss import segment_loss
from diffmjx.sysid.model import PARAM_SHAPES, CubeParams, from_unconstrained, options_model, to_unconstrained

__all__ = ["ADAM", "History", "Loop", "TrainResult", "adam_loop", "batch_sharding", "train"]

ADAM = {"b1": 0.5, "b2": 0.9, "eps": 1e-6}
"""Adam's moment decay rates and epsilon (the paper's App. E.2)."""

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


def _check_processes_agree(fingerprint: str, done: int) -> None:
    """Several processes must train the same configuration on the same segments from the same epoch."""
    digest = np.frombuffer(hashlib.sha256(fingerprint.encode()).digest(), np.uint8).astype(np.int64)
    seen = np.asarray(multihost_utils.process_allgather(np.append(digest, done)))  # (processes, 33)
    for p in range(1, seen.shape[0]):
        if not np.array_equal(seen[p, :-1], seen[0, :-1]):
            raise ValueError(
                f"process {p} trains another configuration or other segments than process 0; every process "
                "must load the same config and data (only train.epochs, train.checkpoint_dir and train.batching may differ)"
            )
        if seen[p, -1] != seen[0, -1]:
            raise ValueError(
                f"process {p} resumes after {seen[p, -1]} steps, process 0 after {seen[0, -1]}: every process "
                "reads the checkpoint that process 0 writes, so train.checkpoint_dir must name one shared folder"
            )


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


class Loop(NamedTuple):
    """What :func:`adam_loop` returns."""

    theta: Any  # the coordinates after the last step (replicated)
    opt_state: Any
    history: dict  # step, epoch, loss, wall_s and each ``record`` key: a list per key, one entry per step
    resumed: int  # steps read from the checkpoint (0: started fresh)
    extra: dict  # the arrays ``on_step`` stored with the checkpoint


def adam_loop(
    step: Callable,
    theta: Any,
    data: Sequence[tuple[np.ndarray, ...]],
    sizes: Sequence[int],
    *,
    epochs: int,
    steps_per_epoch: int | None,
    seed: int,
    fingerprint: str,
    checkpoint_path: Path | None = None,
    devices: Sequence | None = None,
    progress: bool = True,
    desc: str = "Adam",
    stop_after: int | None = None,
    record: Callable[[Any], dict[str, np.ndarray]] = lambda theta: {},
    postfix: Callable[[float, dict], dict] = lambda loss, rec: {},
    on_step: Callable[[int, Any, float, dict], bool] | None = None,
    on_resume: Callable[[dict], None] | None = None,
    extra: dict | None = None,
    hint: str = "choose another checkpoint",
) -> Loop:
    """The Adam loop of every fit: minibatches, sharding, checkpoints, progress (see the module docstring).

    Each epoch draws, for every group of segments ``data[g]`` (a tuple of arrays with a leading
    segment axis), a permutation seeded by ``(seed, epoch)`` (group 0) or ``(seed, epoch, g)``, and
    step ``k`` takes rows ``k * sizes[g]`` on of it, laid out over ``devices`` (a 1-D mesh on the
    batch axis, :func:`batch_sharding`; each process places only its own devices' rows). The state
    is saved after every step (process 0 writes) and a run resumes after its last saved step.

    Arguments:
        step: ``step(theta, opt_state, batches) -> (theta, opt_state, loss, grad)``, ``batches`` one
            tuple of arrays per group (already sharded); constants it needs are its own.
        theta: the start coordinates (a pytree).
        data, sizes: per group, the segment arrays and the segments per step (a multiple of the
            device count).
        epochs: passes over the data; steps_per_epoch: steps per pass (None: every full minibatch).
        seed: seed of the minibatch order.
        fingerprint: what a checkpoint must match (:func:`diffmjx.checkpoint.fingerprint`).
        checkpoint_path: the ``.npz`` written after every step, or None.
        devices: the devices to shard over (default all visible).
        progress, desc: a tqdm bar and its label.
        stop_after: return after this many steps of this call (a run in pieces).
        record: ``theta -> {key: array}`` stored in the history after each step (physical values).
        postfix: ``(loss, record) -> {name: text}`` for the bar.
        on_step: ``(step number, theta, loss, extra) -> stop``, after each step (held-out
            evaluation, early stopping); ``extra`` is a dict of arrays saved with the checkpoint.
        on_resume: ``extra -> None``, called with the checkpoint's ``extra`` when a run resumes.
        extra: the start of that dict.
        hint: the advice of a refused checkpoint's message.

    Raises:
        ValueError: too few segments, an indivisible batch, a checkpoint of another run or of more
            epochs, processes that disagree.
        FloatingPointError: a non-finite loss or gradient (the last checkpoint is kept).
    """
    from tqdm.auto import tqdm

    counts = [len(arrays[0]) for arrays in data]
    full = min(n // b for n, b in zip(counts, sizes))
    if full == 0:
        g = int(np.argmin([n // b for n, b in zip(counts, sizes)]))
        raise ValueError(f"{counts[g]} segments hold no full minibatch of train.batch_size={sizes[g]}")
    steps = steps_per_epoch or full
    if steps > full:
        raise ValueError(
            f"train.steps_per_epoch={steps} exceeds the {full} full minibatches of {sizes[0]} in {counts[0]} segments"
        )
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after={stop_after} is invalid; allowed: an integer >= 1 or None")
    shardings = [batch_sharding(b, devices) for b in sizes]
    replicated = shardings[0][1]
    scale = optax.scale_by_adam(**ADAM)
    opt_state = scale.init(theta)
    hist: dict[str, list] = {"step": [], "epoch": [], "loss": [], "wall_s": []}
    extra = dict(extra or {})
    done = 0
    if checkpoint_path is not None:
        saved = checkpoint.load(checkpoint_path, fingerprint, "another configuration or data", hint)
        if saved is not None:
            theta, opt_state, done, hist, extra = _restore(saved, theta, opt_state, steps, extra)
            if on_resume is not None:
                on_resume(extra)
            if done > epochs * steps:
                raise ValueError(
                    f"checkpoint {checkpoint_path} holds {done / steps:g} epochs, more than train.epochs={epochs}"
                )
    if jax.process_count() > 1:
        _check_processes_agree(fingerprint, done)
    theta, opt_state = replicate((theta, opt_state), replicated)
    writer = jax.process_index() == 0  # the one process that writes checkpoints and shows progress
    bar = tqdm(total=epochs * steps, initial=done, desc=desc, disable=not (progress and writer), leave=False)
    resumed, ran = done, 0
    stop = False
    try:
        for epoch in range(done // steps, epochs):
            orders = [
                np.random.default_rng([seed, epoch] if g == 0 else [seed, epoch, g]).permutation(n)
                for g, n in enumerate(counts)
            ]
            for k in range(steps):
                if epoch * steps + k < done or (stop_after is not None and ran >= stop_after) or stop:
                    continue  # done before a resume, or beyond this piece
                batches = [
                    tuple(sharded_rows(a, order[k * b : (k + 1) * b], sh) for a in arrays)
                    for arrays, order, b, (sh, _) in zip(data, orders, sizes, shardings)
                ]
                t = time.perf_counter()
                new_theta, new_state, loss, grad = step(theta, opt_state, batches)
                loss = float(loss)
                wall = time.perf_counter() - t
                if not (math.isfinite(loss) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))):
                    raise FloatingPointError(
                        f"non-finite loss ({loss}) or gradient at epoch {epoch}, step {k + 1} of {steps}; "
                        f"values before the step: {record(theta)}"
                    )
                theta, opt_state = new_theta, new_state
                rec = record(theta)
                number = epoch * steps + k + 1
                for key, v in (("step", number), ("epoch", epoch), ("loss", loss), ("wall_s", wall), *rec.items()):
                    hist.setdefault(key, []).append(v)
                ran += 1
                if on_step is not None:
                    stop = bool(on_step(number, theta, loss, extra))
                if checkpoint_path is not None and writer:  # after every step: a run stopped anywhere resumes there
                    _save(checkpoint_path, fingerprint, number, steps, theta, opt_state, hist, extra)
                bar.update()
                bar.set_postfix(loss=f"{loss:.3g}", **postfix(loss, rec))
    finally:
        bar.close()
    return Loop(theta, opt_state, hist, resumed, extra)


def _save(path: Path, fingerprint: str, done: int, steps: int, theta, opt_state, hist: dict, extra: dict) -> None:
    arrays: dict[str, Any] = {
        "epochs_done": np.asarray(done // steps),
        "steps_done": np.asarray(done),
        **{f"theta/{k}": np.asarray(v) for k, v in _flat(theta).items()},
        **{f"opt/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(opt_state))},
        **{f"history/{k}": np.asarray(v) for k, v in hist.items()},
        **{f"extra/{k}": np.asarray(v) for k, v in extra.items()},
    }
    checkpoint.save(path, fingerprint, arrays)


def _flat(theta) -> dict:
    return theta if isinstance(theta, dict) else {"": theta}


def _restore(saved: dict, theta, opt_state, steps: int, extra: dict):
    if isinstance(theta, dict):
        theta = {k: jnp.asarray(saved[f"theta/{k}"]) for k in theta}
    else:
        theta = jnp.asarray(saved["theta/"])
    leaves, treedef = jax.tree.flatten(opt_state)
    opt_state = jax.tree.unflatten(
        treedef, [jnp.asarray(saved[f"opt/{i}"], dtype=leaf.dtype) for i, leaf in enumerate(leaves)]
    )
    hist = {k[len("history/") :]: list(v) for k, v in saved.items() if k.startswith("history/")}
    extra = {**extra, **{k[len("extra/") :]: v for k, v in saved.items() if k.startswith("extra/")}}
    # steps_done: checkpoints written after every step; older ones, after every epoch, hold epochs_done
    done = int(saved["steps_done"]) if "steps_done" in saved else int(saved["epochs_done"]) * steps
    return theta, opt_state, done, hist, extra


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
            "sysid.train runs in float32 (jax_enable_x64 is off); call diffmjx.enable_compilation_cache() "
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
    batch, replicated = batch_sharding(tc.batch_size, devices)
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
    )
    steps = tc.steps_per_epoch or len(qpos_all) // tc.batch_size
    return TrainResult(
        params=_physical(loop.theta, fixed, init),
        history=_history(loop.history),
        resumed_epochs=loop.resumed // steps,
        resumed_steps=loop.resumed,
    )
