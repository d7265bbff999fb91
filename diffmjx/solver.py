r"""Differentiable constraint solve.

MuJoCo's constraint forces minimise the convex Gauss cost

.. math:: \tfrac12 (a - a_0)^\top M (a - a_0) + s(J a - a_\text{ref}),

(:math:`a_0` = ``qacc_smooth``; :math:`s` piecewise quadratic per row). MJX iterates Newton or
CG steps in a ``lax.while_loop``, which reverse-mode AD cannot pass. Two gradient modes:

``unroll``
    The same iterations, cost tests and early exit as MJX, run inside a fixed-length ``scan``
    (``m.opt.iterations`` trips; finished iterations become no-ops). Forward values are MJX's.
``implicit``
    The forward is MJX's own early-terminating solve; derivatives come from the optimality condition
    :math:`g(a, \theta) = M a - f_\text{smooth} - J^\top f(a) = 0` with the constraint states (active
    rows, friction-loss zones) held fixed: :math:`\mathrm{d}a = -H^{-1}\,\partial_\theta g\,
    \mathrm{d}\theta` with :math:`H = M + J^\top D_\text{active} J` -- the matrix the Newton solver
    factors. Written as a zero-valued correction, so ``jvp``, ``vjp`` and ``vmap`` all apply.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from cfd.impedance import MAXIMP, MINIMP, mujoco_impedance
from diffmjx import _mjx

GRADIENTS = ("unroll", "implicit")


def _warmstart(m, d):
    """MJX's choice of the initial iterate: warmstart or smooth acceleration, whichever costs less."""
    if m.opt.disableflags & _mjx.DisableBit.WARMSTART:
        return d.replace(qacc=d.qacc_smooth)
    warm = _mjx.SolverContext.create(m, d.replace(qacc=d.qacc_warmstart), grad=False)
    smth = _mjx.SolverContext.create(m, d.replace(qacc=d.qacc_smooth), grad=False)
    return d.replace(qacc=jnp.where(warm.cost < smth.cost, d.qacc_warmstart, d.qacc_smooth))


def _iterate(m, d, ctx):
    """One Newton (or Polak-Ribiere CG) iteration: line search, new constraint state, new direction."""
    ctx = _mjx.solver_linesearch(m, d, ctx)
    grad0, mgrad0 = ctx.grad, ctx.Mgrad
    ctx = _mjx.solver_update_constraint(m, d, ctx)
    ctx = _mjx.solver_update_gradient(m, d, ctx)
    if m.opt.solver == _mjx.SolverType.NEWTON:
        search = -ctx.Mgrad
    else:
        beta = jnp.dot(ctx.grad, ctx.Mgrad - mgrad0) / jnp.maximum(1e-15, jnp.dot(grad0, mgrad0))
        search = -ctx.Mgrad + jnp.maximum(0.0, beta) * ctx.search
    return ctx.replace(search=search, solver_niter=ctx.solver_niter + 1)


def _not_converged(m, d, ctx):
    improvement = _mjx.solver_rescale(m, d, ctx.prev_cost - ctx.cost)
    gradient = _mjx.solver_rescale(m, d, jnp.linalg.norm(ctx.grad))
    return (improvement >= m.opt.tolerance) & (gradient >= m.opt.tolerance)


def _solve_unrolled(m, d, remat_iterations: bool = True):
    d = _warmstart(m, d)
    ctx = _mjx.SolverContext.create(m, d)
    step = lambda c: _iterate(m, d, c)  # noqa: E731
    if remat_iterations:
        # Rematerialise each iteration in the backward pass: the outer scan then stores one Context
        # per iteration instead of every line-search trip's residuals, stacked twice (inner and
        # outer scan). Same gradient to rounding, far fewer XLA kernels in the backward pass
        # (docs/results/benchmark_vjp_thunks.csv).
        step = jax.checkpoint(step)
    if m.opt.iterations == 1:
        ctx = step(ctx)
    else:
        ctx = _mjx.scan_while_loop(lambda c: _not_converged(m, d, c), step, ctx, m.opt.iterations)
    d = d.replace(qacc=ctx.qacc, qfrc_constraint=ctx.qfrc_constraint)
    return _mjx.with_efc_force(d, ctx.efc_force)


def _row_forces(m, d, qacc, active, linear_sign):
    """Constraint-space forces at ``qacc`` for a fixed constraint state (pyramidal cones)."""
    efc_j, efc_d, aref, floss, _, _ = _mjx.efc(d)
    jaref = efc_j @ qacc - aref
    return -efc_d * jaref * active - linear_sign * floss


def _solve_implicit(m, d):
    if m.opt.cone != _mjx.ConeType.PYRAMIDAL:
        raise ValueError(
            "solver.gradient='implicit' supports cone='pyramidal' only; use solver.gradient='unroll' for elliptic cones"
        )
    sg = jax.lax.stop_gradient
    d0 = sg(d)
    sol = _mjx.mjx_solve(m, d0)  # forward: MJX's own early-terminating solve
    qacc = sg(sol.qacc)

    # Constraint state at the solution, as MJX's CGupdateConstraint classifies it.
    efc_j, efc_d, aref, floss, ne, nf = _mjx.efc(d0)
    jaref = efc_j @ qacc - aref
    active = (jaref < 0).at[: ne + nf].set(True)
    linear_sign = jnp.zeros_like(jaref)
    if _mjx.has_frictionloss(m):
        r = 1.0 / (efc_d + (efc_d == 0.0) * 1e-15)
        neg = (jaref <= -r * floss) & (floss > 0)
        pos = (jaref >= r * floss) & (floss > 0)
        active = active & ~neg & ~pos
        linear_sign = pos.astype(jaref.dtype) - neg.astype(jaref.dtype)
    active = active.astype(jaref.dtype)

    # Residual of the optimality condition, live in the problem data, at the frozen solution.
    f = _row_forces(m, d, qacc, active, linear_sign)
    efc_jl = _mjx.efc(d)[0]
    residual = _mjx.mul_m(m, d, qacc) - d.qfrc_smooth - efc_jl.T @ f
    h = _mjx.full_m(m, d0) + (efc_j.T * (efc_d * active)) @ efc_j
    h = sg(0.5 * (h + h.T))
    correction = -jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(h), residual)
    dqacc = correction - sg(correction)  # zero value, derivative -H^{-1} dg

    qacc_out = sol.qacc + dqacc
    f_out = _row_forces(m, d, qacc_out, active, linear_sign)
    efc_force = _mjx.efc_force(sol) + (f_out - sg(f_out))
    qfrc = efc_jl.T @ f_out
    d = d.replace(qacc=qacc_out, qfrc_constraint=sol.qfrc_constraint + (qfrc - sg(qfrc)))
    return _mjx.with_efc_force(d, efc_force)


def with_impedance_floor(m, d, floor: float):
    r"""Contact rows ``(m, d) -> d`` with the impedance floor ``floor`` instead of MuJoCo's 1e-4.

    MuJoCo clips every impedance to at least ``mjMINIMP`` = 1e-4, so a contact whose ``solimp[0]``
    is 0 still switches on with a small force at zero distance: a jump in the dynamics that the
    ODE solver steps over and reverse-mode AD does not see (the missing term is the force jump
    times the change in touchdown time). With ``floor = 0`` the force starts from zero and the
    dynamics are continuous. Each row's ``D = d / ((1 - d) w)`` is rescaled for the new
    impedance; the row weight ``w`` and the reference acceleration are MJX's. Within solimp's
    ``width`` the impedance curve moves by at most the old floor (1e-4 of its range); deeper
    rows are unchanged.
    """
    c = _mjx.contact(d)
    rows, con = _mjx.contact_rows(m, c)
    if rows.size == 0:
        return d
    efc_j, efc_d, *_ = _mjx.efc(d)
    r, solimp = c.dist[con] - c.includemargin[con], c.solimp[con]
    imp = jnp.vectorize(mujoco_impedance, signature="(),(5),()->()")
    old = jnp.clip(imp(r, solimp, MINIMP), MINIMP, MAXIMP)
    new = jnp.clip(imp(r, solimp, floor), floor, MAXIMP)
    scale = new * (1.0 - old) / ((1.0 - new) * old)
    return _mjx.with_efc(d, efc_D=efc_d.at[rows].set(efc_d[rows] * scale))


def solve(m, d, gradient: str = "unroll", remat_iterations: bool = True):
    """Constraint solve ``(m, d) -> d`` with reverse-mode derivatives (see module docstring).

    ``remat_iterations=False`` makes ``unroll`` store every iteration's line-search values for the
    backward pass instead of recomputing the iteration (more memory and, on a CPU, a slower
    backward pass; ``experiments/benchmark_vjp`` compares the two).
    """
    if gradient == "unroll":
        return _solve_unrolled(m, d, remat_iterations)
    if gradient == "implicit":
        return _solve_implicit(m, d)
    raise ValueError(f"solver.gradient={gradient!r} is not allowed; choose one of: {', '.join(GRADIENTS)}")
