r"""Differentiable constraint solve: it solves the rows :mod:`diffmjx.physics.constraint` (or :mod:`diffmjx.physics.cfd`) built, never builds them.

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
    factors. Written as a zero-valued correction with a ``custom_jvp``, so ``jvp``, ``vjp`` and
    ``vmap`` all apply and a forward-only program never computes it.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from diffmjx import _mjx
from diffmjx.config import GRADIENTS
from diffmjx.physics.rules import value_with_derivative

__all__ = ["ConstraintState", "constraint_state", "solve", "solve_model"]


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
    step = lambda c: _iterate(m, d, c)
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


class ConstraintState(NamedTuple):
    """Which regime each constraint row is in at an acceleration (MJX's CGupdateConstraint)."""

    active: jax.Array  # (nefc,) 1.0 where the row's force is -D (J a - aref), else 0.0
    linear_sign: jax.Array  # (nefc,) +-1.0 where a friction-loss row is saturated, else 0.0


def constraint_state(m, d, qacc) -> ConstraintState:
    """The constraint state at ``qacc``, as MJX's solver classifies it (pyramidal cones).

    Equality and friction-loss rows are active unless a friction-loss row is saturated; other
    rows are active where ``J qacc - aref < 0``. A change of this state along a trajectory is a
    kink of the constraint force (lift-off, stick-slip, a friction-pyramid edge).

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` with its constraint rows.
        qacc: (nv,) acceleration, usually the solution ``d.qacc``.

    Returns:
        :class:`ConstraintState`.
    """
    efc_j, efc_d, aref, floss, ne, nf = _mjx.efc(d)
    jaref = efc_j @ qacc - aref
    active = (jaref < 0).at[: ne + nf].set(True)
    linear_sign = jnp.zeros_like(jaref)
    if _mjx.has_frictionloss(m):
        r = 1.0 / (efc_d + (efc_d == 0.0) * 1e-15)
        neg = (jaref <= -r * floss) & (floss > 0)
        pos = (jaref >= r * floss) & (floss > 0)
        active = active & ~neg & ~pos
        linear_sign = pos.astype(jaref.dtype) - neg.astype(jaref.dtype)
    return ConstraintState(active.astype(jaref.dtype), linear_sign)


def _solve_implicit(m, d):
    sg = jax.lax.stop_gradient
    d0 = sg(d)
    sol = _mjx.mjx_solve(m, d0)  # forward: MJX's own early-terminating solve
    qacc = sg(sol.qacc)
    # Constraint state at the solution, as MJX's CGupdateConstraint classifies it.
    active, linear_sign = constraint_state(m, d0, qacc)
    dqacc, dforce, dqfrc = _zero_with_derivative(m, d, qacc, active, linear_sign)
    d = d.replace(qacc=sol.qacc + dqacc, qfrc_constraint=sol.qfrc_constraint + dqfrc)
    return _mjx.with_efc_force(d, _mjx.efc_force(sol) + dforce)


def _implicit_correction(m, d, qacc, active, linear_sign):
    """The Newton correction of the solution ``qacc`` for the problem data of ``(m, d)`` with the
    constraint state fixed, and the row and joint forces it gives: zero at the primal (``qacc``
    solves it), their derivatives are the implicit function theorem's."""
    sg = jax.lax.stop_gradient
    d0 = sg(d)
    # Residual of the optimality condition, live in the problem data, at the frozen solution.
    f = _row_forces(m, d, qacc, active, linear_sign)
    efc_j0, efc_d0, *_ = _mjx.efc(d0)
    efc_jl = _mjx.efc(d)[0]
    residual = _mjx.mul_m(m, d, qacc) - d.qfrc_smooth - efc_jl.T @ f
    h = _mjx.full_m(m, d0) + (efc_j0.T * (efc_d0 * active)) @ efc_j0
    h = sg(0.5 * (h + h.T))
    correction = -jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(h), residual)
    f_out = _row_forces(m, d, qacc + correction, active, linear_sign)
    return correction, f_out, efc_jl.T @ f_out


def _zero_with_derivative(m, d, qacc, active, linear_sign):
    """Zeros shaped as :func:`_implicit_correction`'s outputs, with its derivative: the value is
    not computed (a forward-only program, a simulation, skips the factorisation); the derivative
    is, when something differentiates through the solve."""
    zero_rows = jnp.zeros_like(_mjx.efc(d).D)
    zeros = (jnp.zeros_like(qacc), zero_rows, jnp.zeros_like(qacc))  # correction, row forces, joint forces
    return value_with_derivative(_implicit_correction, zeros, m, d, qacc, active, linear_sign)


def solve_model(m, s):
    """``m`` with the constraint solve's iteration budget and tolerance that ``s`` asks for.

    The solve runs at least ``s.min_iterations`` iterations and stops at a tolerance no looser than
    ``s.max_tolerance``; ``m`` is returned as it is when the model's own settings already meet both.

    Arguments:
        m: ``mjx.Model``.
        s: the ``solver`` section of :class:`diffmjx.Config`.

    Returns:
        ``m``, or a copy with ``opt.iterations`` and ``opt.tolerance`` replaced.
    """
    it = max(int(m.opt.iterations), s.min_iterations)
    if it == m.opt.iterations and s.max_tolerance >= 1.0:
        return m
    tol = jnp.minimum(m.opt.tolerance, s.max_tolerance)
    return m.replace(opt=m.opt.replace(iterations=it, tolerance=tol))


def solve(m, d, gradient: str = "unroll", remat_iterations: bool = True):
    """Constraint solve ``(m, d) -> d`` with reverse-mode derivatives (see module docstring).

    Arguments:
        m: ``mjx.Model``; ``implicit`` needs ``opt.cone`` pyramidal (checked up front by
            :func:`diffmjx.validate`).
        d: ``mjx.Data`` with its constraint rows built and ``qacc_smooth`` computed.
        gradient: ``unroll``, ``implicit`` or ``auto`` (``implicit`` for pyramidal cones, else
            ``unroll``; ``solver.gradient``).
        remat_iterations: with ``unroll``, recompute each iteration in the backward pass; ``False``
            stores every iteration's line-search values instead (more memory and, on a CPU, a
            slower backward pass; ``experiments/benchmark_vjp`` compares the two).

    Returns:
        ``d`` with ``qacc``, ``qfrc_constraint`` and the row forces of the solution.
    """
    if gradient == "auto":
        gradient = "implicit" if m.opt.cone == _mjx.ConeType.PYRAMIDAL else "unroll"
    if gradient == "unroll":
        return _solve_unrolled(m, d, remat_iterations)
    if gradient == "implicit":
        return _solve_implicit(m, d)
    raise ValueError(f"solver.gradient={gradient!r} is not allowed; choose one of: {', '.join(GRADIENTS)}")
