r"""Identify the cube's parameters from toss segments: losses, the training loop, evaluation, results.

The loop follows the paper's App. E.2. A *segment* is ``horizon + 1`` consecutive recorded states
(:func:`diffmjx.sysid.segments`); from its first state :func:`diffmjx.rollout` predicts the next
``N = horizon`` states of the cube built by :func:`~diffmjx.sysid.cube_mjx_model`, vmapped over a
minibatch of segments. :func:`segment_loss` is the mean over segments and predicted states of

    |p - p_rec|^2 + ||R(q) - R(q_rec)||_F^2 + velocity_weight * |qvel - qvel_rec|^2

with positions ``p`` in metres and orientations compared as rotation matrices (squared Frobenius
norm, so no quaternion sign ambiguity). The paper uses position and rotation matrix only;
``train.velocity_weight`` (default 0) adds the free joint's velocity.

:func:`train` runs Adam (optax's ``scale_by_adam``, b1 0.5, b2 0.9, eps 1e-6, the paper's
settings, times ``-train.learning_rate``) on the unconstrained coordinates
(:func:`~diffmjx.sysid.to_unconstrained`) of the free parameters only; the others stay at their
initial values. Minibatches are drawn without replacement from a permutation seeded by
``(train.seed, epoch)``, sharded over every visible device (a 1-D mesh on the batch axis), and
the state (parameters, optimiser state, history) is checkpointed after each epoch, so a run that
is stopped resumes from its last finished epoch and ends exactly where an uninterrupted one does.

:func:`trajectory_error` rolls whole tosses out from their first state (tosses of different
lengths padded to one length and masked: one program per set of tosses, not one per length) and
reports the mean position error in mm. :func:`save_params_json` / :func:`load_params_json` write
and check the fitted-parameter file (``docs/results/contactnets_params.json``).

All knobs sit in :class:`SysidConfig`: sections ``data`` (:class:`~diffmjx.sysid.DataConfig`),
``train`` (:class:`TrainConfig`) and ``sim`` (the simulation's :class:`diffmjx.Config`), read
from YAML presets (``diffmjx/presets/sysid_<name>.yaml``) and ``section.field=value`` overrides.
"""

import dataclasses
import functools
import hashlib
import json
import math
import time
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import yaml
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from diffmjx._mjx import mjx
from diffmjx.config import Config, _coerce_text, _knob, _Section
from diffmjx.integrate import rollout
from diffmjx.sysid.data import DataConfig, LoadReport, Segments, Toss, load_tosses, segments, split
from diffmjx.sysid.model import (
    _SHAPES,
    CubeParams,
    check_params,
    cube_mjmodel,
    cube_mjx_model,
    from_unconstrained,
    to_unconstrained,
)

__all__ = [
    "ADAM",
    "FREE_PARAMS",
    "OPTION_KEYS",
    "PARAMS_JSON_KEYS",
    "FittedParams",
    "History",
    "SysidConfig",
    "TrainConfig",
    "TrainResult",
    "batch_sharding",
    "load_params_json",
    "load_split",
    "model_options",
    "pad_tosses",
    "predict_segments",
    "quat_to_mat",
    "rollout_tosses",
    "save_params_json",
    "segment_loss",
    "sim_overrides",
    "train",
    "trajectory_error",
]

FREE_PARAMS = CubeParams._fields
"""Parameters that can be identified (the fields of :class:`~diffmjx.sysid.CubeParams`)."""

ADAM = {"b1": 0.5, "b2": 0.9, "eps": 1e-6}
"""Adam's moment decay rates and epsilon (the paper's App. E.2)."""

PRESETS = Path(__file__).resolve().parents[1] / "presets"
CHECKPOINT = "checkpoint.npz"


# ---------------------------------------------------------------------------------------------
# configuration


def _check_free(key: str, value: Any) -> tuple[str, ...]:
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
        if a is None or isinstance(v, bool) or a.shape != _SHAPES[name]:
            expected = "a number" if _SHAPES[name] == () else f"a list of {_SHAPES[name][0]} numbers"
            raise ValueError(f"{key}.{name}={v!r} is invalid; expected {expected}")
        out[name] = float(a) if a.shape == () else tuple(float(x) for x in a)
    try:
        check_params(CubeParams()._replace(**{k: np.asarray(v) for k, v in out.items()}), strict=True)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
    return tuple((n, out[n]) for n in FREE_PARAMS if n in out)


@dataclasses.dataclass(frozen=True)
class TrainConfig(_Section):
    """Knobs of the training loop (defaults: the paper's App. E.2).

    Attributes:
        learning_rate: Adam's step size, on the unconstrained coordinates.
        batch_size: segments per minibatch; a multiple of the number of visible devices.
        horizon: N, states predicted per segment; must equal ``data.horizon`` (which cuts them).
        epochs: passes over the training segments.
        steps_per_epoch: minibatches per epoch; None: every full minibatch of the epoch's permutation.
        free: parameters to identify, among ``side_length``, ``mass``, ``solref``, ``solimp`` and
            ``friction``; the others stay at their initial values.
        inits: initial values overriding :class:`~diffmjx.sysid.CubeParams`'s defaults, e.g.
            ``{side_length: 0.06}`` (each inside its open interval).
        seed: seed of the minibatch order (the split's is ``data.seed``).
        checkpoint_dir: where the state is saved after each epoch and resumed from; None or empty: nowhere.
        iterations: Newton iterations of the model's constraint solver; None: 2 for DiffMJX's
            adaptive integrators (they re-solve at every stage), 4 for MJX's fixed-step ones.
        velocity_weight: weight of the squared velocity error in the loss (0: position and
            orientation only, as the paper).
    """

    _section: ClassVar[str] = "train"

    learning_rate: float = _knob(1e-3, gt=0)
    batch_size: int = _knob(64, ge=1)
    horizon: int = _knob(4, ge=1)
    epochs: int = _knob(1, ge=1)
    steps_per_epoch: int | None = _knob(None, ge=1)
    free: tuple[str, ...] = _knob(("side_length",), check=_check_free)
    inits: tuple[tuple[str, Any], ...] = _knob((), check=_check_inits)
    seed: int = _knob(0, ge=0)
    checkpoint_dir: str | None = _knob(None)
    iterations: int | None = _knob(None, ge=1)
    velocity_weight: float = _knob(0.0, ge=0)

    def initial_params(self) -> CubeParams:
        """:class:`~diffmjx.sysid.CubeParams` defaults with :attr:`inits` applied (NumPy float64)."""
        p = CubeParams()
        return CubeParams(**{n: np.asarray(dict(self.inits).get(n, getattr(p, n)), np.float64) for n in FREE_PARAMS})

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of built-in types (``free`` a list, ``inits`` a mapping), ready for YAML or JSON."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["free"] = list(self.free)
        d["inits"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.inits}
        return d


_SIM_SECTIONS = tuple(f.name for f in dataclasses.fields(Config))
_OWN_SECTIONS: dict[str, type[_Section]] = {"data": DataConfig, "train": TrainConfig}


def _section_from_dict(cls: type[_Section], name: str, entries: Any) -> _Section:
    entries = {} if entries is None else entries
    if not isinstance(entries, Mapping):
        raise ValueError(f"config section {name!r} must be a mapping of fields")  # noqa: TRY004
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = [k for k in entries if k not in allowed]
    if unknown:
        raise ValueError(f"unknown config field {name}.{unknown[0]}; {name} has: {', '.join(allowed)}")
    return cls(**{k: _coerce_text(hints[k], v) for k, v in entries.items()})


@dataclasses.dataclass(frozen=True)
class SysidConfig:
    """Everything a system-identification run reads: ``data``, ``train`` and ``sim`` sections.

    ``sim`` is the simulation's :class:`diffmjx.Config` (integrator, solver, collision, CFD).
    Overrides are ``data.<field>=v``, ``train.<field>=v`` and ``sim.<section>.<field>=v``; the
    DiffMJX sections may also be named without ``sim.`` (``integrator.solver=mjx_euler``).

    Attributes:
        data: which recordings, how they are split and cut.
        train: the training loop.
        sim: the simulation.
    """

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    sim: Config = dataclasses.field(default_factory=Config)

    def __post_init__(self) -> None:
        for name, cls in (*_OWN_SECTIONS.items(), ("sim", Config)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name} must be of type {cls.__name__}, got {getattr(self, name)!r}")  # noqa: TRY004
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
        return 4 if self.sim.integrator.solver.startswith("mjx_") else 2

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SysidConfig":
        """Build from ``{data: {...}, train: {...}, sim: {section: {...}}}``; missing entries keep defaults."""
        if not isinstance(d, Mapping):
            raise ValueError(f"config must be a mapping of sections, got {type(d).__name__}")  # noqa: TRY004
        out: dict[str, Any] = {}
        for name, entries in d.items():
            if name == "sim":
                out["sim"] = Config.from_dict({} if entries is None else entries)
            elif name in _OWN_SECTIONS:
                out[name] = _section_from_dict(_OWN_SECTIONS[name], name, entries)
            else:
                raise ValueError(f"unknown config section {name!r}; choose one of: data, train, sim")
        return cls(**out)

    @classmethod
    def from_yaml(cls, path: str | Path) -> "SysidConfig":
        """Read a YAML preset; an empty file gives the defaults."""
        data = yaml.safe_load(Path(path).read_text())
        return cls.from_dict({} if data is None else data)

    @classmethod
    def load(cls, preset: str | Path | None = None, overrides: Sequence[str] = ()) -> "SysidConfig":
        """Defaults, or a preset, with ``overrides`` applied in order.

        Arguments:
            preset: a YAML path, or a name: ``quick`` or ``paper`` for
                ``diffmjx/presets/sysid_<name>.yaml``; None for the defaults.
            overrides: ``"section.field=value"`` strings (see :meth:`override`).

        Returns:
            The validated :class:`SysidConfig`.
        """
        if preset is None:
            return cls().override(*overrides)
        path = Path(preset)
        if not path.suffix:
            path = PRESETS / f"sysid_{preset}.yaml"
            if not path.exists():
                names = sorted(p.stem.removeprefix("sysid_") for p in PRESETS.glob("sysid_*.yaml"))
                raise ValueError(f"unknown sysid preset {str(preset)!r}; choose one of: {', '.join(names)} or a path")
        return cls.from_yaml(path).override(*overrides)

    def override(self, *assignments: str) -> "SysidConfig":
        """A new config with ``section.field=value`` assignments applied in order (validated at the end).

        Values are parsed as YAML (``true``, ``null``, ``[side_length, friction]``,
        ``{side_length: 0.06}``).

        Arguments:
            *assignments: ``data.<field>=v``, ``train.<field>=v``, ``sim.<section>.<field>=v`` or
                ``<section>.<field>=v`` for a DiffMJX section (``integrator``, ``solver``,
                ``collision``, ``cfd``).

        Returns:
            A new, validated :class:`SysidConfig`.

        Raises:
            ValueError: an unknown key (listing the allowed ones) or a bad value (naming the field).
        """
        sections: dict[str, Any] = {"data": self.data, "train": self.train}
        sim = self.sim
        for assignment in assignments:
            key, sep, text = assignment.partition("=")
            key = key.strip()
            head, _, rest = key.partition(".")
            if sep and head == "sim":
                sim = sim.override(f"{rest}={text}")
                continue
            if sep and head in _SIM_SECTIONS:
                sim = sim.override(f"{key}={text}")
                continue
            cls = _OWN_SECTIONS.get(head)
            fields = [f.name for f in dataclasses.fields(cls)] if cls else []  # type: ignore[arg-type]
            if not sep or rest not in fields:
                allowed = [f"{s}.{f.name}" for s, c in _OWN_SECTIONS.items() for f in dataclasses.fields(c)]
                raise ValueError(
                    f"bad override {assignment!r}: expected KEY=VALUE with KEY one of: {', '.join(allowed)}, "
                    f"or sim.<section>.<field> for the simulation ({', '.join(_SIM_SECTIONS)})"
                )
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ValueError(f"{key}: cannot parse value {text!r}: {e}") from e
            value = _coerce_text(typing.get_type_hints(cls)[rest], value)
            sections[head] = dataclasses.replace(sections[head], **{rest: value})
        return SysidConfig(sim=sim, **sections)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of built-in types, ready for YAML or JSON; read back by :meth:`from_dict`."""
        return {
            "data": dataclasses.asdict(self.data),
            "train": self.train.to_dict(),
            "sim": self.sim.to_dict(),
        }

    def to_yaml(self, path: str | Path | None = None) -> str:
        """Dump as YAML, also writing it to ``path`` if given; read back by :meth:`from_yaml`."""
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text


def sim_overrides(cfg: Config) -> dict[str, Any]:
    """The fields of ``cfg`` that differ from ``Config()``, as ``{"section.field": value}``."""
    got, default = cfg.to_dict(), Config().to_dict()
    return {f"{s}.{k}": v for s, fields in got.items() for k, v in fields.items() if v != default[s][k]}


# ---------------------------------------------------------------------------------------------
# data


def load_split(data: DataConfig) -> tuple[dict[str, Toss], list[str], list[str], LoadReport]:
    """The recordings of ``data.path`` and their seeded split.

    Returns:
        ``(tosses, train_names, val_names, report)``.
    """
    tosses, report = load_tosses(data.path, data.quat_tol)
    train_names, val_names = split(tosses, data.val_fraction, data.seed)
    return tosses, train_names, val_names, report


# ---------------------------------------------------------------------------------------------
# losses


def quat_to_mat(q):
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) in (w, x, y, z) order (normalised first)."""
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = (q[..., i] for i in range(4))
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def predict_segments(params: CubeParams, base, qpos0, qvel0, horizon: int, cfg: Config):
    """The ``horizon`` states after each initial state, simulated with ``params``.

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``: the options.
        qpos0, qvel0: (B, 7) and (B, 6) initial states.
        horizon: N, control periods to simulate.
        cfg: the simulation's :class:`diffmjx.Config`.

    Returns:
        ``(qpos, qvel)`` of shapes (B, N, 7) and (B, N, 6).
    """
    m = cube_mjx_model(params, base)
    d0 = mjx.make_data(base)
    ctrls = jnp.zeros((horizon, 0), d0.qpos.dtype)

    def one(qpos, qvel):
        _, traj = rollout(m, d0.replace(qpos=qpos, qvel=qvel), ctrls, cfg)
        return traj.qpos, traj.qvel

    return jax.vmap(one)(jnp.asarray(qpos0), jnp.asarray(qvel0))


def _state_errors(qpos, qvel, qpos_rec, qvel_rec, velocity_weight):
    """Squared error per state (..., ): position (m) + rotation matrix (Frobenius) + weighted velocity."""
    pos = jnp.sum((qpos[..., :3] - qpos_rec[..., :3]) ** 2, axis=-1)
    rot = jnp.sum((quat_to_mat(qpos[..., 3:7]) - quat_to_mat(qpos_rec[..., 3:7])) ** 2, axis=(-2, -1))
    vel = jnp.sum((qvel - qvel_rec) ** 2, axis=-1)
    return pos + rot + velocity_weight * vel


def segment_loss(params: CubeParams, base, qpos, qvel, cfg: Config, *, velocity_weight=0.0):
    """Mean squared error of the predicted segment states (see the module docstring).

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams` (traced or not).
        base: ``mjx.put_model(cube_mjmodel(..., iterations=...))``.
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) recorded segments
            (:class:`~diffmjx.sysid.Segments` fields); state 0 starts the prediction.
        cfg: the simulation's :class:`diffmjx.Config`.
        velocity_weight: weight of the squared velocity error (may be traced).

    Returns:
        The scalar loss: mean over segments and the N predicted states.
    """
    qpos, qvel = jnp.asarray(qpos), jnp.asarray(qvel)
    pq, pv = predict_segments(params, base, qpos[:, 0], qvel[:, 0], qpos.shape[1] - 1, cfg)
    return jnp.mean(_state_errors(pq, pv, qpos[:, 1:], qvel[:, 1:], velocity_weight))


# ---------------------------------------------------------------------------------------------
# training


class History(NamedTuple):
    """One entry per optimiser step (steps numbered from 1 over all epochs)."""

    step: np.ndarray  # (S,) int
    epoch: np.ndarray  # (S,) int, from 0
    loss: np.ndarray  # (S,) minibatch loss at the parameters *before* the step
    params: CubeParams  # physical parameters *after* the step, each field stacked (S, ...)
    wall_s: np.ndarray  # (S,) wall time of the step (the first of a process includes the JIT)


class TrainResult(NamedTuple):
    """What :func:`train` returns."""

    params: CubeParams  # final physical parameters (NumPy)
    history: History
    resumed_epochs: int  # epochs read from a checkpoint (0: started fresh)


@functools.cache
def _base(iterations: int):
    """The options model (parameters are written in by ``cube_mjx_model``): one per iteration count,
    so every run with the same options passes the same pytree structure and hits the same program."""
    return mjx.put_model(cube_mjmodel(iterations=iterations))


def batch_sharding(batch_size: int, devices: Sequence | None = None) -> tuple[NamedSharding, NamedSharding]:
    """Shardings of a minibatch over ``devices`` (default: all visible): a 1-D mesh ``("batch",)``.

    Returns:
        ``(batch, replicated)``: ``NamedSharding(mesh, P("batch"))`` for arrays whose first axis is
        the batch, and ``NamedSharding(mesh, P())`` for everything else.

    Raises:
        ValueError: ``batch_size`` is not a multiple of the device count.
    """
    devices = list(jax.devices() if devices is None else devices)
    if batch_size % len(devices):
        raise ValueError(
            f"train.batch_size={batch_size} is not divisible by the {len(devices)} visible devices; minibatches are "
            f"sharded over the batch axis, so choose a multiple of {len(devices)}"
        )
    mesh = Mesh(np.asarray(devices), ("batch",))
    return NamedSharding(mesh, P("batch")), NamedSharding(mesh, P())


@functools.cache
def _step_fn(sim: Config):
    """One jitted Adam step ``(theta, opt_state, lr, fixed, vw, base, qpos, qvel) -> (theta, opt_state, loss, grad)``.

    ``theta`` holds the free parameters' unconstrained coordinates and ``fixed`` the others; the
    learning rate and velocity weight are arguments, so neither costs a compilation."""
    scale = optax.scale_by_adam(**ADAM)

    def loss(theta, fixed, vw, base, qpos, qvel):
        params = from_unconstrained(CubeParams(**fixed, **theta))
        return segment_loss(params, base, qpos, qvel, sim, velocity_weight=vw)

    def step(theta, opt_state, lr, fixed, vw, base, qpos, qvel):
        value, grad = jax.value_and_grad(loss)(theta, fixed, vw, base, qpos, qvel)
        updates, opt_state = scale.update(grad, opt_state, theta)
        theta = jax.tree.map(lambda t, u: t - lr * u, theta, updates)
        return theta, opt_state, value, grad

    return jax.jit(step)


@jax.jit
def _from_theta(theta, fixed):
    return from_unconstrained(CubeParams(**fixed, **theta))


def _physical(theta, fixed, init: CubeParams) -> CubeParams:
    """Physical parameters: the free ones from ``theta``, the fixed ones exactly as given (the model
    sees them through the unconstrained round trip, a relative 1e-16 off)."""
    now = _from_theta(theta, fixed)
    return CubeParams(
        **{n: np.asarray(getattr(init, n) if n in fixed else getattr(now, n), np.float64) for n in FREE_PARAMS}
    )


def _fingerprint(cfg: SysidConfig, qpos: np.ndarray, qvel: np.ndarray) -> str:
    """What a checkpoint must match to be resumed: the config (but epochs and checkpoint_dir) and the data."""
    d = cfg.to_dict()
    d["train"] = {k: v for k, v in d["train"].items() if k not in ("epochs", "checkpoint_dir")}
    digest = hashlib.sha256(np.ascontiguousarray(qpos).tobytes() + np.ascontiguousarray(qvel).tobytes())
    return json.dumps({"config": d, "data": digest.hexdigest()}, sort_keys=True)


def _config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [x for k in sorted(set(a) | set(b)) for x in _config_diff(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix.rstrip('.')}: {a!r} (checkpoint) vs {b!r} (now)"]


def _save_checkpoint(path: Path, fingerprint: str, epochs_done: int, theta, opt_state, hist: dict) -> None:
    arrays: dict[str, np.ndarray] = {
        "fingerprint": np.asarray(fingerprint),
        "epochs_done": np.asarray(epochs_done),
        **{f"theta/{k}": np.asarray(v) for k, v in theta.items()},
        **{f"opt/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(opt_state))},
        "history/step": np.asarray(hist["step"], np.int64),
        "history/epoch": np.asarray(hist["epoch"], np.int64),
        "history/loss": np.asarray(hist["loss"], np.float64),
        "history/wall_s": np.asarray(hist["wall_s"], np.float64),
    }
    for name in FREE_PARAMS:
        arrays[f"history/params/{name}"] = np.asarray(hist["params"][name], np.float64).reshape(
            (len(hist["step"]), *_SHAPES[name])
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)  # a run killed mid-write keeps the previous checkpoint


def _load_checkpoint(path: Path, fingerprint: str, theta, opt_state):
    with np.load(path, allow_pickle=False) as f:
        saved = str(f["fingerprint"])
        if saved != fingerprint:
            diff = _config_diff(json.loads(saved), json.loads(fingerprint))
            raise ValueError(
                f"checkpoint {path} was written for another configuration or data ({'; '.join(diff[:4])}); "
                "delete it or choose another train.checkpoint_dir"
            )
        theta = {k: jnp.asarray(f[f"theta/{k}"]) for k in theta}
        leaves, treedef = jax.tree.flatten(opt_state)
        opt_state = jax.tree.unflatten(
            treedef, [jnp.asarray(f[f"opt/{i}"], dtype=leaf.dtype) for i, leaf in enumerate(leaves)]
        )
        hist = {k: list(f[f"history/{k}"]) for k in ("step", "epoch", "loss", "wall_s")}
        hist["params"] = {n: list(f[f"history/params/{n}"]) for n in FREE_PARAMS}
        return theta, opt_state, int(f["epochs_done"]), hist


def _history(hist: dict) -> History:
    params = CubeParams(
        **{n: np.asarray(hist["params"][n], np.float64).reshape((-1, *_SHAPES[n])) for n in FREE_PARAMS}
    )
    return History(
        step=np.asarray(hist["step"], np.int64),
        epoch=np.asarray(hist["epoch"], np.int64),
        loss=np.asarray(hist["loss"], np.float64),
        params=params,
        wall_s=np.asarray(hist["wall_s"], np.float64),
    )


def train(
    cfg: SysidConfig,
    data: Segments | None = None,
    *,
    progress: bool = True,
    devices: Sequence | None = None,
    desc: str = "sysid",
) -> TrainResult:
    """Fit the free parameters to recorded segments with Adam (see the module docstring).

    Arguments:
        cfg: the :class:`SysidConfig`.
        data: training segments of ``train.horizon + 1`` states; None: the training split of
            ``data.path`` (:func:`load_split`) cut at ``data.horizon``.
        progress: show a tqdm progress bar (loss and side length in mm).
        devices: devices to shard minibatches over; default all visible.
        desc: the progress bar's label.

    Returns:
        :class:`TrainResult`: final physical parameters and the per-step :class:`History` (a
        resumed run's history includes the checkpointed steps).

    Raises:
        ValueError: too few segments for one minibatch or for ``train.steps_per_epoch``, a batch size
            that the devices do not divide, a checkpoint of another configuration or of more epochs.
        FloatingPointError: a non-finite loss or gradient (the last checkpoint is kept).
    """
    from tqdm.auto import tqdm

    tc = cfg.train
    if data is None:
        tosses, train_names, _, _ = load_split(cfg.data)
        data = segments(tosses, train_names, cfg.data.horizon)
    qpos_all = np.asarray(data.qpos, np.float64)
    qvel_all = np.asarray(data.qvel, np.float64)
    if qpos_all.ndim != 3 or qpos_all.shape[1:] != (tc.horizon + 1, 7) or qvel_all.shape[:2] != qpos_all.shape[:2]:
        raise ValueError(
            f"segments of shape {qpos_all.shape} / {qvel_all.shape}; expected (S, train.horizon + 1 = "
            f"{tc.horizon + 1}, 7) and (S, {tc.horizon + 1}, 6)"
        )
    n = qpos_all.shape[0]
    full = n // tc.batch_size
    if full == 0:
        raise ValueError(f"{n} segments hold no full minibatch of train.batch_size={tc.batch_size}")
    steps = tc.steps_per_epoch or full
    if steps > full:
        raise ValueError(
            f"train.steps_per_epoch={steps} exceeds the {full} full minibatches of {tc.batch_size} in {n} segments"
        )
    batch, replicated = batch_sharding(tc.batch_size, devices)

    init = tc.initial_params()
    z0 = to_unconstrained(init)
    theta = {k: jnp.asarray(getattr(z0, k)) for k in tc.free}
    fixed = {k: jnp.asarray(getattr(z0, k)) for k in FREE_PARAMS if k not in tc.free}
    opt_state = optax.scale_by_adam(**ADAM).init(theta)
    hist: dict[str, Any] = {"step": [], "epoch": [], "loss": [], "wall_s": [], "params": {n: [] for n in FREE_PARAMS}}
    done = 0
    ckpt = Path(tc.checkpoint_dir) / CHECKPOINT if tc.checkpoint_dir else None
    fingerprint = _fingerprint(cfg, qpos_all, qvel_all)
    if ckpt is not None and ckpt.exists():
        theta, opt_state, done, hist = _load_checkpoint(ckpt, fingerprint, theta, opt_state)
        if done > tc.epochs:
            raise ValueError(f"checkpoint {ckpt} holds {done} epochs, more than train.epochs={tc.epochs}")

    step_fn = _step_fn(cfg.sim)
    theta, opt_state, fixed = jax.device_put((theta, opt_state, fixed), replicated)
    base = jax.device_put(_base(cfg.iterations), replicated)
    lr = jax.device_put(np.float64(tc.learning_rate), replicated)
    vw = jax.device_put(np.float64(tc.velocity_weight), replicated)
    bar = tqdm(total=tc.epochs * steps, initial=done * steps, desc=desc, disable=not progress, leave=False)
    try:
        for epoch in range(done, tc.epochs):
            order = np.random.default_rng([tc.seed, epoch]).permutation(n)[: steps * tc.batch_size]
            for k, idx in enumerate(order.reshape(steps, tc.batch_size)):
                qp, qv = jax.device_put((qpos_all[idx], qvel_all[idx]), batch)
                t = time.perf_counter()
                new_theta, new_state, loss, grad = step_fn(theta, opt_state, lr, fixed, vw, base, qp, qv)
                loss = float(loss)
                wall = time.perf_counter() - t
                if not (math.isfinite(loss) and all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))):
                    raise FloatingPointError(
                        f"non-finite loss ({loss}) or gradient at epoch {epoch}, step {k + 1} of {steps}; "
                        f"parameters before the step: {_physical(theta, fixed, init)}"
                    )
                theta, opt_state = new_theta, new_state
                now = _physical(theta, fixed, init)
                hist["step"].append(epoch * steps + k + 1)
                hist["epoch"].append(epoch)
                hist["loss"].append(loss)
                hist["wall_s"].append(wall)
                for name in FREE_PARAMS:
                    hist["params"][name].append(np.asarray(getattr(now, name)))
                bar.update()
                bar.set_postfix(loss=f"{loss:.3g}", side_mm=f"{1e3 * float(now.side_length):.2f}")
            if ckpt is not None:
                _save_checkpoint(ckpt, fingerprint, epoch + 1, theta, opt_state, hist)
    finally:
        bar.close()
    return TrainResult(params=_physical(theta, fixed, init), history=_history(hist), resumed_epochs=done)


# ---------------------------------------------------------------------------------------------
# whole tosses


def pad_tosses(tosses: Mapping[str, Toss] | Sequence[Toss]):
    """Tosses of different lengths as one padded batch.

    Returns:
        ``(qpos, qvel, mask)``: (K, L, 7), (K, L, 6) and boolean (K, L) arrays, L the longest
        toss's length; padded samples repeat the toss's last state and are False in ``mask``.
    """
    items = list(tosses.values()) if isinstance(tosses, Mapping) else list(tosses)
    if not items:
        raise ValueError("no tosses given")
    length = max(t.qpos.shape[0] for t in items)
    qpos = np.zeros((len(items), length, 7))
    qvel = np.zeros((len(items), length, 6))
    mask = np.zeros((len(items), length), bool)
    for i, t in enumerate(items):
        n = t.qpos.shape[0]
        qpos[i, :n], qvel[i, :n], mask[i, :n] = t.qpos, t.qvel, True
        qpos[i, n:], qvel[i, n:] = t.qpos[-1], t.qvel[-1]
    return qpos, qvel, mask


@functools.partial(jax.jit, static_argnames=("cfg",))
def _toss_rollout(params, base, qpos0, qvel0, ctrls, cfg):
    m = cube_mjx_model(params, base)
    d0 = mjx.make_data(base)

    def one(qpos, qvel):
        _, traj = rollout(m, d0.replace(qpos=qpos, qvel=qvel), ctrls, cfg)
        return traj.qpos, traj.qvel

    return jax.vmap(one)(qpos0, qvel0)


def _sim_and_iterations(cfg: SysidConfig | Config) -> tuple[Config, int]:
    if isinstance(cfg, SysidConfig):
        return cfg.sim, cfg.iterations
    if isinstance(cfg, Config):
        return cfg, SysidConfig(sim=cfg).iterations
    raise ValueError(f"cfg must be a SysidConfig or a diffmjx.Config, got {type(cfg).__name__}")


def rollout_tosses(params: CubeParams, tosses: Mapping[str, Toss] | Sequence[Toss], cfg: SysidConfig | Config):
    """Simulate every toss from its first recorded state, all in one padded, vmapped rollout.

    Arguments:
        params: physical :class:`~diffmjx.sysid.CubeParams`.
        tosses: :class:`~diffmjx.sysid.Toss` objects (a mapping or a sequence), each of 2 or more samples.
        cfg: a :class:`SysidConfig` (its ``sim`` and model iterations) or a :class:`diffmjx.Config`
            (iterations 4 for ``mjx_*`` solvers, else 2).

    Returns:
        ``(qpos, qvel, mask)``: simulated states (K, L, 7) and (K, L, 6) at the recording's sample
        times (index 0 is the recorded first state) and the (K, L) mask of recorded samples.
    """
    sim, iterations = _sim_and_iterations(cfg)
    qpos, qvel, mask = pad_tosses(tosses)
    if qpos.shape[1] < 2:
        raise ValueError("tosses need two or more samples to be rolled out")
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
    ctrls = jnp.zeros((qpos.shape[1] - 1, 0))
    pq, pv = _toss_rollout(params, _base(iterations), qpos[:, 0], qvel[:, 0], ctrls, sim)
    pq = np.concatenate([qpos[:, :1], np.asarray(pq)], axis=1)
    pv = np.concatenate([qvel[:, :1], np.asarray(pv)], axis=1)
    return pq, pv, mask


def trajectory_error(
    params: CubeParams, tosses: Mapping[str, Toss] | Sequence[Toss], cfg: SysidConfig | Config, *,
    per_toss: bool = False,
):  # fmt: skip
    """Mean position error (mm) of whole-toss rollouts from each toss's first state.

    The error of a sample is the Euclidean distance between simulated and recorded centre
    positions; it is averaged over every recorded sample after the first, padded ones masked out
    (so a long toss weighs more than a short one).

    Arguments:
        params, tosses, cfg: as :func:`rollout_tosses`.
        per_toss: also return each toss's own mean.

    Returns:
        The mean error in mm, or ``(mean, per_toss_means)`` with ``per_toss``.
    """
    items = list(tosses.values()) if isinstance(tosses, Mapping) else list(tosses)
    pq, _, mask = rollout_tosses(params, items, cfg)
    rec, _, _ = pad_tosses(items)
    err = 1e3 * np.linalg.norm(pq[:, 1:, :3] - rec[:, 1:, :3], axis=-1)
    valid = mask[:, 1:]
    mean = float(np.sum(err * valid) / np.sum(valid))
    if per_toss:
        return mean, np.sum(err * valid, axis=1) / np.maximum(np.sum(valid, axis=1), 1)
    return mean


# ---------------------------------------------------------------------------------------------
# fitted-parameter file

PARAMS_JSON_KEYS = ("side_length_m", "mass_kg", "solref", "solimp", "friction", "options", "config_overrides")
"""Keys of the fitted-parameter file, exactly these."""
OPTION_KEYS = ("timestep", "solver", "iterations", "ls_iterations", "tolerance", "impratio", "cone")
"""Keys of its ``options``: the MuJoCo options the parameters were fitted with."""
_SOLVER_NAMES = ("pgs", "cg", "newton")  # mjtSolver order
_CONE_NAMES = ("pyramidal", "elliptic")  # mjtCone order


class FittedParams(NamedTuple):
    """A fitted-parameter file's content."""

    params: CubeParams
    options: dict
    config_overrides: dict | list


def model_options(m) -> dict[str, Any]:
    """The MuJoCo options of ``m`` (a ``mujoco.MjModel`` or an ``mjx.Model``) as the file stores them."""
    o = m.opt
    return {
        "timestep": float(o.timestep),
        "solver": _SOLVER_NAMES[int(o.solver)],
        "iterations": int(o.iterations),
        "ls_iterations": int(o.ls_iterations),
        "tolerance": float(o.tolerance),
        "impratio": float(o.impratio),
        "cone": _CONE_NAMES[int(o.cone)],
    }


def _number(key: str, v: Any, *, integer: bool = False) -> None:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if not ok or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{key}={v!r} is invalid; expected {'an integer' if integer else 'a finite number'}")


def _exact_keys(d: Mapping, keys, where: str, prefix: str, owner: str) -> None:
    """Refuse a missing or an unknown key of ``d`` (named ``prefix + key``)."""
    for key in keys:
        if key not in d:
            raise ValueError(f"{where}: missing key {prefix + key!r}")
    extra = [k for k in d if k not in keys]
    if extra:
        raise ValueError(f"{where}: unknown key {prefix + extra[0]!r}; {owner} exactly {', '.join(keys)}")


def _check_params_dict(d: Any, where: str) -> FittedParams:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where}: expected a JSON object with keys {', '.join(PARAMS_JSON_KEYS)}")  # noqa: TRY004
    _exact_keys(d, PARAMS_JSON_KEYS, where, "", "the keys are")
    for key in ("side_length_m", "mass_kg", "friction"):
        _number(key, d[key])
    for key, n in (("solref", 2), ("solimp", 5)):
        v = d[key]
        if not isinstance(v, list) or len(v) != n:
            raise ValueError(f"{key}={v!r} is invalid; expected a list of {n} numbers")
        for i, x in enumerate(v):
            _number(f"{key}[{i}]", x)
    options = d["options"]
    if not isinstance(options, Mapping):
        raise ValueError(f"options={options!r} is invalid; expected an object with keys {', '.join(OPTION_KEYS)}")  # noqa: TRY004
    _exact_keys(options, OPTION_KEYS, where, "options.", "options has")
    for key, positive in (("timestep", True), ("tolerance", False), ("impratio", True)):
        _number(f"options.{key}", options[key])
        if options[key] < 0 or (positive and options[key] == 0):
            raise ValueError(f"options.{key}={options[key]!r} must be {'> 0' if positive else '>= 0'}")
    for key in ("iterations", "ls_iterations"):
        _number(f"options.{key}", options[key], integer=True)
        if options[key] < 1:
            raise ValueError(f"options.{key}={options[key]!r} must be >= 1")
    for key, names in (("solver", _SOLVER_NAMES), ("cone", _CONE_NAMES)):
        if options[key] not in names:
            raise ValueError(f"options.{key}={options[key]!r} is not allowed; choose one of: {', '.join(names)}")
    overrides = d["config_overrides"]
    if not isinstance(overrides, (Mapping, list)):
        raise ValueError(f"config_overrides={overrides!r} is invalid; expected an object or a list")  # noqa: TRY004
    params = CubeParams(
        side_length=float(d["side_length_m"]),
        mass=float(d["mass_kg"]),
        solref=np.asarray(d["solref"], np.float64),
        solimp=np.asarray(d["solimp"], np.float64),
        friction=float(d["friction"]),
    )
    check_params(params)
    return FittedParams(params, dict(options), dict(overrides) if isinstance(overrides, Mapping) else list(overrides))


def save_params_json(path: str | Path, params: CubeParams, options: Mapping, config_overrides: Mapping | list) -> dict:
    """Write fitted parameters with the options and DiffMJX overrides they were fitted with.

    Arguments:
        path: the ``.json`` file (e.g. ``docs/results/contactnets_params.json``).
        params: physical :class:`~diffmjx.sysid.CubeParams`.
        options: :data:`OPTION_KEYS` (see :func:`model_options`).
        config_overrides: the DiffMJX config's overrides (``{"section.field": value}``, see
            :func:`sim_overrides`, or a list of ``"section.field=value"`` strings).

    Returns:
        The written dict: keys exactly :data:`PARAMS_JSON_KEYS`.

    Raises:
        ValueError: a value that :func:`load_params_json` would refuse (nothing is written).
    """
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params)
    d = {
        "side_length_m": float(p.side_length),
        "mass_kg": float(p.mass),
        "solref": [float(x) for x in p.solref],
        "solimp": [float(x) for x in p.solimp],
        "friction": float(p.friction),
        "options": dict(options),
        "config_overrides": dict(config_overrides) if isinstance(config_overrides, Mapping) else config_overrides,
    }
    _check_params_dict(d, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(d, indent=2) + "\n")
    tmp.replace(path)
    return d


def load_params_json(path: str | Path) -> FittedParams:
    """Read and check a fitted-parameter file.

    Returns:
        :class:`FittedParams` ``(params, options, config_overrides)``.

    Raises:
        ValueError: a missing or unknown key, or a bad value, naming it (``options.solver``, ``solimp[4]``, ...).
    """
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    return _check_params_dict(d, str(path))
