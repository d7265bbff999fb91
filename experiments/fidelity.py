"""Gradient fidelity suite: random scenes over every supported geom pair, per configuration.

    python -m experiments.fidelity [--quick] [--configs NAME,...] [--families NAME,...]
                                   [--shots N] [--seed S] [--name STEM] [--set KEY=VALUE ...]

A free body (sphere, capsule, box, cylinder or ellipsoid, random size, density and contact
stiffness) is thrown onto a plane or onto a geom fixed to the world that stands on the plane
(sphere, capsule, box). Each *family* is one geom pair; each *shot* is a random pose, spin and
velocity of one of five kinds: ``onset`` (a drop with small velocities), ``sliding`` (fast
sideways), ``rolling`` (sideways with the matching spin), ``rebound`` (fast downwards) and
``tumble`` (random spin and tilt). Against a fixed target a body often touches target and plane in
turn or at once (multi-contact); ``box-plane`` lands flat, four corners at once. The README's "Use"
snippet (the cube toss, u0 = -2, no lateral velocity) is the family ``readme``.

Measured per shot: the gradient of ``w . position(T)`` (a random unit ``w``; T = 0.5 s) with
respect to the initial velocity (6 numbers, linear and angular), against central differences of
the same scene solved at rtol = atol = 1e-12 (step 1e-5; a second step of 4e-5 must agree to 1 %,
else the shot is reported as ``truth_unconverged`` and left out of the summaries, as is a shot whose
reference solve needs more than 4096 steps in a control period). Error = ``|g - g*| /
|g*|`` (vector norms); ``wrong_sign`` means ``g . g* <= 0``. Per family and configuration: median,
90th percentile and worst error, backward run time per shot (one jitted gradient, shots one after
another) and its JIT time. The reference solve uses each configuration's own impedance floor and
collision settings, so an error is the configuration's integration and differentiation error, not
a change of model.

Writes docs/results/fidelity.csv (one row per shot and configuration), fidelity_summary.csv and
fidelity.png (error distribution per configuration vs backward time). ``--quick``: six families (one
is the README snippet), four shots, the library defaults and checkpointed AD at 1e-8 (about 10 min
on a 2-core CPU). Finished (family, configuration) stages are saved (``experiments.common.stage``)
so an interrupted run resumes.

``--timeline FAMILY:SHOT`` shows where along one shot an error enters: AD of the position after
each control period against central differences of the 1e-12 solve (writes
``fidelity_timeline_<family>_<shot>.{csv,png}``; box-box shot 9 takes about 8 min).

Run it on your own model: :func:`scene_xml` builds the XML, :func:`shots` the initial states, and
:func:`measure` takes any ``mjx.Model``, initial states and loss weights.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from tqdm import tqdm

import diffmjx
from experiments import common

mjx = common.mjx

HORIZON = 50  # control periods of 0.01 s
REF_TOL = 1e-12
FD_STEPS = (1e-5, 4e-5)  # the truth and its check
TRUTH_AGREEMENT = 1e-2  # relative agreement of the two central differences for a converged truth
MOTIONS = ("onset", "sliding", "rolling", "rebound", "tumble")

# geom pair -> (thrown body's type, target: "plane" or a fixed geom's type)
FAMILIES = {
    "sphere-plane": ("sphere", "plane"),
    "capsule-plane": ("capsule", "plane"),
    "box-plane": ("box", "plane"),
    "cylinder-plane": ("cylinder", "plane"),
    "ellipsoid-plane": ("ellipsoid", "plane"),
    "sphere-sphere": ("sphere", "sphere"),
    "sphere-capsule": ("sphere", "capsule"),
    "capsule-capsule": ("capsule", "capsule"),
    "sphere-box": ("sphere", "box"),
    "capsule-box": ("capsule", "box"),
    "box-box": ("box", "box"),
    "readme": None,
    "sphere-cylinder": ("sphere", "cylinder"),  # appended: a family's index seeds its shots
}
QUICK_FAMILIES = ("box-plane", "capsule-plane", "cylinder-plane", "sphere-box", "capsule-capsule", "readme")

_BASE = ("integrator.solver=tsit5", "integrator.step_control=pid", "collision.smooth=false", "cfd.enabled=false",
         "collision.plane_box=deepest", "solver.gradient=unroll")
# name -> overrides; "defaults" is diffmjx.Config() as it is when the suite runs
CONFIGS = {
    "defaults": (),
    "model's solver budget": ("solver.min_iterations=0", "solver.max_tolerance=1", "solver.gradient=unroll"),
    "unrolled solve gradient": ("solver.gradient=unroll",),
    "checkpoint 1e-8": (*_BASE, "integrator.adjoint=checkpoint", "integrator.rtol=1e-8", "integrator.atol=1e-8",
                        "solver.impedance_floor=1e-4", "integrator.kink_step=null", "collision.plane_box=mjx",
                        "collision.plane_cylinder=mjx", "collision.box_box=mjx", "solver.min_iterations=0",
                        "solver.max_tolerance=1"),
    "checkpoint 1e-8 floor 0": (*_BASE, "integrator.adjoint=checkpoint", "integrator.rtol=1e-8",
                                 "integrator.atol=1e-8", "solver.impedance_floor=0", "integrator.kink_step=null"),
    "checkpoint 1e-7 floor 0 kink 1e-6": (*_BASE, "integrator.adjoint=checkpoint", "integrator.rtol=1e-7",
                                            "integrator.atol=1e-7", "solver.impedance_floor=0",
                                            "integrator.kink_step=1e-6"),
    "backsolve 1e-7 floor 0": (*_BASE, "integrator.adjoint=backsolve", "integrator.rtol=1e-7",
                                "integrator.atol=1e-7", "solver.impedance_floor=0", "integrator.kink_step=null"),
    "backsolve 1e-6 floor 0": (*_BASE, "integrator.adjoint=backsolve", "integrator.rtol=1e-6",
                                "integrator.atol=1e-6", "solver.impedance_floor=0", "integrator.kink_step=null"),
}  # fmt: skip
QUICK_CONFIGS = ("defaults", "checkpoint 1e-8 floor 0")

_SIZE_RANGES = {  # MuJoCo size fields, each uniform in [lo, hi] (m)
    "sphere": ((0.03, 0.07),),
    "capsule": ((0.02, 0.045), (0.03, 0.07)),
    "box": ((0.03, 0.07),) * 3,
    "cylinder": ((0.03, 0.06), (0.02, 0.05)),
    "ellipsoid": ((0.03, 0.07),) * 3,
}
_TARGET_SIZES = {"sphere": (0.08,), "capsule": (0.05, 0.15), "box": (0.15, 0.15, 0.05), "cylinder": (0.1, 0.05)}


@dataclasses.dataclass(frozen=True)
class Scene:
    """A random scene of one family: its XML and the numbers shots need."""

    family: str
    xml: str
    reach: float  # bounding radius of the thrown geom (m)
    top: float  # height of the target's top under the thrown body (m)
    horizon: int = HORIZON  # control periods


def _fmt(v) -> str:
    return " ".join(f"{x:.6g}" for x in np.atleast_1d(v))


def scene(family: str, seed: int) -> Scene:
    """The random scene of ``family`` for ``seed``: sizes, density, friction, contact time constant."""
    if family not in FAMILIES:
        raise ValueError(f"fidelity family {family!r} is not known; choose one of: {', '.join(FAMILIES)}")
    if FAMILIES[family] is None:
        xml = (common.SCENES / "cube_toss.xml").read_text()
        return Scene(family, xml, 0.05 * np.sqrt(3), 0.0, common.CUBE_TOSS["horizon"])
    body, target = FAMILIES[family]
    rng = np.random.default_rng([seed, list(FAMILIES).index(family)])
    size = np.array([rng.uniform(lo, hi) for lo, hi in _SIZE_RANGES[body]])
    reach = size.sum() if body == "capsule" else np.linalg.norm(size)  # bounding radius
    timeconst, density, friction = rng.uniform(0.005, 0.02), rng.uniform(200, 1000), rng.uniform(0.3, 1.0)
    geoms = ['<geom name="floor" type="plane" size="0 0 0.05"/>']
    top = 0.0
    if target != "plane":
        tsize = np.array(_TARGET_SIZES[target])
        # a box and a cylinder stand upright; a capsule lies on its side
        half_height = tsize[2] if target == "box" else tsize[1] if target == "cylinder" else tsize[0]
        euler = ' euler="0 90 0"' if target == "capsule" else ""  # a capsule lies on the floor
        geoms.append(f'<geom name="target" type="{target}" size="{_fmt(tsize)}" pos="0 0 {half_height:.6g}"{euler}/>')
        top = 2 * half_height
    xml = f"""<mujoco model="fidelity {family}">
  <option timestep="0.01" integrator="Euler" solver="Newton" iterations="4" ls_iterations="10"
          tolerance="1e-8" cone="pyramidal">
    <flag refsafe="disable" eulerdamp="disable"/>
  </option>
  <default>
    <geom solref="{timeconst:.6g} 1" solimp="0 0.95 0.001 0.5 2" friction="{friction:.6g} 0.005 0.0001"/>
  </default>
  <worldbody>
    {chr(10).join(geoms)}
    <body name="thrown">
      <freejoint/>
      <geom name="thrown" type="{body}" size="{_fmt(size)}" density="{density:.6g}"/>
    </body>
  </worldbody>
</mujoco>"""
    return Scene(family, xml, float(reach), float(top))


def _random_quat(rng) -> np.ndarray:
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def shots(sc: Scene, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` random initial states of scene ``sc``: ``qpos`` (n, 7), ``qvel`` (n, 6), loss weights
    ``w`` (n, 3) and ``motion`` (n,), the motion kinds in turn."""
    if sc.family == "readme":  # the README's "Use" snippet: one shot
        qpos = np.r_[0.0, 0.0, common.CUBE_TOSS["qz0"], 1.0, 0.0, 0.0, 0.0]
        return dict(qpos=qpos[None], qvel=np.r_[0.0, 0.0, common.CUBE_TOSS["u0"], 0, 0, 0][None],
                    w=np.array([[0.0, 1.0, 0.0]]), motion=np.array(["readme"]))  # fmt: skip
    rng = np.random.default_rng([seed, list(FAMILIES).index(sc.family), 1])
    qpos, qvel, w, motion = [], [], [], []
    for k in range(n):
        kind = MOTIONS[k % len(MOTIONS)]
        heading = rng.uniform(0, 2 * np.pi)
        side = np.array([np.cos(heading), np.sin(heading), 0.0])
        lin, ang = np.zeros(3), np.zeros(3)
        offset = rng.uniform(0, 0.6) * 0.1 * side if sc.top > 0 else np.zeros(2)  # where it lands on a target
        height = sc.top + sc.reach + rng.uniform(0.01, 0.08)
        if kind == "onset":
            lin = rng.normal(scale=0.1, size=3) - [0, 0, 0.5]
            ang = rng.normal(scale=0.5, size=3)
        elif kind == "sliding":
            lin = rng.uniform(0.8, 2.0) * side - [0, 0, rng.uniform(0.2, 1.0)]
        elif kind == "rolling":
            speed = rng.uniform(0.5, 1.5)
            lin = speed * side - [0, 0, rng.uniform(0.2, 0.6)]
            ang = np.cross([0, 0, 1.0], side) * speed / sc.reach  # rolling about the horizontal axis
        elif kind == "rebound":
            lin = rng.normal(scale=0.2, size=3) - [0, 0, rng.uniform(2.0, 4.0)]
        else:  # tumble
            lin = rng.normal(scale=0.5, size=3) - [0, 0, 1.0]
            ang = rng.normal(scale=6.0, size=3)
        quat = np.array([1.0, 0, 0, 0]) if kind == "rolling" else _random_quat(rng)
        qpos.append(np.r_[offset[:2], height, quat])
        qvel.append(np.r_[lin, ang])
        wk = rng.normal(size=3)
        w.append(wk / np.linalg.norm(wk))
        motion.append(kind)
    return dict(qpos=np.array(qpos), qvel=np.array(qvel), w=np.array(w), motion=np.array(motion))


def loss_fn(mx, cfg: diffmjx.Config, horizon: int = HORIZON):
    """``(qpos0, qvel0, w) -> (w . position(T), (accepted, rejected, budget exhausted))``."""
    ctrls = jnp.zeros((horizon, mx.nu))

    def loss(qpos0, qvel0, w):
        d = mjx.make_data(mx).replace(qpos=qpos0, qvel=qvel0)
        d, traj = diffmjx.rollout(mx, d, ctrls, cfg)
        s = traj.stats
        return jnp.dot(w, d.qpos[:3]), (s.accepted.sum(), s.rejected.sum(), s.budget_exhausted.any())

    return loss


def _threads(fn, items, desc):
    with ThreadPoolExecutor(2) as pool:
        res = list(tqdm(pool.map(fn, items), total=len(items), desc=desc, leave=False))
    return res


def truth(mx, cfg: diffmjx.Config, states: dict, horizon: int = HORIZON) -> dict:
    """Central differences (two steps) of the 1e-12 solve with ``cfg``'s model settings."""
    tight = cfg.override("integrator.adjoint=checkpoint", f"integrator.rtol={REF_TOL}", f"integrator.atol={REF_TOL}",
                         "integrator.kink_step=null", "integrator.max_steps=4096")  # fmt: skip
    loss = loss_fn(mx, tight, horizon)
    f = jax.jit(lambda q, v, w: (lambda r: (r[0], r[1][2]))(loss(q, v, w)))
    jobs = [(i, h, s, j) for i in range(len(states["qvel"])) for h in FD_STEPS for s in (1, -1) for j in range(6)]

    def one(job):
        i, h, s, j = job
        v = states["qvel"][i].copy()
        v[j] += s * h
        value, exhausted = f(states["qpos"][i], v, states["w"][i])
        return float(value), bool(exhausted)

    res = _threads(one, jobs, "reference solves")
    vals = {job: r[0] for job, r in zip(jobs, res, strict=True)}
    exhausted = np.zeros(len(states["qvel"]), bool)
    for job, r in zip(jobs, res, strict=True):
        exhausted[job[0]] |= r[1]
    n = len(states["qvel"])
    grads = {h: np.array([[(vals[i, h, 1, j] - vals[i, h, -1, j]) / (2 * h) for j in range(6)] for i in range(n)])
             for h in FD_STEPS}  # fmt: skip
    g, check = grads[FD_STEPS[0]], grads[FD_STEPS[1]]
    agreement = np.linalg.norm(g - check, axis=1) / np.maximum(np.linalg.norm(g, axis=1), 1e-300)
    return dict(grad=g, agreement=np.where(exhausted, np.inf, agreement))


def measure(mx, cfg: diffmjx.Config, states: dict, ref: dict, horizon: int = HORIZON) -> dict:
    """AD gradients of every shot with ``cfg``; errors against ``ref`` (:func:`truth`); timings."""
    grad_fn = jax.jit(jax.grad(loss_fn(mx, cfg, horizon), argnums=1, has_aux=True))
    args = [(states["qpos"][i], states["qvel"][i], states["w"][i]) for i in range(len(states["qvel"]))]
    t = time.perf_counter()
    compiled = grad_fn.lower(*args[0]).compile()
    jit_s = time.perf_counter() - t
    grads, stats, run_s = [], [], []
    for a in args:
        t = time.perf_counter()
        g, s = jax.block_until_ready(compiled(*a))
        run_s.append(time.perf_counter() - t)
        grads.append(np.asarray(g))
        stats.append([np.asarray(x) for x in s])
    grads = np.array(grads)
    err = np.linalg.norm(grads - ref["grad"], axis=1) / np.linalg.norm(ref["grad"], axis=1)
    return dict(grad=grads, rel_error=err, wrong_sign=np.sum(grads * ref["grad"], axis=1) <= 0,
                accepted=np.array([int(s[0]) for s in stats]), rejected=np.array([int(s[1]) for s in stats]),
                exhausted=np.array([bool(s[2]) for s in stats]), run_s=np.array(run_s), jit_s=jit_s)  # fmt: skip


def timeline(mx, cfg: diffmjx.Config, state: dict, horizon: int = HORIZON) -> dict:
    """Where along one shot a gradient error enters: for every control period k, AD of
    ``w . position(k)`` with ``cfg`` against central differences (two steps) of the 1e-12 solve.

    ``state``: one shot (``qpos``, ``qvel``, ``w`` of :func:`shots`, unbatched). The error of a
    force jump that no gradient sees appears at the period that holds the jump and is carried on
    from there; a kink resolved by the integration leaves no step. Returns arrays per period:
    ``rel_error``, ``truth_agreement``, ``truth_norm``.
    """
    tight = cfg.override("integrator.adjoint=checkpoint", f"integrator.rtol={REF_TOL}", f"integrator.atol={REF_TOL}",
                         "integrator.kink_step=null", "integrator.max_steps=4096")  # fmt: skip
    qpos0, w = jnp.asarray(state["qpos"]), jnp.asarray(state["w"])
    ctrls = jnp.zeros((horizon, mx.nu))

    def positions(c):
        def f(qvel0):
            d = mjx.make_data(mx).replace(qpos=qpos0, qvel=qvel0)
            return diffmjx.rollout(mx, d, ctrls, c)[1].qpos[:, :3] @ w

        return f

    f = jax.jit(positions(tight))
    jobs = [(h, s, j) for h in FD_STEPS for s in (1, -1) for j in range(6)]

    def one(job):
        h, s, j = job
        v = np.array(state["qvel"], dtype=float)
        v[j] += s * h
        return np.asarray(f(v))

    vals = dict(zip(jobs, _threads(one, jobs, "reference solves"), strict=True))
    fd = {h: np.stack([(vals[h, 1, j] - vals[h, -1, j]) / (2 * h) for j in range(6)], axis=1) for h in FD_STEPS}
    g, check = fd[FD_STEPS[0]], fd[FD_STEPS[1]]
    at = jax.jit(jax.grad(lambda v, k: positions(cfg)(v)[k]))
    ad = np.stack([np.asarray(at(jnp.asarray(state["qvel"]), k)) for k in tqdm(range(horizon), desc="AD per period")])
    norm = np.linalg.norm(g, axis=1)
    return dict(rel_error=np.linalg.norm(ad - g, axis=1) / norm, truth_agreement=np.linalg.norm(g - check, axis=1) / norm,
                truth_norm=norm)  # fmt: skip


def run_timeline(base: diffmjx.Config, out: Path, spec: str, seed: int, fresh: bool = False) -> list[dict]:
    """``--timeline FAMILY:SHOT``: :func:`timeline` of that shot (of ten) with ``base``; writes
    ``fidelity_timeline_<family>_<shot>.{csv,png}``."""
    family, _, shot = spec.partition(":")
    sc = scene(family, seed)
    states = shots(sc, 10, seed)
    if not shot.isdigit() or int(shot) >= len(states["qvel"]):
        raise ValueError(f"--timeline {spec!r}: expected FAMILY:SHOT with SHOT in 0..{len(states['qvel']) - 1}, "
                         "e.g. box-box:9")  # fmt: skip
    k = int(shot)
    state = {key: v[k] for key, v in states.items()}
    mx = _model(sc)
    key = (sc.xml, {k: v.tolist() for k, v in state.items()}, sc.horizon, FD_STEPS, base)
    res = common.stage("fidelity-timeline", key, lambda: timeline(mx, base, state, sc.horizon), fresh)
    rows = [dict(family=family, shot=k, motion=state["motion"], period=i + 1, t=round((i + 1) * 0.01, 6),
                 rel_error=res["rel_error"][i], truth_agreement=res["truth_agreement"][i],
                 truth_norm=res["truth_norm"][i]) for i in range(sc.horizon)]  # fmt: skip
    stem = f"fidelity_timeline_{family.replace('-', '_')}_{k}"
    common.write_csv(out / f"{stem}.csv", rows)
    _plot_timeline(rows, out / f"{stem}.png")
    worst = int(np.argmax(res["rel_error"]))
    print(f"{family} shot {k}: error at the end {res['rel_error'][-1]:.2%}, largest {res['rel_error'][worst]:.2%} "
          f"(period {worst + 1}); first period above 0.1 %: "
          f"{next((r['period'] for r in rows if r['rel_error'] > 1e-3), None)}")  # fmt: skip
    return rows


def _plot_timeline(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.semilogy(t, [max(100 * r["rel_error"], 1e-5) for r in rows], marker="o", ms=3, label="AD vs truth")
    ax.semilogy(t, [max(100 * r["truth_agreement"], 1e-5) for r in rows], ls=":", label="truth: two FD steps agree to")
    ax.axhline(1.0, color="k", ls=":", lw=1)
    ax.set_xlabel("end of the loss's period (s)")
    ax.set_ylabel("relative gradient error (%)")
    ax.set_title(f"{rows[0]['family']} shot {rows[0]['shot']} ({rows[0]['motion']}): where the error enters")
    ax.legend(fontsize=8)
    common.save_figure(fig, path)


def _model(sc: Scene):
    mj = mujoco.MjModel.from_xml_string(sc.xml)
    return mjx.put_model(mj)


def run(base: diffmjx.Config, out: Path, families, configs, n_shots: int, seed: int, fresh: bool = False,
        name: str = "fidelity") -> list[dict]:  # fmt: skip
    rows = []
    for family in tqdm(families, desc="families"):
        sc = scene(family, seed)
        states = shots(sc, n_shots, seed)
        mx = _model(sc)
        for config in configs:
            cfg = base.override(*CONFIGS[config])
            model_key = (sc.xml, {k: v.tolist() for k, v in states.items()}, sc.horizon, FD_STEPS)
            # the reference's values do not depend on how the solve is differentiated
            solve = dataclasses.replace(cfg.solver, gradient="unroll")
            ref = common.stage("fidelity-truth", (model_key, solve, cfg.collision, cfg.cfd),
                               lambda: truth(mx, cfg, states, sc.horizon), fresh)  # fmt: skip
            res = common.stage("fidelity-grad", (model_key, cfg, jax.__version__),
                               lambda: measure(mx, cfg, states, ref, sc.horizon), fresh)  # fmt: skip
            ok = ref["agreement"] <= TRUTH_AGREEMENT
            e = res["rel_error"][ok] if ok.any() else np.full(1, np.nan)
            print(f"{family:<16} {config:<38} median {np.median(e):8.2%}  p90 {np.percentile(e, 90):8.2%}  "
                  f"worst {e.max():8.2%}  {res['run_s'].mean():6.2f} s/shot  JIT {res['jit_s']:4.0f} s"
                  + (f"  ({(~ok).sum()} unconverged truth)" if (~ok).any() else ""))  # fmt: skip
            for i in range(len(states["qvel"])):
                rows.append(dict(family=family, config=config, overrides=" ".join(CONFIGS[config]), shot=i,
                                 motion=states["motion"][i], rel_error=res["rel_error"][i],
                                 wrong_sign=bool(res["wrong_sign"][i]), truth_norm=np.linalg.norm(ref["grad"][i]),
                                 truth_agreement=ref["agreement"][i], truth_unconverged=bool(not ok[i]),
                                 accepted_steps=int(res["accepted"][i]), rejected_steps=int(res["rejected"][i]),
                                 budget_exhausted=bool(res["exhausted"][i]), backward_run_s=res["run_s"][i],
                                 backward_jit_s=res["jit_s"], grad_ad=_fmt(res["grad"][i]),
                                 grad_truth=_fmt(ref["grad"][i])))  # fmt: skip
    summary = summarise(rows)
    common.write_csv(out / f"{name}.csv", rows)
    common.write_csv(out / f"{name}_summary.csv", summary)
    _plot(rows, out / f"{name}.png")
    return summary


def summarise(rows: list[dict]) -> list[dict]:
    """Per (family, configuration) and per configuration over all families: error percentiles, wrong
    signs, mean backward time per shot, JIT time; shots with an unconverged truth left out."""
    out = []
    keys = list(dict.fromkeys((r["family"], r["config"]) for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    for family, config in keys + [("all", c) for c in configs]:
        sel = [r for r in rows if r["config"] == config and family in ("all", r["family"])]
        good = [r for r in sel if not r["truth_unconverged"]]
        e = np.array([r["rel_error"] for r in good]) if good else np.full(1, np.nan)
        out.append(dict(family=family, config=config, shots=len(good), unconverged_truth=len(sel) - len(good),
                        median_rel_error=float(np.median(e)), p90_rel_error=float(np.percentile(e, 90)),
                        worst_rel_error=float(e.max()), wrong_sign=int(sum(r["wrong_sign"] for r in good)),
                        backward_run_s_per_shot=float(np.mean([r["backward_run_s"] for r in sel])),
                        backward_jit_s=float(np.mean(list({r["family"]: r["backward_jit_s"] for r in sel}.values())))))  # fmt: skip
    return out


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = list(dict.fromkeys(r["config"] for r in rows))
    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw=dict(width_ratios=[1, 1.3]))
    for k, name in enumerate(configs):
        sel = [r for r in rows if r["config"] == name and not r["truth_unconverged"]]
        err = np.maximum([100 * r["rel_error"] for r in sel], 1e-4)
        t = np.mean([r["backward_run_s"] for r in sel])
        jitter = t * (1 + 0.04 * np.random.default_rng(k).uniform(-1, 1, len(err)))
        ax.scatter(jitter, err, s=10, color=f"C{k}", alpha=0.5)
        ax.plot([t], [np.median(err)], marker="_", ms=26, mew=3, color=f"C{k}", label=name)
        ax.plot([t], [np.percentile(err, 90)], marker="_", ms=14, mew=1.5, color=f"C{k}")
        med = [np.median([100 * r["rel_error"] for r in sel if r["family"] == f] or [np.nan]) for f in families]
        bx.plot(range(len(families)), np.maximum(med, 1e-4), marker="o", color=f"C{k}", label=name)
    for a in (ax, bx):
        a.set_yscale("log")
        a.axhline(1.0, color="k", ls=":", lw=1)
        a.set_ylabel("relative gradient error (%)")
    ax.set_xscale("log")
    ax.set_xlabel("mean backward run time per shot (s)")
    ax.set_title("All shots (long bar: median, short bar: 90th percentile)")
    ax.legend(fontsize=7, loc="upper right")
    bx.set_xticks(range(len(families)), families, rotation=45, ha="right")
    bx.set_title("Median per scene family")
    common.save_figure(fig, path)


def main(argv=None):
    cfg, args = common.cli(
        __doc__, Path(__file__).parent / "configs" / "fidelity.yaml", argv,
        extra=(("--configs", dict(default=None, help="comma-separated configuration names (CONFIGS)")),
               ("--families", dict(default=None, help="comma-separated scene families (FAMILIES)")),
               ("--shots", dict(type=int, default=None, help="shots per family (default: 10; quick: 4)")),
               ("--seed", dict(type=int, default=0, help="seed of the scenes and shots")),
               ("--name", dict(default="fidelity", help="stem of the output files (default: fidelity)")),
               ("--timeline", dict(default=None, metavar="FAMILY:SHOT",
                                   help="instead: per-period error of one shot, e.g. box-box:9 (where an error enters)"))),
    )  # fmt: skip
    if args.timeline:
        run_timeline(cfg, args.out, args.timeline, args.seed, args.fresh)
        return
    families = args.families.split(",") if args.families else (QUICK_FAMILIES if args.quick else tuple(FAMILIES))
    configs = args.configs.split(",") if args.configs else (QUICK_CONFIGS if args.quick else tuple(CONFIGS))
    for name in configs:
        if name not in CONFIGS:
            raise ValueError(f"fidelity configuration {name!r} is not known; choose from: {', '.join(CONFIGS)}")
    for family in families:
        scene(family, 0)  # names an unknown family before anything runs
    n = args.shots or (4 if args.quick else 10)
    run(cfg, args.out, families, configs, n, args.seed, args.fresh, args.name)


if __name__ == "__main__":
    main()
