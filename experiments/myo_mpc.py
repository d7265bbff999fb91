"""Model-predictive control of MyoSuite's muscle models: gradient MPC (with and without contacts from
distance), predictive sampling and the hybrid, on the baoding ball swap and bionic tennis (paper
Sec. 5.2, Figs. 12-13).

    python -m experiments.myo_mpc [--task baoding|die|die_table|tennis] [--preset quick|paper|fast]
                                  [--set planner.KEY=VALUE ...] [--methods ...] [--plan-steps N] [--fresh]
                                  [--plan-contacts all|objects|objects+capsules]
    python -m experiments.myo_mpc --task T --check-horizon H   # the start gradient through H periods
    python -m experiments.myo_mpc --task T --gradient-modes    # plan-step cost: unroll/implicit, remat
    python -m experiments.myo_mpc --task T --check-tausmooth   # how far muscle.tausmooth moves the task
    python -m experiments.myo_mpc --task T --check-start       # does the start state hold the objects?

Task (a): swap the two balls in the MyoHand. Cost of a state: the distance of each ball to its
target, the other ball's starting position, fixed in the frame of the third metacarpal (the palm).
Model settings of the paper's App. E.3: geom solref (0.02, 1), solimp (0, 0.95, 0.001, 0.5, 2)
(with contacts from distance (0.1, 0.95, 0.001, 0.5, 2) and CFD solimp (0, 0.1, 1, 1, 4)),
timestep 0.0025 s, Newton with 4 iterations and 16 line-search iterations, MJX's Euler step per
control period. Every method runs the same number of plan steps from the same state.

Task (b), die reorientation (:func:`diffmjx.scenes.myo.die_reorient`): MyoSuite's die in the MyoHand's palm, turned
to a fixed goal orientation while held where it starts. Two kinds of pair stock MJX cannot collide
are switched off (the world's unreachable cylinder and the fingernail ellipsoids; see the
function). The model's own table is that cylinder, 1.4 m below the palm, so the on-the-table
variant (``--task die_table``) adds a box table under the hand turned palm down, the die resting
on it 2 cm below the palm.

Task (c), bionic tennis (:func:`diffmjx.scenes.myo.bionic_tennis`): MyoSuite's MyoArm with the modular prosthetic limb
(``myoarm_bionic_bimanual.xml``, 63 muscles and 17 motors). A racket is welded to the prosthetic
palm; a ball flies sideways past the racket face, 3 cm clear of it, and misses both hands. Cost of
a state: the ball's distance to a goal in front of the muscle hand's fingers, nothing else. The
ball reaches the goal only if the racket hits it, so without contacts from distance the cost's
gradient is exactly zero at the start (the study measures it: ``--check-horizon``).

Writes docs/results/myo_mpc_<task>.csv (cost of every executed state per method),
myo_mpc_<task>_summary.csv (final and mean cost, wall time per plan step, JIT time) and
myo_mpc_<task>.png (cost over time), with ``_paper`` or ``_fast`` after the task's name for those presets.
``--preset fast`` (baoding): the paper preset's swap on a CPU, its first plan step with 16 Adam
iterations and the later ones with 6, planned on a model with the balls' and the finger capsules'
contacts only and executed on the full model (docs/mpc.md).
Each run's closed loop is saved after every plan step under ``~/.cache/diffmjx/mpc`` and a rerun
with the same arguments resumes it (a larger ``--plan-steps`` extends it; ``--fresh`` starts over);
``--check-horizon`` writes myo_mpc_<task>_horizon.csv, ``--gradient-modes``
myo_mpc_<task>_gradient_modes.csv, ``--check-tausmooth`` myo_mpc_<task>_tausmooth.csv and
``--check-start`` myo_mpc_<task>_start.csv. The
tasks (models, start states and costs) are built by :mod:`diffmjx.scenes.myo` from the installed
MyoSuite package; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from mujoco import mjx

import diffmjx
from diffmjx import mpc
from diffmjx.scenes import myo
from diffmjx.scenes.myo import TASKS
from experiments import common

CHECKPOINTS = Path.home() / ".cache" / "diffmjx" / "mpc"
"""Each run's closed loop is saved here after every plan step and resumed by a rerun (``--fresh``:
start over), so the paper preset's 32 plan steps can run in pieces."""
RUNS = {  # task -> preset -> plan steps and the planner preset
    "baoding": {
        "quick": {"plan_steps": 6, "planner": "quick", "overrides": ("horizon=16", "execute=4", "iterations=6")},
        "paper": {"plan_steps": 32, "planner": "paper", "overrides": ()},
        # the paper preset's swap on a 2-core CPU (issue 58 item 4): the first plan (from nothing) gets
        # 16 iterations, later ones (from the shifted plan) 6, and plans are made on a model
        # whose contacts are the balls' and the finger capsules' with each other (290 of the 407
        # candidate pairs: no fingernail ellipsoid or table pair of the hand's); the executed states
        # are the full model's
        "fast": {
            "plan_steps": 32,
            "planner": "paper",
            "overrides": ("first_iterations=16", "iterations=6"),
            "plan_contacts": "objects+capsules",
        },
    },
    "tennis": {  # the ball passes the racket within 0.1 s: the quick horizon covers it
        "quick": {"plan_steps": 6, "planner": "quick", "overrides": ("horizon=40", "execute=8", "iterations=6")},
        "paper": {"plan_steps": 32, "planner": "paper", "overrides": ()},
    },
    "die": {  # the relaxed hand lets the die sink 9 cm in 1 s: 6 plan steps of 8 periods, 0.12 s
        "quick": {"plan_steps": 6, "planner": "quick", "overrides": ("horizon=16", "execute=8", "iterations=6")},
        "paper": {"plan_steps": 32, "planner": "paper", "overrides": ()},
    },
    "die_table": {  # as the in-hand die: 6 plan steps of 8 periods (0.12 s), a 0.04 s horizon
        "quick": {"plan_steps": 6, "planner": "quick", "overrides": ("horizon=16", "execute=8", "iterations=6")},
        "paper": {"plan_steps": 32, "planner": "paper", "overrides": ()},
    },
}
METHODS = {  # name -> (planner overrides, contacts from distance)
    "gradient": (("kind=gradient",), False),
    "gradient + CFD": (("kind=gradient",), True),
    "sampling 64": (("kind=sampling", "samples=64"), False),
    "sampling 256": (("kind=sampling", "samples=256"), False),
    "hybrid + CFD": (("kind=hybrid", "samples=64"), True),
}
DEFAULT_METHODS = {
    "baoding": list(METHODS),
    "tennis": ["gradient", "gradient + CFD", "sampling 64"],
    "die": ["gradient", "gradient + CFD", "sampling 64"],
    "die_table": ["gradient", "gradient + CFD", "sampling 64"],
}
CFD_SOLIMP = "cfd.solimp=[0.0, 0.1, 1.0, 1.0, 4.0]"  # App. E.3's CFD tuple (w_c = 1 m)


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


def _objects(mj) -> list[int]:
    """Bodies that carry a free joint: the task's objects (the baoding balls)."""
    import mujoco

    return sorted({int(mj.jnt_bodyid[j]) for j in range(mj.njnt) if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE})


def _planning_model(mj, contacts: str):
    """The planning model of ``plan_contacts``: ``objects``, only the free bodies' contacts;
    ``objects+capsules``, those and the pairs among the other bodies' capsules (a hand's fingers)."""
    import mujoco

    objects = _objects(mj)
    among = ()
    if contacts == "objects+capsules":
        among = [
            g
            for g in range(mj.ngeom)
            if mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE and mj.geom_bodyid[g] not in (0, *objects)
        ]
    elif contacts != "objects":
        raise ValueError(f"plan_contacts={contacts!r}; expected 'objects' or 'objects+capsules'")
    return mpc.contacts_only_with(mj, objects, among)


def _stem(task: str, preset: str) -> str:
    """Output file stem of a run: ``myo_mpc_<task>``, with ``_<preset>`` after it for presets other
    than quick, so presets never overwrite each other."""
    return f"myo_mpc_{task}" if preset == "quick" else f"myo_mpc_{task}_{preset}"


def planning_config(cfd: bool) -> diffmjx.Config:
    sim = diffmjx.Config.paper().override("integrator.solver=mjx_euler", "collision.smooth=true")
    return sim.override(*common.PAPER_CFD, CFD_SOLIMP) if cfd else sim


def run(
    task: str,
    preset: str,
    methods,
    overrides,
    out: Path,
    seed: int = 0,
    plan_steps: int | None = None,
    fresh: bool = False,
    checkpoints: Path = CHECKPOINTS,
    started: float | None = None,
    plan_contacts: str | None = None,
):
    if preset not in RUNS[task]:
        raise SystemExit(f"--preset {preset} is not defined for --task {task}; choose from {sorted(RUNS[task])}")
    spec = dict(RUNS[task][preset])
    if plan_contacts is not None:
        spec["plan_contacts"] = None if plan_contacts == "all" else plan_contacts
    if plan_steps is not None:
        spec["plan_steps"] = plan_steps
    stem = _stem(task, preset)
    csv, summary_csv, qpos_csv = out / f"{stem}.csv", out / f"{stem}_summary.csv", out / f"{stem}_qpos.csv"
    # keep the other methods' results of an earlier run, so methods can be run one at a time
    rows = [r for r in _read(csv) if r["method"] not in methods]
    summary = [r for r in _read(summary_csv) if r["method"] not in methods]
    qpos_rows = [r for r in _read(qpos_csv) if r["method"] not in methods]
    for name in methods:
        extra, cfd = METHODS[name]
        mj, mx, d0, cost = TASKS[task](cfd)
        plant = None
        if spec.get("plan_contacts"):  # plan on the free bodies' contacts (and the capsules' among each other)
            plant, mx = mx, mjx.put_model(_planning_model(mj, spec["plan_contacts"]))
        sim = planning_config(cfd)
        cfg = mpc.PlannerConfig.load(spec["planner"], [*spec["overrides"], *extra, *overrides])
        steps = spec["plan_steps"] * cfg.execute
        saved = checkpoints / f"{stem}_{name}_seed{seed}.npz"
        if fresh:
            saved.unlink(missing_ok=True)
        t = time.perf_counter()
        res = mpc.closed_loop(
            mx, d0, cost, mpc.make_planner(cfg, sim), steps, jax.random.PRNGKey(seed), checkpoint=saved, plant=plant
        )
        wall = time.perf_counter() - t
        c0 = float(jax.jit(lambda d: cost(diffmjx.forward(mx if plant is None else plant, d, sim), d.ctrl))(d0))  # noqa: B023 (called within this iteration)
        for k, c in enumerate(np.r_[c0, res.cost]):
            rows.append({"method": name, "step": k, "time_s": k * mj.opt.timestep, "cost": float(c)})
        for k, q in enumerate(np.vstack([np.asarray(d0.qpos)[None], res.qpos])):  # the frame strip's input
            qpos_rows.append({"method": name, "step": k, **{f"q{i}": repr(float(v)) for i, v in enumerate(q)}})
        summary.append(
            {
                "method": name,
                "horizon": cfg.horizon,
                "execute": cfg.execute,
                "iterations": cfg.iterations,
                "first_iterations": cfg.iterations if cfg.first_iterations is None else cfg.first_iterations,
                "plan_contacts": spec.get("plan_contacts") or "all",
                "samples": cfg.samples if cfg.kind != "gradient" else 0,
                "plan_steps": spec["plan_steps"],
                "start_cost": c0,
                "final_cost": float(res.cost[-1]),
                "mean_cost": float(res.cost.mean()),
                "plan_step_s": float(np.median(res.plan_time_s)),
                "jit_s": res.jit_time_s,
                "wall_s": wall,
                # plan steps read back from an earlier run's checkpoint (their times are in plan_step_s,
                # not in wall_s, which is this process's); plan_steps_s_total: every plan step's time
                "resumed_plan_steps": res.resumed_plan_steps,
                "plan_steps_s_total": float(res.plan_time_s.sum()),
                # from the study's start (after its imports) to this run's end: building the task and
                # its models, compiling, every plan step; the first method's figure is a cold start's
                "since_start_s": time.perf_counter() - (t if started is None else started),
            }
        )
        print(f"{name:16s} cost {c0:.4f} -> {res.cost[-1]:.4f}  plan step {np.median(res.plan_time_s):.1f} s  "
              f"JIT {res.jit_time_s:.0f} s")  # fmt: skip
        common.write_csv(csv, rows)
        common.write_csv(summary_csv, summary)
        common.write_csv(qpos_csv, qpos_rows)
    plot(rows, out / f"{stem}.png", TITLES[task])
    frame_strip(task, preset, out)


def check_horizon(task: str, horizon: int, out: Path):
    """Gradient of the task's cost through ``horizon`` periods of a constant plan, with and without
    contacts from distance: is it finite, how large, and what does it cost? Writes
    myo_mpc_<task>_horizon.csv."""
    rows = []
    for cfd in (False, True):
        _mj, mx, d0, cost = TASKS[task](cfd)
        sim = planning_config(cfd)
        lo, hi = mpc.ctrl_bounds(mx)
        u = jnp.clip(jnp.full((horizon, mx.nu), 0.05), lo, hi)
        fn = jax.jit(jax.value_and_grad(lambda u: mpc.plan_cost(mx, d0, u, cost, sim)[0]))  # noqa: B023 (called within this iteration)
        t = time.perf_counter()
        fn = fn.lower(u).compile()
        jit_s = time.perf_counter() - t
        t = time.perf_counter()
        value, g = jax.block_until_ready(fn(u))
        run_s = time.perf_counter() - t
        g = np.asarray(g)
        rows.append(
            {
                "task": task,
                "cfd": cfd,
                "horizon": horizon,
                "cost": float(value),
                "finite": int(np.isfinite(g).sum()),
                "entries": g.size,
                "nonzero": int(np.sum(g != 0)),
                "grad_norm": float(np.linalg.norm(g[np.isfinite(g)])),
                "jit_s": jit_s,
                "run_s": run_s,
            }
        )
        print(rows[-1])
        common.write_csv(out / f"myo_mpc_{task}_horizon.csv", rows)


GRADIENT_MODES = {  # name -> simulation overrides on top of the study's pinned setting
    "unroll": (),
    "implicit": ("solver.gradient=implicit",),
    "unroll + remat": ("integrator.remat=true",),
    "implicit + remat": ("solver.gradient=implicit", "integrator.remat=true"),
}


def gradient_modes(task: str, plan_steps: int, out: Path, seed: int = 0):
    """What the solver gradient (unrolled iterations or implicit at the solution) and remat (recompute
    each period's forward in the backward pass) cost per plan step of gradient MPC without CFD, and
    whether they change what is executed: the quick preset's planner for ``plan_steps`` plan steps
    in each mode, its executed costs against the unrolled mode's. Writes
    myo_mpc_<task>_gradient_modes.csv."""
    _mj, mx, d0, cost = TASKS[task](False)
    spec = RUNS[task]["quick"]
    cfg = mpc.PlannerConfig.load(spec["planner"], [*spec["overrides"], "kind=gradient"])
    rows, ref = [], None
    for name, extra in GRADIENT_MODES.items():
        sim = planning_config(False).override(*extra)
        t = time.perf_counter()
        res = mpc.closed_loop(
            mx, d0, cost, mpc.make_planner(cfg, sim), plan_steps * cfg.execute, jax.random.PRNGKey(seed)
        )
        ref = res.cost if ref is None else ref
        rows.append(
            {
                "task": task,
                "mode": name,
                "overrides": " ".join(extra),
                "horizon": cfg.horizon,
                "iterations": cfg.iterations,
                "plan_steps": plan_steps,
                "plan_step_s": float(np.median(res.plan_time_s)),
                "jit_s": res.jit_time_s,
                "wall_s": time.perf_counter() - t,
                "final_cost": float(res.cost[-1]),
                "max_cost_diff_vs_unroll": float(np.abs(res.cost - ref).max()),
            }
        )
        print(rows[-1])
        common.write_csv(out / f"myo_mpc_{task}_gradient_modes.csv", rows)


TAUSMOOTH_WIDTHS = (0.0, 0.01, 0.05, 0.1, 0.2, 0.5)


RESET_ENVS = {"baoding": myo.BAODING_ENV}
"""MyoSuite environments whose ``reset`` pose ``--check-start`` compares with the task's start."""


def check_start(task: str, out: Path, periods: int = 256):
    """Does the task's start state hold its objects? Idle rollouts over ``periods`` periods (the
    paper horizon): DiffMJX (the study's simulation, the first plan held: zero controls clipped to
    the ranges) with the task's running cost, and MuJoCo's C engine (the same model, zero
    controls) from the task's start state and, where :data:`RESET_ENVS` names the environment,
    from MyoSuite's ``reset(seed=0)`` pose and from the model's ``qpos0``. Per period: the lowest
    free body's height, the C engine's contact count and the cost. Writes myo_mpc_<task>_start.csv."""
    import mujoco

    mj, mx, d0, cost = TASKS[task](False)
    lo, hi = mpc.ctrl_bounds(mx)
    _, traj = jax.jit(
        lambda d: mpc.plan_cost(mx, d, jnp.clip(jnp.zeros((periods, mx.nu)), lo, hi), cost, planning_config(False))
    )(d0)
    free = [mj.jnt_qposadr[j] for j in range(mj.njnt) if mj.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    lowest = lambda q: min((float(q[a + 2]) for a in free), default=float("nan"))
    rows = [
        {
            "source": "DiffMJX, task start",
            "period": k + 1,
            "time_s": (k + 1) * mj.opt.timestep,
            "lowest_free_body_z": lowest(np.asarray(traj.qpos[k])),
            "ncon": "",
            "cost": float(traj.obs[k]),
        }
        for k in range(periods)
    ]
    starts = {"C engine, task start": (np.asarray(d0.qpos), np.asarray(d0.qvel))}
    if task in RESET_ENVS:
        data = myo.reset_env(RESET_ENVS[task]).data
        starts["C engine, MyoSuite reset"] = (data.qpos.copy(), data.qvel.copy())
        starts["C engine, model qpos0"] = (
            mj.qpos0.copy(),
            np.zeros(mj.nv),
        )  # the task's start before it used the reset pose
    for source, (qpos, qvel) in starts.items():
        d = mujoco.MjData(mj)
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.ctrl[:] = np.clip(0.0, np.asarray(lo), np.asarray(hi))
        for k in range(periods):
            mujoco.mj_step(mj, d)
            rows.append(
                {
                    "source": source,
                    "period": k + 1,
                    "time_s": (k + 1) * mj.opt.timestep,
                    "lowest_free_body_z": lowest(d.qpos),
                    "ncon": d.ncon,
                    "cost": "",
                }
            )
    for source in dict.fromkeys(r["source"] for r in rows):
        sel = [r for r in rows if r["source"] == source]
        print(
            f"{source:28s} lowest free body z {sel[0]['lowest_free_body_z']:.3f} -> {sel[-1]['lowest_free_body_z']:.3f} m"
            + (f", cost {sel[0]['cost']:.4f} -> {sel[-1]['cost']:.4f}" if sel[0]["cost"] != "" else "")
        )
    common.write_csv(out / f"myo_mpc_{task}_start.csv", rows)
    return rows


def check_tausmooth(task: str, out: Path, periods: int = 200, seed: int = 0):
    """How far the muscle surrogate ``muscle.tausmooth`` moves the task's motion: MuJoCo's C engine
    (Euler, the task's settings) driven by the same brown-noise controls (the sampling planner's
    noise around 0.3, clipped to the control range) with each width set on every muscle, against the
    hard switch (width 0): largest activation difference and largest distance between the same
    body's positions (any body: bones, balls, die) over ``periods`` periods. The forward of ``muscle.tausmooth=w`` equals the C engine with
    ``tausmooth=w`` (tests/test_muscle_smoothing.py), so this is also DiffMJX's deviation from the
    unsmoothed model. Writes myo_mpc_<task>_tausmooth.csv."""
    import mujoco

    mj, mx, d0, _ = TASKS[task](False)
    lo, hi = (np.asarray(b) for b in mpc.ctrl_bounds(mx))
    noise = np.asarray(mpc.coloured_noise(jax.random.PRNGKey(seed), (periods, mj.nu), 2.0))
    ctrls = np.clip(0.3 + 0.3 * noise, lo, hi)
    muscles = np.flatnonzero(mj.actuator_dyntype == mujoco.mjtDyn.mjDYN_MUSCLE)

    def simulate(width, jitter=0.0):
        m = copy.copy(mj)
        m.actuator_dynprm[muscles, 2] = width
        d = mujoco.MjData(m)
        d.qpos[:], d.qvel[:], d.act[:] = np.asarray(d0.qpos), np.asarray(d0.qvel), np.asarray(d0.act)
        acts, pos = [], []
        for u in np.clip(ctrls + jitter, lo, hi):
            d.ctrl[:] = u
            mujoco.mj_step(m, d)
            acts.append(d.act[muscles].copy())
            pos.append(d.xpos.copy())
        return np.array(acts), np.array(pos)

    hard_act, hard_pos = simulate(0.0)
    rows = []
    # the first row is no surrogate but the hard switch with every control moved by 1e-9: how much
    # the task's own sensitivity (chaos) amplifies a perturbation, to read the other rows against
    for w, jitter in ((0.0, 1e-9), *((w, 0.0) for w in TAUSMOOTH_WIDTHS)):
        act, pos = simulate(w, jitter)
        rows.append(
            {
                "task": task,
                "tausmooth": w,
                "ctrl_jitter": jitter,
                "periods": periods,
                "time_s": periods * mj.opt.timestep,
                "muscles": muscles.size,
                "max_act_diff": float(np.abs(act - hard_act).max()),
                "max_body_pos_diff_m": float(np.linalg.norm(pos - hard_pos, axis=-1).max()),
            }
        )
        print(rows[-1])
    common.write_csv(out / f"myo_mpc_{task}_tausmooth.csv", rows)


VIEWS = {  # task -> free camera: look at a body (or a fixed point) from (distance m, azimuth deg, elevation deg)
    "baoding": ("thirdmc", 0.32, 150.0, -35.0),
    "die": ("thirdmc", 0.35, 150.0, -35.0),
    "tennis": ((-0.01, 0.14, 0.59), 1.1, 90.0, -50.0),  # between the ball's start and the goal, from above
    "die_table": ("Object", 0.4, 150.0, -20.0),
}
GL_BACKENDS = ("egl", "osmesa")  # tried in turn when MUJOCO_GL is not set


def frame_strip(task: str, preset: str, out: Path, frames: int = 5) -> Path | None:
    """Render the executed behaviour of every method of a finished run (``<stem>_qpos.csv``) as a
    strip of ``frames`` frames per method, evenly spaced from start to end, into
    ``<stem>_frames.png``. MuJoCo picks its OpenGL backend when it is imported, so each backend
    is tried in a child process (``MUJOCO_GL`` if set, else EGL, then OSMesa); where none works the
    strip is skipped with a message and None is returned, and nothing else of the study is lost."""
    import subprocess
    import sys

    stem = _stem(task, preset)
    if not (out / f"{stem}_qpos.csv").exists():
        print(f"frame strip skipped: no executed trajectories in {out / f'{stem}_qpos.csv'} (run the study first)")
        return None
    backends = (os.environ["MUJOCO_GL"],) if os.environ.get("MUJOCO_GL") else GL_BACKENDS
    errors = []
    for gl in backends:
        cmd = [
            sys.executable,
            "-m",
            "experiments.myo_mpc",
            "--task",
            task,
            "--preset",
            preset,
            "--out",
            str(out),
            "--render-frames",
            str(frames),
        ]
        env = {**os.environ, "MUJOCO_GL": gl}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode == 0:
            print(done.stdout.strip())
            return out / f"{stem}_frames.png"
        errors.append(f"{gl}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
    print(
        "frame strip skipped: offscreen rendering does not work here (" + "; ".join(errors) + "). "
        "Install EGL or OSMesa (e.g. apt-get install libosmesa6) and rerun with --frames."
    )
    return None


def render_frames(task: str, preset: str, out: Path, frames: int) -> Path:
    """The child process of :func:`frame_strip` (OpenGL backend already chosen by MUJOCO_GL)."""
    import matplotlib
    import mujoco

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = _stem(task, preset)
    rows = _read(out / f"{stem}_qpos.csv")
    mj = TASKS[task](False)[0]
    body, distance, azimuth, elevation = VIEWS[task]
    renderer = mujoco.Renderer(mj, 240, 320)
    data = mujoco.MjData(mj)
    cam = mujoco.MjvCamera()
    cam.distance, cam.azimuth, cam.elevation = distance, azimuth, elevation
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(len(methods), frames, figsize=(2.2 * frames, 1.8 * len(methods)), squeeze=False)
    for i, name in enumerate(methods):
        traj = [r for r in rows if r["method"] == name]
        for j, k in enumerate(np.linspace(0, len(traj) - 1, frames).round().astype(int)):
            data.qpos[:] = [float(traj[k][f"q{n}"]) for n in range(mj.nq)]
            mujoco.mj_forward(mj, data)
            cam.lookat[:] = data.xpos[mj.body(body).id] if isinstance(body, str) else body
            renderer.update_scene(data, camera=cam)
            ax = axes[i, j]
            ax.imshow(renderer.render())
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"t = {k * mj.opt.timestep:.3f} s", fontsize=8)
            if j == 0:
                ax.set_ylabel(name, fontsize=8)
    fig.suptitle(f"{TITLES[task][0]}: executed behaviour", fontsize=9)
    path = out / f"{stem}_frames.png"
    common.save_figure(fig, path)
    print(f"frame strip: {path} ({len(methods)} methods x {frames} frames, MUJOCO_GL={os.environ.get('MUJOCO_GL')})")
    return path


TITLES = {
    "baoding": ("MyoHand baoding swap, closed loop", "cost: ball distances to targets (m)"),
    "tennis": ("Bionic tennis, closed loop", "cost: ball distance to goal (m)"),
    "die": ("MyoHand die reorientation, closed loop", "cost: 10 x position error (m) + rotation chord"),
    "die_table": (
        "MyoHand die reorientation on a table, closed loop",
        "cost: 10 x position error (m) + rotation chord",
    ),
}


def plot(rows, path: Path, title=TITLES["baoding"]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(r["method"] for r in rows):
        t = [r["time_s"] for r in rows if r["method"] == name]
        c = [r["cost"] for r in rows if r["method"] == name]
        ax.plot(t, c, label=name, ls="--" if name.startswith("sampling") else "-")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(title[1])
    ax.set_title(title[0])
    ax.legend()
    common.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS), default="baoding")
    p.add_argument(
        "--preset",
        choices=("quick", "paper", "fast"),
        default="quick",
        help="fast: the paper preset's swap in about 20 min on a CPU (baoding only; docs/mpc.md)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        choices=sorted(METHODS),
        default=None,
        help="default: every method for baoding; gradient with and without CFD and sampling 64 for tennis",
    )
    p.add_argument(
        "--plan-contacts",
        choices=("all", "objects", "objects+capsules"),
        default=None,
        help="the planning model's contacts (default: the preset's; fast: objects+capsules): all, the free "
        "bodies' only, or those and the pairs among the other bodies' capsules; executed on the full model",
    )
    p.add_argument("--set", action="append", default=[], metavar="planner.KEY=VALUE", help="planner overrides")
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plan-steps", type=int, default=None, help="plan steps per method (default: the preset's)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over instead of resuming each run's closed loop saved under --checkpoints",
    )
    p.add_argument(
        "--checkpoints",
        type=Path,
        default=CHECKPOINTS,
        help=f"folder of the runs' saved closed loops (default {CHECKPOINTS}); a folder in a clone "
        "lets a long run continue on another machine",
    )
    p.add_argument(
        "--check-horizon",
        type=int,
        default=None,
        metavar="H",
        help="only check the gradient through H periods (finite? how long?) and exit",
    )
    p.add_argument(
        "--gradient-modes",
        action="store_true",
        help="only time gradient MPC per plan step with the unrolled / implicit solver gradient and remat",
    )
    p.add_argument(
        "--frames",
        action="store_true",
        help="only render the frame strip of the last run's executed behaviour (offscreen OpenGL)",
    )
    p.add_argument("--render-frames", type=int, default=None, help=argparse.SUPPRESS)  # frame_strip's child
    p.add_argument(
        "--check-start",
        action="store_true",
        help="only check whether the task's start state holds its objects (idle rollouts)",
    )
    p.add_argument(
        "--check-tausmooth",
        action="store_true",
        help="only measure how far muscle.tausmooth moves the task's motion in the C engine",
    )
    started = time.perf_counter()
    args = p.parse_args(argv)
    common.setup()
    if args.check_horizon:
        check_horizon(args.task, args.check_horizon, args.out)
        return
    if args.gradient_modes:
        gradient_modes(args.task, args.plan_steps or 2, args.out, args.seed)
        return
    if args.check_start:
        check_start(args.task, args.out)
        return
    if args.check_tausmooth:
        check_tausmooth(args.task, args.out)
        return
    if args.render_frames:
        render_frames(args.task, args.preset, args.out, args.render_frames)
        return
    if args.frames:
        frame_strip(args.task, args.preset, args.out)
        return
    methods = DEFAULT_METHODS[args.task] if args.methods is None else args.methods
    run(
        args.task,
        args.preset,
        methods,
        args.set,
        args.out,
        args.seed,
        args.plan_steps,
        args.fresh,
        args.checkpoints,
        started,
        args.plan_contacts,
    )


if __name__ == "__main__":
    main()
