r"""State pytree and the ODE vector field over MJX forward dynamics.

Within one control period starting at configuration :math:`q_0` the ODE state is
``State(xi, qvel, act)`` with :math:`q = q_0 \boxplus \xi` (see :mod:`diffmjx.manifold`):

.. math:: \dot\xi = J^{-1}(\xi)\, v, \qquad \dot v = \ddot q(q, v, u), \qquad \dot a = \dot a(q, v, a, u).

Activations follow MuJoCo's clamping: the vector field sees ``act`` clipped to ``actrange``, and an
activation sitting on a limit does not move further out of it.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from cfd import constraint as cfd_constraint
from cfd.straight_through import straight_through
from diffmjx import _mjx, collision, manifold, solver
from diffmjx.config import Config


class State(NamedTuple):
    """ODE state of one control period: local position coordinates, velocities, activations."""

    xi: jax.Array  # (nv,)
    qvel: jax.Array  # (nv,)
    act: jax.Array  # (na,)


def forward(m, d, cfg: Config | None = None):
    """MJX forward dynamics ``(m, d) -> d`` with a reverse-mode-differentiable constraint solve.

    Same stages as ``mjx.forward``; the constraint solve is :mod:`diffmjx.solver`'s, and with
    ``collision.smooth`` the collision stage uses :mod:`diffmjx.collision`'s smoothed functions.
    """
    cfg = Config() if cfg is None else cfg
    if cfg.collision.smooth:
        sharp = cfg.collision.sharpness
        d = _mjx.fwd_position_with(m, d, lambda m, d: collision.collide(m, d, sharp))
    else:
        d = _mjx.fwd_position(m, d)
    d = _mjx.sensor_pos(m, d)
    d = _mjx.fwd_velocity(m, d)
    d = _mjx.sensor_vel(m, d)
    d = _mjx.fwd_actuation(m, d)
    d = _mjx.fwd_acceleration(m, d)
    if _mjx.efc(d)[0].size == 0:
        return d.replace(qacc=d.qacc_smooth)
    if cfg.solver.impedance_floor != _mjx.MINIMP:
        d = solver.with_impedance_floor(m, d, cfg.solver.impedance_floor)
    if cfg.cfd.enabled:
        # contacts from distance: CFD rows on the same positions and velocities
        rows = cfd_constraint.make_constraint(m, cfd_contacts(m, d, cfg), cfg.cfd, cfg.solver.impedance_floor)
        d_cfd = solver.solve(m, rows, cfg.solver.gradient)
        if cfg.cfd.in_forward:
            return _mjx.sensor_acc(m, d_cfd)
        d = solver.solve(m, d, cfg.solver.gradient)
        # straight-through: MJX's accelerations forward, CFD's derivatives backward
        d = d.replace(qacc=straight_through(d.qacc, d_cfd.qacc))
        return _mjx.sensor_acc(m, d)
    d = solver.solve(m, d, cfg.solver.gradient)
    return _mjx.sensor_acc(m, d)


def cfd_contacts(m, d, cfg: Config):
    """``d`` with the contacts contacts-from-distance builds its rows from.

    With ``collision.smooth`` these are the forward's own. Without it, MJX's contacts serve the
    forward, but CFD takes DiffMJX's collision functions (at ``collision.sharpness``) for the pairs
    that have one: for a box above a plane, MJX's plane-box reports four vertices that are not the
    lowest ones (its manifold rule assumes penetration), so CFD would pull on the wrong corners.
    """
    return d if cfg.collision.smooth else collision.collide(m, d, cfg.collision.sharpness)


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
    d = forward(m, d, cfg)
    act_dot = d.act_dot
    if m.na:
        lim = act_limits(m)
        pinned = ((act >= lim[:, 1]) & (act_dot > 0)) | ((act <= lim[:, 0]) & (act_dot < 0))
        act_dot = jnp.where(pinned, 0.0, act_dot)
    return State(manifold.dexp_inv(layout, y.xi, y.qvel), d.qacc, act_dot), d
