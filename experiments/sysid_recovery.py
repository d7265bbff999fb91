"""Recovery study: identify models DiffMJX has never fitted, from recordings at known true values.

    python -m experiments.sysid_recovery [--models arm,box,ball,finger] [--seeds 3] [--quick] [--set KEY=VALUE ...]
                                         [--fresh] [--plot-only]

Four models of different kinds (``diffmjx.scenes.path("sysid_arm")`` etc. and MyoSuite's finger):

- ``arm``: a two-link arm under gravity driven by two motors; the joints' damping and armature
  and the motors' gears (6 parameters);
- ``box``: a box thrown onto the floor, bouncing, sliding and tumbling; the sliding friction and
  the contact's solref time constant and damping ratio (3);
- ``ball``: a ball thrown at a wall, bouncing off it and the floor; its radius (inertia tied) and
  its solref (3);
- ``finger``: MyoSuite's tendon-driven finger (``myo_sim``'s ``myofinger_v0``, contacts off) with
  five muscles; two joints' damping and the muscles' activation and deactivation time constants
  (one value shared by the five; 4).

The "real system" is MuJoCo's C engine at the true values with a fine step (RK4 at 0.1 ms), sampled
every ``dt`` (10 ms for the arm and the finger, 5 ms for the box and the ball); the fitted model is
the user's MJCF as written (its own timestep: 2 ms, 1 ms). Recordings hold qpos, qvel (and the
finger's activations); with noise, Gaussian noise (1 mm or 1 mrad on positions and quaternions'
rotation, 0.01 on velocities) is added. Fits start from every parameter 30-50 % off (random sign
and size, seeded) and use the same segments (horizon 10, stride 5) and residual:

- ``diffmjx_lm``: :func:`diffmjx.sysid.identify`, Levenberg–Marquardt on forward-mode Jacobians;
- ``mujoco_sysid``: :func:`diffmjx.sysid.identify_mujoco_sysid`, MuJoCo's ``mujoco.sysid`` (C engine
  at the model's timestep, finite differences).

Reported per fit: each parameter's relative error, two held-out errors (RMS of the position and
orientation residual of 10-step predictions on a held-out recording with the fitted values,
simulated by the C engine at the model's timestep, the model a user runs with ``mj_step``, and by
the "real system"'s fine RK4: the physics), wall time and, for DiffMJX, the setup time
(compilation and the first evaluation). Writes
``docs/results/sysid_recovery.csv`` (one row per fit and parameter), ``sysid_recovery_summary.csv``
(one row per fit) and ``sysid_recovery.png``. Each fit is cached (``~/.cache/diffmjx/stages``);
``--fresh`` refits, ``--plot-only`` redraws from the CSV.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import functools
import math
import time
from pathlib import Path

import mujoco
import numpy as np

import diffmjx
from diffmjx import scenes, sysid
from experiments import common

GEN_STEP = 1e-4  # the "real system": RK4 at this step
HORIZON, STRIDE = 10, 5
NOISE = {"qpos": 1e-3, "qvel": 1e-2}
# made before derivatives carried the force jump at touchdown (the box's and ball's solimp is MuJoCo's
# default): the committed figures are without it
SIM = ("integrator.rtol=1e-5", "integrator.atol=1e-5", "integrator.saltation=false")


def _finger() -> mujoco.MjSpec:
    import os

    import myo_sim

    path = os.path.join(os.path.dirname(myo_sim.__file__), "models", "legacy", "finger", "myofinger_v0.xml")
    spec = mujoco.MjSpec.from_file(path)
    spec.option.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    return spec


MUSCLES = ("extn", "adabR", "adabL", "mflx", "dflx")
LEGGED_GEOMS = ("floor", "torso", "front_leg", "front_foot", "back_leg", "back_foot")
MODELS = {
    "arm": {
        "spec": lambda: mujoco.MjSpec.from_file(str(scenes.path("sysid_arm"))),
        "params": lambda: [
            sysid.Parameter("dof_damping", "shoulder"),
            sysid.Parameter("dof_damping", "elbow"),
            sysid.Parameter("dof_armature", "shoulder"),
            sysid.Parameter("dof_armature", "elbow"),
            sysid.Parameter("actuator_gear", "shoulder", index=0),
            sysid.Parameter("actuator_gear", "elbow", index=0),
        ],
        "dt": 0.01,
        "seconds": 2.0,
        "recordings": 2,
    },
    "box": {
        "spec": lambda: mujoco.MjSpec.from_file(str(scenes.path("sysid_box"))),
        "params": lambda: [
            sysid.Parameter("geom_friction", ("floor", "box"), index=0),
            sysid.Parameter("geom_solref", ("floor", "box")),
        ],
        "dt": 0.005,
        "seconds": 1.0,
        "recordings": 3,
    },
    "ball": {
        "spec": lambda: mujoco.MjSpec.from_file(str(scenes.path("sysid_ball"))),
        "params": lambda: [sysid.Parameter("geom_size", "ball", index=0), sysid.Parameter("geom_solref", "ball")],
        "dt": 0.005,
        "seconds": 1.0,
        "recordings": 3,
    },
    "finger": {
        "spec": _finger,
        "params": lambda: [
            sysid.Parameter("dof_damping", "IFmcp"),
            sysid.Parameter("dof_damping", "IFpip"),
            sysid.Parameter("actuator_dynprm", MUSCLES, index=0),
            sysid.Parameter("actuator_dynprm", MUSCLES, index=1),
        ],
        "dt": 0.01,
        "seconds": 2.0,
        "recordings": 2,
    },
    # contact-rich models of the fair-peer study (experiments.sysid_peer), not of this study's default run
    "finger_box": {
        "spec": lambda: mujoco.MjSpec.from_file(str(scenes.path("sysid_finger"))),
        "params": lambda: [
            sysid.Parameter("dof_damping", "knuckle"),
            sysid.Parameter("dof_damping", "joint"),
            sysid.Parameter("actuator_kp", "knuckle"),
            sysid.Parameter("actuator_kp", "joint"),
            sysid.Parameter("body_mass", "box"),
            sysid.Parameter("geom_friction", ("floor", "proximal", "distal", "box"), index=0),
        ],
        "dt": 0.01,
        "seconds": 1.0,
        "recordings": 4,  # kp="3" kv="0.3" and kp="2" kv="0.2": pushes and strikes
    },
    "legged": {
        "spec": lambda: mujoco.MjSpec.from_file(str(scenes.path("sysid_legged"))),
        "params": lambda: [
            sysid.Parameter("geom_friction", LEGGED_GEOMS, index=0),
            sysid.Parameter("geom_solref", LEGGED_GEOMS, index=0),
            sysid.Parameter("body_mass", "torso"),
            sysid.Parameter("dof_damping", ("front_hip", "back_hip")),
        ],
        "dt": 0.01,
        "seconds": 1.0,
        "recordings": 3,
    },
}


# ------------------------------------------------------------------------------------------ data
def _controls(m: mujoco.MjModel, n: int, rng: np.random.Generator, hold: int = 5) -> np.ndarray:
    """Piecewise-constant random controls (a new value every ``hold`` samples) inside ``ctrlrange``."""
    if not m.nu:
        return np.zeros((n, 0))
    lo, hi = np.asarray(m.actuator_ctrlrange).T
    lo, hi = np.where(m.actuator_ctrllimited, lo, -1.0), np.where(m.actuator_ctrllimited, hi, 1.0)
    k = -(-n // hold)
    u = rng.uniform(lo, hi, size=(k, m.nu))
    return np.repeat(u, hold, axis=0)[:n]


def _initial_state(name: str, m: mujoco.MjModel, d: mujoco.MjData, rng: np.random.Generator) -> None:
    """A random start: a throw for the box and the ball, a random pose for the arm and finger."""
    mujoco.mj_resetData(m, d)
    if name == "box":
        q = rng.normal(size=4)
        d.qpos[:] = [rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1), rng.uniform(0.1, 0.25), *(q / np.linalg.norm(q))]
        d.qvel[:] = [*rng.uniform(-1.5, 1.5, 2), rng.uniform(-1, 0.5), *rng.uniform(-10, 10, 3)]
    elif name == "ball":
        d.qpos[:3] = [rng.uniform(0.0, 0.3), rng.uniform(-0.2, 0.2), rng.uniform(0.3, 0.6)]
        d.qvel[:] = [rng.uniform(2.0, 3.5), rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 1.5), *rng.uniform(-10, 10, 3)]
    elif name == "finger_box":  # the finger raised or lowered, the box somewhere under its reach, apart
        box = m.body("box").id
        for _ in range(1000):
            d.qpos[:2] = [rng.uniform(0.0, 1.2), rng.uniform(0.0, 1.5)]
            d.qpos[2] = rng.uniform(0.09, 0.13)
            mujoco.mj_forward(m, d)
            touching = [{m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]} for c in d.contact[: d.ncon]]
            if all(b == {0, box} for b in touching):  # only the box on the floor: the finger touches nothing yet
                break
    elif name == "legged":  # dropped from 0 to 5 cm with a forward speed, legs apart
        d.qpos[2] += rng.uniform(0.0, 0.05)
        d.qpos[7:] = rng.uniform(-0.5, 0.5, 2)
        d.qvel[0] = rng.uniform(0.5, 1.5)
    else:
        lo, hi = np.asarray(m.jnt_range).T
        lo, hi = np.where(m.jnt_limited, lo, -1.0), np.where(m.jnt_limited, hi, 1.0)
        d.qpos[:] = rng.uniform(0.8 * lo + 0.2 * hi, 0.2 * lo + 0.8 * hi)


def record(name: str, truth: mujoco.MjModel, seed: int, noise: bool, step: float | None = None) -> sysid.Recording:
    """One recording of the "real system": the C engine at the true values, RK4 at ``GEN_STEP``
    (or ``step``; :meth:`diffmjx.sysid.Recording.simulate`), with noise added if asked."""
    spec = MODELS[name]
    d = mujoco.MjData(truth)
    rng = np.random.default_rng([seed, 7])
    _initial_state(name, truth, d, rng)
    ctrl = _controls(truth, round(spec["seconds"] / spec["dt"]), rng)
    rec = sysid.Recording.simulate(
        truth,
        ctrl,
        spec["dt"],
        qpos0=d.qpos,
        qvel0=d.qvel,
        step=GEN_STEP if step is None else step,
        name=f"{name}-{seed}",
    )
    if not noise:
        return dataclasses.replace(rec, sensordata=None)
    nrng = np.random.default_rng([seed, 11])
    qvel = rec.qvel + NOISE["qvel"] * nrng.normal(size=rec.qvel.shape)
    qpos = np.array(rec.qpos)
    for k in range(len(qpos)):  # position noise in the tangent space: quaternions stay unit
        mujoco.mj_integratePos(truth, qpos[k], NOISE["qpos"] * nrng.normal(size=truth.nv), 1.0)
    return dataclasses.replace(rec, qpos=qpos, qvel=qvel, sensordata=None)


# --------------------------------------------------------------------------------------- evaluation
def heldout_error(m: mujoco.MjModel, rec: sysid.Recording, fine: bool = False) -> float:
    """RMS of the position and orientation residual of ``HORIZON``-step predictions by the C engine
    (the model's own timestep, or with ``fine`` the "real system"'s RK4 at ``GEN_STEP``; controls held
    over each sample period) from every ``STRIDE``-th sample."""
    from diffmjx.physics.manifold import JointLayout
    from diffmjx.sysid.problem import Weights, state_residuals

    if fine:
        m = copy.deepcopy(m)
        m.opt.timestep = GEN_STEP
        m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    rec = rec.check(m)
    sub = round(rec.dt / m.opt.timestep)
    d = mujoco.MjData(m)
    layout = JointLayout.from_model(m)
    sq, count = 0.0, 0
    for s in range(0, rec.T - HORIZON + 1, STRIDE):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = rec.qpos[s], rec.qvel[s]
        if rec.act is not None:
            d.act[:] = rec.act[s]
        pred = []
        for k in range(HORIZON):
            d.ctrl[:] = rec.ctrl[s + k]
            for _ in range(sub):
                mujoco.mj_step(m, d)
            pred.append(d.qpos.copy())
        r = state_residuals(
            layout, np.array(pred), None, rec.qpos[s + 1 : s + 1 + HORIZON], None, Weights(velocity=0.0), xp=np
        )
        sq += float(np.sum(r**2))
        count += r.shape[0]
    return math.sqrt(sq / count)


def perturbed(ps: sysid.ParameterSet, seed: int) -> np.ndarray:
    """Start values: every component 30-50 % off the truth, random sign (seeded)."""
    rng = np.random.default_rng([seed, 3])
    size = rng.uniform(0.3, 0.5, ps.size)
    sign = rng.choice([-1.0, 1.0], ps.size)
    return ps.start * (1 + sign * size)


def run_case(name: str, seed: int, noise: bool, methods, cfg, fit) -> list[dict]:
    """Every method's fit of one model from one start on one data set: rows of the summary table."""
    spec = MODELS[name]["spec"]()
    truth = spec.compile()
    params = MODELS[name]["params"]()
    ps_truth = sysid.ParameterSet(truth, params, spec=spec)
    recs = [record(name, truth, 100 * seed + k, noise) for k in range(MODELS[name]["recordings"])]
    held = record(name, truth, 100 * seed + 99, noise)
    start_model = ps_truth.write(perturbed(ps_truth, seed))
    true_values = ps_truth.start
    rows = []
    floor = heldout_error(truth, held)
    for method in methods:
        t = time.perf_counter()
        if method == "diffmjx_lm":
            res = sysid.identify(start_model, params, recs, held_out=[held], cfg=cfg, fit=fit, progress=False)
            model, iters, setup = res.model, len(res.history.step), res.setup_s
        else:
            res = sysid.identify_mujoco_sysid(start_model, params, recs, fit=fit)
            model, iters, setup = res.model, res.iterations, math.nan
        wall = time.perf_counter() - t
        est = sysid.ParameterSet(model, params).start
        start = sysid.ParameterSet(start_model, params).start
        rel = np.abs(est / true_values - 1)
        rows.append(
            {
                "model": name,
                "noise": int(noise),
                "seed": seed,
                "method": method,
                "labels": list(ps_truth.labels),
                "true": true_values.tolist(),
                "start": start.tolist(),
                "estimate": est.tolist(),
                "max_rel_error": float(rel.max()),
                "heldout_rms": heldout_error(model, held),
                "heldout_truth": floor,
                "heldout_rms_fine": heldout_error(model, held, fine=True),
                "wall_s": wall,
                "setup_s": setup,
                "iterations": iters,
            }
        )
    return rows


# ------------------------------------------------------------------------------------------ output
SUMMARY = (
    "model",
    "noise",
    "seed",
    "method",
    "max_rel_error",
    "heldout_rms",
    "heldout_truth",
    "heldout_rms_fine",
    "wall_s",
    "setup_s",
    "iterations",
)
PARAMS = ("model", "noise", "seed", "method", "parameter", "true", "start", "estimate", "rel_error")


def write_csv(rows: list[dict], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    summary, per_param = out / "sysid_recovery_summary.csv", out / "sysid_recovery.csv"
    with summary.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY)
        for r in rows:
            w.writerow([f"{r[k]:.6g}" if isinstance(r[k], float) else r[k] for k in SUMMARY])
    with per_param.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PARAMS)
        for r in rows:
            for lab, tv, sv, ev in zip(r["labels"], r["true"], r["start"], r["estimate"]):
                w.writerow(
                    [
                        r["model"],
                        r["noise"],
                        r["seed"],
                        r["method"],
                        lab,
                        f"{tv:.9g}",
                        f"{sv:.9g}",
                        f"{ev:.9g}",
                        f"{abs(ev / tv - 1):.6g}",
                    ]
                )
    return summary, per_param


def plot(summary: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with summary.open() as f:
        rows = list(csv.DictReader(f))
    models = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.4))
    colors = {"diffmjx_lm": "tab:blue", "mujoco_sysid": "tab:orange"}
    labels = {"diffmjx_lm": "DiffMJX (LM)", "mujoco_sysid": "mujoco.sysid"}
    panels = (
        ("max_rel_error", "largest relative parameter error"),
        ("heldout_rms", "held-out error, C engine at the model's timestep"),
        ("heldout_rms_fine", "held-out error, C engine at the fine step"),
        ("wall_s", "wall time of the fit (s)"),
    )
    for ax, (key, title) in zip(axes, panels):
        for j, method in enumerate(methods):
            for noise, marker in ((0, "o"), (1, "^")):
                xs, ys = [], []
                for i, model in enumerate(models):
                    for r in rows:
                        if r["model"] == model and r["method"] == method and int(r["noise"]) == noise:
                            xs.append(i + (j - 0.5) * 0.36 + (noise - 0.5) * 0.14)
                            ys.append(max(float(r[key]), 1e-12))
                ax.scatter(
                    xs,
                    ys,
                    marker=marker,
                    color=colors.get(method),
                    alpha=0.8,
                    s=28,
                    label=f"{labels.get(method, method)}, {'noisy' if noise else 'noise-free'}",
                )
        if key == "max_rel_error":
            ax.axhline(0.02, color="0.5", lw=0.8, ls="--")
            ax.text(-0.45, 0.025, "2 %", color="0.4", ha="left", va="bottom", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(models)), models)
        ax.set_xlim(-0.6, len(models) - 0.4)
        ax.set_title(title, fontsize=9.5)
        ax.grid(axis="y", alpha=0.3, which="major")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.suptitle(
        "Recovering known parameters from starts 30-50 % off (each point: one start and data set)", fontsize=11
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(png, dpi=130)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="arm,box,ball,finger")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--methods", default="diffmjx_lm,mujoco_sysid")
    p.add_argument("--noise", default="0,1", help="0: noise-free, 1: noisy")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="simulation overrides")
    p.add_argument("--fit", action="append", default=[], metavar="KEY=VALUE", help="fit.* overrides")
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args(argv)
    summary, png = args.out / "sysid_recovery_summary.csv", args.out / "sysid_recovery.png"
    if not args.plot_only:
        diffmjx.enable_compilation_cache()
        cfg = diffmjx.Config().override(*SIM, *args.set)
        fit = sysid.FitConfig(horizon=HORIZON, stride=STRIDE, steps=30).override(*args.fit)
        from tqdm.auto import tqdm

        cases = [
            (m, s, bool(int(n)))
            for m in args.models.split(",")
            for n in args.noise.split(",")
            for s in range(args.seeds)
        ]
        rows = []
        for name, seed, noise in tqdm(cases, desc="recovery"):
            key = (name, seed, noise, args.methods, cfg.to_dict(), fit.to_dict(), "v2")
            rows += common.stage(
                "sysid_recovery",
                key,
                functools.partial(run_case, name, seed, noise, args.methods.split(","), cfg, fit),
                fresh=args.fresh,
            )
            write_csv(rows, args.out)
        for r in rows:
            print(f"{r['model']:7s} noise={r['noise']} seed={r['seed']} {r['method']:13s} max err "
                  f"{100 * r['max_rel_error']:7.3f} %  held-out {r['heldout_rms']:.3g} (truth {r['heldout_truth']:.3g})"
                  f"  {r['wall_s']:6.1f} s")  # fmt: skip
    plot(summary, png)
    print(f"wrote {summary}, {png}")


if __name__ == "__main__":
    main()
