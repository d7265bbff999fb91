"""Knobs: frozen dataclass sections, their checks, text parsing, presets and YAML.

The machinery every DiffMJX configuration is built from, in one place: :class:`diffmjx.Config`
(``integrator``, ``solver``, ``collision``, ``cfd``, ``muscle``), the planner's
:class:`diffmjx.mpc.PlannerConfig`, and system identification's :class:`diffmjx.sysid.FitConfig`.

- :func:`knob` declares a field with its allowed values or range; :class:`Section` checks every
  field on construction and raises ``ValueError`` naming the dotted field and what is allowed.
- Text is read only here: :func:`parse_value` and :func:`coerce_text` (a value written in YAML or on a
  command line), :func:`apply_overrides` (``section.field=value`` assignments).
- Presets: :func:`preset_path` (a shipped preset by name, or a path), :func:`preset_names`,
  :func:`read_yaml`, :func:`from_yaml_file`, :func:`section_from_dict` and
  :func:`sections_from_dict` (refusing unknown sections and fields), and the :class:`Preset` mixin
  (``from_yaml``, ``load``, ``to_yaml``).

Everything here is re-exported by :mod:`diffmjx.config`.

Why one file of this length: it is the one home of the configuration machinery (fields, text
parsing, presets, YAML) that four config classes share.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

__all__ = [
    "DEFAULT_PRESET",
    "PAPER_PRESET",
    "PRESETS",
    "PRESET_KINDS",
    "Preset",
    "Section",
    "apply_overrides",
    "coerce_text",
    "from_yaml_file",
    "knob",
    "parse_value",
    "preset_names",
    "preset_path",
    "read_yaml",
    "section_from_dict",
    "sections_from_dict",
]

PRESETS = Path(__file__).parent / "presets"
DEFAULT_PRESET = PRESETS / "default.yaml"
"""The defaults written out as YAML, one comment per field."""
PAPER_PRESET = PRESETS / "paper.yaml"
"""The paper's simulation setting (:meth:`Config.paper`): the one definition of it."""
PRESET_KINDS = ("config", "planner", "fit")
"""The kinds of shipped preset (:func:`preset_names`): a ``config`` preset (:class:`Config`) is
``diffmjx/presets/<name>.yaml``, any other kind's ``diffmjx/presets/<kind>_<name>.yaml``: ``planner``
(:class:`diffmjx.mpc.PlannerConfig`), ``fit`` (:class:`diffmjx.sysid.FitConfig`)."""


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
        """A new section with ``field=value`` (or ``<section>.field=value``) assignments applied together (checked once, after all of them).

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
    """Apply ``prefix.field=value`` assignments to the sections they name: the one parser of
    the ``--set`` overrides of every config (:meth:`Section.override`, :meth:`Config.override`, the
    planner's and system identification's).

    Each value is parsed as YAML (:func:`parse_value`: ``true``, ``null``, ``[0, 0.01]``), number-like
    text such as ``1e-6`` is converted for numeric fields (:func:`coerce_text`). A field assigned
    twice takes the last value. Each section is then checked once with all its new values
    (``dataclasses.replace``), so the order of the assignments does not matter.

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
    values: dict[str, dict[str, Any]] = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        prefix, _, field = key.strip().rpartition(".")
        name = prefixes.get(prefix)
        if not sep or name is None or field not in sections[name].field_names():
            raise ValueError(f"bad override {assignment!r}: expected {expected}")
        section = sections[name]
        value = parse_value(f"{section._section}.{field}", text)
        values.setdefault(name, {})[field] = coerce_text(typing.get_type_hints(type(section))[field], value)
    # each section checked once, with all its assignments in: a rule between two fields (the
    # planner's execute <= horizon) sees the values given together, whatever their order
    return {**sections, **{name: dataclasses.replace(sections[name], **v) for name, v in values.items()}}


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
    :class:`diffmjx.mpc.PlannerConfig` and :class:`diffmjx.sysid.FitConfig` (and the
    ContactNets study's ``SysidConfig``, whose presets live with the study).
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
        """Defaults, or the YAML ``preset``, with the dotted ``overrides`` applied (checked once, after all of them).

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
