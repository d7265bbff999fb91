"""Knobs of a system-identification run: :class:`SysidConfig` (``data``, ``train`` and ``sim`` sections).

:class:`TrainConfig` is a :class:`diffmjx.config.Section` like the simulation's, built, checked
and overridden by the same public machinery (:func:`~diffmjx.config.knob`,
:func:`~diffmjx.config.section_from_dict`, :func:`~diffmjx.config.apply_overrides`), and
:class:`SysidConfig` reads and writes presets as :class:`diffmjx.Config` does
(:class:`~diffmjx.config.Preset`). Text appears only at the edges: YAML presets
(``experiments/configs/sysid_<name>.yaml``, :meth:`SysidConfig.load`) and ``section.field=value``
overrides (:meth:`SysidConfig.override`); inside the library the sections are typed values changed
with ``dataclasses.replace``.
"""

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from diffmjx.config import Config, Preset, Section, apply_overrides, knob, section_from_dict, sections_from_dict
from diffmjx.sysid.problem import BATCHINGS
from experiments.contactnets.data import DataConfig
from experiments.contactnets.model import PARAM_SHAPES, CubeParams, check_params

__all__ = ["FREE_PARAMS", "SysidConfig", "TrainConfig", "check_free", "sim_overrides"]

FREE_PARAMS = CubeParams._fields
"""Parameters that can be identified (the fields of :class:`~experiments.contactnets.CubeParams`)."""


def check_free(key: str, value: Any) -> tuple[str, ...]:
    """``train.free``: a non-empty set of parameter names, returned in :data:`FREE_PARAMS` order."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"{key}={value!r} is invalid; expected a non-empty list of names among: {', '.join(FREE_PARAMS)}"
        )
    for v in value:
        if v not in FREE_PARAMS:
            raise ValueError(f"{key}: {v!r} is not allowed; choose among: {', '.join(FREE_PARAMS)}")
    if len(set(value)) != len(value):
        raise ValueError(f"{key}={list(value)!r} names a parameter twice")
    return tuple(n for n in FREE_PARAMS if n in value)


def _check_inits(key: str, value: Any) -> tuple[tuple[str, Any], ...]:
    """``train.inits``: ``{field: value}`` overriding :class:`CubeParams` defaults, stored as sorted pairs."""
    if value is None:
        value = {}
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        items = [tuple(p) for p in value]
    else:
        raise ValueError(
            f"{key}={value!r} is invalid; expected a mapping of CubeParams fields to values, e.g. {{side_length: 0.06}}"
        )
    out: dict[str, Any] = {}
    for name, v in items:
        if name not in FREE_PARAMS:
            raise ValueError(f"{key}: {name!r} is not a CubeParams field; choose among: {', '.join(FREE_PARAMS)}")
        if name in out:
            raise ValueError(f"{key} sets {name!r} twice")
        try:
            a = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is None or isinstance(v, bool) or a.shape != PARAM_SHAPES[name]:
            expected = "a number" if PARAM_SHAPES[name] == () else f"a list of {PARAM_SHAPES[name][0]} numbers"
            raise ValueError(f"{key}.{name}={v!r} is invalid; expected {expected}")
        out[name] = float(a) if a.shape == () else tuple(float(x) for x in a)
    try:
        check_params(CubeParams()._replace(**{k: np.asarray(v) for k, v in out.items()}), strict=True)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
    return tuple((n, out[n]) for n in FREE_PARAMS if n in out)


@dataclasses.dataclass(frozen=True)
class TrainConfig(Section):
    """Knobs of the training loop (defaults: the paper's App. E.2).

    Attributes:
        learning_rate: Adam's step size, on the unconstrained coordinates.
        batch_size: segments per minibatch; a multiple of the number of visible devices.
        horizon: N, states predicted per segment; must equal ``data.horizon`` (which cuts them).
        epochs: passes over the training segments.
        steps_per_epoch: minibatches per epoch; None: every full minibatch of the epoch's permutation.
        free: parameters to identify, among ``side_length``, ``mass``, ``solref``, ``solimp`` and
            ``friction``; the others stay at their initial values.
        inits: initial values overriding :class:`~experiments.contactnets.CubeParams`'s defaults, e.g.
            ``{side_length: 0.06}`` (each inside its open interval).
        seed: seed of the minibatch order (the split's is ``data.seed``).
        checkpoint_dir: where the state is saved after each step and resumed from; None or empty: nowhere.
        iterations: Newton iterations of the model's constraint solver; None: 2 for DiffMJX's
            adaptive integrators (they re-solve at every stage), 4 for MJX's fixed-step ones.
        velocity_weight: weight of the squared velocity error in the loss (0: position and
            orientation only, as the paper).
        batching: how a minibatch's segments are simulated (:func:`~diffmjx.sysid.map_segments`):
            ``map`` (one after another, each with its own step count), ``vmap`` (in lock-step), or
            ``auto``: ``map`` for an adaptive integrator on a CPU, else ``vmap``. Fitting and
            Levenberg–Marquardt use it.
    """

    _section: ClassVar[str] = "train"

    learning_rate: float = knob(1e-3, gt=0)
    batch_size: int = knob(64, ge=1)
    horizon: int = knob(4, ge=1)
    epochs: int = knob(1, ge=1)
    steps_per_epoch: int | None = knob(None, ge=1)
    free: tuple[str, ...] = knob(("side_length",), check=check_free)
    inits: tuple[tuple[str, Any], ...] = knob((), check=_check_inits)
    seed: int = knob(0, ge=0)
    checkpoint_dir: str | None = knob(None)
    iterations: int | None = knob(None, ge=1)
    velocity_weight: float = knob(0.0, ge=0)
    batching: str = knob("auto", choices=BATCHINGS)

    def initial_params(self) -> CubeParams:
        """:class:`~experiments.contactnets.CubeParams` defaults with :attr:`inits` applied (NumPy float64)."""
        p = CubeParams()
        return CubeParams(**{n: np.asarray(dict(self.inits).get(n, getattr(p, n)), np.float64) for n in FREE_PARAMS})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of built-in types (``free`` a list, ``inits`` a mapping), ready for YAML or JSON."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["free"] = list(self.free)
        d["inits"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.inits}
        return d


CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PRESETS = tuple(sorted(p.stem.removeprefix("sysid_") for p in CONFIGS.glob("sysid_*.yaml")))
"""The study's presets by name (``experiments/configs/sysid_<name>.yaml``)."""

_SIM_SECTIONS = tuple(f.name for f in dataclasses.fields(Config))
_OWN_SECTIONS: dict[str, type[Section]] = {"data": DataConfig, "train": TrainConfig}


def _sim_from(entries: Any) -> Config:
    """The ``sim`` section: ``{section: {field: value}}``, or a :class:`diffmjx.Config` preset's name (``paper``) or path."""
    if isinstance(entries, str):
        return Config.load(entries)
    return Config.from_dict({} if entries is None else entries)


@dataclasses.dataclass(frozen=True)
class SysidConfig(Preset):
    """Everything a system-identification run reads: ``data``, ``train`` and ``sim`` sections.

    ``sim`` is the simulation's :class:`diffmjx.Config` (integrator, solver, collision, CFD).
    Presets (:meth:`load`): a path, or the name of the study's ``experiments/configs/sysid_<name>.yaml``:
    ``quick``, ``paper``. Overrides are ``data.<field>=v``, ``train.<field>=v`` and ``sim.<section>.<field>=v``; the
    DiffMJX sections may also be named without ``sim.`` (``integrator.solver=mjx_euler``).

    Attributes:
        data: which recordings, how they are split and cut.
        train: the training loop.
        sim: the simulation.
    """

    _preset_kind: ClassVar[str] = "sysid"

    @classmethod
    def load(cls, preset: str | Path | None = None, overrides=()) -> "SysidConfig":
        """A preset (the study's by name: :data:`PRESETS`, or a path) with ``overrides`` applied.

        Raises:
            ValueError: an unknown preset name (listing the study's), section, field or value.
        """
        if preset is not None and not Path(preset).suffix:
            if str(preset) not in PRESETS:
                raise ValueError(f"unknown sysid preset {str(preset)!r}; choose one of: {', '.join(PRESETS)}")
            preset = CONFIGS / f"sysid_{preset}.yaml"
        return super().load(preset, overrides)

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    sim: Config = dataclasses.field(default_factory=Config)

    def __post_init__(self) -> None:
        for name, cls in (*_OWN_SECTIONS.items(), ("sim", Config)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name} must be of type {cls.__name__}, got {getattr(self, name)!r}")
        if self.data.horizon != self.train.horizon:
            raise ValueError(
                f"train.horizon={self.train.horizon} differs from data.horizon={self.data.horizon}: the segments "
                "are cut at data.horizon and predicted over train.horizon; set both"
            )

    @property
    def iterations(self) -> int:
        """Newton iterations of the model: ``train.iterations``, or 4 for ``mjx_*`` solvers and 2 otherwise."""
        if self.train.iterations is not None:
            return self.train.iterations
        return 4 if self.sim.integrator.fixed_step else 2

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SysidConfig":
        """Build from ``{data: {...}, train: {...}, sim: {section: {...}}}``; missing entries keep defaults.

        ``sim`` may also name a :class:`diffmjx.Config` preset: ``sim: paper`` is the paper's
        simulation setting (:meth:`diffmjx.Config.paper`).

        Raises:
            ValueError: for an unknown section or field (naming it and listing the allowed ones) or a
                bad value (naming the field).
        """
        builders = {
            name: functools.partial(section_from_dict, section, name) for name, section in _OWN_SECTIONS.items()
        }
        return cls(**sections_from_dict(d, {**builders, "sim": _sim_from}))

    def override(self, *assignments: str) -> "SysidConfig":
        """A new config with ``section.field=value`` assignments applied in order (validated at the end).

        Values are parsed as YAML (``true``, ``null``, ``[side_length, friction]``,
        ``{side_length: 0.06}``); each is written into its section with ``dataclasses.replace``, which
        checks it (:func:`diffmjx.config.apply_overrides`).

        Arguments:
            *assignments: ``data.<field>=v``, ``train.<field>=v``, ``sim.<section>.<field>=v`` or
                ``<section>.<field>=v`` for a DiffMJX section (``integrator``, ``solver``,
                ``collision``, ``cfd``, ``muscle``).

        Returns:
            A new, validated :class:`SysidConfig`.

        Raises:
            ValueError: an unknown key (listing the allowed ones) or a bad value (naming the field).
        """
        sections: dict[str, Section] = {
            "data": self.data,
            "train": self.train,
            **{name: getattr(self.sim, name) for name in _SIM_SECTIONS},
        }
        prefixes = {name: name for name in sections} | {f"sim.{name}": name for name in _SIM_SECTIONS}
        allowed = [f"{s}.{f}" for s, c in _OWN_SECTIONS.items() for f in c.field_names()]
        expected = (
            f"KEY=VALUE with KEY one of: {', '.join(allowed)}, "
            f"or sim.<section>.<field> for the simulation ({', '.join(_SIM_SECTIONS)})"
        )
        sections = apply_overrides(sections, assignments, expected, prefixes)
        sim = dataclasses.replace(self.sim, **{name: sections[name] for name in _SIM_SECTIONS})
        return SysidConfig(data=sections["data"], train=sections["train"], sim=sim)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of built-in types, ready for YAML or JSON; read back by :meth:`from_dict`."""
        return {
            "data": dataclasses.asdict(self.data),
            "train": self.train.to_dict(),
            "sim": self.sim.to_dict(),
        }


def sim_overrides(cfg: Config) -> dict[str, Any]:
    """The fields of ``cfg`` that differ from ``Config()``, as ``{"section.field": value}``."""
    got, default = cfg.to_dict(), Config().to_dict()
    return {f"{s}.{k}": v for s, fields in got.items() for k, v in fields.items() if v != default[s][k]}
