"""The published cube on every held-out toss it was not chosen on: does it generalise?

    python -m experiments.contactnets_generalisation [--params PATH] [--out DIR] [--fresh]

The extended study (``experiments.contactnets_extended``) judges its winner on a few *test*
tosses. This study takes the published file (``docs/results/contactnets_params.json``) and its
record, and rolls the published and the pre-tuned cube (``experiments.contactnets.CubeParams()``, the
dataset's) out over **every validation toss that the selection did not use**: tosses that were
neither trained on (their segments are not in the training split) nor used to choose the fit.
Each toss is simulated from its first recorded state with the file's options and config overrides,
and scored by the mean position error over its samples, as the extended study does.

Writes to ``docs/results/``: ``contactnets_generalisation.csv`` (one row per toss: its name, its
samples, whether the record's test set holds it, both cubes' errors), ``..._summary.csv`` (mean and
median errors, the ratio of the means with a bootstrap 95 % interval over tosses, the share of tosses
the published cube predicts better; means weigh every predicted sample once, as the extended study's do) and ``contactnets_generalisation.png`` (per toss, published
against pre-tuned; the ratio's distribution).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from experiments import common
from experiments import contactnets as cn

ADAM_PRESETS = {"quick": "quick", "paper": "paper"}  # the extended study's preset -> its sysid preset


def judged_tosses(record: dict, cfg: cn.SysidConfig) -> tuple[dict, list[str]]:
    """All tosses, and the validation tosses the record's selection did not use (sorted by name)."""
    tosses, _, val_names, _ = cn.load_split(cfg.data)
    unused = sorted(set(val_names) - set(record["selection_tosses"]))
    missing = set(record["test_tosses"]) - set(unused)
    if missing:
        raise ValueError(f"the record's test tosses {sorted(missing)[:3]} are not held-out validation tosses here")
    return tosses, unused


def run(params_path: Path, out: Path, fresh: bool = False) -> dict:
    fp = cn.load_params_json(params_path)
    record = json.loads(params_path.with_name(params_path.stem + "_record.json").read_text())
    preset = record.get("preset", "quick")
    if preset not in ADAM_PRESETS:
        raise ValueError(f"record preset {preset!r} is unknown; allowed: {sorted(ADAM_PRESETS)}")
    # the extended study's simulation (its sysid preset with CFD, and the record's overrides)
    cfg = cn.SysidConfig.load(ADAM_PRESETS[preset], (*common.PAPER_CFD, *record.get("overrides", [])))
    if cn.sim_overrides(cfg.sim) != fp.config_overrides or cfg.iterations != fp.options["iterations"]:
        raise ValueError(
            f"{params_path}: its config overrides or iterations are not the extended study's preset "
            f"{preset!r} with overrides {record.get('overrides')}"
        )
    tosses, names = judged_tosses(record, cfg)
    print(
        f"{len(names)} held-out tosses ({len(record['test_tosses'])} of them the record's test tosses); "
        f"published: {record['fit']} at step {record['stopped_step']} ({preset} preset)"
    )
    items = [tosses[n] for n in names]
    errs = {}
    for label, p in (("pretuned", cn.CubeParams()), ("published", fp.params)):
        print(f"rolling out the {label} cube over {len(items)} tosses (minutes)", flush=True)
        _, per = common.stage(
            "generalisation-err",
            (cfg.sim.to_yaml(), cfg.iterations, names, common.param_key(p)),
            lambda p=p: cn.grouped_trajectory_error(p, items, cfg, per_toss=True),
            fresh,
        )
        errs[label] = np.asarray(per, np.float64)
    test = set(record["test_tosses"])
    rows = [
        {
            "toss": n,
            "samples": int(tosses[n].qpos.shape[0]),
            "record_test": n in test,
            "pretuned_mm": float(a),
            "published_mm": float(b),
        }
        for n, a, b in zip(names, errs["pretuned"], errs["published"], strict=True)
    ]
    mask = np.array([r["record_test"] for r in rows])
    n = np.array([r["samples"] - 1 for r in rows], np.float64)  # predicted samples per toss
    pre, pub = errs["pretuned"], errs["published"]
    summary = [_summary("every held-out toss", pre, pub, n)]
    if 0 < mask.sum() < len(mask):  # the paper preset tests on every held-out toss: no second and third row
        summary += [
            _summary("the record's test tosses", pre[mask], pub[mask], n[mask]),
            _summary("the others", pre[~mask], pub[~mask], n[~mask]),
        ]
    out.mkdir(parents=True, exist_ok=True)
    common.write_csv(out / "contactnets_generalisation.csv", rows)
    common.write_csv(out / "contactnets_generalisation_summary.csv", summary)
    _plot(errs["pretuned"], errs["published"], mask, summary[0], out / "contactnets_generalisation.png")
    for s in summary:
        print(
            f"{s['tosses']:>3} tosses ({s['set']}): pre-tuned {s['pretuned_mean_mm']:.1f} mm, published "
            f"{s['published_mean_mm']:.1f} mm: ratio {s['ratio_of_means']:.3f} "
            f"[{s['ratio_ci_lo']:.3f}, {s['ratio_ci_hi']:.3f}], better on {100 * s['share_better']:.0f} %"
        )
    return summary[0]


def _summary(name: str, pre: np.ndarray, pub: np.ndarray, n: np.ndarray, boot: int = 10_000) -> dict:
    """Sample-weighted means (the extended study's figure: every predicted sample counts once),
    medians of the per-toss means, the ratio of the weighted means with a bootstrap 95 % interval
    over tosses (seeded), the share of tosses the published cube predicts better."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(pre), size=(boot, len(pre)))
    ratios = np.sum(pub[idx] * n[idx], axis=1) / np.sum(pre[idx] * n[idx], axis=1)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    pre_mean, pub_mean = float(np.sum(pre * n) / np.sum(n)), float(np.sum(pub * n) / np.sum(n))
    return {
        "set": name,
        "tosses": len(pre),
        "pretuned_mean_mm": pre_mean,
        "published_mean_mm": pub_mean,
        "ratio_of_means": pub_mean / pre_mean,
        "ratio_ci_lo": float(lo),
        "ratio_ci_hi": float(hi),
        "pretuned_median_mm": float(np.median(pre)),
        "published_median_mm": float(np.median(pub)),
        "share_better": float(np.mean(pub < pre)),
    }


def _plot(pre, pub, test_mask, s: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.6))
    if (~test_mask).any():
        a.scatter(
            pre[~test_mask], pub[~test_mask], s=14, color="tab:blue", alpha=0.7, label="held-out, not the record's test"
        )
    a.scatter(
        pre[test_mask], pub[test_mask], s=18, color="tab:red", marker="s", alpha=0.8, label="the record's test tosses"
    )
    hi = 1.05 * max(pre.max(), pub.max())
    a.plot([0, hi], [0, hi], "k--", lw=1, label="equal")
    a.plot([0, hi], [0, 0.85 * hi], "k:", lw=1, label="0.85 x pre-tuned")
    a.set(
        xlim=(0, hi),
        ylim=(0, hi),
        xlabel="pre-tuned cube: mean position error (mm)",
        ylabel="published cube: mean position error (mm)",
        aspect="equal",
        title=f"{s['tosses']} held-out tosses: ratio of the means {s['ratio_of_means']:.2f}",
    )
    a.legend(fontsize=7, loc="upper left")
    r = pub / pre
    b.hist(r, bins=np.linspace(0, max(2.0, float(r.max())) + 0.05, 30), color="tab:blue", alpha=0.8)
    b.axvline(1.0, color="k", ls="--", lw=1, label="no change")
    b.axvline(
        s["ratio_of_means"],
        color="tab:red",
        lw=2,
        label=f"ratio of means {s['ratio_of_means']:.2f} [{s['ratio_ci_lo']:.2f}, {s['ratio_ci_hi']:.2f}]",
    )
    b.set(
        xlabel="published / pre-tuned error, per toss",
        ylabel="tosses",
        title=f"published better on {100 * s['share_better']:.0f} % of the tosses",
    )
    b.legend(fontsize=7)
    common.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--params",
        type=Path,
        default=common.RESULTS / "contactnets_params.json",
        help="the fitted-parameter file (its _record.json beside it)",
    )
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where the CSV and PNG files go")
    p.add_argument("--fresh", action="store_true", help="redo rollouts saved by an earlier run")
    args = p.parse_args(argv)
    common.setup()
    run(args.params, args.out, fresh=args.fresh)


if __name__ == "__main__":
    main()
