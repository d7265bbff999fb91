"""Per-period Jacobians: diffmjx.linearize against jacfwd of MJX's step and MuJoCo's mjd_transitionFD.

    python -m experiments.linearize_benchmark [--quick] [--random N]

Scene ``pushed_box`` (a box on a free joint, pushed along x and lifted by two motors, over a plane;
control period 20 ms), one period from each of four starts: free flight, sliding contact, a
touchdown inside the period and a lift-off from rest. The truth is the central difference of the
converged period (DiffMJX, rtol = atol = 1e-12, steps 1e-7 on the state and 1e-5 on the controls);
every method's ``A = dx'/dx`` and ``B = dx'/du`` (tangent coordinates, mjd_transitionFD's layout)
is compared with it as a relative Frobenius error. Methods:

* ``diffmjx``: :func:`diffmjx.linearize` at the default tolerances and at 1e-8 (forward mode,
  kink control), MuJoCo's impedance floor off (touchdown continuous, docs/solver.md);
* ``mjx_jacfwd``: ``jax.jacfwd`` of stock MJX's step (semi-implicit Euler, 10 steps of 2 ms per
  period), as a user of plain MJX gets it;
* ``mujoco_fd``: MuJoCo's ``mjd_transitionFD`` on the C engine (10 steps of 2 ms, and 100 of
  0.2 ms, the period's Jacobian the product of the steps'), what MuJoCo MPC's iLQG uses.

The fixed-step Jacobians are exact for their discrete system; what the table shows is how far that
system's Jacobian is from the physics' (the converged period's), and how it closes as the step
shrinks.

``--random N`` instead times DiffMJX's default ``linearize`` (and its forward solves) from N seeded
random starts in contact, half touchdowns and half sliding (heights, velocities, spins and controls
drawn), against the same reference, with the steps (accepted + rejected) of the solve ``linearize``
differentiates; it writes ``docs/results/linearize_random.csv``: the distribution behind any change
of the solve's step control.

Times are per period on this CPU after compilation (median of ``REPEATS`` = 21 calls; the random
starts' CSVs of Dec 6, before and after kink control's bracket, took 5), JIT time separately, and beside
each the forward period alone (``forward_ms``: the same simulation without Jacobians, with the
method's config as given; for the C engine its steps without ``mjd_transitionFD``;
``forward_same_solve_ms``: DiffMJX's forward with the config ``linearize`` differentiates, whose
forward-mode gradient may step differently) and the ratio ``over_forward`` = Jacobian period /
forward period. Writes ``docs/results/linearize.csv`` and ``linearize.png``.
"""

from __future__ import annotations

import copy
import time

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx import scenes
from diffmjx.jacobians import forward_config, period_map, tangent_offset
from diffmjx.physics import manifold
from experiments import common

_QUAT = np.array([0.96, 0.2, -0.15, 0.1]) / np.linalg.norm([0.96, 0.2, -0.15, 0.1])
STARTS = {  # qpos, qvel, ctrl
    "flight": (np.r_[0.0, 0.0, 0.6, _QUAT], np.array([0.3, -0.2, 0.5, 2.0, -1.0, 3.0]), np.array([1.5, 2.0])),
    "sliding": (np.r_[0.0, 0.0, 0.0497, 1, 0, 0, 0], np.array([0.6, 0.1, 0.0, 0.0, 0.0, 0.3]), np.array([1.5, 2.0])),
    "touchdown": (np.r_[0.0, 0.0, 0.062, 1, 0, 0, 0], np.array([0.2, 0.0, -1.0, 0.0, 0.0, 0.0]), np.array([1.5, 2.0])),
    "lift-off": (np.r_[0.0, 0.0, 0.0497, 1, 0, 0, 0], np.zeros(6), np.array([0.0, 8.0])),  # inside ctrlrange
}
EPS_STATE, EPS_CTRL = 1e-7, 1e-5
SUBSTEPS = 10  # steps of MJX and the C engine per 20 ms period
REPEATS = 21  # timed calls per figure (sub-millisecond periods scatter by 2x over 5)


def _data(mx, name):
    q, v, _ = STARTS[name]
    return common.mjx.make_data(mx).replace(qpos=jnp.asarray(q), qvel=jnp.asarray(v))


def reference(mj, mx, name):
    """Central differences of the converged period: (A, B)."""
    q, v, u = STARTS[name]
    tight = diffmjx.Config().override("integrator.rtol=1e-12", "integrator.atol=1e-12", "solver.impedance_floor=0")
    f = period_map(mx, _data(mx, name), tight)
    layout = manifold.JointLayout.from_model(mx)
    n, nu = diffmjx.tangent_size(mx), mx.nu
    eps = np.r_[np.full(n, EPS_STATE), np.full(nu, EPS_CTRL)]
    pert = np.concatenate([np.diag(eps), -np.diag(eps)])
    state = (jnp.asarray(q), jnp.asarray(v), jnp.zeros(0), jnp.asarray(0.0))
    dt0 = jnp.asarray(mj.opt.timestep)

    @jax.jit
    def cols(pert):
        ref = f(jnp.zeros(n), jnp.asarray(u), state, dt0)
        ends = jax.vmap(lambda p: f(p[:n], u + p[n:], state, dt0))(pert)
        return jax.vmap(lambda e: tangent_offset(layout, ref, e))(ends)

    off = np.asarray(cols(pert))
    jac = ((off[: n + nu] - off[n + nu :]) / (2 * eps[:, None])).T
    return jac[:, :n], jac[:, n:]


def _timed_jit(fn, *args):
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t
    common.median_time(fn, *args, repeats=REPEATS)  # untimed: after a cold compile the first calls ran slower
    run = common.median_time(fn, *args, repeats=REPEATS)
    return out, run, max(first - run, 0.0)


def diffmjx_jacobians(mx, name, cfg):
    q, v, u = STARTS[name]
    fn = jax.jit(lambda q, v: diffmjx.linearize(mx, _data(mx, name).replace(qpos=q, qvel=v), jnp.asarray(u)[None], cfg))
    lin, run, jit = _timed_jit(fn, jnp.asarray(q), jnp.asarray(v))
    return np.asarray(lin.A[0]), np.asarray(lin.B[0]), run, jit, *forward_times(mx, name, cfg)


def forward_times(mx, name, cfg):
    """Seconds per period of the forward simulation alone (median of ``REPEATS`` after compilation): with
    ``cfg`` as given (what a user simulates), and with the config :func:`diffmjx.linearize`
    differentiates (:func:`diffmjx.jacobians.forward_config`: the ``forward`` gradient mode, whose
    forward solve may take other steps)."""
    q, v, u = STARTS[name]
    out = []
    for c in dict.fromkeys((cfg, forward_config(cfg))):  # one program where the two are the same
        fn = jax.jit(
            lambda q, v, c=c: (
                diffmjx.rollout(mx, _data(mx, name).replace(qpos=q, qvel=v), jnp.asarray(u)[None], c)[0].qvel
            )
        )
        out.append(_timed_jit(fn, jnp.asarray(q), jnp.asarray(v))[1])
    return out[0], out[-1]


def mujoco_fd(mj, name, substeps=SUBSTEPS):
    """mjd_transitionFD over ``substeps`` C-engine steps; the period's Jacobian is their product."""
    q, v, u = STARTS[name]
    m = copy.deepcopy(mj)
    m.opt.timestep = mj.opt.timestep / substeps
    d = mujoco.MjData(m)
    n, nu = 2 * m.nv + m.na, m.nu

    def run():
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        A, B = np.eye(n), np.zeros((n, nu))
        a, b = np.zeros((n, n)), np.zeros((n, nu))
        for _ in range(substeps):
            mujoco.mjd_transitionFD(m, d, 1e-6, True, a, b, None, None)
            A, B = a @ A, a @ B + b
            mujoco.mj_step(m, d)
        return A, B

    def forward():  # the same steps without the Jacobians
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:], d.ctrl[:] = q, v, u
        for _ in range(substeps):
            mujoco.mj_step(m, d)

    A, B = run()
    fwd = common.median_time(forward, repeats=REPEATS)
    return A, B, common.median_time(run, repeats=REPEATS), 0.0, fwd, fwd


def random_starts(n: int, seed: int = 1) -> dict:
    """``n`` seeded starts, alternating a drop (the box 2-20 mm above resting height, falling at
    0.5-1.5 m/s, drifting and spinning: most touch down within the period, a slow high one may not)
    and sliding on its face (0-0.8 m/s each way, spinning about z); both motors' controls drawn in
    [0, 3]."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        u = rng.uniform(0.0, 3.0, 2)
        if i % 2 == 0:
            q = np.r_[0.0, 0.0, rng.uniform(0.052, 0.07), 1, 0, 0, 0]
            v = np.r_[rng.uniform(-0.3, 0.3, 2), -rng.uniform(0.5, 1.5), rng.normal(0.0, 0.5, 3)]
            out[f"touchdown {i // 2}"] = (q, v, u)
        else:
            q = np.r_[0.0, 0.0, 0.0497, 1, 0, 0, 0]
            v = np.r_[rng.uniform(-0.8, 0.8, 2), 0.0, 0.0, 0.0, rng.uniform(-0.5, 0.5)]
            out[f"sliding {i // 2}"] = (q, v, u)
    return out


def solve_steps(mx, cfg):
    """``name -> int``: the steps (accepted + rejected) of the period solve :func:`diffmjx.linearize`
    differentiates from start ``name``; one program for every start."""
    c = forward_config(cfg)
    d0 = common.mjx.make_data(mx)
    steps = jax.jit(
        lambda q, v, u: (lambda s: s.accepted[0] + s.rejected[0])(
            diffmjx.rollout(mx, d0.replace(qpos=q, qvel=v), u[None], c)[1].stats
        )
    )
    return lambda name: int(steps(*(jnp.asarray(x) for x in STARTS[name])))


def random_study(mj, mx, base, n: int, out) -> None:
    """``--random N``: DiffMJX's default ``linearize`` from N random starts in contact."""
    starts = random_starts(n)
    STARTS.update(starts)
    steps = solve_steps(mx, base)
    rows = []
    for name in tqdm(starts, desc="random starts"):
        A_ref, B_ref = reference(mj, mx, name)
        A, B, run, jit, fwd, fwd_same = diffmjx_jacobians(mx, name, base)
        rows.append(
            {
                "start": name,
                "kind": name.split()[0],
                "error_A": float(np.linalg.norm(A - A_ref) / np.linalg.norm(A_ref)),
                "error_B": float(np.linalg.norm(B - B_ref) / np.linalg.norm(B_ref)),
                "ms_per_period": 1e3 * run,
                "jit_s": jit,
                "forward_ms": 1e3 * fwd,
                "forward_same_solve_ms": 1e3 * fwd_same,
                "over_forward": run / fwd,
                "steps": steps(name),
            }
        )
        r = rows[-1]
        print(f"{name:12s} A {r['error_A']:.2e}  B {r['error_B']:.2e}  {r['ms_per_period']:7.2f} ms "
              f"({r['over_forward']:.1f}x forward)  steps {r['steps']}", flush=True)  # fmt: skip
        common.write_csv(out / "linearize_random.csv", rows)  # every start kept if the run stops
    print(f"wrote {out / 'linearize_random.csv'}")


def main(argv=None) -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--random", type=int, default=0, metavar="N", help="N random starts in contact instead")
    args = p.parse_args(argv)
    common.setup()
    mj = mujoco.MjModel.from_xml_path(str(scenes.path("pushed_box")))
    mx = common.mjx.put_model(mj)
    base = diffmjx.Config().override("solver.impedance_floor=0")
    if args.random:
        return random_study(mj, mx, base, args.random, args.out)
    methods = {
        "diffmjx (default tolerances)": lambda name: diffmjx_jacobians(mx, name, base),
        "diffmjx (rtol 1e-8)": lambda name: diffmjx_jacobians(
            mx, name, base.override("integrator.rtol=1e-8", "integrator.atol=1e-8")
        ),
        "mjx_jacfwd (MJX Euler, 2 ms)": lambda name: diffmjx_jacobians(
            mx, name, diffmjx.Config().override("integrator.solver=mjx_euler", f"integrator.substeps={SUBSTEPS}")
        ),
        "mujoco_fd (C engine, 2 ms)": lambda name: mujoco_fd(mj, name),
        "mujoco_fd (C engine, 0.2 ms)": lambda name: mujoco_fd(mj, name, 10 * SUBSTEPS),
    }
    starts = list(STARTS)[:2] if args.quick else list(STARTS)
    rows = []
    for name in tqdm(starts, desc="regimes"):
        A_ref, B_ref = reference(mj, mx, name)
        for method, fn in methods.items():
            A, B, run, jit, fwd, fwd_same = fn(name)
            finite = bool(np.all(np.isfinite(A)) and np.all(np.isfinite(B)))
            err = lambda x, r, ok=finite: float(np.linalg.norm(x - r) / np.linalg.norm(r)) if ok else float("nan")
            rows.append(
                {
                    "regime": name,
                    "method": method,
                    "error_A": err(A, A_ref),
                    "error_B": err(B, B_ref),
                    "finite": finite,
                    "ms_per_period": 1e3 * run,
                    "jit_s": jit,
                    "forward_ms": 1e3 * fwd,
                    "forward_same_solve_ms": 1e3 * fwd_same,
                    "over_forward": run / fwd,
                }
            )
            print(f"{name:10s} {method:30s} A {rows[-1]['error_A']:.2e}  B {rows[-1]['error_B']:.2e}  "
                  f"finite {finite}  {1e3 * run:8.2f} ms ({run / fwd:.1f}x forward)  jit {jit:5.1f} s", flush=True)  # fmt: skip
    out = args.out / "linearize.csv"
    common.write_csv(out, rows)
    _plot(rows, args.out / "linearize.png")
    print(f"wrote {out}")


def _plot(rows, path):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    methods = list(dict.fromkeys(r["method"] for r in rows))
    regimes = list(dict.fromkeys(r["regime"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    marks = "osD^v"
    for k, method in enumerate(methods):
        sel = [r for r in rows if r["method"] == method]
        x = np.arange(len(regimes)) + (k - (len(methods) - 1) / 2) * 0.12
        for ax, key in zip(axes[:2], ("error_A", "error_B"), strict=True):
            y = [float(r[key]) if r["finite"] else np.nan for r in sel]
            ax.scatter(x[: len(y)], y, marker=marks[k % 5], label=method)
            bad = [i for i, r in enumerate(sel) if not r["finite"]]
            for i in bad:
                ax.annotate("NaN", (x[i], 1.0), ha="center", fontsize=8, color=f"C{k}")
        axes[2].scatter([float(r["ms_per_period"]) for r in sel][:1], [k], marker=marks[k % 5])
    for ax, title in zip(axes[:2], ("A = dx'/dx", "B = dx'/du"), strict=True):
        ax.set_yscale("log")
        ax.set_xticks(range(len(regimes)), regimes)
        ax.set_ylabel("relative error vs converged central differences")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(methods), fontsize=8, frameon=False)
    times = [np.median([float(r["ms_per_period"]) for r in rows if r["method"] == mth]) for mth in methods]
    axes[2].cla()
    axes[2].barh(range(len(methods)), times, color=[f"C{k}" for k in range(len(methods))])
    axes[2].set_yticks(range(len(methods)), [m.replace(" (", "\n(") for m in methods], fontsize=7)
    axes[2].set_xscale("log")
    axes[2].xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlapped
    axes[2].set_xlabel("ms per period (median over regimes, after JIT)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))  # room for the legend below the panels
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
