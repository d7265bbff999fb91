r"""Fields MuJoCo stores twice, and parameters that cannot move a model: found from the model.

MuJoCo's compiler writes some quantities into two fields, and a parameter written into one of them
alone leaves a model that is no longer what the MJCF said (a ``<position>`` servo whose gain is no
longer minus its bias' position term pulls towards another set point). The ties found here, from the
compiled model's values rather than from the user:

- a ``<position>`` or ``<intvelocity>`` servo (fixed gain, affine bias, ``biasprm[1] = -gainprm[0]``):
  its kp is ``gainprm[0]`` and ``-biasprm[1]``; its kv is ``-biasprm[2]``;
- a ``<velocity>`` servo (``biasprm[1] = 0``, ``biasprm[2] = -gainprm[0]``): its kv is ``gainprm[0]``
  and ``-biasprm[2]``;
- a ``<muscle>`` (muscle gain and bias): ``gainprm[0:9]`` and ``biasprm[0:9]`` hold the same nine
  numbers (range, force, scale, lmin, lmax, vmax, fpmax, fvmax).

A parameter on the first field of such a pair (``actuator_gainprm``, or the named ``actuator_kp`` and
``actuator_kv``) writes both, as the compiler does; one on the second (the bias column alone) is an
error that says what to fit instead.

Refused as unable to move the dynamics (:func:`check`): an actuator parameter column its gain, bias or
activation dynamics type never reads (a motor's ``gainprm[1]``), and a contact property of a geom that
collides with nothing (its contype and conaffinity match no other body's geom and no explicit
``<pair>`` names it) or whose every contact is an explicit ``<pair>`` (the pair carries its own
friction, solref, solimp and margin).
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

__all__ = ["ParameterError", "Write", "check", "servo", "servo_writes", "tie_writes"]

_GAIN, _BIAS, _DYN = mujoco.mjtGain, mujoco.mjtBias, mujoco.mjtDyn
_CONTACT_FIELDS = ("geom_friction", "geom_solref", "geom_solimp", "geom_margin")


class ParameterError(ValueError):
    """A parameter that cannot be resolved against a model; the message names it and lists what exists."""


@dataclasses.dataclass(frozen=True)
class Write:
    """Components ``comps`` of a parameter's value, times ``factor``, written at ``flat`` of ``leaf``.

    ``flat``: (elements, len(comps)) flat indices into the leaf (one row per named element)."""

    leaf: str
    flat: np.ndarray
    factor: float
    comps: tuple[int, ...]


def servo(m: mujoco.MjModel, i: int) -> str | None:
    """What actuator ``i`` is by its compiled values: ``"position"`` (also ``<intvelocity>``),
    ``"velocity"``, ``"muscle"`` or None (every other actuator: its fields are stored once)."""
    gt, bt = int(m.actuator_gaintype[i]), int(m.actuator_biastype[i])
    g, b = np.asarray(m.actuator_gainprm[i]), np.asarray(m.actuator_biasprm[i])
    if gt == _GAIN.mjGAIN_MUSCLE and bt == _BIAS.mjBIAS_MUSCLE and np.array_equal(g[:9], b[:9]):
        return "muscle"
    if gt != _GAIN.mjGAIN_FIXED or bt != _BIAS.mjBIAS_AFFINE or g[0] == 0:
        return None
    if b[1] == -g[0]:
        return "position"
    if b[1] == 0 and b[2] == -g[0]:
        return "velocity"
    return None


def _pairs(kind: str | None) -> dict[tuple[str, int], tuple[str, int, float]]:
    """``{(field, column): (tied field, column, factor)}`` of an actuator of ``kind``."""
    if kind == "position":
        return {("actuator_gainprm", 0): ("actuator_biasprm", 1, -1.0)}
    if kind == "velocity":
        return {("actuator_gainprm", 0): ("actuator_biasprm", 2, -1.0)}
    if kind == "muscle":
        return {("actuator_gainprm", k): ("actuator_biasprm", k, 1.0) for k in range(9)}
    return {}


_NAMES = {"position": "position servo", "velocity": "velocity servo", "muscle": "muscle"}


def tie_writes(m: mujoco.MjModel, field: str, elements, columns) -> list[Write]:
    """The tied fields' writes of a parameter on ``field``'s ``columns`` of actuators ``elements``
    (every element of one kind; checked by :func:`check`)."""
    if field != "actuator_gainprm" or not elements:
        return []
    pairs = _pairs(servo(m, elements[0]))
    out = []
    for j, c in enumerate(columns):
        if (field, c) in pairs:
            leaf, col, factor = pairs[(field, c)]
            out.append(Write(leaf, np.array([[e * 10 + col] for e in elements], int), factor, (j,)))
    return out


def servo_writes(m: mujoco.MjModel, key: str, field: str, elements) -> tuple[list[Write], np.ndarray]:
    """``actuator_kp`` / ``actuator_kv`` of servos ``elements``: their writes and start values
    (``(elements, 1)``)."""
    writes, starts = [], []
    for e in elements:
        kind = servo(m, e)
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, e)
        g, b = m.actuator_gainprm[e], m.actuator_biasprm[e]
        if field == "actuator_kp" and kind == "position":
            w, s = [("actuator_gainprm", 0, 1.0), ("actuator_biasprm", 1, -1.0)], g[0]
        elif field == "actuator_kv" and kind == "position":
            w, s = [("actuator_biasprm", 2, -1.0)], -b[2]
        elif field == "actuator_kv" and kind == "velocity":
            w, s = [("actuator_gainprm", 0, 1.0), ("actuator_biasprm", 2, -1.0)], g[0]
        else:
            what = _NAMES.get(kind, "not a position, intvelocity or velocity servo")
            need = (
                "a <position> or <intvelocity>"
                if field == "actuator_kp"
                else "a <position>, <intvelocity> or <velocity>"
            )
            raise ParameterError(
                f"{key}: actuator {name!r} is {'a ' + what if kind else what} (by its gain and bias); "
                f"{field.removeprefix('actuator_')} is a parameter of {need} servo; fit its "
                "actuator_gainprm / actuator_biasprm columns instead"
            )
        writes.append(w)
        starts.append(float(s))
    if len({tuple(x[:2] for x in w) for w in writes}) > 1:
        raise ParameterError(f"{key}: the actuators are servos of different kinds; one shared value needs one kind")
    out = [Write(leaf, np.array([[e * 10 + col] for e in elements], int), f, (0,)) for leaf, col, f in writes[0]]
    return out, np.asarray(starts, np.float64)[:, None]


def _used(m: mujoco.MjModel, field: str, i: int) -> tuple[set[int], str]:
    """The columns of actuator ``i``'s ``field`` its type reads, and the type's name."""
    every = set(range(10))
    if field == "actuator_gainprm":
        t = int(m.actuator_gaintype[i])
        used = {_GAIN.mjGAIN_FIXED: {0}, _GAIN.mjGAIN_AFFINE: {0, 1, 2}, _GAIN.mjGAIN_MUSCLE: set(range(9))}
        return used.get(t, every), f"gain type {_GAIN(t).name.removeprefix('mjGAIN_').lower()}"
    if field == "actuator_biasprm":
        t = int(m.actuator_biastype[i])
        used = {_BIAS.mjBIAS_NONE: set(), _BIAS.mjBIAS_AFFINE: {0, 1, 2}, _BIAS.mjBIAS_MUSCLE: set(range(9))}
        return used.get(t, every), f"bias type {_BIAS(t).name.removeprefix('mjBIAS_').lower()}"
    t = int(m.actuator_dyntype[i])
    used = {
        _DYN.mjDYN_NONE: set(),
        _DYN.mjDYN_INTEGRATOR: set(),
        _DYN.mjDYN_FILTER: {0},
        _DYN.mjDYN_FILTEREXACT: {0},
        _DYN.mjDYN_MUSCLE: {0, 1, 2},
    }
    return used.get(t, every), f"dynamics type {_DYN(t).name.removeprefix('mjDYN_').lower()}"


def _contacts(m: mujoco.MjModel, g: int) -> str:
    """``"dynamic"`` if geom ``g`` can collide by contype/conaffinity, else ``"pair"`` if an explicit
    pair names it, else ``"none"``."""
    weld = np.asarray(m.body_weldid)[np.asarray(m.geom_bodyid)]
    parent = np.asarray(m.body_weldid)[np.asarray(m.body_parentid)]  # per body: its parent's weld body
    filter_parent = not m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT
    ct, ca = np.asarray(m.geom_contype), np.asarray(m.geom_conaffinity)
    for h in range(m.ngeom):
        if h == g or weld[h] == weld[g]:
            continue
        if filter_parent and weld[g] and weld[h]:
            bg, bh = int(weld[g]), int(weld[h])
            if parent[bg] == bh or parent[bh] == bg:
                continue
        if (ct[g] & ca[h]) or (ct[h] & ca[g]):
            return "dynamic"
    in_pair = m.npair and (np.any(np.asarray(m.pair_geom1) == g) or np.any(np.asarray(m.pair_geom2) == g))
    return "pair" if in_pair else "none"


def check(m: mujoco.MjModel, key: str, field: str, elements, columns) -> None:
    """Refuse a parameter on a field MuJoCo stores twice (its second copy) or that cannot move the
    model's dynamics (see the module docstring); the error names what to fit instead."""
    obj = mujoco.mjtObj.mjOBJ_ACTUATOR
    if field in ("actuator_gainprm", "actuator_biasprm", "actuator_dynprm"):
        kinds = {servo(m, e) for e in elements}
        if len(kinds) > 1:
            raise ParameterError(
                f"{key}: the actuators store their parameters differently ({', '.join(sorted(map(str, kinds)))}); "
                "one shared value needs actuators of one kind"
            )
        for e in elements:
            name = mujoco.mj_id2name(m, obj, e)
            used, what = _used(m, field, e)
            unused = [c for c in columns if c not in used]
            if unused:
                raise ParameterError(
                    f"{key}: actuator {name!r} has {what}, which never reads {field}[{unused[0]}]: the "
                    f"parameter cannot move the dynamics (it reads columns {sorted(used) or 'none'})"
                )
            kind = servo(m, e)
            for (src, sc), (dst, dc, factor) in _pairs(kind).items():
                if field == dst and dc in columns:
                    fit = {"position": "Parameter('actuator_kp', {n!r})", "velocity": "Parameter('actuator_kv', {n!r})"}
                    instead = fit.get(kind, "Parameter('actuator_gainprm', {n!r}, index=" + str(sc) + ")").format(
                        n=name
                    )
                    raise ParameterError(
                        f"{key}: actuator {name!r} is a {_NAMES[kind]}; MuJoCo stores {dst}[{dc}] as "
                        f"{'minus ' if factor < 0 else ''}{src}[{sc}] and the two must move together; fit "
                        f"{instead} (or {src} index {sc}), which writes both"
                    )
    if field in _CONTACT_FIELDS and elements:
        ways = {e: _contacts(m, e) for e in elements}
        if "dynamic" not in ways.values():
            names = ", ".join(repr(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, e)) for e in elements)
            if "pair" in ways.values():
                why = (
                    f"every contact of geom(s) {names} is an explicit <pair>, which carries its own "
                    f"{field.removeprefix('geom_')}: the geom's value is never read"
                )
            else:
                why = f"geom(s) {names} collide with nothing (contype / conaffinity match no other body's geom)"
            raise ParameterError(f"{key}: {why}; the parameter cannot move the dynamics")
