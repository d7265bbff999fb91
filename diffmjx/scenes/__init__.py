"""The MJCF scenes shipped with DiffMJX and the helpers the tests and studies share.

The XML files live beside this module (:data:`DIR`, installed as package data); a scene is named
by its file's stem::

    mj, mx = scenes.load("cube_toss")                  # MjModel and mjx.Model
    mj, mx = scenes.load("cube_toss", timestep=0.005)   # with opt fields patched

Shipped scenes: ``actuated_hinge`` (a pendulum through a clamped activation filter),
``billiard`` (cue and eight ball between four cushions), ``box_drop`` (a tilted box dropped on a
fixed box), ``box_pair`` (two free boxes for box-box collision checks), ``box_stack`` (two boxes stacked on
a fixed box), ``contactnets_cube`` (the
ContactNets cube as system identification fits it), ``cube_toss`` (the paper's cube toss),
``pushed_box`` (a box pushed and lifted by two motors: :func:`diffmjx.linearize`'s check),
``sphere_drop`` (a ball thrown onto a plane), ``suite_*`` (the planner suite's tasks:
``suite_pendulum``, ``suite_cartpole``, ``suite_double_cartpole``, ``suite_reacher``,
``suite_block_push``, ``suite_box_tip``, ``suite_finger_turn``, ``suite_hopper``;
``experiments/planner_suite.py``), ``sysid_arm``, ``sysid_ball``, ``sysid_box``,
``sysid_finger`` and ``sysid_legged`` (the system-identification studies' arm, ball thrown at a
wall, thrown box, finger tapping a box on position servos, and two-legged body dropped sliding),
``tumbling_box`` (contact-free, three distinct inertias), ``two_balls`` (two balls on a line). The cube toss's initial state and loss
(:data:`CUBE_TOSS`, :func:`cube_toss_data`, :func:`cube_toss_loss`), its variants with another
thrown primitive (:func:`primitive`) and its C-engine reference (:func:`c_engine_cube_toss`) are
here too.

Sits above :mod:`diffmjx.integration.integrate` (the loss calls :func:`diffmjx.rollout`); nothing in the core
imports it.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx._mjx import mjx
from diffmjx.config import CollisionConfig, Config
from diffmjx.integration.integrate import rollout
from diffmjx.physics import collision
from diffmjx.reference import c_engine_rk4

__all__ = [
    "CUBE_TOSS",
    "DIR",
    "PRIMITIVES",
    "box_corner_heights",
    "c_engine_cube_toss",
    "contacts_fn",
    "cube_toss_data",
    "cube_toss_loss",
    "geom_pair_friction",
    "load",
    "names",
    "path",
    "primitive",
]

DIR: Path = Path(__file__).resolve().parent
"""The folder of the shipped ``<name>.xml`` scenes."""

CUBE_TOSS = {"qz0": 0.2, "vy0": -0.1, "u0": -2.0, "horizon": 100}
"""The cube toss's initial height ``qz0``, sideways velocity ``vy0``, default vertical throw
velocity ``u0`` and horizon in control periods."""

PRIMITIVES = {
    "ball": 'type="sphere" size="0.05"',
    "cube": 'type="box" size="0.05 0.05 0.05" euler="60 0 0"',
    "capsule": 'type="capsule" size="0.03 0.05" euler="60 0 0"',
    "cylinder": 'type="cylinder" size="0.05 0.05" euler="60 0 0"',
    "ellipsoid": 'type="ellipsoid" size="0.06 0.05 0.04" euler="60 0 0"',
}
"""Tossed primitives (paper Fig. 21): kind -> the MJCF geom attributes that replace the cube's."""


def names() -> tuple[str, ...]:
    """The names of the shipped scenes, sorted."""
    return tuple(sorted(p.stem for p in DIR.glob("*.xml")))


def path(name: str) -> Path:
    """The MJCF file of scene ``name``.

    Raises:
        ValueError: ``name`` is not a shipped scene; the message lists the known ones.
    """
    file = DIR / f"{name}.xml"
    if not file.is_file():
        raise ValueError(f"scene {name!r} is not known; choose one of: {', '.join(names())}")
    return file


def load(name: str, **opt_patch) -> tuple[mujoco.MjModel, mjx.Model]:
    """MjModel and mjx.Model of scene ``name``; ``opt_patch`` sets fields of ``MjModel.opt``
    (e.g. ``timestep=0.005``) before the model is put on the device.

    Raises:
        ValueError: ``name`` is not a shipped scene (see :func:`path`).
    """
    mj = mujoco.MjModel.from_xml_path(str(path(name)))
    for k, v in opt_patch.items():
        setattr(mj.opt, k, v)
    return mj, mjx.put_model(mj)


def geom_pair_friction(mj: mujoco.MjModel) -> mujoco.MjModel:
    """A copy of ``mj`` whose explicit ``<pair>`` contacts have the condim and friction that MuJoCo
    gives the same two geoms without the pair (the larger of the two geoms' condim, and of each
    friction coefficient).

    The ``push`` and ``flick`` scenes make their pusher's contact frictionless with such a pair
    (contacts from distance once needed it); this restores the friction a real pusher has.

    Arguments:
        mj: ``mujoco.MjModel``.

    Returns:
        A new ``mujoco.MjModel``.
    """
    import copy

    out = copy.deepcopy(mj)
    for i, (g1, g2) in enumerate(zip(mj.pair_geom1, mj.pair_geom2)):
        out.pair_dim[i] = max(mj.geom_condim[g1], mj.geom_condim[g2])
        slide, spin, roll = np.maximum(mj.geom_friction[g1], mj.geom_friction[g2])
        out.pair_friction[i] = (slide, slide, spin, roll, roll)
    return out


def primitive(kind: str) -> tuple[mujoco.MjModel, mjx.Model]:
    """The cube-toss scene with the thrown body's geom replaced by ``PRIMITIVES[kind]`` (same density).

    Raises:
        ValueError: ``kind`` is not in :data:`PRIMITIVES`.
    """
    if kind not in PRIMITIVES:
        raise ValueError(f"primitive {kind!r} is not known; choose one of: {', '.join(PRIMITIVES)}")
    xml = path("cube_toss").read_text()
    old = 'type="box" size="0.05 0.05 0.05" density="100" euler="60 0 0"'
    if old not in xml:
        raise RuntimeError(f"{path('cube_toss')} no longer has the cube geom {old!r} that primitive() replaces")
    mj = mujoco.MjModel.from_xml_string(xml.replace(old, PRIMITIVES[kind] + ' density="100"'))
    return mj, mjx.put_model(mj)


def contacts_fn(mx: mjx.Model, smooth: bool, sharpness: float):
    """``qpos -> (dist, pos, frame)`` of every contact slot: MJX's collision stage, or with
    ``smooth`` DiffMJX's smoothed one at ``sharpness``. Not jitted; wrap it in ``jit``/``vmap``."""
    d0 = mjx.make_data(mx)
    rules = None  # MJX's collision stage
    if smooth:
        rules = CollisionConfig(
            smooth=True,
            sharpness=sharpness,
            plane_box="mjx",
            plane_cylinder="mjx",
            box_box="mjx",
            capsule_capsule="mjx",
        )

    def contacts(qpos):
        c = collision.detect(mx, d0.replace(qpos=qpos), rules)
        return c.dist, c.pos, c.frame

    return contacts


def box_corner_heights(mx: mjx.Model, qpos, half: float = 0.05, geom: int = 1) -> np.ndarray:
    """Heights above z = 0 of the eight corners of box ``geom`` (half-size ``half``) at ``qpos``, sorted."""
    d = jax.jit(mjx.kinematics)(mx, mjx.make_data(mx).replace(qpos=jnp.asarray(qpos)))
    centre, rot = np.asarray(d.geom_xpos[geom]), np.asarray(d.geom_xmat[geom]).reshape(3, 3)
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    return np.sort(centre[2] + (signs * half) @ rot[2])


def cube_toss_data(mx: mjx.Model, u0=CUBE_TOSS["u0"]) -> mjx.Data:
    """Initial state of the cube toss: qpos[2] = 0.2, qvel[1] = -0.1, qvel[2] = u0."""
    d = mjx.make_data(mx)
    qvel = d.qvel.at[1].set(CUBE_TOSS["vy0"]).at[2].set(u0)
    return d.replace(qpos=d.qpos.at[2].set(CUBE_TOSS["qz0"]), qvel=qvel)


def cube_toss_loss(mx: mjx.Model, cfg: Config, horizon: int = CUBE_TOSS["horizon"]):
    """Loss of the cube toss as a function of u0: final qpos[1] after ``horizon`` periods."""
    ctrls = jnp.zeros((horizon, mx.nu))

    def loss(u0):
        d, _ = rollout(mx, cube_toss_data(mx, u0), ctrls, cfg)
        return d.qpos[1]

    return loss


def c_engine_cube_toss(u0: float, dt: float = 1e-5, seconds: float = 1.0) -> float:
    """Final qpos[1] of the cube toss in MuJoCo's C engine with RK4 at ``dt``."""
    mj, _ = load("cube_toss")
    qpos, qvel = mj.qpos0.copy(), np.zeros(mj.nv)
    qpos[2], qvel[1], qvel[2] = CUBE_TOSS["qz0"], CUBE_TOSS["vy0"], u0
    return float(c_engine_rk4(mj, seconds, dt, qpos, qvel).qpos[1])
