r"""The Adam loop every Adam fit runs: minibatches, sharding over devices and processes, checkpoints.

:func:`adam_loop` runs Adam (optax's ``scale_by_adam`` with :data:`ADAM`, the paper's App. E.2
settings) on a caller's step function: minibatches drawn without replacement from a permutation
seeded by ``(seed, epoch)``, sharded over every visible device (a 1-D mesh on the batch axis,
:func:`~diffmjx.sysid.distributed.batch_sharding`), and the state (coordinates, optimiser state,
history) checkpointed after every step, so a run that is stopped (or run in pieces, ``stop_after``)
resumes after its last finished step and ends exactly where an uninterrupted one does.
:func:`diffmjx.sysid.identify` with ``fit.method="adam"`` is its user.

Several processes (:func:`diffmjx.sysid.distributed.initialize`) run the same loop: every process
draws the same permutation, places only its own devices' rows of each minibatch, and receives the
same all-reduced loss and gradient; process 0 alone writes the checkpoint and shows the progress bar.

Why one file of this length: the Adam loop, its minibatch schedule, sharding and checkpoints are
one resumable loop whose state is saved and restored as a whole.
"""

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

from diffmjx import checkpoint
from diffmjx.sysid.distributed import batch_sharding, replicate, sharded_rows

__all__ = ["ADAM", "KNOBS", "Loop", "adam_loop", "batch_sharding"]

ADAM = {"b1": 0.5, "b2": 0.9, "eps": 1e-6}
"""Adam's moment decay rates and epsilon (the paper's App. E.2)."""


KNOBS = {
    "batch_size": "batch_size",
    "steps_per_epoch": "steps_per_epoch",
    "epochs": "epochs",
    "checkpoint": "checkpoint",
}
"""The names :func:`adam_loop`'s errors give its settings; a caller passes its own knobs' names."""


def _check_processes_agree(fingerprint: str, done: int, knobs: dict) -> None:
    """Several processes must train the same configuration on the same segments from the same epoch."""
    digest = np.frombuffer(hashlib.sha256(fingerprint.encode()).digest(), np.uint8).astype(np.int64)
    seen = np.asarray(multihost_utils.process_allgather(np.append(digest, done)))  # (processes, 33)
    for p in range(1, seen.shape[0]):
        if not np.array_equal(seen[p, :-1], seen[0, :-1]):
            raise ValueError(
                f"process {p} trains another configuration or other segments than process 0; every process "
                f"must load the same config and data (only {knobs['epochs']}, {knobs['checkpoint']} and the batching "
                "may differ)"
            )
        if seen[p, -1] != seen[0, -1]:
            raise ValueError(
                f"process {p} resumes after {seen[p, -1]} steps, process 0 after {seen[0, -1]}: every process "
                f"reads the checkpoint that process 0 writes, so {knobs['checkpoint']} must name one shared place"
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
    knobs: dict[str, str] | None = None,
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
        knobs: the caller's names of the batch size, steps per epoch, epochs and checkpoint settings
            for the error messages (:data:`KNOBS`' keys; ``identify`` passes ``fit.batch_size``, ...).

    Raises:
        ValueError: too few segments, an indivisible batch, a checkpoint of another run or of more
            epochs, processes that disagree.
        FloatingPointError: a non-finite loss or gradient (the last checkpoint is kept).
    """
    from tqdm.auto import tqdm

    knobs = {**KNOBS, **(knobs or {})}
    counts = [len(arrays[0]) for arrays in data]
    full = min(n // b for n, b in zip(counts, sizes))
    if full == 0:
        g = int(np.argmin([n // b for n, b in zip(counts, sizes)]))
        raise ValueError(f"{counts[g]} segments hold no full minibatch of {knobs['batch_size']}={sizes[g]}")
    steps = steps_per_epoch or full
    if steps > full:
        raise ValueError(
            f"{knobs['steps_per_epoch']}={steps} exceeds the {full} full minibatches of {sizes[0]} in {counts[0]} segments"
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
                    f"checkpoint {checkpoint_path} holds {done / steps:g} epochs, more than {knobs['epochs']}={epochs}"
                )
    if jax.process_count() > 1:
        _check_processes_agree(fingerprint, done, knobs)
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
