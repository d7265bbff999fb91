r"""Identified quantities of any MuJoCo model: :class:`Parameter` and their resolution, :class:`ParameterSet`.

A :class:`Parameter` names one quantity by the ``MjModel`` field it writes and the element's name in
the MJCF, e.g. ``Parameter("geom_friction", "foot", index=0)`` (the foot's sliding friction) or
``Parameter("dof_damping", "elbow")`` (``dof_*`` fields by their joint's name). A
:class:`ParameterSet` resolves a list of them against a model once (names to ids, columns, legal
ranges, the start values read from the model) and then maps, traced, between

- unconstrained coordinates ``theta`` (a flat vector, what the optimisers move),
- physical values (``{key: array}``, :attr:`Parameter.key` readable keys), and
- an ``mjx.Model`` with the values written in and every dependent field recomputed
  (:meth:`ParameterSet.model`): the ties below, then :func:`diffmjx.set_const`.

Ties (what a user expects to move together):

- ``body_mass`` scales the body's inertia with it (fixed shape), unless ``scale_inertia=False``.
- ``geom_size`` and ``geom_pos`` of a primitive geom recompute its body's centre of mass and
  inertia from the body's geoms (``mass_from_geoms``, on by default), each geom keeping its mass (the
  body's mass is a ``body_mass`` parameter of its own), as MuJoCo's compiler does. Where the compiler
  does not (an explicit ``<inertial>``, a mesh with mass; without the ``MjSpec``, compiled mass
  properties that are not the geoms' at one density) the geom's collision shape changes alone, with
  a warning naming the body.
- ``name`` may be several elements: one value written into each (a contact property of two geoms,
  the damping of a left and a right joint).
- ``uniform=True`` writes one value into every selected column (a cube's three half sizes).
- ``body_inertial``: a body's full mass properties (mass, centre of mass, inertia tensor: 10
  numbers) in log-Cholesky coordinates of the pseudo-inertia, so every value the optimiser reaches
  is physically consistent (positive mass, triangle inequalities of the inertia).

Sensors: ``sensor_gain``, ``sensor_bias`` and ``sensor_delay`` (per sensor, one column per sensor
dimension; ``uniform=True`` for one value over them) model the measurement
``gain * simulated(t - delay) + bias`` that the residual compares with recorded ``sensordata``
(:func:`diffmjx.sysid.problem.sensor_model`: a delay up to one sample period, by interpolation).

Bounds are enforced by the coordinates (:class:`Transform`): both ends finite, a logistic map;
one end, ``lower + (start - lower) exp(z)`` (relative steps); none, ``start + scale z``.

The fields a parameter may name are data (:data:`FIELDS`, :mod:`diffmjx.sysid.fields`): each kind
knows its rows, start values and where it writes; resolution here asks the kind.

The mass ties (which body's mass properties follow which parameters, and their traced
recomputation) are :class:`diffmjx.sysid.mass.MassTies`; they read each field's role from its kind
(:attr:`FieldKind.mass_role`), never its name.

Why one file of this length: :class:`Parameter`, resolution against a model and
:class:`ParameterSet`'s traced map implement one contract (a parameter list resolved once, then
mapped under ``jit``) and share private record types; split, those records would become public
with no second user.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx.physics import constants
from diffmjx.sysid import ties
from diffmjx.sysid.fields import DELAY_START, FIELDS
from diffmjx.sysid.mass import MassTies
from diffmjx.sysid.ties import ParameterError

__all__ = ["DELAY_START", "FIELDS", "Parameter", "ParameterError", "ParameterSet", "Transform"]


class Transform(enum.Enum):
    """How a component's physical value is reached from its unconstrained coordinate ``z``.

    ``AUTO``: ``LOGIT`` with two finite bounds, ``LOG`` with one, ``AFFINE`` with none.
    ``LOGIT``: ``lower + (upper - lower) sigmoid(z)``. ``LOG``: ``lower + (start - lower) exp(z)``
    (or mirrored below an upper bound): steps relative to the start. ``SOFTPLUS``:
    ``lower + softplus(z)`` (the ContactNets study's coordinates). ``AFFINE``: ``start + scale z``,
    ``scale = |start|`` (1 where the start is 0).
    """

    AUTO = "auto"
    LOGIT = "logit"
    LOG = "log"
    SOFTPLUS = "softplus"
    AFFINE = "affine"


_INF = math.inf
_BODY, _GEOM, _JOINT = mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_GEOM, mujoco.mjtObj.mjOBJ_JOINT
_ACT, _TENDON, _SENSOR = mujoco.mjtObj.mjOBJ_ACTUATOR, mujoco.mjtObj.mjOBJ_TENDON, mujoco.mjtObj.mjOBJ_SENSOR


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One identified quantity of a MuJoCo model (see the module docstring).

    Attributes:
        field: the ``MjModel`` field written (:data:`FIELDS` lists them): ``body_mass``,
            ``geom_friction``, ``dof_damping``, ``opt.gravity``, ... , or ``body_inertial``,
            ``sensor_gain``, ``sensor_bias``, ``sensor_delay``.
        name: the element's name in the MJCF (``dof_*`` fields: the joint's), several names for
            one value shared by those elements, or None for ``opt.*`` fields.
        index: the column(s) of the field's row (``geom_friction`` 0 = sliding), or None for the
            whole row (``geom_size``: the columns the geom's type uses).
        bounds: ``(lower, upper)``, each a number, one per selected column, or None (the field's
            legal range); enforced by the coordinates and checked against the legal range.
        transform: the coordinates (:class:`Transform`).
        uniform: one value for every selected column (a cube's three half sizes).
        scale_inertia: ``body_mass`` only: scale the body's inertia with its mass.
        mass_from_geoms: ``geom_size`` / ``geom_pos`` only: recompute the body's centre of mass and
            inertia from its geoms.
    """

    field: str
    name: str | Sequence[str] | None = None
    index: int | Sequence[int] | None = None
    bounds: tuple[Any, Any] | None = None
    transform: Transform = Transform.AUTO
    uniform: bool = False
    scale_inertia: bool = True
    mass_from_geoms: bool = True

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            near = [f for f in FIELDS if f.split("_")[0] == str(self.field).split("_")[0]] or list(FIELDS)
            raise ParameterError(
                f"Parameter field {self.field!r} is not supported; choose one of: {', '.join(near)}"
                + ("" if len(near) == len(FIELDS) else f" (all fields: {', '.join(FIELDS)})")
            )
        names = (self.name,) if isinstance(self.name, str) or self.name is None else tuple(self.name)
        if FIELDS[self.field].obj is None:
            if self.name is not None:
                raise ParameterError(f"Parameter({self.field!r}): an option has no element; pass name=None")
        elif not names or not all(isinstance(n, str) and n for n in names):
            raise ParameterError(
                f"Parameter({self.field!r}): name={self.name!r} is invalid; expected an element's "
                "name or a list of names"
            )
        elif len(set(names)) != len(names):
            raise ParameterError(f"Parameter({self.field!r}): name={list(names)!r} names an element twice")
        object.__setattr__(self, "name", names[0] if len(names) == 1 else names)
        if self.index is not None:
            idx = (self.index,) if isinstance(self.index, (int, np.integer)) else tuple(self.index)
            if not idx or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in idx):
                raise ParameterError(
                    f"Parameter({self.field!r}): index={self.index!r} is invalid; expected an int, "
                    "a list of ints or None"
                )
            if len(set(idx)) != len(idx):
                raise ParameterError(f"Parameter({self.field!r}): index={self.index!r} names a column twice")
            object.__setattr__(
                self,
                "index",
                int(idx[0]) if len(idx) == 1 and not isinstance(self.index, Sequence) else tuple(int(i) for i in idx),
            )
        if not isinstance(self.transform, Transform):
            raise ParameterError(
                f"Parameter({self.field!r}): transform={self.transform!r} is invalid; expected a "
                f"diffmjx.sysid.Transform ({', '.join(t.name for t in Transform)})"
            )
        if FIELDS[self.field].whole and (self.index is not None or self.bounds is not None or self.uniform):
            raise ParameterError(
                f"Parameter({self.field!r}): the {FIELDS[self.field].width} values are one unit "
                f"({FIELDS[self.field].doc}); index, bounds and uniform do not apply"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """The element names (empty for options)."""
        return () if self.name is None else (self.name,) if isinstance(self.name, str) else tuple(self.name)

    @property
    def key(self) -> str:
        """A readable key: ``field:name[+name...]`` and ``[index]`` where one is given."""
        key = self.field + (":" + "+".join(self.names) if self.names else "")
        if self.index is not None:
            key += f"[{self.index}]" if isinstance(self.index, int) else "[" + ",".join(map(str, self.index)) + "]"
        return key


# ----------------------------------------------------------------------------------------------- resolution
def _names(m: mujoco.MjModel, obj) -> list[str]:
    count = {_BODY: m.nbody, _GEOM: m.ngeom, _JOINT: m.njnt, _ACT: m.nu, _TENDON: m.ntendon, _SENSOR: m.nsensor}[obj]
    return [mujoco.mj_id2name(m, obj, i) or "" for i in range(count)]


_KIND = {_BODY: "body", _GEOM: "geom", _JOINT: "joint", _ACT: "actuator", _TENDON: "tendon", _SENSOR: "sensor"}


def _element(m: mujoco.MjModel, p: Parameter, name: str) -> int:
    obj = FIELDS[p.field].obj
    i = mujoco.mj_name2id(m, obj, name)
    if i < 0:
        have = [n for n in _names(m, obj) if n]
        listed = ", ".join(repr(n) for n in have[:40]) + (" ..." if len(have) > 40 else "")
        raise ParameterError(
            f"{p.key}: the model has no {_KIND[obj]} named {name!r}; its named {_KIND[obj]}s: {listed or 'none'}"
        )
    return i


@dataclasses.dataclass(frozen=True)
class _Resolved:
    """A parameter resolved against a model: where its components go and how they are reached."""

    param: Parameter
    elements: tuple[int, ...]  # element ids (empty for options)
    columns: tuple[int, ...]  # selected columns of the row
    flat: np.ndarray  # (elements, columns) flat indices into the leaf
    start: np.ndarray  # (k,) physical start values of the components (k = columns, or 1 if uniform)
    lo: np.ndarray  # (k,) effective bounds
    hi: np.ndarray
    kinds: tuple[Transform, ...]  # per component, AUTO resolved
    labels: tuple[str, ...]  # per component
    writes: tuple[ties.Write, ...] = ()  # where the components go in the mjx.Model (none: ties or the residual)

    @property
    def size(self) -> int:
        return len(self.start)


def _resolve(m: mujoco.MjModel, p: Parameter) -> _Resolved:
    f = FIELDS[p.field]
    if f.whole:  # body_inertial: ten mass properties in log-Cholesky coordinates (the mass ties write them)
        (i,) = (_element(m, p, n) for n in p.names) if len(p.names) == 1 else (None,)
        if i is None:
            raise ParameterError(f"{p.key}: body_inertial takes one body")
        if i == 0:
            raise ParameterError(f"{p.key}: the world body has no mass properties")
        start = _log_cholesky_of_body(m, i)
        labels = tuple(f"{p.key}[{c}]" for c in range(10))
        return _Resolved(
            p,
            (i,),
            tuple(range(10)),
            np.zeros((1, 0), int),
            start,
            np.full(10, -_INF),
            np.full(10, _INF),
            (Transform.AFFINE,) * 10,
            labels,
        )
    elements = tuple(_element(m, p, n) for n in p.names) if p.names else ()
    if f.obj == _BODY and 0 in elements:
        raise ParameterError(f"{p.key}: the world body has no mass properties to identify")
    rows = [f.row(m, p.field, i) for i in (elements or (0,))]
    usable = rows[0][1]
    for (_, cols), i in zip(rows[1:], elements[1:]):
        if cols != usable:
            raise ParameterError(
                f"{p.key}: the elements have rows of different columns ({usable} vs {cols} for "
                f"{_names(m, f.obj)[i]!r}); one shared value needs the same columns"
            )
    if p.index is None:
        columns = usable
    else:
        columns = (p.index,) if isinstance(p.index, int) else p.index
        for c in columns:
            if c not in usable:
                raise ParameterError(
                    f"{p.key}: index {c} is out of range; the row has columns {list(usable)}"
                    + (f" ({f.doc})" if f.doc else "")
                )
    flat = np.array([[r[0][c] for c in columns] for r in rows], int)
    ties.check(m, p.key, p.field, elements, columns)
    writes, start_all = f.place(m, p.key, p.field, flat, elements, columns)
    if not np.allclose(start_all, start_all[:1], rtol=0, atol=0) and len(elements) > 1:
        first = start_all[0]
        k = int(np.argmax(np.any(start_all != first, axis=1)))
        raise ParameterError(
            f"{p.key}: the elements start at different values ({first.tolist()} for "
            f"{p.names[0]!r}, {start_all[k].tolist()} for {p.names[k]!r}); one shared value needs "
            "one start: write it into the model first"
        )
    start = start_all[0]
    if p.uniform:
        if not np.all(start == start[0]):
            raise ParameterError(
                f"{p.key}: uniform=True needs the selected columns to start equal; they are {start.tolist()}"
            )
        start = start[:1]
        labels = (p.key,)
    else:
        labels = tuple(p.key if len(columns) == 1 else f"{p.key}[{c}]" for c in columns)
    k = len(start)
    cols_k = columns[:1] if p.uniform else columns
    lo, hi = np.empty(k), np.empty(k)
    kinds = []
    given = None if p.bounds is None else p.bounds
    if given is not None:
        if not (isinstance(given, (tuple, list)) and len(given) == 2):
            raise ParameterError(f"{p.key}: bounds={given!r} is invalid; expected (lower, upper)")
        try:
            glo = np.broadcast_to(np.asarray(given[0] if given[0] is not None else -_INF, np.float64), (k,))
            ghi = np.broadcast_to(np.asarray(given[1] if given[1] is not None else _INF, np.float64), (k,))
        except ValueError:
            raise ParameterError(f"{p.key}: bounds={given!r} do not match its {k} component(s)") from None
    for j, c in enumerate(cols_k):
        llo, lhi, lo_open, hi_open = f.legal(c, start[j])
        a, b = llo, lhi
        if given is not None:
            a, b = float(glo[j]), float(ghi[j])
            if (
                a < llo
                or (a == llo and lo_open and math.isfinite(a))
                or b > lhi
                or (b == lhi and hi_open and math.isfinite(b))
            ):
                legal = f"{'(' if lo_open else '['}{llo:g}, {lhi:g}{')' if hi_open else ']'}"
                raise ParameterError(
                    f"{labels[j]}: bounds ({a:g}, {b:g}) leave the legal range {legal}"
                    + (f" ({f.doc})" if f.doc else "")
                )
            if not a < b:
                raise ParameterError(f"{labels[j]}: bounds ({a:g}, {b:g}) are empty; expected lower < upper")
        if not a < start[j] < b:
            raise ParameterError(
                f"{labels[j]}: the model's value {start[j]:g} (the start) is not strictly inside "
                f"({a:g}, {b:g}); write a start inside the bounds into the model, or widen them"
            )
        lo[j], hi[j] = a, b
        kinds.append(_kind(p, labels[j], a, b))
    start = np.asarray(start, np.float64)
    return _Resolved(p, elements, tuple(columns), flat, start, lo, hi, tuple(kinds), labels, tuple(writes))


def _kind(p: Parameter, label: str, lo: float, hi: float) -> Transform:
    finite = math.isfinite(lo) + math.isfinite(hi)
    t = p.transform
    if t is Transform.AUTO:
        return (Transform.AFFINE, Transform.LOG, Transform.LOGIT)[finite]
    need = {Transform.LOGIT: (2,), Transform.LOG: (1,), Transform.SOFTPLUS: (1,), Transform.AFFINE: (0, 1, 2)}[t]
    if finite not in need:
        raise ParameterError(
            f"{label}: transform {t.name} needs {'two finite bounds' if need == (2,) else 'one finite bound'}; "
            f"the bounds are ({lo:g}, {hi:g})"
        )
    return t


# ------------------------------------------------------------------------------------------ coordinates
def _softplus(z):
    return jnp.logaddexp(z, 0.0)


def _inv_softplus(x):
    return x + np.log(-np.expm1(-x))


class ParameterSet:
    """Parameters resolved against a model (and its variants): coordinates, values and models.

    Arguments:
        model: the ``mujoco.MjModel`` whose values are the start (a variant list: the first).
        params: the :class:`Parameter` list; keys must be unique.
        variants: further models that share the parameters (each must have every named element).
        spec: the ``mujoco.MjSpec`` ``model`` was compiled from, if known: per-geom masses for the
            ``mass_from_geoms`` tie, and the recompilation of bodies whose inertial frame moves.
        variant_specs: the variants' specs, likewise (None where unknown).

    Raises:
        ParameterError: an unknown field, element name or column, bounds outside the legal range,
            a start outside the bounds, a tie that cannot hold (named).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        params: Sequence[Parameter],
        variants: Sequence[mujoco.MjModel] = (),
        spec: mujoco.MjSpec | None = None,
        variant_specs: Sequence[mujoco.MjSpec | None] = (),
    ):
        params = list(params)
        if not params:
            raise ParameterError("no parameters given: pass a list of diffmjx.sysid.Parameter")
        for p in params:
            if not isinstance(p, Parameter):
                raise ParameterError(f"{p!r} is not a diffmjx.sysid.Parameter")
        keys = [p.key for p in params]
        dup = [k for k in keys if keys.count(k) > 1]
        if dup:
            raise ParameterError(f"parameter {dup[0]!r} is given twice")
        self.params = params
        specs = [spec, *variant_specs, *([None] * (len(variants) - len(variant_specs)))]
        models = []
        for mv, sv in zip([model, *variants], specs):
            with jax.ensure_compile_time_eval(), warnings.catch_warnings():  # static; warned once, below
                warnings.simplefilter("ignore")
                first = [_resolve(mv, p) for p in params]
                moving = MassTies(mv, first, np.cumsum([0] + [r.size for r in first]), sv).moving
            models.append(_unsimplify(mv, moving, sv))
        self.models = [mv for mv, _ in models]
        self.specs = [sv for _, sv in models]
        self.resolved = [[_resolve(mv, p) for p in params] for mv in self.models]
        for v, res in enumerate(self.resolved[1:], start=1):
            for r0, r in zip(self.resolved[0], res):
                if r.size != r0.size:
                    raise ParameterError(f"{r.param.key}: variant {v} gives it {r.size} components, model 0 {r0.size}")
        base = self.resolved[0]
        self.start = np.concatenate([r.start for r in base])
        self.labels = tuple(lab for r in base for lab in r.labels)
        self.keys = tuple(keys)
        self._slices = np.cumsum([0] + [r.size for r in base])
        self._lo = np.concatenate([r.lo for r in base])
        self._hi = np.concatenate([r.hi for r in base])
        kinds = [k for r in base for k in r.kinds]
        self._groups = {t: np.array([i for i, k in enumerate(kinds) if k is t], int) for t in Transform}
        self._scale = np.where(self.start != 0, np.abs(self.start), 1.0)
        with jax.ensure_compile_time_eval():  # static: also when first built inside a traced function
            self.ties = [
                MassTies(mv, res, self._slices, sv) for mv, sv, res in zip(self.models, self.specs, self.resolved)
            ]
        self.recompute_constants = any(FIELDS[p.field].derived for p in params)
        self.theta0 = self.to_theta(self.start)

    @property
    def size(self) -> int:
        """Number of scalar components (the length of ``theta``)."""
        return len(self.start)

    @property
    def lower(self) -> np.ndarray:
        """(size,) lower bounds of the components (``-inf`` where none)."""
        return self._lo.copy()

    @property
    def upper(self) -> np.ndarray:
        """(size,) upper bounds of the components (``inf`` where none)."""
        return self._hi.copy()

    def components(self, key: str) -> slice:
        """Where parameter ``key``'s components lie in the flat values and coordinates."""
        if key not in self.keys:
            raise ParameterError(f"unknown parameter key {key!r}; the keys are: {', '.join(self.keys)}")
        i = self.keys.index(key)
        return slice(int(self._slices[i]), int(self._slices[i + 1]))

    def coords(self) -> dict[str, np.ndarray]:
        """The numbers :meth:`to_values` reads (start, bounds with infinities as 0, scale): pass them as
        an argument of a compiled function, so another start does not compile another program."""
        finite = lambda a: np.where(np.isfinite(a), a, 0.0)
        return {"start": self.start.copy(), "lo": finite(self._lo), "hi": finite(self._hi), "scale": self._scale.copy()}

    def to_values(self, theta, coords: dict | None = None) -> jax.Array:
        """Physical values (flat, in :attr:`labels` order) of unconstrained coordinates ``theta``.

        Arguments:
            theta: unconstrained coordinates (traced or not).
            coords: :meth:`coords` (traced or not); this set's own if None.
        """
        c = self.coords() if coords is None else coords
        theta = jnp.asarray(theta)
        x = jnp.zeros_like(theta)
        up = ~np.isfinite(self._lo)  # one-sided coordinates below an upper bound are mirrored
        for t, idx in self._groups.items():
            if not len(idx):
                continue
            z = theta[idx]
            a, b, x0 = c["lo"][idx], c["hi"][idx], c["start"][idx]
            u = up[idx]
            if t is Transform.LOGIT:
                v = a + (b - a) * jax.nn.sigmoid(z)
            elif t is Transform.LOG:
                v = jnp.where(u, b - (b - x0) * jnp.exp(z), a + (x0 - a) * jnp.exp(z))
            elif t is Transform.SOFTPLUS:
                v = jnp.where(u, b - _softplus(z), a + _softplus(z))
            else:
                v = x0 + c["scale"][idx] * z
            x = x.at[idx].set(v)
        return x

    def to_theta(self, values) -> np.ndarray:
        """Unconstrained coordinates of physical values (flat, concrete; each strictly inside its bounds)."""
        x = np.asarray(values, np.float64)
        z = np.zeros_like(x)
        lo, hi, x0, s = self._lo, self._hi, self.start, self._scale
        for t, idx in self._groups.items():
            if not len(idx):
                continue
            v, a, b, c = x[idx], lo[idx], hi[idx], x0[idx]
            inside = (v > a) & (v < b)
            if not inside.all():
                j = idx[int(np.argmin(inside))]
                raise ParameterError(
                    f"{self.labels[j]}={x[j]:g} is not strictly inside its bounds ({lo[j]:g}, {hi[j]:g})"
                )
            if t is Transform.LOGIT:
                u = (v - a) / (b - a)
                z[idx] = np.log(u) - np.log1p(-u)
            elif t is Transform.LOG:
                up = ~np.isfinite(a)
                with np.errstate(invalid="ignore", divide="ignore"):
                    z[idx] = np.where(up, np.log((b - v) / (b - c)), np.log((v - a) / (c - a)))
            elif t is Transform.SOFTPLUS:
                up = ~np.isfinite(a)
                with np.errstate(invalid="ignore"):
                    z[idx] = np.where(up, _inv_softplus(b - v), _inv_softplus(v - a))
            else:
                z[idx] = (v - c) / s[idx]
        return z

    def as_dict(self, values) -> dict[str, np.ndarray | float]:
        """``{key: value}`` of flat physical values: a float for one component, else an array
        (``body_inertial``: mass, centre of mass (3), inertia about it xx yy zz xy xz yz)."""
        x = np.asarray(values, np.float64)
        out: dict[str, Any] = {}
        for p, k, (a, b) in zip(self.params, self.keys, zip(self._slices[:-1], self._slices[1:])):
            if FIELDS[p.field].whole:
                out[k] = _inertial_numbers(x[a:b])
            else:
                out[k] = float(x[a]) if b - a == 1 else x[a:b].copy()
        return out

    def from_dict(self, values: Mapping[str, Any]) -> np.ndarray:
        """Flat physical values from ``{key: value}`` (keys missing: the start)."""
        x = self.start.copy()
        unknown = [k for k in values if k not in self.keys]
        if unknown:
            raise ParameterError(f"unknown parameter key {unknown[0]!r}; the keys are: {', '.join(self.keys)}")
        for k, (a, b) in zip(self.keys, zip(self._slices[:-1], self._slices[1:])):
            if k in values:
                v = np.asarray(values[k], np.float64).ravel()
                if v.size != b - a:
                    raise ParameterError(f"{k}: {v.size} value(s) given; it has {b - a} component(s)")
                if FIELDS[self.params[self.keys.index(k)].field].whole:  # physical numbers: to coordinates
                    xx, yy, zz, xy, xz, yz = v[4:]
                    full = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
                    try:
                        v = constants.log_cholesky_from_mass_properties(float(v[0]), v[1:4], full)
                    except ValueError as e:
                        raise ParameterError(f"{k}: {e}") from None
                x[a:b] = v
        return x

    # ------------------------------------------------------------------------------------------ models
    def model(self, values, base, variant: int = 0):
        """``base`` (``mjx.put_model`` of the variant's model, any timestep) with the physical ``values``
        written in, the ties applied and the derived constants recomputed; traced through.

        Arguments:
            values: flat physical values (:meth:`to_values`), traced or not.
            base: the variant's ``mjx.Model``.
            variant: which model of the set.
        """
        values = jnp.asarray(values)
        edits: dict[str, jax.Array] = {}
        for r, (a, b) in zip(self.resolved[variant], zip(self._slices[:-1], self._slices[1:])):
            v = values[a:b]  # no writes: body_inertial (mass ties) and sensor terms (the residual)
            if r.param.uniform:
                v = jnp.broadcast_to(v, (len(r.columns),))
            for w in r.writes:  # the field, and the fields MuJoCo stores it in again (ties.py)
                cur = edits.get(w.leaf)
                if cur is None:
                    cur = jnp.ravel(_get(base, w.leaf)).astype(values.dtype)
                cur = cur.at[w.flat.ravel()].set(jnp.tile(w.factor * v[np.asarray(w.comps)], w.flat.shape[0]))
                edits[w.leaf] = cur
        m = base.tree_replace({k: jnp.reshape(v, jnp.shape(_get(base, k))) for k, v in edits.items()})
        m = self.ties[variant].apply(m, values, base)
        if self.recompute_constants:
            m = constants.set_const(m)
        return m

    def sensor_terms(self, values, nsensordata: int, variant: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(gain, bias, delay)`` per sensordata column (ones, zeros and zeros where no parameter acts)."""
        values = jnp.asarray(values)
        terms = {
            "gain": jnp.ones(nsensordata, values.dtype),
            "bias": jnp.zeros(nsensordata, values.dtype),
            "delay": jnp.zeros(nsensordata, values.dtype),
        }
        for r, (a, b) in zip(self.resolved[variant], zip(self._slices[:-1], self._slices[1:])):
            term = FIELDS[r.param.field].sensor_term
            if term is not None:
                v = values[a:b]
                if r.param.uniform:
                    v = jnp.broadcast_to(v, (len(r.columns),))
                terms[term] = terms[term].at[r.flat.ravel()].set(jnp.tile(v, r.flat.shape[0]))
        return terms["gain"], terms["bias"], terms["delay"]

    @functools.cached_property
    def _model_jit(self):
        return jax.jit(self.model, static_argnums=2)

    @property
    def has_sensor_terms(self) -> bool:
        return any(FIELDS[p.field].sensor_term is not None for p in self.params)

    def write(self, values, variant: int = 0) -> mujoco.MjModel:
        """A copy of the variant's ``MjModel`` with ``values`` written, ties applied and constants recomputed.

        The fields the traced :meth:`model` changes are copied over from it, then ``mj_setConst``
        runs, so the result is ready for ``mujoco.mj_step`` or for saving.
        """
        from diffmjx._mjx import mjx

        src = self.models[variant]
        delays, _ = self._delays(values, variant)
        out = self._with_history(delays, variant) if delays else copy.deepcopy(src)
        cpu = jax.local_devices(backend="cpu")[0]  # this process's (MJX's default is process 0's device)
        with jax.default_device(cpu):
            new = self._model_jit(np.asarray(values, np.float64), mjx.put_model(src, device=cpu), variant)
        written = {w.leaf for r in self.resolved[variant] for w in r.writes}
        for leaf in sorted(constants.WRITTEN_LEAVES | written):
            value = np.asarray(_get(new, leaf), np.float64)
            owner, _, attr = leaf.rpartition(".")
            holder = _get(out, owner) if owner else out
            target = getattr(holder, attr)
            if isinstance(target, np.ndarray):
                np.copyto(target, value.reshape(target.shape))
            else:
                setattr(holder, attr, float(value))
        for i, delay in delays.items():
            out.sensor_delay[i] = delay
            out.sensor_history[i, 1] = 1  # linear interpolation between samples, as the residual's model
        if self.recompute_constants:
            d = mujoco.MjData(out)
            mujoco.mj_setConst(out, d)
        return out

    def not_in_model(self, values, variant: int = 0) -> dict[str, str]:
        """``{key: why}`` of the parameters :meth:`write` cannot put into the ``MjModel``: sensor gain and
        bias (MuJoCo has no such fields), and a sensor delay without a history buffer to hold it (MuJoCo
        allocates it when compiling: known only with the ``MjSpec``) or with one delay per dimension."""
        _, why = self._delays(values, variant)
        for p in self.params:
            if FIELDS[p.field].sensor_term in ("gain", "bias"):
                why[p.key] = (
                    "MuJoCo has no sensor gain or bias: the measurement model is gain * sensordata + bias, "
                    "with the values in fit.values"
                )
        return why

    def _delays(self, values, variant: int) -> tuple[dict[int, float], dict[str, str]]:
        """The sensor delays ``{sensor id: seconds}`` the model can hold, and why the others cannot."""
        x = np.asarray(values, np.float64)
        m, spec = self.models[variant], self.specs[variant]
        delays, why = {}, {}
        for r, (a, b) in zip(self.resolved[variant], zip(self._slices[:-1], self._slices[1:])):
            if FIELDS[r.param.field].sensor_term != "delay":
                continue
            v = x[a:b]
            if len(v) > 1 and not np.all(v == v[0]):
                why[r.param.key] = "MuJoCo holds one delay per sensor; the fit has one per dimension (fit.values)"
                continue
            need = math.ceil(float(v[0]) / m.opt.timestep) + 1  # samples the interpolation reaches back
            short = [i for i in r.elements if m.sensor_history[i, 0] < need]
            if spec is None and short:
                why[r.param.key] = (
                    f"the delay needs a history of {need} samples (sensor nsample), which MuJoCo allocates "
                    f"when compiling and the model has {int(m.sensor_history[short[0], 0])}: pass the MJCF path "
                    f'or MjSpec to identify, or give the sensor nsample="{need}" in the MJCF'
                )
            else:
                delays.update({i: float(v[0]) for i in r.elements})
        return delays, why

    def _with_history(self, delays: dict[int, float], variant: int) -> mujoco.MjModel:
        """The variant's model with sensor history buffers long enough for ``delays`` (recompiled from
        its ``MjSpec`` where they are not)."""
        m, spec = self.models[variant], self.specs[variant]
        need = {i: math.ceil(d / m.opt.timestep) + 1 for i, d in delays.items()}
        if all(m.sensor_history[i, 0] >= n for i, n in need.items()):
            return copy.deepcopy(m)
        spec = spec.copy()
        for i, n in need.items():
            s = spec.sensors[i]
            s.nsample, s.interp = max(int(s.nsample), n), 1
        return spec.compile()


def _get(m, leaf: str):
    obj = m
    for part in leaf.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _unsimplify(m: mujoco.MjModel, moving: set[int], spec):
    """``(model, spec)`` with every body of ``moving`` (whose inertial frame the parameters move) compiled as not simple.

    MuJoCo compiles a body whose inertial frame is its joint frame as "simple" and leaves out the
    mass-matrix entries that are zero for it; moving its centre of mass would need them (and
    ``mj_setConst`` refuses such a model). With the ``MjSpec`` the bodies are recompiled with
    ``simple="false"``; without it, an error says what to do.
    """
    simple = sorted(b for b in moving if m.body_simple[b])
    if not simple:
        return m, spec
    names = [mujoco.mj_id2name(m, _BODY, b) or f"body {b}" for b in simple]
    if spec is None:
        raise ParameterError(
            f"the parameters move the centre of mass of {', '.join(map(repr, names))}, which MuJoCo "
            "compiled as a simple body (its inertial frame its joint frame, mass-matrix entries left "
            'out); add simple="false" to the body in the MJCF, or pass the MjSpec or MJCF path'
        )
    spec = spec.copy()
    for b in simple:
        spec.bodies[b].simple = False
    return spec.compile(), spec


def _inertial_numbers(theta) -> np.ndarray:
    """(10,) mass, centre of mass and inertia (xx yy zz xy xz yz) of log-Cholesky coordinates."""
    mass, com, full = (np.asarray(x) for x in constants.mass_properties_from_log_cholesky(jnp.asarray(theta)))
    return np.array([float(mass), *com, full[0, 0], full[1, 1], full[2, 2], full[0, 1], full[0, 2], full[1, 2]])


def _log_cholesky_of_body(m: mujoco.MjModel, i: int) -> np.ndarray:
    r = np.zeros(9)
    mujoco.mju_quat2Mat(r, np.asarray(m.body_iquat[i], np.float64))
    r = r.reshape(3, 3)
    full = r @ np.diag(m.body_inertia[i]) @ r.T
    try:
        return constants.log_cholesky_from_mass_properties(float(m.body_mass[i]), m.body_ipos[i], full)
    except ValueError as e:
        name = mujoco.mj_id2name(m, _BODY, i)
        raise ParameterError(f"body_inertial:{name}: {e}") from None
