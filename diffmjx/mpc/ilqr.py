"""iLQR on DiffMJX's period Jacobians: one iteration at a time, for the MPC planner and your own loop.

The problem: choose controls ``u_0 .. u_{H-1}`` (each held for one control period) minimising
``sum_t l(x_{t+1}, u_t)``, the running cost of each period's end state, as
:func:`diffmjx.mpc.plan_cost` sums it. One :func:`iteration`

1. linearises the rollout of the current plan (:func:`diffmjx.linearize`: ``A_t``, ``B_t`` in
   tangent coordinates, right through contact, with CFD when the config enables it),
2. takes the cost's gradient and Hessian at every period's end state and control (``jax.hessian``
   of the cost through MJX's forward pass), the Hessian's negative eigenvalues set to zero
   (``convex``): a cost with negative curvature (``1 - cos`` of a pole hanging down, a distance
   through a joint's rotation) makes the quadratic model unbounded below, and its gains rolled the
   hanging pendulum of the planner suite nowhere (docs/mpc.md),
3. runs the Riccati backward pass for the feedforward ``k_t`` and feedback ``K_t`` gains, with
   ``Q_uu``'s eigenvalues floored at 0 and raised by the regularisation ``mu`` (so every step is a
   descent direction; or, ``state_regularization``, ``mu`` on the next state's value Hessian:
   ``Q_uu + mu B'B``, Tassa, Erez and Todorov 2012), for the regularisations ``mu, mu/100, 100 mu``
   at once,
4. rolls the feedback policy ``u_t + alpha k_t + K_t (x_t - x̄_t)`` of each out (``vmap``) at
   ``alpha = 1`` and ``1/4``, controls projected onto ``ctrlrange``, and keeps the cheapest if it
   lowers the cost (``mu`` moves to its regularisation); where none does, it retries (``retries``
   rounds) around a ``mu`` 1000 times larger on the same Jacobians, and where none of those does
   either, keeps the plan and raises ``mu`` past every one tried. With ``reach``, the step at
   ``mu`` rescaled to each of its lengths (a share of the control range) is a candidate too: off a
   plateau the Newton step is as small as the gradient there;
5. optionally (``reuse``; ``planner.ilqr_reuse``), after an accepted round, takes up to ``reuse``
   chord rounds: steps 2-4 about the new plan on the Jacobians of step 1, each kept only if it
   lowers the cost.

Why regularisations and not only step lengths: ``mu`` is absolute, and where ``Q_uu`` has next to
no curvature (a cost of distances over a short horizon of slow muscles: on the MyoHand baoding plan
its eigenvalues are 1e-7 to 6e-6) ``mu`` alone sets how far a step goes, so no fixed first ``mu``
fits every cost's scale; a step-length search from ``mu = 1e-3`` there needed four iterations to
move at all (docs/mpc.md, "iLQR against Adam on one plan").

Optional (``box``; ``planner.ilqr_box_qp``): the bounds handled in the backward pass by a
box-constrained QP per period (:func:`box_qp`, control-limited DDP), the clamped controls without
feedback.

Non-finite Jacobians, gains or costs are never executed: such an iteration keeps its plan, counts as
not finite and raises ``mu``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx.config import Config
from diffmjx.integration.integrate import rollout
from diffmjx.jacobians import forward_config, linearize, tangent_size
from diffmjx.physics import manifold
from diffmjx.physics.dynamics import ctrl_bounds, ctrl_width, forward_unchecked

__all__ = ["ILQRState", "backward_pass", "init", "iteration"]

MU_MIN, MU_MAX = 1e-9, 1e9
CONTROL_FLOOR = 1e-6
"""Under state regularisation, the share of ``mu`` still added to ``Q_uu``'s eigenvalues: it bounds
the step of a control that moves no state within one period (``B``'s null space), where
``mu B'B`` adds nothing."""


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


PSD_TOLERANCE = 1e-10
"""A Hessian whose most negative eigenvalue is within this share of its largest magnitude counts as
positive semidefinite: the rounding of a convex cost's zero eigenvalues leaves it as it is."""


def psd(h):
    """The symmetric matrix ``h`` with its negative eigenvalues set to zero (the nearest positive
    semidefinite matrix in the Frobenius norm); ``h`` itself, bit for bit, where none is below
    ``-PSD_TOLERANCE`` times its largest eigenvalue's magnitude."""
    lam, vec = jnp.linalg.eigh(0.5 * (h + h.T))
    negative = lam[0] < -PSD_TOLERANCE * jnp.max(jnp.abs(lam))
    return jnp.where(negative, (vec * jnp.maximum(lam, 0.0)) @ vec.T, h)


def _free_block(Q, free):
    """``Q`` on the ``free`` controls, the identity on the others: block diagonal, so a solve with it
    is a solve on the free block and leaves the others' entries of a zero right-hand side zero."""
    return jnp.where(free[:, None] & free[None, :], Q, jnp.eye(Q.shape[0], dtype=Q.dtype))


def box_qp(Q, q, lo, hi, iterations: int = 12):
    """``argmin 0.5 k'Qk + q'k`` over ``lo <= k <= hi`` (``lo <= 0 <= hi``, ``Q`` positive definite).

    Projected Newton (Bertsekas 1982), as control-limited DDP (Tassa, Mansard and Todorov 2014) solves
    its per-period QP: a bound is clamped where the step would push past it, and the Newton step is
    taken on the free controls only, with a projected Armijo line search; a fixed iteration count so it
    ``jit``s and ``vmap``s. Returns ``(k, free)``, ``free`` the controls off their bounds (boolean)."""
    value = lambda k: 0.5 * k @ Q @ k + q @ k
    steps = 0.5 ** jnp.arange(10, dtype=Q.dtype)

    def clamped(k):
        grad = q + Q @ k
        return ((k <= lo) & (grad > 0)) | ((k >= hi) & (grad < 0)), grad

    def body(_, k):
        fixed, grad = clamped(k)
        free = ~fixed
        dk = jnp.where(free, jnp.linalg.solve(_free_block(Q, free), -jnp.where(free, grad, 0.0)), 0.0)
        trial = jnp.clip(k + steps[:, None] * dk, lo, hi)
        f = jax.vmap(value)(trial)
        ok = f <= value(k) + 0.1 * (trial - k) @ grad  # Armijo along the projected path
        pick = jnp.argmax(ok)
        return jnp.where(ok[pick], trial[pick], k)

    k0 = jnp.clip(jnp.linalg.solve(Q, -q), lo, hi)  # the unconstrained step, projected
    k = jax.lax.fori_loop(0, iterations, body, k0)
    return k, ~clamped(k)[0]


def backward_pass(A, B, g, h, mu, n, lo, hi, box: bool, state: bool = False):
    """Riccati recursion backwards over the periods: gains ``k`` (H, nu), ``K`` (H, nu, n).

    ``lo``, ``hi`` (H, nu): the room each period's control has to its bounds. ``box``: the
    feedforward step solves :func:`box_qp` in it and the clamped controls get no feedback; else the
    unconstrained gains (the forward pass projects the controls). ``state``: ``mu`` is added to the
    next state's value Hessian, so the gains see ``Q_uu + mu B'B`` and ``Q_ux + mu B'A`` (Tassa, Erez
    and Todorov 2012), and ``CONTROL_FLOOR mu`` to the floored eigenvalues; else ``mu`` to
    ``Q_uu``'s floored eigenvalues. The value recursion uses the unregularised ``Q``s either way."""

    def step(carry, inp):
        vx, vxx = carry
        A, B, g, h, lo, hi = inp
        lx, lu = g[:n], g[n:]
        lxx, luu, lux = h[:n, :n], h[n:, n:], h[n:, :n]
        wx, wxx = lx + vx, lxx + vxx  # the end state's value: running cost plus what follows
        qx, qu = A.T @ wx, lu + B.T @ wx
        qxx = A.T @ wxx @ A
        quu = luu + B.T @ wxx @ B + lux @ B + B.T @ lux.T
        qux = B.T @ wxx @ A + lux @ A
        quu = 0.5 * (quu + quu.T)
        if state:  # a step is penalised by how far it moves the next state, whatever the control's units
            quu_r, qux_r, floor = quu + mu * (B.T @ B), qux + mu * (B.T @ A), CONTROL_FLOOR * mu
        else:
            quu_r, qux_r, floor = quu, qux, mu
        lam, vec = jnp.linalg.eigh(quu_r)
        reg = (vec * (jnp.maximum(lam, 0.0) + floor)) @ vec.T  # eigenvalues floored at 0, raised
        if box:
            k, free = box_qp(reg, qu, lo, hi)
        else:
            k, free = -jnp.linalg.solve(reg, qu), jnp.ones(qu.shape, bool)
        K = jnp.where(free[:, None], -jnp.linalg.solve(_free_block(reg, free), qux_r), 0.0)  # free controls only
        vx = qx + K.T @ quu @ k + K.T @ qu + qux.T @ k
        vxx = qxx + K.T @ quu @ K + K.T @ qux + qux.T @ K
        return (vx, 0.5 * (vxx + vxx.T)), (k, K)

    zero = (jnp.zeros(n, g.dtype), jnp.zeros((n, n), g.dtype))
    _, (k, K) = jax.lax.scan(step, zero, (A, B, g, h, lo, hi), reverse=True)
    return k, K


def _candidates(mu, count: int, dtype, search_mu: bool):
    """The ``count`` steps one iteration tries: ``(mus, alphas)``, candidate 0 the model's own step.

    Step lengths: ``mu`` with ``alpha = 1, 1/2, 1/4, ...``. Regularisation search: ``mu``, ``mu/100``
    and ``100 mu`` in turn, each at ``alpha = 1``, then the same three at ``alpha = 1/4``, and so on:
    where ``Q_uu`` has next to no curvature (a cost of distances, a short horizon of slow muscles)
    ``mu`` alone sets the step's length, and no fixed first ``mu`` fits every cost's scale."""
    j = jnp.arange(count)
    if search_mu:
        exps = jnp.asarray([0.0, -1.0, 1.0], dtype)[j % 3]
        return jnp.clip(mu * 100.0**exps, MU_MIN, MU_MAX), (0.25 ** (j // 3)).astype(dtype)
    return jnp.full(count, mu, dtype), (0.5**j).astype(dtype)


def iteration(
    m,
    d,
    state: ILQRState,
    cost,
    sim: Config | None = None,
    *,
    dt0=None,
    line_search: int = 6,
    descent: bool = True,
    box: bool = False,
    search_mu: bool = True,
    retries: int = 2,
    state_regularization: bool = False,
    reuse: int = 0,
    convex: bool = True,
    jacobian: str = "period",
    reach: tuple[float, ...] = (),
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
        line_search: how many steps are tried at once: step lengths ``1, 1/2, ..., 2^-(line_search - 1)``
            at the current ``mu``, or with ``search_mu`` the regularisations and lengths of
            :func:`_candidates`.
        descent: accept only a step that lowers the cost (default). False: where none does, take the
            full step if it is finite (the model's step, e.g. off a plateau that only contacts from
            distance see past; see ``planner.keep_best``).
        box: control bounds by :func:`box_qp` in the backward pass (control-limited DDP) instead of
            projecting the rolled-out controls onto them.
        search_mu: try the regularisations ``mu, mu/100, 100 mu`` (then at a quarter of the step)
            at once, ``mu`` moving to the cheapest candidate's (default); False: step lengths at one
            ``mu``, halved after an accepted iteration.
        retries: where no candidate lowers the cost, try up to this many more rounds of candidates
            before giving up, each around a ``mu`` above every one tried (``1000 mu``; ``10 mu``
            without ``search_mu``), on the same Jacobians: a rejected step leaves the plan, and so
            its linearisation, as it was, so a retry costs a backward pass and the rollouts, not
            the Jacobians that the next iteration would recompute unchanged (``planner.ilqr_retries``;
            0: the iteration ends, as before retries existed).
        state_regularization: add ``mu`` to the next state's value Hessian (Tassa, Erez and Todorov
            2012: a step is penalised by how far it moves the state, ``Q_uu + mu B'B``, and the
            feedback gains are regularised alike), with :data:`CONTROL_FLOOR` ``mu`` on ``Q_uu``
            for controls that move no state within a period; False (default): ``mu`` on ``Q_uu``
            (``planner.ilqr_regularization``).
        convex: the cost's Hessian at each period with its negative eigenvalues set to zero
            (:func:`psd`; a convex cost's unchanged), as iLQR's Gauss-Newton model of a least-squares
            cost is convex by construction (default); False: the exact Hessian
            (``planner.ilqr_cost_hessian``).
        reuse: after an accepted round, up to this many more rounds on the same Jacobians (a chord
            step, as a simplified Newton method keeps its Jacobian): the cost's derivatives and the
            feedback's reference are taken at the new plan and its rollout, ``A_t``, ``B_t`` stay
            those of the plan the iteration started from. Each round is kept only if its rollout
            lowers the cost (whatever ``descent`` says); the first that does not ends the
            iteration. A round costs a backward pass, the rollouts and the cost's Hessians, not a
            :func:`diffmjx.linearize` (``planner.ilqr_reuse``; 0, default: one accepted round).
        jacobian: :func:`diffmjx.linearize`'s ``jacobian``: ``period`` (default), each period's own
            Jacobians; ``substep`` (fixed-step ``sim`` only), one substep's held over the period
            (``planner.ilqr_jacobian``).
        reach: shares of each actuator's control range (of 1 for an unlimited one): for each, one
            more candidate, the step at the current ``mu`` rescaled (up or down) so that its largest
            control change over the plan is that share, judged with the others (the cheapest that
            lowers the cost is kept; ``mu`` stays where it was). The Newton step is as long as the
            gradient is against the cost's curvature: where the cost is flat until a contact is made
            and contacts from distance give a small gradient, it barely moves and is rejected, and
            the raised ``mu`` makes the next one shorter still (on the planner suite's tipped box:
            5e-4 of the range, every later iteration rejected); a step of fixed length along the
            same direction reaches the contact (``planner.ilqr_reach``; ``()``: none). A sequence
            or a 1-D array (its length fixed under ``jit``, its values may be traced).

    Returns:
        ``(state, info)``: the new state and ``info`` with ``cost`` (the cost of the plan this
        iteration started from), ``finite`` (whether its Jacobians, gains and the chosen rollout were
        finite), ``accepted`` (whether the plan changed) and ``rounds`` (rounds accepted: 0, 1, or
        more with ``reuse``).
    """
    if retries < 0:
        raise ValueError(f"ilqr.iteration: retries={retries} is out of range; it must be >= 0")
    if reuse < 0:
        raise ValueError(f"ilqr.iteration: reuse={reuse} is out of range; it must be >= 0")
    cfg = forward_config(sim)
    layout = manifold.JointLayout.from_model(m)
    n = tangent_size(m)
    u = state.u
    lin = linearize(m, d, u, cfg, dt0=dt0, jacobian=jacobian)
    stage = _stage(m, d, cost, cfg, layout)

    def derivatives(z, *end):  # the Hessian by forward mode over the gradient, value and gradient as its aux
        value, grad = jax.value_and_grad(stage)(z, *end)
        return grad, (value, grad)

    lo, hi = (b.astype(u.dtype) for b in ctrl_bounds(m))
    width = ctrl_width(m).astype(u.dtype)
    nreach = int(np.shape(reach)[0]) if np.ndim(reach) else 0
    start = (d.qpos, d.qvel, d.act, jnp.asarray(d.time, u.dtype))
    first = jnp.asarray(lin.dt0[0], u.dtype)  # the first period's first trial step, as linearize took it

    def policy(alpha, k, K, nom):
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
            return ((x1.qpos, x1.qvel, x1.act, x1.time), traj.dt[-1]), (ut, traj.obs[0], (x1.qpos, x1.qvel, x1.act))

        ub, qb, vb, ab = nom[:4]
        _, (us, cs, xs) = jax.lax.scan(body, (start, first), (ub, k, K, qb, vb, ab))
        return us, jnp.sum(cs), xs

    def attempt(mu, nom, chord):
        """The candidate steps around ``mu`` about the nominal ``nom`` (its plan, start states and
        cost derivatives): ``(us, cost, mu, ok, gains_ok, ends)`` of the cheapest (``ends``: its
        rollout's state at every period's end), and of candidate 0 (the model's own step) where
        ``descent`` is off, none lowers the cost and this is not a ``chord`` round."""
        ub, g, h, c0 = nom[0], *nom[4:]
        backward = lambda mu: backward_pass(lin.A, lin.B, g, h, mu, n, lo - ub, hi - ub, box, state_regularization)
        mus, alphas = _candidates(mu, line_search, u.dtype, search_mu)
        if nreach:  # the step at mu, rescaled to each reach: its largest control change a share of the range
            mus = jnp.concatenate([mus, jnp.full(nreach, mu, u.dtype)])
            alphas = jnp.concatenate([alphas, jnp.zeros(nreach, u.dtype)])
        if search_mu:
            k, K = jax.vmap(backward)(mus)
        else:  # one mu for every candidate (the rescaled ones' too): one backward pass
            k, K = jax.tree.map(lambda x: jnp.broadcast_to(x, (mus.shape[0], *x.shape)), backward(mu))
        if nreach:
            size = jnp.max(jnp.abs(k[line_search:]) / width, axis=(1, 2))
            scale = jnp.where(size > 0, jnp.asarray(reach, u.dtype) / jnp.where(size > 0, size, 1.0), 0.0)
            alphas = alphas.at[line_search:].set(scale)
        gains_ok = jnp.isfinite(c0) & jnp.all(jnp.isfinite(k), axis=(1, 2)) & jnp.all(jnp.isfinite(K), axis=(1, 2, 3))
        k, K = jnp.where(gains_ok[:, None, None], k, 0.0), jnp.where(gains_ok[:, None, None, None], K, 0.0)
        us, costs, xs = jax.vmap(policy, in_axes=(0, 0, 0, None))(alphas, k, K, nom)
        ok = gains_ok & jnp.isfinite(costs) & jnp.all(jnp.isfinite(us), axis=(1, 2))
        costs = jnp.where(ok, costs, jnp.inf)
        best = jnp.argmin(costs)
        if not descent:  # where no step lowers the cost, the model's step at this mu
            best = jnp.where((costs[best] < c0) | chord, best, 0)
        return us[best], costs[best], mus[best], ok[best], gains_ok[best], jax.tree.map(lambda x: x[best], xs)

    # One loop, one traced round. The first round's candidates are about the plan; where none lowers
    # the cost the plan stays, so its Jacobians and cost derivatives still hold and a retry only
    # raises mu (past every mu tried) and reruns the backward pass and the rollouts. After an
    # accepted round, a chord round (``reuse``) keeps the Jacobians and takes the cost's derivatives
    # at the new plan.
    grow = 1e3 if search_mu else 10.0
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs[:-1]])

    def expanded(us, ends):  # (gradients, Hessians, summed cost) of the running cost along a nominal
        z = jnp.concatenate([jnp.zeros((us.shape[0], n), us.dtype), us], axis=1)
        h, (c, g) = jax.vmap(jax.jacfwd(derivatives, has_aux=True))(z, *ends)
        if convex:
            h = jax.vmap(psd)(h)
        return g, h, jnp.sum(c)

    ends = (lin.qpos[1:], lin.qvel[1:], lin.act[1:])  # the plan's state at every period's end
    g, h, c0 = expanded(u, ends)

    def more(carry):
        return carry[-1]

    def round_(carry):
        r, accepted, mu, (un, xn, g, h, cn), c_plan, gains, _ = carry
        chord = accepted > 0
        nom = (un, cat(d.qpos, xn[0]), cat(d.qvel, xn[1]), cat(d.act, xn[2]), g, h, cn)
        u1, c1, mu1, ok1, gains1, x1 = attempt(mu, nom, chord)
        lowered = c1 < cn
        take = lowered if descent else lowered | (ok1 & ~chord)  # a model step only as the first round's
        again = jnp.where(
            take,
            lowered & (accepted < reuse),  # chords left after this accepted round
            ~chord & (r + 1 <= retries) & jnp.isfinite(c0) & (descent | ~ok1),  # a non-finite start: no retry
        )
        pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(take, a, b), new, old)
        un, xn, c_plan = pick((u1, x1, c1), (un, xn, c_plan))
        if reuse:  # the next (chord) round's cost derivatives, at the plan just accepted
            g, h, cn = jax.lax.cond(take & again, lambda: expanded(un, xn), lambda: (g, h, cn))
        mu = jnp.where(take, mu1, jnp.where(chord, mu, jnp.minimum(mu * grow, MU_MAX)))
        gains = jnp.where(chord, gains, gains1)  # the first round's (its last attempt)
        return r + 1, accepted + take, mu, (un, xn, g, h, cn), c_plan, gains, again

    nominal = (u, ends, g, h, c0)
    init_ = (jnp.asarray(0), jnp.asarray(0), state.mu, nominal, c0, jnp.asarray(False), jnp.asarray(True))
    _, rounds, mu_last, (u_plan, *_), c_plan, gains_best, _ = jax.lax.while_loop(more, round_, init_)
    accept = rounds > 0
    if search_mu:  # the last accepted candidate's mu; if none was cheaper, above every mu tried
        mu = jnp.where(accept, mu_last, jnp.minimum(mu_last * 10.0, MU_MAX))
    else:
        mu = jnp.where(accept, jnp.maximum(mu_last * 0.5, MU_MIN), jnp.minimum(mu_last, MU_MAX))
    kept = jnp.where(jnp.isfinite(c0), c0, state.cost)  # the plan kept: its cost as just evaluated
    new = ILQRState(jnp.where(accept, u_plan, u), jnp.where(accept, c_plan, kept), mu)
    finite = gains_best & jnp.all(jnp.isfinite(lin.A)) & jnp.all(jnp.isfinite(lin.B))
    return new, {"cost": c0, "finite": finite, "accepted": accept, "rounds": rounds}
