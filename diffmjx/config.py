"""Typed, validated configuration for DiffMJX.

Every knob lives in a frozen dataclass section (``integrator``, ``solver``,
``collision``, ``cfd``, ``muscle``) gathered in :class:`Config`. Values are checked on
construction: a bad value raises :class:`ValueError` naming the dotted field
(``integrator.solver``) and what is allowed.

Configs come from YAML presets (:meth:`Config.load` by name or path, :meth:`Config.from_yaml`)
and dotted command line overrides such as ``integrator.rtol=1e-6`` (:meth:`Config.override`);
:func:`add_cli_arguments` and :func:`config_from_args` give every experiment
the same ``--preset`` / ``--set`` flags.

Preset files, dicts and overrides are read by one mechanism (:mod:`diffmjx.knobs`, re-exported here), shared with the planner's
(:class:`diffmjx.mpc.PlannerConfig`) and system identification's (:class:`diffmjx.sysid.FitConfig`)
configs: :func:`preset_path` (a preset by name or path),
:func:`read_yaml` and :func:`from_yaml_file`, :func:`sections_from_dict` and :func:`section_from_dict` (refusing unknown
sections and fields), :func:`apply_overrides` and the :class:`Preset` mixin (``from_yaml``, ``load``,
``to_yaml``).

Why one file of this length: one class per section, whose docstring is the reference of every
knob; the machinery they share is :mod:`diffmjx.knobs`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from diffmjx import registry
from diffmjx.knobs import (
    DEFAULT_PRESET,
    PAPER_PRESET,
    PRESET_KINDS,
    PRESETS,
    Preset,
    Section,
    apply_overrides,
    coerce_text,
    from_yaml_file,
    knob,
    parse_value,
    preset_names,
    preset_path,
    read_yaml,
    section_from_dict,
    sections_from_dict,
)

__all__ = [
    "ADJOINTS",
    "BOX_BOX_RULES",
    "BUDGET_POLICIES",
    "CAPSULE_BOX_RULES",
    "CAPSULE_CAPSULE_RULES",
    "DEFAULT_PRESET",
    "GRADIENTS",
    "PAPER_PRESET",
    "PRESETS",
    "PRESET_KINDS",
    "SOLVERS",
    "STEP_CONTROLS",
    "CFDConfig",
    "CollisionConfig",
    "Config",
    "IntegratorConfig",
    "MuscleConfig",
    "Preset",
    "Section",
    "SolverConfig",
    "add_cli_arguments",
    "apply_overrides",
    "coerce_text",
    "config_from_args",
    "from_yaml_file",
    "knob",
    "parse_value",
    "preset_names",
    "preset_path",
    "read_yaml",
    "section_from_dict",
    "sections_from_dict",
]

SOLVERS = registry.SOLVERS  # integrator.solver's choices, each with its properties (diffmjx.registry)
ADJOINTS = registry.GRADIENT_MODES  # integrator.adjoint's choices (gradient modes)
STEP_CONTROLS = ("pid", "constant")
BUDGET_POLICIES = ("flag", "raise")
GRADIENTS = ("auto", "unroll", "implicit")
PLANE_BOX_RULES = registry.PLANE_BOX_RULES  # collision.*'s choices: the pairs' collision functions
PLANE_CYLINDER_RULES = registry.PLANE_CYLINDER_RULES
BOX_BOX_RULES = registry.BOX_BOX_RULES
CAPSULE_CAPSULE_RULES = registry.CAPSULE_CAPSULE_RULES
CAPSULE_BOX_RULES = registry.CAPSULE_BOX_RULES

AUTO_KINK_FACTOR = 10.0
"""``integrator.kink_step=auto`` is ``min(AUTO_KINK_FACTOR * rtol, AUTO_KINK_MAX)`` seconds."""
AUTO_KINK_MAX = 1e-7
AUTO_ADJOINT_KINK_FACTOR = 3.0
"""With ``backsolve``, ``integrator.kink_step=auto`` in its backward solve is
``min(AUTO_ADJOINT_KINK_FACTOR * rtol, AUTO_ADJOINT_KINK_MAX)`` seconds (a step over a kink is
taken there whatever its error: finer than the forward's, docs/integration.md)."""
AUTO_ADJOINT_KINK_MAX = 3e-8


def _check_kink_step(key: str, value: Any) -> Any:
    """``auto``, None (off) or a step in seconds > 0 (numbers written as text are converted)."""
    if value is None or value == "auto":
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise ValueError(f"{key}={value!r} is invalid; expected auto, a step in seconds > 0, or null (off)")


_SOLIMP_MEANINGS = ("d at r=w_c", "d at r=0", "w_c", "midpoint", "power")


@dataclasses.dataclass(frozen=True)
class IntegratorConfig(Section):
    """Time integration of the dynamics and how it is differentiated.

    Attributes:
        solver: Diffrax tableau, or an ``mjx_*`` fixed-step MJX integrator.
        adjoint: gradient mode: recursive ``checkpoint``, continuous ``backsolve``, continuous
            ``interpolated`` (the state read from the forward solution, the adjoint stepped to
            the kinks; :class:`diffmjx.integration.integrate.InterpolatedAdjoint`), ``sensitivity`` (the
            period's Jacobian carried forward on the forward solve's steps, for small models;
            :class:`diffmjx.integration.integrate.SensitivityAdjoint`), or ``forward`` mode.
        step_control: ``pid`` adaptive step size or ``constant`` steps.
        rtol, atol: relative and absolute error tolerances of the PID controller.
        pcoeff, icoeff, dcoeff: PID controller coefficients.
        dt0: first trial step in seconds; None means the control period.
        dtmin: smallest step the controller may take; None means no floor.
        dtmax: largest step the controller may take; None means the control period. Caps how far
            one step can jump past a short event (a collision, CFD's backward-only forces).
        substeps: steps per control period for ``constant`` control and ``mjx_*`` solvers.
        max_steps: step budget per control period.
        checkpoints: snapshots for recursive checkpointing; None lets Diffrax choose.
        remat: recompute each control period's forward pass during the backward pass instead of
            storing its internals, so that gradient memory grows with the horizon only by the
            state (qpos, qvel, act, time) per period; costs about one extra forward pass.
        backsolve_rtol, backsolve_atol: tolerances of the ``backsolve`` or ``interpolated``
            adjoint's backward solve; None: as forward.
        on_budget_exhausted: when ``max_steps`` runs out, ``flag`` the result or ``raise``.
        kink_step: with ``pid`` step control and the ``checkpoint`` or ``forward`` adjoint, a step
            over which the constraint state changes (a contact lifting off, a friction-pyramid
            edge, stick-slip: a kink of the contact force) is rejected and shrunk until it is
            at most this long (s), so no longer step straddles a kink; None turns this off.
            Discretise-then-optimise gradients of a step that straddles a kink are off by
            O(step x stiffness), so without it they scatter from shot to shot. With ``backsolve``
            it acts in the backward solve instead, where the adjoint's rate jumps at each kink:
            the controller bisects to the kink and takes one step of at most this long over it
            (the error control alone shrank such steps to 1e-8 s and below, a third of the
            backward pass's steps). ``auto`` (the default): ``min(10 rtol_f, 1e-7)`` seconds,
            ``rtol_f`` the forward solve's (:meth:`tolerances`: 1e-8 by default), with the
            ``checkpoint`` and ``forward`` adjoints; ``min(3 rtol_b, 3e-8)`` in ``backsolve``'s
            backward solve, ``rtol_b`` its own (``backsolve_rtol``, else ``rtol``); off in the
            forward solve of the continuous adjoints (:meth:`kink_step_used`,
            :meth:`backward_kink_step`).
        dto_tighten: with ``pid`` step control and the ``checkpoint`` or ``forward`` adjoint, the
            forward solve runs at ``rtol / dto_tighten`` and ``atol / dto_tighten``; 1 turns it off.
            Discretise-then-optimise differentiates the steps taken, and the step controller bounds
            the error of the state, not of its sensitivities, which carry about ten times the
            error of the backsolve adjoint's (whose adjoint solve has its own error control) at
            equal ``rtol``; :meth:`tolerances` gives the values used.
        saltation: opt-in. With the ``checkpoint``, ``forward`` or ``backsolve`` adjoint and a
            Diffrax Runge–Kutta solver, derivatives gain the saltation term of every contact (but
            box-box ones) or hinge or slide limit whose distance crosses zero within a step: the
            force jump at a touchdown (``solimp[0] > 0``, MuJoCo's default 0.9) times the change of
            the touchdown time, which the derivative of the discrete solve otherwise misses at any
            tolerance (:mod:`diffmjx.integration.saltation`). Forward values unchanged. Measured
            right on free bodies thrown onto a floor, on hinge stops and on a finger pushing a box
            (``experiments.saltation``); a fit of that finger with it stalls at the default
            ``saltation_resolution`` and reaches its loss floor at 1e-3 (``experiments.sysid_touchdown``),
            and the suites' defaults were chosen without it: off by default.
        saltation_resolution: the distance (m; rad for a hinge limit) below which the saltation
            term takes a crossing as unresolved and bounds its factor (a crossing slower than
            ``sqrt(|r_ddot| resolution)``: :func:`diffmjx.integration.saltation.coefficients`);
            None: the forward solve's ``atol``, the exact term wherever the solve resolves the
            crossing. Larger values smooth the derivative of crossings that graze (a pushed body
            rocking on its corners), whose exact derivatives are far larger than a fit's steps
            see (``experiments.sysid_touchdown``), at a bias of the term on slow touchdowns.
    """

    _section = "integrator"

    solver: str = knob("tsit5", choices=SOLVERS)
    adjoint: str = knob("backsolve", choices=ADJOINTS)
    step_control: str = knob("pid", choices=STEP_CONTROLS)
    rtol: float = knob(1e-7, gt=0)
    atol: float = knob(1e-7, gt=0)
    pcoeff: float = knob(0.2, ge=0)
    icoeff: float = knob(0.4, ge=0)
    dcoeff: float = knob(0.0, ge=0)
    dt0: float | None = knob(None, gt=0)
    dtmin: float | None = knob(None, gt=0)
    dtmax: float | None = knob(None, gt=0)
    substeps: int = knob(1, ge=1)
    max_steps: int = knob(4096, ge=1)
    checkpoints: int | None = knob(None, ge=1)
    remat: bool = knob(False)
    backsolve_rtol: float | None = knob(None, gt=0)
    backsolve_atol: float | None = knob(None, gt=0)
    on_budget_exhausted: str = knob("flag", choices=BUDGET_POLICIES)
    kink_step: float | str | None = knob("auto", check=_check_kink_step)
    dto_tighten: float = knob(10.0, ge=1)
    saltation: bool = knob(False)
    saltation_resolution: float | None = knob(None, gt=0)

    @property
    def fixed_step(self) -> bool:
        """Whether ``solver`` is one of MJX's fixed-step integrators (``mjx_*``) rather than a Diffrax
        tableau (its :class:`~diffmjx.registry.SolverEntry`'s ``fixed_step``)."""
        return SOLVERS[self.solver].fixed_step

    @property
    def carries_jumps(self) -> bool:
        """Whether derivatives carry the force jump at a touchdown (``saltation`` on, with a gradient
        mode and solver that can: ``checkpoint``, ``forward`` or ``backsolve`` with a Diffrax
        Runge–Kutta solver)."""
        solver, mode = SOLVERS[self.solver], ADJOINTS[self.adjoint]
        if not self.saltation or not solver.runge_kutta:
            return False
        return mode.saltation in ("step", "adjoint")

    def tolerances(self, *, backsolve: bool | None = None) -> tuple[float, float]:
        """``(rtol, atol)`` of the forward solve: ``rtol`` and ``atol`` divided by ``dto_tighten``
        with the ``checkpoint`` and ``forward`` adjoints (discretise-then-optimise), as set with
        ``backsolve``.

        Arguments:
            backsolve: whether the adjoint is a continuous one (``backsolve``, ``interpolated``,
                ``sensitivity``); None: as ``adjoint`` says.
        """
        if backsolve is None:
            backsolve = ADJOINTS[self.adjoint].continuous
        if backsolve:
            return self.rtol, self.atol
        return self.rtol / self.dto_tighten, self.atol / self.dto_tighten

    def kink_step_used(self, *, backsolve: bool | None = None, rtol: float | None = None) -> float | None:
        """The kink step in seconds that applies, or None (off): ``kink_step`` with ``auto``
        resolved for the adjoint and tolerance (see the class docstring).

        Arguments:
            backsolve: whether the adjoint is a continuous one (``backsolve``, ``interpolated``,
                ``sensitivity``); None: as ``adjoint`` says (pass it for a Diffrax adjoint object given in place of
                the config's).
            rtol: the adaptive controller's ``rtol``; None: the forward solve's
                (:meth:`tolerances`), if ``step_control`` is ``pid`` (pass it for a Diffrax
                controller object).
        """
        backsolve = ADJOINTS[self.adjoint].continuous if backsolve is None else backsolve
        if self.kink_step == "auto" and backsolve:
            return None  # a continuous adjoint's forward solve has none
        return self._kink_step(rtol, lambda: self.tolerances(backsolve=backsolve)[0], AUTO_KINK_FACTOR, AUTO_KINK_MAX)

    def backward_kink_step(self, rtol: float | None = None) -> float | None:
        """The kink step in seconds of the ``backsolve`` adjoint's backward solve, or None (off):
        ``kink_step``, with ``auto`` resolved as ``min(3 rtol_b, 3e-8)``, ``rtol_b`` the backward
        solve's (``backsolve_rtol``, else ``rtol``; pass it for a Diffrax controller object)."""

        def backward_rtol():
            return self.backsolve_rtol if self.backsolve_rtol is not None else self.tolerances(backsolve=True)[0]

        return self._kink_step(rtol, backward_rtol, AUTO_ADJOINT_KINK_FACTOR, AUTO_ADJOINT_KINK_MAX)

    def _kink_step(self, rtol, config_rtol, factor: float, cap: float) -> float | None:
        """``kink_step``, with ``auto`` resolved as ``min(factor * rtol, cap)``: ``rtol`` the
        controller's, else ``config_rtol()`` under ``pid`` step control (none without it)."""
        if self.kink_step != "auto":
            return self.kink_step
        if rtol is None:
            if self.step_control != "pid":
                return None
            rtol = config_rtol()
        return min(factor * float(rtol), cap)


@dataclasses.dataclass(frozen=True)
class SolverConfig(Section):
    """The constraint solver.

    Attributes:
        gradient: ``unroll`` differentiates through the solver iterations, ``implicit`` uses the
            implicit function theorem at the solution (pyramidal cones only), ``auto`` (the
            default) is ``implicit`` for pyramidal cones and ``unroll`` for elliptic ones. At a
            converged solve (the default budget) the two agree; ``implicit``'s backward pass does
            not replay the iterations, so it is faster (docs/config.md, "Why these defaults").
        impedance_floor: least contact impedance. 0 (the default): a geom's ``solimp[0] = 0``
            means what it says, the contact force starts from zero at zero distance, so touchdown
            is continuous and gradients through it converge. MuJoCo's ``mjMINIMP`` (1e-4) gives
            MJX's forward values exactly, with a force jump at touchdown that no gradient sees.
        min_iterations: least number of solver iterations, whatever the model's ``iterations``
            (the solve still stops early once converged). 16 (the default) lets Newton converge
            on the contact sets of the fidelity suite; 0: the model's own budget. A solve that stops
            unconverged makes the accelerations jump with the line search's trip count, and
            gradients through such jumps were 3-13 % off at any integration tolerance.
        max_tolerance: the solve's stopping tolerance is the smaller of the model's
            ``opt.tolerance`` and this (default 1e-10); 1 or more: the model's own.
    """

    _section = "solver"

    gradient: str = knob("auto", choices=GRADIENTS)
    impedance_floor: float = knob(0.0, ge=0, lt=0.9999)
    min_iterations: int = knob(16, ge=0)
    max_tolerance: float = knob(1e-10, gt=0)


@dataclasses.dataclass(frozen=True)
class CollisionConfig(Section):
    """Collision detection.

    Attributes:
        smooth: use smoothed (differentiable) collision geometry.
        sharpness: smoothing sharpness in 1/m; larger is closer to the exact geometry.
        plane_box: which box vertices touching a plane are contacts: ``deepest``, the four
            deepest at their true distances, so every penetrating vertex counts (as in MuJoCo's
            C engine); ``mjx``, MJX's rule, only vertices within 1 mm of the deepest one, which
            drops penetrating corners in impacts deeper than 1 mm and makes the contact force
            jump (gradients through such impacts are then wrong at any tolerance).
        plane_cylinder: a cylinder's second contact on a plane: ``deepest``, the lower of the far
            disk's lowest rim point and the near disk's 120-degree rim point, so a cylinder lying
            on its side always has both ends in contact; ``mjx``, MJX's rule, the far disk's point
            only while the axis is within 1 mm of parallel, which makes the force jump when a
            cylinder lands on its side deeper than that.
        box_box: box-box contacts: ``clipped``, as MuJoCo's C engine builds them, the
            reference face from the box whose axis separates least and every distinct
            penetrating point of the clipped polygon (up to eight) at its true depth, with
            ``smooth`` on its case switches blended over bands of ``4 / sharpness``; ``mjx``,
            MJX's rule, which references the lower box's face whichever box owns the axis (a
            tilted corner on a larger box comes out up to 1 / cos(tilt) too deep) and repeats
            points to fill four slots (one corner is four contacts, and the count changes when
            the next corner touches: the force jumps), with ``smooth`` on a blend of it.
        capsule_capsule: two capsules' contacts without ``smooth``: ``paired``, as MuJoCo's C
            engine makes them, one at the closest points and, for parallel axes, two: each end of
            one capsule against the other (a foot lying across another keeps both its ends in
            contact); ``mjx``, MJX's rule, always one contact, at the middle of a parallel overlap
            (another force and torque than the C engine's). With ``smooth`` the pair takes the
            smoothed blend of MJX's rule, one contact, either way.
        capsule_box: a capsule's contacts on a box without ``smooth``: ``spheres``, as MuJoCo's C
            engine makes them, spheres of the capsule's radius at the axis point nearest the box
            and at a second point along the box's edge or face, each against the box (a capsule
            pressed into an edge touches both faces); ``blended``, MJX's face-or-edge choice with
            its switch blended over 0.1 mm bands (one contact on the face of least penetration
            where the C engine has two); ``mjx``, MJX's own rule, which switches between the two at
            depth and reports distance 1 for a capsule apart (no contacts from distance). With
            ``smooth`` the pair takes ``blended`` whichever is chosen.
    """

    _section = "collision"

    smooth: bool = knob(False)
    sharpness: float = knob(10000.0, gt=0)
    plane_box: str = knob("deepest", choices=PLANE_BOX_RULES)
    plane_cylinder: str = knob("deepest", choices=PLANE_CYLINDER_RULES)
    box_box: str = knob("clipped", choices=BOX_BOX_RULES)
    capsule_capsule: str = knob("paired", choices=CAPSULE_CAPSULE_RULES)
    capsule_box: str = knob("spheres", choices=CAPSULE_BOX_RULES)


@dataclasses.dataclass(frozen=True)
class CFDConfig(Section):
    """Contacts from distance (CFD): forces from the signed distance of non-touching geoms.

    Attributes:
        enabled: add CFD to the contact model.
        solimp: impedance, ordered like MuJoCo's solimp:
            (d at r=w_c, d at r=0, w_c, midpoint, power).
        sharpness: softplus sharpness in 1/m.
        in_forward: also apply CFD in the forward pass (otherwise gradients only).
        friction: where a frictional contact's friction acts in CFD's rows. ``contact`` (default):
            only where the bodies touch (signed distance r < 0, where MJX's forward has the contact
            too); from a distance (0 <= r < w_c) the rows push along the contact normal only (each
            pyramid edge takes the normal's Jacobian, so the pyramid's normal response is kept and
            its tangential coupling dropped; elliptic cones drop the friction rows). ``distance``:
            the paper's rows, the friction pyramid at a distance too; a body sliding past a distant
            one then drags it along in the backward pass, which turned gradients the wrong way on
            pushing and striking tasks (docs/cfd.md).
    """

    _section = "cfd"

    enabled: bool = knob(False)
    solimp: tuple[float, float, float, float, float] = knob((0.0, 0.01, 0.1, 1.0, 2.0))
    sharpness: float = knob(1000.0, gt=0)
    in_forward: bool = knob(False)
    friction: str = knob("contact", choices=("contact", "distance"))

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = (
            (0, 0 <= self.solimp[0] < 1, "in [0, 1)"),
            (1, 0 <= self.solimp[1] < 1, "in [0, 1)"),
            # forces from distance taper off: a d at r=w_c above d at r=0 would pull harder from afar
            (0, self.solimp[0] <= self.solimp[1], f"<= cfd.solimp[1] (d at r=0, {self.solimp[1]!r})"),
            (2, self.solimp[2] > 0, "> 0"),
            (3, 0 < self.solimp[3] <= 1, "in (0, 1]"),
            (4, self.solimp[4] >= 1, ">= 1"),
        )
        for i, ok, allowed in checks:
            if not ok:
                raise ValueError(f"cfd.solimp[{i}] ({_SOLIMP_MEANINGS[i]}) must be {allowed}, got {self.solimp[i]!r}")


@dataclasses.dataclass(frozen=True)
class MuscleConfig(Section):
    """Smooth surrogates for MuJoCo's muscle actuators (paper App. C.1).

    MuJoCo's muscle activation follows ``act_dot = (u - act) / tau`` with the time constant
    switching from the activation one (``u > act``) to the deactivation one (``u < act``). At
    ``u = act`` that switch is a kink: ``act_dot`` is continuous but its derivative in ``u`` and
    ``act`` jumps by a factor ``tau_deact / tau_act`` (4 for MyoSuite's 0.01 / 0.04 s), so a
    gradient through a plan that holds a muscle near its activation flips between two values.
    MuJoCo's own ``tausmooth`` actuator attribute replaces the switch by a quintic blend over
    ``|u - act| < tausmooth / 2``; the muscle force curves (length, velocity, passive) are C1
    already and need no surrogate.

    Attributes:
        tausmooth: width of the time-constant blend, in units of control (>= 0), applied to every
            muscle actuator. None (the default): each actuator keeps the model's own ``tausmooth``
            (MuJoCo's default 0, the hard switch), so the forward equals the C engine's. A value
            gives the forward of the same model with ``tausmooth`` set to it in MJCF, which the C
            engine reproduces exactly (``docs/muscles.md`` measures how far that moves a hand).
    """

    _section = "muscle"

    tausmooth: float | None = knob(None, ge=0)


_SECTIONS: dict[str, type[Section]] = {
    "integrator": IntegratorConfig,
    "solver": SolverConfig,
    "collision": CollisionConfig,
    "cfd": CFDConfig,
    "muscle": MuscleConfig,
}


@dataclasses.dataclass(frozen=True)
class Config(Preset):
    """All DiffMJX knobs; frozen and hashable, so usable as a JAX static argument.

    Presets (:meth:`load`): a path, or the name of ``diffmjx/presets/<name>.yaml``: ``default``,
    ``paper`` (:meth:`paper`), ``cfd_billiard``, ``cfd_mpc``, ``cfd_sysid``.
    """

    _preset_kind: ClassVar[str] = "config"

    integrator: IntegratorConfig = dataclasses.field(default_factory=IntegratorConfig)
    solver: SolverConfig = dataclasses.field(default_factory=SolverConfig)
    collision: CollisionConfig = dataclasses.field(default_factory=CollisionConfig)
    cfd: CFDConfig = dataclasses.field(default_factory=CFDConfig)
    muscle: MuscleConfig = dataclasses.field(default_factory=MuscleConfig)

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name} must be of type {cls.__name__}, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base: Config | None = None) -> Config:
        """Build from ``{section: {field: value}}``; missing entries keep their defaults (or ``base``'s).

        Raises:
            ValueError: for an unknown section or field (naming it and listing the allowed ones) or a
                bad value (naming the field and what is allowed).
        """
        sections = sections_from_dict(
            d,
            {
                name: functools.partial(
                    section_from_dict, section, name, base=None if base is None else getattr(base, name)
                )
                for name, section in _SECTIONS.items()
            },
        )
        return cls(**sections) if base is None else dataclasses.replace(base, **sections)

    @classmethod
    def paper(cls, base: Config | None = None) -> Config:
        """The paper's setting (``diffmjx/presets/paper.yaml``): Tsit5 at rtol = atol = 1e-5 with
        checkpointed AD, MuJoCo's impedance floor, the model's own solver budget differentiated by
        unrolling and MJX's collision rules. Studies whose figures were made there, and the system
        identification presets, use this one definition.

        Arguments:
            base: the config whose fields the preset's fields replace (the others are kept);
                ``Config()`` if None.

        Raises:
            ValueError: for an unknown section or field in the preset, as :meth:`from_yaml`.
        """
        return from_yaml_file(PAPER_PRESET, lambda d: cls.from_dict(d, base))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict of built-in types (tuples as lists), ready for YAML or JSON."""
        return {name: getattr(self, name).to_dict() for name in _SECTIONS}

    def override(self, *assignments: str | Sequence[str]) -> Config:
        """Return a new config with ``section.field=value`` assignments applied together (checked once, after all of them).

        Values are parsed as YAML (``true``, ``null``, ``[0, 0.01, 0.1, 1, 2]``), with
        number-like strings such as ``1e-6`` converted for numeric fields (:func:`apply_overrides`).

        Arguments:
            *assignments: ``"section.field=value"`` strings, e.g. ``"integrator.rtol=1e-8"``, or
                lists of them (``cfg.override(args.set)`` and ``cfg.override(*args.set)`` agree).

        Returns:
            A new, validated :class:`Config`.

        Raises:
            ValueError: for an unknown key (listing the allowed ones) or a bad value (naming the
                field and what is allowed).
            TypeError: for an assignment that is not a string.
        """
        flat: list[str] = []
        for a in assignments:
            items = [a] if isinstance(a, str) else list(a) if isinstance(a, (list, tuple)) else [a]
            for item in items:
                if not isinstance(item, str):
                    raise TypeError(
                        f"Config.override: assignments are 'section.field=value' strings, got {type(item).__name__} {item!r}"
                    )
                flat.append(item)
        assignments = tuple(flat)
        allowed = [f"{name}.{field}" for name, section in _SECTIONS.items() for field in section.field_names()]
        sections = apply_overrides(
            {name: getattr(self, name) for name in _SECTIONS},
            assignments,
            f"KEY=VALUE with KEY one of: {', '.join(allowed)}",
        )
        return dataclasses.replace(self, **sections)


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--preset PRESET`` (a path or a preset's name, :meth:`Config.load`) and repeatable ``--set KEY=VALUE`` to ``parser``."""
    parser.add_argument(
        "--preset",
        metavar="PRESET",
        default=None,
        help=f"YAML config preset: a path, or one of {', '.join(preset_names('config'))} (default: the defaults)",
    )
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one config field, e.g. integrator.rtol=1e-6 (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    """The config selected by the flags of :func:`add_cli_arguments`."""
    return Config.load(args.preset, args.set)
