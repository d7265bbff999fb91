"""Box-box smoothing (smooth-collision issue): a box dropped onto a box, and what the blend costs.

    python -m experiments.box_box [--quick] [--set KEY=VALUE ...]

1. Drop (diffmjx/scenes/box_drop.xml, 0.6 s): the final pose with MJX's box-box, the smoothed one and the
   clipped one (``collision.box_box=clipped``, the default), against MuJoCo's C engine (its own
   box-box, RK4 at 1e-4 s) -> box_box_drop.csv.
2. Family: DROP_FAMILY random drops of the same box (orientation, height, horizontal velocity),
   final pose per rule against the C engine, and the C engine against itself at half the step
   -> box_box_family.{csv,png}.
3. Cost: MJX's box-box vs the smoothed one on N_POSES random contact poses of diffmjx/scenes/box_pair.xml
   (vmapped): first call (trace + compile) and median run -> box_box_timing.csv.
4. Gradient of loss = final x + final qpos[6] (a quaternion entry) w.r.t. the initial y velocity,
   over a sweep of vy0: AD with the preset (the library defaults) and each box-box rule, against
   central differences (steps FD_STEP and FD_STEP / 4) of a REF_TOL solve (``diffmjx.converged``) with the same rule, on
   the scene as authored (solimp[0] = 0.9, MuJoCo's default: the contact force jumps at every
   touchdown) and with solimp[0] = 0 (continuous touchdown) -> box_box_gradient.{csv,png}.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from diffmjx.scenes.boxes import DROP_PERIODS, N_POSES, drop_final_qpos, random_contact_poses
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "box_box.yaml"
REF_TOL = 1e-10
FD_STEP = 1e-4


def _drop_loss(mx, cfg: diffmjx.Config):
    """Loss of the gradient sweep: final x plus final qpos[6], as a function of vy0."""
    final_qpos = drop_final_qpos(mx, cfg)

    def loss(vy0):
        q = final_qpos(vy0)
        return q[0] + q[6]

    return loss


RULES = {  # the study's box-box collision functions: name -> overrides
    "MJX box-box": ("collision.smooth=false", "collision.box_box=mjx"),
    "smoothed box-box": ("collision.smooth=true",),
    "clipped box-box": ("collision.smooth=false", "collision.box_box=clipped"),
}


def drop_vs_c_engine(cfg: diffmjx.Config) -> list[dict]:
    mj, mx = common.load("box_drop")
    data = common.c_engine_rk4(mj, DROP_PERIODS * 0.01, 1e-4)
    rows = []
    for name, rule in RULES.items():
        q = np.asarray(jax.jit(drop_final_qpos(mx, cfg.override(*rule)))(0.0))
        rows.append(dict(collision=name, x=q[0], y=q[1], z=q[2], qw=q[3], qx=q[4], qy=q[5], qz=q[6],
                         position_off_c_engine_m=float(np.linalg.norm(q[:3] - data.qpos[:3])),
                         quaternion_off_c_engine=float(np.linalg.norm(q[3:] - data.qpos[3:]))))  # fmt: skip
    q = data.qpos
    rows.append(dict(collision="C engine (RK4 1e-4)", x=q[0], y=q[1], z=q[2], qw=q[3], qx=q[4], qy=q[5], qz=q[6],
                     position_off_c_engine_m=0.0, quaternion_off_c_engine=0.0))  # fmt: skip
    return rows


SCENES = {  # the gradient sweep's two versions of the drop scene: name -> solimp[0] of every geom (None: as authored)
    "solimp[0] = 0.9 (as authored)": None,
    "solimp[0] = 0": 0.0,
}


def drop_model(solimp0: float | None = None):
    """``mjx.Model`` of the drop scene; ``solimp0`` sets every geom's ``solimp[0]`` (the impedance at
    touch: MuJoCo's default 0.9 makes the contact force jump at every touchdown, 0 starts it from
    zero, see docs/solver.md)."""
    mj, _ = common.load("box_drop")
    if solimp0 is not None:
        mj.geom_solimp[:, 0] = solimp0
    return common.mjx.put_model(mj)


def gradient_sweep(cfg: diffmjx.Config, quick: bool) -> list[dict]:
    """AD with ``cfg`` (the preset: the library defaults) against central differences (steps FD_STEP
    and FD_STEP / 4, both reported) of a REF_TOL solve with the same collision function, per box-box
    rule and per version of the scene (:data:`SCENES`)."""
    vy0s = np.linspace(0.1, 0.5, 3 if quick else 9)
    rows = []
    for scene_name, solimp0 in SCENES.items():
        mx = drop_model(solimp0)
        for rule, overrides in RULES.items():
            ref = _drop_loss(mx, diffmjx.converged(cfg.override(*overrides), REF_TOL, max_steps=16384))
            vg = jax.jit(jax.value_and_grad(_drop_loss(mx, cfg.override(*overrides))))
            for v in tqdm(vy0s, desc=f"{scene_name}, {rule}"):
                fd = [float(x) for x in diffmjx.central_differences(ref, v, (FD_STEP, FD_STEP / 4), workers=2)[0][:, 0]]
                loss, grad = (float(x) for x in vg(v))
                rows.append(dict(scene=scene_name, method=rule, vy0=v, loss=loss, grad=grad, ref_grad=fd[0],
                                 ref_agreement=abs(fd[0] - fd[1]) / abs(fd[0]), rel_error=abs(grad - fd[0]) / abs(fd[0]),
                                 wrong_sign=bool(grad * fd[0] < 0)))  # fmt: skip
    return rows


DROP_FAMILY = 16  # random drops of the family (drop_family)


def drop_family(cfg: diffmjx.Config, n: int = DROP_FAMILY, seed: int = 0) -> list[dict]:
    """Trajectories on a family of box-on-box drops: the drop scene's box released from ``n`` random
    orientations, heights (3-6 cm above the table) and horizontal velocity components (within
    +-0.5 m/s; some boxes slide off the table and fall), 0.6 s, final position and quaternion
    per box-box rule against the C engine (RK4 at 1e-4 s). The row
    "C engine, RK4 at 5e-5 s" is the C engine against itself at half the step: how far apart two
    correct integrations of the same contacts end (the tumbles amplify any difference)."""
    mj, mx = common.load("box_drop")
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=(n, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    qpos = np.c_[rng.uniform(-0.03, 0.03, (n, 2)), np.zeros(n), quat]
    qvel = np.c_[rng.uniform(-0.5, 0.5, (n, 2)), np.zeros((n, 4))]
    d = mujoco.MjData(mj)
    for k in range(n):  # lowest corner 3-6 cm above the table's top (z = 0.1)
        d.qpos[:] = qpos[k]
        mujoco.mj_kinematics(mj, d)
        lowest = (d.geom_xmat[1].reshape(3, 3) @ (_CORNERS * mj.geom_size[1]).T)[2].min()
        qpos[k, 2] = 0.1 - lowest + rng.uniform(0.03, 0.06)
    d0 = common.mjx.make_data(mx)
    ctrls = jnp.zeros((DROP_PERIODS, 0))
    ref = np.stack([common.c_engine_rk4(mj, DROP_PERIODS * 0.01, 1e-4, qpos[k], qvel[k]).qpos for k in range(n)])
    finals = {"C engine, RK4 at 5e-5 s": np.stack([
        common.c_engine_rk4(mj, DROP_PERIODS * 0.01, 5e-5, qpos[k], qvel[k]).qpos for k in range(n)])}  # fmt: skip
    for name, rule in tqdm(RULES.items(), desc="drop family"):
        c = cfg.override(*rule)
        # one drop at a time: under vmap every drop would take the step sequence of the stiffest one
        fn = jax.jit(lambda q, v, c=c: diffmjx.rollout(mx, d0.replace(qpos=q, qvel=v), ctrls, c)[0].qpos)
        finals[name] = np.stack([np.asarray(fn(jnp.asarray(qpos[k]), jnp.asarray(qvel[k]))) for k in range(n)])
    rows = []
    for name, q in finals.items():
        for k in range(n):
            rows.append(dict(collision=name, drop=k, position_off_c_engine_m=float(np.linalg.norm(q[k, :3] - ref[k, :3])),
                             quaternion_off_c_engine=float(min(np.linalg.norm(q[k, 3:] - ref[k, 3:]),
                                                               np.linalg.norm(q[k, 3:] + ref[k, 3:]))),
                             z=float(q[k, 2]), c_engine_z=float(ref[k, 2])))  # fmt: skip
    return rows


_CORNERS = np.array([[a, b, c] for a in (-1, 1) for b in (-1, 1) for c in (-1, 1)], dtype=float)


def timing(n: int = N_POSES) -> list[dict]:
    """First call (cold: the persistent compilation cache is off meanwhile) and median run time."""
    cache = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        return _timing(n)
    finally:
        jax.config.update("jax_enable_compilation_cache", cache)


def _timing(n: int) -> list[dict]:
    _, mx = common.load("box_pair")
    qpos = random_contact_poses(mx, n)
    sharpness = diffmjx.Config().collision.sharpness
    rows = []
    for name, smooth in (("MJX box-box", False), ("smoothed box-box", True)):
        f = jax.jit(jax.vmap(common.contacts_fn(mx, smooth, sharpness)))
        t = time.perf_counter()
        jax.block_until_ready(f(qpos))
        first = time.perf_counter() - t
        run = common.median_time(f, qpos, repeats=7)
        rows.append(dict(collision=name, poses=n, first_call_s=first, run_ms=1e3 * run, per_pair_us=1e6 * run / n))
    return rows


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_g, ax_e) = plt.subplots(1, 2, figsize=(10, 3.8))
    for j, scene_name in enumerate(SCENES):
        ls = "-" if j else "--"
        for i, name in enumerate(RULES):
            sel = [r for r in rows if r["method"] == name and r["scene"] == scene_name]
            v = [r["vy0"] for r in sel]
            ax_g.plot(v, [r["grad"] for r in sel], "o" + ls, color=f"C{i}", ms=3, label=f"AD, {name}, {scene_name}")
            ax_g.plot(v, [r["ref_grad"] for r in sel], "x", color=f"C{i}", alpha=0.6)
            ax_e.semilogy(v, [max(r["rel_error"], 1e-6) for r in sel], "o" + ls, color=f"C{i}", ms=3,
                          label=f"{name}, {scene_name}")  # fmt: skip
    ax_g.set(xlabel="initial y velocity (m/s)", ylabel="d loss / d vy0", title="AD (o) vs central differences (x)")
    ax_e.axhline(0.01, color="k", lw=0.8, ls=":", label="1 %")
    ax_e.set(xlabel="initial y velocity (m/s)", ylabel="relative gradient error",
             title="box on a box (dashed: force jump at touchdown)")  # fmt: skip
    ax_g.legend(fontsize=6)
    ax_e.legend(fontsize=6)
    common.save_figure(fig, path)


def _plot_family(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["collision"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for i, name in enumerate(names):
        off = [1e3 * max(r["position_off_c_engine_m"], 1e-9) for r in rows if r["collision"] == name]
        ax.scatter(np.full(len(off), i) + np.linspace(-0.15, 0.15, len(off)), off, s=12, color=f"C{i}")
        ax.plot([i - 0.25, i + 0.25], [np.median(off)] * 2, color="k", lw=1.5)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set(ylabel="final position off the C engine (mm)",
           title=f"{len({r['drop'] for r in rows})} random box-on-box drops, 0.6 s (bar: median)")  # fmt: skip
    common.save_figure(fig, path)


def _summary(rows, key, value):
    out = {}
    for r in rows:
        out.setdefault(key(r), []).append(r[value])
    return out


def run(cfg: diffmjx.Config, out: Path, quick: bool = False) -> dict:
    drop = drop_vs_c_engine(cfg)
    common.write_csv(out / "box_box_drop.csv", drop)
    family = drop_family(cfg, DROP_FAMILY // 2 if quick else DROP_FAMILY)
    common.write_csv(out / "box_box_family.csv", family)
    _plot_family(family, out / "box_box_family.png")
    cost = timing()
    common.write_csv(out / "box_box_timing.csv", cost)
    grads = gradient_sweep(cfg, quick)
    common.write_csv(out / "box_box_gradient.csv", grads)
    _plot(grads, out / "box_box_gradient.png")
    for r in drop:
        print(f"{r['collision']:<22} position off C engine {1e3 * r['position_off_c_engine_m']:.2f} mm, "
              f"quaternion {r['quaternion_off_c_engine']:.1e}")  # fmt: skip
    for name, off in _summary(family, lambda r: r["collision"], "position_off_c_engine_m").items():
        print(f"family, {name:<24} position off C engine: median {1e3 * np.median(off):.2f} mm, max {1e3 * np.max(off):.2f} mm")
    for r in cost:
        print(f"{r['collision']:<22} first call {r['first_call_s']:.1f} s, run {r['run_ms']:.1f} ms per {r['poses']} poses")
    for (scene_name, name), e in _summary(grads, lambda r: (r["scene"], r["method"]), "rel_error").items():
        wrong = sum(r["wrong_sign"] for r in grads if r["scene"] == scene_name and r["method"] == name)
        print(f"{scene_name:<30} {name:<18} rel. gradient error median {np.median(e):.2%}, "
              f"p90 {np.percentile(e, 90):.2%}, max {np.max(e):.2%}, wrong sign {wrong}")  # fmt: skip
    return dict(drop=drop, family=family, timing=cost, gradient=grads)


def main(argv=None):
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    run(cfg, args.out, args.quick)


if __name__ == "__main__":
    main()
