"""One plan, two planners: how many iterations and how much time iLQR and Adam need (issue 58 item 2).

    python -m experiments.ilqr_vs_adam [--tasks push flick baoding baoding_implicit] [--methods ...]
        [--starts 12] [--adam-iterations 40] [--ilqr-iterations 4] [--update]

From the same start and the same first plan (all controls zero, clipped to the control ranges),
each planner improves one plan for a number of iterations; after every iteration the plan's cost
(for Adam the lowest-cost iterate so far, as the planner executes it; for iLQR the accepted plan,
which is always its cheapest) and the iteration's wall time are recorded. Each iteration is the
planner's own compiled step (:class:`diffmjx.mpc.GradientMethod`, :class:`diffmjx.mpc.ILQRMethod`),
compiled once per task and method and run from every start, as :func:`diffmjx.mpc.closed_loop`
runs it, so the times are those of a plan step.

Tasks, with contacts from distance for both planners:

* ``push``, ``flick`` (``diffmjx/scenes/push.xml``, ``flick.xml``): the contact study's tasks
  (``experiments.contact_mpc``), its first ``--starts`` random starts and targets, horizon 16
  periods of 50 ms, Adam's learning rate 0.2;
* ``baoding``: the MyoHand ball swap from MyoSuite's reset pose (``diffmjx.scenes.myo.baoding``),
  the quick preset's horizon (16 periods of 2.5 ms) and learning rate (0.05), App. E.3's CFD,
  iLQR on the cost's exact Hessian (``planner.ilqr_cost_hessian=exact``, the default when these
  rows were measured);
* ``baoding_implicit``: the same with ``solver.gradient=implicit`` (derivatives of the constraint
  solve from its optimality condition instead of through its 4 unrolled Newton iterations; the
  forward is the same).

Methods: ``gradient`` (Adam), ``ilqr`` (the planner's defaults), ``ilqr_box_qp``
(``planner.ilqr_box_qp``: the control bounds as a box-constrained QP in the backward pass),
``ilqr_state`` (``planner.ilqr_regularization=state``: ``mu`` on the next state's value Hessian
instead of on ``Q_uu``), ``ilqr_reuse`` (``planner.ilqr_reuse=2``: up to two chord rounds on each
iteration's Jacobians after an accepted round), and iLQR's earlier versions, not run by default: ``ilqr_no_retries``
(without ``planner.ilqr_retries``) and ``ilqr_step`` (that with step lengths at one regularisation).
``--update`` replaces only the rows of the tasks and methods run.

Writes ``docs/results/ilqr_vs_adam.csv`` (cost after each iteration, per start),
``ilqr_vs_adam_summary.csv`` (per start: start and final cost, the first iteration within 1 % of
Adam's final cost, measured as a share of Adam's descent from the start; seconds per iteration;
JIT) and ``ilqr_vs_adam.png`` (each start's cost as a share of Adam's descent).
"""

from __future__ import annotations

import argparse
import csv
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


def _contact(name: str, starts: int):
    from experiments import contact_mpc as cm

    task = cm.TASKS[name]
    mj = mujoco.MjModel.from_xml_path(str(scenes.path(task.scene)))
    m = common.mjx.put_model(mj)
    data = []
    for seed in range(starts):
        qpos, target = task.case(mj, seed)
        data.append(common.mjx.make_data(m).replace(qpos=jnp.asarray(qpos), mocap_pos=jnp.asarray(target)[None]))
    sim = diffmjx.Config().override(*cm.SIM, *cm.CFD)
    knobs = {
        "horizon": 16,
        "learning_rate": 0.1,
        "clip_norm": 1.0,
        "ilqr_reach": (),
        "ilqr_explore": 0,
    }  # as measured (before ilqr_reach, ilqr_explore)
    return m, data, cm.make_cost(mj, task), sim, knobs


def _baoding(starts: int, implicit: bool = False):
    from diffmjx.scenes import myo
    from experiments import myo_mpc

    _, m, d0, cost = myo.baoding(True)
    sim = myo_mpc.planning_config(True)
    if implicit:
        sim = sim.override("solver.gradient=implicit")
    # one start: the reset pose. iLQR's cost Hessian as these rows were measured (exact; the default is
    # now psd, which zeroes its negative curvature: the swap cost's palm frame gives it some), and
    # without the rescaled steps and sampled plans (ilqr_reach, ilqr_explore, added later)
    knobs = {
        "horizon": 16,
        "learning_rate": 0.05,
        "clip_norm": 1.0,
        "ilqr_cost_hessian": "exact",
        "ilqr_reach": (),
        "ilqr_explore": 0,
    }
    return m, [d0], cost, sim, knobs


TASKS = {  # name -> (starts -> (m, start states, cost, sim, planner knobs))
    "push": lambda starts: _contact("push", starts),
    "flick": lambda starts: _contact("flick", starts),
    "baoding": _baoding,
    "baoding_implicit": lambda starts: _baoding(starts, implicit=True),
}


class StepSearch(mpc.ILQRMethod):
    """iLQR as it was before the regularisation search: step lengths ``1, 1/2, ...`` at one ``mu``,
    halved after an accepted iteration (:func:`diffmjx.mpc.ilqr.iteration` with ``search_mu=False``)."""

    search_mu = False


METHODS = {  # method -> (planner kind, planner overrides, planner class: None for the kind's own)
    "gradient": ("gradient", {}, None),
    "ilqr": ("ilqr", {}, None),
    "ilqr_box_qp": ("ilqr", {"ilqr_box_qp": True}, None),
    "ilqr_state": ("ilqr", {"ilqr_regularization": "state"}, None),
    "ilqr_reuse": ("ilqr", {"ilqr_reuse": 2}, None),
    "ilqr_no_retries": ("ilqr", {"ilqr_retries": 0}, None),
    "ilqr_step": ("ilqr", {"ilqr_retries": 0}, StepSearch),
}


def run_planner(m, starts, cost, sim, cfg: mpc.PlannerConfig, label: str, planner=None) -> dict:
    """Iterate one planner on one plan from each start: the plan's cost after each iteration, each
    iteration's time (per start) and the JIT time (once)."""
    method = (planner or mpc.PLANNERS[cfg.kind])(cfg, sim)
    lo, hi = mpc.ctrl_bounds(m)
    d0 = starts[0]
    nominal = jnp.clip(jnp.zeros((cfg.horizon, m.nu), jnp.asarray(d0.qpos).dtype), lo, hi)
    dt0 = jnp.asarray(m.opt.timestep, nominal.dtype)
    t = time.perf_counter()
    init = jax.jit(lambda d, u: method.init(m, d, u, cost, jax.random.key(0), dt0)).lower(d0, nominal).compile()
    carry, _ = init(d0, nominal)
    step = jax.jit(lambda d, c: method.step(m, d, c, cost, dt0)).lower(d0, carry).compile()
    finish = jax.jit(lambda d, c: method.finish(m, d, c, cost, dt0)).lower(d0, carry).compile()
    jit = time.perf_counter() - t
    out = {"cost": [], "times": [], "jit_s": jit}
    for d in tqdm(starts, desc=label, leave=False):
        carry, _ = init(d, nominal)
        costs, times = [], []
        for _ in range(cfg.iterations):
            t = time.perf_counter()
            carry, (c, _) = step(d, carry)
            jax.block_until_ready(carry)
            times.append(time.perf_counter() - t)
            costs.append(
                float(c)
            )  # Adam: the iterate's cost before its update; iLQR: the plan's cost before the iteration
        _, final = finish(d, carry)
        costs.append(float(final))
        if cfg.kind == "gradient":  # what the planner would execute: the cheapest iterate so far
            costs = np.minimum.accumulate(np.where(np.isfinite(costs), costs, np.inf)).tolist()
        out["cost"].append(costs)
        out["times"].append(times)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    p.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=["gradient", "ilqr", "ilqr_box_qp", "ilqr_state", "ilqr_reuse"],
    )
    p.add_argument("--starts", type=int, default=12, help="random starts and targets of push and flick")
    p.add_argument("--adam-iterations", type=int, default=40)
    p.add_argument("--ilqr-iterations", type=int, default=4)
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where CSV and PNG files go")
    p.add_argument("--update", action="store_true", help="replace only these tasks' and methods' rows")
    args = p.parse_args(argv)
    common.setup()
    update = args.update
    for name in args.tasks:
        m, starts, cost, sim, knobs = TASKS[name](args.starts)
        res, rows, summary = {}, [], []
        for method in args.methods:
            kind, extra, planner = METHODS[method]
            iters = args.adam_iterations if kind == "gradient" else args.ilqr_iterations
            # contacts from distance as the task's sim says (the planner's own switch off)
            cfg = mpc.PlannerConfig(kind=kind, cfd=False, execute=1, iterations=iters, **knobs, **extra)
            res[method] = r = run_planner(m, starts, cost, sim, cfg, f"{name} {method}", planner)
            for s, curve in enumerate(r["cost"]):
                rows += [
                    {"task": name, "method": method, "start": s, "iteration": k, "cost": c} for k, c in enumerate(curve)
                ]
            finals = ", ".join(f"{c[-1]:.4g}" for c in r["cost"])
            print(f"{name} {method}: final cost {finals} in {iters} iterations, "
                  f"{np.median(r['times']):.3f} s each, JIT {r['jit_s']:.0f} s", flush=True)  # fmt: skip
        adam = res.get("gradient")  # without Adam in this run: no reach column
        for method, r in res.items():
            for s, curve in enumerate(r["cost"]):
                reach = ""
                if adam is not None and method != "gradient":
                    a = adam["cost"][s]
                    # the first iteration within 1 % of Adam's final cost (of its descent from the start)
                    reach = next((k for k, c in enumerate(curve) if c <= a[-1] + 0.01 * (a[0] - a[-1])), "")
                summary.append(
                    {
                        "task": name,
                        "method": method,
                        "start": s,
                        "iterations": len(r["times"][s]),
                        "start_cost": curve[0],
                        "final_cost": curve[-1],
                        "ilqr_iterations_to_adam_final": reach,
                        "s_per_iteration": float(np.median(r["times"][s])),
                        "jit_s": r["jit_s"],
                    }
                )
        _write(args.out, rows, summary, update)
        update = True  # the next task's rows join this one's
    with open(args.out / "ilqr_vs_adam.csv", newline="") as f:  # all tasks', with --update
        rows = [{k: common.typed(v) for k, v in r.items()} for r in csv.DictReader(f)]
    plot(rows, args.out / "ilqr_vs_adam.png")


def _write(out: Path, rows, summary, update: bool):
    for name, new in (("ilqr_vs_adam.csv", rows), ("ilqr_vs_adam_summary.csv", summary)):
        if update and (out / name).exists():
            new = common.merge_rows(out / name, new, ("task", "method"), order=("task",))
        common.write_csv(out / name, new)


LABELS = {
    "gradient": ("C0", "Adam"),
    "ilqr": ("C3", "iLQR"),
    "ilqr_box_qp": ("C2", "iLQR, box-QP"),
    "ilqr_state": ("C4", "iLQR, mu on the state"),
    "ilqr_reuse": ("C5", "iLQR, chord rounds"),
    "ilqr_no_retries": ("C1", "iLQR, no retries (before)"),
    "ilqr_step": ("C7", "iLQR, step-length search (before)"),
}


def plot(rows, path):
    """Per task, each start's cost as a share of Adam's descent left (1: the start, 0: Adam's final
    cost, below 0: lower than Adam's final); thin lines per start, thick the median."""
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.8), squeeze=False)
    curves: dict = {}
    for r in rows:
        curves.setdefault((r["task"], r["method"], r.get("start", 0)), []).append(float(r["cost"]))
    for ax, task in zip(axes[0], tasks, strict=True):
        starts = sorted({s for t, _, s in curves if t == task})
        ref = {s: curves[(task, "gradient", s)] for s in starts}
        for method, (colour, label) in LABELS.items():
            share = [
                (np.asarray(curves[(task, method, s)]) - ref[s][-1]) / (ref[s][0] - ref[s][-1])
                for s in starts
                if (task, method, s) in curves
            ]
            if not share:
                continue
            for y in share:
                ax.plot(np.arange(len(y)), y, "-", color=colour, lw=0.7, alpha=0.35)
            style = "o--" if "before" in label else "o-"  # earlier versions dashed: the current one shows through
            ax.plot(np.arange(len(share[0])), np.median(share, axis=0), style, color=colour, ms=3, lw=1.8, label=label)
        ax.axhline(0.0, color="k", lw=0.8, ls=":")
        ax.set_xscale("symlog", linthresh=4)
        ax.set_xticks([0, 1, 2, 4, 10, 20, 40])
        ax.set_xticklabels(["0", "1", "2", "4", "10", "20", "40"])
        ax.set_ylim(-0.6, 1.1)
        ax.set_xlabel("iterations on one plan")
        ax.set_title(f"{task} ({len(starts)} start{'s' if len(starts) > 1 else ''})")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("cost above Adam's final\n(share of Adam's descent)")
    legend = {}  # every method drawn in any panel, in LABELS' order, below the panels: no curve covered
    for ax in axes[0]:
        legend.update(
            (label, h) for h, label in zip(*ax.get_legend_handles_labels(), strict=True) if label not in legend
        )
    fig.legend(
        legend.values(),
        legend.keys(),
        loc="lower center",
        ncol=len(legend),
        fontsize=9,
        frameon=False,
        borderaxespad=0.2,
    )
    common.save_figure(fig, path, rect=(0, 0.07, 1, 1))  # room for the legend below the x labels


if __name__ == "__main__":
    main()
