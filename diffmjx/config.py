"""Typed, validated configuration for DiffMJX.

Every knob lives in a frozen dataclass section (``integrator``, ``solver``,
``collision``, ``cfd``, ``muscle``) gathered in :class:`Config`. Values are checked on
construction: a bad value raises :class:`ValueError` naming the dotted field
(``integrator.solver``) and what is allowed.

Configs come from YAML presets (:meth:`Config.load` by name or path, :meth:`Config.from_yaml`)
and dotted command line overrides such as ``integrator.rtol=1e-6`` (:meth:`Config.override`);
:func:`add_cli_arguments` and :func:`config_from_args` give every experiment
the same ``--preset`` / ``--set`` flags.

Preset files, dicts and overrides are read by one mechanism, shared with the planner's
(:class:`diffmjx.mpc.PlannerConfig`) and system identification's (:class:`diffmjx.sysid.SysidConfig`,
:class:`diffmjx.sysid.FitConfig`) configs: :func:`preset_path` (a preset by name or path),
:func:`read_yaml` and :func:`from_yaml_file`, :func:`sections_from_dict` and :func:`section_from_dict` (refusing unknown
sections and fields), :func:`apply_overrides` and the :class:`Preset` mixin (``from_yaml``, ``load``,
``to_yaml``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

__all__ = [
    "ADJOINTS",
    "BOX_BOX_RULES",
    "BUDGET_POLICIES",
    "CONTINUOUS_ADJOINTS",
    "DEFAULT_PRESET",
    "FIXED_STEP_SOLVERS",
    "GRADIENTS",
    "PAPER_PRESET",
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

SOLVERS = (
    "tsit5", "dopri5", "dopri8", "bosh3", "heun", "midpoint", "ralston", "euler",
    "mjx_euler", "mjx_rk4", "mjx_implicitfast",
)  # fmt: skip
FIXED_STEP_SOLVERS = ("mjx_euler", "mjx_rk4", "mjx_implicitfast")  # MJX's own integrators
ADJOINTS = ("checkpoint", "backsolve", "interpolated", "sensitivity", "forward")
CONTINUOUS_ADJOINTS = ("backsolve", "interpolated", "sensitivity")  # optimise-then-discretise: the continuous equations
STEP_CONTROLS = ("pid", "constant")
BUDGET_POLICIES = ("flag", "raise")
GRADIENTS = ("auto", "unroll", "implicit")
PLANE_BOX_RULES = ("deepest", "mjx")
PLANE_CYLINDER_RULES = ("deepest", "mjx")
BOX_BOX_RULES = ("clipped", "mjx")

PRESETS = Path(__file__).parent / "presets"
DEFAULT_PRESET = PRESETS / "default.yaml"
"""The defaults written out as YAML, one comment per field."""
PAPER_PRESET = PRESETS / "paper.yaml"
"""The paper's simulation setting (:meth:`Config.paper`): the one definition of it."""
PRESET_KINDS = ("config", "planner", "sysid", "fit")
"""The kinds of shipped preset (:func:`preset_names`): a ``config`` preset (:class:`Config`) is
``diffmjx/presets/<name>.yaml``, any other kind's ``diffmjx/presets/<kind>_<name>.yaml``: ``planner``
(:class:`diffmjx.mpc.PlannerConfig`), ``sysid`` (:class:`diffmjx.sysid.SysidConfig`), ``fit``
(:class:`diffmjx.sysid.FitConfig`)."""

AUTO_KINK_FACTOR = 10.0
"""``integrator.kink_step=auto`` is ``min(AUTO_KINK_FACTOR * rtol, AUTO_KINK_MAX)`` seconds."""
AUTO_KINK_MAX = 1e-7


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


def knob(
    default: Any,
    *,
    choices: Sequence[str] = (),
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    check: Any = None,
) -> Any:
    """A dataclass field whose constraints are read back by ``Section.__post_init__``.

    Used by every config section of the library (and by the planner's and system identification's),
    so all of them validate and report bad values the same way.

    ``check(key, value) -> value``, if given, replaces the generic type check for a field whose
    type it does not cover (a tuple of names, a mapping): it returns the normalised value or raises
    ``ValueError`` naming ``key`` and what is allowed.
    """
    return dataclasses.field(
        default=default, metadata={"choices": choices, "gt": gt, "ge": ge, "lt": lt, "check": check}
    )


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """Split ``X | None`` into ``(X, True)``; any other hint gives ``(hint, False)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(typing.get_args(hint)):
            return rest[0], True
    return hint, False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_type(key: str, value: Any, hint: Any) -> Any:
    """Return ``value`` normalised to ``hint`` (ints to floats, lists to tuples) or raise."""
    base, optional = _unwrap_optional(hint)
    if value is None and optional:
        return None
    if typing.get_origin(base) is tuple:
        n = len(typing.get_args(base))
        if isinstance(value, (list, tuple)) and len(value) == n and all(map(_is_number, value)):
            return tuple(float(v) for v in value)
        expected = f"a sequence of {n} numbers"
    elif base is float and _is_number(value):
        return float(value)
    elif base in (bool, int, str) and type(value) is base:
        return value
    else:
        expected = base.__name__
    expected += " or None" if optional else ""
    raise ValueError(f"{key}={value!r} ({type(value).__name__}) is invalid; expected {expected}")


def coerce_text(hint: Any, value: Any) -> Any:
    """Turn YAML strings such as ``'1e-6'`` (PyYAML reads them as str) into numbers."""
    base, _ = _unwrap_optional(hint)
    if isinstance(value, str) and base in (int, float):
        try:
            return base(value)
        except ValueError:
            return value  # left for _check_type to report
    return value


def parse_value(key: str, text: str) -> Any:
    """The value of one ``key=text`` override, parsed as YAML (``true``, ``null``, ``[0, 0.01]``).

    Raises:
        ValueError: naming ``key`` when ``text`` is not valid YAML.
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{key}: cannot parse value {text!r}: {e}") from e


class Section:
    """Base of the config sections: checks types and the :func:`knob` constraints.

    A section is a frozen dataclass whose fields are :func:`knob` fields and whose class variable
    ``_section`` names it in messages (``integrator.rtol``). The planner's and system
    identification's configs are sections too (:class:`diffmjx.mpc.PlannerConfig`,
    :mod:`diffmjx.sysid`), built and overridden by the same functions.
    """

    _section: ClassVar[str]

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            key = f"{self._section}.{f.name}"
            check = f.metadata.get("check")
            raw = getattr(self, f.name)
            value = check(key, raw) if check is not None else _check_type(key, raw, hints[f.name])
            object.__setattr__(self, f.name, value)
            choices, gt, ge = f.metadata["choices"], f.metadata["gt"], f.metadata["ge"]
            if choices and value not in choices:
                raise ValueError(f"{key}={value!r} is not allowed; choose one of: {', '.join(choices)}")
            if value is not None and gt is not None and not value > gt:
                raise ValueError(f"{key}={value!r} is out of range; it must be > {gt}")
            if value is not None and ge is not None and not value >= ge:
                raise ValueError(f"{key}={value!r} is out of range; it must be >= {ge}")
            lt = f.metadata["lt"]
            if value is not None and lt is not None and not value < lt:
                raise ValueError(f"{key}={value!r} is out of range; it must be < {lt}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The section's fields, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: Any):
        """Build from ``{field: value}``, or ``{<section>: {field: value}}`` (a preset file with the
        section named); None or missing fields keep their defaults.

        Raises:
            ValueError: for an unknown section or field (listing the allowed ones) or a bad value
                (naming it); see :func:`section_from_dict`.
        """
        if isinstance(d, Mapping) and cls._section in d:
            d = sections_from_dict(d, {cls._section: lambda entries: entries})[cls._section]
        return section_from_dict(cls, cls._section, d)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of built-in types (tuples as lists), ready for YAML or JSON; read back by :meth:`from_dict`."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def override(self, *assignments: str):
        """A new section with ``field=value`` (or ``<section>.field=value``) assignments applied in order.

        The text form for the edges (YAML presets, ``--set`` on a command line); inside the library use
        ``dataclasses.replace``.

        Raises:
            ValueError: for an unknown field (listing the allowed ones) or a bad value (naming it).
        """
        expected = f"{self._section}.KEY=VALUE with KEY one of: {', '.join(self.field_names())}"
        prefixes = {"": self._section, self._section: self._section}
        return apply_overrides({self._section: self}, assignments, expected, prefixes)[self._section]


def _plain(value: Any) -> Any:
    """``value`` with tuples turned into lists, for YAML."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def apply_overrides(
    sections: Mapping[str, Section],
    assignments: Sequence[str],
    expected: str,
    prefixes: Mapping[str, str] | None = None,
) -> dict[str, Section]:
    """Apply ``prefix.field=value`` assignments in order to the sections they name: the one parser of
    the ``--set`` overrides of every config (:meth:`Section.override`, :meth:`Config.override`, the
    planner's and system identification's).

    Each value is parsed as YAML (:func:`parse_value`: ``true``, ``null``, ``[0, 0.01]``), number-like
    text such as ``1e-6`` is converted for numeric fields (:func:`coerce_text`), and the section
    checks it (``dataclasses.replace``).

    Arguments:
        sections: the sections, by name.
        assignments: ``"prefix.field=value"`` strings.
        expected: what a valid assignment looks like, for the message of a bad one.
        prefixes: which section each key prefix (the key up to its last dot; ``""`` for a bare field)
            names, as ``{prefix: name in sections}``; None: each section by its own name.

    Returns:
        ``sections`` with the assigned ones replaced.

    Raises:
        ValueError: ``bad override ...: expected <expected>`` for a malformed assignment, an unknown
            prefix or field; or a bad value (naming the field and what is allowed).
    """
    prefixes = {name: name for name in sections} if prefixes is None else prefixes
    out = dict(sections)
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        prefix, _, field = key.strip().rpartition(".")
        name = prefixes.get(prefix)
        if not sep or name is None or field not in out[name].field_names():
            raise ValueError(f"bad override {assignment!r}: expected {expected}")
        section = out[name]
        value = parse_value(f"{section._section}.{field}", text)
        value = coerce_text(typing.get_type_hints(type(section))[field], value)
        out[name] = dataclasses.replace(section, **{field: value})
    return out


def _preset_file(name: str, kind: str) -> Path:
    return PRESETS / (f"{name}.yaml" if kind == "config" else f"{kind}_{name}.yaml")


def preset_names(kind: str) -> tuple[str, ...]:
    """The names of the shipped presets of ``kind`` (see :data:`PRESET_KINDS`), sorted."""
    if kind == "config":  # unprefixed: every file that is not another kind's
        others = tuple(f"{k}_" for k in PRESET_KINDS if k != "config")
        stems = (p.stem for p in PRESETS.glob("*.yaml") if not p.stem.startswith(others))
    else:
        stems = (p.stem.removeprefix(f"{kind}_") for p in PRESETS.glob(f"{kind}_*.yaml"))
    return tuple(sorted(stems))


def preset_path(preset: str | Path, kind: str) -> Path:
    """A preset given as a path (with a suffix: ``my.yaml``), or by name: ``diffmjx/presets/<kind>_<name>.yaml``
    (``<name>.yaml`` for kind ``config``; :data:`PRESET_KINDS`).

    A name that is no shipped preset but an existing file is read as a path.

    Raises:
        ValueError: for a name with no such preset, listing the ``kind``'s presets.
    """
    path = Path(preset)
    if path.suffix:
        return path
    names = preset_names(kind)
    if str(preset) in names:
        return _preset_file(str(preset), kind)
    if path.is_file():
        return path
    raise ValueError(f"unknown {kind} preset {str(preset)!r}; choose one of: {', '.join(names)} or a path")


def read_yaml(path: str | Path) -> Any:
    """The content of a YAML file; an empty file gives ``{}`` (a preset of the defaults)."""
    data = yaml.safe_load(Path(path).read_text())
    return {} if data is None else data


_T = TypeVar("_T")


def from_yaml_file(path: str | Path, build: Callable[[Any], _T]) -> _T:
    """``build`` applied to the content of the YAML file ``path`` (:func:`read_yaml`).

    Raises:
        ValueError: what ``build`` raises, its message prefixed with the file.
    """
    data = read_yaml(path)
    try:
        return build(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def section_from_dict(cls: type[Section], name: str, entries: Any, base: Section | None = None) -> Section:
    """Build section ``cls`` (called ``name`` in messages) from a mapping of fields; None: defaults.

    Numbers written as text (``'1e-6'``, as PyYAML reads them) are converted for numeric fields.

    Arguments:
        cls: the section's class.
        name: its name in messages.
        entries: ``{field: value}``, or None.
        base: the section whose fields the entries replace (the others are kept); None: the defaults.

    Raises:
        ValueError: for entries that are not a mapping, an unknown field (listing the section's
            fields) or a bad value (naming the field and what is allowed).
    """
    entries = {} if entries is None else entries
    if not isinstance(entries, Mapping):
        raise ValueError(f"config section {name!r} must be a mapping of fields, got {type(entries).__name__}")
    hints = typing.get_type_hints(cls)
    allowed = cls.field_names()
    unknown = [k for k in entries if k not in allowed]
    if unknown:
        raise ValueError(f"unknown config field {name}.{unknown[0]}; {name} has: {', '.join(allowed)}")
    values = {k: coerce_text(hints[k], v) for k, v in entries.items()}
    return cls(**values) if base is None else dataclasses.replace(base, **values)


def sections_from_dict(d: Any, builders: Mapping[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """``{name: builders[name](entries)}`` for each ``name: entries`` of ``d``, a mapping of sections.

    Raises:
        ValueError: for ``d`` not a mapping or a section not in ``builders`` (listing them).
    """
    if not isinstance(d, Mapping):
        raise ValueError(f"config must be a mapping of sections, got {type(d).__name__}")
    unknown = [k for k in d if k not in builders]
    if unknown:
        raise ValueError(f"unknown config section {unknown[0]!r}; choose one of: {', '.join(builders)}")
    return {name: builders[name](entries) for name, entries in d.items()}


_P = TypeVar("_P", bound="Preset")


class Preset:
    """Presets by name or path, and YAML in and out: the one mechanism of every config with presets.

    A class declares its ``_preset_kind`` (one of :data:`PRESET_KINDS`) and defines ``from_dict``
    (refusing unknown sections and fields), ``to_dict`` and ``override``; this mixin gives it
    :meth:`from_yaml`, :meth:`load` and :meth:`to_yaml`. Used by :class:`Config`,
    :class:`diffmjx.mpc.PlannerConfig`, :class:`diffmjx.sysid.SysidConfig` and
    :class:`diffmjx.sysid.FitConfig`.
    """

    _preset_kind: ClassVar[str]

    @classmethod
    def from_dict(cls: type[_P], d: Any) -> _P:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def override(self: _P, *assignments: str) -> _P:
        raise NotImplementedError

    @classmethod
    def from_yaml(cls: type[_P], path: str | Path) -> _P:
        """Read a YAML preset; an empty file gives the defaults.

        Raises:
            ValueError: for an unknown section or field (naming it and listing the allowed ones) or a
                bad value (naming the field), the message prefixed with the file.
        """
        return from_yaml_file(path, cls.from_dict)

    @classmethod
    def load(cls: type[_P], preset: str | Path | None = None, overrides: Sequence[str] = ()) -> _P:
        """Defaults, or the YAML ``preset``, with the dotted ``overrides`` applied in order.

        Arguments:
            preset: a path (``my.yaml``), a shipped preset's name (``diffmjx/presets/<kind>_<name>.yaml``,
                :func:`preset_path`), or None for the defaults.
            overrides: ``"section.field=value"`` strings (see ``override``).

        Returns:
            The validated config.

        Raises:
            ValueError: for an unknown preset name (listing the shipped ones), an unknown section or
                field, or a bad value.
        """
        cfg = cls() if preset is None else cls.from_yaml(preset_path(preset, cls._preset_kind))
        return cfg.override(*overrides)

    def to_yaml(self, path: str | Path | None = None) -> str:
        """Dump as YAML, also writing it to ``path`` if given; read back by :meth:`from_yaml`."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text


@dataclasses.dataclass(frozen=True)
class IntegratorConfig(Section):
    """Time integration of the dynamics and how it is differentiated.

    Attributes:
        solver: Diffrax tableau, or an ``mjx_*`` fixed-step MJX integrator.
        adjoint: gradient mode: recursive ``checkpoint``, continuous ``backsolve``, continuous
            ``interpolated`` (the state read from the forward solution, the adjoint stepped to
            the kinks; :class:`diffmjx.integrate.InterpolatedAdjoint`), ``sensitivity`` (the
            period's Jacobian carried forward on the forward solve's steps, for small models;
            :class:`diffmjx.integrate.SensitivityAdjoint`), or ``forward`` mode.
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
            O(step x stiffness), so without it they scatter from shot to shot. ``auto`` (the
            default): ``min(10 rtol_f, 1e-7)`` seconds, ``rtol_f`` the forward solve's
            (:meth:`tolerances`: 1e-8 by default), with the ``checkpoint`` and ``forward``
            adjoints, off with ``backsolve`` (whose adjoint solve controls its own error across
            kinks); :meth:`kink_step_used` gives the value.
        dto_tighten: with ``pid`` step control and the ``checkpoint`` or ``forward`` adjoint, the
            forward solve runs at ``rtol / dto_tighten`` and ``atol / dto_tighten``; 1 turns it off.
            Discretise-then-optimise differentiates the steps taken, and the step controller bounds
            the error of the state, not of its sensitivities, which carry about ten times the
            error of the backsolve adjoint's (whose adjoint solve has its own error control) at
            equal ``rtol``; :meth:`tolerances` gives the values used.
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

    @property
    def fixed_step(self) -> bool:
        """Whether ``solver`` is one of MJX's fixed-step integrators (``mjx_*``) rather than a Diffrax
        tableau: the one place the solver's name is read (:func:`diffmjx.method.integration_method`)."""
        return self.solver in FIXED_STEP_SOLVERS

    def tolerances(self, *, backsolve: bool | None = None) -> tuple[float, float]:
        """``(rtol, atol)`` of the forward solve: ``rtol`` and ``atol`` divided by ``dto_tighten``
        with the ``checkpoint`` and ``forward`` adjoints (discretise-then-optimise), as set with
        ``backsolve``.

        Arguments:
            backsolve: whether the adjoint is a continuous one (``backsolve``, ``interpolated``,
                ``sensitivity``); None: as ``adjoint`` says.
        """
        if backsolve is None:
            backsolve = self.adjoint in CONTINUOUS_ADJOINTS
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
        if self.kink_step != "auto":
            return self.kink_step
        if backsolve is None:
            backsolve = self.adjoint in CONTINUOUS_ADJOINTS
        if rtol is None:
            if self.step_control != "pid":
                return None
            rtol = self.tolerances(backsolve=backsolve)[0]
        if backsolve:
            return None
        return min(AUTO_KINK_FACTOR * float(rtol), AUTO_KINK_MAX)


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
        box_box: box-box contacts without smoothing: ``clipped``, as MuJoCo's C engine builds
            them, the reference face from the box whose axis separates least and every distinct
            penetrating point of the clipped polygon (up to four) at its true depth; ``mjx``,
            MJX's rule, which references the lower box's face whichever box owns the axis (a
            tilted corner on a larger box comes out up to 1 / cos(tilt) too deep) and repeats
            points to fill four slots (one corner is four contacts, and the count changes when
            the next corner touches: the force jumps). With ``smooth`` on, box-box uses the
            smoothed blend of MJX's rule whatever this says.
    """

    _section = "collision"

    smooth: bool = knob(False)
    sharpness: float = knob(10000.0, gt=0)
    plane_box: str = knob("deepest", choices=PLANE_BOX_RULES)
    plane_cylinder: str = knob("deepest", choices=PLANE_CYLINDER_RULES)
    box_box: str = knob("clipped", choices=BOX_BOX_RULES)


@dataclasses.dataclass(frozen=True)
class CFDConfig(Section):
    """Contacts from distance (CFD): forces from the signed distance of non-touching geoms.

    Attributes:
        enabled: add CFD to the contact model.
        solimp: impedance, ordered like MuJoCo's solimp:
            (d at r=w_c, d at r=0, w_c, midpoint, power).
        sharpness: softplus sharpness in 1/m.
        in_forward: also apply CFD in the forward pass (otherwise gradients only).
    """

    _section = "cfd"

    enabled: bool = knob(False)
    solimp: tuple[float, float, float, float, float] = knob((0.0, 0.01, 0.1, 1.0, 2.0))
    sharpness: float = knob(1000.0, gt=0)
    in_forward: bool = knob(False)

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
                raise ValueError(
                    f"{name} must be of type {cls.__name__}, got {getattr(self, name)!r}"
                )

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

    def override(self, *assignments: str) -> Config:
        """Return a new config with ``section.field=value`` assignments applied in order.

        Values are parsed as YAML (``true``, ``null``, ``[0, 0.01, 0.1, 1, 2]``), with
        number-like strings such as ``1e-6`` converted for numeric fields (:func:`apply_overrides`).

        Arguments:
            *assignments: ``"section.field=value"`` strings, e.g. ``"integrator.rtol=1e-8"``.

        Returns:
            A new, validated :class:`Config`.

        Raises:
            ValueError: for an unknown key (listing the allowed ones) or a bad value (naming the
                field and what is allowed).
        """
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
