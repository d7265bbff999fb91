"""Where a gradient's small kernels come from: the slicing operations of one evaluation's derivative, by the MJX helper that writes them.

    python -m experiments.vjp_sources [--set KEY=VALUE ...]

``benchmark_vjp`` counts the XLA kernels (thunks) one reverse-mode evaluation of MJX's forward
dynamics executes on the cube toss, and about a third of them are pads, the transposes of slices.
This module linearises the same evaluation (``diffmjx.physics.dynamics.forward``, qacc only, the
toss's first state with at least four loaded constraint rows) with ``jax.linearize`` and counts every
``slice``, ``squeeze``, ``gather`` and ``concatenate`` of the linear (tangent) program, the one
reverse mode transposes (nested jaxprs included), attributed to the innermost MJX or DiffMJX
function that wrote it and the two functions that called it. A slice only the forward computes
(where a derivative rule replaced its stage's derivative) is not counted. A derivative rule for a
stage pays off where its derivative is many scalar slices of small vectors (quaternions, 3x3
matrices): those are the lines at the top of the table.

Writes ``docs/results/vjp_sources.csv`` (one row per primitive and call chain: count). Tracing
only: seconds.
"""

from __future__ import annotations

import collections
from pathlib import Path

import jax
import jax.numpy as jnp

from diffmjx.physics import dynamics
from experiments import common
from experiments.benchmark_vjp import DEFAULT_PRESET, states

PRIMITIVES = ("slice", "squeeze", "gather", "concatenate")


def _chain(eqn, depth: int = 3) -> str:
    """``file:function <- file:function <- ...``: the innermost project frames that wrote ``eqn``."""
    tb = eqn.source_info.traceback
    names: list[str] = []
    for frame in [] if tb is None else tb.frames:
        path = frame.file_name
        if ("mujoco/mjx" in path or "diffmjx" in path) and "_src/numpy" not in path:
            name = f"{Path(path).name}:{frame.function_name}"
            if not names or names[-1] != name:
                names.append(name)
    return " <- ".join(names[:depth]) or "(no MJX or DiffMJX frame: JAX's own)"


def _subjaxprs(eqn):
    for param in eqn.params.values():
        for sub in param if isinstance(param, (list, tuple)) else [param]:
            if hasattr(sub, "eqns"):
                yield sub
            elif hasattr(sub, "jaxpr"):
                yield sub.jaxpr if hasattr(sub.jaxpr, "eqns") else sub.jaxpr.jaxpr


def count(jaxpr) -> collections.Counter:
    """(primitive, call chain) -> number of equations, over ``jaxpr`` and every jaxpr nested in it."""
    out: collections.Counter = collections.Counter()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in PRIMITIVES:
            out[(eqn.primitive.name, _chain(eqn))] += 1
        for sub in _subjaxprs(eqn):
            out.update(count(sub))
    return out


def _live(jaxpr):
    """``jaxpr`` without the equations no output depends on, as the compiled program drops them (MJX
    stages whose per-body results DiffMJX computes again still trace them); unchanged where this JAX
    has no dead-code pass to call."""
    try:
        from jax._src.interpreters import partial_eval as pe

        return pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))[0]
    except (ImportError, AttributeError):  # pragma: no cover - a JAX without it
        return jaxpr


def run(cfg) -> list[dict]:
    mj, mx = common.load("cube_toss")
    d0 = common.mjx.make_data(mx)
    q, v = (jnp.asarray(x) for x in states(mj)["contact"])
    _, tangent = jax.linearize(lambda q, v: dynamics.forward(mx, d0.replace(qpos=q, qvel=v), cfg).qacc, q, v)
    traced = jax.make_jaxpr(tangent)(q, v)
    tally = count(_live(traced.jaxpr))
    return [{"primitive": p, "count": n, "written_by": chain} for (p, chain), n in tally.most_common()]


def main(argv=None) -> None:
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    rows = run(cfg)
    common.write_csv(Path(args.out) / "vjp_sources.csv", rows)
    for r in rows[:15]:
        print(f"{r['count']:5d} {r['primitive']:12s} {r['written_by']}")


if __name__ == "__main__":
    main()
