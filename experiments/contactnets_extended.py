"""ContactNets cube, extended identification (paper Figs. 22 and 11): fit for prediction, select, publish.

    python -m experiments.contactnets_extended [--quick] [--set KEY=VALUE ...] [--fresh] [--store DIR]

Identifies every parameter of ``experiments.contactnets.CubeParams`` (side length, mass, solref, solimp,
friction) from the real ContactNets tosses with DiffMJX + contacts from distance, and publishes
the fit that predicts whole tosses best. The tosses are split three ways by toss (seeded):
training (segments), *selection* and *test* (the validation split cut in two by
``experiments.contactnets.selection_split``).

- **Adam** (``experiments.contactnets.train``) on the training segments from the pre-tuned start (the
  dataset's cube, ``CubeParams()``) and from seeded random starts (each parameter uniform in
  :data:`RANDOM_RANGES`), for each segment length N in the preset's ``horizons`` (N = 10 is the
  paper's pre-tuned start's), checkpointed after every step so a run stopped anywhere resumes.
- **The peer table on one footing**: Adam, Levenberg–Marquardt (``experiments.contactnets.fit_lm``) and
  MuJoCo's sysid (``experiments.contactnets.fit_mujoco_sysid``: the C engine, finite differences), each from
  the pre-tuned start on the *same* fixed subset of N = 4 training segments.
- **Early stopping and model selection** (``experiments.contactnets.select``): every fit is judged every
  ``every`` optimiser steps (and at its start and end) by the mean position error of whole-toss
  rollouts from each toss's first recorded state on the selection tosses; each fit stops at its
  best snapshot, and the best of those is the winner. Nothing is chosen on the test tosses: the
  reported figure is the winner's test error against the pre-tuned cube's.

Writes to ``docs/results/``: ``contactnets_extended.csv`` (one row per fit: method, start, N, wall
time, gradient or Jacobian evaluations, the stopped step and its parameters, subset loss,
selection and test errors), ``contactnets_extended_history.csv`` (every snapshot's selection
error, and the training loss per step), ``contactnets_extended.png`` (selection error against
step per fit; test error per fit), ``contactnets_rollouts.png`` (Fig. 11: recorded vs simulated
trajectories of three test tosses, pre-tuned and published), ``contactnets_params.json`` (the
winner, same keys as ever: ``experiments.contactnets.save_params_json``) and
``contactnets_params_record.json`` (how it was chosen: the run, its step, the selection and test
tosses, their errors per toss, the pre-tuned cube's, the command). Every finished fit and score is
saved (``experiments.common.stage``), so a rerun resumes; ``--fresh`` redoes them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from diffmjx.runtime import stage_path, stage_store
from experiments import common
from experiments import contactnets as cn

RANDOM_RANGES = {  # uniform ranges of the random starts (components of solref / solimp in order)
    "side_length": ((0.07, 0.14),),
    "mass": ((0.2, 0.6),),
    "solref": ((0.01, 0.05), (0.5, 1.5)),
    "solimp": ((0.01, 0.3), (0.8, 0.99), (0.002, 0.03), (0.3, 0.7), (1.5, 4.0)),
    "friction": ((0.05, 0.5),),
}
FREE = ("side_length", "mass", "solref", "solimp", "friction")
# what ``--only`` matches: the Adam fits are "Adam N=<n> from <start>" (start "pre-tuned" or "random <i>")
FIT_LABELS = ("Adam N=", "Adam on the subset", "Levenberg-Marquardt", "mujoco.sysid", "selection scores")


class Preset(NamedTuple):
    adam: str  # the sysid preset of the Adam fits (experiments/configs/sysid_<adam>.yaml)
    horizons: tuple[tuple[int, int], ...]  # (segment length N, random starts besides the pre-tuned one) per Adam set
    every: int  # snapshot stride of early stopping, in optimiser steps
    subset: int  # segments of the peer table's common subset
    peer_adam_epochs: int  # Adam's epochs over that subset (minibatches of the preset's size)
    lm_steps: int  # Levenberg-Marquardt steps on it
    n_judge: int | None  # selection and test tosses each (the first of each half; None: all)


PRESETS = {
    "quick": Preset(
        "quick", horizons=((4, 3), (10, 1)), every=40, subset=64, peer_adam_epochs=20, lm_steps=6, n_judge=16
    ),
    # N = 10 costs 2.5x per step (about 2 h per fit here): two random starts besides the pre-tuned one
    "paper": Preset(
        "paper", horizons=((4, 5), (10, 2)), every=50, subset=512, peer_adam_epochs=10, lm_steps=30, n_judge=None
    ),
}


def random_start(seed: int) -> cn.CubeParams:
    """Random parameters: every component uniform in :data:`RANDOM_RANGES` (``np.random`` seeded)."""
    rng = np.random.default_rng([seed, 2205])
    vals = {k: np.array([rng.uniform(lo, hi) for lo, hi in r]) for k, r in RANDOM_RANGES.items()}
    return cn.CubeParams(**{k: (v[0] if len(v) == 1 else v) for k, v in vals.items()})


def inits_override(p: cn.CubeParams) -> str:
    items = ", ".join(f"{k}: {np.asarray(getattr(p, k)).tolist()}" for k in FREE)
    return f"train.inits={{{items}}}"


def _param_cols(p: cn.CubeParams) -> dict:
    out = {"side_mm": 1e3 * float(p.side_length), "mass_kg": float(p.mass), "friction": float(p.friction)}
    out.update({f"solref{i}": float(v) for i, v in enumerate(np.asarray(p.solref))})
    out.update({f"solimp{i}": float(v) for i, v in enumerate(np.asarray(p.solimp))})
    return out


def _digest(key) -> str:
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def run(
    preset: str,
    overrides,
    out: Path,
    fresh: bool = False,
    progress: bool = True,
    store: Path | None = None,
    only: str | None = None,
) -> list[dict]:
    """The study; ``store`` is where fits, scores and the Adam fits' per-step checkpoints are saved
    (``diffmjx.runtime.stage_store()`` if None): a run stopped at any step resumes from it.

    ``only``: run just the fits whose label contains it (see :data:`FIT_LABELS`), then stop before
    selection and return ``[]``. A second process given another fit uses another core: the fits
    are saved under the same keys as in a whole run, which then finds them done.
    """
    ps = PRESETS[preset]
    store = Path(store) if store is not None else stage_store()
    # train.batching=vmap: the committed results were made in lock-step (before ecc68fb); "--set
    # train.batching=auto" runs the segments one after another on a CPU, equal to the solve's tolerance, faster
    cfg = cn.SysidConfig.load(
        ps.adam, ("train.batching=vmap", *overrides, *common.PAPER_CFD, f"train.free=[{', '.join(FREE)}]")
    )
    tosses, train_names, val_names, report = cn.load_split(cfg.data)
    sel_names, test_names = (names[: ps.n_judge] for names in cn.selection_split(val_names))
    sel, test = [tosses[n] for n in sel_names], [tosses[n] for n in test_names]
    by_n = {}
    for n in sorted({4, *(h for h, _ in ps.horizons)}):
        cfg_n = cfg.override(f"data.horizon={n}", f"train.horizon={n}")
        by_n[n] = (cfg_n, cn.segments(tosses, train_names, n, report))
    cfg4, data4 = by_n[4]
    pick = np.sort(np.random.default_rng(0).choice(len(data4.start), ps.subset, replace=False))
    sub_q, sub_v = np.asarray(data4.qpos)[pick], np.asarray(data4.qvel)[pick]
    print(
        f"{report}\n{len(train_names)} training tosses ({len(data4.start)} segments of N = 4), "
        f"{len(sel)} selection and {len(test)} test tosses; the peer table fits {ps.subset} segments"
    )
    base = common.mjx.put_model(cn.cube_mjmodel(iterations=cfg.iterations))
    loss_fn = jax.jit(lambda p, q, v: cn.segment_loss(p, base, q, v, cfg.sim, batching=cfg.train.batching))
    key = (cfg.to_yaml(), preset, pick.tolist())

    def error(p: cn.CubeParams, split: str) -> float:
        tosses_ = sel if split == "selection" else test
        return common.stage(
            "sysid-ext-err",
            (cfg.sim.to_yaml(), cfg.iterations, split, sel_names, common.param_key(p)),
            lambda: cn.grouped_trajectory_error(p, tosses_, cfg),
            fresh,
            store,
        )

    default = cn.CubeParams()
    fits = {}  # name -> dict(method, start, horizon, init, history or None, params, wall, evaluations)
    for n, n_random in ps.horizons:
        cfg_n, data_n = by_n[n]
        starts = {"pre-tuned": default, **{f"random {i}": random_start(i) for i in range(n_random)}}
        for start_name, start in starts.items():
            # a checkpoint after every step, beside the stages: a fit stopped mid-way resumes there
            ckpt = store / f"sysid-ext-adam-{_digest((key, n, start_name))}"
            if fresh:
                shutil.rmtree(ckpt, ignore_errors=True)
            run_cfg = cfg_n.override(inits_override(start), f"train.checkpoint_dir={ckpt}")

            label = f"Adam N={n} from {start_name}"
            if only is not None and only not in label:  # "selection scores" loads the finished fits
                if only not in FIT_LABELS[4] or not stage_path("sysid-ext-adam", (key, n, start_name), store).exists():
                    continue

            def fit(run_cfg=run_cfg, data_n=data_n, label=label):
                res = cn.train(run_cfg, data_n, progress=progress, desc=label)
                return res, float(np.sum(res.history.wall_s))  # every piece's steps (each piece's first has its JIT)

            res, wall = common.stage("sysid-ext-adam", (key, n, start_name), fit, fresh, store)
            fits[f"Adam, N = {n}, {start_name}"] = dict(
                method="Adam",
                start=start_name,
                horizon=n,
                segments=len(data_n.start),
                init=start,
                history=res.history,
                params=res.params,
                wall=wall,
                evaluations=len(res.history.step),
                kind="minibatch gradient",
            )

    # the peer table: every method from the pre-tuned start on the same subset of N = 4 segments
    sub_cfg = cfg4.override("train.steps_per_epoch=null", f"train.epochs={ps.peer_adam_epochs}")

    sub_ckpt = store / f"sysid-ext-adam-subset-{_digest(key)}"
    if fresh:
        shutil.rmtree(sub_ckpt, ignore_errors=True)

    def fit_adam_subset():
        res = cn.train(
            sub_cfg.override(f"train.checkpoint_dir={sub_ckpt}"),
            cn.Segments(sub_q, sub_v, data4.toss[pick], data4.start[pick]),
            progress=progress,
            desc="Adam on the subset",
        )
        return res, float(np.sum(res.history.wall_s))

    lm_ckpt = store / f"sysid-ext-lm-{_digest(key)}.npz"  # after every LM step: a stopped fit resumes
    if fresh:
        lm_ckpt.unlink(missing_ok=True)

    # LM's segments run as the library chooses (one after another on a CPU) unless --set says otherwise:
    # forward-mode Jacobians of 512 segments in lock-step cost 12x per step (the paper run's LM: median
    # 636 s vmapped, 53 s mapped), equal to the solve's tolerance; the batching is not part of the
    # fit's key or checkpoint, so that run's LM resumed its five vmapped steps this way (docs/sysid.md)
    lm_cfg = cfg4 if any(o.startswith("train.batching=") for o in overrides) else cfg4.override("train.batching=auto")

    def fit_lm():
        res = cn.fit_lm(lm_cfg, sub_q, sub_v, steps=ps.lm_steps, progress=progress, checkpoint=lm_ckpt)
        return res, float(np.sum(res.history.wall_s))

    def fit_peer():
        return cn.fit_mujoco_sysid(sub_q, sub_v, default, FREE, iterations=cfg.iterations)

    if only is not None:
        if only in FIT_LABELS[1]:
            common.stage("sysid-ext-adam-subset", key, fit_adam_subset, fresh, store)
        if only in FIT_LABELS[2]:
            common.stage("sysid-ext-lm", key, fit_lm, fresh, store)
        if only in FIT_LABELS[3]:
            common.stage("sysid-ext-peer", key, fit_peer, fresh, store)
        if only in FIT_LABELS[4]:  # what selection will read: every finished Adam fit's snapshots
            plan = [p for f in fits.values() for _, p in cn.snapshots(f["init"], f["history"], ps.every)]
            for p in tqdm(plan, desc=f"selection scores of {len(fits)} finished fits", disable=not progress):
                error(p, "selection")
            error(default, "selection")
            error(default, "test")
        print(f"--only {only!r}: its fits are saved in {store}; selection runs without --only")
        return []
    res, wall = common.stage("sysid-ext-adam-subset", key, fit_adam_subset, fresh, store)
    fits["Adam, subset"] = dict(
        method="Adam (subset)",
        start="pre-tuned",
        horizon=4,
        segments=ps.subset,
        init=default,
        history=res.history,
        params=res.params,
        wall=wall,
        evaluations=len(res.history.step),
        kind="minibatch gradient",
    )

    lm, wall = common.stage("sysid-ext-lm", key, fit_lm, fresh, store)
    fits["Levenberg-Marquardt, subset"] = dict(
        method="Levenberg-Marquardt (optimistix)",
        start="pre-tuned",
        horizon=4,
        segments=ps.subset,
        init=default,
        history=None,
        params=lm.params,
        wall=wall,
        evaluations=len(lm.history.step),
        kind="Jacobian of the subset",
    )
    peer = common.stage("sysid-ext-peer", key, fit_peer, fresh, store)
    fits["mujoco.sysid, subset"] = dict(
        method="mujoco.sysid (C engine, finite differences)",
        start="pre-tuned",
        horizon=4,
        segments=ps.subset,
        init=default,
        history=None,
        params=peer.params,
        wall=peer.wall_s,
        evaluations=peer.evaluations,
        kind="residuals of the subset",
    )

    # early stopping of every fit and selection among them, on the selection tosses only
    runs = {name: (f["init"], f["history"]) for name, f in fits.items() if f["history"] is not None}
    best, scored = cn.select(runs, sel, cfg, every=ps.every, progress=progress, score=lambda p: error(p, "selection"))
    stopped = {}
    for s in scored:
        if s.run not in stopped or s.error_mm < stopped[s.run].error_mm:
            stopped[s.run] = s
    rows = [
        {
            "fit": "pre-tuned cube (no fit)",
            "method": "none",
            "start": "pre-tuned",
            "horizon": "",
            "segments": 0,
            "fit_wall_s": 0.0,
            "evaluations": 0,
            "evaluation": "",
            "steps": 0,
            "stopped_step": 0,
            **_param_cols(default),
            "subset_loss": float(loss_fn(default, sub_q, sub_v)),
            "selection_err_mm": error(default, "selection"),
            "test_err_mm": error(default, "test"),
            "published": False,
        }
    ]
    for name, f in fits.items():
        if name in stopped:
            p, step = stopped[name].params, stopped[name].step
        else:  # LM and the peer: their final parameters (no snapshots)
            p, step = f["params"], ""
        steps = len(f["history"].step) if f["history"] is not None else ""
        rows.append(
            {
                "fit": name,
                "method": f["method"],
                "start": f["start"],
                "horizon": f["horizon"],
                "segments": f["segments"],
                "fit_wall_s": f["wall"],
                "evaluations": f["evaluations"],
                "evaluation": f["kind"],
                "steps": steps,
                "stopped_step": step,
                **_param_cols(p),
                "subset_loss": float(loss_fn(p, sub_q, sub_v)),
                "selection_err_mm": error(p, "selection"),
                "test_err_mm": error(p, "test"),
                "published": name == best.run,
            }
        )
    hist = [{"fit": s.run, "step": s.step, "selection_err_mm": s.error_mm} for s in scored]

    out.mkdir(parents=True, exist_ok=True)
    common.write_csv(out / "contactnets_extended.csv", rows)
    common.write_csv(out / "contactnets_extended_history.csv", hist)
    _plot(rows, hist, out / "contactnets_extended.png")
    options = cn.model_options(cn.cube_mjmodel(iterations=cfg.iterations))
    cn.save_params_json(out / "contactnets_params.json", best.params, options, cn.sim_overrides(cfg.sim))
    # per toss, one toss per rollout: what a user's own rollout of one toss reproduces
    test_err, per_toss = cn.grouped_trajectory_error(best.params, test, cfg, group_size=1, per_toss=True)
    pre_err, pre_per_toss = cn.grouped_trajectory_error(default, test, cfg, group_size=1, per_toss=True)
    record = {
        "fit": best.run,
        "stopped_step": best.step,
        "preset": preset,
        "overrides": list(overrides),
        "command": "python -m experiments.contactnets_extended"
        + (" --quick" if preset == "quick" else "")
        + "".join(f" --set {o}" for o in overrides),
        "selection_tosses": sel_names,
        "test_tosses": test_names,
        "selection_error_mm": best.error_mm,
        "test_error_mm": test_err,
        "pretuned_test_error_mm": pre_err,
        "test_ratio_to_pretuned": test_err / pre_err,
        "per_toss_test_error_mm": dict(zip(test_names, map(float, per_toss), strict=True)),
        "pretuned_per_toss_test_error_mm": dict(zip(test_names, map(float, pre_per_toss), strict=True)),
    }
    (out / "contactnets_params_record.json").write_text(json.dumps(record, indent=2) + "\n")
    _plot_rollouts(
        test[:3],
        {"pre-tuned cube": default, f"published ({best.run})": best.params},
        cfg,
        out / "contactnets_rollouts.png",
    )
    print(
        f"\n{'fit':<34} {'stop':>5} {'side mm':>8} {'friction':>8} {'subset loss':>12} {'sel. mm':>8} "
        f"{'test mm':>8} {'wall s':>8}"
    )
    for r in rows:
        print(
            f"{r['fit']:<34} {r['stopped_step']!s:>5} {r['side_mm']:8.1f} {r['friction']:8.3f} {r['subset_loss']:12.4g} "
            f"{r['selection_err_mm']:8.1f} {r['test_err_mm']:8.1f} {r['fit_wall_s']:8.1f}"
        )
    print(
        f"published: {best.run} at step {best.step}: test error {test_err:.1f} mm vs the pre-tuned cube's "
        f"{pre_err:.1f} mm ({test_err / pre_err:.2f}x)"
    )
    return rows


def _plot(rows, hist, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [1, 1.3]})
    pre = next(r for r in rows if r["method"] == "none")
    for name in dict.fromkeys(h["fit"] for h in hist):
        h = [x for x in hist if x["fit"] == name]
        published = any(r["published"] and r["fit"] == name for r in rows)
        colour = (
            "tab:red" if published else ("tab:blue" if "N = 4" in name else "tab:green" if "N = 10" in name else "grey")
        )
        a.plot(
            [x["step"] for x in h],
            [x["selection_err_mm"] for x in h],
            "o-",
            ms=3,
            color=colour,
            lw=2 if published else 0.8,
            alpha=1.0 if published else 0.6,
        )
    a.axhline(pre["selection_err_mm"], color="k", ls="--", lw=1)
    a.plot([], [], color="tab:blue", label="Adam, N = 4")
    a.plot([], [], color="tab:green", label="Adam, N = 10")
    a.plot([], [], color="grey", label="Adam on the subset")
    a.plot([], [], color="tab:red", lw=2, label="published (best snapshot)")
    a.plot([], [], color="k", ls="--", label="pre-tuned cube")
    a.set(
        xlabel="optimiser step",
        ylabel="selection-toss error (mm)",
        title="early stopping: whole-toss error per snapshot",
    )
    a.legend(fontsize=7)
    labels = [r["fit"].replace("Adam, ", "Adam ").replace(", ", "\n") for r in rows]
    x = np.arange(len(rows))
    colours = ["k" if r["method"] == "none" else "tab:red" if r["published"] else "tab:blue" for r in rows]
    b.bar(x, [r["test_err_mm"] for r in rows], color=colours, alpha=0.8)
    b.scatter(
        x, [r["selection_err_mm"] for r in rows], color="k", marker="_", s=120, zorder=3, label="selection tosses"
    )
    b.axhline(0.85 * pre["test_err_mm"], color="k", ls=":", lw=1, label="0.85 x pre-tuned (test)")
    b.set_xticks(x, labels, rotation=75, fontsize=6)
    b.set(
        ylabel="mean position error (mm)", title="test tosses (bars), selection tosses (dashes), each fit stopped early"
    )
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_rollouts(tosses, params: dict, cfg, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(tosses), figsize=(4 * len(tosses), 5.5), squeeze=False)
    sims = {name: cn.rollout_tosses(p, tosses, cfg)[0] for name, p in params.items()}
    for j, t in enumerate(tosses):
        time_s = np.arange(t.qpos.shape[0]) * cn.DT
        n = t.qpos.shape[0]
        axes[0, j].plot(time_s, 1e3 * t.qpos[:, 2], "k", lw=2, label="recorded")
        axes[1, j].plot(1e3 * t.qpos[:, 0], 1e3 * t.qpos[:, 1], "k", lw=2, label="recorded")
        for name, q in sims.items():
            axes[0, j].plot(time_s, 1e3 * q[j, :n, 2], label=name)
            axes[1, j].plot(1e3 * q[j, :n, 0], 1e3 * q[j, :n, 1], label=name)
        axes[0, j].set(title=t.name, xlabel="time (s)", ylabel="height z (mm)")
        axes[1, j].set(xlabel="x (mm)", ylabel="y (mm)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick preset (minutes on a 2-core CPU)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="sysid override for every fit, e.g. train.learning_rate=0.01 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where the CSV and PNG files go")
    p.add_argument("--fresh", action="store_true", help="redo fits saved by an earlier run")
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help="folder of the saved fits, scores and per-step checkpoints (default: the stage cache, "
        "$DIFFMJX_STAGE_CACHE or ~/.cache/diffmjx/stages); a run stopped at any step resumes from it",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--only",
        default=None,
        metavar="LABEL",
        help="run just the fits whose label contains LABEL (e.g. 'Adam N=10 from pre-tuned', "
        "'Adam on the subset', 'Levenberg-Marquardt', 'mujoco.sysid'; 'selection scores': score the "
        "snapshots of every finished Adam fit) and stop before selection: "
        "a second process on another fit uses another core",
    )
    args = p.parse_args(argv)
    common.setup()
    run(
        "quick" if args.quick else "paper",
        args.set,
        args.out,
        fresh=args.fresh,
        progress=not args.no_progress,
        store=args.store,
        only=args.only,
    )


if __name__ == "__main__":
    main()
