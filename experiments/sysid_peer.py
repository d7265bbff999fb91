"""Fair-peer study: time to 1 % and to 0.1 % parameter error, DiffMJX against ``mujoco.sysid`` at its best timestep.

    python -m experiments.sysid_peer [--models arm,box,ball,finger,finger_box,legged] [--seeds 2]
                                     [--euler 1,2,4,8,16,32] [--rk4 1,2,4,8] [--tolerances 1e-3,1e-4,1e-5,1e-7]
                                     [--saltation 1e-3] [--fresh] [--plot-only] [--persistent-cache]

The recovery study's models (:mod:`experiments.sysid_recovery`: the arm, the thrown box, the ball
thrown at a wall, MyoSuite's muscle-driven finger) and two contact-rich ones: ``finger_box``
(``diffmjx.scenes.path("sysid_finger")``: a two-link finger on position servos taps and slides a
free box; both joints' damping, both servos' kp, the box's mass and the shared sliding friction)
and ``legged`` (``sysid_legged``: a two-legged body dropped onto the floor with a forward speed,
landing, sliding and kicking; the shared friction and contact time constant, the torso's mass and
the hips' damping). Noise-free recordings of the "real system" (MuJoCo's C engine at the true values,
RK4 at 0.1 ms) and starts 30-50 % off, as in the recovery study, so that 0.1 % is reachable by a
fit whose simulation is accurate enough.

Each method at its best setting:

- ``mujoco_sysid`` (:func:`diffmjx.sysid.identify_mujoco_sysid`: the C engine, finite
  differences, ``mujoco.minimize``; both cores for its rollouts) is run at the model's own timestep
  divided by each of ``--euler`` (the model's integrator, semi-implicit Euler) and, with MuJoCo's
  RK4, by each of ``--rk4``. Its error falls with the timestep and its cost grows: its time to an
  error is that of its fastest setting that reaches it (its best setting), and where none reaches
  it, the error is out of its reach at the settings it can afford.
- ``diffmjx_lm`` (:func:`diffmjx.sysid.identify`, ``FitConfig`` defaults with the recovery study's
  segments, adaptive Tsit5 at each of ``--tolerances`` for rtol = atol): its time to an error is
  the time from the call (compilation included: ``IdentifyResult.start_s``) to the end of the
  first Levenberg–Marquardt step whose values are within it, at its fastest setting that reaches it.
  ``--saltation RES``: each tolerance also with the touchdown term in the Jacobian
  (``integrator.saltation=true``, ``integrator.saltation_resolution=RES``; setting
  ``rtol 1e-05 saltation 0.001``), what ``identify``'s ``TouchdownJumpWarning`` advises.
  The fits of a model run one after another in this process (each seed at every tolerance): the
  first at a tolerance compiles the simulation's program, later ones reuse it (column ``program``:
  ``compiled`` or ``reused``), and the summary gives the median over seeds and over each kind.
  JAX's persistent compile cache starts empty (a new folder; ``--persistent-cache``: the user's
  cache, with what earlier runs left in it), so the first fit of a model compiles as a user's
  first ever does with :func:`diffmjx.enable_compilation_cache`, and later fits load what it
  wrote; columns ``cache_hits`` and ``cache_misses`` count the programs a fit loaded from that
  cache and compiled for it. Column ``threads``: the CPU threads a fit ran on (``mujoco.sysid``: 2; DiffMJX: ``FitConfig``'s
  default, every core, since its segments run in shares on threads; rows fitted before that: 1).

Writes ``docs/results/sysid_peer.csv`` (one row per fit: method, timestep, error, wall time, time to
1 % and to 0.1 %), ``sysid_peer_summary.csv`` (per model: each method's median time to each error,
the peer's best timestep, the ratio) and ``sysid_peer.png``. Each fit is cached
(``~/.cache/diffmjx/stages``); ``--fresh`` refits, ``--plot-only`` redraws from the CSVs. A run
of some models (``--models``), seeds or methods (``--methods diffmjx_lm``) replaces those fits' rows
of the CSV and keeps its others.
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import math
import time
from pathlib import Path

import numpy as np

import diffmjx
from diffmjx import sysid
from experiments import common
from experiments.sysid_recovery import HORIZON, MODELS, STRIDE, perturbed, record

THRESHOLDS = (0.01, 0.001)
PEER_THREADS = 2  # mujoco.sysid's rollouts on both cores of the study's machine
DEFAULT_MODELS = "arm,box,ball,finger,finger_box,legged"


def case(name: str, seed: int, edit=None):
    """(truth, params, ParameterSet, recordings, start model) of ``name``; ``edit(spec)`` changes the
    scene first (in the real system and the fitted model alike)."""
    spec = MODELS[name]["spec"]()
    if edit is not None:
        edit(spec)
    truth = spec.compile()
    params = MODELS[name]["params"]()
    ps = sysid.ParameterSet(truth, params, spec=spec)
    recs = [record(name, truth, 100 * seed + k, False) for k in range(MODELS[name]["recordings"])]
    return truth, params, ps, recs, ps.write(perturbed(ps, seed))


def _errors(values: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Largest relative error of each row of ``values``."""
    return np.max(np.abs(np.asarray(values) / truth - 1), axis=-1)


def _time_to(errors: np.ndarray, times: np.ndarray, threshold: float) -> float:
    hit = np.flatnonzero(errors <= threshold)
    return float(times[hit[0]]) if hit.size else math.nan


class _CacheEvents:
    """Counts of JAX's persistent-cache lookups (``jax.monitoring`` events): a program loaded from the
    cache is a hit, one compiled is a miss (programs too quick to compile are not looked up)."""

    def __init__(self):
        self.counts = {"hits": 0, "misses": 0}
        import jax

        jax.monitoring.register_event_listener(self._event)

    def _event(self, event: str, **_) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            self.counts["hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            self.counts["misses"] += 1


@functools.cache
def _cache_events() -> _CacheEvents:
    return _CacheEvents()


def run_diffmjx(name: str, seed: int, cfg: diffmjx.Config, fit: sysid.FitConfig, program: str = "compiled") -> dict:
    """DiffMJX's fit: its final error and the times at which each error was first reached.
    ``program``: ``compiled`` for the first fit of this model and config in the process (it traces and
    compiles, or loads from the persistent cache, the simulation's program), ``reused`` for a later one."""
    _, params, ps, recs, start = case(name, seed)
    cache = _cache_events()
    before = dict(cache.counts)
    t = time.perf_counter()
    res = sysid.identify(start, params, recs, cfg=cfg, fit=fit, progress=False)
    wall = time.perf_counter() - t
    errors = _errors(res.history.values, ps.start)
    times = res.start_s + np.cumsum(res.history.wall_s)
    final = float(_errors(sysid.ParameterSet(res.model, params).start, ps.start))
    return {
        "model": name,
        "seed": seed,
        "method": "diffmjx_lm",
        "integrator": _label(cfg),
        "timestep": float(start.opt.timestep),
        "max_rel_error": final,
        "wall_s": wall,
        "setup_s": res.start_s,
        "program": program,
        "threads": sysid.problem.resolve_threads(fit.threads),
        # programs this fit loaded from JAX's persistent cache and compiled (a reused program is neither)
        "cache_hits": cache.counts["hits"] - before["hits"],
        "cache_misses": cache.counts["misses"] - before["misses"],
        "iterations": len(res.history.step),
        **{f"time_to_{thr:g}": _time_to(errors, times, thr) for thr in THRESHOLDS},
    }


def _label(cfg: diffmjx.Config) -> str:
    """DiffMJX's setting by name: the tolerance, and the saltation term's resolution where it is on."""
    ic = cfg.integrator
    return f"tsit5 rtol {ic.rtol:g}" + (f" saltation {ic.saltation_resolution:g}" if ic.saltation else "")


def run_peer(name: str, seed: int, integrator: str, divisor: int, fit: sysid.FitConfig) -> dict:
    """``mujoco.sysid``'s fit with ``integrator`` (``euler``: the model's own; ``rk4``) at the model's
    timestep divided by ``divisor``."""
    import mujoco

    _, params, ps, recs, start = case(name, seed)
    start = copy.deepcopy(start)
    start.opt.timestep = start.opt.timestep / divisor
    if integrator == "rk4":
        start.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    t = time.perf_counter()
    res = sysid.identify_mujoco_sysid(start, params, recs, fit=fit, n_threads=PEER_THREADS)
    wall = time.perf_counter() - t
    final = float(_errors(sysid.ParameterSet(res.model, params).start, ps.start))
    return {
        "model": name,
        "seed": seed,
        "method": "mujoco_sysid",
        "integrator": integrator,
        "timestep": float(start.opt.timestep),
        "max_rel_error": final,
        "wall_s": wall,
        "setup_s": math.nan,
        "program": "",
        "threads": PEER_THREADS,
        "iterations": res.iterations,
        # no per-iteration values: the whole fit's time where its final values are within the error
        **{f"time_to_{thr:g}": (wall if final <= thr else math.nan) for thr in THRESHOLDS},
    }


def _best(rows: list[dict], key: str) -> dict | None:
    """The fastest of ``rows`` (one method's settings on one data set) that reached the error ``key``."""
    reached = [r for r in rows if math.isfinite(float(r[key]))]
    return min(reached, key=lambda r: float(r[key])) if reached else None


def _setting(r: dict | None) -> str:
    if r is None:
        return "none"
    if r["method"] == "mujoco_sysid":
        return f"{r['integrator']} {float(r['timestep']) * 1e3:g} ms"
    return r["integrator"].removeprefix("tsit5 ")


def summary(rows: list[dict]) -> list[dict]:
    """Per model and error: each method's median time over seeds at its best setting per seed (the
    fastest that reaches the error), those settings and DiffMJX's time ratio; and DiffMJX's median
    over the fits that compiled their program and over those that reused it (NaN where none)."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        seeds = sorted({int(r["seed"]) for r in mine})
        for thr in THRESHOLDS:
            key = f"time_to_{thr:g}"
            best = {
                method: [_best([r for r in mine if int(r["seed"]) == s and r["method"] == method], key) for s in seeds]
                for method in ("diffmjx_lm", "mujoco_sysid")
            }
            times = {m: [float(b[key]) if b else math.nan for b in bs] for m, bs in best.items()}
            ours_m = _median_or_nan(times["diffmjx_lm"])
            peer_m = _median_or_nan(times["mujoco_sysid"])
            # DiffMJX's fits that compiled their program against those that reused an earlier fit's
            by_program = {
                p: _median_or_nan([float(b[key]) for b in best["diffmjx_lm"] if b and b.get("program") == p])
                for p in ("compiled", "reused")
            }
            later = by_program["reused"]
            out.append(
                {
                    "model": model,
                    "error": thr,
                    "seeds": len(seeds),
                    "diffmjx_reached": sum(b is not None for b in best["diffmjx_lm"]),
                    "diffmjx_median_s": ours_m,
                    "diffmjx_best_settings": "; ".join(_setting(b) for b in best["diffmjx_lm"]),
                    "peer_reached": sum(b is not None for b in best["mujoco_sysid"]),
                    "peer_median_s": peer_m,
                    "peer_best_settings": "; ".join(_setting(b) for b in best["mujoco_sysid"]),
                    "ratio": ours_m / peer_m if math.isfinite(ours_m) and math.isfinite(peer_m) else math.nan,
                    "diffmjx_compiled_s": by_program["compiled"],
                    "diffmjx_reused_s": later,
                    "ratio_reused": later / peer_m if math.isfinite(later) and math.isfinite(peer_m) else math.nan,
                }
            )
    return out


def _median_or_nan(xs) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return float(np.median(xs)) if xs else math.nan


def plot(rows: list[dict], png: Path) -> None:
    """Per model: each fit's final error against its wall time (the peer at each timestep, DiffMJX's
    time to each error as its path), with the 1 % and 0.1 % lines."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def fits(ax, sel, **style):  # each fit's final error against its wall time
        ax.scatter([float(r["wall_s"]) for r in sel], [max(float(r["max_rel_error"]), 1e-9) for r in sel], **style)

    models = list(dict.fromkeys(r["model"] for r in rows))
    cols = 3
    fig, axes = plt.subplots(math.ceil(len(models) / cols), cols, figsize=(12, 3.4 * math.ceil(len(models) / cols)))
    axes = np.atleast_1d(axes).ravel()
    legend: dict = {}
    for ax, model in zip(axes, models):
        mine = [r for r in rows if r["model"] == model]
        peer = [r for r in mine if r["method"] == "mujoco_sysid"]
        for integ, marker, color in (("euler", "s", "tab:orange"), ("rk4", "D", "tab:red")):
            sel = [r for r in peer if r["integrator"] == integ]
            if not sel:
                continue
            fits(ax, sel, color=color, marker=marker, s=24, alpha=0.8, label=f"mujoco.sysid, {integ} (timestep swept)")
        ours = [r for r in mine if r["method"] == "diffmjx_lm"]
        for program, face in (("compiled", "tab:blue"), ("reused", "none")):
            sel = [r for r in ours if r.get("program", "compiled") == program]
            if not sel:
                continue
            kind = "first fit" if program == "compiled" else "program reused"
            fits(
                ax,
                sel,
                facecolors=face,
                edgecolors="tab:blue",
                marker="o",
                s=30,
                label=f"DiffMJX (LM), end of fit ({kind})",
            )
        for thr in THRESHOLDS:
            t = [float(r[f"time_to_{thr:g}"]) for r in ours]
            ax.scatter(t, [thr] * len(t), color="tab:blue", marker="|", s=120, label=None)
            ax.axhline(thr, color="0.6", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))  # plain seconds: 2, 5, 10, 20
        ax.xaxis.set_minor_formatter(NullFormatter())  # 1, 2, 5 per decade: minor labels overlap on short ranges
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("wall time (s)", fontsize=8.5)
        ax.set_ylabel("largest relative error", fontsize=8.5)
        ax.grid(alpha=0.3, which="major")
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)  # one legend for the figure, below the panels: none hides a point
    for ax in axes[len(models) :]:
        ax.axis("off")
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=len(legend), fontsize=8, frameon=False)
    fig.suptitle(
        "Final parameter error against wall time, noise-free recordings (bars: DiffMJX's time to 1 % and 0.1 %)",
        fontsize=10,
    )
    common.save_figure(fig, png, rect=(0, 0.05, 1, 1))


def _read(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _key(r: dict) -> tuple:
    return r["model"], int(r["seed"]), r["method"], r["integrator"], round(float(r["timestep"]), 12)


def merged(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` rows (the CSV's) with the fits of ``new`` in their place, and ``new``'s others appended:
    a run of some models, seeds or methods leaves the CSV's other fits as they were."""
    rows = common.replaced_rows(old, new, _key)
    for r in rows:  # fits from before the column (the CSV's, the stage cache's): DiffMJX ran on one thread
        if r.get("threads") in (None, ""):
            r["threads"] = PEER_THREADS if r["method"] == "mujoco_sysid" else 1
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=DEFAULT_MODELS)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--euler", default="1,2,4,8,16,32", help="the peer's timestep divisors, the model's integrator")
    p.add_argument("--rk4", default="1,2,4,8", help="the peer's timestep divisors with MuJoCo's RK4")
    p.add_argument("--tolerances", default="1e-3,1e-4,1e-5,1e-7", help="DiffMJX's integrator.rtol = atol settings")
    p.add_argument(
        "--saltation",
        default="",
        help="also fit with integrator.saltation=true at these integrator.saltation_resolution values (m), "
        "comma-separated, at each tolerance (the TouchdownJumpWarning's advice for fits through touchdowns)",
    )
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--cached-only", action="store_true", help="summarise the fits already cached, run none")
    p.add_argument("--plot-only", action="store_true")
    p.add_argument(
        "--persistent-cache",
        action="store_true",
        help="use the user's persistent compile cache (default: an empty one, so a first fit compiles)",
    )
    p.add_argument(
        "--methods", default="diffmjx_lm,mujoco_sysid", help="the methods to run (the CSV's other rows are kept)"
    )
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    if unknown := sorted(set(methods) - {"diffmjx_lm", "mujoco_sysid"}):
        p.error(f"--methods: {', '.join(unknown)} unknown; choose from diffmjx_lm, mujoco_sysid")
    csv_path, summary_path, png = (
        args.out / "sysid_peer.csv",
        args.out / "sysid_peer_summary.csv",
        args.out / "sysid_peer.png",
    )
    if args.plot_only:
        rows = _read(csv_path)
        plot(rows, png)
        return
    if args.persistent_cache:
        diffmjx.enable_compilation_cache()
    else:  # an empty cache: a first fit compiles, as a user's first ever does, and later fits find what it wrote
        import atexit
        import shutil
        import tempfile

        empty = tempfile.mkdtemp(prefix="diffmjx-sysid-peer-cache-")
        atexit.register(shutil.rmtree, empty, ignore_errors=True)
        diffmjx.enable_compilation_cache(empty)
    cfgs = [
        # the committed fits were made before derivatives carried the force jump at touchdown
        diffmjx.Config().override(f"integrator.rtol={t}", f"integrator.atol={t}", "integrator.saltation=false")
        for t in args.tolerances.split(",")
    ]
    cfgs += [
        c.override("integrator.saltation=true", f"integrator.saltation_resolution={r}")
        for r in args.saltation.split(",")
        if r
        for c in list(cfgs)
    ]
    fit = sysid.FitConfig(horizon=HORIZON, stride=STRIDE, steps=30)
    settings = [("euler", int(x)) for x in args.euler.split(",") if x] + [
        ("rk4", int(x)) for x in args.rk4.split(",") if x
    ]
    from tqdm.auto import tqdm

    cases = [(m, s) for m in args.models.split(",") for s in range(args.seeds)]
    rows: list[dict] = []
    compiled: set = set()  # (model, config) whose program this process has compiled: later fits reuse it
    for name, seed in tqdm(cases, desc="sysid peer"):
        for cfg in cfgs if "diffmjx_lm" in methods else ():
            # a fit with the user's cache is another measurement than one from an empty cache (the default)
            key = (name, seed, cfg.to_dict(), fit.to_dict()) + (("persistent cache",) if args.persistent_cache else ())
            if args.cached_only and not common.stage_path("sysid_peer_diffmjx", key).exists():
                continue
            program = "reused" if (name, cfg) in compiled else "compiled"

            def run(name=name, seed=seed, cfg=cfg, program=program):
                compiled.add((name, cfg))  # run here, not read from the stage cache
                return run_diffmjx(name, seed, cfg, fit, program)

            row = common.stage("sysid_peer_diffmjx", key, run, args.fresh)
            rows.append({**row, "integrator": _label(cfg)})  # the setting, by name
        for integ, div in settings if "mujoco_sysid" in methods else ():
            key = (name, seed, integ, div, fit.to_dict())
            if args.cached_only and not common.stage_path("sysid_peer_mujoco", key).exists():
                continue
            run = functools.partial(run_peer, name, seed, integ, div, fit)
            rows.append(common.stage("sysid_peer_mujoco", key, run, args.fresh))
        common.write_csv(csv_path, merged(_read(csv_path) if csv_path.exists() else [], rows))
    rows = merged(_read(csv_path), rows)
    table = summary(rows)
    common.write_csv(summary_path, table)
    plot(rows, png)
    for r in table:
        print(r)


if __name__ == "__main__":
    main()
