"""ContactNets cube system identification, paper Fig. 9: the side length from 60, 100 and 140 mm.

    python -m experiments.contactnets_sysid [--preset quick|paper|PATH] [--set KEY=VALUE ...] [--configs NAME,...]
                                            [--fresh]

Identifies the cube's side length alone (the other parameters fixed at the defaults of
``experiments.contactnets.CubeParams``) from the real ContactNets tosses with ``experiments.contactnets.train``
(segments of N = 4 predicted states, Adam on the unconstrained side), started at 60, 100 and 140 mm,
for three simulations:

- ``mjx_smooth``: fixed-step MJX (``integrator.solver=mjx_euler``, 4 Newton iterations) with
  smooth collisions (``collision.smooth=true``);
- ``mjx_smooth_cfd``: the same plus contacts from distance (``cfd.enabled=true``) with the
  paper's sysid tuple ``(0, 0.01, w_c, 1, 4)`` and a reach ``w_c`` measured from the data: the
  largest gap between a 60 mm cube and the table at the recorded states where the real cube
  touches it, rounded up to the centimetre (the paper's 1 cm does not reach: a resting 60 mm cube
  hangs about 2 cm above the table);
- ``diffmjx_cfd``: DiffMJX at the sysid preset's simulation setting, the paper's (Tsit5, PID,
  rtol = atol = 1e-5, checkpointing, 2 Newton iterations, pinned to the solver and collision
  settings the committed results were made with), with CFD at its defaults
  (``cfd.enabled=true``: reach 10 cm);
- ``diffmjx_cfd_library``: the same integrator with the library's constraint solve and plane-box
  rule (``diffmjx.Config()``'s ``solver`` and ``collision`` sections: a converged solve without
  impedance floor, every penetrating corner a contact), which takes about a quarter of the steps.

Every run sees the same minibatches (``train.seed``). ``--set`` applies to every run (e.g.
``--set train.learning_rate=0.01``); ``--configs`` runs a subset. Writes (with ``--preset quick``;
another preset adds its name, ``contactnets_sysid_side_paper.*``) ``docs/results/contactnets_sysid_side.csv``
(config, init_mm, step, side_mm, loss, wall_s: one row per estimate, from step 0 = the initial
value; ``loss`` is the minibatch loss evaluated *at* that estimate, by the next step, so the last
row has none; ``wall_s`` is the run's cumulative time in gradient steps, JIT excluded),
``contactnets_sysid_side.png`` and ``contactnets_sysid_side_params.json`` (the side from the DiffMJX + CFD
run with the lowest loss over its last epoch, every other parameter at its default). Each run is
checkpointed after every step under ``~/.cache/diffmjx/sysid`` and resumed by a rerun
(``--fresh`` starts over), so a long run can be stopped and continued. ``--plot-only`` redraws the PNG from the CSV in ``--out``, no training.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import shutil
import time
from pathlib import Path

import numpy as np

from experiments import common
from experiments import contactnets as cn

TRUE_SIDE_MM = 1e3 * cn.CubeParams().side_length  # 104.8, the ContactNets cube
INITS_MM = (60.0, 100.0, 140.0)
CHECKPOINTS = Path.home() / ".cache" / "diffmjx" / "sysid"
SIDE_MIN_MM = 60.0  # the smallest start: the reach CFD needs is measured for it
# the paper's integrator (Tsit5, rtol = atol = 1e-5, checkpointing) with the library's constraint solve and
# plane-box rule (diffmjx.Config()'s solver and collision sections): a converged solve, no impedance floor,
# every penetrating corner a contact
CONVERGED_SOLVE = (
    "solver.min_iterations=16",
    "solver.max_tolerance=1e-10",
    "solver.gradient=implicit",
    "solver.impedance_floor=0",
)
LIBRARY_SOLVE = (*CONVERGED_SOLVE, "collision.plane_box=deepest")


def configurations(w_c: float) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (label, overrides of the preset); ``w_c`` is the fixed-step CFD reach in m."""
    mjx = ("integrator.solver=mjx_euler", "collision.smooth=true", "train.iterations=4")
    return {
        "mjx_smooth": ("fixed-step MJX + smooth collisions", mjx),
        "mjx_smooth_cfd": (
            f"fixed-step MJX + smooth collisions + CFD (w_c {100 * w_c:g} cm)",
            (*mjx, *common.PAPER_CFD, f"cfd.solimp=[0.0, 0.01, {w_c}, 1.0, 4.0]"),
        ),
        "diffmjx_cfd": ("DiffMJX + CFD (paper setting)", common.PAPER_CFD),
        "diffmjx_cfd_library": ("DiffMJX + CFD (library setting)", (*common.PAPER_CFD, *LIBRARY_SOLVE)),
    }


def lowest_corner(qpos: np.ndarray, side: float) -> np.ndarray:
    """Height above z = 0 of the lowest corner of a cube of edge ``side`` at free-joint states (T, 7)."""
    w, x, y, z = (qpos[:, 3 + i] for i in range(4))
    row = np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1)  # R[2, :]
    return qpos[:, 2] - side / 2 * np.abs(row).sum(axis=1)


def required_reach(tosses, names, side: float, touch: float = 1e-3) -> dict:
    """Gap between a cube of edge ``side`` and the table at the recorded states where the real cube
    touches it (its lowest corner below ``touch``; the table lies about 1.7 mm below z = 0 in the
    data), and the CFD reach that covers the largest gap, rounded up to the centimetre."""
    qpos = np.concatenate([tosses[n].qpos for n in names])
    touching = lowest_corner(qpos, cn.CubeParams().side_length) < touch
    gap = lowest_corner(qpos[touching], side)
    return {
        "touching_share": float(touching.mean()),
        "median_gap_m": float(np.median(gap)),
        "p99_gap_m": float(np.percentile(gap, 99)),
        "max_gap_m": float(gap.max()),
        "w_c": math.ceil(100 * gap.max()) / 100,
    }


def _rows(name: str, init_mm: float, result: cn.TrainResult) -> list[dict]:
    h = result.history
    side = np.r_[init_mm / 1e3, h.params.side_length]
    loss = np.r_[h.loss, np.nan]
    wall = np.r_[0.0, np.cumsum(h.wall_s)]
    return [
        {"config": name, "init_mm": init_mm, "step": k, "side_mm": 1e3 * side[k], "loss": loss[k], "wall_s": wall[k]}
        for k in range(len(side))
    ]


def run(
    cfg: cn.SysidConfig,
    out: Path,
    fresh: bool = False,
    progress: bool = True,
    configs=None,
    name: str = "contactnets_sysid_side",
) -> dict:
    """Every configuration (or those named in ``configs``) from every start; writes ``<name>.csv``,
    ``<name>.png`` and ``<name>_params.json`` into ``out``."""
    t_start = time.perf_counter()
    tosses, train_names, _, report = cn.load_split(cfg.data)
    data = cn.segments(tosses, train_names, cfg.data.horizon, report)
    steps = cfg.train.epochs * (cfg.train.steps_per_epoch or len(data.start) // cfg.train.batch_size)
    print(
        f"{report}\n{len(train_names)} training tosses, {len(data.start)} segments of N = {cfg.data.horizon}; "
        f"{steps} steps of {cfg.train.batch_size} segments per run, learning rate {cfg.train.learning_rate:g}"
    )
    reach = required_reach(tosses, train_names, SIDE_MIN_MM / 1e3)
    print(
        f"a {SIDE_MIN_MM:g} mm cube at the {100 * reach['touching_share']:.0f} % of recorded states where the "
        f"real cube touches the table: gap median {1e3 * reach['median_gap_m']:.1f} mm, 99th percentile "
        f"{1e3 * reach['p99_gap_m']:.1f} mm, largest {1e3 * reach['max_gap_m']:.1f} mm -> CFD reach "
        f"w_c = {100 * reach['w_c']:g} cm for fixed-step MJX"
    )

    key = hashlib.sha256(cfg.to_yaml().encode()).hexdigest()[:12]
    rows, timing, results = [], [], {}
    chosen = {k: v for k, v in configurations(reach["w_c"]).items() if configs is None or k in configs}
    for config, (label, overrides) in chosen.items():
        base = cfg.override(*overrides)
        # one throwaway step compiles the gradient program, so the runs' step times exclude the JIT
        t = time.perf_counter()
        cn.train(
            base.override("train.epochs=1", "train.steps_per_epoch=1", "train.checkpoint_dir=null"),
            data,
            progress=False,
        )
        jit_s = time.perf_counter() - t
        step_s = []
        for init_mm in INITS_MM:
            ckpt = CHECKPOINTS / f"contactnets_sysid-{key}" / config / f"{init_mm:g}"
            if fresh and ckpt.exists():
                shutil.rmtree(ckpt)
            run_cfg = base.override(f"train.inits={{side_length: {init_mm / 1e3}}}", f"train.checkpoint_dir={ckpt}")
            result = cn.train(run_cfg, data, progress=progress, desc=f"{config} from {init_mm:g} mm")
            results[config, init_mm] = (run_cfg, result)
            rows += _rows(config, init_mm, result)
            step_s += list(result.history.wall_s)
            print(
                f"{label}, from {init_mm:g} mm: side {1e3 * float(result.params.side_length):.1f} mm after "
                f"{len(result.history.step)} steps ({np.median(result.history.wall_s):.3f} s per step)"
            )
        timing.append(
            {
                "config": config,
                "label": label,
                "jit_s": jit_s,
                "median_step_s": float(np.median(step_s)),
                "mean_step_s": float(np.mean(step_s)),
            }
        )

    out.mkdir(parents=True, exist_ok=True)
    common.write_csv(out / f"{name}.csv", rows)
    _plot(rows, chosen, out / f"{name}.png")
    params_json = _save_params(results, out / f"{name}_params.json")
    total_s = time.perf_counter() - t_start

    print(
        f"\n{'configuration':<58} " + " ".join(f"{f'from {i:g}':>9}" for i in INITS_MM) + f" {'JIT s':>6} {'s/step':>7}"
    )
    for tm in timing:
        finals = [1e3 * float(results[tm["config"], i][1].params.side_length) for i in INITS_MM]
        print(
            f"{tm['label']:<58} "
            + " ".join(f"{f:9.1f}" for f in finals)
            + f" {tm['jit_s']:6.1f} {tm['median_step_s']:7.3f}"
        )
    print(
        f"(final side in mm; true {TRUE_SIDE_MM:.1f} mm; s/step: median wall time of a gradient step of "
        f"{cfg.train.batch_size} segments, JIT excluded)\nfitted-parameter file: side "
        f"{1e3 * params_json['side_length_m']:.1f} mm -> {out / f'{name}_params.json'}\n"
        f"total {total_s:.0f} s"
    )
    return {
        "rows": rows,
        "timing": timing,
        "reach": reach,
        "results": results,
        "total_s": total_s,
        "params": params_json,
    }


def _save_params(results: dict, path: Path) -> dict:
    """The DiffMJX + CFD run with the lowest mean minibatch loss over its last epoch (all runs see the
    same minibatches) gives the side; every other parameter stays at its default. The paper setting's
    runs where they ran, else the library setting's."""
    kind = "diffmjx_cfd" if any(k[0] == "diffmjx_cfd" for k in results) else "diffmjx_cfd_library"
    runs = {k: v for k, v in results.items() if k[0] == kind}

    def last_epoch_loss(item):
        h = item[1][1].history
        return float(np.mean(h.loss[h.epoch == h.epoch.max()]))

    (_, _), (run_cfg, result) = min(runs.items(), key=last_epoch_loss)
    options = cn.model_options(cn.cube_mjmodel(iterations=run_cfg.iterations))
    return cn.save_params_json(path, result.params, options, cn.sim_overrides(run_cfg.sim))


def _plot(rows: list[dict], configs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 3.6), sharey=True)
    colours = {60.0: "tab:blue", 100.0: "tab:green", 140.0: "tab:red"}
    for ax, (name, (label, _)) in zip(axes, configs.items(), strict=True):
        for init_mm in INITS_MM:
            r = [x for x in rows if x["config"] == name and x["init_mm"] == init_mm]
            ax.plot(
                [x["step"] for x in r],
                [x["side_mm"] for x in r],
                color=colours.get(init_mm),
                label=f"from {init_mm:g} mm",
            )
        ax.axhline(TRUE_SIDE_MM, color="k", ls="--", lw=1, label=f"ContactNets cube, {TRUE_SIDE_MM:.1f} mm")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("gradient step")
    axes[0].set_ylabel("side length estimate (mm)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(cfg, out: Path, name: str = "contactnets_sysid_side") -> None:
    """Redraw ``<name>.png`` from ``<name>.csv`` in ``out`` (the reach in the titles is measured from
    the data again, which takes a second)."""
    import csv

    tosses, train_names, _, _ = cn.load_split(cfg.data)
    reach = required_reach(tosses, train_names, SIDE_MIN_MM / 1e3)
    with open(out / f"{name}.csv") as f:
        rows = [
            {
                "config": r["config"],
                "init_mm": float(r["init_mm"]),
                "step": int(r["step"]),
                "side_mm": float(r["side_mm"]),
            }
            for r in csv.DictReader(f)
        ]
    ran = {r["config"] for r in rows}
    _plot(rows, {k: v for k, v in configurations(reach["w_c"]).items() if k in ran}, out / f"{name}.png")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="paper", metavar="quick|paper|PATH", help="sysid preset (default: paper)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for every run, e.g. train.learning_rate=0.01 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where the CSV, PNG and JSON files go")
    p.add_argument("--fresh", action="store_true", help="ignore checkpoints of an earlier run")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--plot-only", action="store_true", help="redraw the PNG from the CSV in --out; no training")
    p.add_argument(
        "--configs",
        default=None,
        metavar="NAME,...",
        help=f"run only these configurations (default: all of {', '.join(configurations(0.0))})",
    )
    args = p.parse_args(argv)
    configs = None if args.configs is None else tuple(args.configs.split(","))
    if configs is not None and (set(configs) - set(configurations(0.0)) or not configs):
        p.error(f"--configs: {args.configs!r}; choose among: {', '.join(configurations(0.0))}")
    common.setup()
    cfg = cn.SysidConfig.load(args.preset, args.set)
    # the quick preset writes the files the docs show first; any other preset gets its name as a suffix
    name = "contactnets_sysid_side" if args.preset == "quick" else f"contactnets_sysid_side_{Path(args.preset).stem}"
    if args.plot_only:
        replot(cfg, args.out, name)
        return
    run(cfg, args.out, fresh=args.fresh, progress=not args.no_progress, configs=configs, name=name)


if __name__ == "__main__":
    main()
