r"""The ContactNets cube as one instance of the generic path: its parameters, model and coordinates.

The cube is the shipped MJCF ``diffmjx.scenes.path("contactnets_cube")`` (a free-joint box on a plane,
one control period of :data:`~experiments.contactnets.DT`, MuJoCo's Newton solver with 2 iterations,
condim-3 pyramidal contacts) and its identified quantities are generic
:class:`~diffmjx.sysid.Parameter` s (:func:`cube_parameters`): the side through the box's
``geom_size`` (one value for the three half sizes, the body's inertia tied to it), the mass, and
solref, solimp and the sliding friction, each one value shared by the floor and the cube (MuJoCo
mixes the two geoms' values at run time). :class:`CubeParams` holds their physical values in the
ContactNets study's units (the side length, not the half size); :func:`cube_values` converts.

- :func:`cube_mjmodel` compiles the MJCF with given values (MuJoCo's compiler: the independent
  reference of the tests);
- :func:`cube_mjx_model` writes them into an ``mjx.Model`` through
  :meth:`~diffmjx.sysid.ParameterSet.model`, every derived field traced
  (:func:`diffmjx.set_const`), so ``jax.grad`` / ``jit`` / ``vmap`` see it;
- :func:`to_unconstrained` / :func:`from_unconstrained` are the study's optimiser coordinates:
  softplus for the positive quantities (side length, mass, friction, solref's time constant and
  damping ratio, solimp's width), ``1 + softplus`` for solimp's power, and a sigmoid scaled into
  ``(MINIMP, MAXIMP) = (1e-4, 0.9999)`` for solimp's ``d0``, ``dwidth`` and midpoint (the committed
  fits were made in them; the generic :class:`~diffmjx.sysid.Transform` s would step the half size).

The mass cannot be identified from the cube's motion: for a lone free body MuJoCo's contact is
mass-invariant (the regulariser scales with ``body_invweight0`` just as ``J M^-1 J^T`` does), so
its gradient is zero to rounding.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import _mjx, scenes
from diffmjx.physics.impedance import MAXIMP, MINIMP
from diffmjx.sysid.parameter import Parameter, ParameterSet

__all__ = [
    "CUBE_BODY",
    "CUBE_GEOM",
    "CUBE_SCENE",
    "FLOOR_GEOM",
    "PARAM_SHAPES",
    "CubeParams",
    "check_params",
    "cube_mjmodel",
    "cube_mjx_model",
    "cube_parameters",
    "cube_values",
    "from_unconstrained",
    "options_model",
    "to_unconstrained",
]

CUBE_SCENE = "contactnets_cube"
"""The cube's MJCF among the shipped scenes (:func:`diffmjx.scenes.path`)."""

CUBE_BODY = 1
"""Body id of the cube (0 is the world)."""
CUBE_GEOM = 1
"""Geom id of the cube's box."""
FLOOR_GEOM = 0
"""Geom id of the plane."""


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
PARAM_SHAPES = {"side_length": (), "mass": (), "solref": (2,), "solimp": (5,), "friction": ()}
"""The shape of each :class:`CubeParams` field."""


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
    for name, shape in PARAM_SHAPES.items():
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


def cube_parameters() -> list[Parameter]:
    """The cube's identified quantities as generic parameters, in :class:`CubeParams` order."""
    both = ("floor", "cube")
    return [
        Parameter("geom_size", "cube", uniform=True),  # the half size; the body's inertia follows
        Parameter("body_mass", "cube"),
        Parameter("geom_solref", both),
        Parameter("geom_solimp", both),
        Parameter("geom_friction", both, index=0),
    ]


def cube_values(params: CubeParams):
    """Flat physical values of :func:`cube_parameters` (the half size, not the side), traced or not."""
    return jnp.concatenate(
        [
            jnp.atleast_1d(jnp.asarray(x, jnp.result_type(float)))
            for x in (jnp.asarray(params.side_length) / 2, params.mass, params.solref, params.solimp, params.friction)
        ]
    )


def cube_mjmodel(params: CubeParams | None = None, *, iterations: int = 2) -> mujoco.MjModel:
    """The cube scene compiled by MuJoCo with ``params`` written into its MJCF.

    Both geoms carry ``solref``, ``solimp`` and the friction (the torsional and rolling
    coefficients stay MuJoCo's defaults; condim 3 never reads them); the box carries the mass, so
    MuJoCo's compiler gives the body a uniform-density inertia.

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
    spec = mujoco.MjSpec.from_file(str(scenes.path(CUBE_SCENE)))
    spec.option.iterations = int(iterations)
    for g in spec.geoms:
        g.solref = np.asarray(p.solref, np.float64).tolist()
        g.solimp = np.asarray(p.solimp, np.float64).tolist()
        g.friction[0] = float(np.asarray(p.friction))
    cube = spec.geom("cube")
    cube.size = [float(np.asarray(p.side_length)) / 2] * 3
    cube.mass = float(np.asarray(p.mass))
    return spec.compile()


@functools.cache
def _parameter_set() -> ParameterSet:
    """The cube's parameters resolved once (any iterations: only the structure is read)."""
    return ParameterSet(cube_mjmodel(), cube_parameters())


@functools.cache
def options_model(iterations: int) -> _mjx.Model:
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
    if ok and not _is_traced(base):  # the mass-property tie also needs a centred, unrotated box
        ok = (
            not np.any(np.asarray(base.geom_pos))
            and not np.any(np.asarray(base.body_pos))
            and np.array_equal(np.asarray(base.geom_quat)[CUBE_GEOM], [1.0, 0.0, 0.0, 0.0])
        )
    if not ok:
        raise ValueError(
            "base is not the cube scene: pass mjx.put_model(cube_mjmodel(...)) (any parameters, any iterations)"
        )


def cube_mjx_model(params: CubeParams, base: _mjx.Model) -> _mjx.Model:
    """``base`` with the cube's parameters written in, every derived field traced: the generic
    :meth:`~diffmjx.sysid.ParameterSet.model` of :func:`cube_parameters`.

    Equal, leaf by leaf and to rounding, to ``mjx.put_model(cube_mjmodel(params))`` built with
    ``base``'s solver options (except MJX's static ``_impl.geom_rbound_hfield``, kept). Works under
    ``jax.grad``, ``jit`` and ``vmap`` over ``params``.

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
    return _parameter_set().model(cube_values(params).astype(base.geom_size.dtype), base)


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
        [
            _into(s[0], MINIMP, MAXIMP),
            _into(s[1], MINIMP, MAXIMP),
            _softplus(s[2]),
            _into(s[3], MINIMP, MAXIMP),
            1.0 + _softplus(s[4]),
        ]
    )
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
        [
            _out_of(s[0], MINIMP, MAXIMP),
            _out_of(s[1], MINIMP, MAXIMP),
            _inverse_softplus(s[2]),
            _out_of(s[3], MINIMP, MAXIMP),
            _inverse_softplus(s[4] - 1.0),
        ]
    )
    return CubeParams(
        side_length=_inverse_softplus(jnp.asarray(params.side_length)),
        mass=_inverse_softplus(jnp.asarray(params.mass)),
        solref=solref,
        solimp=solimp,
        friction=_inverse_softplus(jnp.asarray(params.friction)),
    )
