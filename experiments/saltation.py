"""Gradients through touchdowns with MuJoCo's default impedance: the saltation term, measured.

    python -m experiments.saltation [--shots 12] [--scenes ball,box,...] [--fresh] [--plot-only] [--cost]

MuJoCo's default ``solimp`` (and ``solimplimit``) starts at 0.9: a contact's force switches on with
a jump the instant its distance crosses zero, and a limit's at the end of its range. The derivative
of the solve misses what the jump adds unless it carries the saltation term
(``integrator.saltation``, :mod:`diffmjx.integration.saltation`). Five scenes, none of them set up
for this (every ``solimp`` left at MuJoCo's default; box-box contacts, which the term leaves out,
are not among them):

- ``ball``: a sphere thrown onto the floor with spin (rolling with friction after the bounce);
- ``box``: a box tossed tumbling onto the floor (corners touching down one after another);
- ``capsule``: a capsule tossed onto the floor;
- ``stops``: a double pendulum swung into both hinges' range limits (no contacts);
- ``finger_box``: the shipped ``sysid_finger`` scene (a two-link finger on position servos over a
  free box), random servo targets from a random pose, the box settled on the floor.

``--cost`` measures what the term costs instead (``saltation_cost.csv``): the gradient's compile
time and run time on the box's first shot, per mode, with and without it, in one process on this
machine.

Each shot (``--shots`` random starts per scene, 6 for the finger) takes the gradient of a fixed random weighting of
the final ``qpos`` and ``qvel`` after 0.3 s by the initial ``qvel``, at ``diffmjx.Config()``'s
tolerances, in each gradient mode that carries the term (``backsolve``, the default;
``checkpoint``; ``forward``), with and without it, against central differences of a converged
solve (rtol = atol = 1e-11). The reference is taken twice, with steps ``EPS`` and ``EPS_CHECK``; a
shot where the two differ by more than 1 % has no converged reference (the final state is not
differentiable at that scale, e.g. a contact grazing) and is left out of the summary. Writes
``docs/results/saltation.csv`` (one row per shot and method: the relative error, the reference's
norm, spread and whether it converged), ``saltation_summary.csv`` (median and worst per scene and method over the shots
with a converged reference) and ``saltation.png``. Results are cached (``~/.cache/diffmjx/stages``); ``--fresh``
recomputes, ``--plot-only`` redraws from the CSV.
"""

from __future__ import annotations

import argparse
import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import diffmjx
from diffmjx import scenes
from diffmjx.integration import saltation
from experiments import common

SECONDS = 0.3
METHODS = (
    ("backsolve", True),
    ("backsolve", False),
    ("checkpoint", True),
    ("checkpoint", False),
    ("forward", True),
    ("forward", False),
)
REFERENCE = ("integrator.rtol=1e-11", "integrator.atol=1e-11", "integrator.adjoint=forward", "integrator.dto_tighten=1")
EPS = 1e-6
EPS_CHECK = 1e-5  # the reference again at this step: where the two differ, the map is not smooth at that scale
CONVERGED = 0.01  # a shot's reference counts as converged where the two differ by at most this (relative)
SETTLE_S = 1.0  # the finger's box settles this long on the floor (the C engine, the finger held) before a shot
VERSION = {"finger_box": ("settled", "capsule_box=spheres")}  # shots or defaults changed since first cached

_FREE = """<mujoco><option timestep="0.01"/><worldbody><geom name="floor" type="plane" size="0 0 1"/>{extra}
<body name="thrown" pos="0 0 0.3"><freejoint/><geom name="thrown" {geom} mass="0.2"/></body></worldbody></mujoco>"""
XML = {
    "ball": _FREE.format(extra="", geom='type="sphere" size="0.05"'),
    "box": _FREE.format(extra="", geom='type="box" size="0.05 0.04 0.03"'),
    "capsule": _FREE.format(extra="", geom='type="capsule" fromto="-0.06 0 0 0.06 0 0" size="0.025"'),
    "stops": """<mujoco><option timestep="0.01"/><worldbody><body pos="0 0 1">
<joint name="shoulder" type="hinge" axis="0 1 0" range="-0.4 0.4"/><geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02"/>
<body pos="0 0 -0.3"><joint name="elbow" type="hinge" axis="0 1 0" range="-0.5 0.5"/>
<geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.02"/></body></body></worldbody></mujoco>""",
}
SCENES = ("ball", "box", "capsule", "stops", "finger_box")  # box-box contacts: the term leaves them out
SHOTS = {"finger_box": 6}  # shots per scene where not the --shots default: the finger's gradients take ~10x longer


@functools.cache
def model(scene: str) -> mujoco.MjModel:
    if scene == "finger_box":
        return mujoco.MjModel.from_xml_path(str(scenes.path("sysid_finger")))
    return mujoco.MjModel.from_xml_string(XML[scene])


def shot(scene: str, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(qpos, qvel, ctrl)`` of shot ``k``: a random throw, swing or pose and servo targets."""
    m = model(scene)
    rng = np.random.default_rng([k, 17])
    qpos, qvel = m.qpos0.copy(), np.zeros(m.nv)
    periods = round(SECONDS / m.opt.timestep)
    ctrl = np.zeros((periods, m.nu))
    if scene == "stops":
        qpos[:] = rng.uniform(-0.3, 0.3, 2)
        qvel[:] = rng.uniform(-4, 4, 2)
    elif scene == "finger_box":  # a pose where the finger touches nothing, the box resting on the floor
        d = mujoco.MjData(m)
        box = m.body("box").id
        for _ in range(1000):
            qpos[:2] = rng.uniform([0.0, 0.0], [1.2, 1.5])
            qpos[2] = rng.uniform(0.09, 0.14)  # the box's x
            d.qpos[:] = qpos
            mujoco.mj_forward(m, d)
            if all({m.geom_bodyid[c.geom1], m.geom_bodyid[c.geom2]} == {0, box} for c in d.contact[: d.ncon]):
                break
        # resting: settled into the floor under its weight. Placed with its corners at zero distance
        # instead, all four touch down at t = 0, where the final state is not differentiable (one-sided
        # derivatives by the initial velocity differ: central differences at 1e-5 and 1e-7 did by 17 %)
        d.qvel[:] = 0.0
        for _ in range(round(SETTLE_S / m.opt.timestep)):
            mujoco.mj_step(m, d)
            d.qpos[:2], d.qvel[:2] = qpos[:2], 0.0
        qpos, qvel = d.qpos.copy(), d.qvel.copy()
        lo, hi = m.actuator_ctrlrange.T
        ctrl[:] = np.repeat(rng.uniform(lo, hi, (periods // 5 + 1, m.nu)), 5, axis=0)[:periods]
    else:
        q = rng.normal(size=4)
        qpos[3:7] = q / np.linalg.norm(q)
        qvel[:] = [*rng.uniform(-0.5, 0.5, 2), rng.uniform(-2.0, 0.0), *rng.uniform(-8, 8, 3)]
    return qpos, qvel, ctrl


@functools.cache
def _mjx_model(scene: str):
    with jax.ensure_compile_time_eval():
        return common.mjx.put_model(model(scene))


def final_value(scene: str, cfg: diffmjx.Config):
    """``(qpos0, qvel0, ctrl) -> w . [qpos, qvel]`` at the end of the shot, ``w`` fixed per scene."""
    m = _mjx_model(scene)
    w = jnp.asarray(np.random.default_rng(list(map(ord, scene))).normal(size=m.nq + m.nv))

    def f(qpos, qvel, ctrl):
        d = common.mjx.make_data(m).replace(qpos=qpos, qvel=qvel)
        d1, _ = diffmjx.rollout(m, d, ctrl, cfg)
        return jnp.dot(jnp.concatenate([d1.qpos, d1.qvel]), w)

    return f


@functools.cache
def _reference_fn(scene: str):
    f = final_value(scene, diffmjx.Config().override(*REFERENCE))
    nv = model(scene).nv
    steps = jnp.concatenate([e * s * jnp.eye(nv) for e in (EPS, EPS_CHECK) for s in (1.0, -1.0)])
    return jax.jit(lambda qpos, qvel, ctrl: jax.vmap(lambda s: f(qpos, qvel + s, ctrl))(steps))


def reference(scene: str, k: int) -> np.ndarray:
    """Central differences of the converged solve by the initial ``qvel``: (2, nv), at ``EPS`` and at
    ``EPS_CHECK``."""
    qpos, qvel, ctrl = shot(scene, k)
    values = np.asarray(_reference_fn(scene)(qpos, qvel, ctrl)).reshape(2, 2, -1)
    return (values[:, 0] - values[:, 1]) / (2 * np.array([EPS, EPS_CHECK]))[:, None]


@functools.cache
def _gradient_fn(scene: str, adjoint: str, salt: bool):
    cfg = diffmjx.Config().override(f"integrator.adjoint={adjoint}", f"integrator.saltation={salt}")
    f = final_value(scene, cfg)
    diff = jax.jacfwd if adjoint == "forward" else jax.grad
    return jax.jit(diff(f, argnums=1))


def gradient(scene: str, k: int, adjoint: str, salt: bool) -> np.ndarray:
    """The gradient of shot ``k`` by the initial ``qvel`` at ``diffmjx.Config()`` with ``adjoint``."""
    return np.asarray(_gradient_fn(scene, adjoint, salt)(*shot(scene, k)))


def run(scene: str, shots: int, fresh: bool) -> list[dict]:
    from tqdm.auto import tqdm

    rows = []
    for k in tqdm(range(shots), desc=scene, leave=False):
        key = (scene, k, SECONDS, *VERSION.get(scene, ()))
        both = common.stage(
            "saltation_reference", (*key, REFERENCE, EPS, EPS_CHECK), functools.partial(reference, scene, k), fresh
        )
        ref = both[0]
        spread = float(np.linalg.norm(both[1] - ref) / max(np.linalg.norm(ref), 1e-300))
        for adjoint, salt in METHODS:
            grad = functools.partial(gradient, scene, k, adjoint, salt)
            term = ("events", saltation.EVENTS) if salt else ()  # the term's version: crossings per step
            if adjoint == "backsolve":  # its backward solve has run kink control since Dec 6 (stage brackets later)
                term = (*term, "backward kink step", diffmjx.Config().integrator.backward_kink_step(), "stage brackets")
            elif adjoint in ("checkpoint", "forward"):  # its forward solve bisects the stages' brackets (later)
                term = (*term, "forward stage brackets")
            g = common.stage("saltation_gradient", (*key, adjoint, salt, *term), grad, fresh)
            err = float(np.linalg.norm(g - ref) / max(np.linalg.norm(ref), 1e-300))
            rows.append(
                {
                    "scene": scene,
                    "shot": k,
                    "adjoint": adjoint,
                    "saltation": salt,
                    "rel_error": err,
                    "reference_norm": float(np.linalg.norm(ref)),
                    "reference_spread": spread,
                    "reference_converged": spread <= CONVERGED,
                }
            )
    return rows


def converged(row: dict) -> bool:
    """Whether the shot's reference converged: central differences at ``EPS`` and ``EPS_CHECK`` agree
    (to ``CONVERGED``; a row read back from the CSV holds a string)."""
    return str(row["reference_converged"]) == "True"


def summary(rows: list[dict]) -> list[dict]:
    """Per scene and method: the errors' median, worst and count within 1 % over the shots whose
    reference converged (the others' errors measure nothing), and how many those are."""
    out = []
    for scene in dict.fromkeys(r["scene"] for r in rows):
        for adjoint, salt in METHODS:
            mine = [
                r for r in rows if r["scene"] == scene and r["adjoint"] == adjoint and str(r["saltation"]) == str(salt)
            ]
            if not mine:
                continue
            errs = [float(r["rel_error"]) for r in mine if converged(r)]
            out.append(
                {
                    "scene": scene,
                    "adjoint": adjoint,
                    "saltation": salt,
                    "shots": len(mine),
                    "converged_shots": len(errs),
                    "median_rel_error": float(np.median(errs)) if errs else math.nan,
                    "worst_rel_error": float(np.max(errs)) if errs else math.nan,
                    "within_1pct": int(sum(e <= 0.01 for e in errs)),
                }
            )
    return out


def plot(rows: list[dict], png: Path) -> None:
    """Per scene, each shot's relative gradient error per gradient mode, with and without the term."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter

    scenes_ = list(dict.fromkeys(r["scene"] for r in rows))
    fig, axes = plt.subplots(1, len(scenes_), figsize=(2.3 * len(scenes_) + 1, 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    modes = list(dict.fromkeys(a for a, _ in METHODS))
    for ax, scene in zip(axes, scenes_):
        for i, adjoint in enumerate(modes):
            for salt, color, dx in ((True, "tab:blue", -0.15), (False, "tab:red", 0.15)):
                mine = [
                    r
                    for r in rows
                    if r["scene"] == scene and r["adjoint"] == adjoint and str(r["saltation"]) == str(salt)
                ]
                errs = np.array([max(float(r["rel_error"]), 1e-6) for r in mine])
                ok = np.array([converged(r) for r in mine], dtype=bool)
                x = i + dx + np.random.default_rng(i).uniform(-0.06, 0.06, len(errs))
                label = "with the saltation term (integrator.saltation=true)" if salt else "without (the default)"
                ax.scatter(x[ok], errs[ok], s=14, color=color, alpha=0.75, label=label if i == 0 else None)
                ax.scatter(x[~ok], errs[~ok], s=14, facecolors="none", edgecolors=color, alpha=0.75)
        ax.axhline(0.01, color="0.6", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=12))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(range(len(modes)), modes, fontsize=8)
        ax.set_xlim(-0.6, len(modes) - 0.4)
        ax.set_title(scene, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("relative gradient error vs central differences")
    handles, labels = axes[0].get_legend_handles_labels()
    if not all(converged(r) for r in rows):
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], ls="", marker="o", mfc="none", mec="0.3", ms=4))
        labels.append(
            f"hollow: reference not converged (central differences at {EPS:g} and {EPS_CHECK:g} differ by > 1 %)"
        )
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(
        "Gradient of the final state by the initial velocity, MuJoCo's default solimp (0.9 at touch)", fontsize=10
    )
    common.save_figure(fig, png, rect=(0, 0.07, 1, 1))


def _release_programs() -> None:
    """Drop the compiled programs of the scene just measured: the programs of all five scenes
    outgrew one process (LLVM ran out of memory maps in the finger's, Dec 6)."""
    import gc

    _reference_fn.cache_clear()
    _gradient_fn.cache_clear()
    jax.clear_caches()
    gc.collect()


COST_SCENES = ("box",)


def cost(scenes=COST_SCENES) -> list[dict]:
    """What the term costs: per scene, gradient mode and setting, the gradient's compile time (trace,
    lower, compile; the persistent cache off) and its median run time on shot 0, in this process."""
    import time

    rows = []
    for scene in scenes:
        qpos, qvel, ctrl = shot(scene, 0)
        for adjoint, salt in METHODS:
            cfg = diffmjx.Config().override(f"integrator.adjoint={adjoint}", f"integrator.saltation={salt}")
            diff = jax.jacfwd if adjoint == "forward" else jax.grad
            fn = jax.jit(diff(final_value(scene, cfg), argnums=1))
            t = time.perf_counter()
            compiled = fn.trace(qpos, qvel, ctrl).lower().compile()
            compile_s = time.perf_counter() - t
            run_s = common.median_time(compiled, qpos, qvel, ctrl)
            rows.append({"scene": scene, "adjoint": adjoint, "saltation": salt, "compile_s": compile_s, "run_s": run_s})
            print(rows[-1], flush=True)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shots", type=int, default=12)
    p.add_argument("--scenes", default=",".join(SCENES))
    p.add_argument("--out", type=Path, default=common.RESULTS)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--plot-only", action="store_true")
    p.add_argument("--cost", action="store_true", help="only the cost part (saltation_cost.csv): compile and run times")
    args = p.parse_args(argv)
    csv_path, summary_path, png = (args.out / f"saltation{s}" for s in (".csv", "_summary.csv", ".png"))
    if args.plot_only:
        import csv

        with open(csv_path) as f:
            plot(list(csv.DictReader(f)), png)
        return
    common.setup()
    if args.cost:
        jax.config.update("jax_enable_compilation_cache", False)  # every compile timed from scratch
        common.write_csv(args.out / "saltation_cost.csv", cost())
        return
    unknown = sorted(set(args.scenes.split(",")) - set(SCENES))
    if unknown:
        p.error(f"--scenes: {', '.join(unknown)} unknown; choose from {', '.join(SCENES)}")
    import csv

    def key(r: dict) -> tuple:
        return r["scene"], int(r["shot"]), r["adjoint"], str(r["saltation"])

    old = []
    if csv_path.exists():
        with open(csv_path) as f:
            old = list(csv.DictReader(f))
    rows = []
    for scene in args.scenes.split(","):  # a run of some scenes keeps the CSV's others
        rows += run(scene, SHOTS.get(scene, args.shots), args.fresh)
        merged = sorted(common.replaced_rows(old, rows, key), key=lambda r: SCENES.index(r["scene"]))
        common.write_csv(csv_path, merged)
        _release_programs()
    rows = merged
    table = summary(rows)
    common.write_csv(summary_path, table)
    plot(rows, png)
    for r in table:
        print(r)
    if not all(math.isfinite(float(r["rel_error"])) for r in rows):
        print("some gradients were not finite")


if __name__ == "__main__":
    main()
