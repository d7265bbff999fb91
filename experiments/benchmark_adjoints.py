"""The continuous adjoints side by side: where the backward steps go, what they cost, how right they are.

    python -m experiments.benchmark_adjoints [--shots N]

The cube toss at ``Config()`` (Tsit5, rtol = atol = 1e-7), differentiated with respect to the
toss velocity ``u0`` by each gradient mode: ``checkpoint`` (discretise-then-optimise with kink
control), ``backsolve`` (the default: :class:`diffmjx.integration.adjoints.KinkAwareBacksolve`, kink
control in its backward solve), ``backsolve_diffrax`` (``diffrax.BacksolveAdjoint`` with the same
backward controller, passed as ``adjoint=``: Diffrax's backward solve, the default until Dec 6), ``sensitivity`` (:class:`diffmjx.integration.integrate.SensitivityAdjoint`: the
period Jacobians carried forward by Magnus quadrature on the forward solve's steps) and ``interpolated`` (:class:`diffmjx.integration.integrate.InterpolatedAdjoint`:
the state read from the forward solution, the adjoint stepped to the kinks).

- Accuracy: ``N`` shots spread over ``u0 +- 0.2`` (one vmapped gradient per mode), against
  central differences (step 1e-4) of a converged solve (``diffmjx.converged``, rtol = atol = 1e-12).
  Errors are relative, floored at 5 % of the median |gradient| (``diffmjx.gradcheck.relative_errors``).
- Cost at the demo's shot ``u0``: vector-field evaluations of the forward solve and of the whole
  value-and-gradient (counted by a host callback in a separately compiled program, so the timed
  programs carry none; for ``sensitivity`` a Jacobian by forward mode counts as one), the backward
  pass's evaluations being the difference; run times (medians of 15 rounds in which the modes take
  turns, the backward pass's being value-and-gradient minus forward; run nothing beside it) and the
  first call's time of the value and gradient (trace, compile and run, with JAX's persistent cache
  off for this study: cold for every mode).

Writes ``docs/results/benchmark_adjoints.csv`` (one row per mode and shot),
``benchmark_adjoints_summary.csv`` (one row per mode) and ``benchmark_adjoints.png``.
"""

from __future__ import annotations

import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.gradcheck import relative_errors
from diffmjx.integration import term
from diffmjx.integration.stepsize import pid_controller
from diffmjx.scenes import CUBE_TOSS, cube_toss_data, cube_toss_loss, load
from experiments import common

ADJOINTS = ("checkpoint", "backsolve", "backsolve_diffrax", "interpolated", "sensitivity")
DIFFRAX_BACKSOLVE = "backsolve_diffrax"  # config's backsolve, carried out by diffrax.BacksolveAdjoint
TIMING_ROUNDS = 15  # interleaved rounds of one forward and one value-and-gradient call per mode


def _count_evaluations(fn, *args) -> int:
    """Vector-field evaluations one call of ``fn(*args)`` makes (traced with a counting callback)."""
    count = [0]
    original = term.vector_field

    def counted(*a, **k):
        out = original(*a, **k)
        jax.debug.callback(lambda: count.__setitem__(0, count[0] + 1))
        return out

    term.vector_field = counted
    try:  # a fresh function object: JAX must trace anew, and the timed programs keep their traces
        jax.block_until_ready(jax.jit(lambda *a: fn(*a))(*args))
    finally:
        term.vector_field = original
    return count[0]


def run(shots: int, out) -> tuple[list[dict], list[dict]]:
    _, mx = load("cube_toss")
    u0 = CUBE_TOSS["u0"]
    us = u0 + np.linspace(-0.2, 0.2, shots)
    ctrls = jnp.zeros((CUBE_TOSS["horizon"], mx.nu))
    base = diffmjx.Config()
    bar = tqdm(total=1 + 2 * len(ADJOINTS), desc="benchmark_adjoints", unit="part")
    f = jax.jit(jax.vmap(cube_toss_loss(mx, diffmjx.converged(base))))
    truth = np.asarray((f(us + 1e-4) - f(us - 1e-4)) / 2e-4)
    bar.update()
    rows, summary, programs = [], [], []
    for name in ADJOINTS:
        cfg = base.override(f"integrator.adjoint={'backsolve' if name == DIFFRAX_BACKSOLVE else name}")
        adjoint = None
        if name == DIFFRAX_BACKSOLVE:
            back = pid_controller(cfg, backsolve=True, adjoint_solve=True)
            adjoint = diffrax.BacksolveAdjoint(solver=diffrax.Tsit5(), stepsize_controller=back)

        def loss(u, cfg=cfg, adjoint=adjoint):
            d, _ = diffmjx.rollout(mx, cube_toss_data(mx, u), ctrls, cfg, adjoint=adjoint)
            return d.qpos[1]

        grads = np.asarray(jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(us)))
        err = relative_errors(grads, truth)
        rows += [
            dict(adjoint=name, u0=float(u), grad=float(g), grad_truth=float(t), rel_error=float(e))
            for u, g, t, e in zip(us, grads, truth, err, strict=True)
        ]
        bar.update()

        def forward(u, cfg=cfg, adjoint=adjoint):
            d, traj = diffmjx.rollout(mx, cube_toss_data(mx, u), ctrls, cfg, adjoint=adjoint)
            return d.qpos, traj.stats.accepted.sum(), traj.stats.rejected.sum()

        value_and_grad = jax.value_and_grad(loss)
        fwd, vg = jax.jit(forward), jax.jit(value_and_grad)
        _, accepted, rejected = jax.block_until_ready(fwd(u0))
        t = time.perf_counter()
        jax.block_until_ready(vg(u0))
        first = time.perf_counter() - t
        n_forward = _count_evaluations(forward, u0)
        n_total = _count_evaluations(value_and_grad, u0)
        programs.append((fwd, vg))
        summary.append(
            dict(
                adjoint=name,
                shots=shots,
                median_rel_error=float(np.median(err)),
                max_rel_error=float(np.max(err)),
                rel_error_at_u0=float(abs(float(vg(u0)[1]) - truth[shots // 2]) / abs(truth[shots // 2])),
                forward_accepted=int(accepted),
                forward_rejected=int(rejected),
                forward_evaluations=n_forward,
                backward_evaluations=n_total - n_forward,
                first_call_s=first,
            )
        )
        bar.update()
    bar.close()
    # run times: the modes interleaved, round after round, so that this machine's slow spells
    # (which move a mode's figures by up to 2x) fall on every mode alike
    times = [([], []) for _ in programs]
    for _ in tqdm(range(TIMING_ROUNDS), desc="timing rounds"):
        for (fwd, vg), (tf, tvg) in zip(programs, times, strict=True):
            tf.append(common.median_time(fwd, u0, repeats=1))
            tvg.append(common.median_time(vg, u0, repeats=1))
    for s, (tf, tvg) in zip(summary, times, strict=True):
        run_f, run_vg = float(np.median(tf)), float(np.median(tvg))
        s.update(
            forward_s=run_f,
            value_and_grad_s=run_vg,
            backward_s=run_vg - run_f,
            backward_over_forward=(run_vg - run_f) / run_f,
            timing_rounds=TIMING_ROUNDS,
        )
    common.write_csv(out / "benchmark_adjoints.csv", rows)
    common.write_csv(out / "benchmark_adjoints_summary.csv", summary)
    plot(rows, summary, out / "benchmark_adjoints.png")
    return rows, summary


def plot(rows: list[dict], summary: list[dict], path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    markers = dict(zip(ADJOINTS, ("s", "o", "v", "D", "^"), strict=True))
    for name in ADJOINTS:
        r = [x for x in rows if x["adjoint"] == name]
        ax.semilogy([x["u0"] for x in r], [max(x["rel_error"], 1e-7) for x in r], markers[name], label=name, alpha=0.8)
    ax.set_xlabel("toss velocity u0 (m/s)")
    ax.set_ylabel("relative gradient error")
    ax.set_title("Accuracy against a converged solve")
    ax.set_ylim(1e-6, 1.0)  # room below the points for the legend
    ax.legend(fontsize=8, ncol=2, loc="lower left")
    names = [s["adjoint"] for s in summary]
    x = np.arange(len(names))
    bx.bar(x - 0.2, [s["forward_evaluations"] for s in summary], 0.4, label="forward pass")
    bx.bar(x + 0.2, [s["backward_evaluations"] for s in summary], 0.4, label="backward pass")
    for i, s in enumerate(summary):
        bx.annotate(
            f"{s['backward_s']:.2f} s", (i + 0.2, s["backward_evaluations"]), ha="center", va="bottom", fontsize=8
        )
    bx.set_ylim(0, 1.35 * max(s["backward_evaluations"] for s in summary))
    bx.set_xticks(x, [n.replace("_diffrax", "\n(Diffrax's)") for n in names])
    bx.set_ylabel("vector-field evaluations")
    bx.set_title("Cost at u0 (backward run time above the bar)")
    bx.legend(loc="upper right")
    fig.suptitle("Cube toss at Config(): gradient modes")
    common.save_figure(fig, path)


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--shots", type=int, default=17, help="toss velocities for the accuracy sweep")
    args = p.parse_args(argv)
    if args.shots < 3 or args.shots % 2 == 0:
        p.error(f"--shots={args.shots}: give an odd number, at least 3 (the middle shot is u0)")
    common.setup()
    jax.config.update("jax_enable_compilation_cache", False)  # first calls compile cold, every mode alike
    _, summary = run(args.shots, args.out)
    for s in summary:
        print(
            f"{s['adjoint']:>12}: median error {100 * s['median_rel_error']:.4f} %, max {100 * s['max_rel_error']:.4f} %, "
            f"backward evaluations {s['backward_evaluations']} (forward {s['forward_evaluations']}), "
            f"backward {s['backward_s']:.3f} s = {s['backward_over_forward']:.2f}x forward"
        )


if __name__ == "__main__":
    main()
