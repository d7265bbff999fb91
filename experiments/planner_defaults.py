"""A planner's default knob, chosen from the planner suite's distribution rather than one task.

    python -m experiments.planner_defaults [--rates 0.03 0.1 0.3] [--seeds 10] [--starts 1]
    python -m experiments.planner_defaults --planner ilqr_cfd --knob ilqr_reuse --values 0 2 [--tasks ...]
        [--planner-set KNOB=VALUE ...]

By default, Adam's learning rate.

Runs :mod:`experiments.planner_suite`'s gradient planner with contacts from distance
(``gradient_cfd``: Adam, the time budget of each task, the task's horizon, nothing else changed)
on every suite task at each learning rate, from starts that are not the suite's (seeds from 10:
the suite's own table, seeds 0-2, stays a held-out check of the chosen value). The learning rate
is a fraction of each actuator's control range (:class:`diffmjx.mpc.PlannerConfig`).

Writes ``docs/results/planner_defaults.csv`` (one row per task, rate and start: success, score,
iterations per plan step) and ``planner_defaults.png`` (successes and median score per rate,
summed over the tasks and per task). The chosen default is the rate with the most successes over
all tasks; where several tie, the current default if it is among them (a default changes only for
more successes: at a tie the medians differ by less than one start's outcome), otherwise the lowest
median score. Any other knob of
:class:`diffmjx.mpc.PlannerConfig` is swept the same way with ``--planner`` (a suite planner),
``--knob`` and ``--values``, into ``planner_defaults_<knob>.csv`` and ``.png``; ``--budgets-from
docs/results/planner_suite.csv`` runs it at the suite table's budgets instead of calibrating them again.
A knob of the planning model's :class:`diffmjx.Config` (a dotted name, e.g. ``--knob cfd.solimp
--values [0,0.01,0.05,1,2] [0,0.01,0.1,1,2]``) is swept the same way, for every planner's model.
``--planner-set`` fixes other planner knobs for every run (e.g. ``ilqr_reach=[]``, the setting the
committed iLQR sweeps were measured at, before the rescaled steps existed).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

import diffmjx
from diffmjx import mpc
from diffmjx.config import DEFAULT_PRESET
from experiments import common, planner_suite

PLANNER = "gradient_cfd"


def _wins(rows: list[dict], knob: str, value) -> int:
    """Successes of ``value`` over all tasks and starts."""
    return sum(r["success"] for r in rows if r[knob] == value)


def choose(rows: list[dict], knob: str = "learning_rate", current=None):
    """The value with the most successes over all tasks and starts; among values that tie on
    successes, ``current`` (the knob's present default) if it is one of them, else the lowest
    median score."""
    rates = sorted({r[knob] for r in rows})
    tally = lambda a: (
        _wins(rows, knob, a),
        a == current,
        -np.median([r["score"] for r in rows if r[knob] == a]),
    )
    return max(rates, key=tally)


def _defaults(knob: str):
    """``(config, sim)``: ``diffmjx.Config()`` for a knob of the planning model (its first part a
    section of it, ``cfd.solimp``), else ``PlannerConfig()``; and which of the two it is."""
    sim = knob.split(".")[0] in {f.name for f in dataclasses.fields(diffmjx.Config)}
    return (diffmjx.Config() if sim else mpc.PlannerConfig()), sim


def _get(cfg, knob: str):
    return functools.reduce(getattr, knob.split("."), cfg)


def current_default(knob: str):
    """The knob's value in ``diffmjx.Config()`` (a dotted model knob) or ``PlannerConfig()``."""
    return _get(_defaults(knob)[0], knob)


def plot(rows: list[dict], out, knob: str = "learning_rate", planner: str = PLANNER) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = sorted({r[knob] for r in rows})
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(rates))
    wins = [_wins(rows, knob, a) for a in rates]
    n = len([r for r in rows if r[knob] == rates[0]])
    label = "learning_rate (fraction of the control range)" if knob == "learning_rate" else knob
    xticks, label = _ticks(rates, label)
    axes[0].bar(x, wins, 0.6, color="C0")
    axes[0].set_xticks(x, xticks)
    axes[0].set_xlabel(label)
    axes[0].set_ylabel(f"successes of {n} closed loops")
    axes[0].set_ylim(0, max(n, 1))
    axes[0].set_title(f"{'all suite tasks' if len(tasks) == 9 else 'suite tasks'}, {planner}, equal time", fontsize=9)
    scores = [r["score"] for r in rows if r["score"] > 0]
    floor = min(scores) / 3  # a median score of exactly 0 (on target) is drawn on the axis' floor
    for k, task in enumerate(tasks):
        med = [np.median([r["score"] for r in rows if (r["task"], r[knob]) == (task, a)]) for a in rates]
        med = np.maximum(med, floor)
        axes[1].plot(x + (k - len(tasks) / 2) * 0.03, med, "o-", color=f"C{k}", label=task, ms=4, lw=0.8)
    axes[1].axhline(1.0, color="0.5", lw=0.8, ls="--")
    axes[1].set_yscale("log")
    grid = (1e-4, 1e-3, 0.01, 0.1, 0.3, 1, 3, 10, 30, 100)
    ticks = [t for t in grid if floor <= t <= max(scores) * 3]
    axes[1].set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes[1].set_ylim(floor / 1.5, max(scores) * 3)
    axes[1].minorticks_off()
    axes[1].set_xticks(x, xticks)
    axes[1].set_xlabel(label)
    axes[1].set_ylabel("median score (success below 1; 0 at the floor)")
    axes[1].set_title("per task", fontsize=9)
    axes[1].legend(fontsize=7, ncol=2, frameon=False)
    common.save_figure(fig, out / f"{_name(knob)}.png")


def _name(knob: str) -> str:
    return "planner_defaults" if knob == "learning_rate" else f"planner_defaults_{knob.replace('.', '_')}"


def _label(value) -> str:
    """A swept value as a tick label and CSV cell: ``0.1``, or ``0/0.01/0.1/1/2`` for a tuple."""
    if isinstance(value, tuple):
        return "/".join(f"{v:g}" for v in value) if value else "[]"
    return str(value) if isinstance(value, str) else f"{value:g}"


def _ticks(rates: list, label: str) -> tuple[list[str], str]:
    """Tick labels and axis label: for tuple values only the entries that differ (``cfd.solimp[2]``)."""
    if not rates or not isinstance(rates[0], tuple) or len({len(a) for a in rates}) > 1:
        return [_label(a) for a in rates], label
    varying = [i for i in range(len(rates[0])) if len({a[i] for a in rates}) > 1]
    ticks = ["/".join(f"{a[i]:g}" for i in varying) for a in rates]
    return ticks, f"{label}[{', '.join(map(str, varying))}]"


def parse(knob: str, values) -> tuple[list, bool]:
    """Each value as its config parses it (a bad knob or value is refused, naming it), and whether
    the knob is the planning model's (a section of :class:`diffmjx.Config`, ``cfd.solimp``) rather
    than the planner's."""
    cfg, sim = _defaults(knob)
    return [_get(cfg.override(f"{knob}={v}"), knob) for v in values], sim


def main(argv=None) -> None:
    _, args = common.cli(
        __doc__,
        DEFAULT_PRESET,
        argv,
        extra=(
            ("--rates", {"type": float, "nargs": "+", "default": [0.03, 0.1, 0.3], "help": "learning rates"}),
            ("--planner", {"choices": list(planner_suite.PLANNERS), "default": PLANNER}),
            ("--knob", {"default": "learning_rate", "help": "the PlannerConfig knob swept"}),
            ("--values", {"nargs": "+", "help": "the knob's values (--rates for the learning rate)"}),
            (
                "--budgets-from",
                {"help": "a planner-suite CSV whose budgets per plan step are used instead of calibrating again"},
            ),
            ("--tasks", {"nargs": "+", "choices": list(planner_suite.TASKS), "default": list(planner_suite.TASKS)}),
            ("--seeds", {"type": int, "default": 10, "help": "the first start's seed"}),
            ("--starts", {"type": int, "default": 1, "help": "random starts per task and rate"}),
            (
                "--planner-set",
                {"nargs": "+", "default": [], "help": "planner overrides for every run, e.g. ilqr_reach=[]"},
            ),
        ),
    )
    seeds = range(args.seeds, args.seeds + (1 if args.quick else args.starts))
    knob = args.knob
    values = args.values if args.values else args.rates if knob == "learning_rate" else None
    if not values:
        raise SystemExit(f"--values: give the values of {knob} to sweep")
    parsed, sim = parse(knob, values)
    budgets = planner_suite.saved_budgets(args.budgets_from) if args.budgets_from else None
    rows = []
    for value in parsed:
        setting = (f"{knob}={list(value) if isinstance(value, tuple) else value}",)
        got, _ = planner_suite.closed_loops(
            args.tasks,
            [args.planner],
            seeds,
            args.quick,
            (*args.planner_set, *(() if sim else setting)),
            args.fresh,
            budgets=budgets,
            sim_extra=setting if sim else (),
        )
        rows += [
            {knob: value, **{k: r[k] for k in ("task", "seed", "success", "score", "iterations", "time_ratio")}}
            for r in got
        ]
    args.out.mkdir(parents=True, exist_ok=True)
    common.write_csv(args.out / f"{_name(knob)}.csv", [{**r, knob: _label(r[knob])} for r in rows])
    plot(rows, args.out, knob, args.planner)
    current = current_default(knob)
    best = max(_wins(rows, knob, a) for a in parsed)
    tied = [a for a in parsed if _wins(rows, knob, a) == best]
    if len(tied) > 1:
        print(f"tied on {best} successes: {', '.join(_label(a) for a in tied)} (current default {_label(current)})")
    print(f"chosen {knob}:", _label(choose(rows, knob, current)))


if __name__ == "__main__":
    main()
