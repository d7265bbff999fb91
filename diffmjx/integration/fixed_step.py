r"""MJX's fixed-step integrators (``integrator.solver = mjx_*``) on DiffMJX's differentiable forward dynamics.

Each is a small method object, its config bound (``MJXEuler(cfg)``), with
``period(m, d, layout, dt_hint) -> (d, stats, dt_hint)``,
as :class:`diffmjx.integration.method.Method` has for the Diffrax solvers: ``integrator.substeps`` steps of
``timestep / substeps`` per control period. :mod:`diffmjx.integration.method` registers them as ``mjx_euler``,
``mjx_rk4`` and ``mjx_implicitfast``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

from diffmjx import _mjx
from diffmjx.config import Config
from diffmjx.integration.period import Stats
from diffmjx.physics import collision, manifold
from diffmjx.physics.dynamics import forward_unchecked

__all__ = ["MJXRK4", "FixedStep", "MJXEuler", "MJXImplicitFast"]

_RK4_A = (0.5, 0.5, 1.0)
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


class FixedStep:
    """A fixed-step MJX integrator; subclasses give :meth:`advance` (one step of ``m.opt.timestep``)."""

    carries_all_data: ClassVar[bool] = True  # MJX's steps advance more of d (warmstart, derived fields)

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def advance(self, m, d, layout):
        raise NotImplementedError

    def period(self, m, d, layout, dt_hint):
        """``(d, stats, dt_hint)``: ``integrator.substeps`` steps over the control period."""
        cfg = self.cfg
        ic = cfg.integrator
        d = collision.allocate(m, d, cfg.collision)  # the scans below carry d: its contacts keep one layout
        ms = _mjx.with_timestep(m, m.opt.timestep / ic.substeps)

        def one(d, _):
            # keep the dtypes d came in: a stage that writes an integer field as int64 under x64 where
            # make_data made int32 (MJX's tendon stage does) would break a scan carry (substeps, rollout)
            return jax.tree.map(lambda x, ref: x.astype(ref.dtype), self.advance(ms, d, layout), d), None

        if ic.substeps == 1:
            d, _ = one(d, None)
        else:
            d, _ = jax.lax.scan(one, d, None, length=ic.substeps)
        d = d.replace(qpos=manifold.normalize_quats(layout, d.qpos))
        n = jnp.asarray(ic.substeps)
        return d, Stats(accepted=n, rejected=jnp.zeros_like(n), budget_exhausted=jnp.asarray(False)), dt_hint


class MJXEuler(FixedStep):
    """MJX's semi-implicit Euler (``mjx_euler``)."""

    def advance(self, m, d, layout):
        return _mjx.mjx_euler(m, forward_unchecked(m, d, self.cfg))


class MJXImplicitFast(FixedStep):
    """MJX's implicit-in-velocity Euler (``mjx_implicitfast``)."""

    def advance(self, m, d, layout):
        return _mjx.mjx_implicit(m, forward_unchecked(m, d, self.cfg))


class MJXRK4(FixedStep):
    """MJX's classical RK4 (``mjx_rk4``): stages from the step's start configuration."""

    def advance(self, m, d, layout):
        h = m.opt.timestep
        d0 = forward_unchecked(m, d, self.cfg)
        k = (d0.qvel, d0.qacc, d0.act_dot)
        acc = jax.tree.map(lambda x: _RK4_B[0] * x, k)
        di = d0
        for a, b in zip(_RK4_A, _RK4_B[1:], strict=True):
            kq = manifold.retract(layout, d.qpos, a * h * k[0])
            kv = d.qvel + a * h * k[1]
            ka = d.act + a * h * k[2]
            di = forward_unchecked(m, d0.replace(qpos=kq, qvel=kv, act=ka, time=d.time + a * h), self.cfg)
            k = (kv, di.qacc, di.act_dot)
            acc = jax.tree.map(lambda s, x, b=b: s + b * x, acc, k)
        base = di.replace(qpos=d.qpos, qvel=d.qvel, act=d.act, time=d.time)
        return _mjx.mjx_advance(m, base, acc[2], acc[1], acc[0])
