r"""The vector field term of one control period: MJX forward dynamics as a Diffrax ``ODETerm``.

Diffrax carries only the model's and the data's *traced* forward-pass inputs, as a flat list of
arrays (:func:`traced_args`); the term rebuilds ``(m, d)`` from them at every stage and evaluates
:func:`diffmjx.physics.dynamics.vector_field`. With kink control the ODE state gains a sentinel whose rate
is the constraint state (:mod:`diffmjx.integration.stepsize`).
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp

from diffmjx import _mjx
from diffmjx.config import Config
from diffmjx.integration.stepsize import BracketedSentinel
from diffmjx.physics import collision, solver
from diffmjx.physics.dynamics import State, vector_field

__all__ = ["DATA_INPUTS", "STATE_INPUTS", "PeriodTerm", "traced_args"]

# Fields of mjx.Data that forward dynamics reads; everything else it recomputes.
DATA_INPUTS = (
    "qpos",
    "qvel",
    "act",
    "ctrl",
    "qacc_warmstart",
    "qfrc_applied",
    "xfrc_applied",
    "eq_active",
    "mocap_pos",
    "mocap_quat",
    "userdata",
    "time",
)
STATE_INPUTS = ("qvel", "act", "time")  # data inputs the vector field replaces by the state and t


def traced_args(tree):
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


def _code(m, d):
    """The constraint state, one number per row (as MJX classifies it for pyramidal cones)."""
    state = solver.constraint_state(m, d, d.qacc)
    return jax.lax.stop_gradient(state.active + 2.0 * state.linear_sign)


class PeriodTerm:
    """One period's vector field over ``(xi, qvel, act)`` from data ``d``, for ``diffeqsolve``.

    Attributes:
        args: the traced inputs (model leaves and data inputs), Diffrax's ``args``.
        nefc: the constraint rows the vector field's data have (0: no contact, no kinks).
        pyramidal: whether the rows' constraint state is MJX's pyramidal one (kinks can be located).
    """

    def __init__(self, m, d, cfg: Config, layout):
        # Diffrax carries only the model and the forward-pass *inputs* of d as flat lists of
        # arrays: the adjoint state then stays small, and MJX pytrees' empty-tuple nodes (which the
        # backsolve adjoint's state handling cannot carry) never reach it.
        self._inputs = {k: getattr(d, k) for k in DATA_INPUTS}
        self._tree = (m, self._inputs)
        self.args, self._unpack = traced_args(self._tree)
        self._cfg, self._layout = cfg, layout
        self.nefc = _mjx.efc(collision.allocate(m, d, cfg.collision)).J.shape[0]
        self.pyramidal = self.nefc > 0 and m.opt.cone == _mjx.ConeType.PYRAMIDAL

    @property
    def cfg(self) -> Config:
        return self._cfg

    @property
    def layout(self):
        return self._layout

    def data(self, args):
        """``(m, d0)``: the model and the period's data (its forward-pass inputs) from ``args``."""
        m, inputs = self._unpack(args)
        return m, collision.allocate(m, _mjx.make_data(m), self._cfg.collision).replace(**inputs)

    def evaluate(self, t, y, args):
        """``(m, (dy, d))``: the model and the vector field with its data at state ``y``."""
        m, d0 = self.data(args)
        return m, vector_field(m, d0, y, t, self._layout, self._cfg)

    def state_code(self, t, y, args):
        """The constraint state at state ``y`` (where the interpolated and sensitivity modes locate kinks)."""
        m, (_, d) = self.evaluate(t, y, args)
        return _code(m, d)

    def term(self, kinks: bool) -> diffrax.ODETerm:
        """The ``ODETerm``; with ``kinks`` its state is ``(State, sentinel)``, the sentinel a
        :class:`diffmjx.integration.stepsize.BracketedSentinel` whose code's rate is the constraint
        state (its bracket's rate zero: the solver writes the bracket)."""

        def vf(t, y, args):
            if not kinks:
                return self.evaluate(t, y, args)[1][0]
            m, (dy, d) = self.evaluate(t, y[0], args)
            return dy, BracketedSentinel(_code(m, d), jnp.zeros(2, dy.qvel.dtype))  # the kink sentinel's rate

        # One jitted call per vector-field evaluation: JAX's autodiff passes (linearize, transpose,
        # the checkpointed loops' symbolic-zero resolution) then work on a cached inner jaxpr instead
        # of re-walking MJX's whole forward dynamics each time, which roughly halves the backward
        # trace time (docs/results/benchmark_jit*.csv); XLA inlines the call, so the program's speed
        # is unchanged.
        return diffrax.ODETerm(jax.jit(vf))

    def y0(self, m, d, kinks: bool):
        """The period's initial ODE state: ``xi = 0`` (positions are retracted at the end)."""
        y0 = State(jnp.zeros(m.nv, d.qvel.dtype), d.qvel, d.act)
        sentinel = BracketedSentinel(jnp.zeros(self.nefc, d.qvel.dtype), jnp.zeros(2, d.qvel.dtype))
        return (y0, sentinel) if kinks else y0

    def ignored(self) -> tuple:
        """Per traced arg: whether it is a data input the vector field replaces by the state and t."""
        mask = jax.tree.leaves(
            (jax.tree.map(lambda _: False, self._tree[0]), {k: k in STATE_INPUTS for k in self._inputs})
        )
        return tuple(
            f for f, x in zip(mask, jax.tree.leaves(self._tree), strict=True) if isinstance(x, jax.core.Tracer)
        )
