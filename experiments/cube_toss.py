"""Main demo: the cube toss (paper Fig. 17 setup), DiffMJX vs fixed-step MJX gradients.

    python -m experiments.cube_toss [--preset experiments/configs/cube_toss.yaml] [--set KEY=VALUE ...]

Prints, for DiffMJX (the configured adaptive solver) and for MJX's semi-implicit Euler at dt 0.01:
the loss (final qpos[1]), the AD gradient d loss / d u0, central differences of a tightly converged
solve (rtol = atol = 1e-12, step sweep) and their relative error; plus MuJoCo's C engine (RK4 at
dt 1e-5) as an independent reference. Writes docs/results/cube_toss.{csv,png}.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

import diffmjx
from diffmjx.gradcheck import pick_plateau
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "cube_toss.yaml"


def _timed_grad(loss, u0):
    f = jax.jit(jax.value_and_grad(loss))
    t = time.perf_counter()
    compiled = f.lower(u0).compile()
    jit_s = time.perf_counter() - t
    jax.block_until_ready(compiled(u0))
    t = time.perf_counter()
    value, grad = jax.block_until_ready(compiled(u0))
    return float(value), float(grad), jit_s, time.perf_counter() - t


def run(cfg: diffmjx.Config, out: Path, quick: bool = False) -> list[dict]:
    _, mx = common.load("cube_toss")
    u0 = common.CUBE_TOSS["u0"]
    tight = diffmjx.converged(cfg)  # Tsit5 at 1e-12, no kink control: the library's reference solve
    steps = (1e-3, 1e-4) if quick else (1e-2, 1e-3, 3e-4, 1e-4, 3e-5)
    sweep, steps = diffmjx.central_differences(common.cube_toss_loss(mx, tight), u0, steps)
    k = pick_plateau(sweep)
    truth = float(sweep[k, 0])
    truth_loss = float(jax.jit(common.cube_toss_loss(mx, tight))(u0))
    print(
        f"converged solve (tsit5, rtol=atol=1e-12): loss {truth_loss:+.5f}, "
        f"central-difference gradient {truth:+.5f} (step {steps[k]:.0e})"
    )

    rows = []
    methods = {
        f"DiffMJX ({cfg.integrator.solver}, rtol {cfg.integrator.rtol:.0e}, {cfg.integrator.adjoint}"
        f"{', kink control' if cfg.integrator.kink_step else ''})": cfg,
        "DiffMJX, backsolve adjoint": cfg.override("integrator.adjoint=backsolve"),
        "DiffMJX, implicit solver gradient": cfg.override("solver.gradient=implicit"),
        # stock MJX: MuJoCo's impedance floor
        "MJX semi-implicit Euler, dt 0.01": cfg.override("integrator.solver=mjx_euler", "solver.impedance_floor=1e-4"),
    }
    for name, c in methods.items():
        loss, grad, jit_s, run_s = _timed_grad(common.cube_toss_loss(mx, c), u0)
        rel = abs(grad - truth) / abs(truth)
        rows.append(
            dict(
                method=name,
                loss=loss,
                grad_ad=grad,
                grad_truth=truth,
                rel_error=rel,
                backward_jit_s=jit_s,
                backward_run_s=run_s,
            )
        )
    if not quick:
        h = 1e-4
        c_loss = common.c_engine_cube_toss(u0)
        c_grad = (common.c_engine_cube_toss(u0 + h) - common.c_engine_cube_toss(u0 - h)) / (2 * h)
        rows.append(
            dict(
                method="MuJoCo C engine, RK4 dt 1e-5 (central differences)",
                loss=c_loss,
                grad_ad=c_grad,
                grad_truth=truth,
                rel_error=abs(c_grad - truth) / abs(truth),
                backward_jit_s=np.nan,
                backward_run_s=np.nan,
            )
        )

    print(
        f"\n{'method':<58} {'loss':>9} {'gradient':>9} {'truth':>9} {'rel.err':>8} {'JIT s':>6} {'run s':>6}  (gradient; JIT with the persistent cache)"
    )
    for r in rows:
        print(
            f"{r['method']:<58} {r['loss']:+9.4f} {r['grad_ad']:+9.4f} {r['grad_truth']:+9.4f} "
            f"{r['rel_error']:8.2%} {r['backward_jit_s']:6.1f} {r['backward_run_s']:6.3f}"
        )
    common.write_csv(out / "cube_toss.csv", rows)
    _plot(rows, truth, out / "cube_toss.png")
    return rows


def _plot(rows, truth, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    names = [r["method"].replace(" (", "\n(").replace(", RK4", "\nRK4") for r in rows]
    ax.barh(
        names,
        [r["grad_ad"] for r in rows],
        color=["tab:blue", "tab:cyan", "tab:purple", "tab:red", "tab:gray"][: len(rows)],
    )
    ax.axvline(truth, color="k", ls="--", label=f"converged solve: {truth:+.3f}")
    ax.set_xlabel("d final qpos[1] / d u0")
    ax.set_title("Cube toss: gradient w.r.t. initial vertical velocity")
    ax.legend(loc="lower right")
    common.save_figure(fig, path, dpi=120)


def main(argv=None):
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    run(cfg, args.out, args.quick)


if __name__ == "__main__":
    main()
