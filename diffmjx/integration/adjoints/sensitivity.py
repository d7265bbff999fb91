r"""The sensitivity mode: period Jacobians carried forward along the forward solve's steps."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np

from diffmjx.integration.adjoints import kinks
from diffmjx.integration.adjoints.base import GradientMode, PeriodSolve, period_end_state, solve_forward

__all__ = ["SensitivityAdjoint", "sensitivity_solve"]

PIECES = 2  # Magnus steps per forward step (and per piece between kinks)
KINKS = 64  # kinks located per period
_GAUSS = (0.5 - np.sqrt(3.0) / 6.0, 0.5 + np.sqrt(3.0) / 6.0)


class SensitivityAdjoint(diffrax.AbstractAdjoint, GradientMode):
    r"""Gradients from the sensitivity equations, carried forward along the forward solve's steps.

    The derivative of a period's end state with respect to its inputs (the state and every
    differentiated model or data array the vector field reads: ``p`` numbers) solves the linear
    ODE :math:`\dot S = \partial f/\partial y\, S + \partial f/\partial\theta` along the
    forward solution. Here it is integrated on the forward solve's accepted steps, each split at
    the constraint-state changes located on the dense output (pyramidal cones, as
    :class:`~diffmjx.integration.adjoints.InterpolatedAdjoint` locates them) and halved, by the fourth-order
    Magnus method: the vector field's Jacobian (forward mode, ``n + p`` tangents) at the two
    Gauss--Legendre points of each piece and one matrix exponential. The period's Jacobian
    (``n x (n + p)``) is all a gradient needs, so ``jax.grad``, ``jax.jvp`` and ``jax.jacfwd`` cost
    the forward solve plus four Jacobians per step and no backward integration.

    The quadrature has no error control of its own: its error is what four Gauss points per step
    leave where the contact force builds up (measured in ``docs/results/benchmark_adjoints*``).
    The cost grows with ``n + p``: a mode for small models (a few bodies, a few parameters), not
    for a 39-muscle hand. :func:`diffmjx.step` and :func:`diffmjx.rollout` carry it out;
    ``diffrax.diffeqsolve`` cannot.
    """

    continuous = True

    def loop(self, **kwargs):
        raise NotImplementedError("SensitivityAdjoint is carried out by diffmjx.step and diffmjx.rollout only")

    def solve(self, term, y0, args, spec: PeriodSolve):
        y1, (stats, result) = sensitivity_solve((y0, args), term, spec)
        return y1, stats, result


@eqx.filter_custom_jvp
def sensitivity_solve(y0_args, term, spec: PeriodSolve):
    """``(y1, (stats, result))`` of one period's forward solve; its JVP is :class:`SensitivityAdjoint`'s.

    ``spec.ignored`` flags the args the vector field replaces (no sensitivity to them);
    ``spec.code``, where given, is the constraint state whose changes split the steps."""
    return period_end_state(y0_args, term, spec)


def _magnus4(m1, m2, h):
    """The fourth-order Magnus step's exponent over a step ``h`` for ``dW/dt = A(t) W``, from ``A``
    at the step's two Gauss points."""
    return 0.5 * h * (m1 + m2) + (np.sqrt(3.0) / 12.0) * h * h * (m2 @ m1 - m1 @ m2)


@sensitivity_solve.def_jvp
def _sensitivity_solve_jvp(primals, tangents):
    y0_args, term, spec = primals
    (y0, args), (t_y0, t_args) = y0_args, tangents[0]
    sol = solve_forward(y0_args, term, spec, diffrax.SaveAt(t1=True, dense=True))
    y1 = jax.tree.map(lambda x: x[-1], sol.ys)
    s0, unravel = jax.flatten_util.ravel_pytree(y0)
    n, dtype = s0.shape[0], s0.dtype
    t_args = [None] * len(args) if t_args is None else list(t_args)
    # the differentiated args the vector field reads (it replaces the data's qvel, act and time)
    idx = [i for i, (t, ign) in enumerate(zip(t_args, spec.ignored, strict=True)) if t is not None and not ign]
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
    if spec.code is not None:
        # the Jacobian jumps where the constraint state changes: split the steps there
        found = kinks.locate(sol, spec.code, args, KINKS)
        ts, size = jnp.sort(jnp.concatenate([ts, found])), size + jnp.sum(jnp.isfinite(found))

    # the Gauss points of a step's pieces, as fractions of the step; one traced Jacobian, mapped
    # over them (vmap would batch MJX's solver loops and run them to the slowest point)
    nodes = jnp.asarray([(j + g) / PIECES for j in range(PIECES) for g in _GAUSS], dtype)

    def body(i, w):
        h = ts[i + 1] - ts[i]
        js = jax.lax.map(jac, ts[i] + nodes * h)
        for j in range(PIECES):
            w = jax.scipy.linalg.expm(_magnus4(js[2 * j], js[2 * j + 1], h / PIECES)) @ w
        return w

    w = jax.lax.fori_loop(0, jnp.maximum(size - 1, 0), body, jnp.eye(n + p, dtype=dtype))

    def flat(x, t):
        return jnp.zeros(x.size, dtype) if t is None else jnp.ravel(t).astype(dtype)

    t_y0_leaves = (
        [None] * len(jax.tree.leaves(y0)) if t_y0 is None else jax.tree.leaves(t_y0, is_leaf=lambda x: x is None)
    )
    z_t = jnp.concatenate(
        [flat(x, t) for x, t in zip(jax.tree.leaves(y0), t_y0_leaves, strict=True)]
        + [flat(args[i], t_args[i]) for i in idx]
    )
    t_y1 = unravel(w[:n] @ z_t)
    return (y1, (sol.stats, sol.result)), (t_y1, jax.tree.map(lambda _: None, (sol.stats, sol.result)))
