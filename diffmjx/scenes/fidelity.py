"""The gradient-fidelity suite's random scenes, and the measurement of a gradient against the truth.

A free body (sphere, capsule, box, cylinder or ellipsoid, random size, density, friction and
contact time constant) is thrown onto a plane or onto a geom fixed to the world that stands on the
plane (sphere, capsule, box, cylinder). Each *family* (:data:`FAMILIES`) is one geom pair;
:func:`scene` draws its MJCF for a seed, :func:`shots` its initial states: a random pose, spin and
velocity of one of five kinds (:data:`MOTIONS`), ``onset`` (a drop with small velocities),
``sliding`` (fast sideways), ``rolling`` (sideways with the matching spin), ``rebound`` (fast
downwards) and ``tumble`` (random spin and tilt), each with random loss weights ``w``. The family
``readme`` is the README's "Use" snippet (the cube toss, ``u0 = -2``, no lateral velocity).

The measurement takes any ``mjx.Model`` with one free body: :func:`loss_fn` is ``w . position(T)``
after ``horizon`` control periods; :func:`truth` its gradient with respect to the initial velocity
(6 numbers) by central differences of a ``REF_TOL`` solve at two steps (:data:`FD_STEPS`, which
must agree to :data:`TRUTH_AGREEMENT`); :func:`measure` the AD gradient of a configuration against
it, with run and JIT times; :func:`timeline` where along one shot an error enters::

    from diffmjx.scenes import fidelity

    sc = fidelity.scene("box-plane", seed=0)
    states = fidelity.shots(sc, 4, seed=0)
    mx = fidelity.model(sc)
    ref = fidelity.truth(mx, cfg, states, sc.horizon)
    res = fidelity.measure(mx, cfg, states, ref, sc.horizon)   # res["rel_error"]: one per shot

The study ``experiments.fidelity`` runs it over every family and a set of configurations
(docs/gradcheck.md, "Fidelity suite").

Why this is library code and what is not: the scene generator and the measurement are a public
API because they are the tool a user checks their own configuration with (:func:`truth` and
:func:`measure` take any ``mjx.Model`` with one free body, not only these scenes) and because the
tests use them (``tests/test_fidelity.py``, ``tests/test_box_box.py``), which may import only the
library. Everything that is the study itself lives in ``experiments/fidelity.py``: the named
configurations, the loops over families, configurations and seeds, the saved stages, the CSV
tables, the printing, the figures and the progress bars. The functions here print nothing and
draw no progress bar; :func:`truth` and :func:`timeline` take a ``progress`` wrapper of their
loop (e.g. ``functools.partial(tqdm, desc="reference solves")``) for a caller that wants one.

Why one file of this length: the scene generator and the measurement are one public tool
(``scene``, ``shots``, ``truth``, ``measure``, ``timeline``), used together.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx._mjx import mjx
from diffmjx.config import Config
from diffmjx.gradcheck import central_differences, converged
from diffmjx.integration.integrate import rollout
from diffmjx.scenes import CUBE_TOSS
from diffmjx.scenes import path as scene_path

__all__ = [
    "FAMILIES",
    "FD_STEPS",
    "HORIZON",
    "MOTIONS",
    "REF_TOL",
    "TRUTH_AGREEMENT",
    "Scene",
    "loss_fn",
    "measure",
    "model",
    "reference_config",
    "scene",
    "shots",
    "timeline",
    "truth",
]

HORIZON = 50
"""Control periods (of 0.01 s) of a shot."""
REF_TOL = 1e-12
"""rtol = atol of the reference solve that :func:`truth` differences."""
FD_STEPS = (1e-5, 4e-5)
"""Central-difference steps of :func:`truth`: the truth and its check."""
TRUTH_AGREEMENT = 1e-2
"""Relative agreement of the two central differences for a converged truth."""
MOTIONS = ("onset", "sliding", "rolling", "rebound", "tumble")
"""The kinds of shot, taken in turn by :func:`shots`."""

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
"""Geom pair -> (thrown body's type, target: ``"plane"`` or a fixed geom's type); ``readme`` (None) is
the README's cube toss."""

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
    """A random scene of one family (made by :func:`scene`): its XML and the numbers shots need.

    Attributes:
        family: the key of :data:`FAMILIES` it was drawn from.
        xml: the MJCF (one free body named ``thrown``; :func:`model` compiles it).
        reach: bounding radius of the thrown geom (m).
        top: height of the target's top under the thrown body (m); 0 over the plane.
        horizon: control periods of a shot.
    """

    family: str
    xml: str
    reach: float  # bounding radius of the thrown geom (m)
    top: float  # height of the target's top under the thrown body (m)
    horizon: int = HORIZON  # control periods


def _fmt(v) -> str:
    return " ".join(f"{x:.6g}" for x in np.atleast_1d(v))


def scene(family: str, seed: int) -> Scene:
    """The random scene of ``family`` for ``seed``: sizes, density, friction, contact time constant.

    Arguments:
        family: a key of :data:`FAMILIES`; ``readme`` is the shipped cube toss (the seed unused).
        seed: seed of the draw; the same ``(family, seed)`` always gives the same scene.

    Returns:
        The :class:`Scene`.

    Raises:
        ValueError: ``family`` is not a key of :data:`FAMILIES`.
    """
    if family not in FAMILIES:
        raise ValueError(f"fidelity family {family!r} is not known; choose one of: {', '.join(FAMILIES)}")
    if FAMILIES[family] is None:
        xml = scene_path("cube_toss").read_text()
        return Scene(family, xml, 0.05 * np.sqrt(3), 0.0, CUBE_TOSS["horizon"])
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
    """``n`` random initial states of scene ``sc``, the kinds of :data:`MOTIONS` in turn.

    Arguments:
        sc: the :class:`Scene` (from :func:`scene`).
        n: number of shots; the ``readme`` family has one, whatever ``n``.
        seed: seed of the draw (with the family's index).

    Returns:
        ``qpos`` (n, 7), ``qvel`` (n, 6), loss weights ``w`` (n, 3, unit vectors) and ``motion``
        (n,), the kind of each shot.
    """
    if sc.family == "readme":  # the README's "Use" snippet: one shot
        qpos = np.r_[0.0, 0.0, CUBE_TOSS["qz0"], 1.0, 0.0, 0.0, 0.0]
        return {
            "qpos": qpos[None],
            "qvel": np.r_[0.0, 0.0, CUBE_TOSS["u0"], 0, 0, 0][None],
            "w": np.array([[0.0, 1.0, 0.0]]),
            "motion": np.array(["readme"]),
        }
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
    return {"qpos": np.array(qpos), "qvel": np.array(qvel), "w": np.array(w), "motion": np.array(motion)}


def loss_fn(mx, cfg: Config, horizon: int = HORIZON):
    """The suite's loss: the thrown body's weighted position after ``horizon`` control periods.

    Arguments:
        mx: ``mjx.Model`` with one free body (its position is ``qpos[:3]``), zero controls.
        cfg: the :class:`diffmjx.Config` of the rollout.
        horizon: control periods.

    Returns:
        ``loss(qpos0, qvel0, w) -> (w . position(T), (accepted, rejected, budget exhausted))``, the
        step statistics summed over the rollout.
    """
    ctrls = jnp.zeros((horizon, mx.nu))

    def loss(qpos0, qvel0, w):
        d = mjx.make_data(mx).replace(qpos=qpos0, qvel=qvel0)
        d, traj = rollout(mx, d, ctrls, cfg)
        s = traj.stats
        return jnp.dot(w, d.qpos[:3]), (s.accepted.sum(), s.rejected.sum(), s.budget_exhausted.any())

    return loss


def model(sc: Scene) -> mjx.Model:
    """The ``mjx.Model`` of scene ``sc`` (its MJCF compiled by MuJoCo and put on the device).

    Arguments:
        sc: the :class:`Scene`.

    Returns:
        The ``mjx.Model``.
    """
    mj = mujoco.MjModel.from_xml_string(sc.xml)
    return mjx.put_model(mj)


def reference_config(cfg: Config) -> Config:
    """``cfg``'s physics solved for the suite's reference: :func:`diffmjx.converged` at
    rtol = atol = :data:`REF_TOL` with at least 4096 steps per period, through checkpointed AD
    (whose forward is the plain solve).

    Arguments:
        cfg: the :class:`diffmjx.Config` whose physics (impedance floor, collisions, CFD) the
            reference keeps.

    Returns:
        The reference :class:`diffmjx.Config`.
    """
    return converged(
        dataclasses.replace(cfg, integrator=dataclasses.replace(cfg.integrator, adjoint="checkpoint")),
        REF_TOL,
        max_steps=4096,
    )


def _reference_value(mx, cfg: Config, horizon: int):
    """``(qvel0, qpos0, w) -> w . position(T)`` of the reference solve; NaN where it ran out of steps,
    so its central differences say so."""
    loss = loss_fn(mx, reference_config(cfg), horizon)

    def value(qvel0, qpos0, w):
        value, (_, _, exhausted) = loss(qpos0, qvel0, w)
        return jnp.where(exhausted, jnp.nan, value)

    return value


def _no_progress(iterable: Iterable) -> Iterable:
    return iterable


def truth(
    mx, cfg: Config, states: dict, horizon: int = HORIZON, progress: Callable[[Iterable], Iterable] | None = None
) -> dict:
    """Central differences (:func:`diffmjx.central_differences`, steps :data:`FD_STEPS`) of the
    :data:`REF_TOL` solve (:func:`reference_config`) with ``cfg``'s model settings.

    Arguments:
        mx: ``mjx.Model`` with one free body.
        cfg: the :class:`diffmjx.Config` whose physics the reference solves.
        states: the shots, as :func:`shots` returns them (``qpos``, ``qvel``, ``w``; batched).
        horizon: control periods of the loss (:func:`loss_fn`).
        progress: wraps the loop over shots (one reference sweep each, seconds to minutes), e.g.
            ``functools.partial(tqdm, desc="reference solves")``; None: no wrapper.

    Returns:
        ``grad`` (n, 6), the gradient of every shot with respect to its initial velocity, and
        ``agreement`` (n,), the relative difference of the two steps' estimates (inf where the
        reference solve ran out of steps); a shot's truth is converged where it is at most
        :data:`TRUTH_AGREEMENT`.
    """
    value = _reference_value(mx, cfg, horizon)
    sweeps = []
    for i in (progress or _no_progress)(range(len(states["qvel"]))):
        args = (jnp.asarray(states["qpos"][i]), jnp.asarray(states["w"][i]))
        sweeps.append(central_differences(value, np.asarray(states["qvel"][i]), FD_STEPS, args=args, workers=2)[0])
    g, check = np.stack(sweeps, axis=1)  # (n, 6) each
    agreement = np.linalg.norm(g - check, axis=1) / np.maximum(np.linalg.norm(g, axis=1), 1e-300)
    return {
        "grad": g,
        "agreement": np.where(np.isfinite(check).all(axis=1) & np.isfinite(g).all(axis=1), agreement, np.inf),
    }


def measure(mx, cfg: Config, states: dict, ref: dict, horizon: int = HORIZON) -> dict:
    """AD gradients of every shot with ``cfg``; errors against ``ref`` (:func:`truth`); timings.

    Arguments:
        mx: ``mjx.Model`` with one free body.
        cfg: the :class:`diffmjx.Config` whose gradient is measured.
        states: the shots, as :func:`shots` returns them (batched).
        ref: :func:`truth` of the same shots (its ``grad``).
        horizon: control periods of the loss (:func:`loss_fn`).

    Returns:
        ``grad`` (n, 6); ``rel_error`` ``|g - g*| / |g*|`` and ``wrong_sign`` (``g . g* <= 0``) per
        shot; the step statistics ``accepted``, ``rejected``, ``exhausted`` per shot; ``run_s``
        (one compiled gradient, per shot) and ``jit_s``.
    """
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
    return {
        "grad": grads,
        "rel_error": err,
        "wrong_sign": np.sum(grads * ref["grad"], axis=1) <= 0,
        "accepted": np.array([int(s[0]) for s in stats]),
        "rejected": np.array([int(s[1]) for s in stats]),
        "exhausted": np.array([bool(s[2]) for s in stats]),
        "run_s": np.array(run_s),
        "jit_s": jit_s,
    }


def timeline(
    mx, cfg: Config, state: dict, horizon: int = HORIZON, progress: Callable[[Iterable], Iterable] | None = None
) -> dict:
    """Where along one shot a gradient error enters: for every control period k, AD of
    ``w . position(k)`` with ``cfg`` against central differences (two steps) of the 1e-12 solve.

    The error of a force jump that no gradient sees appears at the period that holds the jump and
    is carried on from there; a kink resolved by the integration leaves no step.

    Arguments:
        mx: ``mjx.Model`` with one free body.
        cfg: the :class:`diffmjx.Config` whose gradient is measured.
        state: one shot (``qpos``, ``qvel``, ``w`` of :func:`shots`, unbatched).
        horizon: control periods.
        progress: wraps the loop over periods (one AD gradient each), e.g.
            ``functools.partial(tqdm, desc="AD per period")``; None: no wrapper.

    Returns:
        Arrays per period: ``rel_error`` (AD against the truth), ``truth_agreement`` (of the two
        difference steps) and ``truth_norm``.
    """
    qpos0, w = jnp.asarray(state["qpos"]), jnp.asarray(state["w"])
    ctrls = jnp.zeros((horizon, mx.nu))

    def positions(c):
        def f(qvel0):
            d = mjx.make_data(mx).replace(qpos=qpos0, qvel=qvel0)
            return rollout(mx, d, ctrls, c)[1].qpos[:, :3] @ w

        return f

    sweep, _ = central_differences(
        positions(reference_config(cfg)), np.asarray(state["qvel"], dtype=float), FD_STEPS, workers=2
    )
    g, check = sweep[0].T, sweep[1].T  # (horizon, 6)
    at = jax.jit(jax.grad(lambda v, k: positions(cfg)(v)[k]))
    ad = np.stack([np.asarray(at(jnp.asarray(state["qvel"]), k)) for k in (progress or _no_progress)(range(horizon))])
    norm = np.linalg.norm(g, axis=1)
    return {
        "rel_error": np.linalg.norm(ad - g, axis=1) / norm,
        "truth_agreement": np.linalg.norm(g - check, axis=1) / norm,
        "truth_norm": norm,
    }
