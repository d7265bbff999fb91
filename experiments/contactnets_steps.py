"""Where the adaptive steps of a whole ContactNets toss go, and why.

    python -m experiments.contactnets_steps [--tosses K] [--out DIR]

Whole-toss rollouts are what the extended identification scores its snapshots with, and they cost
far more per simulated second than the cube-toss demo. This study rolls ``K`` held-out tosses (the
first of the selection half of the validation split) out with the pre-tuned cube
(``experiments.contactnets.CubeParams()``) in three simulation settings:

- ``paper``: the sysid presets' setting (Tsit5, PID, rtol = atol = 1e-5, the model's 2-iteration
  Newton solve, MJX's plane-box rule and impedance floor) with CFD, as the extended study scores;
- ``library``: the same integrator with the library's converged constraint solve and plane-box
  rule (the Fig. 9 study's ``diffmjx_cfd_library``);
- ``library, elliptic``: the same with MuJoCo's elliptic friction cone instead of the dataset's
  pyramidal one (a modelling change, not a fix: shown to locate the cause; without CFD, which
  supports pyramidal cones only and leaves a forward rollout unchanged anyway).

Each control period is put in a phase by the simulated cube's state at its end: *flight* (lowest
corner more than 2 mm above the table), *face, sliding* and *face, resting* (touching, with a
face within 5 degrees of the table's plane; sliding if it moves faster than 2 cm/s or turns faster
than 0.2 rad/s) and *edge or corner* (every other contact). The accepted and rejected steps of
every period are summed per phase. MuJoCo's C engine rolls the same tosses out with each cone
(RK4 at 68 steps per period, about 0.1 ms; 100 Newton iterations to 1e-12; its own collision
functions), its periods put in phases by its own state, and counts how often its number of
contacts changes within each period: with a pyramidal cone, MuJoCo's own dynamics of a cube
sliding on a face are micro-bounces (corners leaving and touching the table), which an
error-controlled integrator must resolve.

Writes to ``docs/results/``: ``contactnets_steps.csv`` (one row per toss, setting and period),
``contactnets_steps_summary.csv`` (per setting and phase: periods, steps, steps per period, share of
all steps; for the C engine, contact-count changes per period) and ``contactnets_steps.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx

import diffmjx
from experiments import common
from experiments import contactnets as cn
from experiments.contactnets_sysid import LIBRARY_SOLVE

SETTINGS = {  # name -> (overrides of the sysid paper preset, MuJoCo cone)
    "paper": (common.PAPER_CFD, mujoco.mjtCone.mjCONE_PYRAMIDAL),
    "library": ((*common.PAPER_CFD, *LIBRARY_SOLVE), mujoco.mjtCone.mjCONE_PYRAMIDAL),
    # CFD and the implicit solver gradient are for pyramidal cones; neither changes a forward rollout
    "library, elliptic": ((*LIBRARY_SOLVE, "solver.gradient=unroll"), mujoco.mjtCone.mjCONE_ELLIPTIC),
}
PHASES = ("flight", "edge or corner", "face, sliding", "face, resting")
C_SUB = 68  # the C engine's RK4 steps per control period (about 0.1 ms each)
C_ITERATIONS, C_TOLERANCE = 100, 1e-12  # its converged Newton solve


def _corners(side: float) -> np.ndarray:
    h = side / 2
    return np.array([[x, y, z] for x in (-h, h) for y in (-h, h) for z in (-h, h)])


def phases(qpos: np.ndarray, qvel: np.ndarray, side: float) -> list[str]:
    """The phase of every state (see the module docstring)."""
    out = []
    corners = _corners(side)
    for q, v in zip(qpos, qvel, strict=True):
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, q[3:7])
        rot = rot.reshape(3, 3)
        low = float(np.min(q[2] + corners @ rot[2]))
        tilt = np.degrees(np.arccos(min(1.0, float(np.max(np.abs(rot[2]))))))  # nearest body axis to the vertical
        if low > 2e-3:
            out.append("flight")
        elif tilt < 5.0:
            moving = np.linalg.norm(v[:2]) > 0.02 or np.linalg.norm(v[3:]) > 0.2
            out.append("face, sliding" if moving else "face, resting")
        else:
            out.append("edge or corner")
    return out


def c_engine_run(toss: cn.Toss, periods: int, cone: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The C engine's own rollout (RK4, :data:`C_SUB` steps per period, 100 Newton iterations to
    1e-12): per control period, how often its number of contacts changes, and the state at the
    period's end."""
    m = cn.cube_mjmodel(iterations=C_ITERATIONS)
    m.opt.tolerance, m.opt.integrator, m.opt.timestep = C_TOLERANCE, mujoco.mjtIntegrator.mjINT_RK4, cn.DT / C_SUB
    m.opt.cone = cone
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = toss.qpos[0], toss.qvel[0]
    mujoco.mj_forward(m, d)
    changes = np.zeros(periods, int)
    qpos, qvel = np.zeros((periods, 7)), np.zeros((periods, 6))
    last = d.ncon
    for k in range(periods):
        for _ in range(C_SUB):
            mujoco.mj_step(m, d)
            changes[k] += d.ncon != last
            last = d.ncon
        qpos[k], qvel[k] = d.qpos, d.qvel
    return changes, qpos, qvel


def run(n_tosses: int, out: Path) -> list[dict]:
    from tqdm.auto import tqdm

    base_cfg = cn.SysidConfig.load("paper", ())
    tosses, _, val_names, _ = cn.load_split(base_cfg.data)
    names = cn.selection_split(val_names)[0][:n_tosses]
    p = cn.CubeParams()
    side = float(p.side_length)
    rows = []
    for setting, (overrides, cone) in SETTINGS.items():
        cfg = cn.SysidConfig.load("paper", overrides)
        mm = cn.cube_mjmodel(iterations=cfg.iterations)
        mm.opt.cone = cone
        base = mjx.put_model(mm)
        m, d0 = cn.cube_mjx_model(p, base), mjx.make_data(base)

        def roll(q, v, n, m=m, d0=d0, cfg=cfg):
            return diffmjx.rollout(m, d0.replace(qpos=q, qvel=v), jnp.zeros((n, 0)), cfg.sim)[1]

        roll = jax.jit(roll, static_argnums=2)
        for name in tqdm(names, desc=setting):
            t = tosses[name]
            n = t.qpos.shape[0] - 1
            tr = roll(jnp.asarray(t.qpos[0]), jnp.asarray(t.qvel[0]), n)
            qpos, qvel = np.asarray(tr.qpos), np.asarray(tr.qvel)
            acc, rej = np.asarray(tr.stats.accepted), np.asarray(tr.stats.rejected)
            for k, ph in enumerate(phases(qpos, qvel, side)):
                rows.append(
                    {
                        "setting": setting,
                        "toss": name,
                        "period": k + 1,
                        "phase": ph,
                        "accepted": int(acc[k]),
                        "rejected": int(rej[k]),
                        "contact_changes": "",
                        "z_mm": 1e3 * qpos[k, 2],
                        "speed_m_s": float(np.linalg.norm(qvel[k, :2])),
                    }
                )
    # the C engine's own rollouts, each period put in a phase by the C engine's own state
    for cone_name, cone in (
        ("pyramidal", mujoco.mjtCone.mjCONE_PYRAMIDAL),
        ("elliptic", mujoco.mjtCone.mjCONE_ELLIPTIC),
    ):
        for name in names:
            t = tosses[name]
            n = t.qpos.shape[0] - 1
            key = (name, int(cone), C_SUB, C_ITERATIONS, C_TOLERANCE, common.param_key(p))
            changes, qpos, qvel = common.stage(
                "steps-c-engine", key, lambda t=t, n=n, c=int(cone): c_engine_run(t, n, c)
            )
            for k, ph in enumerate(phases(qpos, qvel, side)):
                rows.append(
                    {
                        "setting": f"C engine, {cone_name}",
                        "toss": name,
                        "period": k + 1,
                        "phase": ph,
                        "accepted": C_SUB,
                        "rejected": 0,
                        "contact_changes": int(changes[k]),
                        "z_mm": 1e3 * qpos[k, 2],
                        "speed_m_s": float(np.linalg.norm(qvel[k, :2])),
                    }
                )
    summary = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        rs = [r for r in rows if r["setting"] == setting]
        engine = setting.startswith("C engine")
        total = sum(r["accepted"] + r["rejected"] for r in rs)
        for ph in PHASES:
            sel = [r for r in rs if r["phase"] == ph]
            steps = sum(r["accepted"] + r["rejected"] for r in sel)
            summary.append(
                {
                    "setting": setting,
                    "phase": ph,
                    "periods": len(sel),
                    "accepted": sum(r["accepted"] for r in sel),
                    "rejected": sum(r["rejected"] for r in sel),
                    "steps_per_period": steps / len(sel) if sel else float("nan"),
                    "share_of_steps": steps / total,
                    "contact_changes_per_period": float(np.mean([r["contact_changes"] for r in sel]))
                    if engine and sel
                    else float("nan"),
                }
            )
    out.mkdir(parents=True, exist_ok=True)
    common.write_csv(out / "contactnets_steps.csv", rows)
    common.write_csv(out / "contactnets_steps_summary.csv", summary)
    _plot(rows, summary, names, out / "contactnets_steps.png")
    print(f"{'setting':<22} {'phase':<16} {'periods':>7} {'steps/period':>12} {'share':>6} {'contact changes':>15}")
    for s in summary:
        print(
            f"{s['setting']:<22} {s['phase']:<16} {s['periods']:>7} {s['steps_per_period']:>12.1f} "
            f"{100 * s['share_of_steps']:>5.0f}% {s['contact_changes_per_period']:>15.2f}"
        )
    return summary


def _plot(rows, summary, names, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [1.3, 1]})
    # the toss with the most steps in the library setting: steps per period along it
    lib = [r for r in rows if r["setting"] == "library"]
    worst = max(names, key=lambda n: sum(r["accepted"] + r["rejected"] for r in lib if r["toss"] == n))
    colours = {"paper": "tab:blue", "library": "tab:red", "library, elliptic": "tab:green"}
    shade = {"flight": "#e3edf7", "edge or corner": "0.85", "face, sliding": "#f6d7a7", "face, resting": "#cfe8cf"}
    ref = [r for r in lib if r["toss"] == worst]
    for r in ref:
        a.axvspan((r["period"] - 1) * cn.DT, r["period"] * cn.DT, color=shade[r["phase"]], lw=0)
    for setting, c in colours.items():
        rs = [r for r in rows if r["setting"] == setting and r["toss"] == worst]
        a.step(
            [r["period"] * cn.DT for r in rs],
            [r["accepted"] + r["rejected"] for r in rs],
            where="pre",
            color=c,
            label=setting,
        )
    for ph, col in shade.items():
        a.fill_between([], [], color=col, label=f"phase: {ph} (library)")
    a.set_yscale("log")
    a.set(xlabel="time (s)", ylabel="steps per control period (accepted + rejected)", title=f"{worst}, pre-tuned cube")
    a.legend(fontsize=7, loc="upper left")
    settings = list(colours)
    x = np.arange(len(PHASES))
    w = 0.8 / len(settings)
    for i, setting in enumerate(settings):
        vals = [
            next(x["steps_per_period"] for x in summary if x["setting"] == setting and x["phase"] == ph)
            for ph in PHASES
        ]
        b.bar(x + (i - (len(settings) - 1) / 2) * w, vals, w, color=colours[setting], label=setting)
    b.set_yscale("log")
    b.set_xticks(x, PHASES, fontsize=8)
    b.set(ylabel="steps per control period (mean)", title=f"{len(names)} held-out tosses, by phase")
    b.legend(fontsize=7)
    common.save_figure(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--tosses", type=int, default=8, help="held-out tosses to roll out (the first of the selection half)"
    )
    p.add_argument("--out", type=Path, default=common.RESULTS, help="where the CSV and PNG files go")
    args = p.parse_args(argv)
    common.setup()
    run(args.tosses, args.out)


if __name__ == "__main__":
    main()
