"""Box-box smoothing (smooth-collision issue): a box dropped onto a box, and what the blend costs.

    python -m experiments.box_box [--quick] [--rules NAME,...] [--update] [--set KEY=VALUE ...]

1. Drop (diffmjx/scenes/box_drop.xml, 0.6 s): the final pose with MJX's box-box, the smoothed one and the
   clipped one (``collision.box_box=clipped``, the default), against MuJoCo's C engine (its own
   box-box, RK4 at 1e-4 s) -> box_box_drop.csv.
2. Family: DROP_FAMILY random drops of the same box (orientation, height, horizontal velocity),
   TUMBLES boxes thrown spinning, EDGE_SLIDES sliding across the table's edge
   (:func:`family_states`) and STACKS stacks of two boxes on it (diffmjx/scenes/box_stack.xml,
   :func:`stack_states`), final pose per rule against the C engine, and the C engine against
   itself at half the step -> box_box_family.{csv,png}.
3. Cost: MJX's box-box vs the smoothed one on N_POSES random contact poses of diffmjx/scenes/box_pair.xml
   (vmapped): first call (trace + compile) and median run -> box_box_timing.csv.
4. Gradient of loss = final x + final qpos[6] (a quaternion entry) w.r.t. the initial y velocity,
   over a sweep of vy0: AD with the preset (the library defaults) and each box-box rule, against
   central differences (steps FD_STEP and FD_STEP / 4) of a REF_TOL solve (``diffmjx.converged``) with the same rule, on
   the scene as authored (solimp[0] = 0.9, MuJoCo's default: the contact force jumps at every
   touchdown) and with solimp[0] = 0 (continuous touchdown) -> box_box_gradient.{csv,png}.

``--rules`` runs the drop, the family and the gradient sweep (about half an hour per rule) for
some of the box-box rules (RULES' names, comma-separated); with ``--update`` their rows (and the C
engine's) replace theirs in the committed CSVs, the other rules' rows are kept and the figures
redrawn, and the timing (MJX's rule against its smoothed blend) is not rerun; ``--only PARTS``
(with ``--update``) reruns only some of ``drop``, ``family``, ``gradient``; ``--scenes`` runs the
gradient sweep on some of :data:`SCENES` (their names, comma-separated).
"""

from __future__ import annotations

import csv
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
    "smoothed MJX box-box": ("collision.smooth=true", "collision.box_box=mjx"),
    "clipped box-box": ("collision.smooth=false", "collision.box_box=clipped"),
    "smoothed clipped box-box": ("collision.smooth=true", "collision.box_box=clipped"),
}


def drop_vs_c_engine(cfg: diffmjx.Config, rules=tuple(RULES)) -> list[dict]:
    mj, mx = common.load("box_drop")
    data = common.c_engine_rk4(mj, DROP_PERIODS * 0.01, 1e-4)
    rows = []
    for name in rules:
        rule = RULES[name]
        q = np.asarray(jax.jit(drop_final_qpos(mx, cfg.override(*rule)))(0.0))
        rows.append(
            dict(
                collision=name,
                x=q[0],
                y=q[1],
                z=q[2],
                qw=q[3],
                qx=q[4],
                qy=q[5],
                qz=q[6],
                position_off_c_engine_m=float(np.linalg.norm(q[:3] - data.qpos[:3])),
                quaternion_off_c_engine=float(np.linalg.norm(q[3:] - data.qpos[3:])),
            )
        )
    q = data.qpos
    rows.append(
        dict(
            collision="C engine (RK4 1e-4)",
            x=q[0],
            y=q[1],
            z=q[2],
            qw=q[3],
            qx=q[4],
            qy=q[5],
            qz=q[6],
            position_off_c_engine_m=0.0,
            quaternion_off_c_engine=0.0,
        )
    )
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


def gradient_sweep(cfg: diffmjx.Config, quick: bool, rules=tuple(RULES), scenes=tuple(SCENES)) -> list[dict]:
    """AD with ``cfg`` (the preset: the library defaults) against central differences (steps FD_STEP
    and FD_STEP / 4, both reported) of a REF_TOL solve with the same collision function, per box-box
    rule and per version of the scene (``scenes``, names of :data:`SCENES`)."""
    vy0s = np.linspace(0.1, 0.5, 3 if quick else 9)
    rows = []
    for scene_name in scenes:
        solimp0 = SCENES[scene_name]
        mx = drop_model(solimp0)
        for rule in rules:
            overrides = RULES[rule]
            ref = _drop_loss(mx, diffmjx.converged(cfg.override(*overrides), REF_TOL, max_steps=16384))
            vg = jax.jit(jax.value_and_grad(_drop_loss(mx, cfg.override(*overrides))))
            for v in tqdm(vy0s, desc=f"{scene_name}, {rule}"):
                fd = [float(x) for x in diffmjx.central_differences(ref, v, (FD_STEP, FD_STEP / 4), workers=2)[0][:, 0]]
                loss, grad = (float(x) for x in vg(v))
                rows.append(
                    dict(
                        scene=scene_name,
                        method=rule,
                        vy0=v,
                        loss=loss,
                        grad=grad,
                        ref_grad=fd[0],
                        ref_agreement=abs(fd[0] - fd[1]) / abs(fd[0]),
                        rel_error=abs(grad - fd[0]) / abs(fd[0]),
                        wrong_sign=bool(grad * fd[0] < 0),
                    )
                )
    return rows


DROP_FAMILY = 16  # random drops of the family (drop_family)
TUMBLES = 8  # and boxes thrown spinning onto the table
EDGE_SLIDES = 8  # and boxes sliding, nearly flat, across the table's edge
STACKS = 4  # and two boxes stacked on the table, let go slightly apart and moving (box_stack.xml)


def _lift(mj, qpos, above):
    """``qpos`` (k, 7) with z set so the box's lowest corner is ``above`` (k,) over the table's top."""
    d = mujoco.MjData(mj)
    for k in range(len(qpos)):
        d.qpos[:] = qpos[k]
        mujoco.mj_kinematics(mj, d)
        lowest = (d.geom_xmat[1].reshape(3, 3) @ (_CORNERS * mj.geom_size[1]).T)[2].min()
        qpos[k, 2] = 0.1 - lowest + above[k]
    return qpos


def family_states(mj, n: int = DROP_FAMILY, tumbles: int = TUMBLES, slides: int = EDGE_SLIDES, seed: int = 0):
    """Initial states of the drop family: ``(qpos (N, 7), qvel (N, 6), motion (N,))``.

    - ``drop`` (``n``): random orientations, 3-6 cm above the table, horizontal velocity components
      within +-0.5 m/s (some slide off the table and fall).
    - ``tumble`` (``tumbles``): random orientations, 1-3 cm above, spinning at up to 15 rad/s about
      each axis, horizontal velocity within +-0.3 m/s.
    - ``edge slide`` (``slides``): nearly flat (tilts within +-8 degrees), 2-5 mm above, 2-5 cm
      inside one of the table's edges, sliding at 0.4-1 m/s across it (with up to 0.2 m/s along
      it): the box rides over the edge, tips and falls.

    The drops come first and do not depend on the other two counts."""
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=(n, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    qpos = np.c_[rng.uniform(-0.03, 0.03, (n, 2)), np.zeros(n), quat]
    qvel = np.c_[rng.uniform(-0.5, 0.5, (n, 2)), np.zeros((n, 4))]
    qpos = _lift(mj, qpos, rng.uniform(0.03, 0.06, n))  # the drops' draws, as first committed
    extra = np.random.default_rng([seed, 1])
    quat = extra.normal(size=(tumbles, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    tq = _lift(
        mj, np.c_[extra.uniform(-0.03, 0.03, (tumbles, 2)), np.zeros(tumbles), quat], extra.uniform(0.01, 0.03, tumbles)
    )
    tv = np.c_[extra.uniform(-0.3, 0.3, (tumbles, 2)), np.zeros(tumbles), extra.uniform(-15, 15, (tumbles, 3))]
    half = np.radians(8.0) / 2
    tilt = extra.uniform(-half, half, (slides, 3))  # small rotation vector / 2: a nearly flat box
    quat = np.c_[np.ones(slides), tilt]
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    axis, sign = extra.integers(0, 2, slides), extra.choice([-1.0, 1.0], slides)
    inside = 0.1 - extra.uniform(0.02, 0.05, slides)  # the table's half size is 0.1 m
    along = extra.uniform(-0.03, 0.03, slides)
    xy = np.where(axis[:, None] == 0, np.c_[sign * inside, along], np.c_[along, sign * inside])
    sq = _lift(mj, np.c_[xy, np.zeros(slides), quat], extra.uniform(0.002, 0.005, slides))
    speed, side = extra.uniform(0.4, 1.0, slides), extra.uniform(-0.2, 0.2, slides)
    sv = np.c_[np.where(axis == 0, sign * speed, side), np.where(axis == 0, side, sign * speed), np.zeros((slides, 4))]
    motion = np.array(["drop"] * n + ["tumble"] * tumbles + ["edge slide"] * slides)
    return np.r_[qpos, tq, sq], np.r_[qvel, tv, sv], motion


def _corner_z(mj, d, geom):
    """Lowest and highest corner heights of box ``geom`` in ``d`` (kinematics done)."""
    z = (d.geom_xmat[geom].reshape(3, 3) @ (_CORNERS * mj.geom_size[geom]).T)[2] + d.geom_xpos[geom][2]
    return z.min(), z.max()


def stack_states(mj, n: int = STACKS, seed: int = 0):
    """Initial states of the stacks (scene ``box_stack``): ``(qpos (n, 14), qvel (n, 12))``. The lower
    box within 1 cm of the table's centre, turned up to 30 degrees about z and tipped up to 2 about
    x and y, its lowest corner 1-4 mm above the table; the upper box up to 1.5 cm off the lower's
    centre, turned up to 45 degrees and tipped up to 2, its lowest corner 1-4 mm above the lower's
    highest; each moving at up to 0.1 m/s horizontally and 1 rad/s about each axis."""
    rng = np.random.default_rng([seed, 2])
    d = mujoco.MjData(mj)
    qpos, qvel = [], []
    for _ in range(n):
        q = np.zeros(14)
        for body, (reach, yaw) in enumerate(((0.01, 30.0), (0.015, 45.0))):
            half = np.radians(np.r_[rng.uniform(-2, 2, 2), rng.uniform(-yaw, yaw)]) / 2
            quat = np.r_[1.0, np.tan(half)]  # small rotations: near enough to x, y, z angles
            q[7 * body : 7 * body + 3] = np.r_[rng.uniform(-reach, reach, 2), 0.0]
            q[7 * body + 3 : 7 * body + 7] = quat / np.linalg.norm(quat)
        q[7:9] += q[:2]
        d.qpos[:] = q
        mujoco.mj_kinematics(mj, d)
        q[2] += 0.1 - _corner_z(mj, d, 1)[0] + rng.uniform(0.001, 0.004)
        d.qpos[:] = q
        mujoco.mj_kinematics(mj, d)
        q[9] += _corner_z(mj, d, 1)[1] - _corner_z(mj, d, 2)[0] + rng.uniform(0.001, 0.004)
        qpos.append(q)
        qvel.append(np.r_[rng.uniform(-0.1, 0.1, 2), 0.0, rng.uniform(-1, 1, 3), rng.uniform(-0.1, 0.1, 2), 0.0,
                          rng.uniform(-1, 1, 3)])  # fmt: skip
    return np.array(qpos), np.array(qvel)


def _finals(cfg: diffmjx.Config, mj, mx, qpos, qvel, rules, desc: str):
    """Final qpos after DROP_PERIODS periods from each start: the C engine's reference (RK4 at
    1e-4 s), and per name the C engine at half the step ("C engine, RK4 at 5e-5 s") and each
    box-box rule of ``rules``."""
    d0 = common.mjx.make_data(mx)
    ctrls = jnp.zeros((DROP_PERIODS, 0))

    def c_engine(dt):
        return np.stack([common.c_engine_rk4(mj, DROP_PERIODS * 0.01, dt, q, v).qpos for q, v in zip(qpos, qvel)])

    ref, finals = c_engine(1e-4), {"C engine, RK4 at 5e-5 s": c_engine(5e-5)}
    for name in tqdm(rules, desc=desc):
        c = cfg.override(*RULES[name])
        # one start at a time: under vmap every start would take the step sequence of the stiffest one
        fn = jax.jit(lambda q, v, c=c: diffmjx.rollout(mx, d0.replace(qpos=q, qvel=v), ctrls, c)[0].qpos)
        finals[name] = np.stack([np.asarray(fn(jnp.asarray(q), jnp.asarray(v))) for q, v in zip(qpos, qvel)])
    return ref, finals


def stack_family(cfg: diffmjx.Config, n: int = STACKS, seed: int = 0, rules=tuple(RULES), first: int = 0):
    """The stacks of :func:`stack_states`, 0.6 s each: both boxes' final positions (the larger of the
    two errors) and quaternions per box-box rule against the C engine (RK4 at 1e-4 s), rows as
    :func:`drop_family`'s (motion ``stack``, numbered from ``first``)."""
    mj, mx = common.load("box_stack")
    qpos, qvel = stack_states(mj, n, seed)
    ref, finals = _finals(cfg, mj, mx, qpos, qvel, rules, "stacks")
    rows = []
    for name, q in finals.items():
        for k in range(n):
            off = [np.linalg.norm(q[k, b : b + 3] - ref[k, b : b + 3]) for b in (0, 7)]
            quat = [
                min(np.linalg.norm(q[k, b + 3 : b + 7] - ref[k, b + 3 : b + 7]),
                    np.linalg.norm(q[k, b + 3 : b + 7] + ref[k, b + 3 : b + 7]))
                for b in (0, 7)
            ]  # fmt: skip
            rows.append(
                dict(
                    collision=name,
                    drop=first + k,
                    motion="stack",
                    position_off_c_engine_m=float(max(off)),
                    quaternion_off_c_engine=float(max(quat)),
                    z=float(q[k, 9]),
                    c_engine_z=float(ref[k, 9]),
                )
            )
    return rows


def drop_family(
    cfg: diffmjx.Config,
    n: int = DROP_FAMILY,
    seed: int = 0,
    rules=tuple(RULES),
    tumbles: int = TUMBLES,
    slides: int = EDGE_SLIDES,
) -> list[dict]:
    """Trajectories on the family of :func:`family_states` (box-on-box drops, tumbles and slides
    across the table's edge), 0.6 s each, final position and quaternion per box-box rule against the
    C engine (RK4 at 1e-4 s). The row "C engine, RK4 at 5e-5 s" is the C engine against itself at
    half the step: how far apart two correct integrations of the same contacts end (the tumbles
    amplify any difference)."""
    mj, mx = common.load("box_drop")
    qpos, qvel, motion = family_states(mj, n, tumbles, slides, seed)
    ref, finals = _finals(cfg, mj, mx, qpos, qvel, rules, "drop family")
    rows = []
    for name, q in finals.items():
        for k in range(len(qpos)):
            rows.append(
                dict(
                    collision=name,
                    drop=k,
                    motion=motion[k],
                    position_off_c_engine_m=float(np.linalg.norm(q[k, :3] - ref[k, :3])),
                    quaternion_off_c_engine=float(
                        min(np.linalg.norm(q[k, 3:] - ref[k, 3:]), np.linalg.norm(q[k, 3:] + ref[k, 3:]))
                    ),
                    z=float(q[k, 2]),
                    c_engine_z=float(ref[k, 2]),
                )
            )
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
    for name, smooth in (("MJX box-box", False), ("smoothed MJX box-box", True)):
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
            if not sel:  # a rule whose gradient sweep was not run
                continue
            v = [r["vy0"] for r in sel]
            ax_g.plot(v, [r["grad"] for r in sel], "o" + ls, color=f"C{i}", ms=3, label=f"AD, {name}, {scene_name}")
            ax_g.plot(v, [r["ref_grad"] for r in sel], "x", color=f"C{i}", alpha=0.6)
            ax_e.semilogy(
                v,
                [max(r["rel_error"], 1e-6) for r in sel],
                "o" + ls,
                color=f"C{i}",
                ms=3,
                label=f"{name}, {scene_name}",
            )
    refs = [r["ref_grad"] for r in rows]
    pad = 0.5 * (max(refs) - min(refs)) + 0.2  # AD far off the reference would squash the rest: off scale
    ax_g.set_ylim(min(refs) - pad, max(refs) + pad)
    ax_g.set(
        xlabel="initial y velocity (m/s)",
        ylabel="d loss / d vy0",
        title="AD (o) vs central differences (x); axis clipped",
    )
    ax_e.axhline(0.01, color="k", lw=0.8, ls=":", label="1 %")
    ax_e.set(
        xlabel="initial y velocity (m/s)",
        ylabel="relative gradient error",
        title="box on a box (dashed: force jump at touchdown)",
    )
    ax_g.legend(fontsize=6)
    ax_e.legend(fontsize=6)
    common.save_figure(fig, path)


def _plot_family(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["collision"] for r in rows))
    motions = list(dict.fromkeys(r.get("motion", "drop") for r in rows))
    markers = dict(zip(motions, "o^sD"))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for i, name in enumerate(names):
        sel = [r for r in rows if r["collision"] == name]
        off = np.array([1e3 * max(r["position_off_c_engine_m"], 1e-9) for r in sel])
        x = np.full(len(off), i) + np.linspace(-0.2, 0.2, len(off))
        for m in motions:
            k = np.array([r.get("motion", "drop") == m for r in sel])
            ax.scatter(x[k], off[k], s=14, color=f"C{i}", marker=markers[m], label=m if i == 0 else None)
        ax.plot([i - 0.28, i + 0.28], [np.median(off)] * 2, color="k", lw=1.5)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, fontsize=7)
    ax.set(
        ylabel="final position off the C engine (mm)",
        title=f"{len({r['drop'] for r in rows})} box-on-box drops, tumbles, edge slides and stacks, 0.6 s (bar: median)",
    )
    ax.legend(fontsize=7, loc="upper left")
    common.save_figure(fig, path)


def _summary(rows, key, value):
    out = {}
    for r in rows:
        out.setdefault(key(r), []).append(r[value])
    return out


_FILES = {
    "drop": ("box_box_drop.csv", ("collision",)),
    "family": ("box_box_family.csv", ("collision", "motion")),
    "gradient": ("box_box_gradient.csv", ("scene", "method")),
}  # result -> (file, the columns naming a group)


def _known(flag: str, names, known: dict) -> tuple:
    """``names`` (None: all of ``known``), each checked against ``known``'s keys."""
    names = tuple(known) if names is None else tuple(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"{flag}: unknown {unknown}; expected some of {list(known)}")
    return names


def run(
    cfg: diffmjx.Config, out: Path, quick: bool = False, rules=None, update: bool = False, only=None, scenes=None
) -> dict:
    rules, scenes = _known("--rules", rules, RULES), _known("--scenes", scenes, SCENES)
    missing = [out / f for f, _ in _FILES.values() if not (out / f).exists()]
    if update and missing:  # before anything runs
        raise FileNotFoundError(f"--update: {', '.join(map(str, missing))} missing; run without --update to write them")
    sizes = dict(n=DROP_FAMILY, tumbles=TUMBLES, slides=EDGE_SLIDES)
    sizes = {k: v // 2 if quick else v for k, v in sizes.items()}
    stacks = STACKS // 2 if quick else STACKS
    only = set(_FILES) if only is None else set(only)
    res = {}
    if "family" in only:  # a few minutes per rule
        res["family"] = drop_family(cfg, rules=rules, **sizes)
        res["family"] += stack_family(cfg, stacks, rules=rules, first=sum(sizes.values()))
    if "drop" in only:
        res["drop"] = drop_vs_c_engine(cfg, rules)
    if "gradient" in only:
        res["gradient"] = gradient_sweep(cfg, quick, rules, scenes)
    for key, (name, columns) in _FILES.items():
        if key not in res:
            with open(out / name, newline="") as f:  # not rerun: the committed rows
                res[key] = [{k: common.typed(v) for k, v in r.items()} for r in csv.DictReader(f)]
            continue
        if update:
            common.write_csv(out / name, common.merge_rows(out / name, res[key], columns))
            with open(out / name, newline="") as f:  # the whole file, typed, for the figures and the summary
                res[key] = [{k: common.typed(v) for k, v in r.items()} for r in csv.DictReader(f)]
        else:
            common.write_csv(out / name, res[key])
    drop, family, grads = res["drop"], res["family"], res["gradient"]
    _plot_family(family, out / "box_box_family.png")
    _plot(grads, out / "box_box_gradient.png")
    cost = [] if update else timing()
    if not update:
        common.write_csv(out / "box_box_timing.csv", cost)
    for r in drop:
        print(
            f"{r['collision']:<22} position off C engine {1e3 * r['position_off_c_engine_m']:.2f} mm, "
            f"quaternion {r['quaternion_off_c_engine']:.1e}"
        )
    for name, off in _summary(family, lambda r: r["collision"], "position_off_c_engine_m").items():
        print(
            f"family, {name:<24} position off C engine: median {1e3 * np.median(off):.2f} mm, max {1e3 * np.max(off):.2f} mm"
        )
    for r in cost:
        print(
            f"{r['collision']:<22} first call {r['first_call_s']:.1f} s, run {r['run_ms']:.1f} ms per {r['poses']} poses"
        )
    for (scene_name, name), e in _summary(grads, lambda r: (r["scene"], r["method"]), "rel_error").items():
        wrong = sum(r["wrong_sign"] for r in grads if r["scene"] == scene_name and r["method"] == name)
        print(
            f"{scene_name:<30} {name:<18} rel. gradient error median {np.median(e):.2%}, "
            f"p90 {np.percentile(e, 90):.2%}, max {np.max(e):.2%}, wrong sign {wrong}"
        )
    return dict(drop=drop, family=family, timing=cost, gradient=grads)


def main(argv=None):
    extra = (
        ("--rules", dict(help=f"comma-separated box-box rules, of {', '.join(RULES)} (default: all)")),
        ("--update", dict(action="store_true", help="replace only these rules' rows in the committed CSVs")),
        ("--only", dict(help="with --update: run only these parts, comma-separated, of drop, family, gradient")),
        (
            "--scenes",
            dict(help=f"the gradient sweep's scenes, comma-separated, of {'; '.join(SCENES)} (default: both)"),
        ),
    )
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv, extra)
    rules = None if args.rules is None else [r.strip() for r in args.rules.split(",")]
    only = None if args.only is None else [p.strip() for p in args.only.split(",")]
    if only is not None and (not args.update or not set(only) <= set(_FILES)):
        raise SystemExit(
            f"--only needs --update (the other parts are read from the committed CSVs) and parts of {list(_FILES)}"
        )
    scenes = None if args.scenes is None else [s.strip() for s in args.scenes.split(",")]
    run(cfg, args.out, args.quick, rules, args.update, only, scenes)


if __name__ == "__main__":
    main()
