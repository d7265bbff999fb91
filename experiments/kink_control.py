"""Kink control: discretise-then-optimise gradients near contact-state changes, with and without it.

    python -m experiments.kink_control [--quick] [--set KEY=VALUE ...] [--configs "A;B" --update]

Lead hypothesis of the gradients-by-default issue: checkpointed AD scatters because some adaptive
steps straddle a change of the constraint state (a contact lifting off, a friction-pyramid edge,
stick-slip), where the contact force has a kink and the derivative of the step is off by
O(step x stiffness). ``integrator.kink_step`` rejects such steps until they are at most that long
(``diffmjx.integration.stepsize.PeriodPID``). This study measures the gradient of the cube toss's final
``qpos[1]`` with respect to the initial vertical velocity on ten shots: the nine shots of
``tests/test_cube_toss.py`` (u0 = -2 + linspace(-0.1, 0.1, 9), lateral velocity -0.1 m/s) and the
README's "Use" snippet (u0 = -2, no lateral velocity), against central differences (step 1e-4) of
a 1e-12 solve with the same impedance floor. Errors are relative to max(|truth|, 5 % of the median
|truth|) as in the test. Each configuration's ten gradients are one vmapped program: its run time
(``backward_run_s``, all ten shots) and JIT time are reported beside the errors. The configurations
of ``CONFIGS`` are overrides of the paper's setting (``diffmjx.Config.paper()``, the defaults of the
time the study was first made); those of ``DEFAULT_CONFIGS`` of today's ``diffmjx.Config()``, among
them ``checkpoint`` with ``kink_step=auto`` and its forward solve at ``rtol / dto_tighten``.
Writes docs/results/kink_control.{csv,png} (about 20 min; ``--quick``: five configurations;
``--configs "A;B" --update``: only those rows rerun).
"""

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import diffmjx
from diffmjx.gradcheck import relative_errors
from experiments import common

U0 = common.CUBE_TOSS["u0"] + np.r_[np.linspace(-0.1, 0.1, 9), 0.0]
VY0 = np.r_[np.full(9, common.CUBE_TOSS["vy0"]), 0.0]  # the last shot is the README snippet's
SHOTS = [f"toss {k}" for k in range(9)] + ["README snippet"]
CONFIGS = {  # name -> overrides of the defaults
    "checkpoint 1e-8": ("integrator.rtol=1e-8", "integrator.atol=1e-8"),
    "checkpoint 1e-8, floor 0": ("integrator.rtol=1e-8", "integrator.atol=1e-8", "solver.impedance_floor=0"),
    "checkpoint 1e-8, floor 0, kink 1e-9": (
        "integrator.rtol=1e-8",
        "integrator.atol=1e-8",
        "solver.impedance_floor=0",
        "integrator.kink_step=1e-9",
    ),
    "checkpoint 1e-8, floor 0, kink 1e-7": (
        "integrator.rtol=1e-8",
        "integrator.atol=1e-8",
        "solver.impedance_floor=0",
        "integrator.kink_step=1e-7",
    ),
    "checkpoint 1e-7, floor 0, kink 1e-6": (
        "integrator.rtol=1e-7",
        "integrator.atol=1e-7",
        "solver.impedance_floor=0",
        "integrator.kink_step=1e-6",
    ),
    "checkpoint 1e-5, floor 0, kink 1e-7": ("solver.impedance_floor=0", "integrator.kink_step=1e-7"),
    "backsolve 1e-7": ("integrator.rtol=1e-7", "integrator.atol=1e-7", "integrator.adjoint=backsolve"),
    "backsolve 1e-7, floor 0": (
        "integrator.rtol=1e-7",
        "integrator.atol=1e-7",
        "integrator.adjoint=backsolve",
        "solver.impedance_floor=0",
    ),
}
# name -> overrides of the library's defaults as they are now (``diffmjx.Config()``: floor 0, the
# converged implicit solve, the deepest plane-box rule), where ``kink_step=auto`` turns kink control
# on for checkpoint at min(10 rtol / dto_tighten, 1e-7) s, its forward solve at rtol / dto_tighten
DEFAULT_CONFIGS = {
    "defaults (backsolve 1e-7)": (),
    # checkpoint's forward solve at rtol / dto_tighten = 1e-8, kink auto 1e-7
    "defaults, checkpoint (solve at 1e-8, kink auto 1e-7)": ("integrator.adjoint=checkpoint",),
    # the rows below solve at the rtol named (dto_tighten 1): checkpoint's defaults before dto_tighten
    "defaults, checkpoint at 1e-7 (kink auto: 1e-7)": ("integrator.adjoint=checkpoint", "integrator.dto_tighten=1"),
    "defaults, checkpoint at 1e-7, kink 1e-6": (
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
        "integrator.kink_step=1e-6",
    ),
    "defaults, checkpoint at 1e-7, no kink control": (
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
        "integrator.kink_step=null",
    ),
}
QUICK = (
    "checkpoint 1e-8, floor 0",
    "checkpoint 1e-8, floor 0, kink 1e-7",
    "backsolve 1e-7, floor 0",
    "defaults (backsolve 1e-7)",
    "defaults, checkpoint (solve at 1e-8, kink auto 1e-7)",
)
FD_STEP = 1e-4


def loss_fn(mx, cfg: diffmjx.Config, horizon: int = common.CUBE_TOSS["horizon"]):
    """(u0, vy0) -> (final qpos[1], (accepted, rejected steps, budget exhausted))."""
    ctrls = jnp.zeros((horizon, mx.nu))

    def loss(u0, vy0):
        d = common.cube_toss_data(mx, u0)
        d = d.replace(qvel=d.qvel.at[1].set(vy0))
        d, traj = diffmjx.rollout(mx, d, ctrls, cfg)
        s = traj.stats
        return d.qpos[1], (s.accepted.sum(), s.rejected.sum(), s.budget_exhausted.any())

    return loss


def truth(mx, cfg: diffmjx.Config) -> np.ndarray:
    """Central differences (``diffmjx.central_differences``, one shot at a time, two threads) of the
    1e-12 solve of ``cfg``'s physics at every shot."""
    loss = loss_fn(mx, diffmjx.converged(cfg))
    value = lambda u, v: loss(u, v)[0]
    return np.array(
        [
            diffmjx.central_differences(value, u, (FD_STEP,), args=(v,), workers=2)[0][0, 0]
            for u, v in zip(U0, VY0, strict=True)
        ]
    )


def run(base: diffmjx.Config, out: Path, quick: bool = False, names=None, update: bool = False) -> list[dict]:
    """The configurations ``names`` (default: all; ``quick``: :data:`QUICK`); ``update``: only
    their rows of ``out/kink_control.csv`` are replaced."""
    _, mx = common.load("cube_toss")
    if names is None:
        names = QUICK if quick else (*CONFIGS, *DEFAULT_CONFIGS)
    for name in names:
        if name not in CONFIGS and name not in DEFAULT_CONFIGS:
            raise ValueError(
                f"kink-control configuration {name!r} is not known; choose from: "
                f"{', '.join((*CONFIGS, *DEFAULT_CONFIGS))}"
            )
    truths, rows = {}, []
    paper = diffmjx.Config.paper(base)  # CONFIGS are overrides of the defaults of then
    for name in names:
        overrides = CONFIGS.get(name, DEFAULT_CONFIGS.get(name))
        cfg = (paper if name in CONFIGS else base).override(*overrides)
        physics = (cfg.solver, cfg.collision, cfg.cfd)  # the truth depends on these only
        if physics not in truths:
            truths[physics] = truth(mx, cfg)
        ref = truths[physics]
        grad_fn = jax.jit(jax.vmap(jax.grad(loss_fn(mx, cfg), has_aux=True)))
        t = time.perf_counter()
        compiled = grad_fn.lower(U0, VY0).compile()
        jit_s = time.perf_counter() - t
        t = time.perf_counter()
        grad, (acc, rej, exhausted) = jax.block_until_ready(compiled(U0, VY0))
        run_s = time.perf_counter() - t
        grad = np.asarray(grad)
        err = relative_errors(grad, ref)
        print(f"{name:<40} median {np.median(err):7.2%}  max {err.max():7.2%}  README {err[-1]:7.2%}  "
              f"{run_s:6.1f} s  JIT {jit_s:5.0f} s")  # fmt: skip
        for shot, g, r, e, a, j in zip(SHOTS, grad, ref, err, np.asarray(acc), np.asarray(rej), strict=True):
            rows.append(dict(config=name, overrides=" ".join(overrides), shot=shot, grad_ad=g, grad_truth=r,
                             rel_error=e, wrong_sign=bool(np.sign(g) != np.sign(r)), accepted_steps=int(a),
                             rejected_steps=int(j), budget_exhausted=bool(np.asarray(exhausted).any()),
                             backward_run_s=run_s, backward_jit_s=jit_s))  # fmt: skip
    if update:
        order = [*CONFIGS, *DEFAULT_CONFIGS]
        rows = common.merge_rows(out / "kink_control.csv", rows, ("config",))
        rows.sort(key=lambda r: order.index(r["config"]) if r["config"] in order else len(order))  # stable
    common.write_csv(out / "kink_control.csv", rows)
    _plot(rows, out / "kink_control.png")
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["config"] for r in rows))
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, 20))[: len(names)] if len(names) > 10 else None
    fig, ax = plt.subplots(figsize=(10.5, 4.8))
    for k, name in enumerate(names):
        sel = [r for r in rows if r["config"] == name]
        err = np.array([100 * r["rel_error"] for r in sel])
        t = sel[0]["backward_run_s"]
        color = colors[k] if colors is not None else f"C{k}"
        marker = "s" if name in DEFAULT_CONFIGS else "o"  # squares: today's defaults
        ax.scatter(np.full(len(err), t), np.maximum(err, 1e-3), s=14, color=color, alpha=0.7, marker=marker)
        ax.plot([t], [np.median(np.maximum(err, 1e-3))], marker="_", ms=22, mew=2.5, color=color, label=name, ls="none")
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", ls=":", lw=1)
    ax.set_xlabel("backward run time of the ten shots (s, vmapped)")
    ax.set_ylabel("relative gradient error (%)")
    ax.set_title("Cube toss: gradient error per shot (bar: median; squares: today's defaults) vs backward time")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    common.save_figure(fig, path)


def main(argv=None):
    cfg, args = common.cli(
        __doc__,
        Path(__file__).parent / "configs" / "kink_control.yaml",
        argv,
        extra=(
            ("--configs", dict(default=None, help="configuration names separated by ; (CONFIGS, DEFAULT_CONFIGS)")),
            (
                "--update",
                dict(
                    action="store_true", help="replace only these configurations' rows of the existing kink_control.csv"
                ),
            ),
        ),
    )
    run(cfg, args.out, args.quick, args.configs.split(";") if args.configs else None, args.update)


if __name__ == "__main__":
    main()
