"""The one module that reaches into ``mujoco.mjx._src``.

DiffMJX reuses MJX's pipeline stages and solver internals instead of forking them. Every private
name we depend on is imported here, and every private field of ``mjx.Model`` / ``mjx.Data``
(``_impl``) the library reads or writes is reached through a function here, so an MJX upgrade
(pinned in ``pyproject.toml``) touches one file. Other modules use ``_mjx.<function or constant>``.
The one private name of JAX the library reads (:func:`jax_backends_initialized`) lives here too.

Why one file of this length: its purpose is that an MJX upgrade touches one file, so every stage
DiffMJX replaces adds its few accessors here (a ``*_with`` stage composition, a private field's
getter and setter) rather than in a second gateway.
"""

import contextlib
import io
from typing import NamedTuple

import jax
import numpy as np

with contextlib.redirect_stdout(io.StringIO()):
    # MJX prints a notice when its optional Warp backend is absent; keep user output clean.
    from mujoco import mjx
    from mujoco.mjx._src import (
        collision_convex,
        collision_driver,
        collision_primitive,
        collision_sdf,
        constraint,
        forward,
        passive,
        sensor,
        smooth,
        support,
    )
    from mujoco.mjx._src import io as mjx_io
    from mujoco.mjx._src import math as mjx_math
    from mujoco.mjx._src import solver as mjx_solver
    from mujoco.mjx._src.types import ConeType, DisableBit, DynType, GeomType, JointType, SolverType

__all__ = [
    "MJX_COLLISION_TABLE",
    "SDF_PAIRS",
    "ConeType",
    "Data",
    "DisableBit",
    "DynType",
    "GeomType",
    "JointType",
    "Model",
    "Rows",
    "SolverContext",
    "SolverType",
    "TendonFields",
    "WrapInside",
    "actuator_moment",
    "cinert",
    "clip_polygon",
    "collision",
    "com_pos",
    "contact",
    "contact_dims",
    "contact_groups",
    "convex_collider",
    "crb",
    "efc",
    "efc_force",
    "fluid",
    "full_m",
    "fwd_acceleration",
    "fwd_actuation",
    "fwd_position",
    "fwd_position_with",
    "fwd_velocity",
    "fwd_velocity_with",
    "geom_pairs",
    "gravcomp",
    "has_collision_fn",
    "has_fluid",
    "has_frictionloss",
    "jac",
    "jax_backends_initialized",
    "kinematics",
    "make_constraint",
    "make_data",
    "make_frame",
    "mjx",
    "mjx_advance",
    "mjx_euler",
    "mjx_implicit",
    "mjx_solve",
    "mul_m",
    "ncon",
    "norm",
    "normalize",
    "normalize_with_norm",
    "numeric",
    "passive_disabled",
    "position_stages",
    "primitive_collider",
    "project_polygon",
    "safe_div",
    "scan_while_loop",
    "sensor_acc",
    "sensor_pos",
    "sensor_vel",
    "solver_linesearch",
    "solver_rescale",
    "solver_update_constraint",
    "solver_update_gradient",
    "ten_velocity",
    "tendon",
    "tendon_armature",
    "tendon_fields",
    "transmission",
    "with_cinert",
    "with_contact",
    "with_contact_dims",
    "with_efc",
    "with_efc_force",
    "with_tendon",
    "with_timestep",
    "without_unused_statics",
    "wrap_inside",
]

Model = mjx.Model
Data = mjx.Data

# Pipeline stages (pure functions ``(m, d) -> d``).
fwd_position = forward.fwd_position
fwd_velocity = forward.fwd_velocity
fwd_actuation = forward.fwd_actuation
fwd_acceleration = forward.fwd_acceleration
sensor_pos = sensor.sensor_pos
sensor_vel = sensor.sensor_vel
sensor_acc = sensor.sensor_acc
kinematics = smooth.kinematics
com_pos = smooth.com_pos
crb = smooth.crb  # the mass matrix (composite rigid bodies and dof armature)
tendon_armature = smooth.tendon_armature
transmission = smooth.transmission
collision = collision_driver.collision
gravcomp = passive._gravcomp  # (nv,) gravity compensation forces (bodies' gravcomp)
fluid = passive._fluid  # (nv,) the inertia-box fluid model's forces
make_constraint = constraint.make_constraint

# MJX's fixed-step integrators, applied to a Data on which forward dynamics already ran.
mjx_euler = forward.euler
mjx_implicit = forward.implicit

# Constraint-solver internals (CGupdateConstraint / CGupdateGradient / zoom line search).
SolverContext = mjx_solver.Context
solver_update_constraint = mjx_solver._update_constraint
solver_update_gradient = mjx_solver._update_gradient
solver_linesearch = mjx_solver._linesearch
solver_rescale = mjx_solver._rescale
scan_while_loop = mjx_solver._while_loop_scan
mjx_solve = mjx_solver.solve

# Candidate geom pairs as MJX builds them (contype/conaffinity, <pair>, <exclude>, parent filtering).
geom_pairs = collision_driver.geom_pairs
has_collision_fn = collision_driver.has_collision_fn

full_m = support.full_m
mul_m = support.mul_m
jac = support.jac  # (nv, 3) translational and rotational Jacobians of a point on a body
tendon = smooth.tendon

# MJX's gradient-safe norms (zero derivative at zero) and division.
norm = mjx_math.norm
normalize = mjx_math.normalize
normalize_with_norm = mjx_math.normalize_with_norm
safe_div = mjx_math.safe_div

# Collision driver internals (for the smoothed-collision table).
MJX_COLLISION_TABLE = collision_driver._COLLISION_FUNC
convex_collider = collision_convex.collider
primitive_collider = collision_primitive.collider
make_frame = mjx_math.make_frame
# MJX's signed-distance pairs with a cylinder find the contact point by ten steps of gradient
# descent on the two geoms' SDFs, and the derivative of that search is NaN at most poses; DiffMJX
# holds the point found in the backward pass (collision.sdf) and needs MJX's SDFs for it
SDF_PAIRS = {
    (GeomType.CAPSULE, GeomType.CYLINDER): (collision_sdf._capsule, collision_sdf._cylinder),
    (GeomType.ELLIPSOID, GeomType.CYLINDER): (collision_sdf._ellipsoid, collision_sdf._cylinder),
    (GeomType.CYLINDER, GeomType.CYLINDER): (collision_sdf._cylinder, collision_sdf._cylinder),
}
clip_polygon = collision_convex._clip  # box-box: clip the incident face against the reference face
project_polygon = collision_convex._project_poly_onto_plane  # box-box: incident points onto the reference face


class Rows(NamedTuple):
    """Constraint rows of a ``Data`` (MJX's private ``efc_*`` fields)."""

    J: jax.Array  # (nefc, nv) Jacobian
    D: jax.Array  # (nefc,) inverse regulariser 1 / R
    aref: jax.Array  # (nefc,) reference acceleration
    frictionloss: jax.Array  # (nefc,)
    ne: int  # equality rows (first)
    nf: int  # friction-loss rows (next)


def make_data(m: Model) -> Data:
    """MJX's ``make_data`` on this process's first device.

    MJX places it on ``jax.devices()[0]``, which belongs to process 0 when several processes run
    (``jax.distributed``): traced into a program, that placement would commit the program's output
    to a device the other processes cannot read. With one process the two devices are the same.
    """
    return mjx.make_data(m, device=jax.local_devices()[0])


def efc(d: Data) -> Rows:
    """Constraint rows of ``d``."""
    i = d._impl
    return Rows(i.efc_J, i.efc_D, i.efc_aref, i.efc_frictionloss, i.ne, i.nf)


def efc_force(d: Data):
    return d._impl.efc_force


def with_efc_force(d: Data, force) -> Data:
    return d.tree_replace({"_impl.efc_force": force})


def with_efc(d: Data, **fields) -> Data:
    """Replace constraint-row fields (efc_D, efc_aref, ...) of MJX's private Data part."""
    return d.tree_replace({f"_impl.{k}": v for k, v in fields.items()})


def has_frictionloss(m: Model) -> bool:
    return bool(m._impl.dof_hasfrictionloss.any() or m._impl.tendon_hasfrictionloss.any()) and not (
        m.opt.disableflags & DisableBit.FRICTIONLOSS
    )


def mjx_advance(m: Model, d: Data, act_dot, qacc, qvel) -> Data:
    """MJX's end-of-step update (activation clamping, velocity, position, time, warmstart)."""
    return forward._advance(m, d, act_dot, qacc, qvel)


def with_timestep(m: Model, dt) -> Model:
    return m.tree_replace({"opt.timestep": dt})


def without_unused_statics(m: Model) -> Model:
    """``m`` with static (hashed, not traced) float fields that its simulation never reads set to
    zero, so that models differing only in them share compiled programs: MJX keeps a static copy
    of ``geom_rbound`` that only sizes height-field collision grids; without a height field, a
    fitted geom size would otherwise make every start a new program."""
    if np.any(np.asarray(m.geom_type) == int(GeomType.HFIELD)):
        return m
    impl = m._impl.replace(geom_rbound_hfield=np.zeros_like(m._impl.geom_rbound_hfield))
    return m.replace(_impl=impl)


def contact_groups(m: Model, d: Data):
    """MJX's grouping of candidate geom pairs by (geom types, condim)."""
    return collision_driver._contact_groups(m, d)


def numeric(m, name: str) -> int:
    return collision_driver._numeric(m, name)


def ncon(d: Data) -> int:
    return d._impl.ncon


def contact_dims(m: Model, ncon_by_types: dict) -> np.ndarray:
    """The contacts' condims (MJX's ``contact.dim``, grouped by condim) when the geom-type pairs in
    ``ncon_by_types`` emit that many contacts per pair and every other pair MJX's number."""
    base = np.asarray(collision_driver.make_condim(m), dtype=int)
    counts = {int(c): int((base == c).sum()) for c in np.unique(base)}
    for key, pairs in collision_driver._geom_groups(m).items():
        if key.types in ncon_by_types:
            extra = ncon_by_types[key.types] - MJX_COLLISION_TABLE[key.types].ncon
            counts[key.condim] = counts.get(key.condim, 0) + extra * len(pairs)
    return np.repeat(np.array(sorted(counts), dtype=base.dtype), [counts[c] for c in sorted(counts)])


def with_contact_dims(m: Model, d: Data, dims: np.ndarray) -> Data:
    """``d`` with room for contacts of condims ``dims`` and their constraint rows (zeros), as
    ``mjx.make_data`` allocates them; ``d`` itself if it has that layout already."""
    if np.array_equal(np.asarray(d._impl.contact.dim), dims):
        return d
    efc_type = constraint.make_efc_type(m, dims)
    ne, nf, nl, nc = constraint.counts(efc_type)
    nefc = ne + nf + nl + nc
    contact = mjx_io._make_data_contact_jax(dims, constraint.make_efc_address(m, dims, efc_type))
    dtype = d.qpos.dtype
    rows = {
        k: jax.numpy.zeros((nefc,), dtype)
        for k in ("efc_pos", "efc_margin", "efc_frictionloss", "efc_D", "efc_aref", "efc_force")
    }
    impl = d._impl.replace(
        ne=ne,
        nf=nf,
        nl=nl,
        nefc=nefc,
        ncon=dims.size,
        contact=contact,
        efc_type=np.asarray(efc_type, dtype=d._impl.efc_type.dtype),
        efc_J=jax.numpy.zeros((nefc, m.nv), dtype),
        **rows,
    )
    return d.replace(_impl=impl)


def cinert(d: Data):
    """(nbody, 10) each body's inertia about its root's subtree centre of mass (MJX's private field)."""
    return d._impl.cinert


def with_cinert(d: Data, cinert) -> Data:
    return d.tree_replace({"_impl.cinert": cinert})


def contact(d: Data):
    return d._impl.contact


def with_contact(d: Data, c) -> Data:
    return d.tree_replace({"_impl.contact": c})


class TendonFields(NamedTuple):
    """MJX's private tendon fields of a ``Data``: moment arms and the wrap path the viewer reads."""

    ten_J: jax.Array  # (ntendon, nv) moment arms
    ten_wrapadr: jax.Array  # (ntendon,) first wrap-path point of each tendon
    ten_wrapnum: jax.Array  # (ntendon,) wrap-path points of each tendon
    wrap_xpos: jax.Array  # (nwrap, 6) wrap-path points, two per wrap
    wrap_obj: jax.Array  # (nwrap, 2) their objects (-2 pulley, -1 site, else geom)


def actuator_moment(d: Data):
    """(nu, nv) actuator moment arms (after the transmission stage)."""
    return d._impl.actuator_moment


def tendon_fields(d: Data) -> TendonFields:
    i = d._impl
    return TendonFields(i.ten_J, i.ten_wrapadr, i.ten_wrapnum, i.wrap_xpos, i.wrap_obj)


def with_tendon(d: Data, ten_length, fields: TendonFields) -> Data:
    """``d`` with tendon lengths ``ten_length`` and MJX's private tendon fields ``fields``."""
    return d.tree_replace({"ten_length": ten_length, **{f"_impl.{k}": v for k, v in fields._asdict().items()}})


class WrapInside(NamedTuple):
    """MJX's settings for wrapping from inside a geom (per geom wrap, then the Newton search's)."""

    is_inside: np.ndarray  # (number of geom wraps,) whether the side site lies inside the geom
    maxiter: int
    tolerance: float
    z_init: float


def wrap_inside(m: Model) -> WrapInside:
    i = m._impl
    return WrapInside(i.is_wrap_inside, i.wrap_inside_maxiter, i.wrap_inside_tolerance, i.wrap_inside_z_init)


def position_stages(collide=None, tendon=None, rows=None, kinematics=None, com_pos=None) -> list[tuple[str, object]]:
    """The stages of ``mjx fwd_position`` in order, as ``(name, fn(m, d) -> d)``.

    ``collide(m, d)``, ``tendon(m, d)``, ``rows(m, d)``, ``kinematics(m, d)`` and ``com_pos(m, d)``
    replace MJX's collision, tendon, ``make_constraint``, ``kinematics`` and ``com_pos`` stages when given. Used by :func:`fwd_position_with` and by the per-stage cost benchmark
    (``experiments/benchmark_vjp``).
    """
    return [
        ("kinematics", smooth.kinematics if kinematics is None else kinematics),
        ("com_pos", smooth.com_pos if com_pos is None else com_pos),
        ("camlight", smooth.camlight),
        ("tendon", smooth.tendon if tendon is None else tendon),
        ("crb", smooth.crb),
        ("tendon_armature", smooth.tendon_armature),
        ("factor_m", smooth.factor_m),
        ("collision", collision_driver.collision if collide is None else collide),
        ("make_constraint", constraint.make_constraint if rows is None else rows),
        ("transmission", smooth.transmission),
    ]


def fwd_position_with(m: Model, d: Data, collide=None, tendon=None, rows=None) -> Data:
    """``mjx fwd_position`` with the collision, tendon and row stages replaced where given."""
    for _, stage in position_stages(collide, tendon, rows):
        d = stage(m, d)
    return d


def fwd_velocity_with(m: Model, d: Data, passive_forces) -> Data:
    """``mjx fwd_velocity`` with MJX's passive-force stage replaced by ``passive_forces(m, d) -> d``."""
    d = d.tree_replace(
        {
            "_impl.actuator_velocity": d._impl.actuator_moment @ d.qvel,
            "_impl.ten_velocity": d._impl.ten_J @ d.qvel,
        }
    )
    d = smooth.com_vel(m, d)
    d = passive_forces(m, d)
    d = smooth.rne(m, d)
    return smooth.tendon_bias(m, d)


def passive_disabled(m: Model) -> bool:
    """Whether MJX sets every passive force to zero: it does when springs *or* dampers are disabled."""
    return bool(m.opt.disableflags & (DisableBit.SPRING | DisableBit.DAMPER))


def has_fluid(m: Model) -> bool:
    return bool(m.opt._impl.has_fluid_params)


def ten_velocity(d: Data):
    """(ntendon,) tendon velocities (after the velocity stage's first line)."""
    return d._impl.ten_velocity


def jax_backends_initialized() -> bool:
    """Whether JAX has created its backends: ``XLA_FLAGS`` is read then, once per process."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
