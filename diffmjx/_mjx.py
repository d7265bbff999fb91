"""The one module that reaches into ``mujoco.mjx._src``.

DiffMJX reuses MJX's pipeline stages and solver internals instead of forking them. Every private
name we depend on is imported here, so an MJX upgrade (pinned in ``pyproject.toml``) touches one file.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

with contextlib.redirect_stdout(io.StringIO()):
    # MJX prints a notice when its optional Warp backend is absent; keep user output clean.
    import mujoco
    from mujoco import mjx
    from mujoco.mjx._src import collision_driver, constraint, forward, sensor, smooth, support
    from mujoco.mjx._src import solver as mjx_solver
    from mujoco.mjx._src.types import ConeType, DisableBit, JointType, SolverType

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
collision = collision_driver.collision
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

full_m = support.full_m
mul_m = support.mul_m

__all__ = [
    "ConeType",
    "Data",
    "DisableBit",
    "JointType",
    "Model",
    "SolverType",
    "mjx",
]


def efc(d: Data):
    """Constraint rows of ``d``: (J, D, aref, frictionloss, ne, nf) from MJX's private Data part."""
    i = d._impl
    return i.efc_J, i.efc_D, i.efc_aref, i.efc_frictionloss, i.ne, i.nf


def efc_force(d: Data):
    return d._impl.efc_force


def with_efc_force(d: Data, force) -> Data:
    return d.tree_replace({"_impl.efc_force": force})



def has_frictionloss(m: Model) -> bool:
    return bool(m._impl.dof_hasfrictionloss.any() or m._impl.tendon_hasfrictionloss.any()) and not (
        m.opt.disableflags & DisableBit.FRICTIONLOSS
    )


def mjx_advance(m: Model, d: Data, act_dot, qacc, qvel) -> Data:
    """MJX's end-of-step update (activation clamping, velocity, position, time, warmstart)."""
    return forward._advance(m, d, act_dot, qacc, qvel)


def with_timestep(m: Model, dt) -> Model:
    return m.tree_replace({"opt.timestep": dt})


# Collision driver internals (for the smoothed-collision table).
from mujoco.mjx._src import collision_convex as _cc  # noqa: E402
from mujoco.mjx._src import collision_driver as _cd  # noqa: E402
from mujoco.mjx._src import collision_primitive  # noqa: E402
from mujoco.mjx._src import math as mjx_math  # noqa: E402

GeomType = _cd.GeomType
MJX_COLLISION_TABLE = _cd._COLLISION_FUNC
convex_collider = _cc.collider
primitive_collider = collision_primitive.collider
make_frame = mjx_math.make_frame
clip_polygon = _cc._clip  # box-box: clip the incident face against the reference face
project_polygon = _cc._project_poly_onto_plane  # box-box: incident points onto the reference face
manifold_points = _cc._manifold_points  # box-box: MJX's choice of four points of a polygon


def contact_groups(m: Model, d: Data):
    """MJX's grouping of candidate geom pairs by (geom types, condim)."""
    return _cd._contact_groups(m, d)


def numeric(m, name: str) -> int:
    return _cd._numeric(m, name)


def ncon(d: Data) -> int:
    return d._impl.ncon


def with_contact(d: Data, contact) -> Data:
    return d.tree_replace({"_impl.contact": contact})


def position_stages(collide=None) -> list[tuple[str, object]]:
    """The stages of ``mjx fwd_position`` in order, as ``(name, fn(m, d) -> d)``.

    ``collide(m, d)`` replaces MJX's collision stage when given. Used by :func:`fwd_position_with`
    and by the per-stage cost benchmark (``experiments/benchmark_vjp``).
    """
    return [
        ("kinematics", smooth.kinematics),
        ("com_pos", smooth.com_pos),
        ("camlight", smooth.camlight),
        ("tendon", smooth.tendon),
        ("crb", smooth.crb),
        ("tendon_armature", smooth.tendon_armature),
        ("factor_m", smooth.factor_m),
        ("collision", collision_driver.collision if collide is None else collide),
        ("make_constraint", constraint.make_constraint),
        ("transmission", smooth.transmission),
    ]


def fwd_position_with(m: Model, d: Data, collide) -> Data:
    """``mjx fwd_position`` with the collision stage replaced by ``collide(m, d)``."""
    for _, stage in position_stages(collide):
        d = stage(m, d)
    return d


MINVAL = mujoco.mjMINVAL
MINIMP = mujoco.mjMINIMP  # the impedance floor MJX's constraint rows carry
MAXIMP = mujoco.mjMAXIMP  # ... and the ceiling


def contact(d: Data):
    return d._impl.contact


def with_efc(d: Data, **fields) -> Data:
    """Replace constraint-row fields (efc_D, efc_aref, ...) of MJX's private Data part."""
    return d.tree_replace({f"_impl.{k}": v for k, v in fields.items()})


def contact_rows(m: Model, c) -> tuple[np.ndarray, np.ndarray]:
    """(row, contact) index pairs of every contact's constraint rows in MJX's row layout.

    Pyramidal cones give a contact of condim ``dim`` ``2 (dim - 1)`` rows (1 for condim 1),
    elliptic ones ``dim`` rows; contacts without rows (``efc_address < 0``) are skipped.
    """
    pyramidal = m.opt.cone == ConeType.PYRAMIDAL
    rows, con = [], []
    for i, (dim, adr) in enumerate(zip(np.asarray(c.dim), np.asarray(c.efc_address), strict=True)):
        if adr < 0:
            continue
        n = 1 if dim == 1 else (2 * (dim - 1) if pyramidal else int(dim))
        rows.extend(range(adr, adr + n))
        con.extend([i] * n)
    return np.asarray(rows, dtype=np.int32), np.asarray(con, dtype=np.int32)
