"""What :func:`diffmjx.mpc.closed_loop` plans on and executes on, besides the planning model itself.

- :func:`contacts_only_with`: a cheaper planning model that keeps only the contacts a task needs.
- :class:`CEnginePlant`: MuJoCo's C engine as the executed "real system", at its own finer step.
"""

import copy
import types
import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx.config import SOLVERS, Config
from diffmjx.physics.constraint import SOLREF_FIELDS
from diffmjx.physics.dynamics import forward_unchecked

__all__ = ["CEnginePlant", "contacts_only_with", "filtered_pairs"]


def filtered_pairs(mj) -> set[tuple[int, int]]:
    """Geom pairs that pass the contype/conaffinity filter (the other filters, same body, parent and
    exclusions, do not depend on those bits)."""
    ct, ca = np.asarray(mj.geom_contype), np.asarray(mj.geom_conaffinity)
    ok = ((ct[:, None] & ca[None, :]) | (ct[None, :] & ca[:, None])) != 0
    i, j = np.nonzero(np.triu(ok, 1))
    return set(zip(i.tolist(), j.tolist(), strict=True))


def contacts_only_with(mj, bodies, among=()):
    """A copy of a ``mujoco.MjModel`` whose only candidate contacts are those of ``bodies`` (and,
    optionally, those among a set of geoms).

    For a planning model (:func:`closed_loop`'s ``m``, with the full model as its ``plant``):
    MJX evaluates every candidate geom pair in every period, in contact or not, so a hand's
    self-contacts can cost more than the contacts the task is about. Every geom pair that
    passes the model's contype/conaffinity filter and involves a geom of ``bodies`` (with
    anything, the world included) is kept, and so is every such pair of two geoms of ``among``;
    every other pair is dropped. No pair is added. Explicit ``<pair>`` contacts are kept as they
    are.

    Arguments:
        mj: ``mujoco.MjModel``.
        bodies: body names or ids whose contacts are kept (e.g. the manipulated objects).
        among: geom names or ids whose pairs with each other are kept too (e.g. a hand's finger
            capsules, which press on each other while they grip).

    Returns:
        A new ``mujoco.MjModel`` (pass it to ``mjx.put_model``).

    Raises:
        ValueError: for an unknown body or geom, or where the model's contact filter bits cannot
            express the selection without adding a pair.
    """

    def ids(names, kind, count, what, noun):
        out = set()
        for n in names:
            i = mujoco.mj_name2id(mj, kind, n) if isinstance(n, str) else int(n)
            if not 0 <= i < count:
                raise ValueError(f"{what}: no {noun} {n!r} in the model")
            out.add(i)
        return out

    body_ids = ids(bodies, mujoco.mjtObj.mjOBJ_BODY, mj.nbody, "bodies", "body")
    mine = np.isin(np.asarray(mj.geom_bodyid), sorted(body_ids))
    inner = np.zeros(mj.ngeom, bool)
    inner[sorted(ids(among, mujoco.mjtObj.mjOBJ_GEOM, mj.ngeom, "among", "geom"))] = True
    inner &= ~mine
    out = copy.deepcopy(mj)
    before = filtered_pairs(mj)
    on = (np.asarray(mj.geom_contype) != 0) | (np.asarray(mj.geom_conaffinity) != 0)
    # bit 0: an object's geom collides with every geom; bit 1: a geom of ``among`` with the others of
    # ``among``; every other geom with the objects only
    out.geom_contype[:] = np.where(on, np.where(inner, 3, 1), 0)
    out.geom_conaffinity[:] = np.where(on, np.where(mine, 1, np.where(inner, 2, 0)), 0)
    wanted = {(i, j) for i, j in before if mine[i] or mine[j] or (inner[i] and inner[j])}
    after = filtered_pairs(out)
    if after != wanted:
        i, j = sorted(after - wanted)[0]
        raise ValueError(
            f"bodies: keeping only their contacts would add the pair of geoms {i} and {j}, which the "
            "model's contype/conaffinity filter excludes; exclude it in the model (<exclude>) first"
        )
    return out


def _warn_refsafe(plant, m, sim: Config) -> None:
    """Warn where MuJoCo's ``refsafe`` gives the planner softer constraints than the plant: it raises
    every ``solref`` time constant below twice the integration step to that, and the planning model
    steps at its control period (adaptive solvers) or a share of it (fixed-step solvers), the plant
    at its own, finer step."""
    if int(m.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE):
        return
    step = float(m.opt.timestep)
    if SOLVERS[sim.integrator.solver].fixed_step:
        step /= sim.integrator.substeps
    floor = 2.0 * step
    if floor <= 2.0 * plant.opt.timestep:
        return
    tc = np.concatenate([np.asarray(getattr(plant, f)).reshape(-1, 2)[:, 0] for f in SOLREF_FIELDS])
    soft = tc[(tc > 0) & (tc < floor)]
    if soft.size:
        warnings.warn(
            f"refsafe: the planning model raises solref time constants below {floor:g} s (twice its "
            f"integration step, {step:g} s) to that, the C-engine plant at {plant.opt.timestep:g} s only below "
            f"{2.0 * plant.opt.timestep:g} s, so time constants down to {soft.min():g} s make the planner's "
            'contacts softer than the plant\'s. Disable refsafe in the model (<option><flag refsafe="disable"/>'
            "</option>), or plan with a fixed-step solver of a finer step",
            stacklevel=4,
        )


class CEnginePlant:
    """Execution on MuJoCo's C engine, as :func:`diffmjx.mpc.closed_loop` runs a ``mujoco.MjModel``
    plant: ``(d, u, dt) -> (d, traj)`` like its compiled MJX execution, each control of ``u`` held
    for the planning model ``m``'s timestep in ``mj_step``s of the plant's (finer) one, from ``d``'s
    state and mocap poses; ``traj`` has the end state of every period and ``cost`` there
    (``obs``), the cost evaluated on ``m``'s forward pass."""

    def __init__(self, plant, m, cost, sim: Config):
        ratio = float(m.opt.timestep) / plant.opt.timestep
        self.substeps = round(ratio)
        if self.substeps < 1 or abs(self.substeps - ratio) > 1e-6 * ratio:
            raise ValueError(
                f"plant's timestep {plant.opt.timestep} must divide the planning model's {float(m.opt.timestep)} "
                "(each control is held for one control period)"
            )
        self.plant, self.data = plant, mujoco.MjData(plant)
        self.observe = jax.jit(lambda d: cost(forward_unchecked(m, d, sim), d.ctrl))
        _warn_refsafe(plant, m, sim)

    def __call__(self, d, u, dt):
        data, rows = self.data, {"qpos": [], "qvel": [], "act": [], "obs": []}
        for name in ("qpos", "qvel", "act", "mocap_pos", "mocap_quat"):  # the state to continue from
            getattr(data, name)[:] = np.asarray(getattr(d, name))
        data.time = float(d.time)
        for ut in np.asarray(u):
            data.ctrl[:] = ut
            for _ in range(self.substeps):
                mujoco.mj_step(self.plant, data)
            x = d.replace(
                qpos=jnp.asarray(data.qpos, d.qpos.dtype),
                qvel=jnp.asarray(data.qvel, d.qvel.dtype),
                act=jnp.asarray(data.act, d.act.dtype),
                ctrl=jnp.asarray(ut, d.ctrl.dtype),
                time=jnp.asarray(data.time, jnp.asarray(d.time).dtype),
            )
            for name in ("qpos", "qvel", "act"):
                rows[name].append(np.array(getattr(data, name)))
            rows["obs"].append(float(self.observe(x)))
            d = x
        traj = types.SimpleNamespace(**{k: np.asarray(v) for k, v in rows.items()}, dt=np.full(len(u), dt))
        return d, traj
