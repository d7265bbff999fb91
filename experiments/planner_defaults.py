"""Adam's default learning rate, chosen from the planner suite's distribution rather than one task.

    python -m experiments.planner_defaults [--rates 0.03 0.1 0.3] [--seeds 10] [--starts 1]

Runs :mod:`experiments.planner_suite`'s gradient planner with contacts from distance
(``gradient_cfd``: Adam, the time budget of each task, the task's horizon, nothing else changed)
on every suite task at each learning rate, from starts that are not the suite's (seeds from 10:
the suite's own table, seeds 0-2, stays a held-out check of the chosen value). The learning rate
is a fraction of each actuator's control range (:class:`diffmjx.mpc.PlannerConfig`).

Writes ``docs/results/planner_defaults.csv`` (one row per task, rate and start: success, score,
iterations per plan step) and ``planner_defaults.png`` (successes and median score per rate,
summed over the tasks and per task). The chosen default is the rate with the most successes over
all tasks, ties broken by the lowest median score.
"""

from __future__ import annotations

import numpy as np

from diffmjx.config import DEFAULT_PRESET
from experiments import common, planner_suite

PLANNER = "gradient_cfd"


def choose(rows: list[dict]) -> float:
    """The rate with the most successes over all tasks and starts, then the lowest median score."""
    rates = sorted({r["learning_rate"] for r in rows})
    tally = lambda a: (
        sum(r["success"] for r in rows if r["learning_rate"] == a),
        -np.median([r["score"] for r in rows if r["learning_rate"] == a]),
    )
    return max(rates, key=tally)


def plot(rows: list[dict], out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({r["learning_rate"] for r in rows})
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(rates))
    wins = [sum(r["success"] for r in rows if r["learning_rate"] == a) for a in rates]
    n = len([r for r in rows if r["learning_rate"] == rates[0]])
    axes[0].bar(x, wins, 0.6, color="C0")
    axes[0].set_xticks(x, [f"{a:g}" for a in rates])
    axes[0].set_xlabel("learning_rate (fraction of the control range)")
    axes[0].set_ylabel(f"successes of {n} closed loops")
    axes[0].set_ylim(0, max(n, 1))
    axes[0].set_title("all suite tasks, gradient + CFD, equal time", fontsize=9)
    for k, task in enumerate(tasks):
        med = [np.median([r["score"] for r in rows if (r["task"], r["learning_rate"]) == (task, a)]) for a in rates]
        axes[1].plot(x + (k - len(tasks) / 2) * 0.03, med, "o-", color=f"C{k}", label=task, ms=4, lw=0.8)
    axes[1].axhline(1.0, color="0.5", lw=0.8, ls="--")
    axes[1].set_yscale("log")
    scores = [r["score"] for r in rows if r["score"] > 0]
    grid = (1e-4, 1e-3, 0.01, 0.1, 0.3, 1, 3, 10, 30, 100)
    ticks = [t for t in grid if min(scores) / 3 <= t <= max(scores) * 3]
    axes[1].set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes[1].minorticks_off()
    axes[1].set_xticks(x, [f"{a:g}" for a in rates])
    axes[1].set_xlabel("learning_rate (fraction of the control range)")
    axes[1].set_ylabel("median score (success below 1)")
    axes[1].set_title("per task", fontsize=9)
    axes[1].legend(fontsize=7, ncol=2, frameon=False)
    common.save_figure(fig, out / "planner_defaults.png")


def main(argv=None) -> None:
    _, args = common.cli(
        __doc__,
        DEFAULT_PRESET,
        argv,
        extra=(
            ("--rates", {"type": float, "nargs": "+", "default": [0.03, 0.1, 0.3]}),
            ("--tasks", {"nargs": "+", "choices": list(planner_suite.TASKS), "default": list(planner_suite.TASKS)}),
            ("--seeds", {"type": int, "default": 10, "help": "the first start's seed"}),
            ("--starts", {"type": int, "default": 1, "help": "random starts per task and rate"}),
        ),
    )
    seeds = range(args.seeds, args.seeds + (1 if args.quick else args.starts))
    rows = []
    for rate in args.rates:
        got, _ = planner_suite.closed_loops(
            args.tasks, [PLANNER], seeds, args.quick, (f"learning_rate={rate}",), args.fresh
        )
        rows += [
            {
                "learning_rate": rate,
                **{k: r[k] for k in ("task", "seed", "success", "score", "iterations", "time_ratio")},
            }
            for r in got
        ]
    args.out.mkdir(parents=True, exist_ok=True)
    common.write_csv(args.out / "planner_defaults.csv", rows)
    plot(rows, args.out)
    print("chosen learning_rate:", choose(rows))


if __name__ == "__main__":
    main()
