"""iLQR on DiffMJX's period Jacobians: one iteration at a time, for the MPC planner and your own loop.

The problem: choose controls ``u_0 .. u_{H-1}`` (each held for one control period) minimising
``sum_t l(x_{t+1}, u_t)``, the running cost of each period's end state, as
:func:`diffmjx.mpc.plan_cost` sums it. One :func:`iteration`

1. linearises the rollout of the current plan (:func:`diffmjx.linearize`: ``A_t``, ``B_t`` in
   tangent coordinates, right through contact, with CFD when the config enables it),
2. takes the cost's gradient and Hessian at every period's end state and control (``jax.hessian``
   of the cost through MJX's forward pass),
3. runs the Riccati backward pass for the feedforward ``k_t`` and feedback ``K_t`` gains, with
   ``Q_uu``'s eigenvalues floored at 0 and raised by the regularisation ``mu`` (so every step is a
   descent direction),
4. rolls the feedback policy ``u_t + alpha k_t + K_t (x_t - x̄_t)`` out for a few step lengths
   ``alpha`` at once (``vmap``), controls projected onto ``ctrlrange``, and keeps the cheapest if it
   lowers the cost (then ``mu`` shrinks), else keeps the plan and raises ``mu`` tenfold.

Non-finite Jacobians, gains or costs are never executed: such an iteration keeps its plan, counts as
not finite and raises ``mu``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from diffmjx import manifold
from diffmjx.config import Config
from diffmjx.dynamics import ctrl_bounds, forward_unchecked
from diffmjx.integrate import rollout
from diffmjx.jacobians import forward_config, linearize, tangent_size

__all__ = ["ILQRState", "init", "iteration"]

MU_MIN, MU_MAX = 1e-9, 1e9


class ILQRState(NamedTuple):
    """The plan and what the next iteration needs to know about it.

    Attributes:
        u: (H, nu) the plan.
        cost: its summed running cost (``inf`` until an iteration has evaluated it).
        mu: the regularisation added to ``Q_uu``.
    """

    u: jax.Array
    cost: jax.Array
    mu: jax.Array


def init(u, mu: float = 1e-3) -> ILQRState:
    """The state of plan ``u`` (H, nu) before its first iteration."""
    u = jnp.asarray(u)
    return ILQRState(u, jnp.asarray(jnp.inf, u.dtype), jnp.asarray(mu, u.dtype))


def _stage(m, d, cost, cfg: Config, layout):
    """``l(dx, u; q, v, a)``: the running cost of the end state ``(q, v, a)`` moved by ``dx``."""
    nv = int(m.nv)

    def running(z, q, v, a):
        dx, u = z[: -int(m.nu)], z[-int(m.nu) :]
        x = d.replace(qpos=manifold.retract(layout, q, dx[:nv]), qvel=v + dx[nv : 2 * nv], act=a + dx[2 * nv :], ctrl=u)
        return cost(forward_unchecked(m, x, cfg), u)

    return running


def _backward(A, B, g, h, mu, n):
    """Riccati recursion backwards over the periods: gains ``k`` (H, nu), ``K`` (H, nu, n)."""

    def step(carry, inp):
        vx, vxx = carry
        A, B, g, h = inp
        lx, lu = g[:n], g[n:]
        lxx, luu, lux = h[:n, :n], h[n:, n:], h[n:, :n]
        wx, wxx = lx + vx, lxx + vxx  # the end state's value: running cost plus what follows
        qx, qu = A.T @ wx, lu + B.T @ wx
        qxx = A.T @ wxx @ A
        quu = luu + B.T @ wxx @ B + lux @ B + B.T @ lux.T
        qux = B.T @ wxx @ A + lux @ A
        quu = 0.5 * (quu + quu.T)
        lam, vec = jnp.linalg.eigh(quu)
        inv = (vec / (jnp.maximum(lam, 0.0) + mu)) @ vec.T  # eigenvalues floored at 0, raised by mu
        k, K = -inv @ qu, -inv @ qux
        vx = qx + K.T @ quu @ k + K.T @ qu + qux.T @ k
        vxx = qxx + K.T @ quu @ K + K.T @ qux + qux.T @ K
        return (vx, 0.5 * (vxx + vxx.T)), (k, K)

    zero = (jnp.zeros(n, g.dtype), jnp.zeros((n, n), g.dtype))
    _, (k, K) = jax.lax.scan(step, zero, (A, B, g, h), reverse=True)
    return k, K


def iteration(
    m, d, state: ILQRState, cost, sim: Config | None = None, *, dt0=None, line_search: int = 6, descent: bool = True
) -> tuple[ILQRState, dict]:
    """One iLQR iteration on the plan of ``state`` from ``d``.

    Arguments:
        m, d: ``mjx.Model`` (at least one actuator) and the start state.
        state: from :func:`init` or the previous iteration.
        cost: ``cost(d, ctrl) -> scalar``, the running cost of one period's end state (``d`` with
            every derived field computed, as :func:`diffmjx.rollout`'s ``observe`` sees it).
        sim: the simulation :class:`~diffmjx.Config`; its forward-mode variant is used throughout
            (see :func:`diffmjx.linearize`), so the costs compared are of one and the same solve.
        dt0: the first integrator step (see :func:`diffmjx.rollout`).
        line_search: step lengths tried, ``1, 1/2, ..., 2^-(line_search - 1)``.
        descent: accept only a step that lowers the cost (default). False: where none does, take the
            full step if it is finite (the model's step, e.g. off a plateau that only contacts from
            distance see past; see ``planner.keep_best``).

    Returns:
        ``(state, info)``: the new state and ``info`` with ``cost`` (the cost of the plan this
        iteration started from), ``finite`` (whether its Jacobians, gains and the chosen rollout were
        finite) and ``accepted`` (whether the plan changed).
    """
    cfg = forward_config(sim)
    layout = manifold.JointLayout.from_model(m)
    n = tangent_size(m)
    u = state.u
    lin = linearize(m, d, u, cfg, dt0=dt0)
    stage = _stage(m, d, cost, cfg, layout)
    z0 = jnp.concatenate([jnp.zeros((u.shape[0], n), u.dtype), u], axis=1)
    ends = (lin.qpos[1:], lin.qvel[1:], lin.act[1:])

    def derivatives(z, *end):  # the Hessian by forward mode over the gradient, value and gradient as its aux
        value, grad = jax.value_and_grad(stage)(z, *end)
        return grad, (value, grad)

    h, (c, g) = jax.vmap(jax.jacfwd(derivatives, has_aux=True))(z0, *ends)
    c0 = jnp.sum(c)
    k, K = _backward(lin.A, lin.B, g, h, state.mu, n)
    gains_ok = jnp.isfinite(c0) & jnp.all(jnp.isfinite(k)) & jnp.all(jnp.isfinite(K))
    k, K = jnp.where(gains_ok, k, 0.0), jnp.where(gains_ok, K, 0.0)
    lo, hi = (b.astype(u.dtype) for b in ctrl_bounds(m))
    start = (d.qpos, d.qvel, d.act, jnp.asarray(d.time, u.dtype))
    first = jnp.asarray(lin.dt0[0], u.dtype)  # the first period's first trial step, as linearize took it

    def policy(alpha):
        def body(carry, inp):
            (q, v, a, t), dt = carry
            ub, kt, Kt, qb, vb, ab = inp
            dx = jnp.concatenate([manifold.difference(layout, qb, q), v - vb, a - ab])
            ut = jnp.clip(ub + alpha * kt + Kt @ dx, lo, hi)
            x1, traj = rollout(
                m,
                d.replace(qpos=q, qvel=v, act=a, time=t, ctrl=ut),
                ut[None],
                cfg,
                dt0=dt,
                observe=lambda x: cost(x, x.ctrl),
            )
            return ((x1.qpos, x1.qvel, x1.act, x1.time), traj.dt[-1]), (ut, traj.obs[0])

        _, (us, cs) = jax.lax.scan(body, (start, first), (u, k, K, lin.qpos[:-1], lin.qvel[:-1], lin.act[:-1]))
        return us, jnp.sum(cs)

    alphas = 0.5 ** jnp.arange(line_search, dtype=u.dtype)
    us, costs = jax.vmap(policy)(alphas)
    costs = jnp.where(jnp.isfinite(costs) & jnp.all(jnp.isfinite(us), axis=(1, 2)), costs, jnp.inf)
    best = jnp.argmin(costs)
    lower = costs[best] < c0
    if not descent:  # where no step lowers the cost, follow the model's full step
        best = jnp.where(lower, best, 0)
        lower = lower | jnp.isfinite(costs[0])
    accept = gains_ok & lower
    mu = jnp.where(accept, jnp.maximum(state.mu * 0.5, MU_MIN), jnp.minimum(state.mu * 10.0, MU_MAX))
    kept = jnp.where(jnp.isfinite(c0), c0, state.cost)  # the plan kept: its cost as just evaluated
    new = ILQRState(jnp.where(accept, us[best], u), jnp.where(accept, costs[best], kept), mu)
    finite = gains_ok & jnp.all(jnp.isfinite(lin.A)) & jnp.all(jnp.isfinite(lin.B))
    return new, {"cost": c0, "finite": finite, "accepted": accept}
