r"""The force jump at a touchdown in discretise-then-optimise derivatives (the saltation term).

A contact whose impedance at zero distance is above zero (MuJoCo's default ``solimp`` starts at
0.9) switches its force on with a jump the instant its distance ``r`` crosses zero; a joint limit
does the same at the end of its range. The vector field is discontinuous there, and the derivative
of the discrete solve (the ``checkpoint`` and ``forward`` gradient modes) misses what the jump adds:
a perturbation that moves the touchdown by ``tau`` leaves the state with ``(f+ - f-) tau`` more or
less, at any tolerance. For an event surface ``r(x, theta) = 0`` crossed at rate ``r_dot`` the
exact correction of the state's tangent right after the event is the saltation term

.. math:: \delta x^+ = \delta x^- + (f^+ - f^-) \, \delta r / \dot r ,

``delta r`` the tangent of the distance (through the state and through parameters such as a geom's
size), ``f+ - f-`` the jump of the vector field (its acceleration part).

:class:`JumpAware` wraps a Diffrax Runge–Kutta solver: after each step it looks for an event
distance that changed sign within the step (from the distance and its rate at the step's end),
locates the earliest such crossings (up to :data:`EVENTS`) on the step's dense output (three Newton
steps each), evaluates the vector field just before and just after each, so that ``f+ - f-`` is that
event's own jump (a touchdown's force switching on; a lift-off's switching off where the force had
not gone to zero before the distance did; nothing where it had; crossings at the same instant, such
as a box's mirror-image corners, share theirs), and adds the terms to the step's end state through
a custom derivative. :class:`AdjointJumpAware` does the same on the ``backsolve`` adjoint's backward steps,
with the term's transpose. The forward values are untouched: the term is zero, and a solve that
autodiff never enters never evaluates it. A crossing too slow for the simulation to resolve its time
(a body resting on a contact's edge) gets a regularised factor (:func:`coefficients`). Box-box
contact slots are left out (:func:`distances_at`).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.integration.adjoints import Backsolve, Discretised, KinkAwareBacksolve
from diffmjx.integration.wrapped import PassThroughSolver
from diffmjx.physics import checks, collision, manifold
from diffmjx.physics.dynamics import State

EVENTS = 4
"""Crossings located per step: the earliest four (a box's four corners landing flat), each with its own jump."""

__all__ = [
    "AdjointJumpAware",
    "JumpAware",
    "carry_jumps",
    "coefficients",
    "distances_at",
    "distances_of",
    "event_distances",
    "has_events",
    "limit_rows",
    "probe_of",
    "with_adjoint_jumps",
    "wrap",
]


def limit_rows(m) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(qposadr, sign, joint)`` of every limited hinge or slide joint's two ends (static)."""
    jtype = np.asarray(m.jnt_type)
    limited = np.asarray(m.jnt_limited, dtype=bool) & np.isin(jtype, (_mjx.JointType.HINGE, _mjx.JointType.SLIDE))
    ids = np.flatnonzero(limited)
    adr = np.asarray(m.jnt_qposadr)[ids]
    return np.repeat(adr, 2), np.tile([1.0, -1.0], ids.size), np.repeat(ids, 2)


def has_events(m, d, cfg) -> bool:
    """Whether a period of ``m`` can cross an event: a contact slot or a limited hinge or slide joint."""
    return bool(_mjx.ncon(collision.allocate(m, d, cfg.collision)) or limit_rows(m)[0].size)


def event_distances(m, d, rules) -> jax.Array:
    """Signed distances whose zero switches a constraint on: each contact slot's distance less its
    margin (1 for a box-box slot, never crossed), then each limited hinge or slide joint's distance
    to both ends of its range less its margin."""
    return distances_at(m, d, collision.detect(m, d, rules) if _mjx.ncon(d) else None)


def distances_at(m, d, contact) -> jax.Array:
    """:func:`event_distances` from ``d``'s positions and its ``contact`` struct (None: no slots)."""
    out = []
    if contact is not None:
        # box-box slots are handed from point to point (the clipped rule's fade-ins): their distance
        # is no event function, and the term stays off for them (touchdown_jumps keeps naming them)
        types = jnp.asarray(m.geom_type)[contact.geom]
        box_box = jnp.all(types == int(_mjx.GeomType.BOX), axis=-1)
        out.append(jnp.where(box_box, 1.0, contact.dist - contact.includemargin))
    adr, sign, joint = limit_rows(m)
    if adr.size:
        lo_hi = jnp.asarray(m.jnt_range)[joint]
        q = d.qpos[adr]
        gap = jnp.where(sign > 0, q - lo_hi[:, 0], lo_hi[:, 1] - q)
        out.append(gap - jnp.asarray(m.jnt_margin)[joint])
    if not out:
        return jnp.zeros((0,), d.qpos.dtype)
    return jnp.concatenate(out)


class JumpAware(PassThroughSolver):
    """A Runge–Kutta ``solver`` whose steps' derivatives carry the saltation term of each crossing.

    Attributes:
        solver: the wrapped Diffrax solver (explicit Runge–Kutta with an embedded error estimate).
        resolution: the simulation's absolute tolerance, below which a crossing's timing is not
            resolved (:func:`coefficients`).
        distances: ``(xi, args) -> r``, the event distances (:func:`event_distances`) at the period
            state whose tangent displacement is ``xi``.
        split: ``y -> State`` (the ODE state may carry kink control's sentinel).
        vector_field: ``(t, state, args) -> (qacc, r)``: the period's acceleration and event distances
            at a :class:`State` (:func:`probe_of`), on either side of an event.
    """

    solver: diffrax.AbstractAdaptiveSolver
    resolution: float = eqx.field(static=True)
    distances: Callable = eqx.field(static=True)
    split: Callable = eqx.field(static=True)
    vector_field: Callable = eqx.field(static=True)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, err, dense, state, result = self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        s1 = self.split(y1)
        qvel = _with_jump(self, s1.qvel, s1.xi, args, (t0, t1, dense))
        return _replace_state(y1, s1._replace(qvel=qvel)), err, dense, state, result

    def located(self, t0, t1, dense, args, forward=lambda y: y):
        """``(jumps, coefs, lin)`` of a step from ``t0`` to ``t1`` (either direction) with Diffrax's
        ``dense`` output, for the first ``EVENTS`` events crossed within it, each located on the
        dense solution: the jump of the acceleration (forward in time) at each crossing (``(EVENTS,
        nv)``), per crossing the factor of each event distance's tangent (``(EVENTS, n)``,
        :func:`coefficients`: nonzero for that crossing's own distance alone) and the distances'
        linearisation at the step's end. Crossings within each other's windows (a box's two mirror
        corners touching down together) share their joint jump equally. ``forward``: the ODE state
        of the forward solve within the solver's state."""
        h = t1 - t0
        interp = self.solver.interpolation_cls(t0=t0, t1=t1, **dense)

        def at(t):  # the state on the dense solution and its rate there
            y, dy = jax.jvp(interp.evaluate, (t,), (jnp.ones_like(t),))
            return self.split(forward(y)), self.split(forward(dy))

        def events(t):  # every event distance and its rate at t
            s, d = at(t)
            return jax.jvp(lambda xi: self.distances(xi, args), (s.xi,), (d.xi,))

        s1, d1 = at(t1)
        r, lin = jax.linearize(self.distances, s1.xi, args)
        zero_args = jax.tree.map(_zero_tangent, args)
        r_dot = lin(d1.xi, zero_args)
        r0 = r - h * r_dot  # the distances at the step's start, to first order
        crossed = (r0 > 0) != (r > 0)
        k = min(EVENTS, r.shape[0])
        empty = jnp.zeros((k, d1.qvel.shape[0]), r.dtype), jnp.zeros((k, r.shape[0]), r.dtype)

        def crossings(_):
            theta = jnp.where(crossed, r0 / jnp.where(crossed, r0 - r, 1.0), 2.0)  # linear guess
            idx = jax.lax.top_k(-theta, k)[1]  # the k earliest
            valid = crossed[idx]
            lo, hi = jnp.minimum(t0, t1), jnp.maximum(t0, t1)
            rows = jnp.arange(k)

            def newton(carry, _):  # (times, each one's distance and rate at the previous times)
                t, _, _ = carry
                rs, rds = jax.vmap(events)(t)
                ri, rdi = rs[rows, idx], rds[rows, idx]
                return (jnp.clip(t - ri / jnp.where(rdi == 0, 1.0, rdi), lo, hi), ri, rdi), None

            start = t0 + h * jnp.clip(theta[idx], 0.0, 1.0)
            (t, ri, rdi), _ = jax.lax.scan(newton, (start, r[idx], r_dot[idx]), None, length=3)
            # either side of each crossing on the dense solution: the vector field there, the event
            # between (the last Newton step moved t by ri / rdi, far more than the distance left at t)
            delta = 2.0 * jnp.abs(ri / jnp.where(rdi == 0, 1.0, rdi)) + 1e-12 * (1.0 + jnp.abs(t))
            sides = jnp.stack([jnp.maximum(t - delta, lo), jnp.minimum(t + delta, hi)], axis=1)

            def probe(tt):  # the acceleration and event distances there
                return self.vector_field(tt, self.split(forward(interp.evaluate(tt))), args)

            # every side in one vmapped evaluation: the vector field is traced and compiled once
            acc, dist = jax.vmap(probe)(sides.reshape(-1))
            acc, dist = acc.reshape(k, 2, -1), dist.reshape(k, 2, -1)
            jump = acc[:, 1] - acc[:, 0]
            jump = jnp.where(jnp.isfinite(jump), jump, 0.0)
            # events, not contact slots handed to another point (box-box): the distance is continuous
            # through the crossing and changes sign between its two sides
            r_side = dist[rows, :, idx]
            ok = valid & ((r_side[:, 0] > 0) != (r_side[:, 1] > 0))
            ok = ok & (jnp.abs(r_side[:, 1] - r_side[:, 0]) <= 4.0 * jnp.abs(rdi) * delta + 1e-12)
            # crossings whose windows overlap measured the same joint jump: each takes an equal share
            overlap = ok[None, :] & (jnp.abs(t[:, None] - t[None, :]) <= delta[:, None] + delta[None, :])
            jump = jump / jnp.maximum(jnp.sum(overlap, axis=1), 1)[:, None]
            r_ddot = jax.vmap(lambda jmp, i: lin(jmp, zero_args)[i])(jump, idx)  # along each distance's gradient
            coef = coefficients(ok, rdi, r_ddot, self.resolution)
            return jump, jnp.zeros((k, r.shape[0]), r.dtype).at[rows, idx].set(coef)

        # steps that cross nothing (most) skip the search unless batched (vmap evaluates both branches)
        jumps, coefs = jax.lax.cond(jnp.any(crossed), crossings, lambda _: empty, None)
        return jumps, coefs, lin


class AdjointJumpAware(JumpAware):
    """The backward solve of the ``backsolve`` adjoint with the saltation term's adjoint: where a
    backward step crosses an event, ``a_y`` gains ``grad r (f+ - f-) . a_y / r_dot`` and the
    parameters' adjoint ``d r / d args`` times the same factor (the transpose of
    :class:`JumpAware`'s term). The state is Diffrax's ``(y, a_y, a_args, a_term)`` or DiffMJX's
    :class:`diffmjx.integration.adjoints.BacksolveState`, laid out alike."""

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        aug1, err, dense, state, result = self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        y1, a_y1, a_args1, a_term1 = aug1
        a0 = self.split(y0[1])  # the adjoint at the step's start: the later side of an event in it
        jumps, coefs, _ = self.located(t0, t1, dense, args, forward=lambda y: y[0])
        d_xi, d_args = jax.vjp(self.distances, self.split(y1).xi, args)[1](coefs.T @ (jumps @ a0.qvel))
        a_s1 = self.split(a_y1)
        a_y1 = _replace_state(a_y1, a_s1._replace(xi=a_s1.xi + d_xi))
        a_args1 = jax.tree.map(
            lambda a, g: a if a is None else a + g.astype(a.dtype),
            a_args1,
            d_args,
            is_leaf=lambda x: x is None,
        )
        aug1 = (y1, a_y1, a_args1, a_term1) if type(aug1) is tuple else aug1._make((y1, a_y1, a_args1, a_term1))
        return aug1, err, dense, state, result


def wrap(solver, adjoint, field, kinks: bool) -> JumpAware:
    """``solver`` as a :class:`JumpAware` for one period of ``field``
    (:class:`diffmjx.integration.term.PeriodTerm`) differentiated by the Diffrax ``adjoint``.

    Diffrax's ``ForwardMode`` and ``DirectAdjoint`` set a Runge-Kutta solver's stage loop to the scan
    kind they can differentiate (``lax``, ``bounded``) when it has none, on the solver they are given:
    here that is set on the wrapped one (``RecursiveCheckpointAdjoint`` keeps the default)."""
    kinds = {diffrax.ForwardMode: "lax", diffrax.DirectAdjoint: "bounded"}
    kind = next((k for cls, k in kinds.items() if isinstance(adjoint, cls)), None)
    if kind is not None and getattr(solver, "scan_kind", "set") is None:
        solver = eqx.tree_at(lambda s: s.scan_kind, solver, kind, is_leaf=lambda x: x is None)
    split = (lambda y: y[0]) if kinks else _state
    return JumpAware(solver, _resolution(field), distances_of(field), split, probe_of(field))


def carry_jumps(mode, solver, field, m, d, kinks: bool):
    """``(mode, solver)`` of one period, with the saltation term where ``integrator.saltation`` asks
    for it and the gradient mode and solver can carry it: a discretised mode's Runge–Kutta solver
    wrapped (:func:`wrap`), or the ``backsolve`` mode's adjoint solve (:func:`with_adjoint_jumps`).
    Unchanged where the period has no events (no contact slot, no
    limited hinge or slide joint) or none switches on with a jump (:func:`diffmjx.physics.checks.may_jump`:
    every ``solimp[0]`` and ``solimplimit[0]`` at MuJoCo's least impedance or below, as on the cube toss).

    Arguments:
        mode: the period's gradient mode (:mod:`diffmjx.integration.adjoints`).
        solver: the Diffrax solver.
        field: the period's :class:`diffmjx.integration.term.PeriodTerm`.
        m, d: the model and the period's data.
        kinks: whether the state carries kink control's sentinel.
    """
    if not field.cfg.integrator.saltation or not isinstance(solver, diffrax.AbstractRungeKutta):
        return mode, solver
    if not has_events(m, d, field.cfg) or not checks.may_jump(m):
        return mode, solver  # no constraint that switches on with a jump: nothing to add
    if isinstance(mode, KinkAwareBacksolve):
        back = mode.solver or solver
        if not isinstance(back, diffrax.AbstractRungeKutta):
            return mode, solver
        back = AdjointJumpAware(back, _resolution(field), distances_of(field), _state, probe_of(field))
        return KinkAwareBacksolve(mode.stepsize_controller, back, mode.kinks), solver
    if isinstance(mode, Backsolve):
        back = mode.adjoint.kwargs.get("solver") or solver
        runge_kutta = isinstance(back, diffrax.AbstractRungeKutta)
        return (with_adjoint_jumps(mode, back, field) if runge_kutta else mode), solver
    if isinstance(mode, Discretised) and not mode.continuous:
        return mode, wrap(solver, mode.adjoint, field, kinks)
    return mode, solver


def with_adjoint_jumps(mode, solver, field):
    """The ``backsolve`` gradient mode ``mode`` (:class:`diffmjx.integration.adjoints.Backsolve`)
    whose backward solve (its own solver, else ``solver``) is an :class:`AdjointJumpAware` for one
    period of ``field``."""
    kwargs = {
        **mode.adjoint.kwargs,
        "solver": AdjointJumpAware(solver, _resolution(field), distances_of(field), _state, probe_of(field)),
    }
    return Backsolve(diffrax.BacksolveAdjoint(**kwargs))


def _resolution(field) -> float:
    """``integrator.saltation_resolution``, or where None the forward solve's ``atol``
    (:meth:`diffmjx.config.IntegratorConfig.tolerances`)."""
    given = field.cfg.integrator.saltation_resolution
    return float(field.cfg.integrator.tolerances()[1] if given is None else given)


def _state(y):
    return y


def _replace_state(y, s: State):
    """``y`` (a :class:`State`, or kink control's ``(State, sentinel)``) with ``s`` as its state."""
    return s if isinstance(y, State) else (s, *y[1:])


def _with_jump(solver: JumpAware, qvel1, xi1, args, step):
    """``qvel1``, whose tangent gains the saltation terms of the events crossed in the step.

    ``step``: ``(t0, t1, dense)``, the step's times and Diffrax's dense output; only their values are
    used (their tangents are the step's own, already in ``qvel1``'s)."""

    @jax.custom_jvp
    def jump(qvel1, xi1, args, step):
        return qvel1

    @jump.defjvp
    def jump_jvp(primals, tangents):
        qvel1, _, args, step = primals
        dqvel, dxi, dargs, _ = tangents
        t0, t1, dense = jax.lax.stop_gradient(step)
        jumps, coefs, lin = solver.located(t0, t1, dense, args)
        return qvel1, dqvel + jumps.T @ (coefs @ lin(dxi, dargs))

    return jump(qvel1, xi1, args, step)


def coefficients(crossed, r_dot, r_ddot, resolution):
    """The factor of an event's distance tangent in the saltation term: ``r_dot / (r_dot**2 +
    |r_ddot| resolution)`` where ``crossed`` (0 elsewhere), ``r_dot`` the distance's rate at the
    event and ``r_ddot`` its acceleration's jump there.

    ``1 / r_dot`` is the exact factor. The regularisation takes over for crossings slower than
    ``sqrt(|r_ddot| resolution)``: the speed at which the jump moves the distance by the
    simulation's own resolution (its ``atol``) within the time the crossing takes. Slower ones (a
    body at rest on a contact's edge, which the solve's own error moves across it and back)
    are not resolved by the simulation, and their exact terms, one per spurious crossing, multiply
    into tangents of 1e150; with the tolerance the regularisation vanishes."""
    coef = r_dot / (r_dot**2 + jnp.abs(r_ddot) * resolution + 1e-300)
    return jnp.where(crossed & jnp.isfinite(coef), coef, 0.0)


def _zero_tangent(x):
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


def probe_of(field) -> Callable:
    """``(t, state, args) -> (qacc, r)`` of a :class:`diffmjx.integration.term.PeriodTerm`: the vector
    field's acceleration and the event distances of the same evaluation."""

    def probe(t, state, args):
        m, (dy, d) = field.evaluate(t, state, args)
        return dy.qvel, distances_at(m, d, _mjx.contact(d) if _mjx.ncon(d) else None)

    return probe


def distances_of(field) -> Callable:
    """``(xi, args) -> r`` of a :class:`diffmjx.integration.term.PeriodTerm`: kinematics and the
    collision stage at the period state ``xi``, then :func:`event_distances`."""

    def distances(xi, args):
        m, d0 = field.data(args)
        qpos = manifold.retract(field.layout, d0.qpos, xi)
        return event_distances(m, d0.replace(qpos=qpos), field.cfg.collision)

    return distances
