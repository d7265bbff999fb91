"""Per-period state and control Jacobians along a rollout: the derivatives iLQR, DDP and LQR need.

:func:`linearize` returns ``A_t = d x_{t+1} / d x_t`` and ``B_t = d x_{t+1} / d u_t`` for every
control period ``t`` of a rollout, with the state ``x = (qpos, qvel, act)`` in tangent coordinates
(size ``2 nv + na``): hinge and slide positions as they are, every free or ball joint's
orientation as a body-frame rotation vector, as :func:`diffmjx.physics.manifold.difference` and MuJoCo's
``mjd_transitionFD`` write it. So the matrices drop into any controller written for MuJoCo's own
finite-difference Jacobians, but they differentiate DiffMJX's converged period (adaptive
integration, kink control, CFD when the config enables it) instead of one fixed time step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.config import Config
from diffmjx.integration.integrate import rollout
from diffmjx.physics import manifold
from diffmjx.registry import GRADIENT_MODES

JACOBIANS = ("period", "substep")
"""What :func:`linearize` differentiates: each whole ``period``, or one ``substep`` held over it."""

__all__ = [
    "JACOBIANS",
    "Linearization",
    "forward_config",
    "linearize",
    "period_map",
    "tangent_offset",
    "tangent_size",
]


class Linearization(NamedTuple):
    """Jacobians of ``T`` control periods and the nominal states they are taken at.

    Attributes:
        A: (T, n, n) ``d x_{t+1} / d x_t``, ``n = 2 nv + na`` (tangent coordinates).
        B: (T, n, nu) ``d x_{t+1} / d u_t``.
        qpos, qvel, act: (T + 1, ...) the nominal states, ``x_0`` the given data's.
        dt0: (T,) the first trial step of each period's solve (the rollout's own proposals).
    """

    A: jax.Array
    B: jax.Array
    qpos: jax.Array
    qvel: jax.Array
    act: jax.Array
    dt0: jax.Array


def tangent_size(m) -> int:
    """``2 nv + na``: the size of the tangent state :func:`linearize` differentiates."""
    return 2 * int(m.nv) + int(m.na)


def forward_config(cfg: Config | None) -> Config:
    """``cfg`` with a gradient mode ``jax.jacfwd`` can differentiate (``Config()`` if None): its
    own if forward-mode (``forward``, ``sensitivity``) or fixed-step MJX, else ``forward``."""
    cfg = Config() if cfg is None else cfg
    if GRADIENT_MODES[cfg.integrator.adjoint].forward or cfg.integrator.fixed_step:
        return cfg
    # a reverse-mode adjoint (checkpoint, backsolve, interpolated) cannot be pushed forward: the
    # Jacobian of the same period in forward mode (discretise-then-optimise, kink control as set)
    return cfg.override("integrator.adjoint=forward")


def period_map(m, d, cfg: Config | None = None):
    """``f(x, u, state, dt0) -> (qpos', qvel', act')``: one control period from a perturbed state.

    ``state = (qpos, qvel, act, time)`` is the nominal start state, ``x`` (size ``2 nv + na``) a
    tangent perturbation of it (positions by :func:`diffmjx.physics.manifold.retract`), ``u`` the period's
    control and ``dt0`` the solve's first trial step. ``d`` supplies everything else (model inputs
    such as ``mocap_pos``). :func:`linearize` differentiates it; a finite-difference check calls it.
    """
    period = _period_map(m, d, forward_config(cfg))
    return lambda x, u, state, dt0: period(x, u, state, dt0)[0]


def _period_map(m, d, cfg: Config):
    """:func:`period_map`'s ``f`` returning also the step size the solve proposes next."""
    layout = manifold.JointLayout.from_model(m)
    nv = int(m.nv)

    def f(x, u, state, dt0):
        qpos, qvel, act, time = state
        d0 = d.replace(
            qpos=manifold.retract(layout, qpos, x[:nv]),
            qvel=qvel + x[nv : 2 * nv],
            act=act + x[2 * nv :],
            time=time,
            ctrl=u,
        )
        d1, traj = rollout(m, d0, u[None], cfg, dt0=dt0)
        return (d1.qpos, d1.qvel, d1.act), traj.dt[-1]

    return f


def tangent_offset(layout: manifold.JointLayout, ref, end):
    """``end - ref`` of two ``(qpos, qvel, act)`` states in tangent coordinates (size ``2 nv + na``)."""
    return jnp.concatenate([manifold.difference(layout, ref[0], end[0]), end[1] - ref[1], end[2] - ref[2]])


def linearize(m, d, ctrls, cfg: Config | None = None, *, dt0=None, jacobian: str = "period") -> Linearization:
    """Jacobians ``A_t``, ``B_t`` of every control period of ``rollout(m, d, ctrls, cfg)``.

    Each period is solved once, under ``jax.jacfwd`` with respect to a tangent perturbation of its
    start state and to its control: the primal of that solve is the next nominal state (the
    rollout's, period by period, with the step size each period proposes carried to the next). Forward-mode derivatives need a
    forward-mode gradient setting: ``integrator.adjoint`` ``forward`` (discretise-then-optimise,
    with the config's kink control) or ``sensitivity`` is used as set; any reverse-mode adjoint is
    replaced by ``forward`` (the same period's derivative). With ``cfd.enabled`` the Jacobians
    carry CFD's forces from distance (the nominal states stay the plain physics'). The fixed-step
    ``mjx_*`` solvers give ``jacfwd`` of MJX's own step, for comparison.

    Works under ``jit`` and ``vmap`` (e.g. over start states).

    Arguments:
        m: ``mjx.Model`` with at least one actuator; its ``opt.timestep`` is the control period.
        d: ``mjx.Data`` at the start.
        ctrls: (T, nu) controls, one row per period.
        cfg: :class:`diffmjx.Config`; ``Config()`` if None.
        dt0: the first period's first integrator step (e.g. ``Trajectory.dt[-1]`` of an earlier
            rollout); ``integrator.dt0`` or the control period if None.
        jacobian: ``period`` (default): each period's own Jacobians, as above. ``substep``: for
            the fixed-step solvers (``integrator.substeps`` steps of ``timestep / substeps`` per
            period), the Jacobians of one step taken at each period's nominal start and held for
            the whole period (``A = A_1^S``, ``B = (I + A_1 + ... + A_1^{S-1}) B_1``): an
            approximation that differentiates one step instead of ``S`` (exact on a linear
            system, off wherever the dynamics change within the period), for planners whose
            line search judges each step on the real rollout (iLQR's ``ilqr_jacobian``). The
            nominal states are the rollout's either way.

    Returns:
        :class:`Linearization` with ``A`` (T, n, n), ``B`` (T, n, nu), ``n = 2 nv + na``.
    """
    if int(m.nu) == 0:
        raise ValueError("linearize: the model m has no actuators (nu = 0), so there is no B = dx'/du to take")
    shape = tuple(np.shape(ctrls))
    if len(shape) != 2 or shape[1] != m.nu or shape[0] < 1:
        raise ValueError(f"linearize: ctrls must have shape (T, nu) = (T >= 1, {m.nu}); got {shape}")
    if jacobian not in JACOBIANS:
        raise ValueError(f"linearize: jacobian={jacobian!r} is not allowed; choose one of: {', '.join(JACOBIANS)}")
    cfg = forward_config(cfg)
    ctrls = jnp.asarray(ctrls)
    if dt0 is None:
        dt0 = cfg.integrator.dt0 if cfg.integrator.dt0 is not None else m.opt.timestep
    first = jnp.asarray(dt0, d.qvel.dtype)
    if jacobian == "substep":
        if not cfg.integrator.fixed_step:
            raise ValueError(
                f"linearize: jacobian='substep' needs a fixed-step solver (integrator.solver one of the mjx_* "
                f"or fixed-step ones), got integrator.solver={cfg.integrator.solver!r}; use jacobian='period'"
            )
        return _held_substep(m, d, ctrls, cfg, first)
    period = _period_map(m, d, cfg)
    layout = manifold.JointLayout.from_model(m)

    def offset(x, u, state, dt0):
        end, dt_next = period(x, u, state, dt0)
        # the derivative of the offset from its own primal value: the end state's, in tangent coordinates
        return tangent_offset(layout, jax.lax.stop_gradient(end), end), (end, dt_next)

    jac = jax.jacfwd(offset, argnums=(0, 1), has_aux=True)
    x0 = jnp.zeros(tangent_size(m), dtype=d.qvel.dtype)

    def body(carry, u):
        # one solve per period gives both the next nominal state (the primal) and its Jacobians
        (qpos, qvel, act, time), dt0 = carry
        (A, B), ((q1, v1, a1), dt_next) = jac(x0, u, (qpos, qvel, act, time), dt0)
        # the next period starts from the step size this one proposes, as in diffmjx.rollout
        return ((q1, v1, a1, time + m.opt.timestep), dt_next), (A, B, q1, v1, a1, dt0)

    init = ((d.qpos, d.qvel, d.act, jnp.asarray(d.time, d.qvel.dtype)), first)
    _, (A, B, qpos, qvel, act, dt0) = jax.lax.scan(body, init, ctrls.astype(d.qvel.dtype))
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs])
    return Linearization(A, B, cat(d.qpos, qpos), cat(d.qvel, qvel), cat(d.act, act), dt0)


def _held_substep(m, d, ctrls, cfg: Config, first) -> Linearization:
    """:func:`linearize` with ``jacobian='substep'``: the nominal rollout (its first step ``first``),
    then one substep's Jacobians at every period's start (all periods at once), raised to the
    substeps' power."""
    steps = cfg.integrator.substeps
    layout = manifold.JointLayout.from_model(m)
    _, traj = rollout(m, d, ctrls, cfg, dt0=first)
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs])
    qpos, qvel, act = cat(d.qpos, traj.qpos), cat(d.qvel, traj.qvel), cat(d.act, traj.act)
    times = jnp.asarray(d.time, d.qvel.dtype) + m.opt.timestep * jnp.arange(ctrls.shape[0], dtype=d.qvel.dtype)
    one = _mjx.with_timestep(m, m.opt.timestep / steps)
    step = _period_map(one, d, cfg.override("integrator.substeps=1"))

    def offset(x, u, state):
        end, _ = step(x, u, state, one.opt.timestep)
        return tangent_offset(layout, jax.lax.stop_gradient(end), end)

    x0 = jnp.zeros(tangent_size(m), dtype=d.qvel.dtype)
    starts = (qpos[:-1], qvel[:-1], act[:-1], times)
    A1, B1 = jax.vmap(jax.jacfwd(offset, argnums=(0, 1)), in_axes=(None, 0, 0))(x0, ctrls.astype(x0.dtype), starts)

    def held(a1, b1):  # (A_1^S, sum_k A_1^k B_1)
        def body(carry, _):
            power, b = carry
            return (a1 @ power, b + power @ b1), None

        (a, b), _ = jax.lax.scan(body, (jnp.eye(a1.shape[0], dtype=a1.dtype), jnp.zeros_like(b1)), None, length=steps)
        return a, b

    A, B = jax.vmap(held)(A1, B1)
    return Linearization(A, B, qpos, qvel, act, cat(first, traj.dt[:-1].astype(first.dtype)))
