"""Planners on a suite of tasks nobody tuned them for, executed on MuJoCo's C engine at equal time.

    python -m experiments.planner_suite [--quick] [--tasks ...] [--planners ...] [--starts N]
        [--first-seed S] [--planner-set KNOB=VALUE ...] [--rerun PLANNER ...]

Nine tasks: eight of the library's ``suite_*`` scenes (``diffmjx/scenes/``), written from the
public descriptions of the classic benchmarks, and the contact study's ``flick`` with the striker's
friction restored. Contacts carry MuJoCo's default friction. Each task has random starts (and
targets), a running cost of the task's state plus ``1e-3 |u|^2``, a horizon, and a success rule
on the executed end state:

========================  ===========================================================================
``pendulum``              swing a torque-limited pole up from hanging and hold it (within 0.3 rad)
``cartpole``              swing a pole on a cart up and hold it, cart near the origin
``double_cartpole``       keep two chained poles up while the cart moves to a target (within 0.1 m)
``reacher``               a two-link arm's tip to a target (within 2 cm)
``block_push``            push a T-shaped block to a target position and yaw (3 cm, 0.3 rad)
``box_tip``               push a tall box over a ledge so it lies on its side (within 0.2 rad)
``flick``                 strike a ball with a frictional striker so it rolls to a target (3 cm)
``finger_turn``           a two-link finger turns a spinner to a target angle (end within 2.5 cm)
``hopper``                a one-legged hopper travels to a target (within 10 cm, standing: torso
                          pitched under 0.5 rad and less than 10 cm below its start)
========================  ===========================================================================

Every planner plans on the MJX model (DiffMJX's Euler, 10 steps per 50 ms control period, MJX's
capsule-capsule contacts and the blended capsule-box rule: ``SIM``) and
the executed controls run on MuJoCo's C engine at 1 ms (:func:`diffmjx.mpc.closed_loop` with a
``mujoco.MjModel`` plant): the "real system". Planners, each with :class:`diffmjx.mpc.PlannerConfig`'s
defaults except its kind, the task's horizon, ``execute=4`` and the time budget:

* ``sampling``: predictive sampling in batches of 8 candidates (the CPU setting of docs/mpc.md),
  batch after batch until the budget is spent (:class:`diffmjx.mpc.SamplingMethod` under
  ``planner.time_budget``);
* ``gradient``: Adam iterations within the budget, no contacts from distance;
* ``gradient_cfd``: the same with contacts from distance (``cfd.enabled=true``, its defaults);
* ``ilqr_cfd``: iLQR iterations within the budget, with contacts from distance (and its default
  ``ilqr_explore`` plans sampled around each iteration's result);
* ``hybrid_cfd``: 32 samples, then Adam iterations within the budget, with contacts from distance.

Equal time: each task's budget per plan step (:func:`calibrate`) is the longest of sampling's plan
step with 64 samples and every iterative planner's plan step with one iteration; every planner
iterates until the budget is spent (``planner.time_budget``; sampling's iterations are further
batches of 8 candidates). The measured times and their ratio to the budget are reported.

Writes ``docs/results/planner_suite.csv`` (one row per task, planner and start: success, final
error (and its score: the largest error in units of its tolerance, a success below 1), executed cost, time per plan step and its ratio to the budget, iterations, JIT time),
``planner_suite_summary.csv`` (per task and planner) and ``planner_suite.png`` (success per task
and planner). Each finished closed loop is saved (``~/.cache/diffmjx/stages``), so an interrupted
run resumes (``--rerun`` runs the named planners' loops again, at the saved budgets); the success
rules are applied to the saved end states each time, so a changed rule needs no rerun; sampling
runs first on each task, since its time sets the budget. ``--planner-set`` overrides a knob for
every planner (:mod:`experiments.planner_defaults` sweeps Adam's learning rate with it).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
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

# the planning model: DiffMJX's Euler, MJX's capsule-capsule contacts (one per pair) and the blended
# capsule-box rule, with which the committed results were planned; the defaults since (the C engine's
# contacts: collision.capsule_capsule=paired, capsule_box=spheres) change finger_turn's planning
# model (capsules) and the hopper's shin on its torso: a rerun with them is open
SIM = (
    "integrator.solver=mjx_euler",
    "integrator.substeps=10",
    "collision.capsule_capsule=mjx",
    "collision.capsule_box=blended",
)
SAMPLE_BATCH = "sample_batch=8"  # on a CPU, batches of 8 (docs/mpc.md): every planner's budget follows sampling's time
CFD = ("cfd.enabled=true",)
PLANT_STEP = 0.001  # the C engine's timestep, s
EXECUTE = 4
EFFORT = 1e-3
PLANNERS = {  # name -> (planner overrides, contacts from distance, runs within the budget)
    "sampling": (("kind=sampling", "samples=8", "iterations=1000"), False, True),
    "gradient": (("kind=gradient", "iterations=1000"), False, True),
    "gradient_cfd": (("kind=gradient", "iterations=1000"), True, True),
    "ilqr_cfd": (("kind=ilqr", "iterations=100"), True, True),
    "hybrid_cfd": (("kind=hybrid", "samples=32", "iterations=1000"), True, True),
}


@dataclass(frozen=True)
class Task:
    """A suite task: scene, horizon and executed periods, a random start, the cost and success."""

    scene: str
    horizon: int
    steps: int
    start: Callable  # (mj, rng) -> (qpos, qvel, mocap_pos, mocap_quat)
    cost: Callable  # mj -> cost(d, ctrl)
    error: Callable  # (mj, data) -> dict of the end state's errors (C engine MjData after the loop)
    tolerance: dict  # error name -> largest value of a success
    revision: int = 0  # raised when the cost changes, so saved closed loops of the old one are not reused

    def score(self, errors: dict) -> float:
        """The largest error in units of its tolerance: below 1 is a success."""
        return max(errors[k] / v for k, v in self.tolerance.items())


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def _effort(ctrl):
    return EFFORT * jnp.sum(ctrl**2)


def _pole_cost(hinges, cart_weight=0.0, cart_target=False):
    def make(mj):
        def cost(d, ctrl):
            angle = jnp.cumsum(d.qpos[jnp.asarray(hinges)])  # each pole's absolute angle, 0 up
            c = jnp.sum(1.0 - jnp.cos(angle))
            if cart_weight:
                target = d.mocap_pos[0, 0] if cart_target else 0.0
                c = c + cart_weight * (d.qpos[0] - target) ** 2
            return c + _effort(ctrl)

        return cost

    return make


def _pole_error(hinges, cart=False, cart_target=False):
    def error(mj, data):
        angle = np.cumsum(data.qpos[list(hinges)])
        out = {"angle_rad": float(np.max(np.abs(_wrap(angle))))}
        if cart:
            out["cart_m"] = float(abs(data.qpos[0] - (data.mocap_pos[0, 0] if cart_target else 0.0)))
        return out

    return error


def _pendulum_start(mj, rng):
    qpos = np.array([np.pi + rng.uniform(-0.3, 0.3)])
    return qpos, np.array([rng.uniform(-0.5, 0.5)]), np.zeros((0, 3)), None


def _cartpole_start(mj, rng):
    return np.array([rng.uniform(-0.2, 0.2), np.pi + rng.uniform(-0.3, 0.3)]), np.zeros(2), np.zeros((0, 3)), None


def _double_start(mj, rng):
    qpos = np.array([0.0, rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1)])
    return qpos, np.zeros(3), np.array([[rng.uniform(-0.5, 0.5), 0.0, 0.9]]), None


def _reacher_start(mj, rng):
    qpos = np.array([rng.uniform(-np.pi, np.pi), rng.uniform(-2.0, 2.0)])
    r, a = rng.uniform(0.08, 0.22), rng.uniform(-np.pi, np.pi)
    return qpos, np.zeros(2), np.array([[r * np.cos(a), r * np.sin(a), 0.01]]), None


def _reacher_cost(mj):
    tip = mj.site("tip").id

    def cost(d, ctrl):
        return jnp.sum(((d.site_xpos[tip, :2] - d.mocap_pos[0, :2]) / 0.1) ** 2) + _effort(ctrl)

    return cost


def _reacher_error(mj, data):
    return {"distance_m": float(np.linalg.norm(data.site_xpos[mj.site("tip").id, :2] - data.mocap_pos[0, :2]))}


def _yaw(quat):
    w, z = quat[0], quat[3]
    return 2.0 * jnp.arctan2(z, w) if isinstance(quat, jax.Array) else 2.0 * np.arctan2(z, w)


def _block_start(mj, rng):
    qpos = mj.qpos0.copy()
    qpos[1] = rng.uniform(-0.03, 0.03)  # the pusher's y
    r, a, yaw = rng.uniform(0.1, 0.2), rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5)
    quat = np.array([[np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]])
    return qpos, np.zeros(mj.nv), np.array([[r * np.cos(a), r * np.sin(a), 0.001]]), quat


def _block_cost(mj):
    block = mj.body("block").id

    def cost(d, ctrl):
        pos = jnp.sum(((d.xpos[block, :2] - d.mocap_pos[0, :2]) / 0.1) ** 2)
        turn = 1.0 - jnp.cos(_yaw(d.xquat[block]) - _yaw(d.mocap_quat[0]))
        return pos + turn + _effort(ctrl)

    return cost


def _block_error(mj, data):
    block = mj.body("block").id
    return {
        "distance_m": float(np.linalg.norm(data.xpos[block, :2] - data.mocap_pos[0, :2])),
        "yaw_rad": float(abs(_wrap(_yaw(data.xquat[block]) - _yaw(data.mocap_quat[0])))),
    }


def _tip_start(mj, rng):
    qpos = mj.qpos0.copy()
    qpos[0] = rng.uniform(-0.05, 0.03)  # the pusher: 2-10 cm from the box
    return qpos, np.zeros(mj.nv), np.zeros((0, 3)), None


def _tilt(xmat):  # the box's long axis from vertical, towards +x (pi/2: on its side)
    return jnp.arctan2(xmat[2], xmat[8]) if isinstance(xmat, jax.Array) else np.arctan2(xmat[2], xmat[8])


def _tip_cost(mj):
    box = mj.body("box").id

    def cost(d, ctrl):
        return (_tilt(d.xmat[box].reshape(-1)) - np.pi / 2) ** 2 + _effort(ctrl)

    return cost


def _tip_error(mj, data):
    return {"tilt_rad": float(abs(_tilt(data.xmat[mj.body("box").id]) - np.pi / 2))}


def _flick_start(mj, rng):
    qpos = mj.qpos0.copy()
    qpos[1] = rng.uniform(0.105, 0.115)  # the ball's x: within the striker's reach
    return qpos, np.zeros(mj.nv), np.array([[rng.uniform(0.28, 0.45), 0.0, 0.001]]), None


def _flick_cost(mj):
    ball = mj.body("object").id

    def cost(d, ctrl):
        return ((d.xpos[ball, 0] - d.mocap_pos[0, 0]) / 0.1) ** 2 + _effort(ctrl)

    return cost


def _flick_error(mj, data):
    return {"distance_m": float(abs(data.xpos[mj.body("object").id, 0] - data.mocap_pos[0, 0]))}


def _finger_start(mj, rng):
    qpos = mj.qpos0.copy()
    qpos[2] = rng.uniform(-np.pi, np.pi)  # the spinner
    target = qpos[2] + rng.choice([-1.0, 1.0]) * rng.uniform(0.8, 1.6)
    # the spinner turns about +y: its end (0.1, 0, 0) goes to (0.1 cos, 0, -0.1 sin) about its hinge
    marker = np.array([[0.1 * np.cos(target), -0.03, 0.3 - 0.1 * np.sin(target)]])
    return qpos, np.zeros(mj.nv), marker, None


def _finger_cost(mj):
    end = mj.site("end").id

    def cost(d, ctrl):
        gap = d.site_xpos[end, jnp.asarray([0, 2])] - d.mocap_pos[0, jnp.asarray([0, 2])]
        return jnp.sum((gap / 0.1) ** 2) + _effort(ctrl)

    return cost


def _finger_error(mj, data):
    gap = data.site_xpos[mj.site("end").id, [0, 2]] - data.mocap_pos[0, [0, 2]]
    return {"distance_m": float(np.linalg.norm(gap))}


def _hopper_start(mj, rng):
    return mj.qpos0.copy(), np.zeros(mj.nv), np.array([[rng.uniform(0.3, 0.6), 0.0, 0.001]]), None


HOPPER_DROP = 0.1  # m: a torso lower than this below its initial height has fallen


def _hopper_cost(mj):
    def cost(d, ctrl):
        fallen = jnp.minimum(d.qpos[1] + HOPPER_DROP, 0.0) / 0.05  # the torso below the fallen height
        return ((d.qpos[0] - d.mocap_pos[0, 0]) / 0.1) ** 2 + d.qpos[2] ** 2 + fallen**2 + _effort(ctrl)

    return cost


def _hopper_error(mj, data):
    return {
        "distance_m": float(abs(data.qpos[0] - data.mocap_pos[0, 0])),
        "pitch_rad": float(abs(data.qpos[2])),
        "drop_m": float(max(-data.qpos[1], 0.0)),  # the torso's height below its start
    }


TASKS = {
    "pendulum": Task("suite_pendulum", 30, 80, _pendulum_start, _pole_cost([0]), _pole_error([0]), {"angle_rad": 0.3}),
    "cartpole": Task(
        "suite_cartpole",
        30,
        100,
        _cartpole_start,
        _pole_cost([1], cart_weight=0.1),
        _pole_error([1], cart=True),
        {"angle_rad": 0.3, "cart_m": 0.5},
    ),
    "double_cartpole": Task(
        "suite_double_cartpole",
        20,
        60,
        _double_start,
        _pole_cost([1, 2], cart_weight=0.5, cart_target=True),
        _pole_error([1, 2], cart=True, cart_target=True),
        {"angle_rad": 0.2, "cart_m": 0.1},
    ),
    "reacher": Task("suite_reacher", 16, 40, _reacher_start, _reacher_cost, _reacher_error, {"distance_m": 0.02}),
    "block_push": Task(
        "suite_block_push",
        16,
        80,
        _block_start,
        _block_cost,
        _block_error,
        {"distance_m": 0.03, "yaw_rad": 0.3},
    ),
    "box_tip": Task("suite_box_tip", 16, 40, _tip_start, _tip_cost, _tip_error, {"tilt_rad": 0.2}),
    "flick": Task("flick", 16, 48, _flick_start, _flick_cost, _flick_error, {"distance_m": 0.03}),
    "finger_turn": Task("suite_finger_turn", 16, 60, _finger_start, _finger_cost, _finger_error, {"distance_m": 0.025}),
    "hopper": Task(
        "suite_hopper",
        20,
        60,
        _hopper_start,
        _hopper_cost,
        _hopper_error,
        {"distance_m": 0.1, "pitch_rad": 0.5, "drop_m": HOPPER_DROP},
        revision=1,  # the cost penalises a fallen torso (revision 0 was met lying down)
    ),
}


def load_task(name: str) -> tuple[mujoco.MjModel, mujoco.MjModel]:
    """The task's planning model (its scene as written; ``flick`` with the striker's friction
    restored) and its C-engine plant (the same at :data:`PLANT_STEP`)."""
    mj = mujoco.MjModel.from_xml_path(str(scenes.path(TASKS[name].scene)))
    if name == "flick":
        mj = scenes.geom_pair_friction(mj)
    plant = copy.deepcopy(mj)
    plant.opt.timestep = PLANT_STEP
    return mj, plant


def planner_config(name: str, planner: str, budget: float | None, samples: int = 64, extra=()) -> mpc.PlannerConfig:
    """The planner's knobs on task ``name``: the defaults, its kind's overrides, the task's horizon,
    the time budget (iterative planners) or the samples (sampling), then ``extra`` overrides."""
    overrides, _, timed = PLANNERS[planner]
    # the suite switches contacts from distance in the planning model (the *_cfd planners), so the
    # planner's own switch stays off: the "gradient" column is Adam without them, as measured
    cfg = mpc.PlannerConfig().override(
        "cfd=false", f"horizon={TASKS[name].horizon}", f"execute={EXECUTE}", SAMPLE_BATCH, *overrides
    )
    if timed and budget is not None:
        cfg = cfg.override(f"time_budget={budget}")
    elif planner == "sampling":  # calibration: the default 64 samples in one plan step, no budget
        cfg = cfg.override(f"samples={samples}")
    return cfg.override(*extra)


def run(
    name: str, planner: str, seed: int, budget: float | None, steps: int, samples: int = 64, extra=(), sim_extra=()
) -> dict:
    """One closed loop of ``planner`` on task ``name`` from start ``seed``, executed on the C engine;
    ``extra``: planner overrides, ``sim_extra``: overrides of the planning model's
    :class:`diffmjx.Config` (after the suite's own)."""
    task = TASKS[name]
    mj, plant = load_task(name)
    mx = common.mjx.put_model(mj)
    sim = diffmjx.Config().override(*SIM, *(CFD if PLANNERS[planner][1] else ()), *sim_extra)
    cfg = planner_config(name, planner, budget, samples, extra)
    qpos, qvel, mocap_pos, mocap_quat = task.start(mj, np.random.default_rng(seed))
    d0 = common.mjx.make_data(mx).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel))
    if mocap_pos.size:
        d0 = d0.replace(mocap_pos=jnp.asarray(mocap_pos))
    if mocap_quat is not None:
        d0 = d0.replace(mocap_quat=jnp.asarray(mocap_quat))
    start = time.perf_counter()
    out = mpc.closed_loop(
        mx, d0, task.cost(mj), mpc.make_planner(cfg, sim), steps, jax.random.key(seed), progress=False, plant=plant
    )
    errors = end_errors(name, seed, np.asarray(out.qpos[-1]))
    return {
        "errors": errors,
        "score": task.score(errors),
        "executed_cost": float(np.sum(out.cost)),
        "plan_time_s": np.asarray(out.plan_time_s),
        "iterations": np.asarray(out.iterations),
        "skipped": int(np.sum(out.skipped)),
        "jit_time_s": float(out.jit_time_s),
        "wall_s": time.perf_counter() - start,
        "qpos": np.asarray(out.qpos),
    }


def end_errors(name: str, seed: int, qpos: np.ndarray) -> dict:
    """The task's errors at the executed end positions ``qpos`` from start ``seed`` (its target
    drawn again), so a changed success rule re-scores saved closed loops without running them."""
    task = TASKS[name]
    mj, _ = load_task(name)
    _, _, mocap_pos, mocap_quat = task.start(mj, np.random.default_rng(seed))
    data = mujoco.MjData(mj)
    data.qpos[:] = qpos
    if mocap_pos.size:
        data.mocap_pos[:] = mocap_pos
    if mocap_quat is not None:
        data.mocap_quat[:] = mocap_quat
    mujoco.mj_kinematics(mj, data)
    return task.error(mj, data)


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for planner in dict.fromkeys(r["planner"] for r in rows if r["task"] == task):
            sel = [r for r in rows if (r["task"], r["planner"]) == (task, planner)]
            out.append(
                {
                    "task": task,
                    "planner": planner,
                    "starts": len(sel),
                    "successes": sum(r["success"] for r in sel),
                    "median_score": float(np.median([r["score"] for r in sel])),
                    "median_executed_cost": float(np.median([r["executed_cost"] for r in sel])),
                    "ms_per_plan_step": float(np.median([r["ms_per_plan_step"] for r in sel])),
                    "time_ratio": float(np.median([r["time_ratio"] for r in sel])),
                    "iterations": float(np.median([r["iterations"] for r in sel])),
                    "jit_s": float(np.max([r["jit_s"] for r in sel])),
                }
            )
    return out


COLOURS = {"sampling": "C2", "gradient": "0.55", "gradient_cfd": "C0", "ilqr_cfd": "C3", "hybrid_cfd": "C4"}


def plot(rows: list[dict], out, name: str = "planner_suite") -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    planners = [p for p in PLANNERS if any(r["planner"] == p for r in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(planners)
    for j, p in enumerate(planners):
        rate, cost = [], []
        for t in tasks:
            sel = [r for r in rows if (r["task"], r["planner"]) == (t, p)]
            rate.append(np.mean([r["success"] for r in sel]) if sel else np.nan)
            base = [r["executed_cost"] for r in rows if (r["task"], r["planner"]) == (t, "sampling")]
            cost.append(np.median([r["executed_cost"] for r in sel]) / np.median(base) if sel and base else np.nan)
        x = np.arange(len(tasks)) + (j - (len(planners) - 1) / 2) * width
        axes[0].bar(x, rate, width, color=COLOURS[p], label=p)
        axes[1].plot(np.arange(len(tasks)), cost, "o", color=COLOURS[p], label=p)
    for ax in axes:
        ax.set_xticks(np.arange(len(tasks)))
        ax.set_xticklabels(tasks, rotation=35, ha="right", fontsize=8)
    axes[0].set_ylabel("success rate")
    axes[0].set_ylim(0, 1.05)
    axes[1].set_yscale("log")
    ratios = [y for line in axes[1].get_lines() for y in line.get_ydata() if np.isfinite(y) and y > 0]
    lo, hi = (min(ratios), max(ratios)) if ratios else (1.0, 1.0)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if lo / 2.5 <= t <= hi * 2.5]
    axes[1].set_ylim(min(lo, 1.0) / 1.3, max(hi, 1.0) * 1.3)
    axes[1].set_yticks(ticks, [f"{t:g}" for t in ticks])
    axes[1].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].set_ylabel("executed cost / sampling's (median)")
    axes[1].axhline(1.0, color="0.7", lw=0.8)
    axes[0].set_title("success on the C engine, equal time per plan step", fontsize=9)
    axes[1].set_title("executed cost relative to predictive sampling", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(planners), fontsize=8, frameon=False)
    common.save_figure(fig, out / f"{name}.png", rect=(0, 0, 1, 0.93))


VIEWS = {"reacher": (0, 1), "block_push": (0, 1)}  # top-down (x, y); the others side-on (x, z)


def _hull(pts: np.ndarray) -> np.ndarray:
    """The convex hull of 2-D points, counter-clockwise (Andrew's monotone chain)."""
    pts = sorted(map(tuple, pts))
    cross = lambda o, a, b: (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    lower, upper = [], []
    for chain, seq in ((lower, pts), (upper, reversed(pts))):
        for p in seq:
            while len(chain) >= 2 and cross(chain[-2], chain[-1], p) <= 0:
                chain.pop()
            chain.append(p)
    return np.asarray(lower[:-1] + upper[:-1])


def _draw(ax, mj, data, axes, alpha) -> None:
    """Every non-plane geom of ``data`` projected onto the plane of ``axes``: the hull of a box's
    projected corners, a sphere's disc, a capsule's or cylinder's outline."""
    from matplotlib.patches import Circle, Polygon

    i, j = axes
    for g in range(mj.ngeom):
        kind, size = mujoco.mjtGeom(int(mj.geom_type[g])), mj.geom_size[g]
        pos, rot = data.geom_xpos[g], data.geom_xmat[g].reshape(3, 3)
        colour = tuple(mj.geom_rgba[g, :3])
        if kind == mujoco.mjtGeom.mjGEOM_PLANE:
            if axes == (0, 2):
                ax.axhline(pos[2], color="0.6", lw=1)
            continue
        if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
            ax.add_patch(Circle((pos[i], pos[j]), size[0], color=colour, alpha=alpha, lw=0))
            continue
        if kind in (mujoco.mjtGeom.mjGEOM_CAPSULE, mujoco.mjtGeom.mjGEOM_CYLINDER):
            ends = np.array([pos - rot[:, 2] * size[1], pos + rot[:, 2] * size[1]])[:, [i, j]]
            ring = size[0] * np.stack([np.cos(np.linspace(0, 2 * np.pi, 16)), np.sin(np.linspace(0, 2 * np.pi, 16))], 1)
            pts = np.concatenate([ends[0] + ring, ends[1] + ring])
        elif kind == mujoco.mjtGeom.mjGEOM_BOX:
            corners = np.array([[a, b, c] for a in (-1, 1) for b in (-1, 1) for c in (-1, 1)]) * size
            pts = (pos + corners @ rot.T)[:, [i, j]]
        else:
            continue
        ax.add_patch(Polygon(_hull(pts), closed=True, color=colour, alpha=alpha, lw=0))


def frames(results: dict, out, name: str, seed: int = 0) -> None:
    """Start (faint) and end state of start ``seed`` of every planner on every task, drawn from the
    executed states (no OpenGL needed): ``<name>_frames.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(t for t, _, _ in results))
    planners = [p for p in PLANNERS if any(q == p for _, q, _ in results)]
    fig, axes = plt.subplots(len(tasks), len(planners), figsize=(2.0 * len(planners), 1.9 * len(tasks)), squeeze=False)
    for r_, task in enumerate(tasks):
        mj, _ = load_task(task)
        view = VIEWS.get(task, (0, 2))
        for c, planner in enumerate(planners):
            ax = axes[r_, c]
            res = results.get((task, planner, seed))
            if res is None:
                ax.axis("off")
                continue
            data = mujoco.MjData(mj)
            start, _, mocap_pos, mocap_quat = TASKS[task].start(mj, np.random.default_rng(seed))
            if mocap_pos.size:
                data.mocap_pos[:] = mocap_pos
            if mocap_quat is not None:
                data.mocap_quat[:] = mocap_quat
            for q, alpha in ((start, 0.25), (res["qpos"][-1], 0.9)):
                data.qpos[:] = q
                mujoco.mj_forward(mj, data)
                _draw(ax, mj, data, view, alpha)
            ax.set_aspect("equal")
            ax.autoscale_view()
            ax.set_xticks([])
            ax.set_yticks([])
            if r_ == 0:
                ax.set_title(planner, fontsize=8)
            if c == 0:
                ax.set_ylabel(task, fontsize=8)
            ax.text(
                0.02,
                0.02,
                "success" if res["score"] < 1 else f"score {res['score']:.1f}",
                transform=ax.transAxes,
                fontsize=6,
            )
    fig.suptitle(f"start {seed} of each task: start state faint, end state solid (C engine)", fontsize=9)
    common.save_figure(fig, out / f"{name}_frames.png", rect=(0, 0, 1, 0.985))


def calibrate(name: str, fresh: bool) -> tuple[float, int]:
    """The task's time budget per plan step, and the samples that would fill it in one plan step.

    Short closed loops (one start, two plan steps) time predictive sampling with the default 64
    samples and every iterative planner with a single iteration per plan step. The budget is the
    longest of these, so that every planner can run its method at least once per plan step. The
    samples (64, or proportionally more, a multiple of 8, where the budget exceeds sampling's time by
    more than a fifth) were sampling's fixed count before it drew batches under the budget; they stay
    in the saved loops' keys."""
    scene = scenes.path(TASKS[name].scene).read_text()
    key = lambda planner, budget: (name, "calibrate", planner, budget, SIM, CFD, PLANT_STEP, EXECUTE, EFFORT, scene)
    ms = lambda r: float(np.median(r["plan_time_s"]))
    sampling = common.stage(
        "planner_suite", key("sampling", None), lambda: run(name, "sampling", 0, None, 2 * EXECUTE), fresh
    )
    t_s = ms(sampling)
    times = [t_s]
    for planner, (_, _, timed) in PLANNERS.items():
        if timed and planner != "sampling":
            r = common.stage(
                "planner_suite",
                key(planner, 1e-6),
                lambda p=planner: run(name, p, 0, 1e-6, 2 * EXECUTE),
                fresh,
            )
            times.append(ms(r))
    budget = max(times)
    samples = 64 if budget <= 1.2 * t_s else 8 * int(np.ceil(64 * budget / t_s / 8))
    return round(budget, 4), samples


def saved_budgets(path) -> dict:
    """``{task: (budget s, 64)}``: the budgets per plan step of a suite CSV (``budget_ms``), for a run
    at the published budgets without calibrating again."""
    import csv

    with open(path) as f:
        return {r["task"]: (float(r["budget_ms"]) / 1e3, 64) for r in csv.DictReader(f)}


def _number(x: str):
    """A CSV cell as it was written: an int, a float, nan, or empty."""
    if x in ("", "nan"):
        return np.nan if x else ""
    return int(x) if x.lstrip("-").isdigit() else float(x)


def kept(old: list[dict], new: list[dict]) -> list[dict]:
    """The rows of a suite CSV (``old``, as read) with the closed loops of ``new`` in their place and
    the others kept, in the CSV's order: a rerun of some planners leaves the rest as measured."""
    typed = lambda r: {
        **{k: _number(v) if k not in ("task", "planner", "success") else v for k, v in r.items()},
        "success": r["success"] == "True",
    }
    return common.replaced_rows([typed(r) for r in old], new, lambda r: (r["task"], r["planner"], int(r["seed"])))


def closed_loops(
    tasks,
    planners,
    seeds,
    quick: bool = False,
    extra: tuple = (),
    fresh: bool = False,
    rerun=(),
    budgets=None,
    sim_extra: tuple = (),
):
    """Every planner's closed loop on every task from every seed (saved stages reused).

    Returns the CSV rows and ``{(task, planner, seed): result}``; ``extra``: planner overrides for
    every planner; ``quick``: two plan steps per loop; ``fresh``: nothing reused; ``rerun``: the
    planners whose saved closed loops are run again (the budgets kept); ``budgets``: ``{task:
    (budget, samples)}`` in place of :func:`calibrate` (:func:`saved_budgets`); ``sim_extra``:
    overrides of the planning model's config for every planner (e.g. ``cfd.solimp=[...]``)."""
    rows, results = [], {}
    for name in tasks:
        task = TASKS[name]
        steps = 2 * EXECUTE if quick else task.steps
        scene = scenes.path(task.scene).read_text()
        budget, samples = budgets[name] if budgets else calibrate(name, fresh)
        for planner in tqdm(planners, desc=name):
            cfg = planner_config(name, planner, budget, samples, extra)
            for seed in seeds:
                key = (name, planner, seed, steps, budget, samples, SIM, CFD, PLANT_STEP, EXECUTE, EFFORT)
                key = (*key, PLANNERS[planner], scene, *_knob_key(cfg, planner_config(name, planner, budget, samples)))
                key = (*key, task.revision) if task.revision else key
                key = (*key, "sim", *sim_extra) if sim_extra else key
                r = common.stage(
                    "planner_suite",
                    key,
                    lambda n=name, p=planner, s=seed, b=budget, k=steps, x=samples: run(
                        n, p, s, b, k, x, extra, sim_extra
                    ),
                    fresh or planner in rerun,
                )
                ms = 1e3 * float(np.median(r["plan_time_s"]))
                errors = end_errors(name, seed, r["qpos"][-1])
                score = TASKS[name].score(errors)
                results[(name, planner, seed)] = {**r, "score": score}
                rows.append(
                    {
                        "task": name,
                        "planner": planner,
                        "seed": seed,
                        "success": score < 1.0,
                        "score": round(score, 4),
                        **{k: round(v, 5) for k, v in errors.items()},
                        "executed_cost": round(r["executed_cost"], 4),
                        "budget_ms": round(1e3 * budget, 1),
                        "ms_per_plan_step": round(ms, 1),
                        "time_ratio": round(ms / (1e3 * budget), 3),
                        "iterations": float(np.median(r["iterations"])),
                        "samples": _samples(planner, r["iterations"]),
                        "skipped": r["skipped"],
                        "jit_s": round(r["jit_time_s"], 1),
                    }
                )
    return rows, results


def _samples(planner: str, iterations) -> float:
    """Candidates sampling evaluates per plan step (median): a first batch of 8 and one per iteration;
    the hybrid's 32; none for the others."""
    if planner == "sampling":
        return 8.0 * (1.0 + float(np.median(iterations)))
    return 32.0 if planner == "hybrid_cfd" else 0.0


def _knob_key(cfg: mpc.PlannerConfig, base: mpc.PlannerConfig) -> tuple:
    """What a saved closed loop depends on beyond the suite's own overrides: the defaults its kind
    reads that changed since the suite's first run (Adam's learning rate became a fraction of the
    control range; iLQR's cost Hessian became the convexified one, its rescaled steps
    ``ilqr_reach`` and its sampled plans ``ilqr_explore`` were added, a run without them keyed as before; empty for the kinds that read
    neither, whose saved runs stay valid), and the
    knobs that ``--planner-set`` changed from ``base``. A sweep's run at a value that later becomes
    the default is the default's run."""
    adam = cfg.kind in ("gradient", "hybrid")
    key = ("learning_rate", cfg.learning_rate, "of the control range") if adam else ()
    if cfg.kind == "ilqr":  # the default became the convexified Hessian, then gained the rescaled steps
        key = ("ilqr_cost_hessian", cfg.ilqr_cost_hessian)
        key = (*key, "ilqr_reach", cfg.ilqr_reach) if cfg.ilqr_reach else key  # none: as saved before it existed
        key = (*key, "ilqr_explore", cfg.ilqr_explore) if cfg.ilqr_explore else key  # likewise
    ilqr_newer = {"ilqr_cost_hessian", "ilqr_reach", "ilqr_explore"}
    newer = {"learning_rate"} if adam else ilqr_newer if cfg.kind == "ilqr" else set()
    changed = [
        (f.name, getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        if getattr(cfg, f.name) != getattr(base, f.name) and f.name not in newer
    ]
    return (*key, *changed)


def main(argv=None) -> None:
    _, args = common.cli(
        __doc__,
        DEFAULT_PRESET,
        argv,
        extra=(
            ("--tasks", {"nargs": "+", "choices": list(TASKS), "default": list(TASKS)}),
            ("--planners", {"nargs": "+", "choices": list(PLANNERS), "default": list(PLANNERS)}),
            (
                "--starts",
                {"type": int, "default": 3, "help": "random starts (and targets) per task (the committed table: 3)"},
            ),
            ("--name", {"default": "planner_suite", "help": "the CSV and PNG files' name"}),
            ("--first-seed", {"type": int, "default": 0, "help": "the first start's seed"}),
            (
                "--rerun",
                {"nargs": "+", "choices": list(PLANNERS), "default": [], "help": "run these planners' loops again"},
            ),
            (
                "--planner-set",
                {"nargs": "+", "default": [], "help": "planner overrides for every planner, e.g. learning_rate=0.1"},
            ),
            (
                "--budgets-from",
                {"help": "a suite CSV whose budgets per plan step are used instead of calibrating again"},
            ),
            ("--keep", {"action": "store_true", "help": "keep the CSV's rows of the tasks and planners not run"}),
        ),
    )
    starts = 1 if args.quick else args.starts
    seeds = range(args.first_seed, args.first_seed + starts)
    extra = tuple(args.planner_set)
    budgets = saved_budgets(args.budgets_from) if args.budgets_from else None
    rows, results = closed_loops(args.tasks, args.planners, seeds, args.quick, extra, args.fresh, args.rerun, budgets)
    args.out.mkdir(parents=True, exist_ok=True)
    partial = args.keep and (args.out / f"{args.name}.csv").exists()
    if partial:
        import csv

        with open(args.out / f"{args.name}.csv") as f:
            rows = kept(list(csv.DictReader(f)), rows)
    common.write_csv(args.out / f"{args.name}.csv", rows)
    common.write_csv(args.out / f"{args.name}_summary.csv", summary(rows))
    plot(rows, args.out, args.name)
    if partial:  # the frame strips need every planner's end states: a partial rerun leaves them
        print(f"--keep: {args.name}_frames.png not redrawn (it needs every task's and planner's closed loop)")
    else:
        frames(results, args.out, args.name, args.first_seed)
    for row in summary(rows):
        print(row)


if __name__ == "__main__":
    main()
