"""Collision stage with MJX's hard case splits replaced by sigmoid blends (``collision.smooth``).

As MJX's ``collision_driver``: the table of which geom pairs use which function lives here.
:func:`collide` is MJX's collision stage with the smoothed functions of
:mod:`diffmjx.physics.collision.pairs` and :mod:`diffmjx.physics.collision.box_box` in place of MJX's for those
pairs; every other pair keeps MJX's function. Which functions is set by one typed object, the
``collision`` section of :class:`diffmjx.Config` (:class:`diffmjx.config.CollisionConfig`:
``smooth``, ``sharpness`` and the five pair rules); :func:`stage` picks MJX's stage or
:func:`collide` for it. :func:`check_model` rejects, up front, what this
stage cannot collide.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.config import CollisionConfig
from diffmjx.physics.collision import sdf
from diffmjx.physics.collision.box_box import SLOTS, box_box, box_box_clipped
from diffmjx.physics.collision.pairs import (
    capsule_box,
    capsule_box_spheres,
    capsule_capsule,
    capsule_capsule_paired,
    plane_box,
    plane_box_deepest,
    plane_capsule,
    plane_cylinder,
    plane_cylinder_deepest,
    sphere_box,
    sphere_capsule,
    sphere_cylinder,
)
from diffmjx.registry import (
    BOX_BOX_RULES,
    CAPSULE_BOX_RULES,
    CAPSULE_CAPSULE_RULES,
    PLANE_BOX_RULES,
    PLANE_CYLINDER_RULES,
    CollisionRuleEntry,
)

__all__ = [
    "BOX_BOX_SLOTS",
    "SMOOTHED_PAIRS",
    "allocate",
    "check_model",
    "collide",
    "contact_dims",
    "detect",
    "has_box_pairs",
    "stage",
    "table",
]

_G = _mjx.GeomType
# (geom types, MJX collider, contacts per pair, smoothed function)
_SMOOTHED = (
    ((_G.PLANE, _G.BOX), _mjx.convex_collider, 4, plane_box),
    ((_G.BOX, _G.BOX), _mjx.convex_collider, 4, box_box),
    ((_G.PLANE, _G.CAPSULE), _mjx.primitive_collider, 2, plane_capsule),
    ((_G.PLANE, _G.CYLINDER), _mjx.primitive_collider, 3, plane_cylinder),
    ((_G.SPHERE, _G.CAPSULE), _mjx.primitive_collider, 1, sphere_capsule),
    ((_G.CAPSULE, _G.CAPSULE), _mjx.primitive_collider, 1, capsule_capsule),
)
SMOOTHED_PAIRS = tuple(types for types, *_ in _SMOOTHED)
"""Geom-type pairs that have a smoothed collision function."""


def table(rules: CollisionConfig, apart: bool = False) -> dict:
    """DiffMJX's collision functions, keyed by MJX geom-type pairs; other pairs keep MJX's.

    Arguments:
        rules: the ``collision`` section of :class:`diffmjx.Config`:

            * ``smooth``: the smoothed functions of :data:`SMOOTHED_PAIRS` at ``sharpness`` (1/m;
              larger is closer to MJX's exact geometry); off: none of them.
            * ``plane_box``: ``deepest`` replaces the plane-box function by
              :func:`~diffmjx.physics.collision.pairs.plane_box_deepest` (with or without smoothing);
              ``mjx`` keeps MJX's vertex rule (smoothed under ``smooth``).
            * ``plane_cylinder``: ``deepest`` replaces the plane-cylinder function by
              :func:`~diffmjx.physics.collision.pairs.plane_cylinder_deepest` (smoothed under ``smooth``);
              ``mjx`` keeps MJX's rule.
            * ``box_box``: ``clipped`` replaces MJX's box-box by
              :func:`~diffmjx.physics.collision.box_box.box_box_clipped`, the C engine's construction
              (smoothed at ``sharpness`` under ``smooth``); ``mjx`` keeps MJX's rule (under
              ``smooth`` the blend of it, :func:`~diffmjx.physics.collision.box_box.box_box`).
            * ``capsule_capsule``: ``paired`` replaces MJX's capsule-capsule by
              :func:`~diffmjx.physics.collision.pairs.capsule_capsule_paired`, the C engine's
              contacts (two slots; under ``smooth`` the blend of MJX's one contact and an empty
              slot); ``mjx`` keeps MJX's rule.
            * ``capsule_box``: ``spheres`` replaces MJX's capsule-box by
              :func:`~diffmjx.physics.collision.pairs.capsule_box_spheres`, the C engine's contacts;
              ``blended`` by :func:`~diffmjx.physics.collision.pairs.capsule_box`, MJX's face-or-edge
              choice with its switch blended and the true distance apart; ``mjx`` keeps MJX's rule.
              Under ``smooth`` each is the blended rule (its frames smoothed at ``sharpness``).

        apart: the contacts that contacts from distance build their rows from: under ``smooth``
            with ``box_box=clipped``, box-box takes the blend of MJX's rule (padded to the clipped
            rule's eight slots, so the layout is the forward's), which reports the true distance
            of boxes apart where the clipped construction reports only penetrating points.

    The five pair fields pick entries of :data:`diffmjx.registry.PLANE_BOX_RULES`,
    ``PLANE_CYLINDER_RULES``, ``BOX_BOX_RULES``, ``CAPSULE_CAPSULE_RULES`` and ``CAPSULE_BOX_RULES`` (:class:`~diffmjx.registry.CollisionRuleEntry`):
    another rule for one of these pairs is one function and one ``register`` line.

    Returns:
        ``{(GeomType, GeomType): collider}``, each collider with MJX's signature and contact count.
    """
    sharpness = rules.sharpness if rules.smooth else None
    out = {}
    if sharpness is not None:
        out = {
            types: collider(ncon=ncon)(functools.partial(fn, sharpness=sharpness))
            for types, collider, ncon, fn in _SMOOTHED
        }
    # MJX's sphere-cylinder is a signed-distance search whose derivative is NaN (pairs.sphere_cylinder)
    out[(_G.SPHERE, _G.CYLINDER)] = _mjx.primitive_collider(ncon=1)(
        functools.partial(sphere_cylinder, sharpness=sharpness)
    )
    # MJX's other SDF-search pairs: its values, the derivative at the point found (NaN-free)
    for types in sdf.PAIRS:
        out[types] = sdf.held_point(types)
    # MJX's sphere-box reports distance 1 for any separated pose: no contacts from distance
    out[(_G.SPHERE, _G.BOX)] = _mjx.primitive_collider(ncon=1)(functools.partial(sphere_box, sharpness=sharpness))
    for types, choices, name in _RULES:  # the pairs whose function a config field picks
        fn = choices[getattr(rules, name)].build(sharpness, apart)
        if fn is not None:
            out[types] = fn
    return out


BOX_BOX_SLOTS = SLOTS
"""Contacts per box pair under ``collision.box_box=clipped``: the C engine's most (an octagon)."""


def _keep(sharpness, apart):
    return None  # the rest of the table's function: MJX's, or its blend under collision.smooth


def _plane_box_deepest(sharpness, apart):
    return _mjx.convex_collider(ncon=4)(plane_box_deepest)


def _plane_cylinder_deepest(sharpness, apart):
    return _mjx.primitive_collider(ncon=3)(functools.partial(plane_cylinder_deepest, sharpness=sharpness))


def _box_box_clipped(sharpness, apart):
    # the C engine keeps every point of the clipped polygon, up to eight: so many slots per box pair;
    # under smoothing the same construction with its hand-overs widened by the sharpness
    fn = functools.partial(box_box_clipped, sharpness=sharpness)
    if apart and sharpness is not None:
        fn = _padded(functools.partial(box_box, sharpness=sharpness))
    return _mjx.convex_collider(ncon=BOX_BOX_SLOTS)(fn)


def _capsule_capsule_paired(sharpness, apart):
    if sharpness is None:
        return _mjx.primitive_collider(ncon=2)(capsule_capsule_paired)

    # smoothed: the blend of MJX's one contact, in the two slots of the unsmoothed rule's layout (the
    # forward's and contacts from distance's contacts keep one layout)
    def smoothed(cap1, cap2):
        dist, pos, frame = capsule_capsule(cap1, cap2, sharpness)
        return jnp.stack([dist, 1.0]), jnp.stack([pos, pos]), jnp.stack([frame, frame])

    return _mjx.primitive_collider(ncon=2)(smoothed)


def _capsule_box_blended(sharpness, apart):
    return _mjx.convex_collider(ncon=2)(functools.partial(capsule_box, sharpness=sharpness))


def _capsule_box_spheres(sharpness, apart):
    if sharpness is not None:
        return _capsule_box_blended(sharpness, apart)  # smoothed: the blended rule (same two slots)
    return _mjx.convex_collider(ncon=2)(capsule_box_spheres)


def _capsule_box_mjx(sharpness, apart):
    # MJX's own reports distance 1 for any separated pose and switches face to edge at depth
    return None if sharpness is None else _capsule_box_blended(sharpness, apart)


PLANE_BOX_RULES.register("deepest", CollisionRuleEntry(_plane_box_deepest))
PLANE_BOX_RULES.register("mjx", CollisionRuleEntry(_keep))
PLANE_CYLINDER_RULES.register("deepest", CollisionRuleEntry(_plane_cylinder_deepest))
PLANE_CYLINDER_RULES.register("mjx", CollisionRuleEntry(_keep))
BOX_BOX_RULES.register("clipped", CollisionRuleEntry(_box_box_clipped))
BOX_BOX_RULES.register("mjx", CollisionRuleEntry(_keep))
CAPSULE_CAPSULE_RULES.register("paired", CollisionRuleEntry(_capsule_capsule_paired))
CAPSULE_CAPSULE_RULES.register("mjx", CollisionRuleEntry(_keep))
CAPSULE_BOX_RULES.register("spheres", CollisionRuleEntry(_capsule_box_spheres))
CAPSULE_BOX_RULES.register("blended", CollisionRuleEntry(_capsule_box_blended))
CAPSULE_BOX_RULES.register("mjx", CollisionRuleEntry(_capsule_box_mjx))

# (geom types, the registry of their rules, the collision config field that picks one)
_RULES = (
    ((_G.PLANE, _G.BOX), PLANE_BOX_RULES, "plane_box"),
    ((_G.PLANE, _G.CYLINDER), PLANE_CYLINDER_RULES, "plane_cylinder"),
    ((_G.BOX, _G.BOX), BOX_BOX_RULES, "box_box"),
    ((_G.CAPSULE, _G.CAPSULE), CAPSULE_CAPSULE_RULES, "capsule_capsule"),
    ((_G.CAPSULE, _G.BOX), CAPSULE_BOX_RULES, "capsule_box"),
)


def contact_dims(m, rules: CollisionConfig):
    """Condims of the contacts :func:`collide` emits for ``m`` under ``rules`` (MJX's layout)."""
    return _mjx.contact_dims(m, {types: fn.ncon for types, fn in table(rules).items()})


def _padded(fn):
    """``fn``'s four box-box contacts and empty slots (distance 1) up to :data:`BOX_BOX_SLOTS`."""

    def padded(b1, b2):
        dist, pos, frame = fn(b1, b2)
        n = BOX_BOX_SLOTS - dist.shape[0]
        return (
            jnp.concatenate([dist, jnp.ones(n, dist.dtype)]),
            jnp.concatenate([pos, jnp.repeat(pos[:1], n, 0)]),
            jnp.concatenate([frame, jnp.repeat(frame[:1], n, 0)]),
        )

    return padded


def has_box_pairs(m) -> bool:
    """Whether ``m`` has two or more box geoms (the ones :func:`table`'s ``apart`` changes)."""
    return int(np.sum(np.asarray(m.geom_type) == int(_G.BOX))) >= 2


def allocate(m, d, rules: CollisionConfig | None):
    """``d`` with room for the contacts (and constraint rows) of the collision stage under ``rules``.

    ``mjx.make_data`` allots each geom pair MJX's number of contacts; ``collision.box_box=clipped``
    keeps up to :data:`BOX_BOX_SLOTS` per box pair. :func:`diffmjx.forward` does this itself; a
    loop that carries ``d`` from one step to the next (``lax.scan``) needs it done once before.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data``.
        rules: the ``collision`` section of :class:`diffmjx.Config`, or None (MJX's stage).

    Returns:
        ``d``, its contact and constraint-row fields reallocated (zeros) where the layout differs.
    """
    if stage(rules) is _mjx.collision or _mjx.ncon(d) == 0:
        return d
    return _mjx.with_contact_dims(m, d, contact_dims(m, rules))


def _pair_name(types) -> str:
    return "-".join(_mjx.GeomType(int(t)).name.lower() for t in types)


def check_model(m) -> None:
    """Raise ``ValueError`` now, not inside a trace, for a model the collision stage cannot run.

    Checks every geom pair that may collide (contype/conaffinity, different bodies) against the
    pairs MJX implements, and the custom numerics the smoothed driver does not support.

    Arguments:
        m: ``mjx.Model`` or ``mujoco.MjModel``.
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


def collide(m, d, rules: CollisionConfig, apart: bool = False):
    """Collision stage ``(m, d) -> d`` with DiffMJX's functions (:func:`table`) where we have them.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` after kinematics.
        rules: the ``collision`` section of :class:`diffmjx.Config` (see :func:`table`).
        apart: the contacts contacts from distance build their rows from (see :func:`table`).

    Returns:
        ``d`` with its contacts (MJX's layout: grouped by condim, then by geom-type pair).
    """
    if _mjx.ncon(d) == 0:
        return d
    d = allocate(m, d, rules)
    smoothed = table(rules, apart)
    by_condim: dict[int, list] = {}
    for key, contact in _mjx.contact_groups(m, d).items():
        fn = smoothed.get(key.types) or _mjx.MJX_COLLISION_TABLE[key.types]
        dist, pos, frame = fn(m, d, key, contact.geom)
        if fn.ncon > 1:
            contact = jax.tree.map(lambda x, r=fn.ncon: jnp.repeat(x, r, axis=0), contact)
        by_condim.setdefault(key.condim, []).append(contact.replace(dist=dist, pos=pos, frame=frame))
    contacts = [c for k in sorted(by_condim) for c in by_condim[k]]
    return _mjx.with_contact(d, jax.tree.map(lambda *x: jnp.concatenate(x), *contacts))


def stage(rules: CollisionConfig | None):
    """The collision stage ``(m, d) -> d`` that :func:`diffmjx.forward` runs under ``rules``.

    Arguments:
        rules: the ``collision`` section of :class:`diffmjx.Config`, or None.

    Returns:
        MJX's own collision stage where ``rules`` is None or asks for nothing of DiffMJX's
        (``smooth`` off and every pair rule ``mjx``); else :func:`collide` under ``rules``.
    """
    if rules is None or (not rules.smooth and all(getattr(rules, name) == "mjx" for *_, name in _RULES)):
        return _mjx.collision
    return functools.partial(collide, rules=rules)


def detect(m, d, rules: CollisionConfig | None = None):
    """Contacts at ``d``'s positions: kinematics, then the collision stage of :func:`stage`.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` (only ``qpos`` and the mocap poses are read).
        rules: the ``collision`` section of :class:`diffmjx.Config`; None (the default) for MJX's
            collision stage unchanged, as does a section with ``smooth`` off and every pair rule
            ``mjx``.

    Returns:
        The ``mjx`` contact struct (``dist``, ``pos``, ``frame``, ``geom``, ...), one entry per slot.
    """
    d = _mjx.kinematics(m, d)
    return _mjx.contact(stage(rules)(m, d))
