"""ContactNets cube, extended identification (paper Figs. 22 and 11) with Adam, LM and MuJoCo's sysid.

    python -m experiments.contactnets_extended [--quick] [--set KEY=VALUE ...] [--fresh]

Identifies every parameter of ``diffmjx.sysid.CubeParams`` (side length, mass, solref, solimp,
friction) from the real ContactNets tosses, with DiffMJX + contacts from distance at the sysid
preset's simulation setting (the Fig. 9 study's ``diffmjx_cfd``):

- **Adam** (``diffmjx.sysid.train``) from the pre-tuned start (the dataset's cube:
  ``CubeParams()``) and from 5 random starts (seeded, each parameter uniform in
  :data:`RANDOM_RANGES`);
- **Levenberg–Marquardt** (``diffmjx.sysid.fit_lm``, optimistix on forward-mode Jacobians) from the
  pre-tuned start, on a fixed subset of the training segments;
- **MuJoCo's sysid** (``diffmjx.sysid.fit_mujoco_sysid``: the C engine, finite differences) from
  the pre-tuned start, on the same subset.

Every fit is then judged on the validation tosses (never trained on): each toss is rolled out
whole from its first recorded state with DiffMJX (``diffmjx.sysid.trajectory_error``), and the mean
position error in mm is compared with the default-parameter cube's. The segment loss of every fit
is also evaluated on the same fixed segment subset, with the same simulation.

Writes ``docs/results/contactnets_extended.csv`` (one row per fit: method, start, parameters,
subset loss, validation trajectory error, wall time), ``contactnets_extended_history.csv`` (loss
against wall time per step for Adam and LM), ``contactnets_extended.png`` (loss vs wall time;
validation error per fit) and ``contactnets_rollouts.png`` (Fig. 11: recorded vs simulated
trajectories of three validation tosses, default and fitted). ``--quick``: the sysid ``quick``
preset for Adam, LM with 6 steps on 64 segments, the peer on the same 64, and 12 validation tosses;
otherwise the ``paper`` preset, LM with 30 steps on 512 segments and every validation toss.
Finished fits are saved (``experiments.common.stage``), so a rerun resumes; ``--fresh`` redoes them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np

from diffmjx import sysid
from experiments import common

RANDOM_RANGES = {  # uniform ranges of the random starts (components of solref / solimp in order)
    "side_length": ((0.07, 0.14),),
    "mass": ((0.2, 0.6),),
    "solref": ((0.01, 0.05), (0.5, 1.5)),
    "solimp": ((0.01, 0.3), (0.8, 0.99), (0.002, 0.03), (0.3, 0.7), (1.5, 4.0)),
    "friction": ((0.05, 0.5),),
}
N_RANDOM = 5
FREE = ("side_length", "mass", "solref", "solimp", "friction")
PRESETS = {  # name -> (Adam preset, LM steps, subset segments, validation tosses (None: all))
    "quick": ("quick", 6, 64, 12),
    "paper": ("paper", 30, 512, None),
}


def random_start(seed: int) -> sysid.CubeParams:
    """Random parameters: every component uniform in :data:`RANDOM_RANGES` (``np.random`` seeded)."""
    rng = np.random.default_rng([seed, 2205])
    vals = {k: np.array([rng.uniform(lo, hi) for lo, hi in r]) for k, r in RANDOM_RANGES.items()}
    return sysid.CubeParams(**{k: (v[0] if len(v) == 1 else v) for k, v in vals.items()})


def _inits_override(p: sysid.CubeParams) -> str:
    items = ", ".join(f"{k}: {np.asarray(getattr(p, k)).tolist()}" for k in FREE)
    return f"train.inits={{{items}}}"


def _param_cols(p: sysid.CubeParams) -> dict:
    out = {"side_mm": 1e3 * float(p.side_length), "mass_kg": float(p.mass), "friction": float(p.friction)}
    out.update({f"solref{i}": float(v) for i, v in enumerate(np.asarray(p.solref))})
    out.update({f"solimp{i}": float(v) for i, v in enumerate(np.asarray(p.solimp))})
    return out


def run(preset: str, overrides, out: Path, fresh: bool = False, progress: bool = True) -> list[dict]:
    adam_preset, lm_steps, n_subset, n_val = PRESETS[preset]
    cfg = sysid.SysidConfig.load(adam_preset, (*overrides, "cfd.enabled=true", f"train.free=[{', '.join(FREE)}]"))
    tosses, train_names, val_names, report = sysid.load_split(cfg.data)
    data = sysid.segments(tosses, train_names, cfg.data.horizon, report)
    pick = np.random.default_rng(0).choice(len(data.start), n_subset, replace=False)
    sub_q, sub_v = np.asarray(data.qpos)[pick], np.asarray(data.qvel)[pick]
    val = [tosses[n] for n in (val_names if n_val is None else val_names[:n_val])]
    print(f"{report}\n{len(train_names)} training tosses ({len(data.start)} segments), {len(val)} validation tosses; "
          f"LM and the peer fit {n_subset} segments")  # fmt: skip
    base = common.mjx.put_model(sysid.cube_mjmodel(iterations=cfg.iterations))
    loss_fn = jax.jit(lambda p, q, v: sysid.segment_loss(p, base, q, v, cfg.sim))
    key = (cfg.to_yaml(), preset, pick.tolist())

    def judge(params):
        return {"subset_loss": float(loss_fn(params, sub_q, sub_v)), "val_traj_err_mm": sysid.trajectory_error(params, val, cfg)}

    rows, hist, adam = [], [], {}
    default = sysid.CubeParams()
    rows.append({"method": "none (default parameters)", "start": "pre-tuned", "fit_wall_s": 0.0, "steps": 0,
                 **_param_cols(default), **common.stage("sysid-ext-judge", (key, "default"), lambda: judge(default), fresh)})  # fmt: skip
    starts = {"pre-tuned": default, **{f"random {i}": random_start(i) for i in range(N_RANDOM)}}
    for name, start in starts.items():
        run_cfg = cfg.override(_inits_override(start))

        def fit(run_cfg=run_cfg, name=name):
            t = time.perf_counter()
            res = sysid.train(run_cfg, data, progress=progress, desc=f"Adam from {name}")
            return res, time.perf_counter() - t

        res, wall = common.stage("sysid-ext-adam", (key, name), fit, fresh)
        adam[name] = res.params
        h = res.history
        hist += [{"method": "Adam", "start": name, "step": int(s), "wall_s": float(w), "loss": float(ls)}
                 for s, w, ls in zip(h.step, np.cumsum(h.wall_s), h.loss, strict=True)]  # fmt: skip
        rows.append({"method": "Adam", "start": name, "fit_wall_s": wall, "steps": len(h.step), **_param_cols(res.params),
                     **common.stage("sysid-ext-judge", (key, "adam", name), lambda r=res: judge(r.params), fresh)})  # fmt: skip
        print(f"Adam from {name}: {rows[-1]}")

    def fit_lm():
        t = time.perf_counter()
        res = sysid.fit_lm(cfg, sub_q, sub_v, steps=lm_steps, progress=progress)
        return res, time.perf_counter() - t

    lm, wall = common.stage("sysid-ext-lm", key, fit_lm, fresh)
    hist += [{"method": "LM", "start": "pre-tuned", "step": int(s), "wall_s": float(w), "loss": float(ls)}
             for s, w, ls in zip(lm.history.step, np.cumsum(lm.history.wall_s), lm.history.loss, strict=True)]  # fmt: skip
    rows.append({"method": "Levenberg-Marquardt (optimistix)", "start": "pre-tuned", "fit_wall_s": wall,
                 "steps": len(lm.history.step), **_param_cols(lm.params),
                 **common.stage("sysid-ext-judge", (key, "lm"), lambda: judge(lm.params), fresh)})  # fmt: skip
    print(f"LM: {rows[-1]}")

    def fit_peer():
        return sysid.fit_mujoco_sysid(sub_q, sub_v, default, FREE, iterations=cfg.iterations)

    peer = common.stage("sysid-ext-peer", key, fit_peer, fresh)
    rows.append({"method": "mujoco.sysid (C engine, finite differences)", "start": "pre-tuned",
                 "fit_wall_s": peer.wall_s, "steps": peer.iterations, **_param_cols(peer.params),
                 **common.stage("sysid-ext-judge", (key, "peer"), lambda: judge(peer.params), fresh)})  # fmt: skip
    print(f"peer: {rows[-1]}")

    out.mkdir(parents=True, exist_ok=True)
    common.write_csv(out / "contactnets_extended.csv", rows)
    common.write_csv(out / "contactnets_extended_history.csv", hist)
    _plot(rows, hist, out / "contactnets_extended.png")
    best = min((r for r in rows if r["method"] == "Adam"), key=lambda r: r["subset_loss"])
    _plot_rollouts(val[:3], {"default parameters": default, f"Adam from {best['start']}": adam[best["start"]]}, cfg,
                   out / "contactnets_rollouts.png")  # fmt: skip
    print(f"\n{'method':<46} {'start':<10} {'side mm':>8} {'friction':>8} {'subset loss':>12} {'val err mm':>10} {'wall s':>8}")
    for r in rows:
        print(f"{r['method']:<46} {r['start']:<10} {r['side_mm']:8.1f} {r['friction']:8.3f} {r['subset_loss']:12.4g} "
              f"{r['val_traj_err_mm']:10.1f} {r['fit_wall_s']:8.1f}")  # fmt: skip
    return rows


def _plot(rows, hist, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for (method, start), colour in (
        (("LM", "pre-tuned"), "tab:red"),
        *((("Adam", s), "tab:blue") for s in sorted({h["start"] for h in hist if h["method"] == "Adam"})),
    ):
        h = [x for x in hist if x["method"] == method and x["start"] == start]
        if h:
            a.plot([x["wall_s"] for x in h], [x["loss"] for x in h], color=colour, lw=1.5 if method == "LM" else 0.8,
                   alpha=1.0 if start == "pre-tuned" else 0.5, label=f"{method} from {start}")  # fmt: skip
    peer = [r for r in rows if r["method"].startswith("mujoco.sysid")]
    for r in peer:
        a.scatter([r["fit_wall_s"]], [r["subset_loss"]], color="k", marker="x", zorder=3, label="mujoco.sysid (final)")
    a.set(xscale="log", yscale="log", xlabel="wall time (s)", ylabel="segment loss (Adam: minibatch)",
          title="loss against wall time")  # fmt: skip
    a.legend(fontsize=6, ncol=2)
    labels = [f"{r['method'].split(' (')[0]}\n{r['start']}" for r in rows]
    b.bar(range(len(rows)), [r["val_traj_err_mm"] for r in rows],
          color=["grey" if r["method"].startswith("none") else "tab:blue" for r in rows])  # fmt: skip
    b.set_xticks(range(len(rows)), labels, rotation=70, fontsize=6)
    b.set(ylabel="validation trajectory error (mm)", title="whole validation tosses from their first state")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_rollouts(tosses, params: dict, cfg, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(tosses), figsize=(4 * len(tosses), 5.5), squeeze=False)
    sims = {name: sysid.rollout_tosses(p, tosses, cfg)[0] for name, p in params.items()}
    for j, t in enumerate(tosses):
        time_s = np.arange(t.qpos.shape[0]) * sysid.DT
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
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="sysid override for every fit, e.g. train.learning_rate=0.01 (repeatable)")  # fmt: skip
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where the CSV and PNG files go")
    p.add_argument("--fresh", action="store_true", help="redo fits saved by an earlier run")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    common.setup()
    run("quick" if args.quick else "paper", args.set, args.out, fresh=args.fresh, progress=not args.no_progress)


if __name__ == "__main__":
    main()
