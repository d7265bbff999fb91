"""Where backward run time goes: forward and VJP cost of each stage of one vector-field evaluation.

    python -m experiments.benchmark_vjp [--set KEY=VALUE ...]

The cube toss's backward pass is several times its forward pass with the checkpoint adjoint
(docs/results/benchmark_pareto.csv), against a target of 4x. Almost all of it is reverse-mode AD through MJX forward
dynamics, once per Runge-Kutta stage. This module splits one evaluation of
``diffmjx.physics.dynamics.forward`` into groups of MJX's pipeline stages and times, for the first k groups
(k = 1..8), the forward and the gradient with respect to (qpos, qvel) of a scalar of everything they
output. A group's cost is the difference to the k-1 prefix. Each figure is the fastest of 20 repeats
of one compiled program that runs 200 evaluations in a ``fori_loop`` (so the dispatch of a call is
not counted), in microseconds per evaluation: on a shared machine the minimum is the most repeatable
statistic (docs/speed.md quotes how far medians moved between runs).

Two states of the toss (MuJoCo C rollout): "free flight" (the initial state, no contact) and
"contact" (the first state where at least 4 constraint rows carry force), each with the unrolled and
the implicit solver gradient, and, measured whole only, the unrolled solve with its iterations
stored instead of rematerialised (``solver.solve(..., remat_iterations=False)``, the code before
that change) and the implicit one with MJX's own ``kinematics``, ``com_pos`` and ``fwd_velocity``
instead of :mod:`diffmjx.physics.smooth`'s (the code before those stages' rules): the same run then
shows what each change bought. Each whole evaluation is also timed in forward mode: the JVP of
the accelerations along one tangent of (qpos, qvel), as ``linearize`` and system identification
push tangents. The whole evaluations of a state are timed in alternation (15 rounds, three
calls of each program per round, the fastest call kept), so that they compare within one stretch
of the machine's load. With JAX's profiler
(``diffmjx.profiling.thunks``), the module also counts the XLA thunks (kernels) one gradient
evaluation executes, by kind: on a 6-dof model most thunks are tiny, so their number is a large part
of what the backward pass pays for. Row "whole (qacc only)" is the evaluation as the integrator
differentiates it (a scalar of the accelerations only); its gradient is the one whose thunks are
counted.
Writes docs/results/benchmark_vjp.csv, benchmark_vjp_thunks.csv and benchmark_vjp.png (about
4 min). Run nothing else beside it.

``--model myohand`` measures whole evaluations only, on MyoSuite's MyoHand of the baoding task
(:func:`diffmjx.scenes.myo.baoding`: 35 dofs, 39 muscles with their activations as state, 41
tendons) in two states: the episode start (the two balls just above the palm, no contact) and the
first state of a MuJoCo C rollout from there with no control where at least 4 constraint rows carry
force (the balls settled in the palm). For the cases of :data:`CASES_MYOHAND` it times the forward,
gradient and JVP of the accelerations and activation rates with respect to (qpos, qvel, act), in
alternation as above, and counts the thunks each runs. Writes
docs/results/benchmark_vjp_myohand.csv (about 17 min).
"""

from __future__ import annotations

import collections
import gc
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx import _mjx
from diffmjx.physics import dynamics
from diffmjx.profiling import thunks
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "speed.yaml"
EVALS = 200  # evaluations per compiled call
REPEATS = 20
GROUPS = (  # (group, MJX pipeline stages in it)
    ("kinematics, com", ("kinematics", "com_pos", "camlight", "tendon")),
    ("mass matrix", ("crb", "tendon_armature", "factor_m")),
    ("collision", ("collision",)),
    ("make_constraint", ("make_constraint",)),
    ("velocity, actuation", ("transmission", "sensor_pos", "fwd_velocity", "sensor_vel", "fwd_actuation")),
    ("fwd_acceleration", ("fwd_acceleration",)),
    ("impedance floor", ("impedance_floor",)),
    ("constraint solve", ("solve", "sensor_acc")),
)
ALL_STAGES = [n for _, names in GROUPS for n in names]
THUNK_KINDS = {  # thunk name prefix -> kind reported in the thunk table
    "bitcast_dynamic-update-slice_fusion": "stack a loop residual",
    "dynamic-slice_bitcast_fusion": "read a loop residual",
    "copy": "copy",
    "bitcast_pad_fusion": "pad (transpose of a slice)",
    "wrapped_scatter": "scatter (transpose of a gather)",
}


# (row label, solver.gradient, rematerialised unrolled iterations, MJX's own smooth stages);
# the last two are measured whole only: the unrolled solve as it was before its iterations were
# rematerialised, and the implicit one with MJX's kinematics, com_pos and fwd_velocity instead of
# diffmjx.physics.smooth's (the code before those stages' derivative rules).
CASES = (
    ("unroll", "unroll", True, False),
    ("implicit", "implicit", True, False),
    ("unroll, iterations stored", "unroll", False, False),
    ("implicit, MJX's stages", "implicit", True, True),
)


# MyoHand: (row label, solver.gradient, MJX's own smooth stages)
CASES_MYOHAND = (
    ("implicit", "implicit", False),
    ("implicit, MJX's stages", "implicit", True),
)


def stages(cfg: diffmjx.Config, remat_iterations: bool = True, mjx_kinematics: bool = False) -> dict:
    """name -> fn(m, d) -> d for every stage of ``dynamics.forward`` (no smoothing, no CFD); with
    ``mjx_kinematics``, MJX's own ``kinematics``, ``com_pos`` and ``fwd_velocity`` in place of DiffMJX's."""
    out = dict(dynamics.stages(cfg, remat_iterations))
    out.setdefault("impedance_floor", lambda m, d: d)  # forward skips the floor at MuJoCo's own 1e-4
    if mjx_kinematics:
        out.update(kinematics=_mjx.kinematics, com_pos=_mjx.com_pos, fwd_velocity=_mjx.fwd_velocity)
    return out


def states(mj) -> dict:
    """(qpos, qvel) of the toss's initial state and of its first state with >= 4 loaded rows."""
    md = mujoco.MjData(mj)
    md.qpos[2], md.qvel[1], md.qvel[2] = common.CUBE_TOSS["qz0"], common.CUBE_TOSS["vy0"], common.CUBE_TOSS["u0"]
    out = {"free flight": (md.qpos.copy(), md.qvel.copy())}
    while (md.efc_force != 0).sum() < 4:
        mujoco.mj_step(mj, md)
        mujoco.mj_forward(mj, md)
        if md.time > 1.0:
            raise RuntimeError("the cube toss never came into contact")
    out["contact"] = (md.qpos.copy(), md.qvel.copy())
    return out


def _scalar(d) -> jax.Array:
    return sum(jnp.sum(jnp.sin(x)) for x in jax.tree_util.tree_leaves(d) if jnp.issubdtype(x.dtype, jnp.floating))


def _repeated(g):
    """``g(q, v)`` evaluated EVALS times in one program, at inputs that differ by rounding noise."""

    def run(q, v):
        zero = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(g, q, v))
        body = lambda i, acc: jax.tree_util.tree_map(jnp.add, acc, g(q + 1e-12 * i, v))
        return jax.lax.fori_loop(0, EVALS, body, zero)

    return jax.jit(run)


def microseconds(g, q, v) -> float:
    """Cost of one evaluation of ``g(q, v)`` in microseconds (fastest of REPEATS calls)."""
    f = _repeated(g)
    jax.block_until_ready(f(q, v))
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        jax.block_until_ready(f(q, v))
        times.append(time.perf_counter() - t)
    return min(times) / EVALS * 1e6


def interleaved(gs: list, q, v, rounds: int = 15, calls: int = 3) -> list[float]:
    """Cost of one evaluation of each ``g(q, v)`` in microseconds: the fastest call of each, the
    programs called in turn (``calls`` each) for ``rounds`` rounds."""
    fs = [_repeated(g) for g in gs]
    for f in fs:
        jax.block_until_ready(f(q, v))
    best = [float("inf")] * len(fs)
    for _ in range(rounds):
        for i, f in enumerate(fs):
            for _ in range(calls):
                t = time.perf_counter()
                jax.block_until_ready(f(q, v))
                best[i] = min(best[i], time.perf_counter() - t)
    return [b / EVALS * 1e6 for b in best]


def run(cfg: diffmjx.Config, out: Path) -> tuple[list[dict], list[dict]]:
    mj, mx = common.load("cube_toss")
    d0 = common.mjx.make_data(mx)
    rows, thunk_rows = [], []
    bar = tqdm(total=2 * (2 * len(GROUPS) + len(CASES)), desc="benchmark_vjp", unit="program")
    for state_name, (qpos, qvel) in states(mj).items():
        q0, v0 = jnp.asarray(qpos), jnp.asarray(qvel)
        whole = {}
        for label, gradient, remat, mjx_kin in CASES:
            c = cfg.override(f"solver.gradient={gradient}")
            table = stages(c, remat, mjx_kin)

            def prefix(q, v, names, table=table):  # bound: the whole evaluations are timed after the loop
                d = d0.replace(qpos=q, qvel=v)
                for name in names:
                    d = table[name](mx, d)
                return d

            # The composed stages must be DiffMJX's forward dynamics.
            ref = jax.jit(lambda q, v, c=c: dynamics.forward(mx, d0.replace(qpos=q, qvel=v), c).qacc)
            mine = jax.jit(lambda q, v, prefix=prefix: prefix(q, v, ALL_STAGES).qacc)
            tol = 1e-9 if mjx_kin else 1e-12  # MJX's kinematics: the same values to rounding
            np.testing.assert_allclose(mine(q0, v0), ref(q0, v0), rtol=tol, atol=tol)
            if remat and not mjx_kin:  # stage by stage (the other cases are measured whole only)
                names, prev_f, prev_b = [], 0.0, 0.0
                for group, group_names in GROUPS:
                    names = [*names, *group_names]
                    fwd = lambda q, v, names=names, prefix=prefix: _scalar(prefix(q, v, names))
                    f_us, b_us = microseconds(fwd, q0, v0), microseconds(jax.grad(fwd, argnums=(0, 1)), q0, v0)
                    rows.append(
                        dict(
                            state=state_name,
                            gradient=label,
                            group=group,
                            stages=" ".join(group_names),
                            forward_us=f_us,
                            gradient_us=b_us,
                            forward_added_us=f_us - prev_f,
                            gradient_added_us=b_us - prev_b,
                        )
                    )
                    prev_f, prev_b = f_us, b_us
                    bar.update()
            # The whole evaluation as the integrator uses it: the gradient of the accelerations only.
            acc = lambda q, v, prefix=prefix: jnp.sum(jnp.sin(prefix(q, v, ALL_STAGES).qacc))
            grad = jax.grad(acc, argnums=(0, 1))
            tq, tv = jnp.sin(jnp.arange(1.0, q0.size + 1)), jnp.cos(jnp.arange(1.0, v0.size + 1))  # one tangent
            qacc = lambda q, v, prefix=prefix: prefix(q, v, ALL_STAGES).qacc
            jvp = lambda q, v, qacc=qacc, t=(tq, tv): jnp.sum(jnp.sin(jax.jvp(qacc, (q, v), t)[1]))
            whole[label] = (acc, grad, jvp)
            fc, bc = thunks(acc, q0, v0), thunks(grad, q0, v0)
            kinds = collections.Counter()
            for name, n in bc.items():
                kinds[next((k for p, k in THUNK_KINDS.items() if name.startswith(p)), "other")] += n
            thunk_rows.append(
                dict(
                    state=state_name,
                    gradient=label,
                    forward_thunks=sum(fc.values()),
                    gradient_thunks=sum(bc.values()),
                    **{f"gradient_{k}": kinds[k] for k in [*THUNK_KINDS.values(), "other"]},
                )
            )
            bar.update()
        # The whole evaluations are timed together, in alternation, so that the cases compare within one
        # stretch of the machine's load rather than minutes apart.
        times = interleaved([g for fns in whole.values() for g in fns], q0, v0)
        for i, label in enumerate(whole):
            rows.append(
                dict(
                    state=state_name,
                    gradient=label,
                    group="whole (qacc only)",
                    stages="dynamics.forward",
                    forward_us=times[3 * i],
                    gradient_us=times[3 * i + 1],
                    forward_added_us=float("nan"),
                    gradient_added_us=float("nan"),
                    jvp_us=times[3 * i + 2],
                )
            )
    bar.close()
    rounded = lambda rs: [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in rs]
    common.write_csv(out / "benchmark_vjp.csv", rounded(rows))
    common.write_csv(out / "benchmark_vjp_thunks.csv", rounded(thunk_rows))
    _plot(rows, thunk_rows, out / "benchmark_vjp.png")
    return rows, thunk_rows


def _plot(rows: list[dict], thunk_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [(s, g) for s in ("free flight", "contact") for g in ("unroll", "implicit")]
    groups = [g for g, _ in GROUPS]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw=dict(width_ratios=[1.3, 1]))
    for (s, g), color in zip(cases, ("C0", "C1", "C3", "C2"), strict=True):
        sel = {r["group"]: r for r in rows if r["state"] == s and r["gradient"] == g}
        x = np.arange(len(groups))
        left.plot(x, [sel[k]["gradient_us"] for k in groups], "o-", color=color, label=f"{s}, {g}: gradient")
        left.plot(x, [sel[k]["forward_us"] for k in groups], ".:", color=color, label=f"{s}, {g}: forward")
    left.set_xticks(range(len(groups)), groups, rotation=35, ha="right", fontsize=8)
    left.set_ylabel("us per evaluation, stages up to here")
    left.set_title("cost of the pipeline up to each stage (fastest of 20)", fontsize=9)
    left.legend(fontsize=6.5, ncol=2)
    kinds = [*THUNK_KINDS.values(), "other"]
    colors = plt.get_cmap("tab10")(np.arange(len(kinds)))
    labels = []
    for i, r in enumerate(thunk_rows):
        bottom = 0.0
        for kind, color in zip(kinds, colors, strict=True):
            n = r[f"gradient_{kind}"]
            right.bar(i, n, bottom=bottom, color=color, label=kind if i == 0 else None)
            bottom += n
        right.plot(
            [i - 0.4, i + 0.4], [r["forward_thunks"]] * 2, "k-", lw=2, label="forward, all kinds" if i == 0 else None
        )
        right.text(i, bottom + 60, f"{bottom / r['forward_thunks']:.1f}x", ha="center", fontsize=8)
        case = {"unroll, iterations stored": "unroll,\nstored", "implicit, MJX's stages": "implicit,\nMJX's stages"}
        labels.append(f"{r['state']}\n{case.get(r['gradient'], r['gradient'])}")
    right.set_xticks(range(len(thunk_rows)), labels, fontsize=6.5)
    right.set_ylim(0, 1.1 * max(r["gradient_thunks"] for r in thunk_rows) + 60)
    right.set_ylabel("XLA thunks per evaluation")
    right.set_title("kernels one gradient evaluation runs, by kind", fontsize=9)
    right.legend(fontsize=6.5)
    fig.suptitle("Cube toss: forward vs reverse mode of one MJX forward-dynamics evaluation (2-core CPU)", fontsize=10)
    common.save_figure(fig, path, dpi=130)


def _release() -> None:
    """Drop the compiled programs: a dozen of MyoHand's exhaust the process's memory maps (LLVM's
    "Cannot allocate memory")."""
    jax.clear_caches()
    gc.collect()


def run_myohand(cfg: diffmjx.Config, out: Path) -> list[dict]:
    """Whole evaluations on MyoHand (the module docstring's ``--model myohand``)."""
    from diffmjx.scenes import myo

    mj, mx, start, _ = myo.baoding(cfd=False)
    md = mujoco.MjData(mj)
    md.qpos[:], md.qvel[:], md.act[:] = start.qpos, start.qvel, start.act
    mujoco.mj_forward(mj, md)
    at_start = (md.qpos.copy(), md.qvel.copy(), md.act.copy(), int((md.efc_force != 0).sum()))
    while (md.efc_force != 0).sum() < 4:
        mujoco.mj_step(mj, md)
        mujoco.mj_forward(mj, md)
        if md.time > 1.0:
            raise RuntimeError("the balls never came to rest in the palm")
    in_contact = (md.qpos.copy(), md.qvel.copy(), md.act.copy(), int((md.efc_force != 0).sum()))
    rows = []
    bar = tqdm(total=2 * len(CASES_MYOHAND), desc="benchmark_vjp myohand", unit="case")
    for state_name, (qpos, qvel, act, loaded) in (("episode start", at_start), ("balls in the palm", in_contact)):
        d0 = start.replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel), act=jnp.asarray(act))
        q0, va0 = d0.qpos, jnp.concatenate([d0.qvel, d0.act])
        whole, thunk_counts = {}, {}
        for label, gradient, mjx_kin in CASES_MYOHAND:
            c = cfg.override(f"solver.gradient={gradient}")
            table = stages(c, True, mjx_kin)

            def rates(q, va, table=table, d0=d0):  # (qacc, act_dot) at (qpos, qvel, act)
                d = d0.replace(qpos=q, qvel=va[: mx.nv], act=va[mx.nv :])
                for name in ALL_STAGES:
                    d = table[name](mx, d)
                return jnp.concatenate([d.qacc, d.act_dot])

            at = lambda q, va, c=c, d0=d0: dynamics.forward(
                mx, d0.replace(qpos=q, qvel=va[: mx.nv], act=va[mx.nv :]), c
            )
            r = jax.jit(at)(q0, va0)  # the composed stages are DiffMJX's forward dynamics, to rounding
            np.testing.assert_allclose(rates(q0, va0), jnp.concatenate([r.qacc, r.act_dot]), rtol=1e-9, atol=1e-9)
            acc = lambda q, va, rates=rates: jnp.sum(jnp.sin(rates(q, va)))
            grad = jax.grad(acc, argnums=(0, 1))
            tq, tva = jnp.sin(jnp.arange(1.0, q0.size + 1)), jnp.cos(jnp.arange(1.0, va0.size + 1))
            jvp = lambda q, va, rates=rates, t=(tq, tva): jnp.sum(jnp.sin(jax.jvp(rates, (q, va), t)[1]))
            whole[label] = (acc, grad, jvp)
            thunk_counts[label] = (sum(thunks(acc, q0, va0).values()), sum(thunks(grad, q0, va0).values()))
            _release()
            bar.update()
        times = interleaved([g for fns in whole.values() for g in fns], q0, va0, rounds=5, calls=2)
        _release()
        rows += [
            dict(
                model="myohand",
                state=state_name,
                loaded_rows=loaded,
                gradient=label,
                forward_us=round(times[3 * i], 1),
                gradient_us=round(times[3 * i + 1], 1),
                jvp_us=round(times[3 * i + 2], 1),
                forward_thunks=thunk_counts[label][0],
                gradient_thunks=thunk_counts[label][1],
            )
            for i, label in enumerate(whole)
        ]
    bar.close()
    common.write_csv(out / "benchmark_vjp_myohand.csv", rows)
    return rows


def main(argv=None):
    extra = (("--model", dict(choices=("cube_toss", "myohand"), default="cube_toss", help="the model measured")),)
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv, extra)
    if args.model == "myohand":
        for r in run_myohand(cfg, args.out):
            print(r)
        return
    rows, thunk_rows = run(cfg, args.out)
    for r in rows:
        print(f"{r['state']:12s} {r['gradient']:9s} {r['group']:20s} fwd {r['forward_us']:7.1f} us  "
              f"grad {r['gradient_us']:7.1f} us  (+{r['gradient_added_us']:6.1f})")  # fmt: skip
    for r in thunk_rows:
        print(r)


if __name__ == "__main__":
    main()
