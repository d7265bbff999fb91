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
"""

import functools
import hashlib
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from diffmjx.config import Config
from diffmjx.sysid.config import FREE_PARAMS, SysidConfig
from diffmjx.sysid.data import Segments, load_split, segments
from diffmjx.sysid.loss import segment_loss
from diffmjx.sysid.model import _SHAPES, CubeParams, _base, from_unconstrained, to_unconstrained

__all__ = ["ADAM", "History", "TrainResult", "batch_sharding", "train"]

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


def batch_sharding(batch_size: int, devices: Sequence | None = None) -> tuple[NamedSharding, NamedSharding]:
    """Shardings of a minibatch over ``devices`` (default: all visible, every process's when several
    run, :mod:`diffmjx.sysid.distributed`): a 1-D mesh ``("batch",)``.

    Returns:
        ``(batch, replicated)``: ``NamedSharding(mesh, P("batch"))`` for arrays whose first axis is
        the batch, and ``NamedSharding(mesh, P())`` for everything else.

    Raises:
        ValueError: ``batch_size`` is not a multiple of the device count.
    """
    devices = list(jax.devices() if devices is None else devices)
    if batch_size % len(devices):
        raise ValueError(
            f"train.batch_size={batch_size} is not divisible by the {len(devices)} visible devices; minibatches are "
            f"sharded over the batch axis, so choose a multiple of {len(devices)}"
        )
    mesh = Mesh(np.asarray(devices), ("batch",))
    return NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())


def _rows(data: np.ndarray, idx: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """The global array ``data[idx]`` laid out by ``sharding``; each process gathers and copies only
    the rows its own devices hold."""
    return jax.make_array_from_callback(
        (len(idx), *data.shape[1:]), sharding, lambda index: data[idx[index[0]]][(slice(None), *index[1:])]
    )


def _replicate(tree: Any, sharding: NamedSharding) -> Any:
    """Every leaf of ``tree`` on every device of ``sharding``, each process copying its own value to its
    own devices: no exchange between processes (they compute the same values from the same config)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), tree)


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


def _config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [x for k in sorted(set(a) | set(b)) for x in _config_diff(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix.rstrip('.')}: {a!r} (checkpoint) vs {b!r} (now)"]


def _check_fingerprint(path: Path, saved: str, fingerprint: str, what: str, hint: str) -> None:
    """Raise ``ValueError`` naming the first fields that differ if a checkpoint is not this run's."""
    if saved != fingerprint:
        diff = _config_diff(json.loads(saved), json.loads(fingerprint))
        raise ValueError(f"checkpoint {path} was written for {what} ({'; '.join(diff[:4])}); delete it or {hint}")


def _save_checkpoint(path: Path, fingerprint: str, steps_done: int, steps: int, theta, opt_state, hist: dict) -> None:
    arrays: dict[str, np.ndarray] = {
        "fingerprint": np.asarray(fingerprint),
        "epochs_done": np.asarray(steps_done // steps),
        "steps_done": np.asarray(steps_done),
        **{f"theta/{k}": np.asarray(v) for k, v in theta.items()},
        **{f"opt/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(opt_state))},
        "history/step": np.asarray(hist["step"], np.int64),
        "history/epoch": np.asarray(hist["epoch"], np.int64),
        "history/loss": np.asarray(hist["loss"], np.float64),
        "history/wall_s": np.asarray(hist["wall_s"], np.float64),
    }
    for name in FREE_PARAMS:
        arrays[f"history/params/{name}"] = np.asarray(hist["params"][name], np.float64).reshape(
            (len(hist["step"]), *_SHAPES[name])
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)  # a run killed mid-write keeps the previous checkpoint


def _load_checkpoint(path: Path, fingerprint: str, steps: int, theta, opt_state):
    with np.load(path, allow_pickle=False) as f:
        _check_fingerprint(path, str(f["fingerprint"]), fingerprint, "another configuration or data",
                           "choose another train.checkpoint_dir")  # fmt: skip
        theta = {k: jnp.asarray(f[f"theta/{k}"]) for k in theta}
        leaves, treedef = jax.tree.flatten(opt_state)
        opt_state = jax.tree.unflatten(
            treedef, [jnp.asarray(f[f"opt/{i}"], dtype=leaf.dtype) for i, leaf in enumerate(leaves)]
        )
        hist = {k: list(f[f"history/{k}"]) for k in ("step", "epoch", "loss", "wall_s")}
        hist["params"] = {n: list(f[f"history/params/{n}"]) for n in FREE_PARAMS}
        # steps_done: checkpoints written after every step; older ones, after every epoch, hold epochs_done
        done = int(f["steps_done"]) if "steps_done" in f.files else int(f["epochs_done"]) * steps
        return theta, opt_state, done, hist


def _history(hist: dict) -> History:
    params = CubeParams(
        **{n: np.asarray(hist["params"][n], np.float64).reshape((-1, *_SHAPES[n])) for n in FREE_PARAMS}
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
    from tqdm.auto import tqdm

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
    n = qpos_all.shape[0]
    full = n // tc.batch_size
    if full == 0:
        raise ValueError(f"{n} segments hold no full minibatch of train.batch_size={tc.batch_size}")
    steps = tc.steps_per_epoch or full
    if steps > full:
        raise ValueError(
            f"train.steps_per_epoch={steps} exceeds the {full} full minibatches of {tc.batch_size} in {n} segments"
        )
    batch, replicated = batch_sharding(tc.batch_size, devices)

    init = tc.initial_params()
    z0 = to_unconstrained(init)
    theta = {k: jnp.asarray(getattr(z0, k)) for k in tc.free}
    fixed = {k: jnp.asarray(getattr(z0, k)) for k in FREE_PARAMS if k not in tc.free}
    opt_state = optax.scale_by_adam(**ADAM).init(theta)
    hist: dict[str, Any] = {"step": [], "epoch": [], "loss": [], "wall_s": [], "params": {n: [] for n in FREE_PARAMS}}
    if stop_after is not None and stop_after < 1:
        raise ValueError(f"stop_after={stop_after} is invalid; allowed: an integer >= 1 or None")
    done = 0  # steps finished, over all epochs
    ckpt = Path(tc.checkpoint_dir) / CHECKPOINT if tc.checkpoint_dir else None
    fingerprint = _fingerprint(cfg, qpos_all, qvel_all)
    if ckpt is not None and ckpt.exists():
        theta, opt_state, done, hist = _load_checkpoint(ckpt, fingerprint, steps, theta, opt_state)
        if done > tc.epochs * steps:
            raise ValueError(f"checkpoint {ckpt} holds {done / steps:g} epochs, more than train.epochs={tc.epochs}")
    if jax.process_count() > 1:
        _check_processes_agree(fingerprint, done)

    step_fn = _step_fn(cfg.sim, tc.batching, batch.mesh.size)  # map: each device over its own rows
    theta, opt_state, fixed, base, lr, vw = _replicate(
        (theta, opt_state, fixed, _base(cfg.iterations), np.float64(tc.learning_rate), np.float64(tc.velocity_weight)),
        replicated,
    )
    writer = jax.process_index() == 0  # the one process that writes checkpoints and shows progress
    bar = tqdm(total=tc.epochs * steps, initial=done, desc=desc, disable=not (progress and writer), leave=False)
    resumed, ran = done, 0
    try:
        for epoch in range(done // steps, tc.epochs):
            order = np.random.default_rng([tc.seed, epoch]).permutation(n)[: steps * tc.batch_size]
            for k, idx in enumerate(order.reshape(steps, tc.batch_size)):
                if epoch * steps + k < done or (stop_after is not None and ran >= stop_after):
                    continue  # done before a resume, or beyond this piece
                qp, qv = _rows(qpos_all, idx, batch), _rows(qvel_all, idx, batch)
                t = time.perf_counter()
                new_theta, new_state, loss, grad = step_fn(theta, opt_state, lr, fixed, vw, base, qp, qv)
                loss = float(loss)
                wall = time.perf_counter() - t
                if not (math.isfinite(loss) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))):
                    raise FloatingPointError(
                        f"non-finite loss ({loss}) or gradient at epoch {epoch}, step {k + 1} of {steps}; "
                        f"parameters before the step: {_physical(theta, fixed, init)}"
                    )
                theta, opt_state = new_theta, new_state
                now = _physical(theta, fixed, init)
                hist["step"].append(epoch * steps + k + 1)
                hist["epoch"].append(epoch)
                hist["loss"].append(loss)
                hist["wall_s"].append(wall)
                for name in FREE_PARAMS:
                    hist["params"][name].append(np.asarray(getattr(now, name)))
                ran += 1
                if ckpt is not None and writer:  # after every step: a run stopped anywhere resumes there
                    _save_checkpoint(ckpt, fingerprint, epoch * steps + k + 1, steps, theta, opt_state, hist)
                bar.update()
                bar.set_postfix(loss=f"{loss:.3g}", side_mm=f"{1e3 * float(now.side_length):.2f}")
    finally:
        bar.close()
    return TrainResult(params=_physical(theta, fixed, init), history=_history(hist), resumed_epochs=resumed // steps,
                       resumed_steps=resumed)  # fmt: skip
