"""Collision detection with MJX's hard case splits replaced by sigmoid blends (``collision.smooth``).

``collide(m, d, sharpness)`` is MJX's collision stage with the smoothed functions of
:mod:`diffmjx.collision.pairs` in place of MJX's for those geom pairs; every other pair keeps
MJX's function. ``check_model`` rejects, at model-load time, what this stage cannot collide.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.collision.pairs import SMOOTHED_PAIRS, table
from diffmjx.collision.soft import soft_greater, soft_max_mask, soft_where

__all__ = ["SMOOTHED_PAIRS", "check_model", "collide", "soft_greater", "soft_max_mask", "soft_where"]


def _pair_name(types) -> str:
    return "-".join(_mjx.GeomType(int(t)).name.lower() for t in types)


def check_model(m) -> None:
    """Raise ``ValueError`` now, not inside a trace, for a model the collision stage cannot run.

    Checks every geom pair that may collide (contype/conaffinity, different bodies) against the
    pairs MJX implements, and the custom numerics the smoothed driver does not support.
    """
    for name in ("max_geom_pairs", "max_contact_points"):
        if _mjx.numeric(m, name) > -1:
            raise ValueError(f"collision.smooth=True does not support the custom numeric {name!r}")
    contype, conaff = np.asarray(m.geom_contype), np.asarray(m.geom_conaffinity)
    types, body = np.asarray(m.geom_type), np.asarray(m.geom_bodyid)
    for g1, g2 in zip(*np.triu_indices(m.ngeom, 1), strict=True):
        if body[g1] == body[g2] or not (contype[g1] & conaff[g2] or contype[g2] & conaff[g1]):
            continue
        pair = tuple(_mjx.GeomType(t) for t in sorted((int(types[g1]), int(types[g2]))))
        if pair not in _mjx.MJX_COLLISION_TABLE:
            raise ValueError(
                f"no collision function for geom pair {_pair_name(pair)}; supported pairs: "
                + ", ".join(sorted(_pair_name(k) for k in _mjx.MJX_COLLISION_TABLE))
                + f"; smoothed: {', '.join(_pair_name(k) for k in SMOOTHED_PAIRS)}"
            )


def collide(m, d, sharpness: float):
    """Collision stage ``(m, d) -> d`` with smoothed functions where we have them."""
    if _mjx.ncon(d) == 0:
        return d
    smoothed = table(sharpness)
    by_condim: dict[int, list] = {}
    for key, contact in _mjx.contact_groups(m, d).items():
        fn = smoothed.get(key.types) or _mjx.MJX_COLLISION_TABLE[key.types]
        dist, pos, frame = fn(m, d, key, contact.geom)
        if fn.ncon > 1:
            contact = jax.tree.map(lambda x, r=fn.ncon: jnp.repeat(x, r, axis=0), contact)
        by_condim.setdefault(key.condim, []).append(contact.replace(dist=dist, pos=pos, frame=frame))
    contacts = [c for k in sorted(by_condim) for c in by_condim[k]]
    return _mjx.with_contact(d, jax.tree.map(lambda *x: jnp.concatenate(x), *contacts))
