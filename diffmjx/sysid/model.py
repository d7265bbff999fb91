r"""The ContactNets cube as a differentiable MuJoCo model: physical parameters in, ``mjx.Model`` out.

:func:`cube_mjmodel` builds the C model in code (``mujoco.MjSpec``): a free-joint box on an
infinite plane, one control period of :data:`~diffmjx.sysid.DT`, MuJoCo's Newton solver (2
iterations by default, ``ls_iterations`` 10, tolerance 1e-8, ``impratio`` 1, pyramidal cone) and
condim-3 contacts. :func:`cube_mjx_model` writes a :class:`CubeParams` into an ``mjx.Model`` of
that scene with every identified field traced, so ``jax.grad`` / ``jit`` / ``vmap`` over the
parameters see everything MuJoCo's compiler and ``mj_setConst`` derive from them.
:func:`to_unconstrained` / :func:`from_unconstrained` map the parameters to and from
unconstrained coordinates for an optimiser.

Derived fields. Building the C model at two parameter sets and diffing every leaf of
``mjx.put_model`` (``tests/test_sysid_model.py`` does this leaf by leaf) finds exactly these,
all written by :func:`cube_mjx_model` (side ``s``, half width ``h = s / 2``, mass ``m``, inertia
``I = m s^2 / 6`` of a uniform-density cube about each axis):

- ``geom_size`` (cube row): ``(h, h, h)``.
- ``geom_rbound`` (cube): ``sqrt(3) h``, the bounding sphere; ``geom_aabb`` (cube):
  centre 0, half sizes ``(h, h, h)``.
- ``body_mass`` (cube) ``m``; ``body_subtreemass`` (world and cube) ``m``.
- ``body_inertia`` (cube) ``(I, I, I)``; ``body_ipos`` and ``body_iquat`` stay 0 and identity.
- ``dof_M0`` (the mass-matrix diagonal at ``qpos0``): ``(m, m, m, I, I, I)``.
- ``body_invweight0`` (cube) ``(1/m, 1/I)`` and ``dof_invweight0``
  ``(1/m, 1/m, 1/m, 1/I, 1/I, 1/I)``: ``mj_setConst`` averages the diagonal of
  ``J M^-1 J^T`` at ``qpos0`` over the translational and the rotational block; for one free body
  with its centre of mass at the joint those are ``1/m`` and the mean of the inverse principal
  inertias. They scale the contact regulariser, so the mass reaches the contact forces through
  them as well.
- ``stat.meanmass`` ``m``; ``stat.meaninertia`` ``mean(dof_M0) = (m + I) / 2`` (the solver's
  tolerance scale); ``stat.meansize`` ``max(sqrt(3) h, 1e-5)`` (the largest geom bound around
  the body's centre of mass); ``stat.extent`` ``2 max(sqrt(3) h, 0.01)`` (the bounding box of the
  scene at ``qpos0``, where MuJoCo gives the infinite plane a bound of 0.01 m; never below
  ``2 meansize``).
- ``geom_solref``, ``geom_solimp`` and the sliding column of ``geom_friction``, on *both* geoms.
  MuJoCo has no pair-level values here: it mixes the two geoms' values for the floor–cube contact
  at run time (MJX does so in its collision stage), solref and solimp as a ``solmix``-weighted
  mean and friction as an elementwise maximum. With the same values on both geoms the mix is that
  value, and its derivative, split over the two copies, sums to the full one.

Fixed, on purpose:

- ``_impl.geom_rbound_hfield``: MJX's private copy of ``geom_rbound``, held as a static NumPy
  array (part of the pytree's structure, not a leaf), read only to size the grid of height-field
  collisions. The scene has no height field; writing it would make every side length a new pytree
  structure, so a new compilation. :func:`cube_mjx_model` keeps ``base``'s.
- ``stat.center`` (0: the scene's bounding box at ``qpos0`` is symmetric), ``body_ipos``,
  ``body_iquat`` and everything not listed above: they do not depend on the parameters.
- The torsional and rolling friction coefficients (MuJoCo's defaults, 0.005 and 0.0001): a
  condim-3 contact never reads them, so :class:`CubeParams` has the sliding coefficient only.
- ``dof_length`` and ``bvh_aabb`` of the C model change with the side but are not part of
  ``mjx.Model``.

The mass cannot be identified from the cube's motion: for a lone free body MuJoCo's contact is
mass-invariant (the regulariser scales with ``body_invweight0`` just as ``J M^-1 J^T`` does), so
its gradient is zero to rounding. A known core bug makes some gradients NaN while a contact
candidate lies beyond solimp's ``width`` (the cube in flight); ``docs/sysid.md`` has the details.

The formulas hold for this scene only (one free body at the origin at ``qpos0``, its box geom
centred on the body, no armature); :func:`cube_mjx_model` refuses a ``base`` of another shape.

Reparametrisation (:func:`from_unconstrained`): softplus for the positive quantities (side
length, mass, friction, solref's time constant and damping ratio, solimp's width), ``1 +
softplus`` for solimp's power, and a sigmoid scaled into ``(MINIMP, MAXIMP) = (1e-4, 0.9999)``
(where MuJoCo clamps them) for solimp's ``d0``, ``dwidth`` and midpoint. The unconstrained
coordinates are a :class:`CubeParams` too (same fields and shapes, values not physical).
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import _mjx
from diffmjx.impedance import MAXIMP, MINIMP
from diffmjx.sysid.data import DT

__all__ = [
    "CUBE_BODY",
    "CUBE_GEOM",
    "FLOOR_GEOM",
    "CubeParams",
    "check_params",
    "cube_mjmodel",
    "cube_mjx_model",
    "from_unconstrained",
    "to_unconstrained",
]

CUBE_BODY = 1
"""Body id of the cube (0 is the world)."""
CUBE_GEOM = 1
"""Geom id of the cube's box."""
FLOOR_GEOM = 0
"""Geom id of the plane."""

_TORSIONAL_ROLLING = (0.005, 0.0001)  # MuJoCo's defaults; unused by condim-3 contacts
_PLANE_BOUND = 0.01  # MuJoCo's stand-in bounding radius of an infinite plane (stat.extent)


def _const(values) -> np.ndarray:
    a = np.array(values, dtype=np.float64)
    a.flags.writeable = False  # a shared NamedTuple default must not be mutated
    return a


class CubeParams(NamedTuple):
    """Physical parameters of the cube scene (a pytree: differentiate, ``vmap`` or ``jit`` over it).

    Defaults are the ContactNets cube and the contact settings of the system-identification issue.
    Scalars may be Python floats or 0-d arrays.

    Attributes:
        side_length: edge length of the cube in m, > 0 (default 0.1048: half width 0.0524 m).
        mass: mass in kg, > 0 (default 0.37); the inertia is a uniform-density cube's. The motion
            does not depend on it (see the module docstring): keep it fixed when identifying.
        solref: (2,) MuJoCo's standard ``(timeconst, dampratio)``, both > 0 (default (0.02, 1)).
            MuJoCo raises ``timeconst`` to ``2 * timestep`` (0.0135 s) at run time unless the
            model disables ``refsafe``; below that the time constant has no effect.
        solimp: (5,) ``(d0, dwidth, width, midpoint, power)``: ``d0``, ``dwidth`` and ``midpoint``
            in ``[1e-4, 0.9999]`` (MuJoCo's clamp), ``width`` > 0 in m, ``power`` >= 1 (default
            (0.05, 0.95, 0.01, 0.5, 2)).
        friction: sliding friction coefficient, > 0 (default 0.18). Scalar: condim-3 contacts
            read only the sliding coefficient.
    """

    side_length: float | jax.Array = 0.1048
    mass: float | jax.Array = 0.37
    solref: np.ndarray | jax.Array = _const((0.02, 1.0))
    solimp: np.ndarray | jax.Array = _const((0.05, 0.95, 0.01, 0.5, 2.0))
    friction: float | jax.Array = 0.18


# (field, index, lower, upper, lower closed in MuJoCo, upper closed in MuJoCo, meaning)
_BOUNDS = (
    ("side_length", None, 0.0, math.inf, False, False, "m"),
    ("mass", None, 0.0, math.inf, False, False, "kg"),
    ("solref", 0, 0.0, math.inf, False, False, "timeconst, s"),
    ("solref", 1, 0.0, math.inf, False, False, "dampratio"),
    ("solimp", 0, MINIMP, MAXIMP, True, True, "d0"),
    ("solimp", 1, MINIMP, MAXIMP, True, True, "dwidth"),
    ("solimp", 2, 0.0, math.inf, False, False, "width, m"),
    ("solimp", 3, MINIMP, MAXIMP, True, True, "midpoint"),
    ("solimp", 4, 1.0, math.inf, True, False, "power"),
    ("friction", None, 0.0, math.inf, False, False, "sliding"),
)
_SHAPES = {"side_length": (), "mass": (), "solref": (2,), "solimp": (5,), "friction": ()}


def _is_traced(p) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(p))


def check_params(params: CubeParams, *, strict: bool = False) -> None:
    """Raise ``ValueError`` naming the field if ``params`` is not a valid parameter set.

    Arguments:
        params: concrete (not traced) :class:`CubeParams`.
        strict: require the open intervals of the reparametrisation (``power`` > 1 and ``d0``,
            ``dwidth``, ``midpoint`` strictly inside ``(1e-4, 0.9999)``), which
            :func:`to_unconstrained` needs; otherwise the closed ones MuJoCo accepts unchanged.

    Raises:
        ValueError: ``CubeParams.<field>[i] (meaning)=value``, the interval and the problem.
    """
    if not isinstance(params, CubeParams):
        raise ValueError(f"params must be a CubeParams, got {type(params).__name__}")
    for name, shape in _SHAPES.items():
        value = np.asarray(getattr(params, name), dtype=np.float64)
        if value.shape != shape:
            raise ValueError(f"CubeParams.{name} has shape {value.shape}; expected {shape}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"CubeParams.{name}={value.tolist()!r} is not finite")
    for name, i, lo, hi, lo_closed, hi_closed, meaning in _BOUNDS:
        value = float(np.asarray(getattr(params, name), dtype=np.float64)[() if i is None else i])
        lo_closed, hi_closed = lo_closed and not strict, hi_closed and not strict
        if (value > lo or (value == lo and lo_closed)) and (value < hi or (value == hi and hi_closed)):
            continue
        interval = f"{'[' if lo_closed else '('}{lo:g}, {hi:g}{']' if hi_closed else ')'}"
        field = name if i is None else f"{name}[{i}]"
        why = " (the reparametrisation maps onto the open interval)" if strict else ""
        raise ValueError(f"CubeParams.{field} ({meaning})={value!r} is invalid; expected a value in {interval}{why}")


def cube_mjmodel(params: CubeParams | None = None, *, iterations: int = 2) -> mujoco.MjModel:
    """The cube scene as a MuJoCo C model, built in code.

    A plane (geom :data:`FLOOR_GEOM`) and a free-joint body (:data:`CUBE_BODY`) whose box geom
    (:data:`CUBE_GEOM`) carries the mass, so MuJoCo's compiler gives it a uniform-density inertia.
    Both geoms carry ``solref``, ``solimp`` and the friction, condim 3. Options: timestep
    :data:`~diffmjx.sysid.DT`, Newton solver, ``iterations``, ``ls_iterations`` 10, tolerance 1e-8,
    ``impratio`` 1, pyramidal cone, MuJoCo's other defaults (gravity 9.81 m/s², ``refsafe`` on).

    Arguments:
        params: :class:`CubeParams` (concrete); ``CubeParams()`` if None.
        iterations: Newton iterations of the constraint solver, >= 1 (2 for DiffMJX's adaptive
            integrators, which re-solve at every stage; 4 suits MJX's fixed-step ones).

    Returns:
        The compiled ``mujoco.MjModel``.

    Raises:
        ValueError: a parameter outside its interval (naming the field) or a bad ``iterations``.
    """
    p = CubeParams() if params is None else params
    if _is_traced(p):
        raise ValueError("cube_mjmodel needs concrete parameters; use cube_mjx_model under jit/grad/vmap")
    check_params(p)
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ValueError(f"iterations={iterations!r} is invalid; expected an int >= 1")
    side = float(np.asarray(p.side_length))
    contact = {
        "condim": 3,
        "solref": np.asarray(p.solref, np.float64).tolist(),
        "solimp": np.asarray(p.solimp, np.float64).tolist(),
        "friction": [float(np.asarray(p.friction)), *_TORSIONAL_ROLLING],
    }

    spec = mujoco.MjSpec()
    spec.modelname = "sysid_cube"
    opt = spec.option
    opt.timestep = DT
    opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    opt.iterations = int(iterations)
    opt.ls_iterations = 10
    opt.tolerance = 1e-8
    opt.impratio = 1.0
    opt.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 0.05], **contact)
    body = spec.worldbody.add_body(name="cube")
    body.add_freejoint(name="root")
    body.add_geom(
        name="cube", type=mujoco.mjtGeom.mjGEOM_BOX, size=[side / 2] * 3, mass=float(np.asarray(p.mass)), **contact
    )
    return spec.compile()


@functools.cache
def _base(iterations: int) -> _mjx.Model:
    """The options model of :func:`cube_mjx_model` (parameters are written in): one per iteration
    count, so every run with the same options passes the same pytree structure and hits the same program.
    On this process's first device (MJX's default, ``jax.devices()[0]``, belongs to process 0 when
    several processes run)."""
    return _mjx.mjx.put_model(cube_mjmodel(iterations=iterations), device=jax.local_devices()[0])


def _check_base(base) -> None:
    """Refuse a ``base`` that is not the cube scene (static fields always; array leaves when concrete)."""
    if not isinstance(base, _mjx.Model):
        raise ValueError(f"base must be an mjx.Model, got {type(base).__name__}")
    ok = (
        base.nbody == 2
        and base.ngeom == 2
        and base.nv == 6
        and base.njnt == 1
        and np.array_equal(base.geom_type, [_mjx.GeomType.PLANE, _mjx.GeomType.BOX])
        and np.array_equal(base.geom_bodyid, [0, CUBE_BODY])
        and np.array_equal(base.jnt_type, [_mjx.JointType.FREE])
    )
    if ok and not _is_traced(base):  # the formulas also assume a centred, unrotated box and no armature
        ok = (
            not np.any(np.asarray(base.dof_armature))
            and not np.any(np.asarray(base.geom_pos))
            and not np.any(np.asarray(base.body_pos))
            and np.array_equal(np.asarray(base.geom_quat)[CUBE_GEOM], [1.0, 0.0, 0.0, 0.0])
        )
    if not ok:
        raise ValueError(
            "base is not the cube scene: pass mjx.put_model(cube_mjmodel(...)) (any parameters, any iterations)"
        )


def cube_mjx_model(params: CubeParams, base: _mjx.Model) -> _mjx.Model:
    """``base`` with the cube's parameters written in, every derived field traced.

    Equal, leaf by leaf, to ``mjx.put_model(cube_mjmodel(params))`` built with ``base``'s
    solver options (except MJX's static ``_impl.geom_rbound_hfield``, kept; see the module
    docstring). Works under ``jax.grad``, ``jit`` and ``vmap`` over ``params``.

    Arguments:
        params: :class:`CubeParams` (physical values; traced or not).
        base: ``mjx.put_model(cube_mjmodel(...))`` at any parameters; it supplies the options
            (``iterations``, timestep, ...) and everything the parameters do not change.

    Returns:
        The ``mjx.Model``.

    Raises:
        ValueError: ``base`` is not the cube scene, or (for concrete ``params``) a parameter is
            outside its interval.
    """
    _check_base(base)
    if not _is_traced(params):
        check_params(params)
    dtype = base.geom_size.dtype
    side = jnp.asarray(params.side_length, dtype)
    mass = jnp.asarray(params.mass, dtype)
    solref = jnp.asarray(params.solref, dtype)
    solimp = jnp.asarray(params.solimp, dtype)
    friction = jnp.asarray(params.friction, dtype)

    h = side / 2
    inertia = mass * side**2 / 6  # uniform-density cube, about every axis through its centre
    rbound = jnp.sqrt(3.0) * h
    ones3 = jnp.ones(3, dtype)
    dof_m0 = jnp.concatenate([mass * ones3, inertia * ones3])
    meansize = jnp.maximum(rbound, 1e-5)
    extent = jnp.maximum(jnp.maximum(2 * jnp.maximum(rbound, _PLANE_BOUND), 1e-5), 2 * meansize)
    body_mass = base.body_mass.at[CUBE_BODY].set(mass)
    both = np.array([FLOOR_GEOM, CUBE_GEOM])

    return base.tree_replace(
        {
            "geom_size": base.geom_size.at[CUBE_GEOM].set(h * ones3),
            "geom_rbound": base.geom_rbound.at[CUBE_GEOM].set(rbound),
            "geom_aabb": base.geom_aabb.at[CUBE_GEOM].set(jnp.concatenate([jnp.zeros(3, dtype), h * ones3])),
            "body_mass": body_mass,
            "body_subtreemass": jnp.stack([body_mass[0] + mass, mass]),
            "body_inertia": base.body_inertia.at[CUBE_BODY].set(inertia * ones3),
            "body_invweight0": base.body_invweight0.at[CUBE_BODY].set(jnp.stack([1 / mass, 1 / inertia])),
            "dof_invweight0": 1 / dof_m0,
            "dof_M0": dof_m0,
            "stat.meanmass": mass,
            "stat.meaninertia": jnp.mean(dof_m0),
            "stat.meansize": meansize,
            "stat.extent": extent,
            "geom_solref": base.geom_solref.at[both].set(solref),
            "geom_solimp": base.geom_solimp.at[both].set(solimp),
            "geom_friction": base.geom_friction.at[both, 0].set(friction),
        }
    )


def _softplus(z):
    return jnp.logaddexp(z, 0.0)


def _inverse_softplus(x):
    return x + jnp.log(-jnp.expm1(-x))  # log(exp(x) - 1) without overflow


def _into(z, lo, hi):
    return lo + (hi - lo) * jax.nn.sigmoid(z)


def _out_of(x, lo, hi):
    u = (x - lo) / (hi - lo)
    return jnp.log(u) - jnp.log1p(-u)


def from_unconstrained(z: CubeParams) -> CubeParams:
    """Physical parameters from unconstrained coordinates (any real values; see the module docstring).

    Arguments:
        z: :class:`CubeParams` of unconstrained coordinates.

    Returns:
        :class:`CubeParams` of ``jax`` arrays, every value inside its open interval (up to
        rounding: coordinates beyond about ±37 land on the interval's end in float64).
    """
    solref = _softplus(jnp.asarray(z.solref))
    s = jnp.asarray(z.solimp)
    solimp = jnp.stack(
        [_into(s[0], MINIMP, MAXIMP), _into(s[1], MINIMP, MAXIMP), _softplus(s[2]), _into(s[3], MINIMP, MAXIMP),
         1.0 + _softplus(s[4])]
    )  # fmt: skip
    return CubeParams(
        side_length=_softplus(jnp.asarray(z.side_length)),
        mass=_softplus(jnp.asarray(z.mass)),
        solref=solref,
        solimp=solimp,
        friction=_softplus(jnp.asarray(z.friction)),
    )


def to_unconstrained(params: CubeParams) -> CubeParams:
    """Unconstrained coordinates of ``params``: the inverse of :func:`from_unconstrained`.

    Arguments:
        params: :class:`CubeParams`, each value strictly inside its open interval.

    Returns:
        :class:`CubeParams` of unconstrained coordinates (``jax`` arrays).

    Raises:
        ValueError: for concrete ``params``, a value outside its open interval (on a boundary
            included), naming the field.
    """
    if not _is_traced(params):
        check_params(params, strict=True)
    solref = _inverse_softplus(jnp.asarray(params.solref))
    s = jnp.asarray(params.solimp)
    solimp = jnp.stack(
        [_out_of(s[0], MINIMP, MAXIMP), _out_of(s[1], MINIMP, MAXIMP), _inverse_softplus(s[2]),
         _out_of(s[3], MINIMP, MAXIMP), _inverse_softplus(s[4] - 1.0)]
    )  # fmt: skip
    return CubeParams(
        side_length=_inverse_softplus(jnp.asarray(params.side_length)),
        mass=_inverse_softplus(jnp.asarray(params.mass)),
        solref=solref,
        solimp=solimp,
        friction=_inverse_softplus(jnp.asarray(params.friction)),
    )
