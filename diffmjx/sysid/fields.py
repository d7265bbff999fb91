"""The fields a :class:`~diffmjx.sysid.Parameter` may name, as data: :data:`FIELDS`, a registry of
:class:`FieldKind` objects.

A field kind knows what its names refer to (bodies, geoms, joints, ...), its columns and legal
ranges, where an element's row lies in the ``mjx.Model`` leaf it writes (:meth:`FieldKind.row`),
and, for a parameter, where its value goes, with the other fields MuJoCo stores it in again, and
its start value (:meth:`FieldKind.place`). :mod:`diffmjx.sysid.parameter`
resolves a parameter by asking its kind, never by testing the field's name, so adding a field is
one :class:`FieldKind` (or a subclass that overrides what differs) and one ``FIELDS.register``
line (``tests/test_registry.py`` adds a toy one and fits it by name).

The kinds with their own rows: ``dof_*`` (one column per degree of freedom of the joint),
``sensor_*`` (one per sensor dimension; terms of the measurement model, written nowhere in the
model), ``geom_size`` (the columns the geom's primitive type uses), ``*_solref`` (the legal range
follows the start's form), ``actuator_kp`` / ``actuator_kv`` (a servo's gain and bias written
together) and ``body_inertial`` (ten numbers resolved as one unit by
:mod:`diffmjx.sysid.parameter`'s mass properties).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import mujoco
import numpy as np

from diffmjx.physics.impedance import MAXIMP, MINIMP
from diffmjx.registry import Registry
from diffmjx.sysid import ties
from diffmjx.sysid.ties import ParameterError

__all__ = ["BODY_ROLES", "DELAY_START", "FIELDS", "GEOM_ROLES", "PRIMITIVE_COLUMNS", "FieldKind"]

BODY_ROLES = ("mass", "inertia", "com", "inertial")
"""The parts of a body's mass properties a body field sets (:attr:`FieldKind.mass_role`)."""
GEOM_ROLES = ("geom_shape", "geom_frame")
"""A geom field that its body's mass properties follow: its shape (size) or its frame (position)."""

_INF = math.inf
DELAY_START = 1e-4
"""The start of a ``sensor_delay`` parameter in seconds (a delay has no value in the model)."""

_BODY, _GEOM, _JOINT = mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_GEOM, mujoco.mjtObj.mjOBJ_JOINT
_ACT, _TENDON, _SENSOR = mujoco.mjtObj.mjOBJ_ACTUATOR, mujoco.mjtObj.mjOBJ_TENDON, mujoco.mjtObj.mjOBJ_SENSOR
_POS, _ANY, _NONNEG = ((0.0,), (_INF,)), ((-_INF,), (_INF,)), ((0.0,), (_INF,))
_IMP_LO, _IMP_HI = (MINIMP, MINIMP, 0.0, MINIMP, 1.0), (MAXIMP, MAXIMP, _INF, MAXIMP, _INF)


@dataclasses.dataclass(frozen=True)
class FieldKind:
    """What a field is: the element kind its names refer to, its columns and their legal ranges, and
    how a parameter of it reads its start and writes its value.

    Attributes:
        obj: ``mujoco.mjtObj`` of the names, or None (``opt.*``: no element).
        width: columns per element.
        lo, hi: legal range per column (the last repeated when shorter than the row).
        lo_open, hi_open: whether the ends are excluded.
        leaf: the ``mjx.Model`` leaf written (None: the field's own name; ``""``: none, the value
            acts elsewhere, see :attr:`sensor_term` and :attr:`whole`).
        doc: units and meaning, for messages.
        derived: the compiler derives other fields from it (masses, geometry, transmissions), so
            the model's constants are recomputed (:func:`diffmjx.set_const`) after it is written.
        sensor_term: ``gain``, ``bias`` or ``delay``: a term of the measurement model
            ``gain * simulated(t - delay) + bias``, not a field of the model.
        whole: the row is one unit (``body_inertial``'s ten mass properties): no ``index``,
            ``bounds`` or ``uniform``.
        time_constant: the column MuJoCo's ``refsafe`` flag clamps to at least twice the
            timestep (a ``solref``'s time constant), or None.
        mass_role: the part of a body's mass properties the field sets, for the mass ties
            (:mod:`diffmjx.sysid.mass`): ``mass``, ``inertia``, ``com``, ``inertial`` (all three,
            :attr:`whole`), or a geom's ``geom_shape`` / ``geom_frame`` (its body's mass
            properties follow its geoms); None: no part.
    """

    obj: Any
    width: int
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    lo_open: bool = False
    hi_open: bool = False
    leaf: str | None = None
    doc: str = ""
    derived: bool = False
    sensor_term: str | None = None
    whole: bool = False
    time_constant: int | None = None
    mass_role: str | None = None

    def __post_init__(self) -> None:
        if self.mass_role not in (None, *BODY_ROLES, *GEOM_ROLES):
            raise ValueError(
                f"FieldKind.mass_role must be one of {(None, *BODY_ROLES, *GEOM_ROLES)}, got {self.mass_role!r}"
            )

    def row(self, m: mujoco.MjModel, field: str, i: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """``(flat indices of element i's row in the leaf, the row's usable columns)``."""
        if self.obj is None:
            return np.arange(self.width), tuple(range(self.width))
        return i * self.width + np.arange(self.width), tuple(range(self.width))

    def legal(self, col: int, start: float) -> tuple[float, float, bool, bool]:
        """``(lower, upper, lower open, upper open)`` of column ``col`` for a parameter starting at ``start``."""
        return self.lo[min(col, len(self.lo) - 1)], self.hi[min(col, len(self.hi) - 1)], self.lo_open, self.hi_open

    def values(self, m: mujoco.MjModel, field: str) -> np.ndarray:
        """The leaf's values in the ``MjModel``, flat."""
        if field.startswith("opt."):
            return np.atleast_1d(np.asarray(getattr(m.opt, field[4:]), np.float64)).ravel()
        return np.asarray(getattr(m, field), np.float64).ravel()

    def place(self, m: mujoco.MjModel, key: str, field: str, flat: np.ndarray, elements, columns):
        """``(writes, start)``: where a parameter's value goes (:class:`diffmjx.sysid.ties.Write`: the
        field's own leaf, then the fields MuJoCo stores it in again) and its ``(elements, columns)``
        start values at the rows' ``flat`` indices (the model's)."""
        if self.leaf == "":  # the value acts elsewhere (a subclass's place says where)
            return [], np.zeros(flat.shape)
        start = self.values(m, field)[flat]
        own = ties.Write(field if self.leaf is None else self.leaf, flat, 1.0, tuple(range(len(columns))))
        return [own, *ties.tie_writes(m, field, elements, columns)], start


class _DofKind(FieldKind):
    def row(self, m, field, i):
        n = {0: 6, 1: 3, 2: 1, 3: 1}[int(m.jnt_type[i])]
        adr = int(m.jnt_dofadr[i])
        return np.arange(adr, adr + n), tuple(range(n))


_SENSOR_START = {"gain": 1.0, "bias": 0.0, "delay": DELAY_START}  # a delay starts inside (0, inf): relative steps


class _SensorKind(FieldKind):
    def row(self, m, field, i):
        adr, n = int(m.sensor_adr[i]), int(m.sensor_dim[i])
        return np.arange(adr, adr + n), tuple(range(n))

    def place(self, m, key, field, flat, elements, columns):  # a term of the residual's measurement model
        return [], np.full(flat.shape, _SENSOR_START[self.sensor_term])


PRIMITIVE_COLUMNS = {
    mujoco.mjtGeom.mjGEOM_SPHERE: (0,),
    mujoco.mjtGeom.mjGEOM_CAPSULE: (0, 1),
    mujoco.mjtGeom.mjGEOM_CYLINDER: (0, 1),
    mujoco.mjtGeom.mjGEOM_ELLIPSOID: (0, 1, 2),
    mujoco.mjtGeom.mjGEOM_BOX: (0, 1, 2),
}
"""The ``geom_size`` columns each primitive geom type uses (others have no size to identify)."""


class _GeomSizeKind(FieldKind):
    def row(self, m, field, i):
        cols = PRIMITIVE_COLUMNS.get(int(m.geom_type[i]))
        if cols is None:
            kind = mujoco.mjtGeom(int(m.geom_type[i])).name.removeprefix("mjGEOM_").lower()
            raise ParameterError(
                f"geom_size: geom {mujoco.mj_id2name(m, _GEOM, i)!r} is a {kind}; only primitive "
                "geoms (sphere, capsule, cylinder, ellipsoid, box) have sizes to identify"
            )
        return i * 3 + np.arange(3), cols


class _SolrefKind(FieldKind):
    def legal(self, col, start):  # standard (timeconst > 0, dampratio > 0) or direct (both < 0) form
        return (0.0, _INF, True, False) if start > 0 else (-_INF, 0.0, False, True)


class _ServoKind(FieldKind):
    """A servo's kp or kv: gain and bias written together, as MuJoCo's compiler writes them."""

    def place(self, m, key, field, flat, elements, columns):
        return ties.servo_writes(m, key, field, elements)


FIELDS: Registry[FieldKind] = Registry("Parameter.field")
"""``Parameter.field`` -> :class:`FieldKind`: the fields a :class:`~diffmjx.sysid.Parameter` may name."""

for _name, _kind in {
    "body_mass": FieldKind(_BODY, 1, *_POS, lo_open=True, doc="kg", derived=True, mass_role="mass"),
    "body_inertia": FieldKind(
        _BODY, 3, *_POS, lo_open=True, doc="principal moments, kg m^2", derived=True, mass_role="inertia"
    ),
    "body_ipos": FieldKind(_BODY, 3, *_ANY, doc="centre of mass in the body frame, m", derived=True, mass_role="com"),
    "body_inertial": FieldKind(
        _BODY,
        10,
        *_ANY,
        leaf="",
        doc="mass, centre of mass (3), inertia about it (xx yy zz xy xz yz)",
        derived=True,
        whole=True,
        mass_role="inertial",
    ),
    "geom_friction": FieldKind(_GEOM, 3, *_NONNEG, doc="sliding, torsional, rolling"),
    "geom_solref": _SolrefKind(_GEOM, 2, *_ANY, doc="timeconst, dampratio (or -stiffness, -damping)", time_constant=0),
    "geom_solimp": FieldKind(_GEOM, 5, _IMP_LO, _IMP_HI, doc="d0, dwidth, width, midpoint, power"),
    "geom_size": _GeomSizeKind(
        _GEOM,
        3,
        *_POS,
        lo_open=True,
        doc="primitive sizes (half sizes, radius, half length), m",
        derived=True,
        mass_role="geom_shape",
    ),
    "geom_pos": FieldKind(_GEOM, 3, *_ANY, doc="m, in the body frame", derived=True, mass_role="geom_frame"),
    "geom_margin": FieldKind(_GEOM, 1, *_NONNEG, doc="m"),
    "dof_damping": _DofKind(_JOINT, 0, *_NONNEG, doc="per dof of the joint"),
    "dof_armature": _DofKind(_JOINT, 0, *_NONNEG, doc="per dof of the joint", derived=True),
    "dof_frictionloss": _DofKind(_JOINT, 0, *_NONNEG, doc="per dof of the joint"),
    "jnt_stiffness": FieldKind(_JOINT, 1, *_NONNEG, doc="N m/rad or N/m"),
    "jnt_range": FieldKind(_JOINT, 2, *_ANY, doc="lower, upper", derived=True),
    "jnt_solref": _SolrefKind(_JOINT, 2, *_ANY, doc="of the joint's limit", time_constant=0),
    "jnt_solimp": FieldKind(_JOINT, 5, _IMP_LO, _IMP_HI),
    "actuator_gainprm": FieldKind(_ACT, 10, *_ANY),
    "actuator_biasprm": FieldKind(_ACT, 10, *_ANY),
    "actuator_dynprm": FieldKind(_ACT, 10, *_ANY),
    "actuator_gear": FieldKind(_ACT, 6, *_ANY, derived=True),
    "actuator_kp": _ServoKind(
        _ACT, 1, *_POS, lo_open=True, leaf="", doc="a <position> / <intvelocity> servo's kp: gainprm[0] and -biasprm[1]"
    ),
    "actuator_kv": _ServoKind(
        _ACT,
        1,
        *_POS,
        lo_open=True,
        leaf="",
        doc="a <velocity> servo's kv (gainprm[0] and -biasprm[2]) or a <position> servo's (-biasprm[2])",
    ),
    "tendon_stiffness": FieldKind(_TENDON, 1, *_NONNEG),
    "tendon_damping": FieldKind(_TENDON, 1, *_NONNEG),
    "tendon_frictionloss": FieldKind(_TENDON, 1, *_NONNEG),
    "tendon_armature": FieldKind(_TENDON, 1, *_NONNEG, derived=True),
    "tendon_lengthspring": FieldKind(_TENDON, 2, *_ANY),
    "opt.gravity": FieldKind(None, 3, *_ANY, doc="m/s^2"),
    "opt.wind": FieldKind(None, 3, *_ANY, doc="m/s"),
    "opt.magnetic": FieldKind(None, 3, *_ANY),
    "opt.density": FieldKind(None, 1, *_NONNEG, doc="kg/m^3"),
    "opt.viscosity": FieldKind(None, 1, *_NONNEG, doc="Pa s"),
    "opt.impratio": FieldKind(None, 1, *_POS, lo_open=True),
    "sensor_gain": _SensorKind(
        _SENSOR, 0, *_ANY, leaf="", doc="measured = gain * simulated + bias", sensor_term="gain"
    ),
    "sensor_bias": _SensorKind(
        _SENSOR, 0, *_ANY, leaf="", doc="measured = gain * simulated + bias", sensor_term="bias"
    ),
    "sensor_delay": _SensorKind(
        _SENSOR,
        0,
        *_POS,
        lo_open=True,
        leaf="",
        doc="s: measured(t) = simulated(t - delay), up to one sample; starts at 0.1 ms",
        sensor_term="delay",
    ),
}.items():
    FIELDS.register(_name, _kind)
