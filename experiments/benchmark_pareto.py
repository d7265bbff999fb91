"""Error-vs-cost benchmark on the cube toss (paper Figs. 5, 17): fixed-step MJX against DiffMJX.

    python -m experiments.benchmark_pareto [--quick] [--set KEY=VALUE ...]

For every method: loss (final qpos[1] after 1 s), gradient d loss / d u0 at u0 = -2, its relative
error against central differences of a converged solve (Tsit5, rtol = atol = 1e-12), forward and
backward JIT time (cold: the persistent cache is off here), forward and backward run time (median
of repeats), XLA's memory estimate of the backward program, and the integrator's step statistics.

Methods: MJX semi-implicit Euler, RK4 and implicitfast at dt in {1e-2, 3e-3, 1e-3, 3e-4, 1e-4,
3e-5}; Diffrax Tsit5, Dopri5, Dopri8, Bosh3, Heun at rtol = atol in {1e-3, 1e-4, 1e-5, 1e-7,
1e-8, 1e-10}; Tsit5 at 1e-5, 1e-7 and 1e-8 also with the backsolve adjoint and the implicit
solver gradient. ``--quick`` runs a subset (about 25 min): MJX Euler at dt 1e-3, 1e-4, 3e-5 and
Tsit5 at 1e-4, 1e-7, 1e-8, with backsolve and implicit at 1e-7 and 1e-8, into
docs/results/benchmark_pareto.{csv,png}; the full grid (54 methods, 78 min on 2 cores) goes
to benchmark_pareto_full.{csv,png}. Each row is written as soon as its method finishes, and a
later run skips the methods whose row is already there with the same configuration (``--fresh``
starts over), so the full grid can be run in pieces. The Pareto plots show error vs backward run
time and error vs backward JIT time.
"""

from __future__ import annotations

import csv
import hashlib
import time
from pathlib import Path

import jax
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.gradcheck import pick_plateau
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "speed.yaml"
MJX_DTS = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5)
TOLS = (1e-3, 1e-4, 1e-5, 1e-7, 1e-8, 1e-10)
DIFFRAX = ("tsit5", "dopri5", "dopri8", "bosh3", "heun")
MJX = ("mjx_euler", "mjx_rk4", "mjx_implicitfast")


def methods(cfg: diffmjx.Config, quick: bool) -> list[tuple[str, str, diffmjx.Config]]:
    """(family, label, config) for every benchmarked method."""
    out = []
    period = 0.01
    for solver in ("mjx_euler",) if quick else MJX:
        for dt in (1e-3, 1e-4, 3e-5) if quick else MJX_DTS:
            n = max(1, round(period / dt))
            c = cfg.override(f"integrator.solver={solver}", f"integrator.substeps={n}")
            out.append((solver, f"{solver} dt {period / n:.1e}", c))
    for solver in ("tsit5",) if quick else DIFFRAX:
        for tol in (1e-4, 1e-7, 1e-8) if quick else TOLS:
            c = cfg.override(f"integrator.solver={solver}", f"integrator.rtol={tol}", f"integrator.atol={tol}")
            out.append((solver, f"{solver} tol {tol:.0e}", c))
    for tol in (1e-7, 1e-8) if quick else (1e-5, 1e-7, 1e-8):
        base = cfg.override("integrator.solver=tsit5", f"integrator.rtol={tol}", f"integrator.atol={tol}")
        out.append(("tsit5 backsolve", f"tsit5 tol {tol:.0e} backsolve", base.override("integrator.adjoint=backsolve")))
        out.append(("tsit5 implicit", f"tsit5 tol {tol:.0e} implicit solve", base.override("solver.gradient=implicit")))
    return out


def measure(mx, cfg: diffmjx.Config, u0: float, repeats: int) -> dict:
    """Loss, gradient, JIT and run times, memory and step counts of one configuration."""
    ctrls = np.zeros((common.CUBE_TOSS["horizon"], mx.nu))

    def forward(u):
        d, traj = diffmjx.rollout(mx, common.cube_toss_data(mx, u), ctrls, cfg)
        return d.qpos[1], traj.stats

    backward = jax.value_and_grad(lambda u: forward(u)[0])
    t = time.perf_counter()
    fwd = jax.jit(forward).lower(u0).compile()
    fwd_jit = time.perf_counter() - t
    t = time.perf_counter()
    bwd = jax.jit(backward).lower(u0).compile()
    bwd_jit = time.perf_counter() - t
    loss, stats = jax.block_until_ready(fwd(u0))
    _, grad = jax.block_until_ready(bwd(u0))
    return dict(
        loss=float(loss),
        grad=float(grad),
        forward_jit_s=fwd_jit,
        backward_jit_s=bwd_jit,
        forward_run_s=common.median_time(fwd, u0, repeats=repeats),
        backward_run_s=common.median_time(bwd, u0, repeats=repeats),
        backward_memory_mb=common.program_memory_mb(bwd),
        accepted_steps=int(np.sum(stats.accepted)),
        rejected_steps=int(np.sum(stats.rejected)),
        budget_exhausted=bool(np.any(stats.budget_exhausted)),
    )


def ground_truth(mx, cfg: diffmjx.Config, u0: float, quick: bool) -> float:
    tight = diffmjx.converged(cfg)  # Tsit5 at 1e-12 (the preset has no kink control to turn off)
    steps = (1e-3, 1e-4) if quick else (1e-2, 1e-3, 3e-4, 1e-4, 3e-5)
    sweep, _ = diffmjx.central_differences(common.cube_toss_loss(mx, tight), u0, steps)
    return float(sweep[pick_plateau(sweep), 0])


ROW_FORMAT = "2"  # part of every row's config hash: bump it when measure() changes its columns
TEXT_COLUMNS = ("family", "method", "adjoint", "solver_gradient", "config")
INT_COLUMNS = ("accepted_steps", "rejected_steps")


def _parse(key: str, value: str):
    if key in TEXT_COLUMNS:
        return value
    if value in ("True", "False"):
        return value == "True"
    return int(float(value)) if key in INT_COLUMNS else float(value)


def config_digest(cfg: diffmjx.Config) -> str:
    """Short hash of a method's whole configuration (and the row format): a saved row is reused
    only for the same one."""
    return hashlib.sha256((ROW_FORMAT + cfg.to_yaml()).encode()).hexdigest()[:12]


def saved_rows(path: Path) -> list[dict]:
    """Rows of an earlier run's CSV, numbers parsed back; a row that does not parse (a run killed
    mid-write, a hand edit) is dropped with a message, and only that method is measured again."""
    if not path.exists():
        return []
    with open(path, newline="") as f:
        raw = list(csv.DictReader(f))
    rows = []
    for r in raw:
        try:
            rows.append({k: _parse(k, v) for k, v in r.items()})
        except (TypeError, ValueError):
            print(f"{path.name}: ignoring an unreadable row ({r.get('method')!r})")
    return rows


def run(cfg: diffmjx.Config, out: Path, quick: bool = False, fresh: bool = False) -> list[dict]:
    jax.config.update("jax_enable_compilation_cache", False)  # JIT times are cold compiles
    _, mx = common.load("cube_toss")
    u0 = common.CUBE_TOSS["u0"]
    path = out / ("benchmark_pareto.csv" if quick else "benchmark_pareto_full.csv")
    plan = methods(cfg, quick)
    digests = {label: config_digest(c) for _, label, c in plan}
    earlier = [] if fresh else saved_rows(path)
    # rows of an earlier (interrupted) run of the same methods and configurations are reused; rows of
    # other configurations (another --set, an older row format) stay in the file but are not plotted
    saved = {r["method"]: r for r in earlier if digests.get(r["method"]) == r.get("config")}
    others = [r for r in earlier if r.get("config") and digests.get(r["method"]) != r["config"]]
    truths = {r["grad_truth"] for r in saved.values()}
    truth = truths.pop() if len(truths) == 1 else ground_truth(mx, cfg, u0, quick)
    print(
        f"ground truth (tsit5 1e-12, central differences): {truth:+.6f}; {len(saved)} of {len(plan)} methods already measured"
    )
    rows = []
    for family, label, c in (bar := tqdm(plan, desc="methods")):
        bar.set_postfix_str(label)
        if label in saved and saved[label]["grad_truth"] == truth:
            rows.append(saved[label])
            continue
        r = dict(family=family, method=label, adjoint=c.integrator.adjoint, solver_gradient=c.solver.gradient)
        r.update(measure(mx, c, u0, repeats=2 if quick else 3))
        r["grad_truth"] = truth
        r["rel_error"] = abs(r["grad"] - truth) / abs(truth)
        r["config"] = digests[label]
        rows.append(r)
        done = {x["method"] for x in rows}
        common.write_csv(path, rows + [v for k, v in saved.items() if k not in done] + others)
    _plot(rows, path.with_suffix(".png"))
    _print(rows)
    best = summary(rows)
    common.write_csv(path.with_name(path.stem + "_summary.csv"), best)
    _print_summary(best)
    return rows


MAX_ERROR = 0.02  # the speed issue's accuracy bar for comparing backward cost


def summary(rows: list[dict], max_error: float = MAX_ERROR) -> list[dict]:
    """Per family (rows in the plan's order: step size or tolerance tightening), two picks:

    ``fastest``: the shortest backward run of any one setting within ``max_error`` relative gradient
    error; at loose tolerances that can be luck (the error scatters, see docs/speed.md).
    ``reliable``: the shortest backward run of a setting from which every tighter setting of the
    family is also within ``max_error``. A run that exhausted its step budget never qualifies.
    ``*_speedup`` is the corresponding MJX pick's (the best over MJX families) backward run over
    this one's; empty where a family or MJX has no qualifying setting.
    """
    out = []
    for fam in dict.fromkeys(r["family"] for r in rows):
        seq = [r for r in rows if r["family"] == fam]
        ok = [r["rel_error"] <= max_error and not r["budget_exhausted"] for r in seq]
        tail = [r for i, r in enumerate(seq) if all(ok[i:])]
        b = dict(family=fam)
        for pick, cands in (("fastest", [r for r, good in zip(seq, ok, strict=True) if good]), ("reliable", tail)):
            r = min(cands, key=lambda x: x["backward_run_s"]) if cands else None
            b[f"{pick}_method"] = r["method"] if r else ""
            for key in ("rel_error", "backward_run_s", "forward_run_s", "backward_jit_s"):
                b[f"{pick}_{key}"] = r[key] if r else ""
        out.append(b)
    for pick in ("fastest", "reliable"):
        mjx = [b[f"{pick}_backward_run_s"] for b in out if b["family"].startswith("mjx") and b[f"{pick}_method"]]
        for b in out:
            b[f"{pick}_speedup"] = min(mjx) / b[f"{pick}_backward_run_s"] if mjx and b[f"{pick}_method"] else ""
    return out


def _print_summary(best):
    print(f"\nshortest backward run per family at <= {MAX_ERROR:.0%} gradient error (speed-up over the best MJX pick):")
    for pick in ("fastest", "reliable"):
        print(f"  {pick}:")
        for b in best:
            if not b[f"{pick}_method"]:
                print(f"    {b['family']:<18} none")
                continue
            speed = f"{b[f'{pick}_speedup']:6.1f}x" if b[f"{pick}_speedup"] != "" else ""
            print(f"    {b['family']:<18} {b[f'{pick}_method']:<32} err {b[f'{pick}_rel_error']:8.2e} "
                  f"bwd {b[f'{pick}_backward_run_s']:7.3f} s {speed}")  # fmt: skip


def _print(rows):
    print(f"\n{'method':<34} {'rel.err':>9} {'fwd s':>8} {'bwd s':>8} {'fwd JIT':>8} {'bwd JIT':>8} {'MB':>7}")
    for r in rows:
        print(f"{r['method']:<34} {r['rel_error']:9.2e} {r['forward_run_s']:8.3f} {r['backward_run_s']:8.3f} "
              f"{r['forward_jit_s']:8.1f} {r['backward_jit_s']:8.1f} {r['backward_memory_mb']:7.1f}"
              + ("  (step budget exhausted)" if r["budget_exhausted"] else ""))  # fmt: skip


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (smaller is better)."""
    return [i for i, (x, y) in enumerate(points) if not any(a <= x and b <= y and (a, b) != (x, y) for a, b in points)]


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, key, label in (
        (axes[0], "backward_run_s", "backward run time (s)"),
        (axes[1], "backward_jit_s", "backward JIT time (s)"),
    ):
        for i, fam in enumerate(families):
            sel = [r for r in rows if r["family"] == fam and not r["budget_exhausted"]]
            out = [r for r in rows if r["family"] == fam and r["budget_exhausted"]]
            marker = "s" if fam.startswith("mjx") else "o"
            ax.scatter([r[key] for r in sel], [r["rel_error"] for r in sel], marker=marker, color=f"C{i}", label=fam)
            # runs that hit integrator.max_steps: hollow, and never on the front
            ax.scatter(
                [r[key] for r in out],
                [r["rel_error"] for r in out],
                marker=marker,
                facecolors="none",
                edgecolors=f"C{i}",
            )
        valid = [r for r in rows if not r["budget_exhausted"]]
        front = pareto([(r[key], r["rel_error"]) for r in valid])
        pts = sorted((valid[i][key], valid[i]["rel_error"]) for i in front)
        ax.step([p[0] for p in pts], [p[1] for p in pts], "k--", where="post", lw=0.8, label="Pareto front")
        ax.set(xscale="log", yscale="log", xlabel=label)
    axes[0].set_ylabel("relative gradient error")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(
        "Cube toss: gradient error vs cost (squares: fixed-step MJX, circles: DiffMJX; hollow: step budget exhausted)"
    )
    common.save_figure(fig, path)


def main(argv=None):
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    run(cfg, args.out, args.quick, args.fresh)


if __name__ == "__main__":
    main()
