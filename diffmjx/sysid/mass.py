"""Mass ties: a body's mass, centre of mass and inertia recomputed from the parameters that set them.

What a user expects to move together (MuJoCo's compiler derives these once; a fit must follow them
under ``jit``):

- a body's mass (role ``mass``) scales its inertia with it, unless ``scale_inertia=False``;
- a primitive geom's size or position (roles ``geom_shape`` and ``geom_frame``) recompute its body's
  centre of mass and inertia from the body's geoms, each geom keeping its mass, unless
  ``mass_from_geoms=False``; where the compiler does not (an explicit ``<inertial>``, a mesh with
  mass; without the ``MjSpec``, compiled mass properties that are not the geoms' at one density)
  the collision shape changes alone, with a warning naming the body;
- a body's full mass properties (role ``inertial``, ten numbers in log-Cholesky coordinates)
  replace all three.

Each field's role is data (:attr:`diffmjx.sysid.fields.FieldKind.mass_role`): a new field that
moves mass properties declares its role, nothing here tests a field's name. Two parameters that set
the same body's mass properties in contradicting ways are a
:class:`~diffmjx.sysid.ties.ParameterError` naming both.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx.physics import constants, manifold
from diffmjx.sysid.fields import BODY_ROLES, FIELDS, GEOM_ROLES, PRIMITIVE_COLUMNS
from diffmjx.sysid.ties import ParameterError

__all__ = ["MassTies"]

_BODY = mujoco.mjtObj.mjOBJ_BODY


def _mass_parts(m: mujoco.MjModel, b: int, spec) -> tuple | str:
    """``(geoms, types, masses)`` of the geoms that make body ``b``'s mass properties, or why none do.

    With the ``MjSpec``, as MuJoCo's compiler: a body with an explicit ``<inertial>`` is not made of
    its geoms, and each geom's mass is its ``mass`` or ``density`` times its volume (massless geoms
    left out). Without it, the body's geoms at one density, checked against the body's compiled
    mass, centre of mass and inertia."""
    geoms = np.flatnonzero(np.asarray(m.geom_bodyid) == b)
    if spec is not None:
        sb = spec.bodies[b]
        if sb.explicitinertial and spec.compiler.inertiafromgeom != mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_TRUE:
            return "its mass properties are an explicit <inertial>"
        masses = []
        for g in geoms:
            sg = spec.geoms[int(g)]
            prim = int(m.geom_type[g]) in PRIMITIVE_COLUMNS
            vol = float(constants.geom_volume(int(m.geom_type[g]), m.geom_size[g])) if prim else math.inf
            masses.append(sg.mass if not np.isnan(sg.mass) else sg.density * vol)
        masses = np.asarray(masses, np.float64)
        keep = masses > 0
        geoms, masses = geoms[keep], masses[keep]
    types = [int(m.geom_type[g]) for g in geoms]
    if not len(geoms):
        return "it has no geoms with mass"
    if any(t not in PRIMITIVE_COLUMNS for t in types):
        return "a geom with mass is not a primitive (a mesh): its inertia does not follow a size"
    if spec is None:
        vols = np.array([float(constants.geom_volume(t, m.geom_size[g])) for t, g in zip(types, geoms)])
        masses = float(m.body_mass[b]) * vols / vols.sum()
    if not _made_of(m, b, geoms, types, masses):
        return (
            "its compiled mass properties are not its geoms' at one density (an <inertial>, or geoms of "
            "several densities: pass the MjSpec or MJCF path so each geom's mass is known)"
        )
    return geoms, types, masses


def _made_of(m, b, geoms, types, masses) -> bool:
    """Whether body ``b``'s compiled mass, centre of mass and inertia are those of ``geoms`` of ``masses``."""
    mass, com, full = constants.combine_inertia(
        jnp.asarray(masses),
        jnp.asarray(m.geom_pos[geoms]),
        jnp.asarray(m.geom_quat[geoms]),
        jnp.stack([constants.geom_inertia(t, m.geom_size[g], mm) for t, g, mm in zip(types, geoms, masses)]),
    )
    r = np.asarray(manifold.quat_to_mat(jnp.asarray(m.body_iquat[b])))
    want = r @ np.diag(m.body_inertia[b]) @ r.T
    scale = max(float(np.max(np.abs(want))), 1e-12)
    return bool(
        abs(float(mass) - m.body_mass[b]) <= 1e-6 * m.body_mass[b]
        and np.allclose(np.asarray(com), m.body_ipos[b], rtol=0, atol=1e-6 * max(1.0, float(m.stat.meansize)))
        and np.allclose(np.asarray(full), want, rtol=0, atol=1e-6 * scale)
    )


class MassTies:
    """How each body's mass properties follow the parameters of one model variant (see the module docstring).

    ``resolved``: the parameters resolved against the model, each with ``param`` (its
    :class:`~diffmjx.sysid.Parameter`) and ``elements`` (element ids); ``slices``: the first value
    index of each, then the total."""

    def __init__(self, m: mujoco.MjModel, resolved: Sequence, slices: np.ndarray, spec):
        self.geo: dict[int, tuple] = {}  # body -> (geoms, types, masses)
        self.mass: dict[int, int] = {}  # body -> value index of its mass: inertia scaled
        self.inertial: dict[int, int] = {}  # body -> first value index of its log-Cholesky coordinates
        self.untied: dict[int, str] = {}  # body -> why its geoms do not set its mass properties
        self.moving: set[int] = set()  # bodies whose centre of mass or principal axes the parameters move
        owner: dict[int, str] = {}

        def claim(b: int, key: str) -> None:
            if b in owner and owner[b] != key:
                name = mujoco.mj_id2name(m, _BODY, b)
                raise ParameterError(
                    f"{key} and {owner[b]} both set body {name!r}'s mass properties; choose one "
                    "(or pass scale_inertia=False / mass_from_geoms=False)"
                )
            owner[b] = key

        roles: dict[int, dict[str, str]] = {}  # body -> {its mass role: the field that has it}
        for r in resolved:
            role = FIELDS[r.param.field].mass_role
            if role in BODY_ROLES:
                for e in r.elements:
                    roles.setdefault(e, {})[role] = r.param.field
        for r, a in zip(resolved, slices[:-1]):
            p = r.param
            role = FIELDS[p.field].mass_role
            if role == "inertial":
                b = r.elements[0]
                others = {f for q, f in roles.get(b, {}).items() if q != "inertial"}
                if others:
                    raise ParameterError(
                        f"{p.key}: the body's other mass parameters ({', '.join(sorted(others))}) "
                        "contradict its full mass properties; keep one"
                    )
                claim(b, p.key)
                self.inertial[b] = int(a)
            elif role == "mass" and p.scale_inertia:
                for b in r.elements:
                    if "inertia" in roles.get(b, {}):
                        raise ParameterError(
                            f"{p.key}: {roles[b]['inertia']} of the same body is a parameter too; pass "
                            "scale_inertia=False to fit both"
                        )
                    self.mass[b] = int(a)
            elif role in GEOM_ROLES and p.mass_from_geoms:
                for g in r.elements:
                    b = int(m.geom_bodyid[g])
                    if b == 0 or b in self.geo or b in self.untied:
                        continue
                    if roles.get(b, {}).keys() & {"inertia", "com", "inertial"}:
                        raise ParameterError(
                            f"{p.key}: the body's inertia or centre of mass is a parameter too; pass "
                            "mass_from_geoms=False to fit both"
                        )
                    parts = _mass_parts(m, b, spec)
                    if isinstance(parts, str):  # as the compiler: the geoms do not set this body's inertia
                        self.untied[b] = parts
                        continue
                    claim(b, "geometry")
                    self.geo[b] = parts
                    if role == "geom_frame" or len(parts[0]) > 1:  # its centre of mass or axes may move
                        self.moving.add(b)
        self.moving.update(self.inertial)
        self.moving.update(b for b, r in roles.items() if "com" in r)
        for b, why in self.untied.items():
            warnings.warn(
                f"body {mujoco.mj_id2name(m, _BODY, b)!r}: {why}; its geoms' sizes and positions change "
                "only their collision shapes (as MuJoCo's compiler would)",
                stacklevel=4,
            )

    def apply(self, mx, values, base):
        """``mx`` (parameters written into ``base``) with the tied bodies' mass, centre of mass and inertia
        recomputed."""
        if not (self.geo or self.mass or self.inertial):
            return mx
        mass_l, ipos_l, iquat_l, inert_l = mx.body_mass, mx.body_ipos, mx.body_iquat, mx.body_inertia
        dtype = values.dtype
        for b, (geoms, types, masses) in self.geo.items():
            size, pos, quat = mx.geom_size[geoms], mx.geom_pos[geoms], mx.geom_quat[geoms]
            moments = jnp.stack([constants.geom_inertia(t, size[k], masses[k]) for k, t in enumerate(types)])
            if len(geoms) == 1:  # the compiler copies a single geom's frame and moments
                com, q, inertia = pos[0], quat[0], moments[0]
            else:
                _, com, full = constants.combine_inertia(jnp.asarray(masses, dtype), pos, quat, moments)
                inertia, q = constants.principal_axes(full)
            if b in self.mass:
                i = self.mass[b]
                inertia = inertia * (values[i] / float(np.sum(masses)))
                mass_l = mass_l.at[b].set(values[i])
            ipos_l, iquat_l, inert_l = ipos_l.at[b].set(com), iquat_l.at[b].set(q), inert_l.at[b].set(inertia)
        for b, i in self.mass.items():
            if b not in self.geo:  # scaled from the base's (start) mass and inertia
                inert_l = inert_l.at[b].set(base.body_inertia[b] * (values[i] / base.body_mass[b]))
        for b, a in self.inertial.items():
            mass, com, full = constants.mass_properties_from_log_cholesky(values[a : a + 10])
            inertia, q = constants.principal_axes(full)
            mass_l, ipos_l = mass_l.at[b].set(mass), ipos_l.at[b].set(com)
            iquat_l, inert_l = iquat_l.at[b].set(q), inert_l.at[b].set(inertia)
        return mx.tree_replace(
            {"body_mass": mass_l, "body_ipos": ipos_l, "body_iquat": iquat_l, "body_inertia": inert_l}
        )
