"""Levenberg–Marquardt identification of the cube: optimistix on forward-mode Jacobians.

:func:`fit_lm` fits the same free parameters as :func:`experiments.contactnets.train` (Adam) to the same
segments and segment loss, but as a nonlinear least-squares problem: the residual vector
(:func:`~experiments.contactnets.segment_residuals`, one entry per predicted state and component, scaled so that its
squared norm *is* the segment loss) goes to :class:`optimistix.LevenbergMarquardt`, whose
Jacobians are forward-mode (``jax.jacfwd`` through :func:`diffmjx.rollout`, one tangent per free
coordinate: 10 with every parameter free). Every step uses all the segments it is given (no
minibatches), so it is meant for a few hundred segments, not all 40 000.

Knobs: the :class:`~experiments.contactnets.SysidConfig` (``train.free``, ``train.inits``,
``train.velocity_weight``, ``train.batching``, ``sim``, ``iterations``) plus ``steps``, ``rtol`` and ``atol`` of
:func:`fit_lm`. The simulation is differentiated in forward mode, so the ``sim`` config's
``integrator.adjoint`` is replaced by ``forward`` (a reverse-mode adjoint cannot be pushed
forward).

Sharp bits:

- One step costs one rollout of every segment with (free coordinates + 1) tangents; with 10 free
  coordinates that is about as much as 10 Adam minibatch gradients of the same size.
- Keep ``train.batching`` at ``auto`` on a CPU (``map``: each segment its own adaptive steps):
  under ``vmap`` every segment's tangents ride the stiffest segment's steps, 12x the cost per step
  on 512 segments (docs/sysid.md).
- The loss is flat wherever the predicted cube does not touch the table (a start far too small):
  the Jacobian is then zero in the contact parameters and LM stops at once. Use contacts from
  distance (``cfd.enabled``) in ``sim``, as the Fig. 9 study does, or a start that touches.
- Mass is not identifiable from free motion with solref's time-constant parametrisation (MuJoCo's
  contact impedance is set in acceleration space), so its Jacobian column is near zero.
"""

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from diffmjx import checkpoint
from experiments.contactnets.config import FREE_PARAMS, SysidConfig
from experiments.contactnets.loss import segment_residuals
from experiments.contactnets.model import CubeParams, from_unconstrained, options_model, to_unconstrained

__all__ = ["LMHistory", "LMResult", "fit_lm"]


class LMHistory(NamedTuple):
    """One entry per LM step (an accepted or a rejected trial point)."""

    step: np.ndarray  # (S,) int, from 1
    loss: np.ndarray  # (S,) loss at the accepted iterate after the step
    accepted: np.ndarray  # (S,) bool, whether the step's trial point was accepted
    # (S,) wall time of the step (the first of a process includes the JIT and, if resumed, its re-evaluation)
    wall_s: np.ndarray
    params: CubeParams  # physical parameters of the accepted iterate after each step, stacked (S, ...)


class LMResult(NamedTuple):
    """What :func:`fit_lm` returns."""

    params: CubeParams  # final physical parameters (NumPy)
    loss_init: float
    history: LMHistory
    converged: bool  # optimistix's Cauchy termination was met within ``steps``


def _fingerprint(cfg: SysidConfig, qpos: np.ndarray, qvel: np.ndarray, rtol: float, atol: float) -> str:
    """What a checkpoint must match to be resumed: the config (but the Adam-only train knobs), data, tolerances."""
    d = cfg.to_dict()
    d["train"] = {k: v for k, v in d["train"].items() if k in ("free", "inits", "velocity_weight", "iterations")}
    digest = hashlib.sha256(np.ascontiguousarray(qpos).tobytes() + np.ascontiguousarray(qvel).tobytes())
    data = {"hash": digest.hexdigest(), "shape": list(qpos.shape)}
    return json.dumps({"config": d, "data": data, "rtol": rtol, "atol": atol}, sort_keys=True)


def _save(path: Path, fingerprint: str, theta, step_size, loss_init: float, done: bool, hist: dict) -> None:
    checkpoint.save(
        path,
        fingerprint,
        {
            "step_size": step_size,
            "loss_init": loss_init,
            "done": done,
            **{f"theta/{k}": v for k, v in theta.items()},
            **{f"history/{k}": hist[k] for k in ("step", "loss", "accepted", "wall_s")},
            **{f"history/params/{n}": np.stack(v) for n, v in hist["params"].items()},
        },
    )


def _load(path: Path, fingerprint: str, theta):
    f = checkpoint.load(path, fingerprint, "another configuration, data or tolerance", "choose another checkpoint")
    theta = {k: jnp.asarray(f[f"theta/{k}"]) for k in theta}
    hist: dict = {k: list(f[f"history/{k}"]) for k in ("step", "loss", "accepted", "wall_s")}
    hist["params"] = {n: list(f[f"history/params/{n}"]) for n in FREE_PARAMS}
    return theta, float(f["step_size"]), float(f["loss_init"]), bool(f["done"]), hist


def fit_lm(
    cfg: SysidConfig,
    qpos,
    qvel,
    *,
    steps: int = 20,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    progress: bool = True,
    desc: str = "LM",
    checkpoint: str | Path | None = None,
) -> LMResult:
    """Fit ``cfg.train.free`` to segments with Levenberg–Marquardt (see the module docstring).

    Arguments:
        cfg: the :class:`~experiments.contactnets.SysidConfig` (free parameters, inits, velocity weight,
            simulation, Newton iterations); its ``train`` optimiser knobs are not used.
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) segments (all used in every step).
        steps: most LM steps (accepted or rejected).
        rtol, atol: optimistix's Cauchy termination on the parameters' unconstrained coordinates
            and on the residuals.
        progress: show a tqdm progress bar.
        desc: its label.
        checkpoint: an ``.npz`` file written (atomically) after every step; if it exists, the fit
            resumes after its last step. The resumed fit proposes the same trial points as an
            uninterrupted one (to rounding): it restarts optimistix at the last accepted iterate with
            the trust region's saved step size, which costs one extra residual and Jacobian
            evaluation per resume (not counted as a step). A checkpoint of another configuration,
            data, ``rtol`` or ``atol`` raises ``ValueError``, naming what differs; ``steps`` may be
            larger (run longer), not smaller than the steps it holds.

    Returns:
        :class:`LMResult`.

    Raises:
        ValueError: ``steps`` below 1, segments of the wrong shape, or a checkpoint of another fit.
        FloatingPointError: a non-finite loss.
    """
    from tqdm.auto import tqdm

    if steps < 1:
        raise ValueError(f"steps={steps} is invalid; allowed: an integer >= 1")
    qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
    if qpos.ndim != 3 or qpos.shape[2] != 7 or qvel.shape != (*qpos.shape[:2], 6):
        raise ValueError(f"segments of shape {qpos.shape} / {qvel.shape}; expected (B, N + 1, 7) and (B, N + 1, 6)")
    sim = dataclasses.replace(cfg.sim, integrator=dataclasses.replace(cfg.sim.integrator, adjoint="forward"))
    tc = cfg.train
    init = tc.initial_params()
    z0 = to_unconstrained(init)
    theta = {k: jnp.asarray(getattr(z0, k)) for k in tc.free}
    fixed = {k: jnp.asarray(getattr(z0, k)) for k in FREE_PARAMS if k not in tc.free}
    base = options_model(cfg.iterations)
    vw = float(tc.velocity_weight)

    def fn(th, args):
        params = from_unconstrained(CubeParams(**args[0], **th))
        return segment_residuals(params, args[1], args[2], args[3], sim, velocity_weight=vw, batching=tc.batching), None

    args = (fixed, base, jnp.asarray(qpos), jnp.asarray(qvel))
    solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    options: dict = {"jac": "fwd"}
    tags: frozenset = frozenset()
    f_struct = jax.eval_shape(lambda th: fn(th, args)[0], theta)
    state = solver.init(fn, theta, args, options, f_struct, None, tags)

    @eqx.filter_jit  # the solver state carries jaxprs, which jax.jit cannot take
    def step(th, state, args):
        th, state, _ = solver.step(fn, th, args, options, state, tags)
        done, _ = solver.terminate(fn, th, args, options, state, tags)
        return th, state, done

    loss_of = jax.jit(lambda th, args: jnp.sum(fn(th, args)[0] ** 2))
    hist: dict = {"step": [], "loss": [], "accepted": [], "wall_s": [], "params": {n: [] for n in FREE_PARAMS}}
    done = False
    accepted_before = 0
    resume_wall = 0.0  # the resume's re-evaluation, added to the next step's wall time
    ckpt = Path(checkpoint) if checkpoint is not None else None
    fingerprint = _fingerprint(cfg, qpos, qvel, rtol, atol)
    if ckpt is not None and ckpt.exists():
        theta, step_size, loss_init, done, hist = _load(ckpt, fingerprint, theta)
        if len(hist["step"]) > steps:
            raise ValueError(
                f"LM checkpoint {ckpt} holds {len(hist['step'])} steps, more than steps={steps}; "
                "pass steps >= that, or delete it"
            )
        if not done and len(hist["step"]) < steps:
            # optimistix restarted at the last accepted iterate: its first step re-evaluates the
            # residual and Jacobian there and accepts it, keeping the step size, so the next trial
            # point is the one the uninterrupted fit would have proposed
            state = solver.init(fn, theta, args, options, f_struct, None, tags)
            state = eqx.tree_at(lambda s: s.search_state.step_size, state, jnp.asarray(step_size))
            t = time.perf_counter()
            theta, state, _ = jax.block_until_ready(step(theta, state, args))
            resume_wall = time.perf_counter() - t
            accepted_before = int(state.num_accepted_steps)
    else:
        loss_init = float(loss_of(theta, args))
    with tqdm(total=steps, initial=len(hist["step"]), desc=desc, disable=not progress, leave=False) as bar:
        for k in range(len(hist["step"]), steps if not done else 0):
            t = time.perf_counter()
            theta, state, done = jax.block_until_ready(step(theta, state, args))
            wall, resume_wall = time.perf_counter() - t + resume_wall, 0.0
            loss = float(jnp.sum(state.f_info.residual**2))  # at the accepted iterate ``theta``
            if not np.isfinite(loss):
                raise FloatingPointError(f"non-finite loss at LM step {k + 1}")
            accepted = int(state.num_accepted_steps)
            now = from_unconstrained(CubeParams(**fixed, **theta))
            hist["step"].append(k + 1)
            hist["loss"].append(loss)
            hist["accepted"].append(accepted > accepted_before)
            hist["wall_s"].append(wall)
            for name in FREE_PARAMS:
                hist["params"][name].append(np.asarray(getattr(init if name in fixed else now, name), np.float64))
            accepted_before = accepted
            done = bool(done)
            if ckpt is not None:
                _save(ckpt, fingerprint, theta, state.search_state.step_size, loss_init, done, hist)
            bar.update()
            bar.set_postfix(loss=f"{loss:.3g}", side_mm=f"{1e3 * float(now.side_length):.2f}")
            if done:
                break
    final = from_unconstrained(CubeParams(**fixed, **theta))
    params = CubeParams(
        **{n: np.asarray(getattr(init, n) if n in fixed else getattr(final, n), np.float64) for n in FREE_PARAMS}
    )
    history = LMHistory(
        step=np.asarray(hist["step"]),
        loss=np.asarray(hist["loss"]),
        accepted=np.asarray(hist["accepted"]),
        wall_s=np.asarray(hist["wall_s"]),
        params=CubeParams(**{n: np.stack(v) for n, v in hist["params"].items()}),
    )
    return LMResult(params=params, loss_init=loss_init, history=history, converged=bool(done))
