r"""``step`` and ``rollout``: one control period / N control periods of MJX dynamics.

Controls are held constant over each period of length ``m.opt.timestep`` (zero-order hold, as in
MuJoCo). For the Diffrax solvers each period is one ``diffeqsolve`` of the ODE in
:mod:`diffmjx.dynamics` with the configured Runge--Kutta method, step-size controller and adjoint;
the ``mjx_*`` solvers are MJX's own fixed-step integrators (``integrator.substeps`` steps per
period), run on DiffMJX's differentiable forward dynamics.
"""

import dataclasses
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from diffmjx import _mjx, collision, manifold, solver
from diffmjx.checks import validate
from diffmjx.config import CONTINUOUS_ADJOINTS, Config
from diffmjx.dynamics import State, clamp_act, forward_unchecked, vector_field

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

_DIFFRAX_SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "bosh3": diffrax.Bosh3,
    "heun": diffrax.Heun,
    "midpoint": diffrax.Midpoint,
    "ralston": diffrax.Ralston,
    "euler": diffrax.Euler,
}
# Fields of mjx.Data that forward dynamics reads; everything else it recomputes.
_DATA_INPUTS = (
    "qpos", "qvel", "act", "ctrl", "qacc_warmstart", "qfrc_applied", "xfrc_applied",
    "eq_active", "mocap_pos", "mocap_quat", "userdata", "time",
)  # fmt: skip
_STATE_INPUTS = ("qvel", "act", "time")  # data inputs the vector field replaces by the state and t
_RK4_A = (0.5, 0.5, 1.0)
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


class Stats(NamedTuple):
    """Integrator statistics of one control period (stacked over periods by ``rollout``)."""

    accepted: jax.Array  # accepted steps
    rejected: jax.Array  # rejected steps
    budget_exhausted: jax.Array  # True if max_steps ran out before the period's end


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


class _PeriodPID(diffrax.PIDController):
    """Diffrax's PID controller with DiffMJX's warm start and, optionally, kink control.

    Warm start: the first step is ``first_step`` (an array) instead of ``dt0``. Passing a traced
    ``dt0`` to ``diffeqsolve`` makes Diffrax check its sign at run time with an Equinox error,
    which compiles to a host callback, and JAX never writes programs with host callbacks to the
    persistent compilation cache. With ``dt0=None`` and the warm-start step held here there is no
    such check, so every DiffMJX gradient can be cached across processes.

    Kink control (``kink_step``): the ODE state is ``(State, sentinel)``, where the sentinel's
    rate is the constraint state (:func:`diffmjx.solver.constraint_state`) at each stage. Its
    embedded error estimate is zero to rounding when every stage of a step saw the same constraint
    state (``b - b_hat`` sums to zero over all stages) and not otherwise (for Tsit5 no subset of
    stages sums to zero; Dopri5 and Dopri8 have stages of zero error weight, where a change seen
    by those stages alone goes unnoticed), so a step over which the constraint state changes is
    rejected and shrunk, down to ``kink_step``. The sentinel takes no part in the error norm.
    """

    first_step: jax.Array | None = None
    kink_step: float | None = None

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        dt0 = dt0 if self.first_step is None else self.first_step
        return super().init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        if self.kink_step is None:
            return super().adapt_step_size(t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state)
        (y0, _), (y1, _), (error, sentinel_error) = y0, y1_candidate, y_error
        h = t1 - t0
        changed = jnp.any(jnp.abs(sentinel_error) > _SENTINEL_THRESHOLD * h)
        straddles = changed & (h > 1.5 * self.kink_step)  # a step of kink_step is t1 - t0 up to rounding
        # an infinite error rejects the step at the controller's least factor, without spoiling
        # the PID history (Diffrax treats it like a failed implicit step)
        error = jax.tree.map(lambda e: jnp.where(straddles, jnp.inf, e), error)
        keep, next_t0, next_t1, jump, state, result = super().adapt_step_size(
            t0, t1, y0, y1, args, error, error_order, controller_state
        )
        next_t1 = jnp.where(straddles, next_t0 + jnp.maximum(next_t1 - next_t0, self.kink_step), next_t1)
        return keep, next_t0, next_t1, jump, state, result


# |sentinel error| / step above which the constraint state changed within the step: the rate takes
# values in {-2, -1, 0, 1}, a change moves the estimate by at least min |sum of b - b_hat over a
# subset of stages| (8e-4 for Tsit5) times the step, and no change leaves only rounding (1e-16).
_SENTINEL_THRESHOLD = 1e-9


class Method(NamedTuple):
    """The Diffrax objects that integrate one control period."""

    solver: diffrax.AbstractSolver
    stepsize_controller: diffrax.AbstractStepSizeController
    adjoint: diffrax.AbstractAdjoint


def _controller(cfg: Config, *, backsolve: bool, adjoint_solve: bool = False):
    """The step-size controller ``cfg`` names, for a forward solve differentiated by a backsolve
    adjoint (``backsolve``) or not (at :meth:`~diffmjx.config.IntegratorConfig.tolerances`), or for
    the backsolve adjoint's own solve (``adjoint_solve``)."""
    ic = cfg.integrator
    if ic.step_control == "constant":
        return diffrax.ConstantStepSize()
    rtol, atol = ic.tolerances(backsolve=backsolve)
    if adjoint_solve:
        rtol = ic.backsolve_rtol if ic.backsolve_rtol is not None else rtol
        atol = ic.backsolve_atol if ic.backsolve_atol is not None else atol
    # The adjoint solve controls the error of (y, a_y) only: a seminorm skips the parameter
    # adjoints, which only accumulate and would otherwise force tiny steps.
    norm = _adjoint_norm if adjoint_solve else optx.rms_norm
    return diffrax.PIDController(
        rtol=rtol, atol=atol, pcoeff=ic.pcoeff, icoeff=ic.icoeff, dcoeff=ic.dcoeff, dtmin=ic.dtmin,
        dtmax=ic.dtmax, norm=norm,
    )  # fmt: skip


class _AdjointState(NamedTuple):
    """The state of an interpolated adjoint's backward solve."""

    a_y: object  # the state adjoint (a State)
    a_args: list  # the adjoints of the differentiated args, accumulating


def _adjoint_norm(x):
    """RMS norm of an adjoint solve's state: of the state adjoint ``a_y`` for an interpolated
    adjoint's :class:`_AdjointState`, Diffrax's seminorm for a backsolve adjoint's ``(y, a_y,
    a_args, a_terms)``. The parameter adjoints only accumulate and would force tiny steps."""
    if isinstance(x, _AdjointState):
        return optx.rms_norm(x.a_y)
    return diffrax.adjoint_rms_seminorm(x)


class InterpolatedAdjoint(diffrax.AbstractAdjoint):
    r"""Optimise-then-discretise gradients with the state read from the forward solution.

    Like ``diffrax.BacksolveAdjoint``, each control period's gradient comes from the continuous
    adjoint equations :math:`\dot a_y = -a_y^\top \partial f/\partial y`,
    :math:`\dot a_\theta = -a_y^\top \partial f/\partial\theta`, integrated backwards with
    their own error control. Two differences:

    - The state is not integrated backwards: the backward pass re-runs the period's forward solve
      keeping Diffrax's dense output, and the adjoint solve reads the state from it (no backward
      drift of the state through dissipative contact).
    - The adjoint's rate jumps where the constraint state changes (lift-off, a friction-pyramid
      edge, stick-slip), by orders of magnitude on the cube toss. Backsolve's controller finds
      each jump by rejecting and shrinking steps (most of its extra backward steps). Here up to ``_KINKS`` changes per period are located
      on the interpolated forward solution by bisection with forward evaluations, and the
      adjoint solve steps to each as a jump time (``diffrax.ClipStepSizeController``); its own
      error control handles the rest.

    The forward pass (trajectory, memory kept per period) is the backsolve adjoint's; the
    backward pass holds one period's dense output (``integrator.max_steps`` steps) at a time.
    :func:`step` and :func:`rollout` carry it out; ``diffrax.diffeqsolve`` cannot.
    Measured against backsolve in ``docs/results/benchmark_adjoints.csv``.

    Attributes:
        stepsize_controller: the adjoint solve's controller; None: the forward solve's with
            the error measured on the state adjoint only.
    """

    stepsize_controller: diffrax.AbstractStepSizeController | None = None

    def loop(self, **kwargs):
        raise NotImplementedError("InterpolatedAdjoint is carried out by diffmjx.step and diffmjx.rollout only")


def _continuous(adjoint) -> bool:
    """Whether ``adjoint`` is optimise-then-discretise (the continuous derivative equations): its forward
    solve runs at ``rtol`` itself, without kink control."""
    return isinstance(adjoint, (diffrax.BacksolveAdjoint, InterpolatedAdjoint, SensitivityAdjoint))


# Diffrax's loop for a solve that autodiff never enters: a plain while loop (its default adjoint's
# checkpointed loop ran the cube toss's forward pass 1.5-1.9x slower)
_UNDIFFERENTIATED = diffrax.ForwardMode()


def _period_solve(y0_args, term, solve, saveat):
    """One period's forward ``diffeqsolve`` as ``solve`` describes it (no autodiff inside)."""
    y0, args = y0_args
    return diffrax.diffeqsolve(term, solve["solver"], t0=solve["t0"], t1=solve["t1"], dt0=solve["dt0"], y0=y0,
                               args=args, saveat=saveat, stepsize_controller=solve["controller"],
                               max_steps=solve["max_steps"], throw=solve["throw"], adjoint=_UNDIFFERENTIATED)  # fmt: skip


def _period_forward(y0_args, term, solve):
    """``(y1, (stats, result))`` of one period's forward solve: the primal of the custom-derivative modes."""
    sol = _period_solve(y0_args, term, solve, diffrax.SaveAt(t1=True))
    return jax.tree.map(lambda x: x[-1], sol.ys), (sol.stats, sol.result)


@eqx.filter_custom_vjp
def _interpolated_solve(y0_args, term, solve):
    """``(y1, stats)`` of one period's forward solve; its VJP is :class:`InterpolatedAdjoint`'s."""
    return _period_forward(y0_args, term, solve)


@_interpolated_solve.def_fwd
def _interpolated_solve_fwd(perturbed, y0_args, term, solve):
    del perturbed
    return _interpolated_solve(y0_args, term, solve), None


@_interpolated_solve.def_bwd
def _interpolated_solve_bwd(residuals, grad_out, perturbed, y0_args, term, solve):
    del residuals
    y0, args = y0_args
    # the period again, keeping the dense output the adjoint solve reads the state from
    sol = _period_solve(y0_args, term, solve, diffrax.SaveAt(dense=True))
    perturbed_args = perturbed[1]
    diff = [a for a, p in zip(args, perturbed_args, strict=True) if p]

    def vf(t, a, _):
        y = sol.evaluate(t)

        def f(y, diff):
            it = iter(diff)
            full = [next(it) if p else x for x, p in zip(args, perturbed_args, strict=True)]
            return term.vf(t, y, full)

        _, vjp = jax.vjp(f, y, diff)
        return _AdjointState(*jax.tree.map(jnp.negative, vjp(a.a_y)))

    g_y1 = jax.tree.map(lambda y, g: jnp.zeros_like(y) if g is None else g, y0, grad_out[0])
    a1 = _AdjointState(g_y1, [jnp.zeros_like(x) for x in diff])
    back = solve["adjoint"].stepsize_controller or solve["controller"]
    if solve.get("code") is not None and isinstance(back, diffrax.AbstractAdaptiveStepSizeController):
        back = diffrax.ClipStepSizeController(back, jump_ts=_kinks(sol, solve["code"], args))
    dt0 = None if solve["dt0"] is None else -solve["dt0"]
    adj = diffrax.diffeqsolve(diffrax.ODETerm(vf), solve["solver"], t0=solve["t1"], t1=solve["t0"], dt0=dt0, y0=a1,
                              saveat=diffrax.SaveAt(t1=True), stepsize_controller=back,
                              max_steps=solve["max_steps"], throw=solve["throw"], adjoint=_UNDIFFERENTIATED)  # fmt: skip
    # a backward solve that ran out of max_steps gives NaN, not a partial gradient
    ok = adj.result == diffrax.RESULTS.successful
    a_y0, a_diff = jax.tree.map(lambda x: jnp.where(ok, x[-1], jnp.nan), adj.ys)
    it = iter(a_diff)
    a_args = [next(it) if p else None for p in perturbed_args]
    a_y0 = jax.tree.map(lambda g, p: g if p else None, a_y0, perturbed[0])
    return a_y0, a_args


class SensitivityAdjoint(diffrax.AbstractAdjoint):
    r"""Gradients from the sensitivity equations, carried forward along the forward solve's steps.

    The derivative of a period's end state with respect to its inputs (the state and every
    differentiated model or data array the vector field reads: ``p`` numbers) solves the linear
    ODE :math:`\dot S = \partial f/\partial y\, S + \partial f/\partial\theta` along the
    forward solution. Here it is integrated on the forward solve's accepted steps, each split at
    the constraint-state changes located on the dense output (pyramidal cones, as
    :class:`InterpolatedAdjoint` locates them) and halved, by the fourth-order Magnus method: the
    vector field's Jacobian (forward mode, ``n + p`` tangents) at the two Gauss--Legendre points of
    each piece and one matrix exponential. The period's Jacobian (``n x (n + p)``) is all a
    gradient needs, so ``jax.grad``, ``jax.jvp`` and ``jax.jacfwd`` cost the forward solve plus
    four Jacobians per step and no backward integration.

    The quadrature has no error control of its own: its error is what four Gauss points per step
    leave where the contact force builds up (measured in ``docs/results/benchmark_adjoints*``).
    The cost grows with ``n + p``: a mode for small models (a few bodies, a few parameters), not
    for a 39-muscle hand. :func:`step` and :func:`rollout` carry it out;
    ``diffrax.diffeqsolve`` cannot.
    """

    def loop(self, **kwargs):
        raise NotImplementedError("SensitivityAdjoint is carried out by diffmjx.step and diffmjx.rollout only")


_SENSITIVITY_PIECES = 2  # Magnus steps per forward step (and per piece between kinks)
_SENSITIVITY_KINKS = 64  # kinks located per period
_GAUSS = (0.5 - np.sqrt(3.0) / 6.0, 0.5 + np.sqrt(3.0) / 6.0)


@eqx.filter_custom_jvp
def _sensitivity_solve(y0_args, term, solve):
    """``(y1, stats)`` of one period's forward solve; its JVP is :class:`SensitivityAdjoint`'s."""
    return _period_forward(y0_args, term, solve)


def _magnus4(m1, m2, h):
    """The fourth-order Magnus step's exponent over a step ``h`` for ``dW/dt = A(t) W``, from ``A``
    at the step's two Gauss points."""
    return 0.5 * h * (m1 + m2) + (np.sqrt(3.0) / 12.0) * h * h * (m2 @ m1 - m1 @ m2)


@_sensitivity_solve.def_jvp
def _sensitivity_solve_jvp(primals, tangents):
    y0_args, term, solve = primals
    (y0, args), (t_y0, t_args) = y0_args, tangents[0]
    sol = _period_solve(y0_args, term, solve, diffrax.SaveAt(t1=True, dense=True))
    y1 = jax.tree.map(lambda x: x[-1], sol.ys)
    s0, unravel = jax.flatten_util.ravel_pytree(y0)
    n, dtype = s0.shape[0], s0.dtype
    t_args = [None] * len(args) if t_args is None else list(t_args)
    # the differentiated args the vector field reads (it replaces the data's qvel, act and time)
    idx = [i for i, (t, ign) in enumerate(zip(t_args, solve["ignored"], strict=True)) if t is not None and not ign]
    p0 = jnp.concatenate([jnp.ravel(args[i]).astype(dtype) for i in idx] + [jnp.zeros((0,), dtype)])
    p = p0.shape[0]

    def rate(t, z):
        full, off = list(args), n
        for i in idx:
            full[i] = z[off : off + args[i].size].reshape(args[i].shape).astype(args[i].dtype)
            off += args[i].size
        return jax.flatten_util.ravel_pytree(term.vf(t, unravel(z[:n]), full))[0]

    def jac(t):  # (n + p, n + p): the state's rows, and zeros for the constant parameters
        z = jnp.concatenate([jax.flatten_util.ravel_pytree(sol.evaluate(t))[0], p0])
        return jnp.concatenate([jax.jacfwd(lambda z: rate(t, z))(z), jnp.zeros((p, n + p), dtype)])

    ts, size = sol.interpolation.ts, sol.interpolation.ts_size
    ts = jnp.where(jnp.arange(ts.shape[0]) < size, ts, jnp.inf)
    if solve["code"] is not None:
        # the Jacobian jumps where the constraint state changes: split the steps there
        found = _kinks(sol, solve["code"], args, _SENSITIVITY_KINKS)
        ts, size = jnp.sort(jnp.concatenate([ts, found])), size + jnp.sum(jnp.isfinite(found))

    # the Gauss points of a step's pieces, as fractions of the step; one traced Jacobian, mapped
    # over them (vmap would batch MJX's solver loops and run them to the slowest point)
    nodes = jnp.asarray([(j + g) / _SENSITIVITY_PIECES for j in range(_SENSITIVITY_PIECES) for g in _GAUSS], dtype)

    def body(i, w):
        h = ts[i + 1] - ts[i]
        js = jax.lax.map(jac, ts[i] + nodes * h)
        for j in range(_SENSITIVITY_PIECES):
            w = jax.scipy.linalg.expm(_magnus4(js[2 * j], js[2 * j + 1], h / _SENSITIVITY_PIECES)) @ w
        return w

    w = jax.lax.fori_loop(0, jnp.maximum(size - 1, 0), body, jnp.eye(n + p, dtype=dtype))

    def flat(x, t):
        return jnp.zeros(x.size, dtype) if t is None else jnp.ravel(t).astype(dtype)

    t_y0_leaves = (
        [None] * len(jax.tree.leaves(y0)) if t_y0 is None else jax.tree.leaves(t_y0, is_leaf=lambda x: x is None)
    )
    z_t = jnp.concatenate([flat(x, t) for x, t in zip(jax.tree.leaves(y0), t_y0_leaves, strict=True)]
                          + [flat(args[i], t_args[i]) for i in idx])  # fmt: skip
    t_y1 = unravel(w[:n] @ z_t)
    return (y1, (sol.stats, sol.result)), (t_y1, jax.tree.map(lambda _: None, (sol.stats, sol.result)))


_KINKS = 8  # kinks located per period


def _kinks(sol, code, args, count=_KINKS):
    """Times in the period at which ``code(t, y(t), args)`` of the dense solution ``sol`` changes,
    located by bisection to a few ulps: the first ``count``, ascending, padded with inf.

    Where two rows cross zero together the state chatters for a few ulps (each row's own
    rounding); every flip found is kept as a jump time, so the adjoint steps to each side of them."""
    ts, n = sol.interpolation.ts, sol.interpolation.ts_size
    tol = 8 * jnp.finfo(ts.dtype).eps

    def at(t):
        return code(t, sol.evaluate(t), args)

    def bisect(ta, tb, ca):
        def cond(s):
            lo, hi = s
            return hi - lo > tol * jnp.maximum(jnp.abs(hi), 1e-3)

        def body(s):
            lo, hi = s
            mid = 0.5 * (lo + hi)
            same = jnp.all(at(mid) == ca)
            return jnp.where(same, mid, lo), jnp.where(same, hi, mid)

        return jax.lax.while_loop(cond, body, (ta, tb))[1]

    def body(i, carry):
        c_prev, buf, k = carry
        ta, tb = ts[i], ts[i + 1]
        cb = at(tb)

        def more(s):  # another change between the last one found and the step's end
            _, c_lo, _, k = s
            # (under vmap a finished member runs this body too, with tb = inf: no search there)
            return jnp.any(cb != c_lo) & (k < count) & jnp.isfinite(tb)

        def locate(s):
            lo, c_lo, buf, k = s
            tk = bisect(lo, tb, c_lo)
            return tk, at(tk), buf.at[k].set(tk), k + 1

        _, _, buf, k = jax.lax.while_loop(more, locate, (ta, c_prev, buf, k))
        return cb, buf, k

    c0 = at(ts[0])
    buf = jnp.full((count,), jnp.inf, ts.dtype)
    _, buf, _ = jax.lax.fori_loop(0, jnp.maximum(n - 1, 0), body, (c0, buf, 0))
    return buf


def diffrax_method(cfg: Config, solver=None, stepsize_controller=None, adjoint=None) -> Method:
    """The Diffrax solver, step-size controller and adjoint a Diffrax ``integrator.solver`` uses.

    Each object passed replaces the one the config names (Diffrax's own style: a custom controller
    needs no new config string); the others come from ``cfg.integrator``.

    Arguments:
        cfg: :class:`diffmjx.Config` with a Diffrax ``integrator.solver``.
        solver: a ``diffrax.AbstractSolver``, or None for ``integrator.solver``.
        stepsize_controller: a ``diffrax.AbstractStepSizeController``, or None for
            ``integrator.step_control`` with the forward solve's tolerances
            (:meth:`~diffmjx.config.IntegratorConfig.tolerances`: ``rtol``, ``atol``, divided by
            ``dto_tighten`` unless the adjoint is a backsolve one), the PID coefficients,
            ``dtmin`` and ``dtmax``.
        adjoint: a ``diffrax.AbstractAdjoint``, or None for ``integrator.adjoint``
            (``backsolve`` integrates its adjoint with the method's solver and
            ``integrator.backsolve_rtol`` / ``backsolve_atol``).

    Returns:
        :class:`Method`.
    """
    ic = cfg.integrator
    solver = _DIFFRAX_SOLVERS[ic.solver]() if solver is None else solver
    if adjoint is None:
        if ic.adjoint == "checkpoint":
            adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=ic.checkpoints)
        elif ic.adjoint in CONTINUOUS_ADJOINTS:
            back = stepsize_controller
            if back is None:
                back = _controller(cfg, backsolve=True, adjoint_solve=True)
            if ic.adjoint == "backsolve":
                adjoint = diffrax.BacksolveAdjoint(solver=solver, stepsize_controller=back)
            elif ic.adjoint == "sensitivity":
                adjoint = SensitivityAdjoint()
            else:
                adjoint = InterpolatedAdjoint(stepsize_controller=back)
        else:
            adjoint = diffrax.ForwardMode()
    if stepsize_controller is None:
        stepsize_controller = _controller(cfg, backsolve=_continuous(adjoint))
    return Method(solver, stepsize_controller, adjoint)


def _period_controller(controller: diffrax.PIDController, first_step, kink_step) -> _PeriodPID:
    fields = {f.name: getattr(controller, f.name) for f in dataclasses.fields(controller) if f.init}
    fields.update(first_step=first_step, kink_step=kink_step)
    return _PeriodPID(**fields)


def _traced_args(tree):
    """``(args, unpack)``: the leaves of ``tree`` that are tracers, and ``unpack(args) -> tree``
    with the other leaves (constants) filled in.

    Only traced leaves travel as Diffrax's ``args``; constants (a model the caller's ``jit`` closes
    over, the arrays a parameter map leaves untouched) are closed over by the vector field. The
    backsolve adjoint integrates an adjoint for every inexact leaf of ``args`` through its whole
    backward solve (118 of the cube's model leaves), whether or not anything differentiates it;
    closing over the constants makes the cube toss's default gradient 1.7x faster and its compile
    1.5x, with the same gradient (``docs/results/benchmark_backsolve_args.csv``).
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    traced = [isinstance(x, jax.core.Tracer) for x in leaves]
    args = [x for x, t in zip(leaves, traced, strict=True) if t]
    consts = [x for x, t in zip(leaves, traced, strict=True) if not t]

    def unpack(args):
        a, c = iter(args), iter(consts)
        return jax.tree_util.tree_unflatten(treedef, [next(a) if t else next(c) for t in traced])

    return args, unpack


def _period_diffrax(m, d, cfg: Config, layout, dt_hint, method: Method):
    ic = cfg.integrator
    period = jax.lax.stop_gradient(m.opt.timestep)
    t0 = jax.lax.stop_gradient(d.time)
    # Diffrax carries only the model and the forward-pass *inputs* of d as flat lists of arrays:
    # the adjoint state then stays small, and MJX pytrees' empty-tuple nodes (which the backsolve
    # adjoint's state handling cannot carry) never reach it.
    inputs = {k: getattr(d, k) for k in _DATA_INPUTS}
    args, unpack = _traced_args((m, inputs))

    controller, adjoint = method.stepsize_controller, method.adjoint
    # the warm-start step goes to the controller, not to diffeqsolve (see _PeriodPID); backsolve
    # runs without kink control (its adjoint solve has its own error control)
    warm = isinstance(controller, diffrax.PIDController)
    backsolve = _continuous(adjoint)
    nefc = _mjx.efc(collision.allocate(m, d, cfg.collision)).J.shape[0]  # the rows the vector field's data have
    rtol = getattr(controller, "rtol", None)
    kink_step = ic.kink_step_used(backsolve=backsolve, rtol=rtol if isinstance(rtol, (int, float)) else None)
    kinks = warm and not backsolve and kink_step is not None and nefc > 0

    def evaluate(t, y, args):
        m, inputs = unpack(args)
        d0 = collision.allocate(m, _mjx.mjx.make_data(m), cfg.collision).replace(**inputs)
        return m, vector_field(m, d0, y, t, layout, cfg)

    def code(m, d):  # the constraint state, one number per row (as MJX classifies it for pyramidal cones)
        state = solver.constraint_state(m, d, d.qacc)
        return jax.lax.stop_gradient(state.active + 2.0 * state.linear_sign)

    def vf(t, y, args):
        if not kinks:
            return evaluate(t, y, args)[1][0]
        m, (dy, d) = evaluate(t, y[0], args)
        return dy, code(m, d)  # the kink sentinel's rate

    # One jitted call per vector-field evaluation: JAX's autodiff passes (linearize, transpose, the
    # checkpointed loops' symbolic-zero resolution) then work on a cached inner jaxpr instead of
    # re-walking MJX's whole forward dynamics each time, which roughly halves the backward trace
    # time (docs/results/benchmark_jit*.csv); XLA inlines the call, so the program's speed is unchanged.
    term = diffrax.ODETerm(jax.jit(vf))
    if isinstance(controller, diffrax.ConstantStepSize):
        dt0 = period / ic.substeps
    else:
        dt0 = jnp.minimum(jax.lax.stop_gradient(dt_hint), period)
        dtmax = getattr(controller, "dtmax", None)
        if dtmax is not None:
            dt0 = jnp.minimum(dt0, dtmax)
    y0 = State(jnp.zeros(m.nv, d.qvel.dtype), d.qvel, d.act)
    if kinks:
        y0 = (y0, jnp.zeros(nefc, d.qvel.dtype))
    if warm:
        first_step = dt0
        controller, dt0 = _period_controller(controller, first_step, kink_step if kinks else None), None
        if backsolve and not isinstance(adjoint, SensitivityAdjoint):
            # the adjoint solve starts from -dt0 when given one: hold its first step in its own
            # controller too, or keep dt0 if that controller cannot hold it
            interpolated = isinstance(adjoint, InterpolatedAdjoint)
            back = adjoint.stepsize_controller if interpolated else adjoint.kwargs.get("stepsize_controller")
            if back is None and interpolated and isinstance(controller, diffrax.PIDController):
                back = eqx.tree_at(lambda c: c.norm, method.stepsize_controller, _adjoint_norm)
            if isinstance(back, diffrax.PIDController):
                back = _period_controller(back, first_step, None)
                if interpolated:
                    adjoint = InterpolatedAdjoint(stepsize_controller=back)
                else:
                    adjoint = diffrax.BacksolveAdjoint(**{**adjoint.kwargs, "stepsize_controller": back})
            else:
                dt0 = first_step

    def state_code(t, y, args):
        m, (_, d) = evaluate(t, y, args)
        return code(m, d)

    pyramidal = nefc > 0 and m.opt.cone == _mjx.ConeType.PYRAMIDAL
    if isinstance(adjoint, SensitivityAdjoint):
        # the data inputs the vector field replaces by the state and t: no sensitivity to them
        mask = jax.tree.leaves((jax.tree.map(lambda _: False, m), {k: k in _STATE_INPUTS for k in inputs}))
        ignored = tuple(f for f, x in zip(mask, jax.tree.leaves((m, inputs)), strict=True)
                        if isinstance(x, jax.core.Tracer))  # fmt: skip
        solve = dict(solver=method.solver, t0=t0, t1=t0 + period, dt0=dt0, controller=controller,
                     max_steps=ic.max_steps, throw=ic.on_budget_exhausted == "raise", ignored=ignored,
                     code=state_code if pyramidal else None)  # fmt: skip
        y1, (sol_stats, result) = _sensitivity_solve((y0, args), term, solve)
        return _period_end(m, d, layout, y1, sol_stats, result, t0, period, kinks)
    if isinstance(adjoint, InterpolatedAdjoint):
        solve = dict(solver=method.solver, t0=t0, t1=t0 + period, dt0=dt0, controller=controller, adjoint=adjoint,
                     max_steps=ic.max_steps, throw=ic.on_budget_exhausted == "raise",
                     code=state_code if pyramidal else None)  # fmt: skip
        y1, (sol_stats, result) = _interpolated_solve((y0, args), term, solve)
        return _period_end(m, d, layout, y1, sol_stats, result, t0, period, kinks)
    sol = diffrax.diffeqsolve(
        term,
        method.solver,
        t0=t0,
        t1=t0 + period,
        dt0=dt0,
        y0=y0,
        args=args,
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=controller,
        adjoint=adjoint,
        max_steps=ic.max_steps,
        throw=ic.on_budget_exhausted == "raise",
    )
    y1 = jax.tree.map(lambda x: x[-1], sol.ys)
    return _period_end(m, d, layout, y1, sol.stats, sol.result, t0, period, kinks)


def _period_end(m, d, layout, y1, sol_stats, result, t0, period, kinks):
    if kinks:
        y1 = y1[0]
    qpos = manifold.normalize_quats(layout, manifold.retract(layout, d.qpos, y1.xi))
    d = d.replace(qpos=qpos, qvel=y1.qvel, act=clamp_act(m, y1.act), time=t0 + period)
    accepted = sol_stats["num_accepted_steps"]
    stats = Stats(
        accepted=accepted,
        rejected=sol_stats["num_rejected_steps"],
        budget_exhausted=result == diffrax.RESULTS.max_steps_reached,
    )
    # Next period's first trial step: the mean accepted step of this one.
    dt_next = period / jnp.maximum(accepted, 1)
    return d, stats, dt_next


def _mjx_rk4(m, d, layout, cfg):
    """MJX's classical RK4 (stages from the period's start configuration), on our forward."""
    h = m.opt.timestep
    d0 = forward_unchecked(m, d, cfg)
    k = (d0.qvel, d0.qacc, d0.act_dot)
    acc = jax.tree.map(lambda x: _RK4_B[0] * x, k)
    di = d0
    for a, b in zip(_RK4_A, _RK4_B[1:], strict=True):
        kq = manifold.retract(layout, d.qpos, a * h * k[0])
        kv = d.qvel + a * h * k[1]
        ka = d.act + a * h * k[2]
        di = forward_unchecked(m, d0.replace(qpos=kq, qvel=kv, act=ka, time=d.time + a * h), cfg)
        k = (kv, di.qacc, di.act_dot)
        acc = jax.tree.map(lambda s, x, b=b: s + b * x, acc, k)
    base = di.replace(qpos=d.qpos, qvel=d.qvel, act=d.act, time=d.time)
    return _mjx.mjx_advance(m, base, acc[2], acc[1], acc[0])


def _period_mjx(m, d, cfg: Config, layout):
    ic = cfg.integrator
    d = collision.allocate(m, d, cfg.collision)  # the scans below carry d: its contacts keep one layout
    ms = _mjx.with_timestep(m, m.opt.timestep / ic.substeps)

    def advance(d):
        if ic.solver == "mjx_rk4":
            return _mjx_rk4(ms, d, layout, cfg)
        d = forward_unchecked(ms, d, cfg)
        return _mjx.mjx_euler(ms, d) if ic.solver == "mjx_euler" else _mjx.mjx_implicit(ms, d)

    def one(d, _):
        # keep the dtypes d came in: a stage that writes an integer field as int64 under x64 where
        # make_data made int32 (MJX's tendon stage does) would break a scan carry (substeps, rollout)
        return jax.tree.map(lambda x, ref: x.astype(ref.dtype), advance(d), d), None

    if ic.substeps == 1:
        d, _ = one(d, None)
    else:
        d, _ = jax.lax.scan(one, d, None, length=ic.substeps)
    d = d.replace(qpos=manifold.normalize_quats(layout, d.qpos))
    n = jnp.asarray(ic.substeps)
    return d, Stats(accepted=n, rejected=jnp.zeros_like(n), budget_exhausted=jnp.asarray(False))


def _period(m, d, cfg: Config, layout, dt_hint, method: Method | None):
    if method is None:
        d, stats = _period_mjx(m, d, cfg, layout)
        return d, stats, dt_hint
    return _period_diffrax(m, d, cfg, layout, dt_hint, method)


def _first_dt(m, cfg: Config):
    return jnp.asarray(cfg.integrator.dt0 if cfg.integrator.dt0 is not None else m.opt.timestep)


def _prepare(m, cfg: Config | None, solver, stepsize_controller, adjoint):
    """Validate once, up front; the Diffrax method (None for MJX's fixed-step integrators)."""
    cfg = Config() if cfg is None else cfg
    validate(m, cfg, solver=solver, stepsize_controller=stepsize_controller, adjoint=adjoint)
    if cfg.integrator.solver.startswith("mjx_"):
        return cfg, None
    return cfg, diffrax_method(cfg, solver, stepsize_controller, adjoint)


def step(m, d, cfg: Config | None = None, *, solver=None, stepsize_controller=None, adjoint=None,
         return_stats: bool = False):  # fmt: skip
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
    d, stats, _ = _period(m, d, cfg, layout, _first_dt(m, cfg), method)
    return (d, stats) if return_stats else d


def rollout(m, d, ctrls, cfg: Config | None = None, *, solver=None, stepsize_controller=None, adjoint=None,
            observe=None, dt0=None):  # fmt: skip
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
    if method is None:
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
        d, stats, dt = _period(m, join(state, u), cfg, layout, dt, method)
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
