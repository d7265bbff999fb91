r"""``step`` and ``rollout``: one control period / N control periods of MJX dynamics.

Controls are held constant over each period of length ``m.opt.timestep`` (zero-order hold, as in
MuJoCo). Each period is advanced by the integration method the config names
(:func:`diffmjx.integration.method.integration_method`): for the Diffrax solvers one ``diffeqsolve`` of the ODE
in :mod:`diffmjx.physics.dynamics` with the configured Runge--Kutta method, step-size controller and
gradient mode (:mod:`diffmjx.integration.period`); for the ``mjx_*`` solvers MJX's own fixed-step integrators
(``integrator.substeps`` steps per period, :mod:`diffmjx.integration.fixed_step`), run on DiffMJX's
differentiable forward dynamics. This module knows none of them by name.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx.config import Config
from diffmjx.integration.adjoints import InterpolatedAdjoint, SensitivityAdjoint
from diffmjx.integration.method import Method, diffrax_method, integration_method
from diffmjx.integration.period import Stats
from diffmjx.physics import collision, manifold
from diffmjx.physics.checks import validate
from diffmjx.physics.dynamics import forward_unchecked

__all__ = [
    "InterpolatedAdjoint",
    "Method",
    "SensitivityAdjoint",
    "Stats",
    "Trajectory",
    "diffrax_method",
    "rollout",
    "step",
]


class Trajectory(NamedTuple):
    """State after each of the N control periods, and the integrator statistics of each period.

    ``dt`` is the step size the adaptive controller proposes after each period (the control
    period for MJX's fixed-step integrators): pass ``dt[-1]`` as ``rollout(..., dt0=)`` to
    continue where a rollout stopped. ``obs`` holds ``observe(d)`` after each period (stacked), or
    None without an ``observe`` function.
    """

    qpos: jax.Array  # (N, nq)
    qvel: jax.Array  # (N, nv)
    act: jax.Array  # (N, na)
    time: jax.Array  # (N,)
    stats: Stats
    dt: jax.Array | None = None  # (N,)
    obs: object = None  # pytree, leading axis N


def _first_dt(m, cfg: Config):
    return jnp.asarray(cfg.integrator.dt0 if cfg.integrator.dt0 is not None else m.opt.timestep)


def _prepare(m, cfg: Config | None, solver, stepsize_controller, adjoint):
    """Validate once, up front; the integration method."""
    cfg = Config() if cfg is None else cfg
    validate(m, cfg, solver=solver, stepsize_controller=stepsize_controller, adjoint=adjoint)
    return cfg, integration_method(cfg, solver, stepsize_controller, adjoint)


def step(
    m, d, cfg: Config | None = None, *, solver=None, stepsize_controller=None, adjoint=None, return_stats: bool = False
):
    """Advance ``d`` by one control period ``m.opt.timestep`` with ``d.ctrl`` held constant.

    Derived fields (``xpos``, ``contact``, ``qacc``, ...) are not recomputed for the Diffrax
    solvers; call :func:`diffmjx.forward` on the result when you need them.

    Arguments:
        m: ``mjx.Model``; its ``opt.timestep`` is the control period.
        d: ``mjx.Data`` at the start of the period.
        cfg: :class:`diffmjx.Config`; ``Config()`` if None.
        solver, stepsize_controller, adjoint: Diffrax objects replacing the config's choice (see
            :func:`diffrax_method`); not allowed with the ``mjx_*`` solvers.
        return_stats: also return the period's :class:`Stats`.

    Returns:
        The new ``mjx.Data`` with positions, velocities, activations and time advanced, or
        ``(data, Stats)``.
    """
    cfg, method = _prepare(m, cfg, solver, stepsize_controller, adjoint)
    layout = manifold.JointLayout.from_model(m)
    d, stats, _ = method.period(m, d, layout, _first_dt(m, cfg))
    return (d, stats) if return_stats else d


def rollout(
    m,
    d,
    ctrls,
    cfg: Config | None = None,
    *,
    solver=None,
    stepsize_controller=None,
    adjoint=None,
    observe=None,
    dt0=None,
):
    """Run ``N = len(ctrls)`` control periods, each with its control held constant.

    Works under ``jit``, ``grad``, ``jacfwd`` and ``vmap``.

    Arguments:
        m: ``mjx.Model``; its ``opt.timestep`` is the control period.
        d: ``mjx.Data`` at the start.
        ctrls: (N, nu) controls, one row per period (nu may be 0).
        cfg: :class:`diffmjx.Config`; ``Config()`` if None.
        solver, stepsize_controller, adjoint: Diffrax objects replacing the config's choice (see
            :func:`diffrax_method`); not allowed with the ``mjx_*`` solvers.
        observe: ``observe(d) -> pytree``, called after each period on the ``mjx.Data`` of the
            period's end state with every derived field computed (:func:`diffmjx.forward`: sites,
            tendon lengths, actuator forces, contacts, ``qacc``) and ``ctrl`` the period's
            control; results are stacked in ``Trajectory.obs``. Costs one extra forward pass per
            period (like Diffrax's ``SaveAt(fn=...)``, it is differentiated too).
        dt0: the first step size of the adaptive integrators (e.g. ``Trajectory.dt[-1]`` of an
            earlier rollout); ``integrator.dt0`` or the control period if None.

    Returns:
        ``(final_data, Trajectory)``: the ``mjx.Data`` after the last period and the state after
        each period with its integrator statistics, proposed step sizes and observations.
    """
    cfg, method = _prepare(m, cfg, solver, stepsize_controller, adjoint)
    shape = tuple(np.shape(ctrls))
    if len(shape) != 2 or shape[1] != m.nu:
        raise ValueError(f"ctrls must have shape (N, nu) = (N, {m.nu}); got {shape}")
    if observe is not None and not callable(observe):
        raise ValueError(f"observe must be a function of mjx.Data; got {type(observe).__name__}")
    layout = manifold.JointLayout.from_model(m)

    ctrls = jnp.asarray(ctrls)
    if method.carries_all_data:
        d = collision.allocate(m, d, cfg.collision)  # the scan carries d: one contact layout throughout

        # MJX's fixed-step solvers advance more of d (warmstart, derived fields): carry all of it
        def split(d):
            return d

        def join(carry, u):
            return carry.replace(ctrl=u)
    else:
        # a Diffrax period changes only _PERIOD_STATE: the scan carries that, the rest stays in d0
        d0 = d

        def split(d):
            return {k: getattr(d, k) for k in _PERIOD_STATE}

        def join(carry, u):
            return d0.replace(**carry, ctrl=u)

    def body(carry, u):
        state, dt = carry
        d, stats, dt = method.period(m, join(state, u), layout, dt)
        obs = None if observe is None else observe(forward_unchecked(m, d.replace(ctrl=u), cfg))
        period_dt = jnp.broadcast_to(jnp.asarray(dt, d.qpos.dtype), ())
        return (split(d), dt), Trajectory(d.qpos, d.qvel, d.act, d.time, stats, period_dt, obs)

    if cfg.integrator.remat:
        # store only the carry per period; recompute the period's internals in the backward pass
        body = jax.checkpoint(body)
    first = _first_dt(m, cfg) if dt0 is None else jnp.asarray(dt0, dtype=_first_dt(m, cfg).dtype)
    (state, _), traj = jax.lax.scan(body, (split(d), first), ctrls)
    return join(state, ctrls[-1] if ctrls.shape[0] else d.ctrl), traj


_PERIOD_STATE = ("qpos", "qvel", "act", "time")  # all that a Diffrax period changes in d
