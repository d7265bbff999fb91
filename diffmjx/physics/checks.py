"""Up-front checks of a model, a config and Diffrax objects: the one place DiffMJX raises on bad input.

:func:`validate` runs in plain Python before anything is traced, so a bad combination fails with
a message that names the field and what is allowed, not with an error from deep inside a trace.
:func:`diffmjx.step`, :func:`diffmjx.rollout` and :func:`diffmjx.forward` call it.
"""

from __future__ import annotations

import hashlib
import sys
import warnings

import diffrax
import jax
import mujoco
import numpy as np

from diffmjx import _mjx
from diffmjx.config import Config
from diffmjx.physics import collision
from diffmjx.physics.impedance import MINIMP, MINVAL
from diffmjx.registry import SOLVERS

__all__ = ["TouchdownJumpWarning", "touchdown_jumps", "validate"]


class TouchdownJumpWarning(UserWarning):
    """A model's contacts start with a force at touchdown, a jump that no gradient sees.

    Shown once per model (per state of the warning filters). Silence it with
    ``warnings.filterwarnings("ignore", category=diffmjx.TouchdownJumpWarning)``.
    """


def _mixed_solimp0(imp, solmix, priority, g1: int, g2: int) -> float:
    """``solimp[0]`` of a contact between geoms ``g1`` and ``g2`` as MuJoCo combines them: the
    higher ``priority`` geom's, else the ``solmix``-weighted mean."""
    if priority[g1] != priority[g2]:
        return float(imp[g1] if priority[g1] > priority[g2] else imp[g2])
    s1, s2 = float(solmix[g1]), float(solmix[g2])
    if s1 < MINVAL and s2 < MINVAL:
        mix = 0.5
    elif s1 < MINVAL or s2 < MINVAL:
        mix = 0.0 if s1 < MINVAL else 1.0
    else:
        mix = s1 / (s1 + s2)
    return float(mix * imp[g1] + (1.0 - mix) * imp[g2])


# joints whose limits the saltation term covers (diffmjx.integration.saltation.event_distances)
_SLIDING = (int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE))


def touchdown_jumps(m, cfg: Config | None = None) -> dict[str, float]:
    """Geoms (and explicit contact pairs), and joint and tendon limits, whose constraint force jumps
    at touchdown: ``solimp[0]`` (a limit's ``solimplimit[0]``), the impedance at zero distance,
    above MuJoCo's ``mjMINIMP`` (1e-4).

    Such a contact switches on with a finite force the instant the distance crosses zero (MuJoCo's
    default ``solimp`` starts at 0.9). The integrator steps over the jump, and the derivative of
    the solve misses the term it adds (the jump times the change of the touchdown time), at every
    touchdown, at every tolerance, unless the config carries it: ``integrator.saltation`` (on by
    default) adds it for contacts and hinge and slide limits in the ``checkpoint``, ``forward`` and
    ``backsolve`` gradient modes (:attr:`diffmjx.config.IntegratorConfig.carries_jumps`). Without
    it gradients through a touchdown can be tens of percent off (docs/solver.md).
    ``solimp[0] = 0`` starts the force from zero.

    Only contacts the model can make count: the candidate geom pairs MJX collides (``contype`` /
    ``conaffinity`` bits, ``<pair>``, ``<exclude>``, no self or parent-child pairs, pairs of types
    with a collision function), each with its ``solimp`` as MuJoCo combines the two geoms'
    (``priority``, ``solmix``). A geom that collides with nothing is never listed. A limit is a
    contact of the same kind (a row that switches on at the range's end): every limited joint and
    tendon counts, unless the model disables limits.

    Arguments:
        m: ``mjx.Model`` or ``mujoco.MjModel``, with concrete (not traced) arrays.
        cfg: a :class:`diffmjx.Config`: list only the jumps its derivatives miss (every one where
            it does not carry jumps; else geoms in box-box pairs, tendon limits and limits of ball
            joints). None: all.

    Returns:
        ``{name: solimp[0]}`` for every geom (name, or ``geom <id>`` if unnamed) with its own
        ``solimp[0]`` above the threshold in a candidate pair whose contact has it above too, and
        every ``<pair>`` (``pair <id>``) above the threshold, and every limited joint and tendon
        (``joint <name>``, ``tendon <name>``; ``joint <id>`` if unnamed) whose ``solimplimit[0]`` is;
        empty if none.
    """
    if np.ndim(m.geom_solimp) != 2:  # a batched model: one check per model is not what this answers
        return {}
    names = m.names if isinstance(m.names, bytes) else bytes(m.names)

    def name(adr, kind, i):
        end = names.find(b"\0", int(adr))
        text = names[int(adr) : end if end >= 0 else None].decode()
        return text or f"{kind} {i}"

    imp = np.asarray(m.geom_solimp)[:, 0]
    solmix, priority = np.asarray(m.geom_solmix), np.asarray(m.geom_priority)
    pair_imp = np.asarray(m.pair_solimp).reshape(-1, 5)[:, 0]
    types, adr = np.asarray(m.geom_type), np.asarray(m.name_geomadr)
    geoms, pairs, box_box = set(), set(), set()
    for g1, g2, pair in _mjx.geom_pairs(m):
        if types[g1] == types[g2] == int(mujoco.mjtGeom.mjGEOM_BOX):
            box_box.update((int(g1), int(g2)))
        if pair >= 0:
            if pair_imp[pair] > MINIMP:
                pairs.add(int(pair))
        elif _mjx.has_collision_fn(types[g1], types[g2]) and _mixed_solimp0(imp, solmix, priority, g1, g2) > MINIMP:
            geoms.update(int(g) for g in (g1, g2) if imp[g] > MINIMP)
    out = {name(adr[g], "geom", g): float(imp[g]) for g in sorted(geoms)}
    out.update({f"pair {i}": float(pair_imp[i]) for i in sorted(pairs)})
    # the saltation term covers contacts (but box-box ones) and hinge and slide limits
    carried = {name(adr[g], "geom", g) for g in sorted(geoms - box_box)} | {f"pair {i}" for i in pairs}
    if not int(m.opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_LIMIT):
        # a limit is a constraint that switches on at its range's end, with its own impedance
        for kind, limited, solimp, adrs in (
            ("joint", m.jnt_limited, m.jnt_solimp, m.name_jntadr),
            ("tendon", m.tendon_limited, m.tendon_solimp_lim, m.name_tendonadr),
        ):
            imp0 = np.asarray(solimp).reshape(-1, 5)[:, 0]
            for i in np.flatnonzero(np.asarray(limited, bool) & (imp0 > MINIMP)):
                text = name(adrs[i], kind, i)
                key = text if text == f"{kind} {i}" else f"{kind} {text}"
                out[key] = float(imp0[i])
                if kind == "joint" and int(m.jnt_type[i]) in _SLIDING:
                    carried.add(key)
    if cfg is not None and cfg.integrator.carries_jumps:
        return {k: v for k, v in out.items() if k not in carried}
    return out


def jump_wording(jumps: dict[str, float]) -> tuple[str, str]:
    """``(what, advice)`` for a message about :func:`touchdown_jumps`' entries: ``contacts`` (or
    ``contacts and limits`` where a joint's or tendon's limit is listed) and, with limits, the
    attribute that sets a limit's impedance."""
    limited = any(k.startswith(("joint ", "tendon ")) for k in jumps)
    if not limited:
        return "contacts", ""
    return "contacts and limits", ", and solimplimit[0] = 0 for a limit"


_JUMPS: dict[tuple, dict[str, float]] = {}  # (model fingerprint, carries jumps) -> touchdown_jumps(m, cfg)
_WARNED: dict[tuple, list] = {}  # (model fingerprint, filter list's id, its filters) warned -> that list


def may_jump(m) -> bool:
    """Whether a constraint of ``m`` may switch on with a force jump (:func:`touchdown_jumps` lists
    one), True where a field it reads is traced (values unknown while tracing)."""
    if _traced(m):
        return True
    key = (_fingerprint(m), None)
    if key not in _JUMPS:
        _JUMPS[key] = touchdown_jumps(m)
    return bool(_JUMPS[key])


def _traced(m) -> bool:
    """Whether a field :func:`touchdown_jumps` reads is a tracer (its value unknown while tracing)."""
    return any(isinstance(getattr(m, f), jax.core.Tracer) for f in _JUMP_FIELDS)


def _fingerprint(m) -> str:
    """A hash of the model fields :func:`touchdown_jumps` reads."""
    h = hashlib.sha256()
    h.update(m.names if isinstance(m.names, bytes) else bytes(m.names))
    for f in _JUMP_FIELDS:
        a = np.ascontiguousarray(np.asarray(getattr(m, f)))
        h.update(f"{f}{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    h.update(str(int(m.opt.disableflags)).encode())
    return h.hexdigest()


_JUMP_FIELDS = (
    "geom_solimp",
    "geom_solmix",
    "geom_priority",
    "geom_type",
    "geom_contype",
    "geom_conaffinity",
    "geom_bodyid",
    "body_parentid",
    "body_weldid",
    "pair_solimp",
    "pair_geom1",
    "pair_geom2",
    "exclude_signature",
    "jnt_solimp",
    "jnt_limited",
    "name_jntadr",
    "tendon_solimp_lim",
    "tendon_limited",
    "name_tendonadr",
    "jnt_type",
)


def _warn_touchdown_jumps(m, cfg: Config) -> None:
    if cfg.cfd.enabled:  # contacts from distance: the backward pass uses its own rows by design
        return
    if _traced(m):  # a model built inside a trace: values unknown
        return
    carried = cfg.integrator.carries_jumps
    key = (_fingerprint(m), carried)
    if key not in _JUMPS:
        _JUMPS[key] = touchdown_jumps(m, cfg)
    jumps = _JUMPS[key]
    # once per model: tracing, vmap and each rollout call validate the same model again. New warning
    # filters (a ``catch_warnings`` block, ``pytest.warns``, ``filterwarnings``) show it again; the
    # list object is kept alive so that its id is never reused by a later block's list.
    seen = (key, id(warnings.filters), tuple(warnings.filters))
    if not jumps or seen in _WARNED:
        return
    _WARNED[seen] = warnings.filters
    warnings.warn(jump_message(jumps, cfg), TouchdownJumpWarning, stacklevel=_caller_level())


def jump_message(jumps: dict[str, float], cfg: Config, who: str = "") -> str:
    """The :class:`TouchdownJumpWarning` about ``jumps`` (:func:`touchdown_jumps` with ``cfg``) that
    ``cfg``'s derivatives miss; ``who``: a prefix naming the caller (``"identify: "``)."""
    listed = ", ".join(f"{k!r} ({v:.3g})" for k, v in list(jumps.items())[:6])
    more = f" and {len(jumps) - 6} more" if len(jumps) > 6 else ""
    what, limits = jump_wording(jumps)
    ic = cfg.integrator
    if ic.carries_jumps:
        why = "the saltation term covers contacts and hinge and slide limits, not box-box contacts, tendon or ball-joint limits"
    elif not ic.saltation:
        why = "integrator.saltation is off, the default"
    else:
        why = f"integrator.adjoint={ic.adjoint} with integrator.solver={ic.solver} cannot carry it"
    return (
        f"{who}{what} of {listed}{more} start with solimp[0] > 0 (the impedance at touch): their force jumps "
        f"at every touchdown, and these gradients miss that jump ({why}), so gradients through a touchdown can "
        "be tens of percent off at any tolerance. For gradients through contact set solimp[0] = 0 "
        f'(e.g. solimp="0 0.95 0.001 0.5 2"){limits}, or try integrator.saltation=true (opt-in: right on free '
        "bodies, hinge stops and a finger pushing a box; a fit of that finger needs integrator.saltation_resolution"
        "=1e-3 too); see diffmjx.touchdown_jumps and "
        "docs/solver.md. "
        'Shown once per model; silence it with warnings.filterwarnings("ignore", category=diffmjx.TouchdownJumpWarning)'
    )


# modules whose frames a warning skips: this package and the tracing machinery between it and the
# user's call (jit, vmap, grad, Equinox's and Diffrax's wrappers)
_INTERNAL = ("diffmjx", "cfd", "jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "functools", "contextlib")


def _caller_level() -> int:
    """``stacklevel`` of the first frame of the user's code, seen from the function calling this:
    frames of this package and of JAX's tracing machinery are skipped."""
    frame, level = sys._getframe(1), 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in _INTERNAL:
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def _check_objects(cfg: Config, solver, stepsize_controller, adjoint) -> None:
    given = {"solver": solver, "stepsize_controller": stepsize_controller, "adjoint": adjoint}
    kinds = {
        "solver": diffrax.AbstractSolver,
        "stepsize_controller": diffrax.AbstractStepSizeController,
        "adjoint": diffrax.AbstractAdjoint,
    }
    for name, obj in given.items():
        if obj is not None and not isinstance(obj, kinds[name]):
            raise ValueError(f"{name}={obj!r} is not a diffrax.{kinds[name].__name__}")
    passed = [k for k, v in given.items() if v is not None]
    if passed and cfg.integrator.fixed_step:
        raise ValueError(
            f"integrator.solver={cfg.integrator.solver!r} is one of MJX's fixed-step integrators, which take no "
            f"Diffrax {', '.join(passed)}; choose a Diffrax integrator.solver or drop the objects"
        )


def validate(m, cfg: Config, *, solver=None, stepsize_controller=None, adjoint=None) -> None:
    """Raise ``ValueError`` for a model / config / Diffrax-object combination DiffMJX cannot run.

    Arguments:
        m: ``mjx.Model`` (or ``mujoco.MjModel``).
        cfg: :class:`diffmjx.Config`; each section already validated its own fields.
        solver, stepsize_controller, adjoint: Diffrax objects that replace the config's
            ``integrator.solver``, ``integrator.step_control`` (with its tolerances) and
            ``integrator.adjoint``; None keeps the config's.

    Raises:
        ValueError: naming the field (or argument) and what is allowed.
    """
    if not isinstance(cfg, Config):
        raise ValueError(f"cfg must be a diffmjx.Config, got {type(cfg).__name__}")
    _check_objects(cfg, solver, stepsize_controller, adjoint)
    ic = cfg.integrator
    adaptive = (
        isinstance(stepsize_controller, diffrax.AbstractAdaptiveStepSizeController)
        if stepsize_controller is not None
        else ic.step_control == "pid"
    )
    embedded = isinstance(solver, diffrax.AbstractAdaptiveSolver) if solver is not None else SOLVERS[ic.solver].embedded
    if adaptive and embedded is False and not ic.fixed_step:
        what = f"solver={solver!r}" if solver is not None else f"integrator.solver={ic.solver!r}"
        raise ValueError(
            f"an adaptive step-size controller (integrator.step_control='pid') needs an embedded error estimate, "
            f"which {what} lacks; choose integrator.step_control='constant' (or pass "
            "stepsize_controller=diffrax.ConstantStepSize()) or another solver"
        )
    pyramidal = m.opt.cone == _mjx.ConeType.PYRAMIDAL
    if cfg.solver.gradient == "implicit" and not pyramidal:
        raise ValueError(
            "solver.gradient='implicit' supports cone='pyramidal' only; use solver.gradient='unroll' for elliptic cones"
        )
    if cfg.collision.smooth:
        collision.check_model(m)
    _warn_touchdown_jumps(m, cfg)
