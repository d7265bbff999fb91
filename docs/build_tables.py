"""Write the tables of measured figures in the docs from the committed CSV files.

    python docs/build_tables.py            # rewrite every marked table in README.md and docs/*.md
    python docs/build_tables.py --check    # exit 1, naming the file and table, if one differs

A table lives between ``<!-- table: NAME -->`` and ``<!-- /table -->`` in a Markdown file; NAME is
a key of :data:`TABLES`, a function that reads ``docs/results/`` and returns the table's Markdown.
Markers indented alike (a table inside a list item) indent the table with them.
Tables are written, never typed: ``tests/test_docs_tables.py`` fails when one differs from what
this script would write.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(
    r"^(?P<indent>[ \t]*)<!-- table: (?P<name>[\w-]+) -->\n(?P<body>.*?)^(?P=indent)<!-- /table -->", re.S | re.M
)


def _rows(name: str) -> list[dict]:
    with (RESULTS / name).open() as f:
        return list(csv.DictReader(f))


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


METHOD_LABELS = {"diffmjx_lm": "DiffMJX (LM, forward-mode Jacobians)", "mujoco_sysid": "`mujoco.sysid` (C engine, FD)"}


def sysid_recovery() -> str:
    """Per model, noise and method: the largest parameter error (median and worst over starts),
    the held-out errors and the wall time."""
    rows = _rows("sysid_recovery_summary.csv")
    out = [
        "| model | data | method | largest parameter error, median (worst) | fits within 2 % | held-out error, "
        "model timestep (fine step) | wall time, median (setup) |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = list(dict.fromkeys((r["model"], r["noise"], r["method"]) for r in rows))
    for model, noise, method in keys:
        sel = [r for r in rows if (r["model"], r["noise"], r["method"]) == (model, noise, method)]
        err = [100 * float(r["max_rel_error"]) for r in sel]
        ok = sum(e <= 2.0 for e in err)
        held = _median([float(r["heldout_rms"]) for r in sel])
        fine = _median([float(r["heldout_rms_fine"]) for r in sel])
        wall = _median([float(r["wall_s"]) for r in sel])
        setup = [float(r["setup_s"]) for r in sel if r["setup_s"] not in ("", "nan")]
        setup_text = f" ({_median(setup):.0f} s)" if setup else ""
        out.append(
            f"| {model} | {'noisy' if int(noise) else 'noise-free'} | {METHOD_LABELS.get(method, method)} | "
            f"{_median(err):.3g} % ({max(err):.3g} %) | {ok} of {len(sel)} | {held:.3g} ({fine:.3g}) | "
            f"{wall:.1f} s{setup_text} |"
        )
    return "\n".join(out) + "\n"


def sysid_coverage() -> str:
    """Per model and parameter: how often identify's 95 % intervals held the truth."""
    rows = _rows("sysid_coverage_summary.csv")
    out = [
        "| model | parameter | data sets | intervals holding the truth | 95 % Wilson interval | "
        "without the tolerance check | textbook interval | median half-width | median bias / std |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = "**all**" if r["parameter"] == "all" else f"`{r['parameter']}`"
        out.append(
            f"| {r['model']} | {name} | {r['fits']} | {r['covered']} of {r['intervals']} "
            f"({100 * float(r['coverage']):.0f} %) | {100 * float(r['wilson_lower']):.0f}-"
            f"{100 * float(r['wilson_upper']):.0f} % | {100 * float(r['coverage_no_check']):.0f} % | "
            f"{100 * float(r['coverage_textbook']):.0f} % | "
            f"{100 * float(r['median_rel_halfwidth']):.2g} % | {float(r['median_bias_over_std']):.2g} |"
        )
    return "\n".join(out) + "\n"


def sysid_peer() -> str:
    """Per model and error: DiffMJX's time to it against mujoco.sysid's, each at its best setting."""

    def seconds(x: str) -> str:
        v = float(x)
        return "not reached" if v != v else f"{v:.3g} s"

    def times(first: str, later: str) -> str:
        a, b = float(first), float(later)
        return f"{'-' if a != a else f'{a:.3g} s'} / {'-' if b != b else f'{b:.3g} s'}"

    def ratio(x: str) -> str:
        v = float(x)
        return "-" if v != v else f"{v:.2g}"

    out = [
        "| model | error | DiffMJX (LM): median time, fits reaching it | first fit / later fits "
        "| its best settings | mujoco.sysid: median time, fits reaching it | its best settings "
        "| DiffMJX / mujoco.sysid | later fits / mujoco.sysid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows("sysid_peer_summary.csv"):
        out.append(
            f"| {r['model']} | {100 * float(r['error']):g} % | {seconds(r['diffmjx_median_s'])}, "
            f"{r['diffmjx_reached']} of {r['seeds']} | {times(r['diffmjx_compiled_s'], r['diffmjx_reused_s'])} | "
            f"{r['diffmjx_best_settings']} | "
            f"{seconds(r['peer_median_s'])}, {r['peer_reached']} of {r['seeds']} | {r['peer_best_settings']} | "
            f"{ratio(r['ratio'])} | {ratio(r['ratio_reused'])} |"
        )
    return "\n".join(out) + "\n"


def _peer_row() -> str:
    """The README's line of the fair-peer study: who reaches 0.1 %, and the time ratio to 1 %."""
    rows = _rows("sysid_peer_summary.csv")
    fine = [r for r in rows if float(r["error"]) == 0.001]
    ours = [r["model"] for r in fine if int(r["diffmjx_reached"])]
    only = [r["model"] for r in fine if int(r["diffmjx_reached"]) and not int(r["peer_reached"])]
    peer = [r["model"] for r in fine if int(r["peer_reached"])]
    coarse = [r for r in rows if float(r["error"]) == 0.01]
    ratios = [float(r["ratio"]) for r in coarse if float(r["ratio"]) == float(r["ratio"])]
    later = [float(r["ratio_reused"]) for r in coarse if float(r["ratio_reused"]) == float(r["ratio_reused"])]
    span = lambda xs: f"{min(xs):.1f}-{max(xs):.0f}x" if max(xs) >= 10 else f"{min(xs):.1f}-{max(xs):.1f}x"
    return (
        f"0.1 % reached by DiffMJX on {len(ours)} of {len(fine)} models, by the peer on {len(peer)} "
        f"({', '.join(peer) or 'none'}); only DiffMJX on {', '.join(only) or 'none'}; DiffMJX's time to 1 % "
        f"{span(ratios)} the peer's ({span(later)} for a later fit of the same model, its program reused)"
    )


def contactnets_generic(
    csv_name: str = "contactnets_generic.csv",
    column: str = "generic_path",
    header: str = "rerun through the generic path",
) -> str:
    """The published ContactNets fit against a rerun (the generic path's loop, or ``identify``)."""
    names = {
        "side_mm": "side (mm)",
        "mass_kg": "mass (kg)",
        "friction": "sliding friction",
        "test_error_mm": "**test error on the 50 test tosses (mm)**",
    }
    out = [f"| quantity | published | {header} | relative difference |", "|---|---|---|---|"]
    for r in _rows(csv_name):
        label = names.get(r["quantity"], r["quantity"].replace("solref", "solref[").replace("solimp", "solimp[") + "]")
        out.append(
            f"| {label} | {float(r['published']):.6g} | {float(r[column]):.6g} | "
            f"{100 * float(r['relative_difference']):+.3g} % |"
        )
    return "\n".join(out) + "\n"


def _linearize_grid(label, text) -> tuple[list[str], dict, list, list]:
    """``linearize.csv`` as a table: a header of methods and one row per regime, labelled
    ``label(regime)``, each cell ``text(row)``; also the cells, regimes and methods."""
    rows = _rows("linearize.csv")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    cell = {(r["regime"], r["method"]): r for r in rows}
    out = ["| regime | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for g in regimes:
        out.append(f"| {label(g)} | " + " | ".join(text(cell[(g, mth)]) for mth in methods) + " |")
    return out, cell, regimes, methods


def linearize() -> str:
    """Per regime and method: the relative errors of A and B against the converged period, and the
    median time per period."""

    def errors(r):
        return f"{float(r['error_A']):.1e} / {float(r['error_B']):.1e}" if r["finite"] == "True" else "NaN"

    out, cell, regimes, methods = _linearize_grid(lambda g: f"{g}: error of A / B", errors)
    times = [_median([float(cell[(g, mth)]["ms_per_period"]) for g in regimes]) for mth in methods]
    out.append("| ms per period (median) | " + " | ".join(f"{t:.3g}" for t in times) + " |")
    return "\n".join(out) + "\n"


def linearize_cost() -> str:
    """Per regime and method: a period's Jacobians over the same period's forward simulation alone
    (and the Jacobians' time), and for DiffMJX over the forward of the solve ``linearize``
    differentiates (the ``forward`` gradient mode's steps)."""

    def ratios(r):
        jac, fwd, same = (float(r[k]) for k in ("ms_per_period", "forward_ms", "forward_same_solve_ms"))
        text = f"**{jac / fwd:.1f}×** ({jac:.3g} ms)"
        if same != fwd:  # the forward of the solve the Jacobian differentiates is another program
            text += f"; {jac / same:.1f}× its own solve's"
        return text

    return "\n".join(_linearize_grid(str, ratios)[0]) + "\n"


def contact_mpc(name: str = "contact_mpc.csv") -> str:
    """Per task and method: successes over the starts, the final distance to the target (median and
    worst), the time per plan step (median) and the largest JIT time (the first start compiles; the
    others mostly find the persistent compilation cache)."""
    rows = _rows(name)
    out = [
        "| task | method | success (within 30 mm) | final distance to target, median (worst) | "
        "ms per plan step | JIT, largest (s) |",
        "|---|---|---|---|---|---|",
    ]
    for task, method in dict.fromkeys((r["task"], r["method"]) for r in rows):
        sel = [r for r in rows if (r["task"], r["method"]) == (task, method)]
        final = [float(r["final_distance_mm"]) for r in sel]
        ok = sum(r["success"] == "True" for r in sel)
        ms = _median([float(r["ms_per_plan_step"]) for r in sel])
        jit = max(float(r["jit_s"]) for r in sel)
        out.append(
            f"| {task} | {method} | {ok} of {len(sel)} | {_median(final):.0f} mm ({max(final):.0f} mm) | "
            f"{ms:.0f} | {jit:.0f} |"
        )
    return "\n".join(out) + "\n"


SUITE_PLANNERS = ("sampling", "gradient", "gradient_cfd", "ilqr_cfd", "hybrid_cfd")


def _suite_planners(rows: list[dict]) -> list[str]:
    """The planner suite's planners that ``rows`` hold, in the suite's order."""
    return [p for p in SUITE_PLANNERS if any(r["planner"] == p for r in rows)]


def _successes(rows: list[dict], planners) -> dict[str, int]:
    """Per planner: its successful starts in ``rows``."""
    return {p: sum(r["success"] == "True" for r in rows if r["planner"] == p) for p in planners}


def planner_suite(name: str = "planner_suite.csv", before: str | None = None) -> str:
    """Per task and planner of a suite CSV (``name``: the suite, or some tasks from more starts):
    successes over the starts and the median score (the largest end-state error in units of its
    tolerance; below 1 is a success), with the task's time budget per plan step; with ``before``,
    a column of iLQR with CFD without its sampled plans (a CSV of its rows at ``ilqr_explore=0``)."""
    rows = _rows(name)
    earlier = _rows(before) if before else []
    planners = _suite_planners(rows)
    cell = lambda sel: (
        f"{sum(r['success'] == 'True' for r in sel)} of {len(sel)} ({_median([float(r['score']) for r in sel]):.2g})"
        if sel
        else ""
    )
    head = [f"`{p}`" for p in planners] + (["`ilqr_cfd`, `ilqr_explore=0`"] if before else [])
    out = ["| task | budget (ms per plan step) | " + " | ".join(head) + " |", "|---|---|" + "---|" * len(head)]
    for task in dict.fromkeys(r["task"] for r in rows):
        cells = [cell([r for r in rows if (r["task"], r["planner"]) == (task, p)]) for p in planners]
        if before:
            cells.append(cell([r for r in earlier if r["task"] == task]))
        budget = float(next(r["budget_ms"] for r in rows if r["task"] == task))
        out.append(f"| {task} | {budget:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def planner_suite_time() -> str:
    """Per planner: the time per plan step as a multiple of the task's budget (median and range over
    tasks) and the iterations that fit (median over tasks)."""
    rows = _rows("planner_suite.csv")
    out = [
        "| planner | time per plan step / budget, median (range over tasks) | iterations per plan step, median (range) |"
    ]
    out.append("|---|---|---|")
    for p in SUITE_PLANNERS:
        per_task = {}
        for r in rows:
            if r["planner"] == p:
                per_task.setdefault(r["task"], []).append(r)
        if not per_task:
            continue
        ratio = [_median([float(r["time_ratio"]) for r in sel]) for sel in per_task.values()]
        its = [_median([float(r["iterations"]) for r in sel]) for sel in per_task.values()]
        out.append(
            f"| `{p}` | {_median(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f}) | "
            f"{_median(its):.0f} ({min(its):.0f}–{max(its):.0f}) |"
        )
    return "\n".join(out) + "\n"


SUITE_NAMES = {  # the planner suite's planners in words (the README's claims)
    "ilqr_cfd": "iLQR with contacts from distance (the default)",
    "hybrid_cfd": "the hybrid with CFD",
    "gradient_cfd": "Adam with CFD",
    "sampling": "predictive sampling",
    "gradient": "Adam",
}

SUITE_KINDS = (  # kind of task -> the planner suite's tasks of that kind
    ("an actuated body reaches an object and pushes or tips it", ("block_push", "box_tip")),
    ("reaching, tracking", ("reacher",)),
    ("swing-ups, a strike whose outcome hangs on one impact", ("pendulum", "cartpole", "flick")),
    ("an object turned by a finger", ("finger_turn",)),
    ("balancing near an unstable equilibrium", ("double_cartpole",)),
    ("legged, making and breaking contact", ("hopper",)),
)


def planner_choice() -> str:
    """Per kind of task: the suite's tasks of that kind, each planner's successes over their starts,
    and the planner(s) with the most."""
    rows = _rows("planner_suite.csv")
    planners = _suite_planners(rows)
    out = [
        "| kind of task | suite tasks | most successes | " + " | ".join(f"`{p}`" for p in planners) + " |",
        "|---|---|---|" + "---|" * len(planners),
    ]
    kinds = (*SUITE_KINDS, ("all", tuple(dict.fromkeys(r["task"] for r in rows))))
    for kind, tasks in kinds:
        sel = [r for r in rows if r["task"] in tasks]
        wins = _successes(sel, planners)
        n = len([r for r in sel if r["planner"] == planners[0]])
        best = ", ".join(f"`{p}`" for p in planners if wins[p] == max(wins.values()))
        names = "all nine" if kind == "all" else ", ".join(tasks)
        label = "**all**" if kind == "all" else kind
        out.append(f"| {label} | {names} | {best} | " + " | ".join(f"{wins[p]} of {n}" for p in planners) + " |")
    return "\n".join(out) + "\n"


def vjp_sources(top: int = 6) -> str:
    """The MJX or DiffMJX functions that write the most slices into one forward evaluation
    (``experiments.vjp_sources``), and the total."""
    rows = [r for r in _rows("vjp_sources.csv") if r["primitive"] == "slice"]
    out = ["| written by (innermost first) | slices |", "|---|---|"]
    for r in rows[:top]:
        out.append(f"| `{r['written_by']}` | {r['count']} |")
    out.append(f"| **all {len(rows)} call chains** | {sum(int(r['count']) for r in rows)} |")
    return "\n".join(out) + "\n"


def planner_defaults(knob: str = "learning_rate", label: str = "lr", value=float, unit: str = "") -> str:
    """Per task and value of a planner knob swept on the suite (``experiments.planner_defaults``;
    Adam's learning rate by default): successes over the sweep's starts (median score), and the
    totals. ``value``: the number a CSV cell stands for (the swept column of a tuple knob)."""
    name = "planner_defaults.csv" if knob == "learning_rate" else f"planner_defaults_{knob.replace('.', '_')}.csv"
    rows = [{**r, knob: value(r[knob])} for r in _rows(name)]
    rates = sorted({r[knob] for r in rows}, key=lambda a: (a != "[]", a))  # "[]": a list knob off, first
    show = lambda a: a if isinstance(a, str) else f"{a:g}"
    out = ["| task | " + " | ".join(f"{label} {show(a)}{unit}" for a in rates) + " |", "|---|" + "---|" * len(rates)]
    cell = lambda sel: (
        f"{sum(r['success'] == 'True' for r in sel)} of {len(sel)} ({_median([float(r['score']) for r in sel]):.2g})"
    )
    for task in dict.fromkeys(r["task"] for r in rows):
        sels = [[r for r in rows if r["task"] == task and r[knob] == a] for a in rates]
        out.append(f"| {task} | " + " | ".join(cell(sel) for sel in sels) + " |")
    out.append("| **all** | " + " | ".join(cell([r for r in rows if r[knob] == a]) for a in rates) + " |")
    return "\n".join(out) + "\n"


def _fixed_percent(x: float) -> str:
    """A fraction as a percentage: two decimals below 10 %, one from 10 %, none from 100 %."""
    p = 100 * x
    return f"{p:.0f}" if p >= 100 else f"{p:.1f}" if p >= 10 else f"{p:.2f}"


def _linear_quantile(xs: list[float], q: float) -> float:
    """``numpy.percentile(xs, 100 q)`` with its default linear interpolation."""
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


CUBE_TOSS_LABELS = {
    "DiffMJX (tsit5, rtol 1e-08, checkpoint, kink control)": "DiffMJX, Tsit5 `rtol = atol = 1e-8`, `checkpoint` AD, "
    "kink control",
    "DiffMJX, backsolve adjoint": "DiffMJX, same tolerances, `backsolve` AD",
    "DiffMJX, implicit solver gradient": "DiffMJX, same tolerances, implicit solver gradient",
    "MJX semi-implicit Euler, dt 0.01": "MJX semi-implicit Euler, dt 0.01 (`mjx_euler`, AD, stock MJX)",
    "MuJoCo C engine, RK4 dt 1e-5 (central differences)": "MuJoCo C engine, RK4 dt 1e-5 (MuJoCo's floor), central "
    "differences",
}


def _cube_toss() -> dict[str, dict]:
    return {r["method"]: r for r in _rows("cube_toss.csv")}


def cube_toss() -> str:
    """The demo's gradient d loss / d u0 per method and its error against the converged solve."""
    out = ["| method | d loss / d u0 | rel. error |", "|---|---|---|"]
    for method, r in _cube_toss().items():
        out.append(
            f"| {CUBE_TOSS_LABELS.get(method, method)} | {float(r['grad_ad']):+.4f} | "
            f"{_percent_sig(float(r['rel_error']))} % |"
        )
    return "\n".join(out) + "\n"


def _percent_sig(x: float) -> str:
    """A fraction as a percentage: two decimals from 0.1 %, two significant digits below."""
    p = 100 * x
    return f"{p:.0f}" if p >= 100 else f"{p:.2f}" if p >= 0.1 else f"{p:.2g}"


def cube_toss_solver_gradient() -> str:
    """The demo's unrolled and implicit solver gradients: value, error, backward JIT and run time."""
    rows = _cube_toss()
    out = ["| `solver.gradient` | gradient | rel. error | backward JIT | backward run |", "|---|---|---|---|---|"]
    for mode, method in (
        ("unroll", "DiffMJX (tsit5, rtol 1e-08, checkpoint, kink control)"),
        ("implicit", "DiffMJX, implicit solver gradient"),
    ):
        r = rows[method]
        out.append(
            f"| `{mode}` | {float(r['grad_ad']):+.4f} | {_percent_sig(float(r['rel_error']))} % | "
            f"{float(r['backward_jit_s']):.3g} s | {float(r['backward_run_s']):.3g} s |"
        )
    return "\n".join(out) + "\n"


KINK_CONTROL_LABELS = {
    "checkpoint 1e-8": "`checkpoint` 1e-8 (MuJoCo's floor)",
    "checkpoint 1e-8, floor 0": "`checkpoint` 1e-8, floor 0",
    "checkpoint 1e-8, floor 0, kink 1e-9": "`checkpoint` 1e-8, floor 0, `kink_step` 1e-9",
    "checkpoint 1e-8, floor 0, kink 1e-7": "`checkpoint` 1e-8, floor 0, `kink_step` 1e-7",
    "checkpoint 1e-7, floor 0, kink 1e-6": "`checkpoint` 1e-7, floor 0, `kink_step` 1e-6",
    "checkpoint 1e-5, floor 0, kink 1e-7": "`checkpoint` 1e-5, floor 0, `kink_step` 1e-7",
    "backsolve 1e-7": "`backsolve` 1e-7 (MuJoCo's floor)",
    "backsolve 1e-7, floor 0": "`backsolve` 1e-7, floor 0",
    "defaults (backsolve 1e-7)": "**defaults** (`backsolve` 1e-7)",
    "defaults, checkpoint (solve at 1e-8, kink auto 1e-7)": "**defaults, `checkpoint`** (solve at 1e-8: "
    "`dto_tighten` 10; `kink_step` auto = 1e-7)",
    "defaults, checkpoint at 1e-7 (kink auto: 1e-7)": "defaults, `checkpoint` at 1e-7 (`dto_tighten` 1; "
    "`kink_step` auto = 1e-7)",
    "defaults, checkpoint at 1e-7, kink 1e-6": "defaults, `checkpoint` at 1e-7, `kink_step` 1e-6 (`auto` before)",
    "defaults, checkpoint at 1e-7, no kink control": "defaults, `checkpoint` at 1e-7, `kink_step=null` (off)",
}


def kink_control() -> str:
    """Per configuration over the ten cube-toss shots: the median, 90th percentile and worst gradient
    error, the README shot's, the backward run time of the ten and the mean steps per shot."""
    rows = _rows("kink_control.csv")
    out = [
        "| configuration | median | 90th pct. | worst | README shot | backward run | "
        "steps accepted / rejected per shot |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in dict.fromkeys(r["config"] for r in rows):
        sel = [r for r in rows if r["config"] == config]
        err = [float(r["rel_error"]) for r in sel]
        readme = next(float(r["rel_error"]) for r in sel if r["shot"] == "README snippet")
        accepted = sum(int(r["accepted_steps"]) for r in sel) / len(sel)
        rejected = sum(int(r["rejected_steps"]) for r in sel) / len(sel)
        out.append(
            f"| {KINK_CONTROL_LABELS.get(config, config)} | {_fixed_percent(_median(err))} % | "
            f"{_fixed_percent(_linear_quantile(err, 0.9))} % | {_fixed_percent(max(err))} % | "
            f"{_fixed_percent(readme)} % | {float(sel[0]['backward_run_s']):.1f} s | "
            f"{accepted:.0f} / {rejected:.0f} |"
        )
    return "\n".join(out) + "\n"


ADJOINT_LABELS = {
    "checkpoint": "`checkpoint` (kink control, forward at 1e-8)",
    "backsolve": "`backsolve` (the default; kink control in its backward solve)",
    "backsolve_diffrax": "`backsolve` by `diffrax.BacksolveAdjoint` (the default until Dec 6)",
    "interpolated": "`interpolated`",
    "sensitivity": "`sensitivity` ([below](#the-sensitivity-mode))",
}


def benchmark_adjoints() -> str:
    """Per gradient mode on the cube toss: the errors over the sweep of shots and at u0, the backward
    evaluations, and the median forward, backward and first-call times."""
    out = [
        "| adjoint | median error | max error | error at u0 | backward evaluations | forward run | backward run | "
        "first call (cold) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows("benchmark_adjoints_summary.csv"):
        out.append(
            f"| {ADJOINT_LABELS.get(r['adjoint'], r['adjoint'])} | {_percent_sig(float(r['median_rel_error']))} % | "
            f"{_percent_sig(float(r['max_rel_error']))} % | {_percent_sig(float(r['rel_error_at_u0']))} % | "
            f"{r['backward_evaluations']} | {float(r['forward_s']):.3f} s | {float(r['backward_s']):.3f} s | "
            f"{float(r['first_call_s']):.1f} s |"
        )
    return "\n".join(out) + "\n"


# (label, CSV with the model's 4 iterations, its config, family, motion); converged: fidelity.csv's defaults
SOLVER_BUDGET_SHOTS = (
    (
        "box settling onto four corners (box–plane, onset)",
        "fidelity_solver_budget.csv",
        "model's solver budget",
        "box-plane",
        "onset",
    ),
    (
        "capsule sliding on a plane (capsule–plane, sliding)",
        "fidelity_capsule.csv",
        "defaults",
        "capsule-plane",
        "sliding",
    ),
    ("capsule rolling (capsule–plane, rolling)", "fidelity_capsule.csv", "defaults", "capsule-plane", "rolling"),
)


def solver_budget() -> str:
    """Gradient error of three fidelity shots with the model's 4 solver iterations and converged."""
    converged = {(r["family"], r["motion"]): r for r in _rows("fidelity.csv") if r["config"] == "defaults"}
    out = ["| shot | model's 4 iterations | converged (defaults) |", "|---|---|---|"]
    for label, name, config, family, motion in SOLVER_BUDGET_SHOTS:
        four = next(r for r in _rows(name) if (r["config"], r["family"], r["motion"]) == (config, family, motion))
        out.append(
            f"| {label} | {100 * float(four['rel_error']):.2g} % | "
            f"{100 * float(converged[(family, motion)]['rel_error']):.2g} % |"
        )
    return "\n".join(out) + "\n"


BILLIARD_LABELS = {
    "diffmjx": "DiffMJX, no CFD",
    "cfd_checkpoint": "CFD, discretize-then-optimize (checkpoint)",
    "cfd_backsolve": "CFD, optimize-then-discretize (backsolve)",
    "cfd_resolved": "CFD, resolved",
}


def _oscillation(grad: list[float]) -> float:
    """Total variation over range, 1 for a monotone curve (``experiments.billiard.oscillation``)."""
    span = max(grad) - min(grad)
    return sum(abs(grad[i + 1] - grad[i]) for i in range(len(grad) - 1)) / span if span > 0 else 1.0


def billiard_fig19() -> str:
    """The gravity-free billiard's miss points: each gradient's median deviation from the resolved CFD
    gradient, how many point towards the hit, and its oscillation on either side of the miss region."""
    free = _rows("billiard_free.csv")
    out = [
        "| method | median deviation from resolved | loss-reducing sign | oscillation (TV / range, worse side) |",
        "|---|---|---|---|",
    ]
    for r in _rows("billiard_summary.csv"):
        if r["study"] != "fig19":
            continue
        method = r["method"]
        sign = f"{r['miss_descent_sign_ok']} / {r['miss_points']}"
        if int(r["miss_nonzero_gradients"]) == 0:
            out.append(f"| {BILLIARD_LABELS.get(method, method)} | gradient exactly 0 | {sign} | — |")
            continue
        sides = [
            _oscillation([float(f[f"{method}_grad"]) for f in free if float(f["miss"]) and float(f["u"]) * s > 0])
            for s in (-1, 1)
        ]
        worse, other = max(sides), min(sides)
        assert abs(worse - float(r["oscillation"])) < 1e-9, (method, worse, r["oscillation"])
        note = "monotone" if round(worse, 2) == 1 else f"other side {other:.2f}"
        dev = 100 * float(r["miss_median_rel_dev_resolved"])
        out.append(
            f"| {BILLIARD_LABELS.get(method, method)} | {f'{dev:.1f} %' if dev else '0'} | {sign} | "
            f"{worse:.2f} ({note}) |"
        )
    return "\n".join(out) + "\n"


def muscle_tausmooth() -> str:
    """How far ``muscle.tausmooth`` moves each task in the C engine: the largest activation and body
    position differences against the hard switch, and the task's own sensitivity to a 1e-9 control change."""
    tasks = (("baoding", "baoding hand"), ("tennis", "bionic tennis"), ("die", "die in the hand"))
    rows = {t: _rows(f"myo_mpc_{t}_tausmooth.csv") for t, _ in tasks}

    def num(x: float) -> str:
        return f"{x:.2f}" if x >= 0.1 else re.sub(r"e([+-])0", r"e\1", f"{x:.1e}")

    out = ["| width | activation | " + " | ".join(f"{label} (m)" for _, label in tasks) + " |", "|---" * 5 + "|"]
    for i, r in enumerate(rows[tasks[0][0]]):
        if float(r["ctrl_jitter"]):
            width = f"(controls + {num(float(r['ctrl_jitter']))})"
        elif float(r["tausmooth"]):
            width = f"{float(r['tausmooth']):g}"
        else:
            continue  # the hard switch against itself
        assert all(float(rows[t][i]["max_act_diff"]) == float(r["max_act_diff"]) for t, _ in tasks)
        bodies = " | ".join(num(float(rows[t][i]["max_body_pos_diff_m"])) for t, _ in tasks)
        out.append(f"| {width} | {num(float(r['max_act_diff']))} | {bodies} |")
    return "\n".join(out) + "\n"


MYO_MPC_METHODS = ("gradient", "gradient + CFD", "sampling 64", "sampling 256", "hybrid + CFD")


def _myo_mpc(summary: str) -> str:
    """Per method of a MyoSuite MPC run: final and mean cost (the lowest final cost bold), the median
    time per plan step and the JIT time."""
    rows = sorted(_rows(summary), key=lambda r: MYO_MPC_METHODS.index(r["method"]))
    best = min(float(r["final_cost"]) for r in rows)
    out = ["| method | final cost | mean cost | s per plan step | JIT s |", "|---|---|---|---|---|"]
    for r in rows:
        final = f"{float(r['final_cost']):.4f}"
        out.append(
            f"| {r['method']} | {f'**{final}**' if float(r['final_cost']) == best else final} | "
            f"{float(r['mean_cost']):.4f} | {float(r['plan_step_s']):.1f} | {float(r['jit_s']):.0f} |"
        )
    return "\n".join(out) + "\n"


PLAN_CONTACTS = {
    "objects": "the balls' contacts",
    "objects+capsules": "the balls' and the finger capsules' contacts",
    "all": "the full model",
}
"""``myo_mpc``'s ``plan_contacts`` (the planning model's contacts) in the baoding tables' words."""


def myo_mpc_baoding_swap() -> str:
    """The baoding swap at the paper preset and the CPU route to it (``--preset fast``): iterations,
    the planning model's contacts, compile and plan-step times, the closed loop's wall time, and the
    executed cost at the paper's horizon (0.64 s) and at the end."""
    out = [
        "| run | Adam iterations (first plan step / later) | plans on | JIT s | s per plan step (median) | "
        "closed loop, compile included (min) | cost at 0.64 s | final cost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for preset in ("paper", "fast"):
        r = next(r for r in _rows(f"myo_mpc_baoding_{preset}_summary.csv") if r["method"] == "gradient")
        cost = {
            int(c["step"]): float(c["cost"])
            for c in _rows(f"myo_mpc_baoding_{preset}.csv")
            if c["method"] == "gradient"
        }
        first = r.get("first_iterations") or r["iterations"]
        contacts = PLAN_CONTACTS[r.get("plan_contacts") or "all"]
        # one process's closed loop as measured; a run resumed from a checkpoint: its pieces' sum
        resumed = int(r["resumed_plan_steps"])
        wall = float(r["wall_s"]) if not resumed else float(r["plan_steps_s_total"]) + float(r["jit_s"])
        out.append(
            f"| `--preset {preset}` | {first} / {r['iterations']} | {contacts} | {float(r['jit_s']):.0f} | "
            f"{float(r['plan_step_s']):.1f} | {wall / 60:.1f} | {cost[256]:.4f} | {float(r['final_cost']):.4f} |"
        )
    return "\n".join(out) + "\n"


def myo_mpc_baoding_fast_trials() -> str:
    """The CPU route's trials: iterations, the planning model's contacts, the executed cost at 0.64 s,
    its lowest and its last value, the median plan step and the closed loop's wall time."""
    out = [
        "| trial | Adam iterations (first / later) | plans on | cost at 0.64 s | lowest cost | final cost | "
        "s per plan step (median) | closed loop, compile included (min) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows("myo_mpc_baoding_fast_trials.csv"):
        out.append(
            f"| {r['trial']} | {r['first_iterations']} / {r['iterations']} | {PLAN_CONTACTS[r['plan_contacts']]} | "
            f"{float(r['cost_at_0.64s']):.4f} | {float(r['lowest_cost']):.4f} | {float(r['final_cost']):.4f} | "
            f"{float(r['plan_step_s']):.1f} | {float(r['wall_s']) / 60:.1f} |"
        )
    return "\n".join(out) + "\n"


def ilqr_vs_adam() -> str:
    """One plan per start, Adam and iLQR: how far each gets (the cost left as a share of Adam's
    descent: 0 is Adam's final cost), how many starts reach Adam's final cost (within 1 % of its
    descent) and at which iteration, seconds per iteration and for all of them, JIT."""
    curves: dict = {}
    for r in _rows("ilqr_vs_adam.csv"):
        curves.setdefault((r["task"], r["method"], r["start"]), []).append(float(r["cost"]))
    out = [
        "| task | planner | starts | iterations | cost left, share of Adam's descent: median (worst) | "
        "reach Adam's final cost | first iteration there, median | s per iteration (median) | "
        "s for the iterations | JIT s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict = {}
    for r in _rows("ilqr_vs_adam_summary.csv"):
        groups.setdefault((r["task"], r["method"]), []).append(r)
    order = ["push", "flick", "baoding", "baoding_implicit"]  # the study's task order, whatever the CSV's
    names = {  # in the table's order
        "gradient": "Adam",
        "ilqr": "iLQR",
        "ilqr_box_qp": "iLQR, box-QP",
        "ilqr_state": "iLQR, `mu` on the state",
        "ilqr_reuse": "iLQR, chord rounds (`ilqr_reuse=2`)",
        "ilqr_no_retries": "iLQR, no retries (before)",
        "ilqr_step": "iLQR, step-length search (before)",
    }
    rank = lambda name, known: known.index(name) if name in known else len(known)
    groups = dict(sorted(groups.items(), key=lambda kv: (rank(kv[0][0], order), rank(kv[0][1], list(names)))))
    for (task, method), rs in groups.items():
        left, firsts = [], []
        for r in rs:
            adam, own = curves[(task, "gradient", r["start"])], curves[(task, method, r["start"])]
            descent = adam[0] - adam[-1]
            left.append((own[-1] - adam[-1]) / descent)
            k = next((i for i, c in enumerate(own) if c <= adam[-1] + 0.01 * descent), None)
            if k is not None:
                firsts.append(k)
        per = _median([float(r["s_per_iteration"]) for r in rs])
        iters = int(rs[0]["iterations"])
        reach = "—" if method == "gradient" else f"{len(firsts)} of {len(rs)}"
        first = f"{_median(firsts):g}" if firsts else "—"
        worst = max(left)
        out.append(
            f"| {task} | {names[method]} | {len(rs)} | {iters} | {_median(left):+.2f} ({worst:+.2f}) | {reach} | "
            f"{first} | {per:.3g} | {iters * per:.3g} | {float(rs[0]['jit_s']):.0f} |"
        )
    return "\n".join(out) + "\n"


def myo_mpc_gradient_modes() -> str:
    """The quick baoding gradient planner with the solver gradient unrolled or implicit, with and
    without remat: time per plan step, JIT time, and how far the executed cost moves from ``unroll``."""
    out = [
        "| mode | s per plan step | JIT s | executed cost, largest difference from `unroll` |",
        "|---|---|---|---|",
    ]
    for r in _rows("myo_mpc_baoding_gradient_modes.csv"):
        diff = "—" if r["mode"] == "unroll" else f"{float(r['max_cost_diff_vs_unroll']):.1e}"
        out.append(f"| {r['mode']} | {float(r['plan_step_s']):.1f} | {float(r['jit_s']):.0f} | {diff} |")
    return "\n".join(out) + "\n"


def readme_claims() -> str:
    """The README's measured claims at a glance, each from its study's CSV."""
    toss = _cube_toss()

    def toss_error(method: str) -> str:
        return _percent_sig(float(toss[method]["rel_error"]))

    fidelity = _rows("fidelity_defaults_ten_summary.csv")
    every = next(r for r in fidelity if r["family"] == "all")
    shots = int(every["shots"]) + int(every["unconverged_truth"])
    wrong = int(every["wrong_sign"])
    billiard = {(r["study"], r["method"]): r for r in _rows("billiard_summary.csv")}
    cfd, plain = billiard[("fig8", "cfd")], billiard[("fig8", "diffmjx")]
    assert int(plain["miss_nonzero_gradients"]) == 0
    sysid = [r for r in _rows("sysid_recovery_summary.csv") if r["noise"] == "0"]
    ours = [100 * float(r["max_rel_error"]) for r in sysid if r["method"] == "diffmjx_lm"]
    theirs = [100 * float(r["max_rel_error"]) for r in sysid if r["method"] == "mujoco_sysid"]
    assert max(ours) <= 2
    salt = [r for r in _rows("saltation.csv") if r["adjoint"] == "backsolve" and r["reference_converged"] == "True"]
    finger = {
        r["saltation"]: r
        for r in _rows("saltation_summary.csv")
        if r["scene"] == "finger_box" and r["adjoint"] == "backsolve"
    }
    with_term = [100 * float(r["rel_error"]) for r in salt if r["saltation"] == "True"]
    without = [100 * float(r["rel_error"]) for r in salt if r["saltation"] == "False"]
    salt_scenes = len({r["scene"] for r in salt})
    gen = _rows("contactnets_generalisation_summary.csv")[0]
    suite = _rows("planner_suite.csv")
    wins = _successes(suite, _suite_planners(suite))
    starts = len([r for r in suite if r["planner"] == next(iter(wins))])
    paper = next(r for r in _rows("myo_mpc_baoding_paper_summary.csv") if r["method"] == "gradient")
    fast = next(r for r in _rows("myo_mpc_baoding_fast_summary.csv") if r["method"] == "gradient")
    rows = [
        (
            "cube-toss gradient against a converged solve",
            f"DiffMJX {toss_error('DiffMJX (tsit5, rtol 1e-08, checkpoint, kink control)')} % (backsolve "
            f"{toss_error('DiffMJX, backsolve adjoint')} %); MJX's Euler at dt 0.01: "
            f"{toss_error('MJX semi-implicit Euler, dt 0.01')} %",
            "[getting-started](docs/getting-started.md#what-the-demo-prints)",
        ),
        (
            f"defaults on random contact scenes ({len(fidelity) - 1} families, {shots} shots)",
            f"{100 * float(every['median_rel_error']):.2f} % median, {100 * float(every['p90_rel_error']):.2f} % at "
            f"the 90th percentile, " + ("never the wrong sign" if not wrong else f"{wrong} of the wrong sign"),
            "[config](docs/config.md#why-these-defaults)",
        ),
        (
            f"gradients through touchdowns with MuJoCo's default `solimp` ({salt_scenes} scenes, {len(with_term)} "
            "shots with a converged reference)",
            f"`backsolve`: {_median(with_term):.2g} % median with the opt-in saltation term, {_median(without):.0f} % "
            f"without (the default); on the finger tapping a box {_percent_sig(float(finger['True']['median_rel_error']))} % / "
            f"{_percent_sig(float(finger['False']['median_rel_error']))} % (worst {_percent_sig(float(finger['True']['worst_rel_error']))} % "
            "with it)",
            "[solver](docs/solver.md#touchdown-and-solverimpedance_floor)",
        ),
        (
            "contacts from distance, billiard misses",
            f"DiffMJX's gradient is exactly 0; CFD's points towards the hit ({cfd['miss_descent_sign_ok']} of "
            f"{cfd['miss_points']}), and Adam with it reaches the target ({1000 * float(cfd['descent_final_loss']):.1f}"
            f" mm off; {1000 * float(plain['descent_final_loss']):.0f} mm without CFD)",
            "[cfd](docs/cfd.md#measured-results)",
        ),
        (
            "sysid of four models nobody fitted before",
            f"every parameter within 2 % from noise-free recordings ({len(ours)} of {len(ours)} fits, worst "
            f"{max(ours):.2g} %); `mujoco.sysid`'s largest error {min(theirs):.2g} to {max(theirs):.2g} % "
            "at the model's timestep",
            "[sysid](docs/sysid.md#recovery-study-four-models-nobody-fitted-before)",
        ),
        (
            "sysid against `mujoco.sysid` at its best timestep and integrator, six models",
            _peer_row(),
            "[sysid](docs/sysid.md#a-fair-peer-time-to-1-and-to-01)",
        ),
        (
            "sysid's 95 % intervals, 50 noisy data sets per model",
            "hold the truth "
            + "; ".join(
                f"{100 * float(r['coverage']):.0f} % of the time on the {r['model']} (the textbook interval "
                f"{100 * float(r['coverage_textbook']):.0f} %)"
                for r in _rows("sysid_coverage_summary.csv")
                if r["parameter"] == "all"
            ),
            "[sysid](docs/sysid.md#coverage-of-the-intervals)",
        ),
        (
            "ContactNets cube, every parameter fitted",
            f"{float(gen['published_mean_mm']):.1f} mm against the pre-tuned {float(gen['pretuned_mean_mm']):.1f} mm "
            f"on {gen['tosses']} held-out test tosses ({float(gen['ratio_of_means']):.2f}×)",
            "[sysid](docs/sysid.md#fig-22-and-fig-11-every-parameter-fitted-for-prediction-selected-on-held-out-tosses)",
        ),
        (
            f"planners on {len(set(r['task'] for r in suite))} tasks nobody tuned them for, equal time per plan step, "
            "executed on MuJoCo's C engine",
            "successes: "
            + ", ".join(f"{SUITE_NAMES.get(p, p)} {wins[p]} of {starts}" for p in sorted(wins, key=lambda p: -wins[p])),
            "[mpc](docs/mpc.md#planner-suite-tasks-nobody-tuned-for)",
        ),
        (
            "gradient MPC, MyoHand baoding (paper preset)",
            f"cost {float(paper['start_cost']):.4f} → {float(paper['final_cost']):.4f}: the balls swapped and held",
            "[mpc](docs/mpc.md#measured)",
        ),
        (
            "the same swap on a 2-core CPU (`--preset fast`)",
            f"cost {float(fast['start_cost']):.4f} → {float(fast['final_cost']):.4f}, swapped and held, in "
            f"{float(fast['since_start_s']) / 60:.0f} min from a cold start (paper preset: "
            f"{float(paper['wall_s']) / 3600:.1f} h)",
            "[mpc](docs/mpc.md#measured)",
        ),
    ]
    out = ["| claim | measured | where |", "|---|---|---|"]
    out += [f"| {claim} | {measured} | {where} |" for claim, measured, where in rows]
    return "\n".join(out) + "\n"


def _sig(x: float, n: int = 3) -> str:
    """``x`` to ``n`` significant figures, trailing zeros kept (0.0800, 1.04, 24.0, 177)."""
    return f"{x:#.{n}g}".rstrip(".")


def _exp(x: float) -> str:
    """``x`` as 3.9e-6, one decimal, no padded exponent."""
    m, e = f"{x:.1e}".split("e")
    return f"{m}e{int(e)}"


def _num(s: str) -> float | None:
    """A CSV cell as a number; None where it is empty or NaN."""
    if s in ("", "nan", "-1"):
        return None
    x = float(s)
    return None if x != x else x


def speed_jit() -> str:
    """Per variant of the cube toss's backward program: trace, lowering, compile and run time."""
    out = [
        "| backward program | trace | lower to StableHLO | XLA compile | total | HLO lines | run |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in _rows("benchmark_jit.csv"):
        if r["program"] != "backward":
            continue
        cells = []
        for key, fmt in (("trace_s", "{:.1f} s"), ("lower_s", "{:.1f} s"), ("compile_s", "{:.1f} s")):
            x = _num(r[key])
            cells.append("—" if x is None else fmt.format(x))
        cells.append(f"**{float(r['jit_s']):.1f} s**" if "warm" in r["variant"] else f"{float(r['jit_s']):.1f} s")
        hlo, run = _num(r["hlo_lines"]), _num(r["run_s"])
        cells.append("—" if hlo is None else f"{int(hlo):,}".replace(",", " "))
        cells.append("—" if run is None else f"{run:.2f} s")
        out.append(f"| {r['variant']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


VJP_GRADIENTS = ("unroll", "unroll, iterations stored", "implicit", "implicit, MJX's stages")


def speed_vjp() -> str:
    """One evaluation of the forward dynamics: its forward, gradient (reverse mode) and JVP (one
    tangent, forward mode) times and kernel counts."""
    whole = {(r["state"], r["gradient"]): r for r in _rows("benchmark_vjp.csv") if r["stages"] == "dynamics.forward"}
    thunks = {(r["state"], r["gradient"]): r for r in _rows("benchmark_vjp_thunks.csv")}
    out = [
        "| state | solver gradient | forward | gradient | ratio | JVP | ratio | forward thunks | "
        "gradient thunks (stack / read / copy) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for state in dict.fromkeys(s for s, _ in whole):
        for grad in VJP_GRADIENTS:
            w, t = whole[(state, grad)], thunks[(state, grad)]
            fwd, g = float(w["forward_us"]), float(w["gradient_us"])
            parts = " / ".join(
                str(int(float(t[k])))
                for k in ("gradient_stack a loop residual", "gradient_read a loop residual", "gradient_copy")
            )
            jvp = float(w["jvp_us"])
            out.append(
                f"| {state} | {grad} | {fwd:.1f} µs | {g:.0f} µs | {g / fwd:.1f}× | {jvp:.0f} µs | {jvp / fwd:.1f}× | "
                f"{int(float(t['forward_thunks']))} | {int(float(t['gradient_thunks']))} ({parts}) |"
            )
    return "\n".join(out) + "\n"


def speed_kinematics_rule() -> str:
    """DiffMJX's kinematics and com_pos against MJX's own, one evaluation with the implicit solver
    gradient, same run of ``benchmark_vjp`` (whole evaluations timed in alternation)."""
    whole = {(r["state"], r["gradient"]): r for r in _rows("benchmark_vjp.csv") if r["stages"] == "dynamics.forward"}
    thunks = {(r["state"], r["gradient"]): r for r in _rows("benchmark_vjp_thunks.csv")}
    out = [
        "| state | kinematics, com_pos, fwd_velocity | forward | gradient | gradient ÷ forward | JVP ÷ forward "
        "| gradient thunks | pads |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for state in ("free flight", "contact"):
        for grad, who in (("implicit, MJX's stages", "MJX's"), ("implicit", "DiffMJX's")):
            w, t = whole[(state, grad)], thunks[(state, grad)]
            fwd, g, jvp = float(w["forward_us"]), float(w["gradient_us"]), float(w["jvp_us"])
            out.append(
                f"| {state} | {who} | {fwd:.1f} µs | {g:.0f} µs | {g / fwd:.1f}× | {jvp / fwd:.1f}× "
                f"| {int(float(t['gradient_thunks']))} | {int(float(t['gradient_pad (transpose of a slice)']))} |"
            )
    return "\n".join(out) + "\n"


def speed_vjp_myohand() -> str:
    """One evaluation on MyoHand (``benchmark_vjp --model myohand``): forward, gradient and JVP of
    the accelerations and activation rates, timed in alternation within each state, and the thunks."""
    out = [
        "| MyoHand state (loaded rows) | kinematics, com_pos, fwd_velocity | forward | gradient "
        "| gradient ÷ forward | JVP ÷ forward | thunks: forward, gradient |",
        "|---|---|---|---|---|---|---|",
    ]
    who = {"implicit": "DiffMJX's", "implicit, MJX's stages": "MJX's"}
    for r in _rows("benchmark_vjp_myohand.csv"):
        fwd, g, jvp = float(r["forward_us"]), float(r["gradient_us"]), float(r["jvp_us"])
        out.append(
            f"| {r['state']} ({r['loaded_rows']}) | {who[r['gradient']]} | {fwd / 1e3:.2f} ms | {g / 1e3:.2f} ms "
            f"| {g / fwd:.1f}× | {jvp / fwd:.1f}× | {int(float(r['forward_thunks']))}, {int(float(r['gradient_thunks']))} |"
        )
    return "\n".join(out) + "\n"


def speed_velocity_rules_jit() -> str:
    """The cube toss's backward programs the same day before the rotation and velocity-stage rules
    (``benchmark_jit_before_velocity_rules.csv``, the commit before, run from a worktree) and after
    (``benchmark_jit.csv``): cold JIT, lowered program's lines and run time."""
    jit = {
        t: {r["variant"]: r for r in _rows(f"benchmark_jit{t}.csv") if r["program"] == "backward"}
        for t in ("_before_velocity_rules", "")
    }
    out = [
        "| backward program | JIT before | JIT after | lines before | lines after | run before | run after |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in ("default", "implicit solve", "mjx_euler dt 1e-3"):
        b, a = (jit[t][variant] for t in ("_before_velocity_rules", ""))
        out.append(
            f"| {variant} | {float(b['jit_s']):.1f} s | {float(a['jit_s']):.1f} s | {int(float(b['hlo_lines']))} "
            f"| {int(float(a['hlo_lines']))} | {float(b['run_s']):.3f} s | {float(a['run_s']):.3f} s |"
        )
    return "\n".join(out) + "\n"


def kink_bracket() -> str:
    """``linearize`` of the pushed box from the random starts in contact
    (``experiments.linearize_benchmark --random``): before kink control's bracket
    (``linearize_random_before_bracket.csv``), with it (``linearize_random_before_stage_brackets.csv``,
    rerun beside the next) and with the stages' brackets too (``linearize_random.csv``): per kind of
    start, medians of the solve's steps, the time per period and its ratio to the plain forward,
    and the Jacobians' errors (median / 90th percentile / worst)."""
    runs = [_rows(f"linearize_random{s}.csv") for s in ("_before_bracket", "_before_stage_brackets", "")]
    kinds = list(dict.fromkeys(r["kind"] for r in runs[-1]))

    def col(rows, kind, key):
        return [float(r[key]) for r in rows if r["kind"] == kind]

    def spread(xs):
        return " / ".join(f"{x:.1e}" for x in (_median(xs), _linear_quantile(xs, 0.9), max(xs)))

    out = [
        "| starts | figure | before the bracket | the bracket (rerun) | the stages' brackets |",
        "|---|---|---|---|---|",
    ]
    for kind in kinds:
        n = len(col(runs[-1], kind, "steps"))
        label = f"{kind} ({n})"
        for key, name, fmt in (
            ("steps", "steps of the solve (median)", lambda x: f"{x:.0f}"),
            ("ms_per_period", "ms per period (median)", lambda x: f"{x:.1f} ms"),
            ("over_forward", "÷ plain forward (median)", lambda x: f"{x:.1f}×"),
        ):
            *rest, last = (fmt(_median(col(rows, kind, key))) for rows in runs)
            out.append(f"| {label} | {name} | {' | '.join(rest)} | **{last}** |")
        for key, name in (("error_A", "error of A"), ("error_B", "error of B")):
            cells = " | ".join(spread(col(rows, kind, key)) for rows in runs)
            out.append(f"| {label} | {name} (median / p90 / worst) | {cells} |")
    return "\n".join(out) + "\n"


def speed_rules_fidelity() -> str:
    """The fidelity suite at the defaults before the second round of derivative rules
    (``fidelity_defaults_ten_before_rules_summary.csv``) and after (the run kept as
    ``fidelity_defaults_ten_before_backward_kinks``, the defaults until backsolve's kink control):
    median / p90 / worst relative gradient error per family and over all shots."""
    before = {r["family"]: r for r in _rows("fidelity_defaults_ten_before_rules_summary.csv")}

    def cells(x: dict) -> str:
        return " / ".join(
            f"{100 * float(x[k]):.2g} %" for k in ("median_rel_error", "p90_rel_error", "worst_rel_error")
        )

    out = ["| family | before the rules | after |", "|---|---|---|"]
    for r in _rows("fidelity_defaults_ten_before_backward_kinks_summary.csv"):
        name = "**all shots**" if r["family"] == "all" else _family(r["family"])
        out.append(f"| {name} | {cells(before[r['family']])} | {cells(r)} |")
    return "\n".join(out) + "\n"


def backward_kinks_toss() -> str:
    """The cube toss's backsolve gradient with Diffrax's backward solve (``backsolve_diffrax``, the
    default until Dec 6) and with kink control in it (``backsolve``, the default), one run of
    ``benchmark_adjoints``: errors over the sweep, backward steps and times."""
    adj = {r["adjoint"]: r for r in _rows("benchmark_adjoints_summary.csv")}
    before, after = adj["backsolve_diffrax"], adj["backsolve"]
    out = ["| cube toss at `Config()` | Diffrax's backward solve | with kink control |", "|---|---|---|"]
    for key, label in (
        ("median_rel_error", "median error over 17 shots"),
        ("max_rel_error", "largest error"),
        ("rel_error_at_u0", "error at u0"),
    ):
        out.append(f"| {label} | {_percent_sig(float(before[key]))} % | {_percent_sig(float(after[key]))} % |")
    out.append(f"| backward evaluations | {before['backward_evaluations']} | **{after['backward_evaluations']}** |")
    for key, label in (("forward_s", "forward run"), ("backward_s", "backward run")):
        out.append(f"| {label} | {float(before[key]):.3f} s | {float(after[key]):.3f} s |")
    b, a = (float(r["backward_over_forward"]) for r in (before, after))
    out.append(f"| backward ÷ forward | {b:.1f}× | **{a:.1f}×** |")
    out.append(f"| first call (cold) | {float(before['first_call_s']):.1f} s | {float(after['first_call_s']):.1f} s |")
    return "\n".join(out) + "\n"


def backward_kinks_fidelity() -> str:
    """The fidelity suite at the defaults with Diffrax's backward solve (the run kept as
    ``fidelity_defaults_ten_before_backward_kinks``), with kink control halving each straddle
    (``..._before_stage_brackets``) and bisecting the stages' brackets (``fidelity_defaults_ten``):
    median / p90 / worst error and backward run time per shot, per family and over all shots."""
    runs = [
        {r["family"]: r for r in _rows(f"fidelity_defaults_ten{name}_summary.csv")}
        for name in ("_before_backward_kinks", "_before_stage_brackets")
    ]
    out = [
        "| family | Diffrax's backward solve: median / p90 / worst | kink control, halving | kink control, "
        "stages' brackets | backward s per shot |",
        "|---|---|---|---|---|",
    ]
    for r in _rows("fidelity_defaults_ten_summary.csv"):
        a, b = (run[r["family"]] for run in runs)
        name = "**all shots**" if r["family"] == "all" else _family(r["family"])
        times = " → ".join(f"{float(x['backward_run_s_per_shot']):.3f}" for x in (a, b, r))
        out.append(f"| {name} | {_errors3(a)} | {_errors3(b)} | {_errors3(r)} | {times} |")
    return "\n".join(out) + "\n"


def jit_library_defaults() -> str:
    """The cube toss's backward JIT at ``diffmjx.Config()`` and at the speed preset, each beside MJX
    Euler's with the same solver settings, one cold ``benchmark_jit`` run (``benchmark_jit_config.csv``)."""
    rows = {(r["variant"], r["program"]): r for r in _rows("benchmark_jit_config.csv")}
    out = [
        "| backward program | trace | lower | compile | JIT | ÷ MJX Euler's | lowered lines | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mine, euler, label in (
        ("Config()", "Config(), mjx_euler dt 1e-3", "`Config()`: `backsolve`, implicit solver gradient"),
        ("default", "mjx_euler dt 1e-3", "speed preset: `checkpoint`, unrolled solve"),
    ):
        ref = float(rows[(euler, "backward")]["jit_s"])
        for variant, name in ((mine, label), (euler, f"{label.split(':')[0]} with MJX's Euler, dt 1e-3")):
            r = rows[(variant, "backward")]
            ratio = f"**{float(r['jit_s']) / ref:.2f}×**" if variant == mine else "1"
            out.append(
                f"| {name} | {float(r['trace_s']):.1f} s | {float(r['lower_s']):.1f} s | {float(r['compile_s']):.1f} s | "
                f"{float(r['jit_s']):.1f} s | {ratio} | {int(float(r['hlo_lines']))} | {float(r['run_s']):.3f} s |"
            )
    return "\n".join(out) + "\n"


def speed_rules_before_after() -> str:
    """Issue 74's benchmarks before the derivative rules (the committed runs they replaced, kept as
    ``*_before_rules.csv``) and after (the current CSVs): the cube toss's backward ÷ forward per
    gradient mode and backsolve's evaluation counts (``benchmark_adjoints``: after is the run kept as
    ``_before_backward_kinks``, the last before backsolve's kink control), the backward JIT against
    MJX Euler's (``benchmark_jit``) and ``linearize``'s time per period (``linearize``)."""
    out = ["| figure | before the rules | after |", "|---|---|---|"]
    tags = ("_before_rules", "_before_backward_kinks")
    adj = {tag: {r["adjoint"]: r for r in _rows(f"benchmark_adjoints_summary{tag}.csv")} for tag in tags}
    for mode in adj[tags[1]]:
        b, a = (float(adj[t][mode]["backward_over_forward"]) for t in tags)
        out.append(f"| cube toss at `Config()`, backward ÷ forward, `{mode}` | {b:.1f}× | **{a:.1f}×** |")
    for key, label in (
        ("forward_evaluations", "forward evaluations"),
        ("backward_evaluations", "backward evaluations"),
    ):
        b, a = (int(float(adj[t]["backsolve"][key])) for t in tags)
        out.append(f"| cube toss, `backsolve`: {label} | {b} | {a} |")
    b, a = (float(adj[t]["backsolve"]["first_call_s"]) for t in tags)
    out.append(f"| cube toss, `backsolve`: first call (cold) | {b:.1f} s | {a:.1f} s |")
    jit = {t: {(r["variant"], r["program"]): r for r in _rows(f"benchmark_jit{t}.csv")} for t in ("_before_rules", "")}
    euler = "mjx_euler dt 1e-3"
    for variant in ("default", "implicit solve"):
        cells = []
        for t in ("_before_rules", ""):
            mine, ref = float(jit[t][(variant, "backward")]["jit_s"]), float(jit[t][(euler, "backward")]["jit_s"])
            cells.append(f"{mine:.1f} s / {ref:.1f} s = {mine / ref:.2f}×")
        out.append(f"| cube toss backward JIT ÷ MJX Euler's (cold), {variant} | {cells[0]} | **{cells[1]}** |")
    for variant in ("default", "implicit solve"):
        b, a = (jit[t][(variant, "backward")] for t in ("_before_rules", ""))
        out.append(
            f"| cube toss backward, {variant}: lowered program's lines; run | {int(float(b['hlo_lines']))}; "
            f"{float(b['run_s']):.2f} s | {int(float(a['hlo_lines']))}; {float(a['run_s']):.2f} s |"
        )
    lin = {t: {(r["regime"], r["method"]): r for r in _rows(f"linearize{t}.csv")} for t in ("_before_rules", "")}
    method = "diffmjx (default tolerances)"
    for regime in dict.fromkeys(g for g, _ in lin[""]):
        b, a = (float(lin[t][(regime, method)]["ms_per_period"]) for t in ("_before_rules", ""))
        ratio = float(lin[""][(regime, method)]["over_forward"])
        out.append(
            f"| `linearize`, pushed box, {regime}: ms per period (÷ forward period) | {b:.3g} ms | "
            f"{a:.3g} ms (**{ratio:.1f}×**) |"
        )
    return "\n".join(out) + "\n"


def _by_code(rows: list[dict], keys: tuple[str, ...]) -> tuple[list[str], dict]:
    """The code versions of a before/after CSV (its ``code`` column, in file order) and its rows
    grouped by ``(code, *keys)``."""
    codes = list(dict.fromkeys(r["code"] for r in rows))
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["code"], *(r[k] for k in keys)), []).append(r)
    return codes, groups


def speed_rules_sysid() -> str:
    """Issue 74's sysid recovery fits before the derivative rules and after, the same day in one
    session (``sysid_recovery_rules_ab.csv``; ``code`` names the commit, ``round`` the run: round 1
    with empty compilation caches, round 2 with warm ones, round 3 the latest commit with
    ``fit.threads=1``): per model and data, round 1's wall time (setup: compilation and first
    evaluation), the LM iterations, the time per iteration after setup (median of the rounds; on one
    thread, round 3's) and the largest parameter error."""
    rows = _rows("sysid_recovery_rules_ab.csv")
    (before, after, one_thread), groups = _by_code(rows, ("model", "noise"))

    def per(r: dict) -> float:  # one iteration's share of the fit, compilation left out
        return (float(r["wall_s"]) - float(r["setup_s"])) / int(r["iterations"])

    def cold(sel: list[dict]) -> dict:
        return next(r for r in sel if r["round"] == "1")

    out = [
        "| model | data | wall time (setup), cold, before | after | after ÷ before | LM iterations, before / after | "
        "s per iteration, before / after (÷) | the same after, on one thread (÷) | "
        "largest parameter error, before / after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, noise in dict.fromkeys((r["model"], r["noise"]) for r in rows):
        b, a = (groups[(c, model, noise)] for c in (before, after))
        wb, wa = float(cold(b)["wall_s"]), float(cold(a)["wall_s"])
        pb, pa = _median([per(r) for r in b]), _median([per(r) for r in a])
        one = groups[(one_thread, model, noise)][0]
        out.append(
            f"| {model} | {'noisy' if noise == '1' else 'noise-free'} | {wb:.1f} s ({float(cold(b)['setup_s']):.1f} s) | "
            f"{wa:.1f} s ({float(cold(a)['setup_s']):.1f} s) | {wa / wb:.2f} | "
            f"{cold(b)['iterations']} / {cold(a)['iterations']} | {pb:.2f} / {pa:.2f} s ({pa / pb:.2f}) | "
            f"{per(one):.2f} s ({per(one) / pb:.2f}), {one['iterations']} iterations | "
            f"{_sig(100 * float(cold(b)['max_rel_error']), 2)} % / {_sig(100 * float(cold(a)['max_rel_error']), 2)} % |"
        )
    for rnd, label in (("1", "cold caches"), ("2", "warm caches")):
        tb, ta = (
            sum(float(r["wall_s"]) for r in rows if r["code"] == c and r["round"] == rnd) for c in (before, after)
        )
        out.append(f"| **all fits**, {label} | | {tb:.0f} s | {ta:.0f} s | **{ta / tb:.2f}** | | | | |")
    return "\n".join(out) + "\n"


def speed_rules_contact() -> str:
    """Issue 74's contact-study plan steps before the derivative rules and after, the same day in one
    session (``contact_mpc_rules_ab.csv``, ``--quick``: two starts per task, four plan steps each, run
    in four rounds, the first with empty compilation caches): per task and method, the closed loops'
    plan-step medians, their median and fastest over the rounds and starts, the largest JIT time and
    the final distance of each start (one round's: the rounds plan the same)."""
    rows = _rows("contact_mpc_rules_ab.csv")
    (before, after), groups = _by_code(rows, ("task", "method"))
    out = [
        "| task | method | ms per plan step, median (fastest), before | after | after ÷ before, median (fastest) | "
        "JIT, largest, before / after | final distances, before / after |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, method in dict.fromkeys((r["task"], r["method"]) for r in rows):
        b, a = (groups[(c, task, method)] for c in (before, after))
        (mb, fb), (ma, fa) = (
            (_median(ms), min(ms)) for ms in ([float(r["ms_per_plan_step"]) for r in sel] for sel in (b, a))
        )
        jb, ja = (max(float(r["jit_s"]) for r in sel) for sel in (b, a))
        first = [[r for r in sel if r["round"] == sel[0]["round"]] for sel in (b, a)]  # the rounds plan alike
        db, da = (", ".join(f"{float(r['final_distance_mm']):.0f}" for r in sel) for sel in first)
        out.append(
            f"| {task} | {method} | {mb:.0f} ({fb:.0f}) | {ma:.0f} ({fa:.0f}) | {ma / mb:.2f} ({fa / fb:.2f}) | "
            f"{jb:.0f} s / {ja:.0f} s | {db} mm / {da} mm |"
        )
    return "\n".join(out) + "\n"


def _pareto_row(path: str, method: str) -> dict:
    return next(r for r in _rows(path) if r["method"] == method)


def speed_solver_checkpoint() -> str:
    """What rematerialising the unrolled solve's iterations changed: the same run's evaluation
    counts and times, and across runs the ratios to the implicit gradient, which it does not touch."""
    thunks = {(r["state"], r["gradient"]): int(float(r["gradient_thunks"])) for r in _rows("benchmark_vjp_thunks.csv")}
    vjp = {
        (r["state"], r["gradient"]): float(r["gradient_us"])
        for r in _rows("benchmark_vjp.csv")
        if r["stages"] == "dynamics.forward"
    }
    states = ("free flight", "contact")

    def pair(d: dict, grad: str, fmt: str) -> str:
        return " / ".join(fmt.format(d[(s, grad)]) for s in states)

    def ratio(path: str, method: str) -> float:
        implicit = float(_pareto_row(path, "tsit5 tol 1e-08 implicit solve")["backward_run_s"])
        return float(_pareto_row(path, method)["backward_run_s"]) / implicit

    full, quick = "benchmark_pareto_full.csv", "benchmark_pareto.csv"
    euler = "mjx_euler dt 3.0e-05"
    jit = {}
    for name in ("benchmark_jit_before_solver_checkpoint.csv", "benchmark_jit.csv"):
        got = {r["variant"]: float(r["jit_s"]) for r in _rows(name) if r["program"] == "backward"}
        jit[name] = f"{got['default']:.1f} / {got['mjx_euler dt 1e-3']:.1f} s"
    out = [
        "| | iterations stored (before) | rematerialised (now) | source |",
        "|---|---|---|---|",
        f"| gradient thunks, one evaluation, free flight / contact | {pair(thunks, 'unroll, iterations stored', '{}')} "
        f"| {pair(thunks, 'unroll', '{}')} | `benchmark_vjp_thunks.csv` (same run) |",
        f"| gradient of one evaluation, free flight / contact | {pair(vjp, 'unroll, iterations stored', '{:.0f}')} µs "
        f"| {pair(vjp, 'unroll', '{:.0f}')} µs | `benchmark_vjp.csv` (same run) |",
        f"| cube toss backward run, Tsit5 1e-8 ÷ implicit 1e-8 (same run) | {ratio(full, 'tsit5 tol 1e-08'):.2f}× "
        f"| {ratio(quick, 'tsit5 tol 1e-08'):.2f}× | full grid, quick grid |",
        f"| cube toss backward run, MJX Euler dt 3e-5 ÷ implicit 1e-8 (same run) | {ratio(full, euler):.1f}× "
        f"| {ratio(quick, euler):.1f}× | full grid, quick grid |",
        f"| backward memory estimate, MJX Euler dt 3e-5 | {float(_pareto_row(full, euler)['backward_memory_mb']):.0f} MB "
        f"| {float(_pareto_row(quick, euler)['backward_memory_mb']):.0f} MB | full grid, quick grid |",
        f"| backward JIT, cold, default / MJX Euler dt 1e-3 | {jit['benchmark_jit_before_solver_checkpoint.csv']} "
        f"| {jit['benchmark_jit.csv']} | `benchmark_jit_before_solver_checkpoint.csv`, `benchmark_jit.csv` |",
    ]
    return "\n".join(out) + "\n"


def speed_backsolve_args() -> str:
    """The backsolve toss before and after it stopped carrying an adjoint for constants (one session)."""
    rows = _rows("benchmark_backsolve_args.csv")
    codes = list(dict.fromkeys(r["code"] for r in rows))
    get = {(r["code"], r["what"]): r for r in rows}

    def col(code: str) -> list[str]:
        fwd, vg = get[(code, "forward")], get[(code, "value and gradient")]
        vm = get[(code, "value and gradient vmapped")]
        f, g = float(fwd["run_s"]), float(vg["run_s"])
        return [
            f"{g:.3f} s",
            f"{f:.3f} s",
            f"{(g - f) / f:.1f}",
            f"{float(vg['jit_s']):.1f} s",
            f"{float(vm['per_call_ms']) / 1e3:.3f} s ({float(vm['jit_s']):.1f} s)",
        ]

    labels = (
        "value and gradient",
        "forward",
        "backward ÷ forward",
        "cold JIT of the gradient",
        f"vmapped batch of {get[(codes[0], 'value and gradient vmapped')]['batch']}, per toss (JIT)",
    )
    before, after = col(codes[0]), col(codes[1])
    out = ["| cube toss at `Config()` (backsolve) | before | after |", "|---|---|---|"]
    out += [f"| {label} | {b} | {a} |" for label, b, a in zip(labels, before, after)]
    return "\n".join(out) + "\n"


PARETO_FAMILIES = {
    "mjx_euler": "MJX Euler",
    "mjx_implicitfast": "MJX implicitfast",
    "mjx_rk4": "MJX RK4",
    "tsit5": "Tsit5 (speed preset)",
    "dopri5": "Dopri5",
    "dopri8": "Dopri8",
    "bosh3": "Bosh3",
    "heun": "Heun",
    "tsit5 backsolve": "Tsit5, backsolve",
    "tsit5 implicit": "Tsit5, implicit solver gradient",
}


def _setting(method: str) -> str:
    """``mjx_euler dt 3.0e-05`` -> ``dt 3e-5``; ``tsit5 tol 1e-08 backsolve`` -> ``1e-8``."""
    words = method.split()
    kind = "dt" if "dt" in words else "tol"
    m, e = f"{float(words[words.index(kind) + 1]):.1e}".split("e")
    value = f"{m.rstrip('0').rstrip('.')}e{int(e)}"
    return f"dt {value}" if kind == "dt" else value


def _seconds(x: float) -> str:
    return f"{x:.3f} s" if x < 1 else f"{x:.2f} s"


def _pareto(summary: str, grid: str) -> str:
    """Per family the reliable pick at <= 2 % gradient error; a family without one says why."""
    rows = _rows(grid)
    out = [
        "| family | reliable pick | rel. error | forward run | backward run | backward JIT | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in _rows(summary):
        name = PARETO_FAMILIES.get(r["family"], r["family"])
        if not r["reliable_method"]:
            ok = [x for x in rows if x["family"] == r["family"] and x["budget_exhausted"] == "False"]
            errs = [100 * float(x["rel_error"]) for x in ok]
            tail = ", then out of step budget" if len(ok) < sum(x["family"] == r["family"] for x in rows) else ""
            why = (
                f"none ({min(errs):.1f}–{max(errs):.1f} % at {_setting(ok[0]['method'])} to "
                f"{_setting(ok[-1]['method'])}{tail})"
            )
            out.append(f"| {name} | {why} | | | | | |")
            continue
        err = 100 * float(r["reliable_rel_error"])
        err_text = f"{err:.2f}" if err < 1 else f"{err:.1f}"
        speedup = float(r["reliable_speedup"])
        sp = f"{speedup:.1f}×" if speedup >= 1 else f"{speedup:.2f}×"
        out.append(
            f"| {name} | {_setting(r['reliable_method'])} | {err_text} % | "
            f"{_seconds(float(r['reliable_forward_run_s']))} | {_seconds(float(r['reliable_backward_run_s']))} | "
            f"{float(r['reliable_backward_jit_s']):.1f} s | {f'**{sp}**' if speedup >= 10 else sp} |"
        )
    return "\n".join(out) + "\n"


def speed_pareto_full() -> str:
    """The full grid's reliable picks (54 methods)."""
    return _pareto("benchmark_pareto_full_summary.csv", "benchmark_pareto_full.csv")


def speed_pareto_quick() -> str:
    """The quick grid's reliable picks."""
    return _pareto("benchmark_pareto_summary.csv", "benchmark_pareto.csv")


def _jit_medians(path: str) -> dict[str, float]:
    """Median backward JIT per family over a grid's settings."""
    rows = _rows(path)
    return {
        f: _median([float(r["backward_jit_s"]) for r in rows if r["family"] == f])
        for f in dict.fromkeys(r["family"] for r in rows)
    }


def _jit_range(path: str, family: str) -> tuple[float, float]:
    xs = [float(r["backward_jit_s"]) for r in _rows(path) if r["family"] == family]
    return min(xs), max(xs)


def speed_targets() -> str:
    """The speed issue's targets against the measurements of this page."""
    full, quick = "benchmark_pareto_full.csv", "benchmark_pareto.csv"
    qs = {r["family"]: r for r in _rows("benchmark_pareto_summary.csv")}
    fs = {r["family"]: r for r in _rows("benchmark_pareto_full_summary.csv")}
    sp = {f: float(r["reliable_speedup"]) for f, r in qs.items()}
    best_full = max((float(r["reliable_speedup"] or 0), f) for f, r in fs.items())
    short = {"tsit5": "Tsit5", "tsit5 implicit": "implicit", "tsit5 backsolve": "backsolve"}
    best_full_names = [
        short.get(f, PARETO_FAMILIES.get(f, f)) + " " + _setting(r["reliable_method"])
        for f, r in fs.items()
        if r["reliable_speedup"] and round(float(r["reliable_speedup"]), 1) == round(best_full[0], 1)
    ]
    row1 = (
        f"quick: MJX Euler dt 3e-5 {float(qs['mjx_euler']['reliable_backward_run_s']):.2f} s; Tsit5 1e-8 "
        f"{float(qs['tsit5']['reliable_backward_run_s']):.3f} s, **{sp['tsit5']:.1f}×**; with the implicit solver "
        f"gradient {float(qs['tsit5 implicit']['reliable_backward_run_s']):.3f} s, **{sp['tsit5 implicit']:.1f}×**. "
        f"Full grid (before the solver checkpoint): {' and '.join(best_full_names)} **{best_full[0]:.1f}×**"
    )
    met1 = (
        f"with the implicit solver gradient {'yes' if sp['tsit5 implicit'] >= 10 else 'no'} "
        f"({sp['tsit5 implicit']:.1f}×); Tsit5 1e-8 {'yes' if sp['tsit5'] >= 10 else 'no'} ({sp['tsit5']:.1f}×)"
    )
    jit = {r["variant"]: float(r["jit_s"]) for r in _rows("benchmark_jit.csv") if r["program"] == "backward"}
    cold, warm = jit["default"], jit["default, fresh process, warm persistent cache"]
    t_lo, t_hi = _jit_range(full, "tsit5")
    i_lo, i_hi = _jit_range(full, "tsit5 implicit")
    qt_lo, qt_hi = _jit_range(quick, "tsit5")
    qi_lo, qi_hi = _jit_range(quick, "tsit5 implicit")
    row2 = (
        f"full grid: cold {t_lo:.0f}–{t_hi:.0f} s for Tsit5 (implicit {i_lo:.0f}–{i_hi:.0f} s); quick: "
        f"{qt_lo:.0f}–{qt_hi:.0f} s (implicit {qi_lo:.0f}–{qi_hi:.0f} s); `benchmark_jit.csv`: {cold:.1f} s cold, "
        f"{warm:.1f} s in a later process with the persistent cache"
    )
    met2 = f"cold {'yes' if cold <= 20 else 'no'}; from the second run on {'yes' if warm <= 20 else 'no'}"
    mf, mq = _jit_medians(full), _jit_medians(quick)
    eu = jit["mjx_euler dt 1e-3"]
    ratios_t = [mf["tsit5"] / mf["mjx_euler"], mq["tsit5"] / mq["mjx_euler"], cold / eu]
    ratios_i = [
        mf["tsit5 implicit"] / mf["mjx_euler"],
        mq["tsit5 implicit"] / mq["mjx_euler"],
        jit["implicit solve"] / eu,
    ]
    row3 = (
        f"medians over the settings, full grid: Tsit5 {mf['tsit5']:.1f} s / Euler {mf['mjx_euler']:.1f} s = "
        f"{ratios_t[0]:.2f}×; implicit {mf['tsit5 implicit']:.1f} / {mf['mjx_euler']:.1f} = {ratios_i[0]:.2f}×. "
        f"Quick: {mq['tsit5']:.1f} / {mq['mjx_euler']:.1f} = {ratios_t[1]:.2f}×; implicit "
        f"{mq['tsit5 implicit']:.1f} / {mq['mjx_euler']:.1f} = {ratios_i[1]:.2f}×. `benchmark_jit.csv`: "
        f"{cold:.1f} / {eu:.1f} = {ratios_t[2]:.2f}×; implicit {jit['implicit solve']:.1f} / {eu:.1f} = "
        f"{ratios_i[2]:.2f}×"
    )
    lib = {r["variant"]: float(r["jit_s"]) for r in _rows("benchmark_jit_config.csv") if r["program"] == "backward"}
    mine, theirs = lib["Config()"], lib["Config(), mjx_euler dt 1e-3"]
    row3 += (
        f". At `Config()` (`backsolve`, implicit), each with its own Euler (`benchmark_jit_config.csv`): "
        f"{mine:.1f} / {theirs:.1f} = {mine / theirs:.2f}×"
    )

    def verdict(rs: list[float]) -> str:
        lo, hi = min(rs), max(rs)
        if hi <= 1.2:
            return "yes"
        if lo > 1.2:
            return "no"
        return f"borderline ({lo:.2f}–{hi:.2f}×, around the target within the ±20 % JIT noise)"

    met3 = (
        f"Tsit5 {verdict(ratios_t)}; implicit {verdict(ratios_i)}; `Config()` "
        f"{'yes' if mine / theirs <= 1.2 else 'no'} ({mine / theirs:.2f}×)"
    )

    def bf(path: str, method: str) -> float:
        r = _pareto_row(path, method)
        return float(r["backward_run_s"]) / float(r["forward_run_s"])

    adj = {r["adjoint"]: float(r["backward_over_forward"]) for r in _rows("benchmark_adjoints_summary.csv")}
    vjp = [
        float(r["gradient_us"]) / float(r["forward_us"])
        for r in _rows("benchmark_vjp.csv")
        if r["stages"] == "dynamics.forward" and r["gradient"] == "implicit"
    ]
    q = {
        "Tsit5 1e-8": bf(quick, "tsit5 tol 1e-08"),
        "implicit 1e-8": bf(quick, "tsit5 tol 1e-08 implicit solve"),
        "MJX Euler dt 3e-5": bf(quick, "mjx_euler dt 3.0e-05"),
    }
    f4 = {
        "Tsit5": bf(full, "tsit5 tol 1e-08"),
        "Bosh3": bf(full, "bosh3 tol 1e-05"),
        "implicit": bf(full, "tsit5 tol 1e-08 implicit solve"),
        "MJX Euler": bf(full, "mjx_euler dt 3.0e-05"),
    }
    row4 = (
        "quick: "
        + ", ".join(f"{k} {v:.1f}×" for k, v in q.items())
        + ". Full grid, before the solver checkpoint: "
        + ", ".join(f"{k} {v:.1f}×" for k, v in f4.items())
        + f". Default toss at `Config()` (`benchmark_adjoints_summary.csv`): backsolve {adj['backsolve']:.1f}×, "
        f"`adjoint=sensitivity` {adj['sensitivity']:.1f}×. One evaluation's gradient is "
        f"{min(vjp):.1f}–{max(vjp):.1f}× its forward with `implicit` (`benchmark_vjp.csv`)"
    )
    best4 = min([*q.values(), *f4.values(), adj["backsolve"], adj["sensitivity"]])
    met4 = (
        "yes"
        if best4 <= 4
        else f"no (best {best4:.1f}×); a reliable ≤ 4× needs a cheaper reverse mode of MJX's stages "
        "([where backward run time goes](#where-backward-run-time-goes))"
    )
    mem = {(r["horizon_s"], r["remat"]): float(r["backward_memory_mb"]) for r in _rows("benchmark_scaling_memory.csv")}
    h = sorted({int(k[0]) for k in mem})
    lo, hi = str(h[0]), str(h[-1])
    grow = mem[(hi, "True")] - mem[(lo, "True")]
    rel = grow / mem[(lo, "True")]
    row5 = (
        f"remat: +{grow:.2f} MB (+{100 * rel:.0f} % of {mem[(lo, 'True')]:.2f} MB); without: "
        f"{mem[(hi, 'False')] / mem[(lo, 'False')]:.1f}×"
    )
    met5 = f"absolute {'yes' if grow < 1 else 'no'}, relative {'yes' if rel <= 0.2 else 'no'}"
    vm = {r["mode"]: float(r["ratio"]) for r in _rows("benchmark_scaling_vmap_summary.csv")}
    row6 = f"{vm['forward']:.0f}× forward, {vm['gradient']:.1f}× gradient (CPU lockstep)"
    met6 = "yes" if max(vm.values()) <= 1.3 else "no"
    out = [
        "| target | measured | met? |",
        "|---|---|---|",
        f"| at ≤ 2 % error, backward ≥ 10× faster than the best fixed-step MJX | {row1} | {met1} |",
        f"| backward JIT ≤ 20 s | {row2} | {met2} |",
        f"| backward JIT ≤ 1.2× MJX Euler's, same run | {row3} | {met3} |",
        f"| backward run ≤ 4× forward | {row4} | {met4} |",
        f"| memory flat in horizon (≤ 20 % from {lo} s to {hi} s) | {row5} | {met5} |",
        f"| vmap batch ≤ 1.3× slowest env | {row6} | {met6} |",
    ]
    return "\n".join(out) + "\n"


def speed_memory() -> str:
    """Backward memory, run and JIT time against the horizon, with and without ``remat``."""
    rows = {(r["horizon_s"], r["remat"]): r for r in _rows("benchmark_scaling_memory.csv")}
    out = [
        "| horizon | memory, remat off | memory, remat on | backward run off / on | backward JIT off / on |",
        "|---|---|---|---|---|",
    ]
    for h in dict.fromkeys(k[0] for k in rows):
        off, on = rows[(h, "False")], rows[(h, "True")]
        out.append(
            f"| {h} s | {_sig(float(off['backward_memory_mb']))} MB | {_sig(float(on['backward_memory_mb']))} MB | "
            f"{float(off['backward_run_s']):.2f} / {float(on['backward_run_s']):.2f} s | "
            f"{float(off['backward_jit_s']):.0f} / {float(on['backward_jit_s']):.0f} s |"
        )
    return "\n".join(out) + "\n"


def speed_vmap() -> str:
    """The uneven batch of balls: the vmapped batch against its members run alone."""
    n = len({r["env"] for r in _rows("benchmark_scaling_vmap.csv")})
    out = [
        f"| | vmap batch | slowest env alone | all {n} alone, one after another | batch / slowest |",
        "|---|---|---|---|---|",
    ]
    for r in _rows("benchmark_scaling_vmap_summary.csv"):
        mode = "value and gradient" if r["mode"] == "gradient" else r["mode"]
        out.append(
            f"| {mode} | {_sig(float(r['batch_run_s']))} s | {_sig(float(r['slowest_alone_s']))} s | "
            f"{_sig(float(r['sum_alone_s']))} s | {float(r['ratio']):.2g}× |"
        )
    return "\n".join(out) + "\n"


def speed_device() -> str:
    """The device benchmark: this CPU against one H200, with and without ``enable_gpu()``'s flags.

    A dash: not measured there (not run, or cut by the lent machine's time budget). Cold JIT times
    come from the compile pass where there was one (on the GPU machine, every program compiled in
    parallel with the others: the smallest of its compiles)."""
    cpu = _rows("benchmark_device_cpu.csv")
    gpu = _rows("benchmark_device_h200.csv")
    now = _rows("benchmark_device_h200_rules.csv")  # a second lent H200, at the derivative rules' commit
    columns = ((cpu, "default"), (gpu, "default"), (gpu, "graphs"), (now, "graphs"))

    def find(rows, variant, what, batch="", pass_="measure"):
        return [
            r
            for r in rows
            if r["variant"] == variant
            and r["what"] == what
            and r["pass"] == pass_
            and (not batch or r["batch"] == batch)
        ]

    def cell(fn):
        def one(col):
            try:
                return fn(*col)
            except (IndexError, KeyError, ValueError, TypeError):
                return "—"

        return [one(c) for c in columns]

    def call(what, batch="1"):
        return lambda rows, v: f"{float(find(rows, v, what, batch)[0]['per_call_ms']):.2f} ms"

    def vmapped(rows, v):
        a, b = (float(find(rows, v, "diffmjx.forward vmapped", n)[0]["per_call_ms"]) for n in ("64", "1024"))
        return f"{a:.2g} / {b:.2g} ms"

    def toss_forward(rows, v):
        r = find(rows, v, "forward")[0]
        return f"{_sig(float(r['run_s']))} s ({int(float(r['accepted']))} + {int(float(r['rejected']))})"

    def run(what, bold=False):
        def f(rows, v):
            r = find(rows, v, what)[0]
            text = f"{_sig(float(r['run_s']))} s"
            if int(r["repeats"]) < 3:
                text += f" (median of {r['repeats']})"
            return f"**{text}**" if bold else text

        return f

    def batched(what):
        def f(rows, v):
            r = find(rows, v, what)[0]
            return f"{r['batch']}: {float(r['per_call_ms']) / 1e3:.2f} s ({float(r['run_s']):.1f} s in all)"

        return f

    def cold(what, fmt):
        def f(rows, v):
            compiled = find(rows, v, what, pass_="compile")
            if compiled:
                return fmt.format(min(float(r["jit_s"]) for r in compiled)) + "\\*"
            return fmt.format(float(find(rows, v, what)[0]["jit_s"]))

        return f

    conv, lib, paper = (
        "Adam step, DiffMJX + CFD, converged solve",
        "Adam step, DiffMJX + CFD, library setting",
        "Adam step, DiffMJX + CFD, paper solver",
    )
    table = (
        ("`mjx.forward`, one call", call("mjx.forward")),
        ("`diffmjx.forward`, one call", call("diffmjx.forward")),
        ("its gradient (of the accelerations)", call("diffmjx.forward gradient")),
        ("`diffmjx.forward` vmapped over 64 / 1024", vmapped),
        ("cube toss forward (accepted + rejected steps)", toss_forward),
        ("cube toss value and gradient", run("value and gradient")),
        ("toss gradient vmapped: batch, per toss", batched("value and gradient vmapped")),
        (
            "MJX Euler dt 3e-5, value and gradient: batch, per toss",
            batched("MJX Euler dt 3e-5, value and gradient vmapped"),
        ),
        ("sysid Adam step, library setting (converged solve, `deepest`)", run(lib, bold=True)),
        ("sysid Adam step, converged solve, MJX's plane–box rule", run(conv)),
        ("sysid Adam step, paper's solver", run(paper)),
        ("cold JIT of the toss gradient", cold("value and gradient", "{:.1f} s")),
        ("cold JIT of the sysid step (converged solve)", cold(conv, "{:.0f} s")),
    )
    out = [
        "| | CPU, 2 cores | H200, XLA defaults | H200, `enable_gpu()` | H200, `enable_gpu()`, 87fa88c |",
        "|---|---|---|---|---|",
    ]
    out += [f"| {label} | " + " | ".join(cell(fn)) + " |" for label, fn in table]
    return "\n".join(out) + "\n"


def speed_device_rules() -> str:
    """The derivative rules on a GPU: the same programs with DiffMJX's kinematics and com_pos stages
    and with MJX's own (``benchmark_device --variants graphs,graphs-mjx-stages``), one H200 run."""
    rows = [r for r in _rows("benchmark_device_h200_rules.csv") if r["what"] != "failed"]

    def get(variant, what, batch, pass_, key):
        hits = [r for r in rows if (r["variant"], r["what"], r["batch"], r["pass"]) == (variant, what, batch, pass_)]
        return float(hits[0][key]) if hits and hits[0][key] not in ("", "nan") else None

    conv = "Adam step, DiffMJX + CFD, converged solve"
    items = (
        ("`diffmjx.forward`, one call", "diffmjx.forward", "1", "measure", "per_call_ms", "ms"),
        ("its gradient (of the accelerations)", "diffmjx.forward gradient", "1", "measure", "per_call_ms", "ms"),
        ("`diffmjx.forward` vmapped over 1024", "diffmjx.forward vmapped", "1024", "measure", "per_call_ms", "ms"),
        ("cube toss forward", "forward", "1", "measure", "run_s", "s"),
        ("cube toss value and gradient", "value and gradient", "1", "measure", "run_s", "s"),
        ("toss gradient vmapped over 64, per toss", "value and gradient vmapped", "64", "measure", "per_call_ms", "ms"),
        ("sysid Adam step, converged solve", conv, "64", "measure", "run_s", "s"),
        ("cold JIT of the toss gradient\\*", "value and gradient", "1", "compile", "jit_s", "s"),
        ("cold JIT of the sysid step (converged solve)\\*", conv, "64", "compile", "jit_s", "s"),
    )
    out = ["| | DiffMJX's stages (the rules) | MJX's own stages | rules / MJX's |", "|---|---|---|---|"]
    for label, what, batch, pass_, key, unit in items:
        a, b = (get(v, what, batch, pass_, key) for v in ("graphs", "graphs-mjx-stages"))
        cells = [f"{_sig(x)} {unit}" if x is not None else "—" for x in (a, b)]
        ratio = f"{a / b:.2f}" if a is not None and b is not None else "—"
        out.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(out) + "\n"


def sysid_touchdown() -> str:
    """The finger and box fitted with MuJoCo's default solimp and with solimp[0] = 0
    (``experiments.sysid_touchdown``): losses, errors and time per Levenberg-Marquardt step."""
    rows = _rows("sysid_touchdown.csv")
    names = {
        "default": "MuJoCo's default (0.9 at touch)",
        "saltation": "MuJoCo's default, with the saltation term",
        "saltation_coarse": "MuJoCo's default, the term at `saltation_resolution` 1e-3",
        "solimp0": "`solimp[0]` = 0",
    }
    out = [
        "| `solimp`, derivatives | loss at the truth | loss: start, step 2, 4, last | largest error after the last "
        "step | dampings' errors | median s per step |",
        "|---|---|---|---|---|---|",
    ]
    for variant in names:
        rs = sorted((r for r in rows if r["variant"] == variant), key=lambda r: int(r["step"]))
        if not rs:
            continue
        last = rs[-1]
        losses = ", ".join(_exp(float(rs[k]["loss"])) for k in (0, 2, 4, len(rs) - 1))

        def pct(x, sign="+"):  # one decimal, or two significant digits below 0.1 %
            v = 100 * float(x)
            return f"{v:{sign}.1f} %" if abs(v) >= 0.1 else f"{v:{sign}.2g} %"

        out.append(
            f"| {names[variant]} | {_exp(float(last['loss_at_truth']))} | {losses} (step {last['step']}) "
            f"| {pct(last['max_rel_error'], '')} "
            f"| {pct(last['knuckle_damping_error'])}, {pct(last['joint_damping_error'])} "
            f"| {_median([float(r['wall_s']) for r in rs[1:]]):.0f} |"
        )
    return "\n".join(out) + "\n"


def sysid_floor() -> str:
    """The legged body's loss at the true values: DiffMJX per capsule rule and tolerance, the C engine
    per step, the data's own convergence (``experiments.sysid_floor``)."""
    rows = _rows("sysid_floor.csv")
    out = [
        "| simulation | loss at the truth | worst five of the segments' share | segments out of step budget |",
        "|---|---|---|---|",
    ]
    engine = [r for r in rows if r["kind"] == "c_engine"]
    for k, r in enumerate(engine):  # the first at the data's own step
        label = f"C engine, RK4 at {1e3 * float(r['step']):g} ms" + (" (the data's own step)" if k == 0 else "")
        out.append(f"| {label} | {_exp(float(r['loss_at_truth']))} | - | - |")
    for r in rows:
        if r["kind"] == "fit":
            rule = r.get("capsule_capsule") or "paired"
            first = f" ({r['first_exhausted']})" if r["first_exhausted"] else ""
            out.append(
                f"| DiffMJX, `capsule_capsule={rule}`, rtol {float(r['rtol']):g} | {_exp(float(r['loss_at_truth']))} "
                f"| {100 * float(r['worst5_share']):.0f} % | {r['exhausted_segments']} of {r['segments']}{first} |"
            )
    data = [r for r in rows if r["kind"] == "data"]
    if data:
        changes = ", ".join(f"{float(r['max_qpos_change']):.3g}" for r in data)
        out.append("")
        out.append(
            "Largest change of a recorded `qpos` coordinate (a position in m, a hinge angle in rad or a quaternion "
            f"component) when each recording is simulated at a quarter of its step: {changes}."
        )
    return "\n".join(out) + "\n"


def saltation() -> str:
    """Per scene and gradient mode: the relative gradient error with and without the saltation term,
    median and worst over shots (``experiments.saltation``)."""
    rows = _rows("saltation_summary.csv")
    modes = list(dict.fromkeys(r["adjoint"] for r in rows))
    out = [
        "| scene | " + " | ".join(f"`{m}`, with / without the term" for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]

    def cell(r: dict | None) -> str:
        if r is None or int(r["converged_shots"]) == 0:
            return "-"
        return f"{_percent_sig(float(r['median_rel_error']))} % ({_percent_sig(float(r['worst_rel_error']))} %)"

    for scene in dict.fromkeys(r["scene"] for r in rows):
        cells = []
        for mode in modes:
            pick = {r["saltation"]: r for r in rows if r["scene"] == scene and r["adjoint"] == mode}
            cells.append(f"{cell(pick.get('True'))} / {cell(pick.get('False'))}")
        first = rows[[r["scene"] for r in rows].index(scene)]
        shots, ok = int(first["shots"]), int(first["converged_shots"])
        count = f"{shots} shots" if ok == shots else f"{ok} of {shots} shots"
        out.append(f"| {scene} ({count}) | " + " | ".join(cells) + " |")
    out.append("")
    out.append(
        "Relative error of the gradient, median (worst) over the shots whose reference converged (central "
        "differences with steps 1e-6 and 1e-5 within 1 % of each other); the others are left out: their final "
        "state is not differentiable at that scale (a contact grazing), so no error can be measured there."
    )
    return "\n".join(out) + "\n"


def saltation_cost() -> str:
    """Compile and run time of a gradient with and without the saltation term
    (``experiments.saltation --cost``)."""
    rows = _rows("saltation_cost.csv")
    out = [
        "| scene | gradient mode | compile s, with / without | run s, with / without | run ratio |",
        "|---|---|---|---|---|",
    ]
    for scene in dict.fromkeys(r["scene"] for r in rows):
        for mode in dict.fromkeys(r["adjoint"] for r in rows):
            pick = {r["saltation"]: r for r in rows if r["scene"] == scene and r["adjoint"] == mode}
            on, off = pick["True"], pick["False"]
            out.append(
                f"| {scene} | `{mode}` | {float(on['compile_s']):.1f} / {float(off['compile_s']):.1f} "
                f"| {_sig(float(on['run_s']))} / {_sig(float(off['run_s']))} "
                f"| {float(on['run_s']) / float(off['run_s']):.2f}x |"
            )
    return "\n".join(out) + "\n"


def sysid_limits() -> str:
    """A hinge striking (or pressed against) its limits, fitted with MuJoCo's default solimplimit
    and with solimplimit[0] = 0 (``experiments.sysid_limits``): loss at the truth, errors, intervals."""
    rows = _rows("sysid_limits.csv")
    names = {"default": "MuJoCo's default (0.9 at touch)", "solimplimit0": "`solimplimit[0]` = 0"}
    out = [
        "| case | `solimplimit` | fits | loss at the truth (median) | largest error: median, worst "
        "| intervals holding the truth | converged |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in dict.fromkeys(r["case"] for r in rows):
        for variant in names:
            rs = [r for r in rows if r["case"] == case and r["variant"] == variant]
            if not rs:
                continue
            err = [100 * float(r["max_rel_error"]) for r in rs]
            held = sum(r["intervals_hold_truth"] == "True" for r in rs)
            conv = sum(r["converged"] == "True" for r in rs)
            out.append(
                f"| {case} | {names[variant]} | {len(rs)} | {_exp(_median([float(r['loss_at_truth']) for r in rs]))} "
                f"| {_median(err):.2g} %, {max(err):.2g} % | {held} of {len(rs)} | {conv} of {len(rs)} |"
            )
    return "\n".join(out) + "\n"


TOSS_STEP_SETTINGS = {
    "paper": "paper (2 Newton iterations, MJX's plane–box rule, floor 1e-4)",
    "library": "library (converged solve, `deepest`)",
    "library, elliptic": "library, elliptic cone instead of the dataset's pyramidal",
}


def speed_toss_steps() -> str:
    """Tsit5 steps per control period of whole ContactNets tosses, by the phase the cube is in."""
    rows = [r for r in _rows("contactnets_steps_summary.csv") if r["setting"] in TOSS_STEP_SETTINGS]
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    out = [
        "| setting | " + " | ".join(phases) + " | face sliding's share of all steps |",
        "|---" * (len(phases) + 2) + "|",
    ]
    for setting, label in TOSS_STEP_SETTINGS.items():
        sel = {r["phase"]: r for r in rows if r["setting"] == setting}
        cells = []
        for p in phases:
            x = _num(sel[p]["steps_per_period"])
            cells.append("—" if x is None else f"{x:.0f}" if x >= 100 else f"{x:.1f}")
        share = 100 * float(sel["face, sliding"]["share_of_steps"])
        out.append(f"| {label} | " + " | ".join(cells) + f" | {share:.0f} % |")
    return "\n".join(out) + "\n"


def speed_stiff() -> str:
    """Tsit5 against the implicit Kvaerno3 and Kvaerno5 on the cube toss."""
    out = [
        "| method | accepted (contact) | rejected (contact) | forward run | first call | final position vs converged |",
        "|---|---|---|---|---|---|",
    ]
    for r in _rows("benchmark_stiff.csv"):
        name = r["method"].capitalize() + (" (default)" if r["method"] == "tsit5" else "")
        out.append(
            f"| {name} | {r['accepted']} ({r['accepted_contact']}) | {r['rejected']} ({r['rejected_contact']}) | "
            f"{_sig(float(r['forward_run_s']))} s | {float(r['first_call_s']):.1f} s | {_exp(float(r['abs_error']))} m |"
        )
    return "\n".join(out) + "\n"


FIG9_CONFIGS = {
    "mjx_smooth": "fixed-step MJX + smooth collisions",
    "mjx_smooth_cfd": "fixed-step MJX + smooth + CFD (w_c 4 cm)",
    "diffmjx_cfd": "DiffMJX + CFD (paper setting)",
    "diffmjx_cfd_library": "DiffMJX + CFD (library setting)",
}


def _fig9(path: str, last: int) -> str:
    """Per configuration and start: the final side, mean ± standard deviation of the last ``last``
    estimates, the median time per step and the three runs' time in gradient steps."""
    rows = _rows(path)
    out = [
        "| configuration | from 60 mm | from 100 mm | from 140 mm | s per step (median) | time of the three runs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for config in dict.fromkeys(r["config"] for r in rows):
        cells, steps, totals = [], [], []
        for init in dict.fromkeys(r["init_mm"] for r in rows if r["config"] == config):
            sel = [r for r in rows if (r["config"], r["init_mm"]) == (config, init)]
            side = [float(r["side_mm"]) for r in sel]
            wall = [float(r["wall_s"]) for r in sel]
            tail = side[-last:]
            mean = sum(tail) / len(tail)
            std = (sum((x - mean) ** 2 for x in tail) / len(tail)) ** 0.5
            cells.append(f"{side[-1]:.1f} ({mean:.1f} ± {std:.1f})")
            steps += [wall[i + 1] - wall[i] for i in range(len(wall) - 1)]
            totals.append(wall[-1])
        step = _median(steps)
        total = sum(totals)
        time = (
            f"{total / 60:.0f} min ({' + '.join(f'{t:.0f}' for t in totals)} s)" if total >= 600 else f"{total:.0f} s"
        )
        step_text = f"{step:.2f}" if step >= 0.1 else f"{step:.3f}"
        out.append(f"| {FIG9_CONFIGS.get(config, config)} | " + " | ".join(cells) + f" | {step_text} | {time} |")
    return "\n".join(out) + "\n"


def sysid_fig9_quick() -> str:
    """Fig. 9 at the quick preset: 80 steps of 16 segments."""
    return _fig9("contactnets_sysid_side.csv", 10)


def sysid_fig9_paper() -> str:
    """Fig. 9 at the paper preset: 632 steps of 64 segments."""
    return _fig9("contactnets_sysid_side_paper.csv", 50)


def _minutes(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s"
    m = s / 60
    return f"{m:.0f} min" if m >= 10 else f"{m:.1f} min"


EVALUATIONS = {  # contactnets_extended.csv's evaluation, in the plural
    "minibatch gradient": "minibatch gradients",
    "Jacobian of the subset": "Jacobians of the subset",
    "residuals of the subset": "residual evaluations",
}


def sysid_extended() -> str:
    """Every fit of the extended study: where it stopped, its parameters and its errors."""
    out = [
        "| fit | stopped / steps | side (mm) | mass (kg) | friction | solref | subset loss | selection (mm) | "
        "test (mm) | fit wall | evaluations |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    seen = set()
    for r in _rows("contactnets_extended.csv"):
        fit = r["fit"].replace("Levenberg-Marquardt", "Levenberg–Marquardt").replace("mujoco.sysid", "`mujoco.sysid`")
        pub = r["published"] == "True"
        if r["method"] == "none":
            stopped, wall, evals = "—", "—", "—"
        else:
            stopped = f"{r['stopped_step']} / {r['steps']}" if r["steps"] else "—"
            wall = _minutes(float(r["fit_wall_s"]))
            evals = r["evaluations"]
            if r["evaluation"] not in seen:
                seen.add(r["evaluation"])
                evals += " " + EVALUATIONS.get(r["evaluation"], r["evaluation"])
        sel, test = f"{float(r['selection_err_mm']):.1f}", f"{float(r['test_err_mm']):.1f}"
        if pub:
            fit, sel, test = f"{fit} **(published)**", f"**{sel}**", f"**{test}**"
        out.append(
            f"| {fit} | {stopped} | {float(r['side_mm']):.1f} | {float(r['mass_kg']):.3f} | "
            f"{float(r['friction']):.3f} | {float(r['solref0']):.4f}, {float(r['solref1']):.2f} | "
            f"{float(r['subset_loss']):.3g} | {sel} | {test} | {wall} | {evals} |"
        )
    return "\n".join(out) + "\n"


def sysid_generalisation() -> str:
    """The published against the pre-tuned cube on every held-out toss."""
    out = [
        "| tosses | pre-tuned (mm) | published (mm) | ratio of the means [95 %] | medians (mm) | published better on |",
        "|---|---|---|---|---|---|",
    ]
    for r in _rows("contactnets_generalisation_summary.csv"):
        out.append(
            f"| {r['set']} ({r['tosses']}) | {float(r['pretuned_mean_mm']):.1f} | {float(r['published_mean_mm']):.1f} | "
            f"**{float(r['ratio_of_means']):.2f}** [{float(r['ratio_ci_lo']):.2f}, {float(r['ratio_ci_hi']):.2f}] | "
            f"{float(r['pretuned_median_mm']):.1f} → {float(r['published_median_mm']):.1f} | "
            f"{100 * float(r['share_better']):.0f} % of the tosses |"
        )
    return "\n".join(out) + "\n"


def _family(name: str) -> str:
    """``box-plane`` -> ``box–plane``."""
    return name.replace("-", "–")


def _errors3(r: dict) -> str:
    """A fidelity summary row's median / p90 / worst relative error, in percent to two decimals."""
    return (
        " / ".join(f"{100 * float(r[k]):.2f}" for k in ("median_rel_error", "p90_rel_error", "worst_rel_error")) + " %"
    )


def _shots(r: dict) -> str:
    """All shots of a fidelity summary row, and in brackets those left out (reference not converged)."""
    return f"{int(r['shots']) + int(r['unconverged_truth'])} ({r['unconverged_truth']})"


def config_fidelity_ten() -> str:
    """Ten shots per fidelity family at the defaults: errors, wrong signs, backward run and JIT time."""
    out = [
        "| family | shots (left out) | median / p90 / worst | wrong sign | s per shot | JIT s |",
        "|---|---|---|---|---|---|",
    ]
    for r in _rows("fidelity_defaults_ten_summary.csv"):
        out.append(
            f"| {_family(r['family'])} | {_shots(r)} | {_errors3(r)} | {r['wrong_sign']} | "
            f"{float(r['backward_run_s_per_shot']):.2f} | {float(r['backward_jit_s']):.0f} |"
        )
    return "\n".join(out) + "\n"


def capsule_box_rules() -> str:
    """The capsule-box family's ten shots under each ``collision.capsule_box`` rule, one session."""
    out = [
        "| `collision.capsule_box` | shots (left out) | median / p90 / worst | wrong sign | s per shot | JIT s |",
        "|---|---|---|---|---|---|",
    ]
    for rule, note in (("spheres", " (the default)"), ("blended", "")):
        r = next(x for x in _rows(f"fidelity_capsule_box_{rule}_ten_summary.csv") if x["family"] == "capsule-box")
        out.append(
            f"| `{rule}`{note} | {_shots(r)} | {_errors3(r)} | {r['wrong_sign']} | "
            f"{float(r['backward_run_s_per_shot']):.2f} | {float(r['backward_jit_s']):.0f} |"
        )
    return (
        "\n".join(out)
        + "\n\n"
        + (
            "`docs/results/fidelity_capsule_box_{spheres,blended}_ten.csv`: `python -m experiments.fidelity "
            "--families capsule-box --configs defaults --set collision.capsule_box=RULE --name "
            "fidelity_capsule_box_RULE_ten`.\n"
        )
    )


# Rows after a family of fidelity_summary.csv: (label, summary CSV, family), run at the defaults only
FIDELITY_MAIN_EXTRA = {
    "sphere-box": (
        ("sphere–box, closed form ²", "fidelity_sphere_pairs_summary.csv", "sphere-box"),
        ("sphere–cylinder ²", "fidelity_sphere_pairs_summary.csv", "sphere-cylinder"),
    ),
    "capsule-box": (("capsule–box, true distance apart ²", "fidelity_capsule_box_summary.csv", "capsule-box"),),
    "readme": (
        (
            "box–box, MJX's rule (before `collision.box_box`) ³",
            "fidelity_box_box_before_clipped_summary.csv",
            "box-box",
        ),
        ("box–box, `clipped` (the default) ³", "fidelity_box_box_summary.csv", "box-box"),
    ),
}
FIDELITY_MAIN_LABELS = {"cylinder-plane": "cylinder–plane ⁴"}


def config_fidelity_main() -> str:
    """The run that chose the defaults: per family the defaults against ``checkpoint`` at 1e-8, and
    the later runs of single families at the defaults after the family they follow."""
    rows = _rows("fidelity_summary.csv")
    get = {(r["family"], r["config"]): r for r in rows}
    other = next(c for c in dict.fromkeys(r["config"] for r in rows) if c != "defaults")
    families = list(dict.fromkeys(r["family"] for r in rows))
    out = [
        "| family | shots (left out) | defaults: median / p90 / worst | s per shot | `checkpoint` 1e-8: median / p90 / "
        "worst | s per shot |",
        "|---|---|---|---|---|---|",
    ]

    def line(label: str, d: dict, c: dict | None) -> str:
        tail = f"{_errors3(c)} | {float(c['backward_run_s_per_shot']):.2f}" if c else "not run | —"
        return f"| {label} | {_shots(d)} | {_errors3(d)} | {float(d['backward_run_s_per_shot']):.2f} | {tail} |"

    for f in families:
        if f == "all":
            continue
        out.append(line(FIDELITY_MAIN_LABELS.get(f, _family(f)), get[(f, "defaults")], get.get((f, other))))
        for label, name, family in FIDELITY_MAIN_EXTRA.get(f, ()):
            extra = next(r for r in _rows(name) if (r["family"], r["config"]) == (family, "defaults"))
            out.append(line(label, extra, None))
    every = "all" if "box-box" in families else "all but box–box"
    out.append(line(every, get[("all", "defaults")], get.get(("all", other))))
    return "\n".join(out) + "\n"


def _fidelity_shot(name: str, family: str, config: str, motion: str) -> float:
    """The relative error of one fidelity shot, picked by family, configuration and motion."""
    return float(
        next(r for r in _rows(name) if (r["family"], r["config"], r["motion"]) == (family, config, motion))["rel_error"]
    )


def config_changes() -> str:
    """What each change of the defaults gains and costs, each figure from its CSV."""
    budget = "; ".join(
        f"{100 * _fidelity_shot(name, family, config, motion):.2g} % → "
        f"{100 * _fidelity_shot('fidelity.csv', family, 'defaults', motion):.2g} %"
        for _, name, config, family, motion in SOLVER_BUDGET_SHOTS
    )
    lying = 100 * _fidelity_shot("fidelity.csv", "cylinder-plane", "defaults", "onset")
    quick = "fidelity_quick_checkpoint.csv"
    on_end = 100 * _fidelity_shot(quick, "cylinder-plane", "checkpoint (defaults)", "rolling")
    p90 = next(
        100 * float(r["p90_rel_error"])
        for r in _rows("fidelity_quick_checkpoint_summary.csv")
        if (r["family"], r["config"]) == ("cylinder-plane", "checkpoint (defaults)")
    )
    kink = _rows("kink_control.csv")
    floor = [
        _median([float(r["rel_error"]) for r in kink if r["config"] == c])
        for c in ("checkpoint 1e-8", "checkpoint 1e-8, floor 0")
    ]
    old = "checkpoint 1e-8 floor 0"
    readme = 100 * _fidelity_shot("fidelity.csv", "readme", old, "readme")
    capsule = 100 * _fidelity_shot("fidelity.csv", "capsule-plane", old, "onset")
    rows = (
        (
            "`collision.plane_box=deepest`",
            "box–plane, 3 m/s drop, position after the first bounce (`tests/test_fidelity.py`)",
            "MJX's rule drops corners in the plane, a force jump no adjoint sees (figures below the table)",
            "forward differs from MJX's while two corners penetrate more than 1 mm apart",
        ),
        (
            "`solver.min_iterations=16`, `max_tolerance=1e-10`",
            "box settling onto four corners; capsule sliding; capsule rolling (`fidelity_solver_budget.csv`, "
            "`fidelity_capsule.csv`, `fidelity.csv`; [solver.md](solver.md#converged-by-default-solvermin_iterations-"
            "solvermax_tolerance))",
            budget,
            "forward is the converged solve, not MJX's 4-iteration one; under `vmap` all 16 iterations run",
        ),
        (
            "`collision.plane_cylinder=deepest`",
            "cylinder landing on its side (cylinder–plane onset shot, `fidelity.csv`)",
            f"{lying:.2g} % (MJX's rule: below the table)",
            "forward differs from MJX's while a lying cylinder is tilted by more than 1 mm",
        ),
        (
            "its rim contacts anchored near upright (`pairs.UPRIGHT_TILT`)",
            f"cylinder landing on its end (cylinder–plane rolling shot, `checkpoint`; `{quick}`)",
            f"{on_end:.2g} %; the family's p90 over the quick run's four shots {p90:.2g} % (before: below the table)",
            "forward differs from MJX's within 3.4° of upright (where the three contacts sit on the rim)",
        ),
        (
            "`solver.gradient=auto` (implicit for pyramidal cones)",
            "quick families, `fidelity_configs.csv`",
            "same errors as `unroll` at a converged solve",
            "none measured; `unroll` for elliptic cones",
        ),
        (
            "`solver.impedance_floor=0`",
            "cube toss, ten shots, `checkpoint` 1e-8 (`kink_control.csv`)",
            f"median {100 * floor[0]:.2g} % → {100 * floor[1]:.2g} % (without kink control these scatter); touchdown "
            "is continuous with `solimp[0] = 0`",
            "impedance within `width` moves by 1e-4 of its range",
        ),
        (
            "`adjoint=backsolve`, 1e-7",
            "every family above",
            f"`checkpoint` at 1e-8 still scatters near contact transitions: {readme:.2g} % on the README snippet, "
            f"{capsule:.2g} % on a capsule landing (`fidelity.csv`)",
            "none in time now (below)",
        ),
    )
    out = ["| change | evidence | gain | cost |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out) + "\n"


# (label, summary CSV, family, config) of the quick families' configurations
QUICK_CONFIG_ROWS = (
    (
        "**defaults** (backsolve 1e-7, converged solve, implicit gradient)",
        "fidelity_quick_summary.csv",
        "all",
        "defaults",
    ),
    ("defaults with `solver.gradient=unroll`", "fidelity_configs_summary.csv", "all", "unrolled solve gradient"),
    ("`backsolve` 1e-6 (unrolled)", "fidelity_configs_summary.csv", "all", "backsolve 1e-6 floor 0"),
    ("`checkpoint` 1e-8 (unrolled)", "fidelity_quick_summary.csv", "all", "checkpoint 1e-8 floor 0"),
    ("box–plane: defaults", "fidelity_quick_summary.csv", "box-plane", "defaults"),
    (
        "box–plane: the model's 4 iterations (`solver.min_iterations=0 max_tolerance=1`, unrolled)",
        "fidelity_solver_budget_summary.csv",
        "box-plane",
        "model's solver budget",
    ),
    (
        "box–plane: the old setting (`checkpoint` 1e-8, MuJoCo's floor, MJX's plane–box rule, 4 iterations)",
        "fidelity_solver_budget_summary.csv",
        "box-plane",
        "checkpoint 1e-8",
    ),
)


def config_quick() -> str:
    """The quick families under each candidate configuration, and box–plane alone under the solver's."""
    quick = _rows("fidelity_quick_summary.csv")
    families = len({r["family"] for r in quick}) - 1
    every = next(r for r in quick if (r["family"], r["config"]) == ("all", "defaults"))
    shots = int(every["shots"]) + int(every["unconverged_truth"])
    out = [
        f"| configuration ({_WORDS.get(families, families)} quick families, {shots} shots; box–plane only where marked) | "
        "median / p90 / worst | s per shot |",
        "|---|---|---|",
    ]
    for label, name, family, config in QUICK_CONFIG_ROWS:
        r = next(r for r in _rows(name) if (r["family"], r["config"]) == (family, config))
        out.append(f"| {label} | {_errors3(r)} | {float(r['backward_run_s_per_shot']):.2f} |")
    return "\n".join(out) + "\n"


_WORDS = {
    n: w for n, w in enumerate(("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"))
}

ADJOINTS_TEN_LABELS = {
    "defaults": "`backsolve` (the default)",
    "checkpoint (defaults)": "**`checkpoint`** (forward solve at 1e-8: `dto_tighten` 10; kink control `auto`: 1e-7 s)",
}


def config_adjoints_ten() -> str:
    """The whole fidelity suite in both gradient modes: errors over all shots and outside box–box, the
    families meeting the target, wrong signs, backward run time and steps; last, ``checkpoint`` in the
    run kept from before the forward solve's stage brackets
    (``fidelity_adjoints_ten_before_forward_brackets*.csv``, the same session)."""
    shots = _rows("fidelity_adjoints_ten.csv")
    summary = _rows("fidelity_adjoints_ten_summary.csv")
    left = [r for r in shots if r["truth_unconverged"] == "True"]
    configs = list(dict.fromkeys(r["config"] for r in shots))
    n_all = len(shots) // len(configs)
    left_one = {(r["family"], r["shot"]) for r in left}
    left_text = ", ".join(f"{_family(f)} shot {s}" for f, s in sorted(left_one))
    outside = [r for r in shots if r["family"] != "box-box" and r["config"] == configs[0]]
    out = [
        f"| | median / p90 / worst, all {n_all} shots ({left_text} left out: {n_all - len(left_one)}) | outside box–box "
        f"({len(outside)} shots) | families meeting the target (median ≤ 1 %, p90 ≤ 2 %) | wrong sign | "
        "backward run per shot | steps accepted / rejected |",
        "|---|---|---|---|---|---|---|",
    ]
    runs = [(shots, summary, config, ADJOINTS_TEN_LABELS.get(config, config)) for config in configs]
    before = "fidelity_adjoints_ten_before_forward_brackets"
    runs.append(
        (
            _rows(f"{before}.csv"),
            _rows(f"{before}_summary.csv"),
            "checkpoint (defaults)",
            "`checkpoint`, before the forward solve's stage brackets (same session)",
        )
    )
    for shots, summary, config, label in runs:
        fam = [r for r in summary if r["config"] == config and r["family"] != "all"]
        every = next(r for r in summary if (r["family"], r["config"]) == ("all", config))
        ok = [r for r in fam if float(r["median_rel_error"]) <= 0.01 and float(r["p90_rel_error"]) <= 0.02]
        failed = [r for r in fam if r not in ok]
        met = f"{len(ok)} of {len(fam)}"
        if failed:
            met += ": " + ", ".join(f"{_family(r['family'])} fails ({_errors3(r)})" for r in failed)
        readme = [r for r in fam if r["family"] == "readme"]
        if readme:
            met += f" (the one-shot README family {100 * float(readme[0]['median_rel_error']):.2f} %)"
        good = [r for r in shots if r["config"] == config and r["truth_unconverged"] == "False"]
        e = [float(r["rel_error"]) for r in good if r["family"] != "box-box"]
        rest = {"median_rel_error": _median(e), "p90_rel_error": _linear_quantile(e, 0.9), "worst_rel_error": max(e)}
        sel = [r for r in shots if r["config"] == config]
        acc = sum(int(r["accepted_steps"]) for r in sel)
        rej = sum(int(r["rejected_steps"]) for r in sel)
        out.append(
            f"| {label} | {_errors3(every)} | {_errors3(rest)} | {met} | "
            f"{every['wrong_sign']} | {float(every['backward_run_s_per_shot']):.2f} s | {acc:,} / {rej:,} |"
        )
    return "\n".join(out) + "\n"


DEMO_LABELS = {
    "DiffMJX (tsit5, rtol 1e-08, checkpoint, kink control)": "**DiffMJX** (Tsit5, rtol = atol = 1e-8, checkpointed AD, "
    "kink control)",
    "DiffMJX, backsolve adjoint": "DiffMJX, backsolve adjoint (same tolerances)",
    "DiffMJX, implicit solver gradient": "DiffMJX, implicit constraint-solver gradient (same tolerances)",
    "MJX semi-implicit Euler, dt 0.01": "MJX semi-implicit Euler, dt 0.01 (AD)",
}


def _signed(x: float) -> str:
    """``x`` to four decimals with its sign, a typographic minus."""
    return f"{x:+.4f}".replace("-", "−")


def getting_started_demo() -> str:
    """What the demo prints: per method the loss, the gradient d loss / d u0 and its error against
    the converged solve, whose gradient leads (its loss is printed, not written to the CSV)."""
    rows = _cube_toss()
    truth = {float(r["grad_truth"]) for r in rows.values()}
    assert len(truth) == 1, truth
    out = [
        "| method | loss | d loss / d u0 | rel. error vs converged solve |",
        "|---|---|---|---|",
        f"| converged solve (Tsit5, rtol = atol = 1e-12, central differences) | — | {_signed(truth.pop())} | — |",
    ]
    for method, r in rows.items():
        out.append(
            f"| {DEMO_LABELS.get(method, method)} | {_signed(float(r['loss']))} | {_signed(float(r['grad_ad']))} | "
            f"{_percent_sig(float(r['rel_error']))} % |"
        )
    return "\n".join(out) + "\n"


def _short(x: float) -> str:
    """A step size as the toy page writes it: 0.1, 1e-4."""
    if 0.01 <= abs(x) < 1000:
        return f"{x:g}"
    return _power(x)


def _power(x: float) -> str:
    """A number with one significant digit in exponent form: 1e2, 1e-4."""
    m, e = f"{x:.0e}".split("e")
    return f"{m}e{int(e)}"


def _toy(x: float, fmt: str = ".3g") -> str:
    """A toy statistic: ``fmt``, exactly 0 as ``0``, exponents without padding (8.2e-11)."""
    return "0" if x == 0 else re.sub(r"e([+-])0*(\d)", lambda m: f"e{m[1].replace('+', '')}{m[2]}", f"{x:{fmt}}")


def toy_point_mass() -> str:
    """Per contact model and step size: the gradient errors away from kinks, the wrong-sign fractions,
    the median ``dq_N/dq0`` over bouncing ``q0`` (AD bold where its sign is wrong) and the median
    central-difference minus AD gradient."""
    out = [
        "| model | h | n | median err | mean err | p90 err | wrong sign | (bounce) | `dq_N/dq0` AD | true | "
        "median \\|fd - ad\\| |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows("toy_point_mass_summary.csv"):
        med = _toy(float(r["median_abs_err"]))
        ad, true = float(r["median_dqN_ad_bounce"]), float(r["median_dqN_true_bounce"])
        ad_text = _toy(ad, "+.3g") if ad > 0 else _toy(ad)
        if ad * true < 0:
            ad_text = f"**{ad_text}**"
        frac = [float(r[k]) for k in ("frac_wrong_sign", "frac_wrong_sign_bounce")]
        out.append(
            f"| {r['model']} | {_short(float(r['h']))} | {r['n_points']} | {f'**{med}**' if med != '0' else med} | "
            f"{_toy(float(r['mean_abs_err']))} | {_toy(float(r['p90_abs_err']))} | "
            + " | ".join(f"{x:.3f}" for x in frac)
            + f" | {ad_text} | {_toy(true)} | {_toy(float(r['median_abs_fd_minus_ad']), '.2g')} |"
        )
    return "\n".join(out) + "\n"


def toy_point_mass_stiffness() -> str:
    """The penalty model's median gradient error per stiffness and step size."""
    rows = _rows("toy_point_mass_stiffness.csv")
    hs = list(dict.fromkeys(r["h"] for r in rows))
    out = ["| k | " + " | ".join(f"h = {_short(float(h))}" for h in hs) + " |", "|---" * (len(hs) + 1) + "|"]
    for k in dict.fromkeys(r["k"] for r in rows):
        sel = {r["h"]: r for r in rows if r["k"] == k}
        label = _power(float(k)) + (" (used)" if sel[hs[0]]["default"] == "True" else "")
        out.append(f"| {label} | " + " | ".join(_toy(float(sel[h]["median_abs_err"])) for h in hs) + " |")
    return "\n".join(out) + "\n"


def _mm(x: float) -> str:
    """A distance in mm: two significant digits below 1 mm (0.20), three from 1 mm (7.93, 492)."""
    return f"{x:#.2g}" if x < 1 else _sig(x)


def collision_box_box_family() -> str:
    """The box-box family: per collision rule in the CSV's order (the C engine at half the step
    first), the final position against the C engine over all throws (median, how many within 0.1 mm
    and 1 mm, worst), the median per motion, and the rule on the throws where the C engine agrees
    with itself to 0.1 mm. The lowest median among the rules is bold."""
    rows = _rows("box_box_family.csv")
    rules = list(dict.fromkeys(r["collision"] for r in rows))
    motions = list(dict.fromkeys(r["motion"] for r in rows))
    own = next(c for c in rules if c.startswith("C engine"))  # the C engine at half its step
    settled = {r["drop"] for r in rows if r["collision"] == own and float(r["position_off_c_engine_m"]) <= 1e-4}
    off = {
        c: {r["drop"]: 1e3 * float(r["position_off_c_engine_m"]) for r in rows if r["collision"] == c} for c in rules
    }
    counts = {m: len({r["drop"] for r in rows if r["motion"] == m}) for m in motions}
    best = min(_median(list(off[c].values())) for c in rules if c != own)
    out = [
        "| rule | median | within 0.1 mm | within 1 mm | worst | median by motion: "
        + " / ".join(f"{m} ({counts[m]})" for m in motions)
        + f" | where the C engine agrees with itself to 0.1 mm ({len(settled)}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in rules:
        e = list(off[c].values())
        med = f"{_mm(_median(e))} mm"
        if c != own and _median(e) == best:
            med = f"**{med}**"
        per_motion = [[off[c][r["drop"]] for r in rows if r["collision"] == c and r["motion"] == m] for m in motions]
        by_motion = " / ".join(_mm(_median(x)) if x else "—" for x in per_motion)
        if c == own:
            agree = "—"
        else:
            sel = [off[c][d] for d in settled if d in off[c]]
            within = sum(x <= 1 for x in sel)
            count = "all" if within == len(sel) else f"{within} of {len(sel)}"
            agree = f"{count} within 1 mm (worst {_mm(max(sel))} mm)"
        out.append(
            f"| {c} | {med} | {sum(x <= 0.1 for x in e)} of {len(e)} | {sum(x <= 1 for x in e)} of {len(e)} | "
            f"{_mm(max(e))} mm | {by_motion} mm | {agree} |"
        )
    return "\n".join(out) + "\n"


def _pct(x: float) -> str:
    """A percentage: two decimals below 1, three significant digits from 1 (7.70, 12.4, 315)."""
    return f"{x:.2f}" if x < 1 else _sig(x)


def collision_box_box_gradient() -> str:
    """The box-box gradient sweep: per rule in the CSV's order and per scene (the contact's
    ``solimp``), the median, 90th percentile and worst relative error and the wrong signs; the
    lowest median of each scene bold."""
    rows = _rows("box_box_gradient.csv")
    scenes = list(dict.fromkeys(r["scene"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    err = {
        (s, m): [100 * float(r["rel_error"]) for r in rows if (r["scene"], r["method"]) == (s, m)]
        for s in scenes
        for m in methods
    }
    best = {s: min(_median(err[(s, m)]) for m in methods if err[(s, m)]) for s in scenes}
    out = [
        "| box–box rule | "
        + " | ".join(f"{s}: median / p90 / worst" for s in scenes)
        + " | wrong sign ("
        + " / ".join(re.sub(r" \(.*\)$", "", s) for s in scenes)
        + ") |",
        "|---" * (len(scenes) + 2) + "|",
    ]
    for m in methods:
        cells = []
        for s in scenes:
            e = err[(s, m)]
            if not e:
                cells.append("not run")
                continue
            text = f"{_pct(_median(e))} / {_pct(_linear_quantile(e, 0.9))} / {_pct(max(e))} %"
            cells.append(f"**{text}**" if _median(e) == best[s] else text)
        wrong = " / ".join(
            str(sum(r["wrong_sign"] == "True" for r in rows if (r["scene"], r["method"]) == (s, m))) for s in scenes
        )
        out.append(f"| {m} | " + " | ".join(cells) + f" | {wrong} |")
    return "\n".join(out) + "\n"


def _grouped(x: float) -> str:
    """Three significant digits, thousands grouped by a space from five digits on (1360, 27 900)."""
    text = f"{float(f'{x:.3g}'):.0f}" if x >= 100 else _sig(x)
    return f"{int(text):,}".replace(",", " ") if len(text) > 4 else text


def collision_tossed_primitives() -> str:
    """Paper Fig. 21: per primitive DiffMJX's median and 90th-percentile relative gradient error,
    its median error over the sweep's gradient RMS, and MJX's median error and wrong signs."""
    rows = {(r["primitive"], r["method"]): r for r in _rows("tossed_primitives_table.csv")}
    out = [
        "| primitive | DiffMJX median rel. error | DiffMJX 90th pct. | DiffMJX median error / gradient RMS | "
        "MJX median rel. error | MJX wrong sign |",
        "|---|---|---|---|---|---|",
    ]
    for p in dict.fromkeys(k[0] for k in rows):
        d, m = rows[(p, "diffmjx")], rows[(p, "mjx")]
        out.append(
            f"| {p} | **{100 * float(d['median_rel_error']):.2f} %** | {100 * float(d['p90_rel_error']):.2g} % | "
            f"{100 * float(d['median_sweep_error']):.2f} % | {_grouped(100 * float(m['median_rel_error']))} % | "
            f"{100 * float(m['wrong_sign_fraction']):.0f} % |"
        )
    return "\n".join(out) + "\n"


def collision_tossed_tolerance() -> str:
    """The tolerance scan at MuJoCo's impedance floor: per primitive the median and 90th-percentile
    relative gradient error at each ``rtol``."""
    rows = [r for r in _rows("tossed_primitives_tolerance.csv") if float(r["impedance_floor"]) > 0]
    tols = list(dict.fromkeys(r["rtol"] for r in rows))
    get = {(r["primitive"], r["rtol"]): r for r in rows}
    out = [
        "| primitive | "
        + " | ".join(("rtol " if i == 0 else "") + _power(float(t)) for i, t in enumerate(tols))
        + " |",
        "|---" * (len(tols) + 1) + "|",
    ]
    for p in dict.fromkeys(r["primitive"] for r in rows):
        for key, label, fmt in (
            ("median_rel_error", "median rel. error", "{:.2f}"),
            ("p90_rel_error", "90th percentile", None),
        ):
            cells = []
            for t in tols:
                x = 100 * float(get[(p, t)][key]) if (p, t) in get else None
                cells.append("–" if x is None else (fmt.format(x) if fmt else _sig(x, 2)) + " %")
            out.append(f"| {p}, {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def collision_tossed_floor() -> str:
    """The tolerance scan at the tightest ``rtol`` with and without MuJoCo's impedance floor: per
    primitive the median relative gradient error at floor 1e-4 and 0, and the 90th percentile at 0."""
    rows = _rows("tossed_primitives_tolerance.csv")
    tight = min(float(r["rtol"]) for r in rows)
    rows = [r for r in rows if float(r["rtol"]) == tight]
    floor = {r["primitive"]: r for r in rows if float(r["impedance_floor"]) > 0}
    zero = {r["primitive"]: r for r in rows if float(r["impedance_floor"]) == 0}
    floors = {_power(float(r["impedance_floor"])) for r in floor.values()}
    assert len(floors) == 1, floors
    rtol = _power(tight)
    out = [
        f"| primitive | rtol {rtol}, floor {floors.pop()} | rtol {rtol}, floor 0 | 90th pct., floor 0 |",
        "|---|---|---|---|",
    ]
    for p in dict.fromkeys(r["primitive"] for r in _rows("tossed_primitives_tolerance.csv")):
        if p not in zero:
            continue
        before = f"{100 * float(floor[p]['median_rel_error']):.2f} %" if p in floor else "–"
        p90 = f"{_sig(100 * float(zero[p]['p90_rel_error']), 2)} %"
        if p in floor:
            p90 += f" (was {_sig(100 * float(floor[p]['p90_rel_error']), 2)} %)"
        out.append(f"| {p} | {before} | {100 * float(zero[p]['median_rel_error']):.2f} % | {p90} |")
    return "\n".join(out) + "\n"


def collision_tossed_sharpness() -> str:
    """The cube's smoothing trade-off: per sharpness the median and 90th-percentile gradient error
    against the unsmoothed converged solve and the largest loss deviation."""
    rows = _rows("tossed_primitives_sharpness.csv")
    out = [
        "| sharpness (1/m) | " + " | ".join(_power(float(r["sharpness"])) for r in rows) + " |",
        "|---" * (len(rows) + 1) + "|",
        "| median rel. gradient error | "
        + " | ".join(f"{100 * float(r['median_rel_error']):.2f} %" for r in rows)
        + " |",
        "| 90th percentile | " + " | ".join(f"{_sig(100 * float(r['p90_rel_error']), 2)} %" for r in rows) + " |",
        "| max loss deviation (m) | " + " | ".join(_exp(float(r["max_loss_deviation"])) for r in rows) + " |",
    ]
    return "\n".join(out) + "\n"


def gradient_modes() -> str:
    """Which AD modes each ``integrator.adjoint`` supports: read from the registry's entries, not typed."""
    sys.path.insert(0, str(ROOT))
    try:
        import diffmjx
        from diffmjx.registry import GRADIENT_MODES, SOLVERS
    finally:
        sys.path.pop(0)
    default = diffmjx.Config().integrator.adjoint
    yes = lambda b: "yes" if b else "no"
    out = ["| `integrator.adjoint` | reverse (`grad`, `vjp`) | forward (`jvp`, `jacfwd`) |", "|---|---|---|"]
    for name, entry in GRADIENT_MODES.items():
        label = f"`{name}` (default)" if name == default else f"`{name}`"
        out.append(f"| {label} | {yes(entry.reverse)} | {yes(entry.forward)} |")
    fixed = ", ".join(f"`{n}`" for n in SOLVERS.where(fixed_step=True))
    out.append(f"| any, with a fixed-step solver ({fixed}; the adjoint is ignored) | yes | yes |")
    return "\n".join(out) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "gradient_modes": gradient_modes,
    "sysid_coverage": sysid_coverage,
    "sysid_peer": sysid_peer,
    "sysid_recovery": sysid_recovery,
    "contactnets_generic": contactnets_generic,
    "contactnets_identify": lambda: contactnets_generic("contactnets_identify.csv", "identify", "`sysid.identify`"),
    "linearize": linearize,
    "linearize_cost": linearize_cost,
    "kink_bracket": kink_bracket,
    "speed_rules_before_after": speed_rules_before_after,
    "speed_rules_sysid": speed_rules_sysid,
    "speed_rules_contact": speed_rules_contact,
    "contact_mpc": contact_mpc,
    "contact_mpc_friction": lambda: contact_mpc("contact_mpc_friction.csv"),
    "planner_suite": planner_suite,
    "planner_suite_time": planner_suite_time,
    "planner_suite_finger": lambda: planner_suite("planner_suite_finger.csv", "planner_suite_finger_explore0.csv"),
    "planner_suite_box_tip": lambda: planner_suite("planner_suite_box_tip.csv"),
    "planner_defaults": planner_defaults,
    "planner_defaults_ilqr_reuse": lambda: planner_defaults("ilqr_reuse", "`ilqr_reuse`"),
    "vjp_sources": vjp_sources,
    "planner_defaults_ilqr_jacobian": lambda: planner_defaults("ilqr_jacobian", "`ilqr_jacobian`", str),
    "planner_defaults_ilqr_reach": lambda: planner_defaults("ilqr_reach", "`ilqr_reach`", str),
    "planner_defaults_ilqr_explore": lambda: planner_defaults("ilqr_explore", "`ilqr_explore`", int),
    "planner_defaults_cfd_width": lambda: planner_defaults(
        "cfd.solimp", "width", lambda cell: float(cell.split("/")[2]), " m"
    ),
    "planner_choice": planner_choice,
    "readme_claims": readme_claims,
    "cube_toss": cube_toss,
    "cube_toss_solver_gradient": cube_toss_solver_gradient,
    "kink_control": kink_control,
    "benchmark_adjoints": benchmark_adjoints,
    "solver_budget": solver_budget,
    "billiard_fig19": billiard_fig19,
    "muscle_tausmooth": muscle_tausmooth,
    "myo_mpc_baoding": lambda: _myo_mpc("myo_mpc_baoding_summary.csv"),
    "myo_mpc_tennis": lambda: _myo_mpc("myo_mpc_tennis_summary.csv"),
    "myo_mpc_die": lambda: _myo_mpc("myo_mpc_die_summary.csv"),
    "myo_mpc_die_table": lambda: _myo_mpc("myo_mpc_die_table_summary.csv"),
    "myo_mpc_gradient_modes": myo_mpc_gradient_modes,
    "myo_mpc_baoding_swap": myo_mpc_baoding_swap,
    "myo_mpc_baoding_fast_trials": myo_mpc_baoding_fast_trials,
    "ilqr_vs_adam": ilqr_vs_adam,
    "speed_jit": speed_jit,
    "speed_vjp": speed_vjp,
    "speed_solver_checkpoint": speed_solver_checkpoint,
    "speed_kinematics_rule": speed_kinematics_rule,
    "speed_vjp_myohand": speed_vjp_myohand,
    "speed_velocity_rules_jit": speed_velocity_rules_jit,
    "speed_rules_fidelity": speed_rules_fidelity,
    "backward_kinks_toss": backward_kinks_toss,
    "jit_library_defaults": jit_library_defaults,
    "backward_kinks_fidelity": backward_kinks_fidelity,
    "speed_backsolve_args": speed_backsolve_args,
    "speed_pareto_full": speed_pareto_full,
    "speed_pareto_quick": speed_pareto_quick,
    "speed_targets": speed_targets,
    "speed_memory": speed_memory,
    "speed_vmap": speed_vmap,
    "speed_device": speed_device,
    "speed_device_rules": speed_device_rules,
    "sysid_touchdown": sysid_touchdown,
    "sysid_limits": sysid_limits,
    "sysid_floor": sysid_floor,
    "saltation": saltation,
    "saltation_cost": saltation_cost,
    "speed_toss_steps": speed_toss_steps,
    "speed_stiff": speed_stiff,
    "sysid_fig9_quick": sysid_fig9_quick,
    "sysid_fig9_paper": sysid_fig9_paper,
    "sysid_extended": sysid_extended,
    "sysid_generalisation": sysid_generalisation,
    "config_fidelity_ten": config_fidelity_ten,
    "capsule_box_rules": capsule_box_rules,
    "config_fidelity_main": config_fidelity_main,
    "config_changes": config_changes,
    "config_quick": config_quick,
    "config_adjoints_ten": config_adjoints_ten,
    "getting_started_demo": getting_started_demo,
    "toy_point_mass": toy_point_mass,
    "toy_point_mass_stiffness": toy_point_mass_stiffness,
    "collision_box_box_family": collision_box_box_family,
    "collision_box_box_gradient": collision_box_box_gradient,
    "collision_tossed_primitives": collision_tossed_primitives,
    "collision_tossed_tolerance": collision_tossed_tolerance,
    "collision_tossed_floor": collision_tossed_floor,
    "collision_tossed_sharpness": collision_tossed_sharpness,
}
"""Table name -> the function that writes it."""


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def render(text: str, where: str) -> str:
    """``text`` with every marked table rewritten."""

    def one(match: re.Match) -> str:
        name = match["name"]
        if name not in TABLES:
            raise KeyError(f"{where}: unknown table {name!r}; docs/build_tables.py knows {', '.join(TABLES)}")
        indent = match["indent"]
        body = "".join(indent + line if line.strip() else line for line in TABLES[name]().splitlines(keepends=True))
        return f"{indent}<!-- table: {name} -->\n{body}{indent}<!-- /table -->"

    return MARKER.sub(one, text)


def stale() -> list[str]:
    """``path: table`` of every marked table that differs from what :func:`render` writes."""
    out = []
    for path in documents():
        text = path.read_text()
        new = render(text, str(path))
        if new != text:
            for old, fresh in zip(MARKER.finditer(text), MARKER.finditer(new)):
                if old.group(0) != fresh.group(0):
                    out.append(f"{path.relative_to(ROOT)}: {old['name']}")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for b in bad:
            print(f"stale table {b}; run python docs/build_tables.py")
        return 1 if bad else 0
    for path in documents():
        text = path.read_text()
        new = render(text, str(path))
        if new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
