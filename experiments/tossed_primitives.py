"""Tossed primitives (paper Figs. 3, 21): loss and gradient of the toss distance against u0.

    python -m experiments.tossed_primitives [--quick] [--tolerance-scan] [--set KEY=VALUE ...]

Ball, cube, capsule, cylinder and ellipsoid are thrown onto a plane with the cube-toss settings
(solref 0.005 1, solimp 0 0.95 0.001 0.5 2, gravity -2, timestep 0.01, qz0 0.2, vy0 -0.1, 1 s);
loss = final qpos[1], swept over u0 in [-3, -1]. Methods: fixed-step MJX (semi-implicit Euler at
dt 0.002, the paper's MJX row), DiffMJX (adaptive + smoothed collisions; the preset below), and
central differences of a tightly converged DiffMJX solve (the reference). Writes
docs/results/tossed_primitives.{csv,png} and tossed_primitives_table.{csv,md}, plus the cube's
error-vs-sharpness trade-off (tossed_primitives_sharpness.{csv,png}). ``--tolerance-scan`` runs
only DiffMJX's error against rtol for the primitives of ``--scan-kinds`` (tossed_primitives_tolerance.*).
"""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.gradcheck import relative_errors
from diffmjx.physics.impedance import MINIMP
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "tossed_primitives.yaml"
FD_STEP = 1e-4
REF_TOL = 1e-12  # the reference solve: an order of magnitude tighter than the preset's 1e-11
WORKERS = 2  # points evaluated at once
MJX_FLOOR = MINIMP  # MuJoCo's impedance floor (1e-4): the MJX row runs stock MJX


def _loss_fn(mx, cfg):
    ctrls = jnp.zeros((common.CUBE_TOSS["horizon"], 0))

    def loss(u0):
        d = common.cube_toss_data(mx, u0)
        return diffmjx.rollout(mx, d, ctrls, cfg)[0].qpos[1]

    return loss


_JITTED: dict = {}


def _batched(fn, u0s, desc):
    """Evaluate ``fn`` at every u0 (one compilation per ``fn``), two points at a time, with a progress bar.

    Not vmapped: a vmapped adaptive solve steps every lane until the slowest lane is done
    (docs/results/benchmark_scaling_vmap.csv). Two threads keep both cores busy (XLA releases the
    GIL while it runs).
    """
    f = _JITTED.setdefault(fn, jax.jit(fn))
    points = [jnp.asarray(u, dtype=jnp.float64) for u in np.asarray(u0s, dtype=np.float64)]
    with ThreadPoolExecutor(WORKERS) as pool:
        res = list(tqdm(pool.map(lambda u: jax.device_get(f(u)), points), total=len(points), desc=desc, leave=False))
    return jax.tree.map(lambda *x: np.asarray(x), *res)


def _sweep_errors(grad, ref):
    """|g - g_ref| / RMS(g_ref over the sweep): error on the scale of the gradient's own size."""
    return np.abs(grad - ref) / np.sqrt(np.mean(ref**2))


def sweep(kind: str, cfg: diffmjx.Config, u0s: np.ndarray) -> dict:
    _, mx = common.primitive(kind)
    tight = diffmjx.converged(cfg, REF_TOL)
    ref_loss = _loss_fn(mx, tight)
    lp = _batched(ref_loss, u0s + FD_STEP, f"{kind}: reference +h")
    lm = _batched(ref_loss, u0s - FD_STEP, f"{kind}: reference -h")
    out = {"u0": u0s, "ref_grad": (lp - lm) / (2 * FD_STEP), "ref_loss": 0.5 * (lp + lm)}
    mjx_cfg = cfg.override(
        "integrator.solver=mjx_euler",
        "integrator.substeps=5",
        "collision.smooth=false",
        f"solver.impedance_floor={MJX_FLOOR}",
    )  # stock MJX, as the paper's row
    for name, c in (("diffmjx", cfg), ("mjx", mjx_cfg)):
        loss, grad = _batched(jax.value_and_grad(_loss_fn(mx, c)), u0s, f"{kind}: {name}")
        out[f"{name}_loss"], out[f"{name}_grad"] = loss, grad
    return out


def run(cfg: diffmjx.Config, out: Path, quick: bool) -> list[dict]:
    u0s = np.linspace(-3.0, -1.0, 20 if quick else 200)
    rows, table, results = [], [], {}
    for kind in tqdm(list(common.PRIMITIVES), desc="primitives"):
        r = sweep(kind, cfg, u0s)
        results[kind] = r
        for i, u0 in enumerate(u0s):
            rows.append(
                dict(
                    primitive=kind,
                    u0=u0,
                    ref_loss=r["ref_loss"][i],
                    ref_grad=r["ref_grad"][i],
                    diffmjx_loss=r["diffmjx_loss"][i],
                    diffmjx_grad=r["diffmjx_grad"][i],
                    mjx_loss=r["mjx_loss"][i],
                    mjx_grad=r["mjx_grad"][i],
                )
            )
        for method in ("diffmjx", "mjx"):
            e = relative_errors(r[f"{method}_grad"], r["ref_grad"])
            sign = np.mean(np.sign(r[f"{method}_grad"]) != np.sign(r["ref_grad"]))
            es = _sweep_errors(r[f"{method}_grad"], r["ref_grad"])
            table.append(
                dict(
                    primitive=kind,
                    method=method,
                    median_rel_error=float(np.median(e)),
                    p90_rel_error=float(np.percentile(e, 90)),
                    median_sweep_error=float(np.median(es)),
                    wrong_sign_fraction=float(sign),
                    max_loss_deviation=float(np.max(np.abs(r[f"{method}_loss"] - r["ref_loss"]))),
                )
            )
    common.write_csv(out / "tossed_primitives.csv", rows)
    common.write_csv(out / "tossed_primitives_table.csv", table)
    _markdown(table, cfg, len(u0s), out / "tossed_primitives_table.md")
    _plot(results, out / "tossed_primitives.png")
    for t in table:
        print(f"{t['primitive']:<10} {t['method']:<8} median {t['median_rel_error']:8.2%}  "
              f"p90 {t['p90_rel_error']:8.2%}  sweep {t['median_sweep_error']:8.2%}  "
              f"wrong sign {t['wrong_sign_fraction']:6.1%}")  # fmt: skip
    return table


def sharpness_tradeoff(cfg: diffmjx.Config, out: Path, quick: bool) -> list[dict]:
    """Cube: gradient error and loss deviation from the unsmoothed converged solve vs sharpness."""
    u0s = np.linspace(-3.0, -1.0, 10 if quick else 40)
    _, mx = common.primitive("cube")
    tight = diffmjx.converged(cfg.override("collision.smooth=false"), REF_TOL)
    ref_loss = _loss_fn(mx, tight)
    lp = _batched(ref_loss, u0s + FD_STEP, "cube: reference +h")
    lm = _batched(ref_loss, u0s - FD_STEP, "cube: reference -h")
    ref_grad, ref = (lp - lm) / (2 * FD_STEP), 0.5 * (lp + lm)
    rows = []
    for k in tqdm((1e2, 1e3, 1e4, 1e5), desc="sharpness"):
        c = cfg.override("collision.smooth=true", f"collision.sharpness={k}")
        loss, grad = _batched(jax.value_and_grad(_loss_fn(mx, c)), u0s, f"sharpness {k:.0e}")
        e = relative_errors(grad, ref_grad)
        rows.append(
            dict(
                sharpness=k,
                median_rel_error=float(np.median(e)),
                p90_rel_error=float(np.percentile(e, 90)),
                max_loss_deviation=float(np.max(np.abs(loss - ref))),
            )
        )
    common.write_csv(out / "tossed_primitives_sharpness.csv", rows)
    _plot_sharpness(rows, out / "tossed_primitives_sharpness.png")
    return rows


SCAN_TOLS = (1e-9, 1e-10, 1e-11)
SCAN_REF_TOL = 1e-12


def tolerance_scan(
    cfg: diffmjx.Config, out: Path, kinds=tuple(common.PRIMITIVES), n: int = 20, tols=SCAN_TOLS
) -> list[dict]:
    """DiffMJX's median gradient error against rtol = atol, on ``n`` values of u0, per primitive.

    The reference is central differences of a ``SCAN_REF_TOL`` solve, tighter than every scanned
    tolerance. Rows are keyed by primitive, ``solver.impedance_floor`` and rtol; rows of an earlier
    scan with other keys are kept. Writes tossed_primitives_tolerance.{csv,png}.
    """
    path = out / "tossed_primitives_tolerance.csv"
    floor = cfg.solver.impedance_floor
    kept = []
    if path.exists():
        with open(path) as f:
            for r in csv.DictReader(f):
                r = {k: v if k == "primitive" else int(float(v)) if k == "points" else float(v) for k, v in r.items()}
                r.setdefault("impedance_floor", 1e-4)  # scans before the knob ran MuJoCo's floor
                if not (r["primitive"] in kinds and r["impedance_floor"] == floor and r["rtol"] in tols):
                    kept.append(r)
    u0s = np.linspace(-3.0, -1.0, n)
    rows = []
    for kind in tqdm(kinds, desc="tolerance scan"):
        _, mx = common.primitive(kind)
        ref = _loss_fn(mx, diffmjx.converged(cfg, SCAN_REF_TOL))
        ref_grad = (
            _batched(ref, u0s + FD_STEP, f"{kind}: reference +h")
            - _batched(ref, u0s - FD_STEP, f"{kind}: reference -h")
        ) / (2 * FD_STEP)
        for tol in tols:
            c = cfg.override(f"integrator.rtol={tol}", f"integrator.atol={tol}")
            _, grad = _batched(jax.value_and_grad(_loss_fn(mx, c)), u0s, f"{kind}: rtol {tol:g}")
            e = relative_errors(grad, ref_grad)
            rows.append(
                dict(
                    primitive=kind,
                    impedance_floor=floor,
                    rtol=tol,
                    points=n,
                    median_rel_error=float(np.median(e)),
                    p90_rel_error=float(np.percentile(e, 90)),
                    median_sweep_error=float(np.median(_sweep_errors(grad, ref_grad))),
                )
            )
            common.write_csv(path, kept + rows)  # after every tolerance: nothing lost to an interrupt
    _plot_tolerance(kept + rows, out / "tossed_primitives_tolerance.png")
    for r in rows:
        print(
            f"{r['primitive']:<10} floor {floor:g}  rtol {r['rtol']:.0e}  median {r['median_rel_error']:7.2%}  p90 {r['p90_rel_error']:7.2%}"
        )
    return rows


def _plot_tolerance(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    colors = {k: f"C{i}" for i, k in enumerate(common.PRIMITIVES)}
    for kind, floor in dict.fromkeys((r["primitive"], r["impedance_floor"]) for r in rows):
        sel = sorted(
            (r for r in rows if (r["primitive"], r["impedance_floor"]) == (kind, floor)), key=lambda r: r["rtol"]
        )
        ax.loglog(
            [r["rtol"] for r in sel],
            [r["median_rel_error"] for r in sel],
            "o-" if floor == 0 else "s:",
            color=colors.get(kind),
            label=f"{kind}, floor {floor:g}",
        )
    ax.axhline(0.01, color="k", lw=0.8, ls="--", label="1 % target")
    ax.set(xlabel="rtol = atol", ylabel="median rel. gradient error")
    ax.set_title(f"DiffMJX gradient error vs tolerance (reference {SCAN_REF_TOL:g})", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    common.save_figure(fig, path)


def _markdown(table, cfg, n, path):
    ic = cfg.integrator
    lines = [
        f"Tossed primitives: relative gradient error against central differences of a converged solve "
        f"({n} values of u0 in [-3, -1]; reference: central differences, step {FD_STEP:g}, of a rtol = atol = "
        f"{REF_TOL:g} solve). DiffMJX = {ic.solver}, rtol = atol = {ic.rtol:g}, {ic.adjoint} adjoint, "
        f"smoothed collisions (sharpness {cfg.collision.sharpness:g}), solver.impedance_floor = "
        f"{cfg.solver.impedance_floor:g}; MJX = stock MJX, semi-implicit Euler at dt 0.002 (impedance floor "
        f"{MJX_FLOOR:g}).",
        "",
        "Relative error: |g - g_ref| / max(|g_ref|, 5 % of median |g_ref|) per u0; sweep error:"
        " |g - g_ref| / RMS(g_ref over the sweep).",
        "",
        "| primitive | method | median rel. error | 90th pct. rel. error | median sweep error | wrong sign | max loss deviation (m) |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in table:
        lines.append(
            f"| {t['primitive']} | {t['method']} | {t['median_rel_error']:.2%} | {t['p90_rel_error']:.2%} "
            f"| {t['median_sweep_error']:.2%} | {t['wrong_sign_fraction']:.0%} | {t['max_loss_deviation']:.2e} |"
        )
    path.write_text("\n".join(lines) + "\n")


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(results)
    fig, axes = plt.subplots(2, len(kinds), figsize=(3.2 * len(kinds), 5.5), sharex=True)
    for j, kind in enumerate(kinds):
        r = results[kind]
        axes[0, j].plot(r["u0"], r["mjx_loss"], color="tab:red", lw=1, label="MJX Euler dt 0.002")
        axes[0, j].plot(r["u0"], r["diffmjx_loss"], color="tab:blue", lw=1.5, label="DiffMJX")
        axes[0, j].plot(r["u0"], r["ref_loss"], "k--", lw=1, label="converged")
        axes[1, j].plot(r["u0"], r["mjx_grad"], color="tab:red", lw=1)
        axes[1, j].plot(r["u0"], r["diffmjx_grad"], color="tab:blue", lw=1.5)
        axes[1, j].plot(r["u0"], r["ref_grad"], "k--", lw=1)
        axes[0, j].set_title(kind)
        axes[1, j].set_xlabel("u0 (m/s)")
        lim = 3 * np.max(np.abs(r["ref_grad"]))
        axes[1, j].set_ylim(-lim, lim)
    axes[0, 0].set_ylabel("loss: final y (m)")
    axes[1, 0].set_ylabel("d loss / d u0")
    axes[0, 0].legend(fontsize=7)
    common.save_figure(fig, path, dpi=110)


def _plot_sharpness(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = [r["sharpness"] for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.loglog(k, [r["median_rel_error"] for r in rows], "o-", label="median rel. gradient error")
    ax.loglog(k, [r["max_loss_deviation"] for r in rows], "s--", label="max loss deviation (m)")
    ax.set_xlabel("collision.sharpness (1/m)")
    ax.set_title("Cube: smoothing trade-off")
    ax.legend(fontsize=8)
    common.save_figure(fig, path, dpi=120)


def main(argv=None):
    scan = dict(action="store_true", help="only the error-vs-tolerance scan (20 u0; about 8 min per primitive)")
    kinds = dict(default=",".join(common.PRIMITIVES), help="primitives of the tolerance scan, comma-separated")
    tols = dict(default=",".join(f"{t:g}" for t in SCAN_TOLS), help="tolerances of the tolerance scan")
    extra = [("--tolerance-scan", scan), ("--scan-kinds", kinds), ("--scan-tols", tols)]
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv, extra=extra)
    if args.tolerance_scan:
        scan_kinds = tuple(k.strip() for k in args.scan_kinds.split(","))
        for k in scan_kinds:
            if k not in common.PRIMITIVES:
                raise ValueError(f"--scan-kinds: {k!r} is not a primitive; choose from {', '.join(common.PRIMITIVES)}")
        tolerance_scan(cfg, args.out, scan_kinds, tols=tuple(float(t) for t in args.scan_tols.split(",")))
        return
    run(cfg, args.out, args.quick)
    sharpness_tradeoff(cfg, args.out, args.quick)


if __name__ == "__main__":
    main()
