"""Helpers of the two box scenes: random contact poses of ``box_pair`` and the rollout of ``box_drop``.

``box_pair`` is two free boxes: :func:`random_contact_poses` samples poses in which they touch as a
simulation sees them (0.2-5 mm deep), for checks of box-box collision functions. ``box_drop`` is a
tilted box dropped onto a box fixed on a table: :func:`drop_final_qpos` is its final ``qpos`` after
:data:`DROP_PERIODS` control periods as a function of the initial sideways velocity, the trajectory
the study ``experiments.box_box`` compares with MuJoCo's C engine per box-box rule::

    mj, mx = scenes.load("box_drop")
    final = jax.jit(boxes.drop_final_qpos(mx, diffmjx.Config()))(0.0)
    c_engine = diffmjx.reference.c_engine_rk4(mj, boxes.DROP_PERIODS * 0.01, 1e-4).qpos
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx._mjx import mjx
from diffmjx.config import Config
from diffmjx.integration.integrate import rollout
from diffmjx.scenes import contacts_fn

__all__ = ["DROP_PERIODS", "N_POSES", "drop_final_qpos", "random_contact_poses"]

N_POSES = 400
"""Default number of poses of :func:`random_contact_poses`."""
DROP_PERIODS = 60
"""Control periods (of 0.01 s) of the box drop: 0.6 s, the box lands on an edge, tips over and settles."""


def random_contact_poses(mx: mjx.Model, n: int = N_POSES, seed: int = 0):
    """``n`` qpos of a two-free-box model: random orientations, the second box moved along a random
    direction until MJX's deepest contact is 0.2-5 mm deep (bisection), so the poses are contacts a
    simulation sees rather than deep interpenetration."""
    rng = np.random.default_rng(seed)
    q1, q2 = rng.normal(size=(n, 4)), rng.normal(size=(n, 4))
    q1 /= np.linalg.norm(q1, axis=1, keepdims=True)
    q2 /= np.linalg.norm(q2, axis=1, keepdims=True)
    u = rng.normal(size=(n, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    target = rng.uniform(2e-4, 5e-3, size=n)
    mjx_contacts = jax.jit(jax.vmap(contacts_fn(mx, False, 0.0)))

    def qpos(shift):
        return jnp.asarray(np.c_[np.zeros((n, 3)), q1, u * shift[:, None], q2])

    lo, hi = np.zeros(n), np.full(n, 0.2)  # deep at 0, apart at 0.2
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        deeper = -np.asarray(mjx_contacts(qpos(mid))[0]).min(1) > target
        lo, hi = np.where(deeper, mid, lo), np.where(deeper, hi, mid)
    return qpos(lo)


def drop_final_qpos(mx: mjx.Model, cfg: Config, periods: int = DROP_PERIODS):
    """Final qpos of the box drop (``mx``: the ``box_drop`` scene, or a variant of it) after
    ``periods`` control periods with ``cfg``, as a function of the initial y velocity. Not jitted."""
    d0 = mjx.make_data(mx)
    ctrls = jnp.zeros((periods, 0))

    def final_qpos(vy0):
        return rollout(mx, d0.replace(qvel=d0.qvel.at[1].set(vy0)), ctrls, cfg)[0].qpos

    return final_qpos
