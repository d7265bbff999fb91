"""MyoSuite's muscle models as control tasks: a model, its start state and a cost of the state.

Each task builder returns ``(mj, mx, d0, cost)``: the ``MjModel`` and ``mjx.Model`` with the paper's
App. E.3 settings (geom solref (0.02, 1), solimp :data:`SOLIMP`, or :data:`SOLIMP_CFD` with contacts
from distance; timestep 0.0025 s, Newton with 4 iterations and 16 line-search iterations), the start
``mjx.Data`` and ``cost(d, ctrl)``, a scalar of a state for :mod:`diffmjx.mpc`'s planners.

- :func:`baoding`: swap the two balls in the MyoHand (paper Sec. 5.2, Fig. 12).
- :func:`bionic_tennis`: MyoArm with the modular prosthetic limb, a racket welded to the prosthetic
  palm and a ball flying past it; the cost is the ball's distance to a goal (Fig. 13).
- :func:`die_reorient`: turn MyoSuite's die in the MyoHand's palm to a goal orientation, or
  (``on_table``) the die resting on a table under the hand turned palm down.

:data:`TASKS` names them as the study ``experiments.myo_mpc`` does. The models come from the
installed MyoSuite package (imported when a builder runs); nothing is downloaded.
"""

from __future__ import annotations

import functools
import warnings

import jax.numpy as jnp
import numpy as np

from diffmjx._mjx import mjx

__all__ = [
    "BAODING_ENV",
    "DIE_GOAL_EULER",
    "DIE_HALF",
    "DIE_TABLE",
    "PALM",
    "SOLIMP",
    "SOLIMP_CFD",
    "TASKS",
    "TENNIS_BALL",
    "TENNIS_GOAL",
    "TENNIS_HAND",
    "baoding",
    "bionic_tennis",
    "die_reorient",
    "reset_env",
]

SOLIMP = (0.0, 0.95, 0.001, 0.5, 2.0)
"""Geom solimp of App. E.3 (the impedance at touch is 0: a continuous touchdown)."""
SOLIMP_CFD = (0.1, 0.95, 0.001, 0.5, 2.0)
"""Geom solimp of App. E.3 with contacts from distance."""
PALM = "thirdmc"
"""The body whose frame holds the baoding targets: the third metacarpal."""
BAODING_ENV = "myoChallengeBaodingP1-v1"
"""The MyoSuite environment of the baoding task: :func:`baoding` starts from its ``reset(seed=0)``."""


def reset_env(env_id: str, seed: int = 0):
    """MyoSuite's environment ``env_id`` after ``reset(seed=seed)``, unwrapped: its ``model`` and
    ``data`` are MuJoCo's ``MjModel`` and ``MjData`` at the episode start."""
    from myosuite.utils import gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = gym.make(env_id)
        env.reset(seed=seed)
    return env.unwrapped


def baoding(cfd: bool):
    """MyoHand baoding model with App. E.3's settings, its start state and the swap cost.

    The start state is MyoSuite's episode start (``reset(seed=0)``): the hand open and the forearm
    turned palm up (``pro_sup`` at -1.57) with the two balls resting in the palm. The model's
    ``qpos0`` has the forearm at 0, where the balls roll off the hand and fall to the floor."""
    import mujoco

    env = reset_env(BAODING_ENV)
    mj, start = env.model, env.data
    qpos, qvel, act = start.qpos.copy(), start.qvel.copy(), start.act.copy()
    mj.opt.timestep = 0.0025
    mj.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    mj.opt.iterations, mj.opt.ls_iterations = 4, 16
    mj.geom_solref[:] = (0.02, 1.0)
    mj.geom_solimp[:] = SOLIMP_CFD if cfd else SOLIMP
    mx = mjx.put_model(mj)
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray(qpos), qvel=jnp.asarray(qvel), act=jnp.asarray(act))

    balls = _free_joints(mj)  # ball1, ball2: qpos addresses of their free joints
    palm = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_BODY, PALM)
    dc = mujoco.MjData(mj)
    dc.qpos[:], dc.qvel[:], dc.act[:] = qpos, qvel, act
    mujoco.mj_forward(mj, dc)
    start = [dc.qpos[a : a + 3].copy() for a in balls]
    rot, origin = dc.xmat[palm].reshape(3, 3), dc.xpos[palm]
    targets = jnp.asarray([rot.T @ (start[1] - origin), rot.T @ (start[0] - origin)])  # swapped, palm frame

    def cost(d, ctrl):
        r, o = d.xmat[palm], d.xpos[palm]
        goal = o + targets @ r.T
        pos = jnp.stack([d.qpos[a : a + 3] for a in balls])
        return jnp.sum(jnp.sqrt(jnp.sum((pos - goal) ** 2, axis=1) + 1e-12))

    return mj, mx, d0, cost


TENNIS_HAND = (
    "firstmc",
    "proximal_thumb",
    "distal_thumb",
    "secondmc",
    "proxph2",
    "midph2",
    "distph2",
    "thirdmc",
    "proxph3",
    "midph3",
    "distph3",
    "fourthmc",
    "proxph4",
    "midph4",
    "distph4",
    "fifthmc",
    "proxph5",
    "midph5",
    "distph5",
)
"""Bodies of the muscle hand whose capsules the tennis ball can touch."""
TENNIS_BALL = {"pos": (0.124, 0.214, 0.56), "vel": (0.0, -1.5, 0.0), "radius": 0.033, "mass": 0.058}
"""Start of the tennis ball (world frame, model at ``qpos0``): 7 cm in front of the racket face, moving
sideways along it; it passes the face 2.9 cm clear."""
TENNIS_GOAL = (-0.15, 0.06, 0.62)
"""The goal: in front of the muscle hand's fingers, 27 cm from the ball's start across the racket."""


def bionic_tennis(cfd: bool):
    """MyoArm + prosthesis with a racket, a ball flying past it, and the ball-to-goal cost.

    Built with ``mujoco.MjSpec`` from MyoSuite's ``myoarm_bionic_bimanual.xml`` (MyoChallenge 2024):

    - the task's box (``manip_object``) is removed;
    - every collision of the original model is switched off (contype and conaffinity 0, its
      explicit pairs and excludes deleted). Stock MJX has no cylinder-mesh collision, and the
      arm's self-contacts (ellipsoids and meshes) would cost far more than the task needs;
    - a racket (a 14 x 18 x 1.6 cm box head on a capsule handle) is welded to the prosthetic palm,
      30 cm out along the fingers, its face towards the muscle hand;
    - a ball (r 3.3 cm, 58 g) on a free joint, with explicit contact pairs only to the racket head
      (solref (-100000, 0): stiff and undamped, a bouncy strings bed), the floor and the muscle
      hand's 19 capsules (solref (0.02, 1)); solimp App. E.3's, with CFD (0.1, 0.95, ...);
    - App. E.3's options: timestep 0.0025 s, Newton, 4 iterations, 16 line-search iterations.

    Returns:
        ``(mj, mx, d0, cost)``; ``d0`` starts at ``qpos0`` with the ball's velocity set.
    """
    import mujoco
    from myosuite.core.model_builder import ModelBuilder
    from myosuite.envs.myo.tasks.challenge import _ASSETS_ROOT

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, spec = ModelBuilder.from_xml_file(str(_ASSETS_ROOT / "arm" / "myoarm_bionic_bimanual.xml")).build()
    for item in (*spec.pairs, *spec.excludes):
        spec.delete(item)
    spec.delete(spec.body("manip_object"))
    racket = spec.body("prosthesis/palm").add_body(name="racket", pos=[0.0, -0.30, 0.0])
    racket.add_geom(
        name="racket_head", type=mujoco.mjtGeom.mjGEOM_BOX, size=[0.07, 0.09, 0.008], mass=0.15, rgba=[0.8, 0.2, 0.2, 1]
    )
    racket.add_geom(
        name="racket_handle",
        type=mujoco.mjtGeom.mjGEOM_CAPSULE,
        fromto=[0, 0.09, 0, 0, 0.24, 0],
        size=[0.012, 0, 0],
        mass=0.1,
    )
    ball = spec.worldbody.add_body(name="ball", pos=list(TENNIS_BALL["pos"]))
    ball.add_freejoint(name="ball")
    ball.add_geom(
        name="ball",
        type=mujoco.mjtGeom.mjGEOM_SPHERE,
        size=[TENNIS_BALL["radius"], 0, 0],
        mass=TENNIS_BALL["mass"],
        rgba=[0.8, 0.9, 0.2, 1],
    )
    spec.worldbody.add_site(name="tennis_goal", pos=list(TENNIS_GOAL), size=[0.02, 0, 0], rgba=[0, 1, 0, 0.5])
    for g in spec.geoms:  # only the explicit pairs below may collide
        g.contype, g.conaffinity = 0, 0
    solimp = list(SOLIMP_CFD if cfd else SOLIMP)

    def ball_pair(other: str, solref=(0.02, 1.0)):
        spec.add_pair(
            geomname1="ball",
            geomname2=other,
            condim=3,
            solref=list(solref),
            solimp=solimp,
            friction=[1.0, 1.0, 0.005, 0.0001, 0.0001],
        )

    ball_pair("racket_head", solref=(-100000.0, 0.0))
    ball_pair("floor")
    hand = [g for g in spec.geoms if g.type == mujoco.mjtGeom.mjGEOM_CAPSULE and g.parent.name in TENNIS_HAND]
    for k, g in enumerate(hand):
        g.name = g.name or f"tennis_hand_capsule{k}"
        ball_pair(g.name)
    spec.option.timestep = 0.0025
    spec.option.solver = mujoco.mjtSolver.mjSOL_NEWTON
    spec.option.iterations, spec.option.ls_iterations = 4, 16
    mj = spec.compile()
    mx = mjx.put_model(mj)
    adr = int(mj.jnt_dofadr[mj.joint("ball").id])
    qvel = np.zeros(mj.nv)
    qvel[adr : adr + 3] = TENNIS_BALL["vel"]
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray(mj.qpos0), qvel=jnp.asarray(qvel))
    ball_body, goal = mj.body("ball").id, jnp.asarray(TENNIS_GOAL)

    def cost(d, ctrl):
        return jnp.sqrt(jnp.sum((d.xpos[ball_body] - goal) ** 2) + 1e-12)

    return mj, mx, d0, cost


DIE_GOAL_EULER = (0.4, -0.3, 0.6)
"""Goal orientation of the die (intrinsic xyz Euler angles, rad): a fixed draw inside MyoSuite's
demo task's +-45 degree range; the goal position is the die's start."""
DIE_TABLE = (-0.205, -0.55, 1.307)
"""The added table's centre (x, y) and top (z), m: 2 cm of air under the palm."""
DIE_HALF = 0.0289
"""The die's half extent (box half sizes and edge capsules), m."""


def die_reorient(cfd: bool, on_table: bool = False):
    """MyoHand holding MyoSuite's die (``myohand_die.xml``, MyoChallenge 2022), or the die on a
    table under the hand (``on_table``), and the reorientation cost.

    - The die is MyoSuite's: a rounded cube of 12 edge capsules and 3 boxes on three slide and
      three hinge joints. The hand starts in MyoSuite's reset pose (every joint 0, the forearm
      turned palm up, ``qpos[0] = -1.5``), the die resting in the palm.
    - Switched off (contype and conaffinity 0), because stock MJX has no cylinder-box or
      ellipsoid-box collision: the world's cylinder (its top 1.4 m below the palm; the die's slide
      joints stop it 0.25 m below its start, so it can never reach it), and the five fingernail
      ellipsoids (2 mm thick, on the backs of the distal phalanges, whose capsules cover the
      fingertips).
    - App. E.3's contact and solver settings as for baoding.

    - On the table (:data:`DIE_TABLE`): the model's table is that unreachable cylinder, so a box
      table (30 x 30 x 4 cm) is added under the hand; the forearm is turned palm down
      (``qpos[0] = 1.5``) and the die rests on the table's top, 2 cm below the palm, touching no
      finger at the start (with relaxed muscles the hand droops onto it after about 0.2 s).

    Cost of a state: ``10 * |p - p_goal| + 2 sqrt(1 - <q, q_goal>^2)``, the die's position error in
    m (goal: where it starts) and the chord of its rotation error (2 sin(angle / 2), rad for
    small angles; the weights of MyoSuite's ``sparse`` reward, -10 pos - rot).

    Returns:
        ``(mj, mx, d0, cost)``.
    """
    import mujoco
    from myosuite.core.model_builder import ModelBuilder
    from myosuite.envs.myo.tasks.challenge import _ASSETS_ROOT

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, spec = ModelBuilder.from_xml_file(str(_ASSETS_ROOT / "hand" / "myohand_die.xml")).build()
    for g in spec.geoms:  # pairs stock MJX cannot collide: world cylinder-box, ellipsoid-box
        if g.type == mujoco.mjtGeom.mjGEOM_ELLIPSOID or (
            g.type == mujoco.mjtGeom.mjGEOM_CYLINDER and g.parent.name == "world"
        ):
            g.contype, g.conaffinity = 0, 0
    cx, cy, top = DIE_TABLE
    if on_table:
        spec.worldbody.add_geom(
            name="table",
            type=mujoco.mjtGeom.mjGEOM_BOX,
            size=[0.15, 0.15, 0.02],
            pos=[cx, cy, top - 0.02],
            rgba=[0.6, 0.5, 0.4, 1.0],
        )
    spec.option.timestep = 0.0025
    spec.option.solver = mujoco.mjtSolver.mjSOL_NEWTON
    spec.option.iterations, spec.option.ls_iterations = 4, 16
    mj = spec.compile()
    mj.geom_solref[:] = (0.02, 1.0)
    mj.geom_solimp[:] = SOLIMP_CFD if cfd else SOLIMP
    qpos = mj.qpos0.copy()
    qpos[0] = 1.5 if on_table else -1.5  # palm down over the table, palm up holding the die
    if on_table:  # the die's slide joints move it from its body position onto the table
        start = np.array([cx, cy, top + DIE_HALF]) - mj.body("Object").pos
        qpos[[mj.joint(n).qposadr[0] for n in ("OBJTx", "OBJTy", "OBJTz")]] = start
    mx = mjx.put_model(mj)
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray(qpos))
    die = mj.body("Object").id
    dc = mujoco.MjData(mj)
    dc.qpos[:] = qpos
    mujoco.mj_forward(mj, dc)
    goal_pos = jnp.asarray(dc.xpos[die])
    goal_quat = np.zeros(4)
    mujoco.mju_euler2Quat(goal_quat, np.asarray(DIE_GOAL_EULER), "xyz")
    goal_quat = jnp.asarray(goal_quat)

    def cost(d, ctrl):
        pos = jnp.sqrt(jnp.sum((d.xpos[die] - goal_pos) ** 2) + 1e-12)
        rot = 2.0 * jnp.sqrt(jnp.maximum(1.0 - jnp.dot(d.xquat[die], goal_quat) ** 2, 0.0) + 1e-12)
        return 10.0 * pos + rot

    return mj, mx, d0, cost


def _free_joints(mj):
    return [int(mj.jnt_qposadr[j]) for j in range(mj.njnt) if mj.jnt_type[j] == 0]


TASKS = {
    "baoding": baoding,
    "tennis": bionic_tennis,
    "die": die_reorient,
    "die_table": functools.partial(die_reorient, on_table=True),
}
"""Task name -> builder ``(cfd: bool) -> (mj, mx, d0, cost)``; ``die_table`` is the die on a table."""
