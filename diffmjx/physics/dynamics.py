r"""State pytree and the ODE vector field over MJX forward dynamics.

Within one control period starting at configuration :math:`q_0` the ODE state is
``State(xi, qvel, act)`` with :math:`q = q_0 \boxplus \xi` (see :mod:`diffmjx.physics.manifold`):

.. math:: \dot\xi = J^{-1}(\xi)\, v, \qquad \dot v = \ddot q(q, v, u), \qquad \dot a = \dot a(q, v, a, u).

Activations follow MuJoCo's clamping: the vector field sees ``act`` clipped to ``actrange``, and an
activation sitting on a limit does not move further out of it.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.config import Config
from diffmjx.physics import cfd, collision, constraint, manifold, smooth, solver, tendon
from diffmjx.physics.checks import validate
from diffmjx.physics.impedance import MINIMP

__all__ = [
    "State",
    "act_limits",
    "clamp_act",
    "forward",
    "forward_unchecked",
    "muscle_model",
    "stages",
    "vector_field",
]


class State(NamedTuple):
    """ODE state of one control period: local position coordinates, velocities, activations."""

    xi: jax.Array  # (nv,)
    qvel: jax.Array  # (nv,)
    act: jax.Array  # (na,)


def stages(cfg: Config, remat_iterations: bool = True) -> list[tuple[str, object]]:
    """The stages of :func:`forward`, in order, as ``(name, fn(m, d) -> d)``: composing them is
    :func:`forward_unchecked` (``experiments/benchmark_vjp`` times them one by one).

    Arguments:
        cfg: :class:`diffmjx.Config` (the collision, muscle, solver and cfd sections are read).
        remat_iterations: passed to :func:`diffmjx.physics.solver.solve`.

    Returns:
        A list of ``(name, stage)`` pairs: MJX's position stages (with :mod:`diffmjx.physics.tendon`'s
        tendon stage, :func:`diffmjx.physics.constraint.make_constraint`'s rows and the collision stage
        of :func:`diffmjx.physics.collision.stage`), sensors, velocity, actuation and acceleration
        stages; then, on constraint rows, the impedance floor where it differs from MuJoCo's,
        the constraint solve (with ``cfd.enabled``, :func:`diffmjx.physics.cfd.accelerations`) and the
        acceleration sensors. A ``d`` without constraint rows skips those three: its ``qacc``
        is ``qacc_smooth``.
    """
    sc = cfg.solver
    out = [
        *_mjx.position_stages(
            collision.stage(cfg.collision),
            tendon.tendon,
            constraint.make_constraint,
            smooth.kinematics,
            smooth.com_pos,
        ),
        ("sensor_pos", _mjx.sensor_pos),
        ("fwd_velocity", smooth.fwd_velocity),
        ("sensor_vel", _mjx.sensor_vel),
        ("fwd_actuation", lambda m, d: _mjx.fwd_actuation(muscle_model(m, cfg.muscle), d)),
        ("fwd_acceleration", _mjx.fwd_acceleration),
    ]
    if sc.impedance_floor != MINIMP:

        def floor(m, d):
            return constraint.with_impedance_floor(m, d, sc.impedance_floor)

        out.append(("impedance_floor", _on_rows(floor)))
    if cfg.cfd.enabled:

        def solve(m, d):  # MJX's rows and CFD's, straight-through
            return cfd.accelerations(m, d, cfg, remat_iterations)

    else:

        def solve(m, d):  # the solve's budget is solver.solve_model's; every other stage keeps m
            return solver.solve(solver.solve_model(m, sc), d, sc.gradient, remat_iterations)

    out.append(("solve", _on_rows(solve, without=lambda m, d: d.replace(qacc=d.qacc_smooth))))
    out.append(("sensor_acc", _on_rows(_mjx.sensor_acc)))
    return out


def _on_rows(stage, without=None):
    """``stage`` for a ``d`` with constraint rows; ``without`` (default: nothing) for one without."""

    def run(m, d):
        if _mjx.efc(d).J.size == 0:
            return d if without is None else without(m, d)
        return stage(m, d)

    return run


def forward(m, d, cfg: Config | None = None):
    """MJX forward dynamics ``(m, d) -> d`` with a reverse-mode-differentiable constraint solve.

    Same stages as ``mjx.forward``; the tendon stage is :mod:`diffmjx.physics.tendon`'s and the rows'
    impedance :func:`diffmjx.physics.constraint.make_constraint`'s (same values, finite derivatives), the
    constraint solve is :mod:`diffmjx.physics.solver`'s, and with
    ``collision.smooth`` the collision stage uses :mod:`diffmjx.physics.collision`'s smoothed functions.
    With ``cfd.enabled`` the constraint solve is :func:`diffmjx.physics.cfd.accelerations`: the
    contacts-from-distance rows give the derivatives (straight-through) or, with
    ``cfd.in_forward``, the accelerations. The stages are :func:`stages`.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` (positions, velocities, activations, controls, ...).
        cfg: the configuration; ``Config()`` if None. Checked against ``m`` by
            :func:`diffmjx.validate`.

    Returns:
        ``d`` with every derived field, ``qacc`` and ``act_dot`` computed.
    """
    cfg = Config() if cfg is None else cfg
    validate(m, cfg)
    return forward_unchecked(m, d, cfg)


def muscle_model(m, mc):
    """``m`` with every muscle actuator's ``tausmooth`` set to ``mc.tausmooth`` (the
    :class:`diffmjx.config.MuscleConfig`); ``m`` itself when that is None or no actuator is a muscle.

    MJX reads ``tausmooth`` from ``actuator_dynprm[:, 2]`` as the C engine does, so the result is
    exactly the model an MJCF ``tausmooth`` attribute would give.
    """
    if mc.tausmooth is None:
        return m
    muscles = np.flatnonzero(np.asarray(m.actuator_dyntype) == _mjx.DynType.MUSCLE)
    if muscles.size == 0:
        return m
    dynprm = jnp.asarray(m.actuator_dynprm).at[muscles, 2].set(mc.tausmooth)
    return m.replace(actuator_dynprm=dynprm)


def forward_unchecked(m, d, cfg: Config):
    """:func:`forward` without the up-front checks (they ran once, before tracing): the
    composition of :func:`stages`."""
    for _, stage in stages(cfg):
        d = stage(m, d)
    return d


def ctrl_bounds(m):
    """(nu,) lower and upper control bounds: ``ctrlrange`` where ``ctrllimited``, else infinite."""
    limited = np.asarray(m.actuator_ctrllimited, dtype=bool)
    rng = np.asarray(m.actuator_ctrlrange, dtype=np.float64).reshape(-1, 2)
    lo = np.where(limited, rng[:, 0], -np.inf)
    hi = np.where(limited, rng[:, 1], np.inf)
    return jnp.asarray(lo), jnp.asarray(hi)


def ctrl_width(m):
    """(nu,) each actuator's control range, 1 for an unlimited one: the unit of the planners'
    ``noise_scale``, ``learning_rate`` and ``ilqr_reach``."""
    lo, hi = ctrl_bounds(m)
    return jnp.where(jnp.isfinite(hi - lo), hi - lo, 1.0)


def act_limits(m):
    """(na, 2) activation bounds, infinite where an actuator is not actlimited (actnum 1 assumed)."""
    stateful = np.asarray(m.actuator_actadr) >= 0
    rng = m.actuator_actrange[stateful]
    lim = m.actuator_actlimited[stateful]
    return jnp.where(lim[:, None], rng, jnp.array([-jnp.inf, jnp.inf]))


def clamp_act(m, act):
    if not m.na:
        return act
    lim = act_limits(m)
    return jnp.clip(act, lim[:, 0], lim[:, 1])


def vector_field(m, d0, y: State, t, layout: manifold.JointLayout, cfg: Config):
    """Time derivative of ``y`` for the control period that starts at ``d0`` (ctrl held fixed)."""
    qpos = manifold.retract(layout, d0.qpos, y.xi)
    act = clamp_act(m, y.act)
    d = d0.replace(qpos=qpos, qvel=y.qvel, act=act, time=t)
    d = forward_unchecked(m, d, cfg)
    act_dot = d.act_dot
    if m.na:
        lim = act_limits(m)
        pinned = ((act >= lim[:, 1]) & (act_dot > 0)) | ((act <= lim[:, 0]) & (act_dot < 0))
        act_dot = jnp.where(pinned, 0.0, act_dot)
    return State(manifold.dexp_inv(layout, y.xi, y.qvel), d.qacc, act_dot), d
