"""Stiff (implicit) Runge-Kutta methods against Tsit5 on the cube toss: where the steps go, what they cost.

    python -m experiments.benchmark_stiff [--repeats N]

The speed issue asks whether Diffrax's stiff methods take fewer steps through contact than the
explicit Tsit5. The cube toss at ``Config()`` (rtol = atol = 1e-7, the forward tolerance of the
default backsolve gradient), rolled out forward with each method passed as ``diffmjx.rollout(...,
solver=...)``: Tsit5 (the default), and the ESDIRK methods Kvaerno3 and Kvaerno5 with Diffrax's
default root finder (a chord method whose Jacobian is the vector field's, taken once per step by
forward-mode autodiff through MJX's dynamics).

Per method: accepted and rejected steps, split into contact periods (a corner of the cube within
1 mm of the table at the period's start or end) and the others; the forward run time (median of
``--repeats``, run nothing beside it) and the first call's time (trace, compile, run; the persistent
cache is off for this study); and the final sideways position against a converged solve
(``diffmjx.converged``, rtol = atol = 1e-12), so that methods are compared at the accuracy they
reach. Gradients are not timed: the backsolve gradient of Kvaerno5 did not finish within 10 minutes
in a one-off probe (its adjoint solve is implicit too).

Writes ``docs/results/benchmark_stiff.csv`` and ``benchmark_stiff.png``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.gradcheck import converged
from diffmjx.scenes import CUBE_TOSS, box_corner_heights, cube_toss_data, load
from experiments import common

METHODS = ("tsit5", "kvaerno3", "kvaerno5")
CONTACT_GAP = 1e-3  # m: a period is a contact period if a corner is this close to the table at either end


def _solver(name: str):
    import diffrax

    return {"tsit5": None, "kvaerno3": diffrax.Kvaerno3(), "kvaerno5": diffrax.Kvaerno5()}[name]


def _rollout_fn(mx, cfg, solver):
    ctrls = jnp.zeros((CUBE_TOSS["horizon"], mx.nu))

    def run(u0):
        d, traj = diffmjx.rollout(mx, cube_toss_data(mx, u0), ctrls, cfg, solver=solver)
        return d.qpos[1], traj.qpos, traj.stats.accepted, traj.stats.rejected

    return run


def _contact_periods(mx, qpos0, qpos) -> np.ndarray:
    """Whether a corner of the cube is within ``CONTACT_GAP`` of the table at each period's start or end."""
    lows = np.array([box_corner_heights(mx, q)[0] for q in np.concatenate([qpos0[None], qpos])])
    near = lows < CONTACT_GAP
    return near[:-1] | near[1:]


def run(repeats: int) -> list[dict]:
    _, mx = load("cube_toss")
    cfg = diffmjx.Config()
    u0 = jnp.asarray(CUBE_TOSS["u0"])
    qpos0 = np.asarray(cube_toss_data(mx, u0).qpos)
    reference = float(jax.jit(_rollout_fn(mx, converged(cfg), None))(u0)[0])
    rows = []
    for name in tqdm(METHODS, desc="methods"):
        fn = jax.jit(_rollout_fn(mx, cfg, _solver(name)))
        t = time.perf_counter()
        y, qpos, acc, rej = jax.block_until_ready(fn(u0))
        first = time.perf_counter() - t
        run_s = common.median_time(fn, u0, repeats=repeats)
        acc, rej = np.asarray(acc), np.asarray(rej)
        contact = _contact_periods(mx, qpos0, np.asarray(qpos))
        rows.append(
            dict(
                method=name,
                rtol=cfg.integrator.rtol,
                final_qpos_y=float(y),
                reference_qpos_y=reference,
                abs_error=abs(float(y) - reference),
                accepted=int(acc.sum()),
                rejected=int(rej.sum()),
                contact_periods=int(contact.sum()),
                accepted_contact=int(acc[contact].sum()),
                rejected_contact=int(rej[contact].sum()),
                accepted_other=int(acc[~contact].sum()),
                rejected_other=int(rej[~contact].sum()),
                forward_run_s=run_s,
                first_call_s=first,
                repeats=repeats,
                backend=jax.default_backend(),
            )
        )
    return rows


def plot(rows: list[dict], path) -> None:
    import matplotlib.pyplot as plt

    names = [r["method"] for r in rows]
    x = np.arange(len(rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    parts = [
        ("accepted_contact", "accepted, contact periods"),
        ("rejected_contact", "rejected, contact periods"),
        ("accepted_other", "accepted, other periods"),
        ("rejected_other", "rejected, other periods"),
    ]
    bottom = np.zeros(len(rows))
    for key, label in parts:
        v = np.array([r[key] for r in rows], float)
        a.bar(x, v, bottom=bottom, label=label)
        bottom += v
    a.set_xticks(x, names)
    a.set_ylabel("steps over the 1 s toss")
    a.set_title("steps")
    a.legend(fontsize=7)
    b.bar(x, [r["forward_run_s"] * 1e3 for r in rows], color="C4")
    b.set_xticks(x, names)
    b.set_ylabel("forward rollout (ms)")
    b.set_title("run time")
    b.set_ylim(0, 1.15 * max(r["forward_run_s"] for r in rows) * 1e3)
    for i, r in enumerate(rows):
        b.annotate(
            f"|error| {r['abs_error']:.1e} m", (i, r["forward_run_s"] * 1e3), ha="center", va="bottom", fontsize=7
        )
    fig.suptitle(f"Cube toss at Config() (rtol {rows[0]['rtol']:g}), float64, {rows[0]['backend']}")
    common.save_figure(fig, path)


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5, help="timed forward runs per method (median)")
    args = p.parse_args(argv)
    common.setup()
    jax.config.update("jax_enable_compilation_cache", False)  # first calls are cold compiles
    rows = run(3 if args.quick else args.repeats)
    common.write_csv(args.out / "benchmark_stiff.csv", rows)
    plot(rows, args.out / "benchmark_stiff.png")
    for r in rows:
        print(
            f"{r['method']:9s} accepted {r['accepted']:5d} rejected {r['rejected']:4d} "
            f"(contact {r['accepted_contact']} + {r['rejected_contact']}) forward {r['forward_run_s']:.3f} s "
            f"first call {r['first_call_s']:.1f} s |error| {r['abs_error']:.2e} m"
        )


if __name__ == "__main__":
    main()
