"""Scaling benchmarks (paper Fig. 20): gradient memory against horizon, and vmap of uneven environments.

    python -m experiments.benchmark_scaling [--quick] [--set KEY=VALUE ...]

1. **Memory against horizon.** The cube toss (preset ``speed.yaml``) run for 1 s to 10 s; for
   each horizon the backward program (``jax.grad`` of the final qpos[1]) is compiled cold and XLA's
   memory estimate (temporaries + arguments + outputs) is read from it, with ``integrator.remat``
   off and on, beside the backward JIT and run times and the gradient itself (remat must not
   change it).
2. **vmap of 20 environments.** A ball on a slide joint without gravity (``sphere_drop``): 19
   environments float and never touch anything, one is thrown into the floor at 5 m/s. Wall time
   of the vmapped batch (forward, and value-and-gradient of the final height with respect to the
   throw speed) against the slowest environment run alone, and each environment's step-size trace.

Writes docs/results/benchmark_scaling_memory.{csv,png} and benchmark_scaling_vmap.{csv,png}.
JIT times are cold compiles (the persistent cache is off here); run nothing else beside it.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import diffmjx
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "speed.yaml"
HORIZONS_S = (1, 2, 5, 10)
N_ENVS = 20
VIOLENT = 7  # index of the environment thrown into the floor
THROW_SPEED = 5.0
VMAP_PERIODS = 100


def memory_vs_horizon(cfg: diffmjx.Config, quick: bool) -> list[dict]:
    _, mx = common.load("cube_toss")
    u0 = common.CUBE_TOSS["u0"]
    rows = []
    cases = [(s, r) for r in (False, True) for s in ((1, 10) if quick else HORIZONS_S)]
    for seconds, remat in (bar := tqdm(cases, desc="memory vs horizon")):
        bar.set_postfix_str(f"{seconds} s, remat {remat}")
        c = cfg.override(f"integrator.remat={str(remat).lower()}")
        horizon = round(seconds / float(mx.opt.timestep))
        grad = jax.jit(jax.grad(common.cube_toss_loss(mx, c, horizon=horizon)))
        t = time.perf_counter()
        compiled = grad.lower(u0).compile()
        jit_s = time.perf_counter() - t
        g = float(jax.block_until_ready(compiled(u0)))
        rows.append(
            dict(
                horizon_s=seconds,
                periods=horizon,
                remat=remat,
                backward_memory_mb=common.program_memory_mb(compiled),
                backward_jit_s=jit_s,
                backward_run_s=common.median_time(compiled, u0, repeats=2 if quick else 3),
                grad=g,
            )
        )
    return rows


def _drop_scene():
    _, mx = common.load("sphere_drop")
    heights = np.linspace(0.3, 1.0, N_ENVS)
    speeds = np.zeros(N_ENVS)
    speeds[VIOLENT] = THROW_SPEED
    heights[VIOLENT] = 0.3
    return mx, jnp.asarray(heights), jnp.asarray(speeds)


def vmap_uneven(cfg: diffmjx.Config, quick: bool) -> tuple[list[dict], dict, np.ndarray]:
    mx, heights, speeds = _drop_scene()
    ctrls = jnp.zeros((VMAP_PERIODS, 0))

    def run(h, v):
        d = common.mjx.make_data(mx)
        d = d.replace(qpos=d.qpos.at[0].set(h), qvel=d.qvel.at[0].set(-v))
        d, traj = diffmjx.rollout(mx, d, ctrls, cfg)
        return d.qpos[0], traj.stats.accepted

    def final_height(h, v):
        return run(h, v)[0]

    fns = {"forward": run, "gradient": jax.value_and_grad(final_height, argnums=1)}
    rows, summary, traces = [], {}, None
    repeats = 2 if quick else 3
    for name, fn in tqdm(fns.items(), desc="vmap"):
        single = jax.jit(fn)
        batch = jax.jit(jax.vmap(fn))
        t = time.perf_counter()
        single.lower(heights[0], speeds[0]).compile()
        single_jit = time.perf_counter() - t
        t = time.perf_counter()
        batch.lower(heights, speeds).compile()
        batch_jit = time.perf_counter() - t
        alone = [common.median_time(single, heights[i], speeds[i], repeats=repeats) for i in range(N_ENVS)]
        together = common.median_time(batch, heights, speeds, repeats=repeats)
        if name == "forward":
            traces = np.asarray(batch(heights, speeds)[1])  # (N_ENVS, periods) accepted steps
        for i in range(N_ENVS):
            rows.append(
                dict(
                    mode=name,
                    env=i,
                    height=float(heights[i]),
                    speed=float(speeds[i]),
                    alone_run_s=alone[i],
                    accepted_steps=int(traces[i].sum()),
                )
            )
        summary[name] = dict(
            batch_run_s=together,
            slowest_alone_s=max(alone),
            sum_alone_s=sum(alone),
            ratio=together / max(alone),
            single_jit_s=single_jit,
            batch_jit_s=batch_jit,
        )
    return rows, summary, traces


def _plot_memory(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for remat, style in ((False, "o-"), (True, "s--")):
        sel = [r for r in rows if r["remat"] == remat]
        label = f"integrator.remat={str(remat).lower()}"
        axes[0].plot([r["horizon_s"] for r in sel], [r["backward_memory_mb"] for r in sel], style, label=label)
        axes[1].plot([r["horizon_s"] for r in sel], [r["backward_run_s"] for r in sel], style, label=label)
    axes[0].set(xlabel="horizon (s)", ylabel="backward memory, XLA estimate (MB)", yscale="log")
    axes[1].set(xlabel="horizon (s)", ylabel="backward run time (s)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Cube toss: gradient memory and time against horizon (recursive checkpointing)")
    common.save_figure(fig, path)


def _plot_vmap(summary, traces, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    period = 0.01
    t = np.arange(traces.shape[1]) * period
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw=dict(width_ratios=(2, 1)))
    for i, tr in enumerate(traces):
        style = (
            dict(color="tab:red", lw=2, label=f"env {i}: thrown at {THROW_SPEED} m/s")
            if i == VIOLENT
            else dict(color="0.6", lw=0.8, label="19 floating envs" if i == 0 else None)
        )
        axes[0].step(t, period / np.maximum(tr, 1), where="post", **style)
    axes[0].set(yscale="log", xlabel="time (s)", ylabel="mean accepted step in the period (s)")
    axes[0].legend(fontsize=8)
    names = ["forward", "gradient"]
    x = np.arange(len(names))
    axes[1].bar(x - 0.2, [summary[n]["slowest_alone_s"] for n in names], 0.4, label="slowest env alone")
    axes[1].bar(x + 0.2, [summary[n]["batch_run_s"] for n in names], 0.4, label=f"vmap of {N_ENVS}")
    axes[1].set(xticks=x, xticklabels=names, ylabel="run time (s)")
    axes[1].legend(fontsize=8)
    fig.suptitle("vmap of uneven environments: each takes its own steps; the batch runs in lockstep")
    common.save_figure(fig, path)


def run(cfg: diffmjx.Config, out: Path, quick: bool = False) -> dict:
    jax.config.update("jax_enable_compilation_cache", False)  # JIT times are cold compiles
    out.mkdir(parents=True, exist_ok=True)
    mem = memory_vs_horizon(cfg, quick)
    common.write_csv(out / "benchmark_scaling_memory.csv", mem)
    _plot_memory(mem, out / "benchmark_scaling_memory.png")
    rows, summary, traces = vmap_uneven(cfg, quick)
    common.write_csv(out / "benchmark_scaling_vmap.csv", rows)
    common.write_csv(
        out / "benchmark_scaling_vmap_summary.csv",
        [dict(mode=k, **v) for k, v in summary.items()],
    )
    _plot_vmap(summary, traces, out / "benchmark_scaling_vmap.png")
    print(f"\n{'horizon':>8} {'remat':>6} {'memory MB':>10} {'bwd JIT s':>10} {'bwd run s':>10} {'grad':>12}")
    for r in mem:
        print(
            f"{r['horizon_s']:>7}s {r['remat']!s:>6} {r['backward_memory_mb']:10.3f} {r['backward_jit_s']:10.1f} "
            f"{r['backward_run_s']:10.3f} {r['grad']:12.8f}"
        )
    for k in ("forward", "gradient"):
        s = summary[k]
        print(
            f"vmap {k}: batch {s['batch_run_s']:.3f} s, slowest alone {s['slowest_alone_s']:.3f} s "
            f"(ratio {s['ratio']:.2f}), all 20 alone {s['sum_alone_s']:.3f} s"
        )
    return dict(memory=mem, vmap=rows, summary=summary)


def main(argv=None):
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    run(cfg, args.out, args.quick)


if __name__ == "__main__":
    main()
