"""Write the tables of measured figures in the docs from the committed CSV files.

    python docs/build_tables.py            # rewrite every marked table in README.md and docs/*.md
    python docs/build_tables.py --check    # exit 1, naming the file and table, if one differs

A table lives between ``<!-- table: NAME -->`` and ``<!-- /table -->`` in a Markdown file; NAME is
a key of :data:`TABLES`, a function that reads ``docs/results/`` and returns the table's Markdown.
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
MARKER = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


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


def contactnets_generic() -> str:
    """The published ContactNets fit against its rerun through the generic path."""
    names = {
        "side_mm": "side (mm)",
        "mass_kg": "mass (kg)",
        "friction": "sliding friction",
        "test_error_mm": "**test error on the 50 test tosses (mm)**",
    }
    out = ["| quantity | published | rerun through the generic path | relative difference |", "|---|---|---|---|"]
    for r in _rows("contactnets_generic.csv"):
        label = names.get(r["quantity"], r["quantity"].replace("solref", "solref[").replace("solimp", "solimp[") + "]")
        out.append(
            f"| {label} | {float(r['published']):.6g} | {float(r['generic_path']):.6g} | "
            f"{100 * float(r['relative_difference']):+.3g} % |"
        )
    return "\n".join(out) + "\n"


def linearize() -> str:
    """Per regime and method: the relative errors of A and B against the converged period, and the
    median time per period."""
    rows = _rows("linearize.csv")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    cell = {(r["regime"], r["method"]): r for r in rows}
    out = ["| regime | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for g in regimes:
        vals = []
        for mth in methods:
            r = cell[(g, mth)]
            vals.append(f"{float(r['error_A']):.1e} / {float(r['error_B']):.1e}" if r["finite"] == "True" else "NaN")
        out.append(f"| {g}: error of A / B | " + " | ".join(vals) + " |")
    times = [_median([float(cell[(g, mth)]["ms_per_period"]) for g in regimes]) for mth in methods]
    out.append("| ms per period (median) | " + " | ".join(f"{t:.3g}" for t in times) + " |")
    return "\n".join(out) + "\n"


def contact_mpc() -> str:
    """Per task and method: successes over the starts, the final distance to the target (median and
    worst), the time per plan step (median) and the largest JIT time (the first start compiles; the
    others mostly find the persistent compilation cache)."""
    rows = _rows("contact_mpc.csv")
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
    "backsolve": "`backsolve` (the default)",
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
    gen = _rows("contactnets_generalisation_summary.csv")[0]
    paper = next(r for r in _rows("myo_mpc_baoding_paper_summary.csv") if r["method"] == "gradient")
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
            "contacts from distance, billiard misses",
            f"DiffMJX's gradient is exactly 0; CFD's points towards the hit ({cfd['miss_descent_sign_ok']} of "
            f"{cfd['miss_points']}), and Adam with it reaches the target ({1000 * float(cfd['descent_final_loss']):.1f}"
            f" mm off; {1000 * float(plain['descent_final_loss']):.0f} mm without CFD)",
            "[cfd](docs/cfd.md#measured-results)",
        ),
        (
            "sysid of four models nobody fitted before",
            f"every parameter within 2 % from noise-free recordings ({len(ours)} of {len(ours)} fits, worst "
            f"{max(ours):.2g} %); `mujoco.sysid`'s largest error {min(theirs):.2g} to {max(theirs):.2g} %",
            "[sysid](docs/sysid.md#recovery-study-four-models-nobody-fitted-before)",
        ),
        (
            "ContactNets cube, every parameter fitted",
            f"{float(gen['published_mean_mm']):.1f} mm against the pre-tuned {float(gen['pretuned_mean_mm']):.1f} mm "
            f"on {gen['tosses']} held-out test tosses ({float(gen['ratio_of_means']):.2f}×)",
            "[sysid](docs/sysid.md#fig-22-and-fig-11-every-parameter-fitted-for-prediction-selected-on-held-out-tosses)",
        ),
        (
            "gradient MPC, MyoHand baoding (paper preset)",
            f"cost {float(paper['start_cost']):.4f} → {float(paper['final_cost']):.4f}: the balls swapped and held",
            "[mpc](docs/mpc.md#measured)",
        ),
    ]
    out = ["| claim | measured | where |", "|---|---|---|"]
    out += [f"| {claim} | {measured} | {where} |" for claim, measured, where in rows]
    return "\n".join(out) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "sysid_recovery": sysid_recovery,
    "contactnets_generic": contactnets_generic,
    "linearize": linearize,
    "contact_mpc": contact_mpc,
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
        return match.group(1) + TABLES[name]() + match.group(4)

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
