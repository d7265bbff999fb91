"""Model-predictive control of MyoSuite's 39-muscle hand: gradient MPC (with and without contacts from
distance), predictive sampling and the hybrid, on the baoding ball swap (paper Sec. 5.2, Fig. 12).

    python -m experiments.myo_mpc [--preset quick|paper] [--set planner.KEY=VALUE ...] [--methods ...]
                                  [--plan-steps N]

Task (a): swap the two balls in the MyoHand. Cost of a state: the distance of each ball to its
target, the other ball's starting position, fixed in the frame of the third metacarpal (the palm).
Model settings of the paper's App. E.3: geom solref (0.02, 1), solimp (0, 0.95, 0.001, 0.5, 2)
(with contacts from distance (0.1, 0.95, 0.001, 0.5, 2) and CFD solimp (0, 0.1, 1, 1, 4)),
timestep 0.0025 s, Newton with 4 iterations and 16 line-search iterations, MJX's Euler step per
control period. Every method runs the same number of plan steps from the same state.

Writes docs/results/myo_mpc_baoding.csv (cost of every executed state per method),
myo_mpc_baoding_summary.csv (final and mean cost, wall time per plan step, JIT time) and
myo_mpc_baoding.png (cost over time). The model comes from the installed MyoSuite package;
nothing is downloaded.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import diffmjx
from diffmjx import mpc
from experiments import common

RUNS = {  # preset -> plan steps and the planner preset
    "quick": {"plan_steps": 6, "planner": "quick", "overrides": ("horizon=16", "execute=4", "iterations=6")},
    "paper": {"plan_steps": 32, "planner": "paper", "overrides": ()},
}
METHODS = {  # name -> (planner overrides, contacts from distance)
    "gradient": (("kind=gradient",), False),
    "gradient + CFD": (("kind=gradient",), True),
    "sampling 64": (("kind=sampling", "samples=64"), False),
    "sampling 256": (("kind=sampling", "samples=256"), False),
    "hybrid + CFD": (("kind=hybrid", "samples=64"), True),
}
SOLIMP = (0.0, 0.95, 0.001, 0.5, 2.0)
SOLIMP_CFD = (0.1, 0.95, 0.001, 0.5, 2.0)
PALM = "thirdmc"


def baoding(cfd: bool):
    """MyoHand baoding model with App. E.3's settings, its start state and the swap cost."""
    import mujoco
    from myosuite.utils import gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mj = gym.make("myoChallengeBaodingP1-v1").unwrapped.mj_model
    mj.opt.timestep = 0.0025
    mj.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    mj.opt.iterations, mj.opt.ls_iterations = 4, 16
    mj.geom_solref[:] = (0.02, 1.0)
    mj.geom_solimp[:] = SOLIMP_CFD if cfd else SOLIMP
    mx = common.mjx.put_model(mj)
    d0 = common.mjx.make_data(mx).replace(qpos=jnp.asarray(mj.qpos0))

    balls = _free_joints(mj)  # ball1, ball2: qpos addresses of their free joints
    palm = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, PALM)
    dc = mujoco.MjData(mj)
    mujoco.mj_forward(mj, dc)
    start = [dc.qpos[a : a + 3].copy() for a in balls]
    rot, origin = dc.xmat[palm].reshape(3, 3), dc.xpos[palm]
    targets = jnp.asarray([rot.T @ (start[1] - origin), rot.T @ (start[0] - origin)])  # swapped, palm frame

    def cost(d, ctrl):
        r, o = d.xmat[palm], d.xpos[palm]
        goal = o + targets @ r.T
        pos = jnp.stack([d.qpos[a : a + 3] for a in balls])
        return jnp.sum(jnp.sqrt(jnp.sum((pos - goal) ** 2, axis=1) + 1e-12))

    return mj, mx, d0, cost


def _read(path: Path) -> list[dict]:
    import csv

    if not path.exists():
        return []
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("time_s", "cost"):
            if k in r:
                r[k] = float(r[k])
    return rows


def _free_joints(mj):
    return [int(mj.jnt_qposadr[j]) for j in range(mj.njnt) if mj.jnt_type[j] == 0]


def run(preset: str, methods, overrides, out: Path, seed: int = 0, plan_steps: int | None = None):
    spec = dict(RUNS[preset])
    if plan_steps is not None:
        spec["plan_steps"] = plan_steps
    # keep the other methods' results of an earlier run, so methods can be run one at a time
    rows = [r for r in _read(out / "myo_mpc_baoding.csv") if r["method"] not in methods]
    summary = [r for r in _read(out / "myo_mpc_baoding_summary.csv") if r["method"] not in methods]
    for name in methods:
        extra, cfd = METHODS[name]
        mj, mx, d0, cost = baoding(cfd)
        sim = diffmjx.Config().override("integrator.solver=mjx_euler", "collision.smooth=true", *common.PINNED)
        if cfd:
            sim = sim.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.1, 1.0, 1.0, 4.0]")
        cfg = mpc.PlannerConfig.load(spec["planner"], [*spec["overrides"], *extra, *overrides])
        steps = spec["plan_steps"] * cfg.execute
        t = time.perf_counter()
        res = mpc.closed_loop(mx, d0, cost, mpc.make_planner(cfg, sim), steps, jax.random.PRNGKey(seed))
        wall = time.perf_counter() - t
        c0 = float(jax.jit(lambda d: cost(diffmjx.forward(mx, d, sim), d.ctrl))(d0))
        for k, c in enumerate(np.r_[c0, res.cost]):
            rows.append({"method": name, "step": k, "time_s": k * mj.opt.timestep, "cost": float(c)})
        summary.append({
            "method": name, "horizon": cfg.horizon, "execute": cfg.execute, "iterations": cfg.iterations,
            "samples": cfg.samples if cfg.kind != "gradient" else 0, "plan_steps": spec["plan_steps"],
            "start_cost": c0, "final_cost": float(res.cost[-1]), "mean_cost": float(res.cost.mean()),
            "plan_step_s": float(np.median(res.plan_time_s)), "jit_s": res.jit_time_s, "wall_s": wall,
        })  # fmt: skip
        print(f"{name:16s} cost {c0:.4f} -> {res.cost[-1]:.4f}  plan step {np.median(res.plan_time_s):.1f} s  "
              f"JIT {res.jit_time_s:.0f} s")  # fmt: skip
        common.write_csv(out / "myo_mpc_baoding.csv", rows)
        common.write_csv(out / "myo_mpc_baoding_summary.csv", summary)
    plot(rows, out / "myo_mpc_baoding.png")


def check_horizon(horizon: int, out: Path):
    """Gradient of the swap cost through ``horizon`` periods from rest, with and without contacts
    from distance: is it finite, and how large? Writes myo_mpc_horizon.csv."""
    rows = []
    for cfd in (False, True):
        mj, mx, d0, cost = baoding(cfd)
        sim = diffmjx.Config().override("integrator.solver=mjx_euler", "collision.smooth=true", *common.PINNED)
        if cfd:
            sim = sim.override("cfd.enabled=true", "cfd.solimp=[0.0, 0.1, 1.0, 1.0, 4.0]")
        u = jnp.full((horizon, mx.nu), 0.05)
        fn = jax.jit(jax.value_and_grad(lambda u: mpc.plan_cost(mx, d0, u, cost, sim)[0]))
        t = time.perf_counter()
        fn = fn.lower(u).compile()
        jit_s = time.perf_counter() - t
        t = time.perf_counter()
        value, g = jax.block_until_ready(fn(u))
        run_s = time.perf_counter() - t
        g = np.asarray(g)
        rows.append({"cfd": cfd, "horizon": horizon, "cost": float(value), "finite": int(np.isfinite(g).sum()),
                     "entries": g.size, "grad_norm": float(np.linalg.norm(g[np.isfinite(g)])), "jit_s": jit_s,
                     "run_s": run_s})  # fmt: skip
        print(rows[-1])
        common.write_csv(out / "myo_mpc_horizon.csv", rows)


def plot(rows, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["method"] for r in rows):
        t = [r["time_s"] for r in rows if r["method"] == name]
        c = [r["cost"] for r in rows if r["method"] == name]
        ax.plot(t, c, label=name, ls="--" if name.startswith("sampling") else "-")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("cost: ball distances to targets (m)")
    ax.set_title("MyoHand baoding swap, closed loop")
    ax.legend()
    common.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(RUNS), default="quick")
    p.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=list(METHODS))
    p.add_argument("--set", action="append", default=[], metavar="planner.KEY=VALUE", help="planner overrides")
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plan-steps", type=int, default=None, help="plan steps per method (default: the preset's)")
    p.add_argument("--check-horizon", type=int, default=None, metavar="H",
                   help="only check the gradient through H periods (finite? how long?) and exit")
    args = p.parse_args(argv)
    common.setup()
    if args.check_horizon:
        check_horizon(args.check_horizon, args.out)
        return
    run(args.preset, args.methods, args.set, args.out, args.seed, args.plan_steps)


if __name__ == "__main__":
    main()
