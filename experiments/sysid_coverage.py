"""Coverage study: do :func:`diffmjx.sysid.identify`'s nominal 95 % intervals hold the truth 95 % of the time?

    python -m experiments.sysid_coverage [--models arm,box] [--sets 50] [--fresh] [--plot-only]

Two models of the recovery study (:mod:`experiments.sysid_recovery`): the ``arm`` (two hinges under
gravity, two motors: damping, armature and gear of each, 6 parameters, no contact) and the ``ball``
(thrown at a wall, bouncing off it and the floor: its radius, the inertia tied, and its contact's
solref, 3 parameters). The recovery study's ``box`` works too (``--models box``), at about 100 s a
fit on two cores. Each data set is the recovery study's recordings of the "real system" (MuJoCo's C
engine at the true values, RK4 at 0.1 ms) with a new seed and its Gaussian noise (1 mm or 1 mrad on
positions, 0.01 on velocities); each fit starts 10-20 % off the truth (random sign, seeded) with the
recovery study's segments (horizon 10, stride 5) and simulation tolerances, and everything else at
:class:`diffmjx.sysid.FitConfig`'s defaults, 95 % intervals included.

Reported per data set and parameter: the estimate, its interval and whether the interval holds the
truth; per model and parameter, the coverage and its 95 % Wilson interval (a count of 50 has a
spread of about +-6 points around 95 %), beside the coverage of the same interval without the
tolerance check (``FitConfig.tolerance_check``: the shift a 100 times tighter simulation implies)
and of the textbook interval ``s^2 (J^T J)^-1``, which takes the residuals as independent (what
``identify`` reported before). Writes ``docs/results/sysid_coverage.csv`` (one row per fit
and parameter), ``sysid_coverage_summary.csv`` and ``sysid_coverage.png``. Each fit is cached
(``~/.cache/diffmjx/stages``); ``--fresh`` refits, ``--plot-only`` redraws from the CSV.
"""

from __future__ import annotations

import argparse
import functools
import math
from pathlib import Path

import numpy as np

import diffmjx
from diffmjx import sysid
from experiments import common
from experiments.sysid_recovery import HORIZON, MODELS, SIM, STRIDE, record

LEVEL = 0.95
TARGET = (0.90, 0.98)  # the band the issue asks the nominal 95 % to land in


def start_values(ps: sysid.ParameterSet, seed: int) -> np.ndarray:
    """Every component 10-20 % off the truth, random sign (seeded)."""
    rng = np.random.default_rng([seed, 5])
    return ps.start * (1 + rng.choice([-1.0, 1.0], ps.size) * rng.uniform(0.1, 0.2, ps.size))


def run_set(name: str, seed: int, cfg: diffmjx.Config, fit: sysid.FitConfig) -> dict:
    """One noisy data set's fit: the truth, the estimate, and the residual, Jacobian and segment layout
    at it (the intervals are computed from them by :func:`rows_of`, as ``identify`` computes them)."""
    spec = MODELS[name]["spec"]()
    truth = spec.compile()
    params = MODELS[name]["params"]()
    ps = sysid.ParameterSet(truth, params, spec=spec)
    recs = [record(name, truth, 10_000 + 100 * seed + k, True) for k in range(MODELS[name]["recordings"])]
    start = ps.write(start_values(ps, seed))
    res = sysid.identify(start, params, recs, cfg=cfg, fit=fit, progress=False)
    return {
        "labels": list(ps.labels),
        "true": ps.start,
        "estimate": np.array([res.intervals[lab].value for lab in ps.labels]),
        "bias": np.array([res.intervals[lab].bias for lab in ps.labels]),
        "residual": res.residual,
        "jacobian": res.jacobian,
        "segments": res.segments,
        "converged": bool(res.converged),
        "steps": len(res.history.step),
        "wall_s": res.wall_s,
    }


def rows_of(name: str, seed: int, fit: dict, level: float = LEVEL) -> list[dict]:
    """Per parameter component: the interval :func:`diffmjx.sysid.confidence_intervals` gives with
    the fit's tolerance bias (what ``identify`` reports) and whether it holds the truth; beside it,
    whether the interval without the tolerance check and the textbook one hold it."""
    args = (fit["residual"], fit["jacobian"], fit["labels"], fit["estimate"], level)
    intervals, _ = sysid.confidence_intervals(*args, fit["segments"], bias=fit["bias"])
    unchecked, _ = sysid.confidence_intervals(*args, fit["segments"])
    textbook, _ = sysid.confidence_intervals(*args)  # s^2 (J^T J)^-1: residuals taken as independent
    rows = []
    for label, true in zip(fit["labels"], fit["true"]):
        iv, tb, un = intervals[label], textbook[label], unchecked[label]
        rows.append(
            {
                "model": name,
                "seed": seed,
                "parameter": label,
                "true": float(true),
                "estimate": iv.value,
                "lower": iv.lower,
                "upper": iv.upper,
                "std": iv.std,
                "bias": iv.bias,
                "covered": bool(iv.lower <= true <= iv.upper),
                "covered_no_check": bool(un.lower <= true <= un.upper),
                "covered_textbook": bool(tb.lower <= true <= tb.upper),
                "z": (iv.value - true) / iv.std if iv.std > 0 else math.nan,
                "converged": fit["converged"],
                "steps": fit["steps"],
                "wall_s": round(fit["wall_s"], 2),
            }
        )
    return rows


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``k / n``."""
    from scipy import stats

    if n == 0:
        return math.nan, math.nan
    z = float(stats.norm.ppf(0.5 + level / 2))
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return mid - half, mid + half


def summary(rows: list[dict]) -> list[dict]:
    """Coverage per model and parameter, and per model over all its parameters."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        for label in [*dict.fromkeys(r["parameter"] for r in mine), "all"]:
            sel = mine if label == "all" else [r for r in mine if r["parameter"] == label]
            k = sum(r["covered"] in (True, "True") for r in sel)
            lo, hi = wilson(k, len(sel))
            z = np.array([float(r["z"]) for r in sel])
            k_tb = sum(r["covered_textbook"] in (True, "True") for r in sel)
            k_un = sum(r["covered_no_check"] in (True, "True") for r in sel)
            out.append(
                {
                    "model": model,
                    "parameter": label,
                    "fits": len({r["seed"] for r in sel}),
                    "intervals": len(sel),
                    "covered": k,
                    "coverage": round(k / max(len(sel), 1), 4),
                    "wilson_lower": round(lo, 4),
                    "wilson_upper": round(hi, 4),
                    "z_std": round(float(np.nanstd(z)), 3),
                    "coverage_no_check": round(k_un / max(len(sel), 1), 4),
                    "coverage_textbook": round(k_tb / max(len(sel), 1), 4),
                    "median_bias_over_std": round(
                        float(np.median([abs(float(r["bias"])) / float(r["std"]) for r in sel])), 3
                    ),
                    "median_rel_halfwidth": round(
                        float(
                            np.median(
                                [(float(r["upper"]) - float(r["lower"])) / 2 / abs(float(r["true"])) for r in sel]
                            )
                        ),
                        6,
                    ),
                }
            )
    return out


def plot(summary_rows: list[dict], png: Path) -> None:
    """Coverage per parameter (points with Wilson intervals), the nominal level and the target band."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    labels = [f"{r['model']}: {r['parameter']}" for r in summary_rows]
    x = np.arange(len(summary_rows))
    cov = np.array([float(r["coverage"]) for r in summary_rows])
    lo = np.array([float(r["wilson_lower"]) for r in summary_rows])
    hi = np.array([float(r["wilson_upper"]) for r in summary_rows])
    ax.axhspan(*TARGET, color="tab:green", alpha=0.15, label="target 90-98 %")
    ax.axhline(LEVEL, color="k", lw=0.8, ls="--", label="nominal 95 %")
    ax.errorbar(x, cov, yerr=[cov - lo, hi - cov], fmt="o", color="tab:blue", capsize=3, label="coverage (Wilson 95 %)")
    textbook = np.array([float(r["coverage_textbook"]) for r in summary_rows])
    ax.plot(x, textbook, "x", color="tab:gray", label="textbook s²(JᵀJ)⁻¹ interval")
    if "coverage_no_check" in summary_rows[0]:
        unchecked = np.array([float(r["coverage_no_check"]) for r in summary_rows])
        ax.plot(x, unchecked, "_", ms=12, mew=2, color="tab:orange", label="without the tolerance check")
    ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("intervals holding the truth")
    ax.set_title(f"95 % intervals of identify() on {summary_rows[0]['fits']} noisy data sets per model", fontsize=10)
    ax.legend(fontsize=8, loc="lower left", ncols=2)
    common.save_figure(fig, png)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="arm,ball")
    p.add_argument("--sets", type=int, default=50, help="noisy data sets per model")
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args(argv)
    csv_path, summary_path = args.out / "sysid_coverage.csv", args.out / "sysid_coverage_summary.csv"
    png = args.out / "sysid_coverage.png"
    if args.plot_only:
        import csv

        with open(summary_path) as f:
            plot(list(csv.DictReader(f)), png)
        return
    diffmjx.enable_compilation_cache()
    cfg = diffmjx.Config().override(*SIM)
    fit = sysid.FitConfig(horizon=HORIZON, stride=STRIDE, steps=30, confidence=LEVEL)
    from tqdm.auto import tqdm

    rows = []
    cases = [(m, s) for m in args.models.split(",") for s in range(args.sets)]
    for name, seed in tqdm(cases, desc="coverage"):
        key = (name, seed, cfg.to_dict(), fit.to_dict())
        done = common.stage("sysid_coverage", key, functools.partial(run_set, name, seed, cfg, fit), fresh=args.fresh)
        rows += rows_of(name, seed, done)
        common.write_csv(csv_path, rows)
    table = summary(rows)
    common.write_csv(summary_path, table)
    plot(table, png)
    for r in table:
        print(r)


if __name__ == "__main__":
    main()
