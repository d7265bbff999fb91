"""MPC where contact decides everything: push a box to a target, flick a ball to a distance.

    python -m experiments.contact_mpc [--quick] [--task push|flick] [--friction]

Two non-prehensile tasks of the library's scenes (``diffmjx/scenes/push.xml``, ``flick.xml``)
whose running cost sees only the object, never the actuated body:

* ``push``: a sphere pusher driven in x and y must reach a box resting on the floor 5 cm away and
  push it onto a target 18-30 cm off, at up to 25 degrees from its line (cost: the box's squared
  distance to the target in the plane);
* ``flick``: a striker on an 8 cm slide must hit a ball 5.5-6.5 cm away so that it rolls to a target
  28-45 cm off, beyond the striker's reach; its rolling friction stops it within about a horizon (cost: the ball's squared distance along x).

Both carry a 1e-3 control-effort term. Before the actuated body touches the object, the object's
cost does not depend on the controls, so a plain gradient is exactly zero and the effort term
keeps the controls at zero. Methods, each a :func:`diffmjx.mpc.closed_loop` with horizon 16
periods (0.8 s), 4 executed per plan step:

* ``gradient``: gradient MPC (Adam, 8 iterations) without contacts from distance;
* ``gradient_cfd``: the same with contacts from distance (``w_c`` = 0.3 m, backward pass only);
* ``sampling``: predictive sampling (64 brown-noise samples);
* ``hybrid_cfd``: 32 samples, then 4 gradient iterations with CFD;
* ``ilqr_cfd``: 4 iLQR iterations on :func:`diffmjx.linearize`'s period Jacobians with CFD;
* ``ilqr_state_cfd``: the same with ``planner.ilqr_regularization=state`` (``mu`` on the next
  state's value Hessian instead of on ``Q_uu``);
* ``ilqr_reuse_cfd``: ``ilqr_cfd`` with ``planner.ilqr_reuse=2`` (up to two more rounds on each
  iteration's Jacobians after an accepted one).

The counts give plan steps of similar wall time; what each took is measured and reported. The
simulation is MJX's semi-implicit Euler at 5 ms (10 steps per 50 ms period) on DiffMJX's
differentiable forward (``mjx_euler``): the same for every method, and cheap enough to run every
method from 6 random starts and targets per task on a 2-core CPU (the adaptive solver's gradient
costs 6-10x more per plan step here). Success: the object ends within 3 cm of the target.

Writes ``docs/results/contact_mpc.csv`` (one row per task, method and start: final error, success,
time per plan step, JIT time), ``contact_mpc_cost.csv`` (the executed cost per period),
``contact_mpc.png`` (distance to the target over time and success rates) and
``contact_mpc_frames.png`` (top-down and side frame strips of one start per method, drawn from the
executed states). ``--friction`` runs the same with the pusher's and striker's pairs given MuJoCo's
default friction back (the scenes' pairs are frictionless) and writes ``contact_mpc_friction*``
instead. Each finished run is saved (``~/.cache/diffmjx/stages``), so an interrupted study
resumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx import mpc, scenes
from diffmjx.config import DEFAULT_PRESET
from experiments import common

SIM = ("integrator.solver=mjx_euler", "integrator.substeps=10")
CFD = ("cfd.enabled=true", "cfd.solimp=[0.0, 0.1, 0.3, 1.0, 4.0]")
PLANNER = (
    "horizon=16",
    "execute=4",
    "learning_rate=0.1",  # of the control range [-1, 1]: 0.2 in control units
    "clip_norm=1.0",
    "noise_scale=0.3",
    "sample_batch=8",
    "keep_best=false",
)
ILQR_AS_MEASURED = (
    "ilqr_reach=[]",
    "ilqr_explore=0",
)  # the committed rows predate the rescaled steps and sampled plans
METHODS = {  # name -> (planner overrides, contacts from distance)
    "gradient": (("kind=gradient", "iterations=8"), False),
    "gradient_cfd": (("kind=gradient", "iterations=8"), True),
    "sampling": (("kind=sampling", "samples=64"), False),
    "hybrid_cfd": (("kind=hybrid", "samples=32", "iterations=4"), True),
    "ilqr_cfd": (("kind=ilqr", "iterations=4", *ILQR_AS_MEASURED), True),
    "ilqr_state_cfd": (("kind=ilqr", "iterations=4", "ilqr_regularization=state", *ILQR_AS_MEASURED), True),
    "ilqr_reuse_cfd": (("kind=ilqr", "iterations=4", "ilqr_reuse=2", *ILQR_AS_MEASURED), True),
}
EFFORT = 1e-3
SUCCESS_M = 0.03


@dataclass(frozen=True)
class Task:
    scene: str
    steps: int  # control periods executed
    axes: int  # the object's coordinates the cost compares with the target's (x, or x and y)

    def case(self, mj: mujoco.MjModel, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``(qpos, target)`` of a random start and target."""
        rng = np.random.default_rng(seed)
        qpos = mj.qpos0.copy()
        if self.scene == "push":
            angle = np.deg2rad(rng.uniform(-25.0, 25.0))
            dist = rng.uniform(0.18, 0.30)
            qpos[1] = rng.uniform(-0.02, 0.02)  # the pusher's y
            return qpos, np.array([dist * np.cos(angle), dist * np.sin(angle), 0.001])
        qpos[1] = rng.uniform(0.105, 0.115)  # the ball's x: within the striker's reach
        return qpos, np.array([rng.uniform(0.28, 0.45), 0.0, 0.001])


TASKS = {"push": Task("push", 48, 2), "flick": Task("flick", 48, 1)}


def make_cost(mj: mujoco.MjModel, task: Task):
    obj = mj.body("object").id

    def cost(d, ctrl):
        """The object's squared distance to the target (the mocap marker's position), and effort."""
        err = d.xpos[obj, : task.axes] - d.mocap_pos[0, : task.axes]
        return jnp.sum(err**2) + EFFORT * jnp.sum(ctrl**2)

    return cost


def run(task_name: str, method: str, seed: int, quick: bool, friction: bool = False) -> dict:
    """One closed loop: the executed states, costs, plan-step times and the final error.
    ``friction``: the scene's explicit pairs get MuJoCo's default friction back
    (:func:`diffmjx.scenes.geom_pair_friction`)."""
    task = TASKS[task_name]
    mj = mujoco.MjModel.from_xml_path(str(scenes.path(task.scene)))
    if friction:
        mj = scenes.geom_pair_friction(mj)
    mx = common.mjx.put_model(mj)
    overrides, cfd = METHODS[method]
    sim = diffmjx.Config().override(*SIM, *(CFD if cfd else ()))
    cfg = mpc.PlannerConfig().override("cfd=false", *PLANNER, *overrides)  # CFD is METHODS' to switch, in the sim
    planner = mpc.make_planner(cfg, sim)
    qpos, target = task.case(mj, seed)
    d0 = common.mjx.make_data(mx).replace(qpos=jnp.asarray(qpos), mocap_pos=jnp.asarray(target)[None])
    steps = 16 if quick else task.steps
    start = time.perf_counter()
    out = mpc.closed_loop(mx, d0, make_cost(mj, task), planner, steps, jax.random.key(seed), progress=False)
    obj = mj.body("object").id
    data = mujoco.MjData(mj)
    pos = []
    for q in out.qpos:
        data.qpos[:] = q
        mujoco.mj_kinematics(mj, data)
        pos.append(data.xpos[obj, : task.axes].copy())
    dist = np.linalg.norm(np.asarray(pos) - target[: task.axes], axis=1)
    return {
        "qpos": np.asarray(out.qpos),
        "target": target,
        "distance": dist,
        "cost": np.asarray(out.cost),
        "plan_time_s": np.asarray(out.plan_time_s),
        "jit_time_s": float(out.jit_time_s),
        "wall_s": time.perf_counter() - start,
    }


def summary_rows(results: dict) -> list[dict]:
    rows = []
    for (task, method, seed), r in results.items():
        rows.append(
            {
                "task": task,
                "method": method,
                "seed": seed,
                "target_x": round(float(r["target"][0]), 4),
                "target_y": round(float(r["target"][1]), 4),
                "start_distance_mm": round(1e3 * float(r["distance"][0]), 2),
                "final_distance_mm": round(1e3 * float(r["distance"][-1]), 2),
                "success": bool(r["distance"][-1] < SUCCESS_M),
                "ms_per_plan_step": round(1e3 * float(np.median(r["plan_time_s"])), 1),
                "jit_s": round(r["jit_time_s"], 1),
                "executed_cost": float(np.sum(r["cost"])),
            }
        )
    return rows


def cost_rows(results: dict, period: float) -> list[dict]:
    rows = []
    for (task, method, seed), r in results.items():
        for k, dist in enumerate(r["distance"]):
            rows.append(
                {
                    "task": task,
                    "method": method,
                    "seed": seed,
                    "time_s": round((k + 1) * period, 3),
                    "distance_mm": round(1e3 * float(dist), 3),
                }
            )
    return rows


COLOURS = {
    "gradient": "0.55",
    "gradient_cfd": "C0",
    "sampling": "C2",
    "hybrid_cfd": "C4",
    "ilqr_cfd": "C3",
    "ilqr_state_cfd": "C1",
    "ilqr_reuse_cfd": "C5",
}


def plot(results: dict, out, name: str = "contact_mpc") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(k[0] for k in results))
    methods = list(dict.fromkeys(k[1] for k in results))
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.4 * len(tasks)), squeeze=False)
    for i, task in enumerate(tasks):
        ax = axes[i, 0]
        for m in methods:
            runs = [r for k, r in results.items() if k[0] == task and k[1] == m]
            dist = 1e3 * np.median(np.stack([r["distance"] for r in runs]), axis=0)
            t = 0.05 * np.arange(1, dist.size + 1)
            ax.plot(t, dist, color=COLOURS[m], label=m, lw=1.8)
        ax.axhline(1e3 * SUCCESS_M, color="k", ls=":", lw=1)
        ax.set_xlabel("time (s)")
        ax.set_ylabel("object to target (mm), median")
        ax.set_title(f"{task}: executed trajectories ({len(runs)} starts)")
        ax.set_ylim(0, 1.4 * ax.get_ylim()[1])  # room above the curves for the legend
        ax.legend(fontsize=8, ncol=3, loc="upper center")
        ax = axes[i, 1]
        rates, times = [], []
        for m in methods:
            runs = [r for k, r in results.items() if k[0] == task and k[1] == m]
            rates.append(100 * np.mean([r["distance"][-1] < SUCCESS_M for r in runs]))
            times.append(1e3 * np.median(np.concatenate([r["plan_time_s"] for r in runs])))
        y = np.arange(len(methods))
        ax.barh(y, rates, color=[COLOURS[m] for m in methods])
        for yy, rate, ms in zip(y, rates, times):
            ax.text(rate + 2, yy, f"{rate:.0f} %, {ms:.0f} ms per plan step", va="center", fontsize=8)
        ax.set_yticks(y, methods)
        ax.invert_yaxis()
        ax.set_xlim(0, 170)  # room for the labels after the bars
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel(f"success: within {1e3 * SUCCESS_M:.0f} mm at the end (%)")
        ax.set_title(f"{task}: success rate")
    common.save_figure(fig, out / f"{name}.png")


def frames(results: dict, out, seed: int = 0, count: int = 6, name: str = "contact_mpc") -> None:
    """Frame strips drawn from the executed states (top-down for push, side view for flick)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle, Polygon

    tasks = list(dict.fromkeys(k[0] for k in results))
    methods = list(dict.fromkeys(k[1] for k in results))
    rows = [(t, m) for t in tasks for m in methods if (t, m, seed) in results]
    heights = [1.0 if t == "push" else 0.3 for t, _ in rows]  # flick's side view is a thin strip
    fig, axes = plt.subplots(
        len(rows),
        count,
        figsize=(1.9 * count, 1.5 * sum(heights) + 0.6),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for i, (task, method) in enumerate(rows):
        r = results[(task, method, seed)]
        picks = np.linspace(0, len(r["qpos"]) - 1, count).round().astype(int)
        for j, k in enumerate(picks):
            ax = axes[i, j]
            qk = r["qpos"][k]
            tx, ty = r["target"][:2]
            if task == "push":
                px, py = -0.1 + qk[0], qk[1]  # the pusher's slides from its body position
                ox, oy, qw, qz = qk[2], qk[3], qk[5], qk[8]
                yaw = 2 * np.arctan2(qz, qw)
                c, s = np.cos(yaw), np.sin(yaw)
                corners = np.array(
                    [
                        [ox + c * a - s * b, oy + s * a + c * b]
                        for a, b in ((-0.03, -0.03), (0.03, -0.03), (0.03, 0.03), (-0.03, 0.03))
                    ]
                )
                ax.add_patch(Circle((tx, ty), 0.03, color="C3", alpha=0.35))
                ax.add_patch(Polygon(corners, color="C1"))
                ax.add_patch(Circle((px, py), 0.02, color="C0"))
                ax.set_xlim(-0.15, 0.35)
                ax.set_ylim(-0.2, 0.2)
            else:
                sx, bx, bz = qk[0], qk[1], qk[3]
                ax.axhline(0.0, color="0.5", lw=1)
                ax.add_patch(Circle((tx, 0.001), 0.03, color="C3", alpha=0.35))
                ax.add_patch(Circle((bx, bz), 0.03, color="C1"))
                ax.add_patch(Circle((sx, 0.03), 0.02, color="C0"))
                ax.set_xlim(-0.08, 0.62)
                ax.set_ylim(-0.02, 0.08)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0 and task == "push":
                ax.set_ylabel(f"{task}\n{method}", fontsize=8)
            elif j == 0:  # a thin strip: the label on one line, beside it
                ax.set_ylabel(f"{task} {method}", fontsize=8, rotation=0, ha="right", va="center")
            if i == 0:
                ax.set_title(f"t = {0.05 * (k + 1):.2f} s", fontsize=8)
    fig.suptitle(f"start {seed}: pusher / striker blue, object orange, target red", fontsize=9)
    common.save_figure(fig, out / f"{name}_frames.png")


def main(argv=None) -> None:
    _, args = common.cli(
        __doc__,
        DEFAULT_PRESET,
        argv,
        extra=(
            ("--task", {"choices": [*TASKS, "all"], "default": "all"}),
            ("--starts", {"type": int, "default": 6, "help": "random starts and targets per task"}),
            ("--methods", {"nargs": "+", "choices": list(METHODS), "default": list(METHODS)}),
            (
                "--friction",
                {
                    "action": "store_true",
                    "help": "the pusher's and striker's contacts with MuJoCo's default friction "
                    "(files contact_mpc_friction*)",
                },
            ),
        ),
    )
    tasks = list(TASKS) if args.task == "all" else [args.task]
    starts = 2 if args.quick else args.starts
    jobs = [(t, m, s) for t in tasks for m in args.methods for s in range(starts)]
    results = {}
    for t, m, s in tqdm(jobs, desc="closed loops"):
        scene = scenes.path(TASKS[t].scene).read_text()  # a changed scene or start is another run
        qpos, target = TASKS[t].case(mujoco.MjModel.from_xml_string(scene), s)
        start = (tuple(np.round(qpos, 12)), tuple(np.round(target, 12)))
        key = (t, m, s, args.quick, SIM, CFD, PLANNER, METHODS[m], EFFORT, scene, start)
        key = (*key, "pair friction restored") if args.friction else key
        results[(t, m, s)] = common.stage(
            "contact_mpc", key, lambda t=t, m=m, s=s: run(t, m, s, args.quick, args.friction), args.fresh
        )
    args.out.mkdir(parents=True, exist_ok=True)
    group = ("task", "method", "seed")
    prefix = "contact_mpc_friction" if args.friction else "contact_mpc"
    for name, rows, cols in (
        (f"{prefix}.csv", summary_rows(results), group),
        (f"{prefix}_cost.csv", cost_rows(results, 0.05), (*group, "time_s")),
    ):
        path = args.out / name
        # rows grouped by task (a method added later joins its task's rows, not the file's end)
        common.write_csv(path, common.merge_rows(path, rows, cols, order=("task",)) if path.exists() else rows)
    plot(results, args.out, prefix)
    frames(results, args.out, name=prefix)
    for row in summary_rows(results):
        print(row)


if __name__ == "__main__":
    main()
