"""Toy study: gradients through contact for a 1-D point mass (DiffMJX paper, Fig. 4 / Fig. 16).

A point mass (mass 1) starts at height ``q0`` with velocity ``v0 = -1``; there is no gravity.
It is integrated for ``N`` steps of semi-implicit Euler (``v <- v + h a(q, v); q <- q + h v``)
with a floor at ``q = 0`` and the loss ``L = |q_N - q_T|`` with ``q_T = 1``.  Two step sizes
are compared, ``h = 0.1`` (20 steps) and ``h = 1e-4`` (20 000 steps), both ending at ``T = 2 s``.

Contact models (all pure JAX, no MuJoCo):

``penalty``
    A minimal spring-damper ("MuJoCo-like soft contact") model: ``a = -k q - b v`` while
    ``q < 0`` and ``a = 0`` otherwise, selected with ``jnp.where`` (piecewise smooth).
    ``b = 2 zeta sqrt(k)``.  Default ``k = 1e3``, ``zeta = 0.1`` (see ``STIFFNESS``).
``elastic``
    Ideal elastic collision *without* time-of-impact correction, as in DiffTaichi's naive
    integrator: after the position update, if ``q < 0`` (and ``v < 0``) the velocity is
    flipped, ``v <- -v``; the penetrated position is kept.
``elastic_mirror``
    Like ``elastic`` but the position is mirrored as well (``q <- -q``, ``v <- -v``).  For a
    constant-speed ball this *is* the exact time-of-impact reflection, so its gradient is
    included as a contrast.

Reference ("true") gradients are the exact derivatives of the continuous-time solution of
the same model: for the elastic models ``q(T) = T - q0`` after a bounce (``q0 < T``) and
``q(T) = q0 - T`` otherwise; for the penalty model the closed-form solution of the linear
damped contact oscillator (free fall until ``t = q0``, half a damped period in contact of
length ``t_c = pi / omega_d``, exit with speed ``e = exp(-zeta pi / sqrt(1 - zeta^2))``, so
``q(T) = e (T - q0 - t_c)`` once the contact has ended).  These closed forms are
differentiated with ``jax.grad``.

The model, its closed forms and the sweep live in :mod:`diffmjx.scenes.point_mass` (a public API:
the tests check them and may import only the library), the contact models as typed objects
(``PENALTY``, ``ELASTIC``, ``ELASTIC_MIRROR``); a model's ``name`` appears only in this module's
output (the CSV's ``model`` column, the labels and the table). This module is the study: it sweeps
``q0`` (and the penalty stiffness), writes the CSVs (the sweep, its summary and the stiffness
sweep's summary, which ``docs/build_tables.py`` turns into the tables of ``docs/toy_point_mass.md``),
draws the figure and prints the table.

Run:  ``python -m experiments.toy_point_mass [--quick] [--out docs/results]``
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import argparse  # noqa: E402
import csv  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from diffmjx.scenes.point_mass import (  # noqa: E402
    ELASTIC,
    ELASTIC_MIRROR,
    FD_EPS,
    KINK_MARGIN,
    MODELS,
    PENALTY,
    SETTINGS,
    STIFFNESS,
    ZETA,
    penalty_constants,
    summarize,
    sweep,
)

STIFFNESS_SWEEP = (1e2, 1e3, 1e4)
N_Q0_FULL = 400
N_Q0_QUICK = 60
Q0_RANGE = (0.0, 3.0)


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------

COLORS = {PENALTY: "tab:blue", ELASTIC: "tab:red", ELASTIC_MIRROR: "tab:green"}
# Penalty AD gradients at h = 0.1 reach O(100): symmetric-log axes, linear for |y| < 2.
SYMLOG_LINTHRESH = 2.0


def make_plot(q0s, results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for col, (h, n) in enumerate(SETTINGS):
        ax_l, ax_g = axes[0, col], axes[1, col]
        for model in MODELS:
            r = results[(model, h)]
            lw = 1.0 if model == ELASTIC_MIRROR else 1.4
            ax_l.plot(q0s, r["loss"], color=COLORS[model], lw=lw, label=f"{model.name} (sim)")
            ax_g.plot(q0s, r["grad_ad"], color=COLORS[model], lw=lw, label=f"{model.name} (AD)")
        for model in (PENALTY, ELASTIC):  # elastic_mirror's continuous solution is elastic's
            r = results[(model, h)]
            ax_l.plot(
                q0s, r["loss_true"], color=COLORS[model], ls="--", lw=1.0, label=f"{model.name} (true, continuous)"
            )
            ax_g.plot(q0s, r["grad_true"], color=COLORS[model], ls="--", lw=1.0, label=f"{model.name} (true)")
        ax_l.set_title(f"h = {h:g}, N = {n}")
        for ax, key, lim in ((ax_l, "loss", (0.0, 1.3)), (ax_g, "grad_ad", (-1.4, 1.4))):
            big = max(np.abs(results[(m, h)][key]).max() for m in MODELS) > 3.0
            if big:
                ax.set_yscale("symlog", linthresh=SYMLOG_LINTHRESH)
                ax.set_ylim(bottom=lim[0] if key == "loss" else None)
            else:
                ax.set_ylim(*lim)
            ax.set_ylabel(
                ("loss |q_N - 1|" if key == "loss" else "dL/dq0") + (" (symlog, linear for |y| < 2)" if big else "")
            )
        ax_g.set_xlabel("q0")
        for ax in (ax_l, ax_g):
            ax.grid(alpha=0.3)
    axes[0, 1].legend(fontsize=7, loc="upper right")
    axes[1, 1].legend(fontsize=7, loc="upper right")
    fig.suptitle("1-D point mass, v0 = -1, T = 2 s: loss and gradient through contact")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(q0s, results: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "h", "n_steps", "q0", "loss", "grad_ad", "grad_fd", "grad_true"])
        for model in MODELS:
            for h, n in SETTINGS:
                r = results[(model, h)]
                for i, q0 in enumerate(q0s):
                    w.writerow(
                        [
                            model.name,
                            f"{h:g}",
                            n,
                            f"{q0:.10g}",
                            f"{r['loss'][i]:.10g}",
                            f"{r['grad_ad'][i]:.10g}",
                            f"{r['grad_fd'][i]:.10g}",
                            f"{r['grad_true'][i]:.10g}",
                        ]
                    )


# Columns of the summary CSVs: :func:`summarize`'s statistics, as ``repr`` floats (full precision)
SUMMARY_STATS = (
    "n_points",
    "median_abs_err",
    "mean_abs_err",
    "p90_abs_err",
    "frac_wrong_sign",
    "frac_wrong_sign_bounce",
    "grad_ad_min",
    "grad_ad_max",
    "median_dqN_ad_bounce",
    "median_dqN_true_bounce",
    "median_abs_fd_minus_ad",
)


def _cell(x) -> str:
    """A statistic as the CSV holds it: an int as is, a float as its ``repr``, a missing one empty."""
    if x is None:
        return ""
    return str(x) if isinstance(x, int) else repr(float(x))


def write_summary_csv(summary: dict, path: Path) -> None:
    """Per model and step size: :func:`summarize`'s statistics (the first table of the docs page)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "h", "n_steps", *SUMMARY_STATS])
        for model in MODELS:
            for h, n in SETTINGS:
                s = summary[model.name][h]
                w.writerow([model.name, repr(h), n, *(_cell(s.get(key)) for key in SUMMARY_STATS)])


def write_stiffness_csv(stiff: dict, path: Path) -> None:
    """Per penalty stiffness and step size: :func:`summarize`'s statistics (without central
    differences but at the model's own stiffness), ``default`` marking ``STIFFNESS``."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["k", "h", "n_steps", "default", *SUMMARY_STATS])
        for k, per_h in stiff.items():
            for h, n in SETTINGS:
                s = per_h[h]
                w.writerow([repr(k), repr(h), n, k == STIFFNESS, *(_cell(s.get(key)) for key in SUMMARY_STATS)])


def run(quick: bool, out_dir: Path) -> dict:
    """Run the study, write the CSVs and the PNG to ``out_dir`` and return the summary numbers.

    Returns ``{"params": ..., "summary": {model name: {h: stats}}, "stiffness_sweep":
    {k: {h: median_abs_err}}, "files": [...]}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    q0s = np.linspace(*Q0_RANGE, N_Q0_QUICK if quick else N_Q0_FULL)
    t0 = time.perf_counter()

    results, summary = {}, {}
    for model in MODELS:
        summary[model.name] = {}
        for h, n in SETTINGS:
            res = sweep(q0s, model, h, n)
            results[(model, h)] = res
            summary[model.name][h] = summarize(q0s, res, model)

    stiff = {}
    for k in STIFFNESS_SWEEP:
        stiff[k] = {}
        for h, n in SETTINGS:
            res = results[(PENALTY, h)] if k == STIFFNESS else sweep(q0s, PENALTY, h, n, k=k, with_fd=False)
            stiff[k][h] = summarize(q0s, res, PENALTY, k=k)

    csv_path, png_path = out_dir / "toy_point_mass.csv", out_dir / "toy_point_mass.png"
    summary_path, stiff_path = out_dir / "toy_point_mass_summary.csv", out_dir / "toy_point_mass_stiffness.csv"
    write_csv(q0s, results, csv_path)
    write_summary_csv(summary, summary_path)
    write_stiffness_csv(stiff, stiff_path)
    make_plot(q0s, results, png_path)

    pc = penalty_constants()
    return {
        "params": {
            "k": STIFFNESS,
            "zeta": ZETA,
            "b": pc["b"],
            "t_contact": pc["t_contact"],
            "restitution": pc["restitution"],
            "n_q0": len(q0s),
            "kink_margin": KINK_MARGIN,
            "fd_eps": FD_EPS,
        },
        "summary": summary,
        "stiffness_sweep": {k: {h: s["median_abs_err"] for h, s in per_h.items()} for k, per_h in stiff.items()},
        "files": [str(csv_path), str(summary_path), str(stiff_path), str(png_path)],
        "seconds": time.perf_counter() - t0,
    }


def format_summary(out: dict) -> str:
    p = out["params"]
    lines = [
        f"penalty: k={p['k']:g}, zeta={p['zeta']:g}, b={p['b']:.4g}, "
        f"t_contact={p['t_contact']:.4f} s, restitution={p['restitution']:.4f}; "
        f"{p['n_q0']} q0 in [0, 3], kink margin {p['kink_margin']}",
        f"{'model':<15}{'h':>8}{'n':>5}{'med|ad-true|':>14}{'mean':>10}{'p90':>10}"
        f"{'wrong sign':>12}{'(bounce)':>10}{'dqN/dq0 AD':>12}{'true':>8}{'med|fd-ad|':>12}",
    ]
    for model, per_h in out["summary"].items():
        for h, s in per_h.items():
            lines.append(
                f"{model:<15}{h:>8g}{s['n_points']:>5d}{s['median_abs_err']:>14.4g}"
                f"{s['mean_abs_err']:>10.4g}{s['p90_abs_err']:>10.4g}"
                f"{s['frac_wrong_sign']:>12.3f}{s['frac_wrong_sign_bounce']:>10.3f}{s['median_dqN_ad_bounce']:>12.4g}"
                f"{s['median_dqN_true_bounce']:>8.4g}"
                f"{s.get('median_abs_fd_minus_ad', float('nan')):>12.3g}"
            )
    lines.append("penalty stiffness sweep, median |grad_ad - grad_true|:")
    for k, per_h in out["stiffness_sweep"].items():
        lines.append(f"  k={k:<8g}" + "".join(f"  h={h:g}: {v:.4g}" for h, v in per_h.items()))
    lines.append(f"wrote {', '.join(out['files'])} in {out['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{N_Q0_QUICK} q0 instead of {N_Q0_FULL}")
    ap.add_argument("--out", type=Path, default=Path("docs/results"))
    args = ap.parse_args(argv)
    out = run(args.quick, args.out)
    print(format_summary(out))
    return out


if __name__ == "__main__":
    main()
