"""Locating the constraint-state changes (kinks) of a period on its dense forward solution.

The adjoint's rate, and the sensitivity equations' Jacobian, jump where the constraint state
changes (lift-off, a friction-pyramid edge, stick-slip). The interpolated and sensitivity modes
step to each such time found here by bisection with forward evaluations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["KINKS", "locate"]

KINKS = 8  # kinks located per period


def locate(sol, code, args, count=KINKS):
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

        def search(s):
            lo, c_lo, buf, k = s
            tk = bisect(lo, tb, c_lo)
            return tk, at(tk), buf.at[k].set(tk), k + 1

        _, _, buf, k = jax.lax.while_loop(more, search, (ta, c_prev, buf, k))
        return cb, buf, k

    c0 = at(ts[0])
    buf = jnp.full((count,), jnp.inf, ts.dtype)
    _, buf, _ = jax.lax.fori_loop(0, jnp.maximum(n - 1, 0), body, (c0, buf, 0))
    return buf
