r"""State pytree and the ODE vector field over MJX forward dynamics.

Within one control period starting at configuration :math:`q_0` the ODE state is
``State(xi, qvel, act)`` with :math:`q = q_0 \boxplus \xi` (see :mod:`diffmjx.manifold`):

.. math:: \dot\xi = J^{-1}(\xi)\, v, \qquad \dot v = \ddot q(q, v, u), \qquad \dot a = \dot a(q, v, a, u).

Activations follow MuJoCo's clamping: the vector field sees ``act`` clipped to ``actrange``, and an
activation sitting on a limit does not move further out of it.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx, collision, constraint, manifold, solver, tendon
from diffmjx.checks import validate
from diffmjx.config import Config
from diffmjx.impedance import MINIMP

__all__ = [
    "State",
    "act_limits",
    "cfd_contacts",
    "clamp_act",
    "forward",
    "forward_unchecked",
    "muscle_model",
    "stages",
    "straight_through",
    "vector_field",
]


class State(NamedTuple):
    """ODE state of one control period: local position coordinates, velocities, activations."""

    xi: jax.Array  # (nv,)
    qvel: jax.Array  # (nv,)
    act: jax.Array  # (na,)


def straight_through(forward_value, backward_value):
    """One function's values, another's derivatives: leaf by leaf ``sg(f) + b - sg(b)``.

    With MJX's accelerations as ``forward_value`` and the contacts-from-distance accelerations as
    ``backward_value``, the trajectory stays physical while gradients see forces between bodies
    that do not touch (paper Sec. 4, eq. 4).

    Arguments:
        forward_value: pytree whose values the result takes.
        backward_value: pytree of the same structure whose derivatives the result takes.

    Returns:
        A pytree equal to ``forward_value`` with the derivatives of ``backward_value``.
    """
    sg = jax.lax.stop_gradient
    return jax.tree.map(lambda f, b: sg(f) + (b - sg(b)), forward_value, backward_value)


def stages(cfg: Config, remat_iterations: bool = True) -> list[tuple[str, object]]:
    """The stages of :func:`forward` without contacts from distance, in order, as ``(name, fn(m, d) -> d)``.

    Composing them gives :func:`forward`'s accelerations for a config with ``cfd.enabled`` off
    (``experiments/benchmark_vjp`` times them one by one).

    Arguments:
        cfg: :class:`diffmjx.Config` (collision and the solver section are read).
        remat_iterations: passed to :func:`diffmjx.solver.solve`.

    Returns:
        A list of ``(name, stage)`` pairs: MJX's position stages (with :mod:`diffmjx.tendon`'s
        tendon stage, and the smoothed collision stage under ``collision.smooth``), sensors, velocity, actuation and acceleration stages, the
        impedance floor where it differs from MuJoCo's, the constraint solve and the acceleration
        sensors.
    """
    out = [
        *_mjx.position_stages(_collide(cfg), tendon.tendon, constraint.make_constraint),
        ("sensor_pos", _mjx.sensor_pos),
        ("fwd_velocity", _mjx.fwd_velocity),
        ("sensor_vel", _mjx.sensor_vel),
        ("fwd_actuation", lambda m, d: _mjx.fwd_actuation(muscle_model(m, cfg.muscle), d)),
        ("fwd_acceleration", _mjx.fwd_acceleration),
    ]
    floor = cfg.solver.impedance_floor
    if floor != MINIMP:
        out.append(("impedance_floor", lambda m, d: constraint.with_impedance_floor(m, d, floor)))
    sc = cfg.solver
    out.append(("solve", lambda m, d: solver.solve(solve_model(m, sc), d, sc.gradient, remat_iterations)))
    out.append(("sensor_acc", _mjx.sensor_acc))
    return out


def _collide(cfg: Config):
    """The collision stage: MJX's (None) unless ``collision.smooth``, ``collision.plane_box``,
    ``collision.plane_cylinder`` or ``collision.box_box`` asks for DiffMJX's functions."""
    c = cfg.collision
    if not c.smooth and c.plane_box == "mjx" and c.plane_cylinder == "mjx" and c.box_box == "mjx":
        return None
    sharp = c.sharpness if c.smooth else None
    return lambda m, d: collision.collide(m, d, sharp, c.plane_box, c.plane_cylinder, c.box_box)


def forward(m, d, cfg: Config | None = None):
    """MJX forward dynamics ``(m, d) -> d`` with a reverse-mode-differentiable constraint solve.

    Same stages as ``mjx.forward``; the tendon stage is :mod:`diffmjx.tendon`'s and the rows'
    impedance :func:`diffmjx.constraint.make_constraint`'s (same values, finite derivatives), the
    constraint solve is :mod:`diffmjx.solver`'s, and with
    ``collision.smooth`` the collision stage uses :mod:`diffmjx.collision`'s smoothed functions.
    With ``cfd.enabled`` the contacts-from-distance rows of :func:`diffmjx.constraint.from_distance`
    give the derivatives (straight-through) or, with ``cfd.in_forward``, the accelerations.

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


def solve_model(m, s):
    """``m`` with the constraint solve's iteration budget and tolerance that ``s`` asks for.

    The solve runs at least ``s.min_iterations`` iterations and stops at a tolerance no looser than
    ``s.max_tolerance``; ``m`` is returned as it is when the model's own settings already meet both.
    """
    it = max(int(m.opt.iterations), s.min_iterations)
    if it == m.opt.iterations and s.max_tolerance >= 1.0:
        return m
    tol = jnp.minimum(m.opt.tolerance, s.max_tolerance)
    return m.replace(opt=m.opt.replace(iterations=it, tolerance=tol))


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
    """:func:`forward` without the up-front checks (they ran once, before tracing)."""
    d = _mjx.fwd_position_with(m, d, _collide(cfg), tendon.tendon, constraint.make_constraint)
    d = _mjx.sensor_pos(m, d)
    d = _mjx.fwd_velocity(m, d)
    d = _mjx.sensor_vel(m, d)
    d = _mjx.fwd_actuation(muscle_model(m, cfg.muscle), d)
    d = _mjx.fwd_acceleration(m, d)
    if _mjx.efc(d).J.size == 0:
        return d.replace(qacc=d.qacc_smooth)
    if cfg.solver.impedance_floor != MINIMP:
        d = constraint.with_impedance_floor(m, d, cfg.solver.impedance_floor)
    ms = solve_model(m, cfg.solver)  # the solve's budget; every other stage keeps m
    if cfg.cfd.enabled:
        # contacts from distance: CFD rows on the same positions and velocities
        rows = constraint.from_distance(m, cfd_contacts(m, d, cfg), cfg.cfd, cfg.solver.impedance_floor)
        d_cfd = solver.solve(ms, rows, cfg.solver.gradient)
        if cfg.cfd.in_forward:
            return _mjx.sensor_acc(m, d_cfd)
        d = solver.solve(ms, d, cfg.solver.gradient)
        # straight-through: MJX's accelerations forward, CFD's derivatives backward; the constraint
        # force as well, which MJX's Euler (with Euler damping, MuJoCo's default) and implicit
        # integrators turn into the acceleration again (M^-1 (qfrc_smooth + qfrc_constraint))
        d = d.replace(
            qacc=straight_through(d.qacc, d_cfd.qacc),
            qfrc_constraint=straight_through(d.qfrc_constraint, d_cfd.qfrc_constraint),
        )
        return _mjx.sensor_acc(m, d)
    d = solver.solve(ms, d, cfg.solver.gradient)
    return _mjx.sensor_acc(m, d)


def cfd_contacts(m, d, cfg: Config):
    """``d`` with the contacts contacts-from-distance builds its rows from.

    With ``collision.smooth`` these are the forward's own. Without it, MJX's contacts serve the
    forward, but CFD takes DiffMJX's collision functions (at ``collision.sharpness``) for the pairs
    that have one: for a box above a plane, MJX's plane-box reports four vertices that are not the
    lowest ones (its manifold rule assumes penetration), so CFD would pull on the wrong corners.
    """
    c = cfg.collision
    return d if c.smooth else collision.collide(m, d, c.sharpness, c.plane_box, c.plane_cylinder)


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
