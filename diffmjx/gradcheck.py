"""Gradient check: automatic differentiation against central differences of a converged solve.

Typical use compares the gradient a user's settings produce (``loss``) with central differences of
the same loss solved to tight tolerances, sweeping the difference step so the plateau between
truncation and round-off error is found rather than guessed. Central differences of the *same*
loose solve only show whether AD agrees with that solve; the discretisation error of both shows
only against a tightened one. A ``loss`` with a ``cfg`` keyword gets that comparison by itself
(:func:`tightened`).
"""

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

DEFAULT_STEPS = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)


class GradCheck(NamedTuple):
    """Result of :func:`gradcheck`; gradients are flat vectors over the raveled parameters."""

    loss: float
    ad: np.ndarray
    fd: np.ndarray
    fd_sweep: np.ndarray  # (len(steps), n) central differences for each step
    steps: np.ndarray
    step: float  # chosen step: the middle of the flattest part of the sweep
    rel_error: float  # |ad - fd| / |fd| (2-norms)
    fd_tight: np.ndarray | None = None  # central differences of the tightened solve, if one ran
    rel_error_tight: float | None = None  # |ad - fd_tight| / |fd_tight|: the error that matters

    def __str__(self) -> str:
        text = (
            f"loss {self.loss:.6g} | AD {np.array2string(self.ad, precision=6)} | "
            f"FD {np.array2string(self.fd, precision=6)} (step {self.step:.0e}) | "
            f"rel. error {self.rel_error:.2e}"
        )
        if self.fd_tight is not None:
            text += (
                f" | FD of a tightened solve {np.array2string(self.fd_tight, precision=6)} | "
                f"rel. error vs tightened {self.rel_error_tight:.2e}"
            )
        return text


def central_differences(
    loss: Callable,
    params,
    steps: Sequence[float] = DEFAULT_STEPS,
    *,
    args: tuple = (),
    batch: bool = False,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of ``loss(params, *args)``, one estimate per step.

    Each perturbed point is ``params`` with one raveled entry moved by ``+h`` or ``-h`` (in float64
    arithmetic, ``x + h`` and ``x + (-h)``), and each estimate is ``(f(x + h) - f(x - h)) / (2 h)``.
    A loss that returns NaN where its solve failed (e.g. ran out of steps) gives NaN estimates,
    which a caller can test for.

    Arguments:
        loss: function of a parameter pytree and ``args``, returning a scalar or an array (jitted
            here, once per ``loss`` object: calls with other ``params`` values or ``args`` of the
            same shapes reuse the compiled program).
        params: parameter pytree, raveled to a vector for differencing.
        steps: absolute difference steps, in parameter units.
        args: further arguments of ``loss``, not differentiated (e.g. one shot's initial state).
        batch: evaluate every perturbed point (two per step and direction) in one jitted ``vmap``
            instead of one call after another. One compile and one dispatch instead of
            ``4 n len(steps)`` host round trips; under ``vmap`` an adaptive solve runs until its
            slowest lane is done.
        workers: with ``batch=False``, evaluate the points on this many threads (XLA releases the
            GIL while it runs, so on a multi-core CPU two workers keep two cores busy).

    Returns:
        ``(sweep, steps)``: the estimates, shaped ``(len(steps), n, *loss_shape)`` over the raveled
        parameters (``(len(steps), n)`` for a scalar loss), and the steps as an array.
    """
    flat, unravel = ravel_pytree(params)
    flat = np.asarray(flat)
    steps_arr = np.asarray(steps, dtype=float)
    if workers < 1:
        raise ValueError(f"workers={workers!r}: give at least 1")
    jobs = [(k, i, s) for k in range(len(steps_arr)) for i in range(flat.size) for s in (1.0, -1.0)]
    points = np.repeat(flat[None], len(jobs), axis=0)
    for row, (k, i, s) in enumerate(jobs):
        points[row, i] += s * steps_arr[k]
    if batch:
        f = _compiled(loss, len(args), batched=True)
        values = np.asarray(f(jax.vmap(unravel)(jnp.asarray(points)), *args))
    else:
        f = _compiled(loss, len(args), batched=False)
        one = lambda x: np.asarray(f(unravel(jnp.asarray(x)), *args))
        if workers == 1:
            values = [one(x) for x in points]
        else:
            with ThreadPoolExecutor(workers) as pool:
                values = list(pool.map(one, points))
        values = np.stack(values)
    values = values.reshape(len(steps_arr), flat.size, 2, *values.shape[1:])
    h = steps_arr.reshape(-1, *([1] * (values.ndim - 2)))
    return (values[:, :, 0] - values[:, :, 1]) / (2 * h), steps_arr


@functools.lru_cache(maxsize=8)
def _compiled(loss: Callable, nargs: int, batched: bool):
    """``loss`` jitted (and vmapped over its first argument): one compiled program per loss object."""
    if batched:
        return jax.jit(jax.vmap(loss, in_axes=(0,) + (None,) * nargs))
    return jax.jit(loss)


class Reference(NamedTuple):
    """A converged reference gradient (:func:`reference_gradient`), over the raveled parameters."""

    grad: np.ndarray  # (n,) the estimate at the chosen step
    step: float  # the chosen step: the middle of the flattest part of the sweep
    agreement: float  # |grad - estimate at the neighbouring step| / |grad|: how far to trust it
    sweep: np.ndarray  # (len(steps), n) estimates, one row per step
    steps: np.ndarray


def reference_gradient(
    loss: Callable,
    params,
    cfg,
    *,
    steps: Sequence[float] = (1e-3, 1e-4),
    tol: float = 1e-12,
    max_steps: int | None = None,
    batch: bool = True,
    workers: int = 1,
) -> Reference:
    """Central differences of ``loss(params, cfg=converged(cfg, tol))``: the gradient that AD with
    ``cfg`` should converge to, batched over directions and steps in one jitted program.

    Arguments:
        loss: scalar ``loss(params, cfg=...)`` that simulates with the config it is given.
        params: parameter pytree (raveled for differencing).
        cfg: the :class:`diffmjx.Config` whose physics the reference solves (:func:`converged`).
        steps: difference steps (absolute, parameter units); at least two, so the estimate's
            agreement across steps is known.
        tol: tolerance of the converged solve.
        max_steps: least step budget per control period of the converged solve (:func:`converged`).
        batch, workers: see :func:`central_differences`.

    Returns:
        :class:`Reference`.
    """
    if len(steps) < 2:
        raise ValueError(f"steps={tuple(steps)!r}: give at least two difference steps, so their agreement is known")
    ref_cfg = converged(cfg, tol, max_steps=max_steps)
    sweep, steps_arr = central_differences(lambda p: loss(p, cfg=ref_cfg), params, steps, batch=batch, workers=workers)
    k = pick_plateau(sweep)
    grad = sweep[k]
    neighbour = sweep[k - 1] if k > 0 else sweep[k + 1]
    return Reference(grad, float(steps_arr[k]), _rel(neighbour, grad), sweep, steps_arr)


def pick_plateau(sweep: np.ndarray) -> int:
    """Index of the step whose estimate changes least relative to its neighbours."""
    if len(sweep) < 3:
        return len(sweep) - 1
    scale = np.linalg.norm(sweep, axis=1).max() + 1e-300
    change = np.linalg.norm(np.diff(sweep, axis=0), axis=1) / scale
    # Step k sits between change[k-1] and change[k]; ends use one side.
    around = np.maximum(np.r_[np.inf, change], np.r_[change, np.inf])
    return int(np.argmin(around))


def tightened(cfg):
    """``cfg`` solved more accurately, as a reference for its gradients.

    Diffrax solvers: ``rtol`` and ``atol`` a thousand times smaller (at least 1e-12, whatever the
    adjoint: ``dto_tighten`` 1) and kink control off (a converged solve needs none); MJX's
    fixed-step solvers: ten times the substeps.

    Arguments:
        cfg: :class:`diffmjx.Config`.

    Returns:
        The tightened :class:`diffmjx.Config`; physics (impedance floor, collisions, CFD) unchanged.
    """
    ic = cfg.integrator
    if ic.fixed_step:
        return dataclasses.replace(cfg, integrator=dataclasses.replace(ic, substeps=10 * ic.substeps))
    tight = dataclasses.replace(
        ic,
        rtol=max(ic.rtol * 1e-3, 1e-12),
        atol=max(ic.atol * 1e-3, 1e-12),
        kink_step=None,
        dto_tighten=1.0,
        max_steps=max(ic.max_steps, 1 << 14),
    )
    return dataclasses.replace(cfg, integrator=tight)


def converged(cfg, tol: float = 1e-12, *, solver: str = "tsit5", max_steps: int | None = None):
    """``cfg``'s physics solved to convergence: the studies' and tests' reference solve.

    Tsit5 (or ``solver``) with adaptive steps at ``rtol = atol = tol`` (whatever the adjoint:
    ``dto_tighten`` 1), kink control off (a converged solve needs none) and a step budget of at
    least ``max_steps`` per control period (the config's own where None). The contact model (collisions, impedance floor, constraint solve, CFD) is ``cfg``'s:
    differences of this solve are what the gradient of ``cfg``'s dynamics converges to.

    Arguments:
        cfg: :class:`diffmjx.Config`.
        tol: relative and absolute tolerance of the reference solve.
        solver: the Diffrax tableau of the reference solve.
        max_steps: least step budget per control period; None keeps ``cfg``'s.

    Returns:
        The reference :class:`diffmjx.Config`.
    """
    ic = cfg.integrator
    budget = ic.max_steps if max_steps is None else max(ic.max_steps, max_steps)
    ref = dataclasses.replace(
        ic, solver=solver, step_control="pid", rtol=tol, atol=tol, kink_step=None, dto_tighten=1.0, max_steps=budget
    )
    return dataclasses.replace(cfg, integrator=ref)


def _takes_cfg(loss: Callable) -> bool:
    try:
        return "cfg" in inspect.signature(loss).parameters
    except (TypeError, ValueError):
        return False


def _rel(ad, fd) -> float:
    return float(np.linalg.norm(ad - fd) / max(np.linalg.norm(fd), 1e-300))


def relative_errors(grad, ref, floor: float = 0.05) -> np.ndarray:
    """Entry-wise relative errors of a sweep of gradients: ``|grad - ref| / max(|ref|, floor *
    median |ref|)``.

    The floor keeps the error of a point where the reference crosses zero finite: there it is
    measured against ``floor`` times the sweep's typical gradient instead of the tiny local one.

    Arguments:
        grad: gradients, one per sweep point (array).
        ref: reference gradients at the same points, e.g. central differences of a converged solve.
        floor: fraction of the median ``|ref|`` below which ``|ref|`` is not used as the scale.

    Returns:
        The relative errors, shaped like ``grad``.
    """
    return np.abs(grad - ref) / np.maximum(np.abs(ref), floor * np.median(np.abs(ref)))


def gradcheck(
    loss: Callable,
    params,
    *,
    reference_loss: Callable | None = None,
    steps: Sequence[float] = DEFAULT_STEPS,
    tighten: bool | None = None,
) -> GradCheck:
    """AD gradient of ``loss`` at ``params`` vs central differences of ``reference_loss``, and of a
    tightened solve.

    Arguments:
        loss: scalar function of a parameter pytree, differentiated with ``jax.grad``. If it
            takes a ``cfg`` keyword (``def loss(p, cfg=cfg)``), the check can re-solve it with
            :func:`tightened` settings.
        params: parameter pytree (raveled to a vector for differencing).
        reference_loss: the loss whose central differences ``rel_error`` compares with;
            defaults to ``loss`` itself, i.e. AD against differences of the same solve.
        steps: difference steps to sweep (absolute, in parameter units).
        tighten: also difference ``loss(params, cfg=tightened(cfg))`` and report
            ``rel_error_tight``, the error that includes discretisation; None (default): whenever
            ``loss`` takes ``cfg``.

    Returns:
        :class:`GradCheck` with the AD and central-difference gradients, the whole step sweep,
        the chosen step, the relative error and, with ``tighten``, the same against the
        tightened solve.
    """
    takes_cfg = _takes_cfg(loss)
    tighten = takes_cfg if tighten is None else tighten
    if tighten and not takes_cfg:
        raise ValueError("tighten=True needs a loss with a `cfg` keyword argument (def loss(p, cfg=cfg): ...)")
    value, grad = jax.jit(jax.value_and_grad(loss))(params)
    ad = np.asarray(ravel_pytree(grad)[0])
    sweep, steps_arr = central_differences(reference_loss or loss, params, steps)
    k = pick_plateau(sweep)
    fd = sweep[k]
    result = GradCheck(float(value), ad, fd, sweep, steps_arr, float(steps_arr[k]), _rel(ad, fd))
    if tighten:
        cfg = inspect.signature(loss).parameters["cfg"].default
        if cfg is inspect.Parameter.empty:
            raise ValueError("the loss's `cfg` keyword needs a default, the config it runs with (def loss(p, cfg=cfg))")
        tight = tightened(cfg)
        tight_sweep, _ = central_differences(lambda p: loss(p, cfg=tight), params, steps)
        fd_tight = tight_sweep[pick_plateau(tight_sweep)]
        result = result._replace(fd_tight=fd_tight, rel_error_tight=_rel(ad, fd_tight))
    return result
