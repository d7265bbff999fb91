"""Gradient fidelity suite: random scenes over every supported geom pair, per configuration.

    python -m experiments.fidelity [--quick] [--configs NAME,...] [--families NAME,...]
                                   [--shots N] [--seed S] [--name STEM] [--set KEY=VALUE ...]

A free body (sphere, capsule, box, cylinder or ellipsoid, random size, density and contact
stiffness) is thrown onto a plane or onto a geom fixed to the world that stands on the plane
(sphere, capsule, box). Each *family* is one geom pair; each *shot* is a random pose, spin and
velocity of one of five kinds: ``onset`` (a drop with small velocities), ``sliding`` (fast
sideways), ``rolling`` (sideways with the matching spin), ``rebound`` (fast downwards) and
``tumble`` (random spin and tilt). Against a fixed target a body often touches target and plane in
turn or at once (multi-contact); ``box-plane`` lands flat, four corners at once. The README's "Use"
snippet (the cube toss, u0 = -2, no lateral velocity) is the family ``readme``.

Measured per shot: the gradient of ``w . position(T)`` (a random unit ``w``; T = 0.5 s) with
respect to the initial velocity (6 numbers, linear and angular), against central differences of
the same scene solved at rtol = atol = 1e-12 (step 1e-5; a second step of 4e-5 must agree to 1 %,
else the shot is reported as ``truth_unconverged`` and left out of the summaries, as is a shot whose
reference solve needs more than 4096 steps in a control period). Error = ``|g - g*| /
|g*|`` (vector norms); ``wrong_sign`` means ``g . g* <= 0``. Per family and configuration: median,
90th percentile and worst error, backward run time per shot (one jitted gradient, shots one after
another) and its JIT time. The reference solve uses each configuration's own impedance floor and
collision settings, so an error is the configuration's integration and differentiation error, not
a change of model.

Writes docs/results/fidelity.csv (one row per shot and configuration), fidelity_summary.csv and
fidelity.png (error distribution per configuration vs backward time). ``--quick``: six families (one
is the README snippet), four shots, the library defaults and checkpointed AD at 1e-8 (about 10 min
on a 2-core CPU). Finished (family, configuration) stages are saved (``experiments.common.stage``)
so an interrupted run resumes.

``--update`` reruns only the given families and configurations into an existing ``<name>.csv``
(after a change to one collision function, say): their rows are replaced, the others kept, and the
summary and figure are redrawn from the merged rows.

``--timeline FAMILY:SHOT`` shows where along one shot an error enters: AD of the position after
each control period against central differences of the 1e-12 solve (writes
``fidelity_timeline_<family>_<shot>.{csv,png}``; box-box shot 9 takes about 12 min).

The scenes, shots and measurement live in the library, :mod:`diffmjx.scenes.fidelity` (a public
API: the tests use it, and :func:`~diffmjx.scenes.fidelity.truth` and
:func:`~diffmjx.scenes.fidelity.measure` take any ``mjx.Model``, initial states and loss weights, so
a user can check their own configuration with them). This module is the study: it runs them over
families and configurations, saves the stages, writes the tables, prints, draws the figures and
shows the progress bars (the library functions draw none).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

import jax
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.scenes.fidelity import FAMILIES, FD_STEPS, TRUTH_AGREEMENT, measure, model, scene, shots, timeline, truth
from experiments import common

QUICK_FAMILIES = ("box-plane", "capsule-plane", "cylinder-plane", "sphere-box", "capsule-capsule", "readme")

_BASE = (
    "integrator.solver=tsit5",
    "integrator.step_control=pid",
    "collision.smooth=false",
    "cfd.enabled=false",
    "collision.plane_box=deepest",
    "solver.gradient=unroll",
)
# name -> overrides; "defaults" is diffmjx.Config() as it is when the suite runs
CONFIGS = {
    "defaults": (),
    # the other gradient mode at the other defaults: kink control on by itself (kink_step=auto)
    "checkpoint (defaults)": ("integrator.adjoint=checkpoint",),
    "model's solver budget": ("solver.min_iterations=0", "solver.max_tolerance=1", "solver.gradient=unroll"),
    "unrolled solve gradient": ("solver.gradient=unroll",),
    "checkpoint 1e-8": (
        *_BASE,
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
        "integrator.rtol=1e-8",
        "integrator.atol=1e-8",
        "solver.impedance_floor=1e-4",
        "integrator.kink_step=null",
        "collision.plane_box=mjx",
        "collision.plane_cylinder=mjx",
        "collision.box_box=mjx",
        "collision.capsule_capsule=mjx",
        "collision.capsule_box=mjx",
        "solver.min_iterations=0",
        "solver.max_tolerance=1",
    ),
    "checkpoint 1e-8 floor 0": (
        *_BASE,
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
        "integrator.rtol=1e-8",
        "integrator.atol=1e-8",
        "solver.impedance_floor=0",
        "integrator.kink_step=null",
    ),
    "checkpoint 1e-7 floor 0 kink 1e-6": (
        *_BASE,
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
        "integrator.rtol=1e-7",
        "integrator.atol=1e-7",
        "solver.impedance_floor=0",
        "integrator.kink_step=1e-6",
    ),
    "backsolve 1e-7 floor 0": (
        *_BASE,
        "integrator.adjoint=backsolve",
        "integrator.rtol=1e-7",
        "integrator.atol=1e-7",
        "solver.impedance_floor=0",
        "integrator.kink_step=null",
    ),
    "backsolve 1e-6 floor 0": (
        *_BASE,
        "integrator.adjoint=backsolve",
        "integrator.rtol=1e-6",
        "integrator.atol=1e-6",
        "solver.impedance_floor=0",
        "integrator.kink_step=null",
    ),
}
QUICK_CONFIGS = ("defaults", "checkpoint 1e-8 floor 0")
_REFERENCE_PROGRESS = partial(tqdm, desc="reference solves", leave=False)  # one bar per stage, then gone


def _fmt(v) -> str:
    return " ".join(f"{x:.6g}" for x in np.atleast_1d(v))


def run_timeline(base: diffmjx.Config, out: Path, spec: str, seed: int, fresh: bool = False) -> list[dict]:
    """``--timeline FAMILY:SHOT``: :func:`timeline` of that shot (of ten) with ``base``; writes
    ``fidelity_timeline_<family>_<shot>.{csv,png}``."""
    family, _, shot = spec.partition(":")
    sc = scene(family, seed)
    states = shots(sc, 10, seed)
    if not shot.isdigit() or int(shot) >= len(states["qvel"]):
        raise ValueError(
            f"--timeline {spec!r}: expected FAMILY:SHOT with SHOT in 0..{len(states['qvel']) - 1}, e.g. box-box:9"
        )
    k = int(shot)
    state = {key: v[k] for key, v in states.items()}
    mx = model(sc)
    key = (sc.xml, {k: v.tolist() for k, v in state.items()}, sc.horizon, FD_STEPS, base)
    per_period = partial(tqdm, desc="AD per period")
    res = common.stage("fidelity-timeline", key, lambda: timeline(mx, base, state, sc.horizon, per_period), fresh)
    rows = [
        dict(
            family=family,
            shot=k,
            motion=state["motion"],
            period=i + 1,
            t=round((i + 1) * 0.01, 6),
            rel_error=res["rel_error"][i],
            truth_agreement=res["truth_agreement"][i],
            truth_norm=res["truth_norm"][i],
        )
        for i in range(sc.horizon)
    ]
    stem = f"fidelity_timeline_{family.replace('-', '_')}_{k}"
    common.write_csv(out / f"{stem}.csv", rows)
    _plot_timeline(rows, out / f"{stem}.png")
    worst = int(np.argmax(res["rel_error"]))
    print(
        f"{family} shot {k}: error at the end {res['rel_error'][-1]:.2%}, largest {res['rel_error'][worst]:.2%} "
        f"(period {worst + 1}); first period above 0.1 %: "
        f"{next((r['period'] for r in rows if r['rel_error'] > 1e-3), None)}"
    )
    return rows


def _plot_timeline(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.semilogy(t, [max(100 * r["rel_error"], 1e-5) for r in rows], marker="o", ms=3, label="AD vs truth")
    ax.semilogy(t, [max(100 * r["truth_agreement"], 1e-5) for r in rows], ls=":", label="truth: two FD steps agree to")
    ax.axhline(1.0, color="k", ls=":", lw=1)
    ax.set_xlabel("end of the loss's period (s)")
    ax.set_ylabel("relative gradient error (%)")
    ax.set_title(f"{rows[0]['family']} shot {rows[0]['shot']} ({rows[0]['motion']}): where the error enters")
    ax.legend(fontsize=8)
    common.save_figure(fig, path)


def run(
    base: diffmjx.Config,
    out: Path,
    families,
    configs,
    n_shots: int,
    seed: int,
    fresh: bool = False,
    name: str = "fidelity",
    update: bool = False,
    set_overrides: tuple[str, ...] = (),
) -> list[dict]:
    if update and not (out / f"{name}.csv").exists():  # before anything runs
        raise FileNotFoundError(f"--update: {out / f'{name}.csv'} does not exist; run without --update to write it")
    rows = []
    for family in tqdm(families, desc="families"):
        sc = scene(family, seed)
        states = shots(sc, n_shots, seed)
        mx = model(sc)
        for config in configs:
            cfg = base.override(*CONFIGS[config])
            model_key = (sc.xml, {k: v.tolist() for k, v in states.items()}, sc.horizon, FD_STEPS)
            # the reference's values do not depend on how the solve is differentiated
            solve = dataclasses.replace(cfg.solver, gradient="unroll")
            ref = common.stage("fidelity-truth", (model_key, solve, cfg.collision, cfg.cfd),
                               lambda: truth(mx, cfg, states, sc.horizon, _REFERENCE_PROGRESS), fresh)  # fmt: skip # noqa: B023 (called within this iteration)
            # (backsolve's backward solve has run kink control since Dec 6, bisecting the stages'
            # brackets since a later change, and the discretised modes' forward solve since a later
            # one still: results before differ)
            ic = cfg.integrator
            version = ()
            if ic.adjoint == "backsolve":
                version = ("backward kink step", ic.backward_kink_step(), "stage brackets")
            elif ic.adjoint in ("checkpoint", "forward"):
                version = ("forward stage brackets",)
            res = common.stage("fidelity-grad", (model_key, cfg, ic.kink_step_used(), jax.__version__, *version),
                               lambda: measure(mx, cfg, states, ref, sc.horizon), fresh)  # fmt: skip # noqa: B023 (called within this iteration)
            ok = ref["agreement"] <= TRUTH_AGREEMENT
            e = res["rel_error"][ok] if ok.any() else np.full(1, np.nan)
            print(f"{family:<16} {config:<38} median {np.median(e):8.2%}  p90 {np.percentile(e, 90):8.2%}  "
                  f"worst {e.max():8.2%}  {res['run_s'].mean():6.2f} s/shot  JIT {res['jit_s']:4.0f} s"
                  + (f"  ({(~ok).sum()} unconverged truth)" if (~ok).any() else ""))  # fmt: skip
            for i in range(len(states["qvel"])):
                rows.append(dict(family=family, config=config, overrides=" ".join((*set_overrides, *CONFIGS[config])), shot=i,
                                 motion=states["motion"][i], rel_error=res["rel_error"][i],
                                 wrong_sign=bool(res["wrong_sign"][i]), truth_norm=np.linalg.norm(ref["grad"][i]),
                                 truth_agreement=ref["agreement"][i], truth_unconverged=bool(not ok[i]),
                                 accepted_steps=int(res["accepted"][i]), rejected_steps=int(res["rejected"][i]),
                                 budget_exhausted=bool(res["exhausted"][i]), backward_run_s=res["run_s"][i],
                                 backward_jit_s=res["jit_s"], grad_ad=_fmt(res["grad"][i]),
                                 grad_truth=_fmt(ref["grad"][i])))  # fmt: skip
    if update:
        rows = common.merge_rows(out / f"{name}.csv", rows, ("family", "config"), order=("family",))
    summary = summarise(rows)
    common.write_csv(out / f"{name}.csv", rows)
    common.write_csv(out / f"{name}_summary.csv", summary)
    _plot(rows, out / f"{name}.png")
    return summary


def summarise(rows: list[dict]) -> list[dict]:
    """Per (family, configuration) and per configuration over all families: error percentiles, wrong
    signs, mean backward time per shot, JIT time; shots with an unconverged truth left out."""
    out = []
    keys = list(dict.fromkeys((r["family"], r["config"]) for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    for family, config in keys + [("all", c) for c in configs]:
        sel = [r for r in rows if r["config"] == config and family in ("all", r["family"])]
        good = [r for r in sel if not r["truth_unconverged"]]
        e = np.array([r["rel_error"] for r in good]) if good else np.full(1, np.nan)
        out.append(
            dict(
                family=family,
                config=config,
                shots=len(good),
                unconverged_truth=len(sel) - len(good),
                median_rel_error=float(np.median(e)),
                p90_rel_error=float(np.percentile(e, 90)),
                worst_rel_error=float(e.max()),
                wrong_sign=int(sum(r["wrong_sign"] for r in good)),
                backward_run_s_per_shot=float(np.mean([r["backward_run_s"] for r in sel])),
                backward_jit_s=float(np.mean(list({r["family"]: r["backward_jit_s"] for r in sel}.values()))),
            )
        )
    return out


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    configs = list(dict.fromkeys(r["config"] for r in rows))
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw=dict(width_ratios=[1, 1.3]))
    for k, name in enumerate(configs):
        sel = [r for r in rows if r["config"] == name and not r["truth_unconverged"]]
        err = np.maximum([100 * r["rel_error"] for r in sel], 1e-4)
        t = np.mean([r["backward_run_s"] for r in sel])
        jitter = t * (1 + 0.04 * np.random.default_rng(k).uniform(-1, 1, len(err)))
        ax.scatter(jitter, err, s=10, color=f"C{k}", alpha=0.5)
        ax.plot([t], [np.median(err)], marker="_", ms=26, mew=3, color=f"C{k}", label=name)
        ax.plot([t], [np.percentile(err, 90)], marker="_", ms=14, mew=1.5, color=f"C{k}")
        med = [np.median([100 * r["rel_error"] for r in sel if r["family"] == f] or [np.nan]) for f in families]
        bx.plot(
            range(len(families)), np.maximum(med, 1e-4), marker="o", linestyle="none", color=f"C{k}", label=name
        )  # categories: points, no line
    for a in (ax, bx):
        a.set_yscale("log")
        a.axhline(1.0, color="k", ls=":", lw=1)
        a.set_ylabel("relative gradient error (%)")
    ax.set_xscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # within a decade the log axis labels minor ticks
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.set_xlabel("mean backward run time per shot (s)")
    ax.set_title("All shots (long bar: median, short bar: 90th percentile)")
    ax.legend(fontsize=7, loc="best")  # never over a shot
    bx.set_xticks(range(len(families)), families, rotation=45, ha="right")
    bx.set_title("Median per scene family")
    common.save_figure(fig, path)


def main(argv=None):
    cfg, args = common.cli(
        __doc__,
        Path(__file__).parent / "configs" / "fidelity.yaml",
        argv,
        extra=(
            ("--configs", dict(default=None, help="comma-separated configuration names (CONFIGS)")),
            ("--families", dict(default=None, help="comma-separated scene families (FAMILIES)")),
            ("--shots", dict(type=int, default=None, help="shots per family (default: 10; quick: 4)")),
            ("--seed", dict(type=int, default=0, help="seed of the scenes and shots")),
            ("--name", dict(default="fidelity", help="stem of the output files (default: fidelity)")),
            (
                "--update",
                dict(
                    action="store_true",
                    help="replace only the rows of these families and configurations in the existing "
                    "<name>.csv (the others kept) and redraw its summary and figure",
                ),
            ),
            (
                "--timeline",
                dict(
                    default=None,
                    metavar="FAMILY:SHOT",
                    help="instead: per-period error of one shot, e.g. box-box:9 (where an error enters)",
                ),
            ),
        ),
    )
    if args.timeline:
        run_timeline(cfg, args.out, args.timeline, args.seed, args.fresh)
        return
    families = args.families.split(",") if args.families else (QUICK_FAMILIES if args.quick else tuple(FAMILIES))
    configs = args.configs.split(",") if args.configs else (QUICK_CONFIGS if args.quick else tuple(CONFIGS))
    for name in configs:
        if name not in CONFIGS:
            raise ValueError(f"fidelity configuration {name!r} is not known; choose from: {', '.join(CONFIGS)}")
    for family in families:
        scene(family, 0)  # names an unknown family before anything runs
    n = args.shots or (4 if args.quick else 10)
    run(cfg, args.out, families, configs, n, args.seed, args.fresh, args.name, args.update, tuple(args.set or ()))


if __name__ == "__main__":
    main()
