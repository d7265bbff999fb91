"""One plan, two planners: how many iterations and how much time iLQR and Adam need (issue 58 item 2).

    python -m experiments.ilqr_vs_adam [--tasks push baoding] [--adam-iterations 40] [--ilqr-iterations 4]

From the same start and the same first plan (all controls zero, clipped to the control ranges),
each planner improves one plan for a number of iterations; after every iteration the plan's cost
(for Adam the lowest-cost iterate so far, as the planner executes it; for iLQR the accepted plan,
which is always its cheapest) and the iteration's wall time are recorded. Each iteration is the
planner's own compiled step (:class:`diffmjx.mpc.GradientMethod`, :class:`diffmjx.mpc.ILQRMethod`),
as :func:`diffmjx.mpc.closed_loop` runs it, so the times are those of a plan step.

Tasks, with contacts from distance for both planners:

* ``push`` (``diffmjx/scenes/push.xml``): the contact study's box pushing (``experiments.contact_mpc``),
  first start and target, horizon 16 periods of 50 ms, Adam's learning rate 0.2;
* ``baoding``: the MyoHand ball swap from MyoSuite's reset pose (``diffmjx.scenes.myo.baoding``),
  the quick preset's horizon (16 periods of 2.5 ms) and learning rate (0.05), App. E.3's CFD.

Writes ``docs/results/ilqr_vs_adam.csv`` (cost after each iteration), ``ilqr_vs_adam_summary.csv``
(start and final cost, the first iLQR iteration within 1 % of Adam's final cost, measured as a
share of Adam's descent from the start; seconds per iteration; JIT) and ``ilqr_vs_adam.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx import mpc, scenes
from experiments import common


def _push():
    from experiments import contact_mpc as cm

    task = cm.TASKS["push"]
    mj = mujoco.MjModel.from_xml_path(str(scenes.path(task.scene)))
    m = common.mjx.put_model(mj)
    qpos, target = task.case(mj, 0)
    d0 = common.mjx.make_data(m).replace(qpos=jnp.asarray(qpos), mocap_pos=jnp.asarray(target)[None])
    sim = diffmjx.Config().override(*cm.SIM, *cm.CFD)
    return m, d0, cm.make_cost(mj, task), sim, {"horizon": 16, "learning_rate": 0.2, "clip_norm": 1.0}


def _baoding():
    from diffmjx.scenes import myo
    from experiments import myo_mpc

    _, m, d0, cost = myo.baoding(True)
    sim = myo_mpc._sim(True)
    return m, d0, cost, sim, {"horizon": 16, "learning_rate": 0.05, "clip_norm": 1.0}


TASKS = {"push": _push, "baoding": _baoding}


def run_planner(m, d0, cost, sim, cfg: mpc.PlannerConfig, label: str) -> dict:
    """Iterate one planner on one plan: the plan's cost after each iteration and each one's time."""
    method = mpc.PLANNERS[cfg.kind](cfg, sim)
    lo, hi = mpc.ctrl_bounds(m)
    nominal = jnp.clip(jnp.zeros((cfg.horizon, m.nu), jnp.asarray(d0.qpos).dtype), lo, hi)
    dt0 = jnp.asarray(m.opt.timestep, nominal.dtype)
    t = time.perf_counter()
    carry, _ = jax.jit(lambda d, u: method.init(m, d, u, cost, jax.random.key(0), dt0))(d0, nominal)
    step = jax.jit(lambda d, c: method.step(m, d, c, cost, dt0)).lower(d0, carry).compile()
    finish = jax.jit(lambda d, c: method.finish(m, d, c, cost, dt0)).lower(d0, carry).compile()
    jit = time.perf_counter() - t
    costs, times = [], []
    for _ in tqdm(range(cfg.iterations), desc=label, leave=False):
        t = time.perf_counter()
        carry, (c, _) = step(d0, carry)
        jax.block_until_ready(carry)
        times.append(time.perf_counter() - t)
        costs.append(float(c))  # Adam: the iterate's cost before its update; iLQR: the plan's cost before the iteration
    _, final = finish(d0, carry)
    costs.append(float(final))
    if cfg.kind == "gradient":  # what the planner would execute: the cheapest iterate so far
        costs = np.minimum.accumulate(np.where(np.isfinite(costs), costs, np.inf)).tolist()
    return {"cost": costs, "times": times, "jit_s": jit}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=["push", "baoding"])
    p.add_argument("--adam-iterations", type=int, default=40)
    p.add_argument("--ilqr-iterations", type=int, default=4)
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where CSV and PNG files go")
    args = p.parse_args(argv)
    common.setup()
    rows, summary = [], []
    for name in args.tasks:
        m, d0, cost, sim, knobs = TASKS[name]()
        res = {}
        for kind, iters in (("gradient", args.adam_iterations), ("ilqr", args.ilqr_iterations)):
            cfg = mpc.PlannerConfig(kind=kind, execute=1, iterations=iters, **knobs)
            res[kind] = r = run_planner(m, d0, cost, sim, cfg, f"{name} {kind}")
            rows += [{"task": name, "method": kind, "iteration": k, "cost": c} for k, c in enumerate(r["cost"])]
            print(f"{name} {kind}: cost {r['cost'][0]:.6g} -> {r['cost'][-1]:.6g} in {iters} iterations, "
                  f"{np.median(r['times']):.3f} s each, JIT {r['jit_s']:.0f} s", flush=True)  # fmt: skip
        adam_final = res["gradient"]["cost"][-1]
        # the first iLQR iteration within 1 % of Adam's final cost (of its distance below the start)
        tol = 0.01 * (res["gradient"]["cost"][0] - adam_final)
        reach = next((k for k, c in enumerate(res["ilqr"]["cost"]) if c <= adam_final + tol), None)
        for kind, r in res.items():
            summary.append(
                {
                    "task": name,
                    "method": kind,
                    "iterations": len(r["times"]),
                    "start_cost": r["cost"][0],
                    "final_cost": r["cost"][-1],
                    "ilqr_iterations_to_adam_final": ("" if reach is None else reach) if kind == "ilqr" else "",
                    "s_per_iteration": float(np.median(r["times"])),
                    "jit_s": r["jit_s"],
                }
            )
        common.write_csv(args.out / "ilqr_vs_adam.csv", rows)
        common.write_csv(args.out / "ilqr_vs_adam_summary.csv", summary)
    plot(rows, args.out / "ilqr_vs_adam.png")


def plot(rows, path):
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for kind, colour, label in (("gradient", "C0", "Adam"), ("ilqr", "C3", "iLQR")):
            pts = [(r["iteration"], r["cost"]) for r in rows if r["task"] == task and r["method"] == kind]
            k, c = np.asarray(pts, float).T
            ax.plot(k, c, "o-", color=colour, ms=3, label=label)
        ax.set_xlabel("iterations on one plan")
        ax.set_ylabel("plan cost")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    common.save_figure(fig, path)


if __name__ == "__main__":
    main()
