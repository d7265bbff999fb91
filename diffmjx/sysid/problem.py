r"""A system-identification problem: recordings cut into segments, predicted by a parametrised model.

:class:`Problem` holds what every fit of :func:`diffmjx.sysid.identify` evaluates: the
:class:`~diffmjx.sysid.ParameterSet`, the recordings cut into *segments* of ``horizon + 1``
samples (one every ``stride`` samples), grouped by model variant and sample period (one compiled
program each), and the simulation :class:`diffmjx.Config`. From each segment's first recorded state
the model predicts the next ``horizon`` states with :func:`diffmjx.rollout` (the recorded controls
held over each period), and :func:`state_residuals` compares them with the recorded ones:

- positions: hinge and slide coordinates and free joints' translations, ``sqrt(w_position)`` times
  the difference;
- orientations of free and ball joints: ``sqrt(w_orientation)`` times the rotation vector
  ``log(q_rec^-1 q)`` (its norm is the geodesic angle), or, with ``orientation="matrix"``, the
  difference of the rotation matrices (the ContactNets study's metric);
- velocities: ``sqrt(w_velocity)`` times the difference (MuJoCo's tangent-space velocities);
- sensors (where the recording has ``sensordata``): ``sqrt(w_sensor) * sensor_weights`` times
  ``gain * simulated(t - delay) + bias - recorded`` (:func:`sensor_model`) at the predicted samples
  (each reading that sample's control, see :mod:`.recording`).

The residual vector is divided by ``sqrt(number of predicted states)``, so its sum of squares is the
mean over segments and states of the squared residual: the segment loss of the paper's App. E.2.

Why one file of this length: segment cutting, prediction, the residual and its row layout are one
contract (what a fit evaluates), read together by every optimiser and by the intervals.
"""

import dataclasses
import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import _mjx, runtime
from diffmjx._mjx import mjx
from diffmjx.config import Config
from diffmjx.integration.integrate import rollout
from diffmjx.physics import manifold
from diffmjx.physics.constraint import SOLREF_FIELDS
from diffmjx.physics.dynamics import forward_unchecked
from diffmjx.physics.manifold import quat_log, quat_to_mat
from diffmjx.sysid.parameter import ParameterSet
from diffmjx.sysid.recording import Recording

__all__ = [
    "BATCHINGS",
    "ORIENTATIONS",
    "Group",
    "GroupSpec",
    "Problem",
    "Weights",
    "cut",
    "depends_on_first",
    "group_jacobian",
    "group_residuals",
    "map_segments",
    "predict",
    "quat_log",
    "refsafe_floor",
    "resolve_batching",
    "resolve_threads",
    "sensor_model",
    "simulated_residuals",
    "state_residuals",
    "with_refsafe",
]

ORIENTATIONS = ("geodesic", "matrix")
"""Orientation metrics of the residual."""

BATCHINGS = ("auto", "vmap", "map")
"""How :func:`map_segments` runs a batch: ``vmap``, ``map`` (one after another) or ``auto``."""


def resolve_batching(batching: str, cfg: Config) -> str:
    """``auto`` made concrete: ``map`` for an adaptive integrator on a CPU, else ``vmap``.

    Only adaptive solves differ in length between segments; fixed steps (MJX's integrators,
    ``step_control=constant``) run the same count everywhere, where ``vmap`` is the faster (a
    fixed-step Fig. 9 step of 16 segments: 8-10 ms vmapped, 19-35 ms mapped, on 2 CPU cores).
    """
    if batching not in BATCHINGS:
        raise ValueError(f"batching={batching!r} is not allowed; choose one of: {', '.join(BATCHINGS)}")
    if batching != "auto":
        return batching
    ic = cfg.integrator
    adaptive = ic.step_control == "pid" and not ic.fixed_step
    return "map" if adaptive and jax.default_backend() == "cpu" else "vmap"


def resolve_threads(threads: int | None) -> int:
    """How many threads :meth:`Problem.evaluate` runs segments on: ``threads`` itself, or for None
    every CPU core this process may use where JAX computes on the CPU, and 1 on an accelerator
    (one device runs one program at a time; more devices are :mod:`.distributed`'s).

    A compiled simulation runs on one CPU core: its kernels are small and XLA does not spread
    them. Programs called from several threads run side by side, so the segments, cut into one
    share per thread, use every core (as ``mujoco.sysid``'s rollouts do)."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads={threads!r} is not allowed; choose None (every core) or an integer >= 1")
        return threads
    if jax.default_backend() != "cpu":
        return 1
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, len(cores))


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool of ``threads`` workers for every problem (created on first use)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="diffmjx-segments")


def shares(size: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` segments dealt to ``min(threads, size)`` equal shares: ``(idx, keep)``, where
    ``idx[j]`` are share ``j``'s segment indices (every ``threads``-th from ``j``: the fast and the
    slow segments of a recording spread evenly) and ``keep`` picks, from the shares' outputs
    stacked along a second axis and flattened (``out[i, j]`` is ``idx[j, i]``), each segment once in
    order. The last shares repeat a segment where ``size`` does not divide evenly (its result dropped)."""
    k = max(1, min(threads, size))
    per = -(-size // k)
    flat = np.arange(per * k)
    keep = flat[:size]
    idx = np.where(flat < size, flat, flat % size).reshape(per, k).T
    return idx, keep


def _unshare(outs, keep):
    """The outputs of :func:`shares`' programs (pytrees, leading segment axis) in segment order:
    share ``j``'s row ``i`` is segment ``idx[j, i]``, so they are stacked on a second axis and flattened."""
    return jax.tree.map(lambda *xs: jnp.reshape(jnp.stack(xs, axis=1), (-1, *xs[0].shape[1:]))[keep], *outs)


def map_segments(fn, xs, batching: str = "auto", chunks: int = 1):
    """``fn`` applied to every row of the arrays ``xs``, stacked: ``vmap``, or one row after another.

    Segments of one minibatch differ in stiffness: an adaptive solve of a resting cube takes ten
    times the steps of one in flight. Under ``vmap`` every segment runs in lock-step until the
    slowest finishes (and each solver iteration until the slowest converges), which an
    accelerator's parallel lanes pay for gladly and a CPU does not: there ``map`` (``lax.map``, each
    segment its own step count) ran a sysid gradient of 64 segments 2.4x faster than ``vmap``
    (converged solve, ``deepest`` rule; docs/sysid.md). Results agree to the solve's tolerance, not
    bitwise (the batched kernels round differently, and the step controller follows).
    :func:`resolve_batching` chooses between the two from a simulation config.

    Arguments:
        fn: function of one row of each array in ``xs``.
        xs: tuple of arrays with a common leading (batch) axis.
        batching: ``vmap`` or ``map`` (``auto`` is resolved by :func:`resolve_batching`).
        chunks: with ``map``, the batch is cut into this many equal chunks that are vmapped (each
            run one row after another): one per device when the batch axis is sharded, so each
            device maps over its own rows. Ignored unless it divides the batch.

    Returns:
        ``fn``'s outputs with the batch axis in front.
    """
    if batching not in ("vmap", "map"):
        raise ValueError(
            f"batching={batching!r} is not allowed here; choose vmap or map (resolve_batching resolves auto)"
        )
    if batching == "vmap":
        return jax.vmap(fn)(*xs)
    b = jnp.shape(xs[0])[0]
    if chunks <= 1 or b % chunks:
        return jax.lax.map(lambda row: fn(*row), tuple(xs))
    split = tuple(jnp.reshape(x, (chunks, b // chunks, *jnp.shape(x)[1:])) for x in xs)
    out = jax.vmap(lambda *c: jax.lax.map(lambda row: fn(*row), c))(*split)
    return jax.tree.map(lambda y: jnp.reshape(y, (b, *y.shape[2:])), out)


class Weights(NamedTuple):
    """Weights of the residual's parts (squared-error weights) and the orientation metric."""

    position: float = 1.0
    orientation: float = 1.0
    velocity: float = 0.0
    sensor: float = 1.0
    orientation_metric: str = "geodesic"


def _quat_rel(a, b, xp):
    """``conj(a) * b`` of quaternions (..., 4) (w, x, y, z)."""
    aw, av = a[..., :1], -a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - xp.sum(av * bv, axis=-1, keepdims=True)
    v = aw * bv + bw * av + xp.cross(av, bv)
    return xp.concatenate([w, v], axis=-1)


def state_residuals(layout: manifold.JointLayout, qpos, qvel, qpos_rec, qvel_rec, w: Weights, *, xp=jnp):
    """Residual (..., k) of predicted states against recorded ones (see the module docstring);
    ``xp``: ``jax.numpy`` (default) or ``numpy``."""
    parts = [xp.sqrt(w.position) * (qpos[..., layout.lin_q] - qpos_rec[..., layout.lin_q])]
    if layout.quat_q.size:
        q, qr = qpos[..., layout.quat_q], qpos_rec[..., layout.quat_q]  # (..., k, 4)
        if w.orientation_metric == "matrix":
            d = quat_to_mat(q, xp=xp) - quat_to_mat(qr, xp=xp)
            rot = d.reshape(*d.shape[:-3], -1)
        else:
            rot = quat_log(_quat_rel(qr, q, xp), xp=xp).reshape(*q.shape[:-2], -1)
        parts.append(xp.sqrt(w.orientation) * rot)
    if not (isinstance(w.velocity, (int, float)) and w.velocity == 0):  # a traced weight keeps its columns
        parts.append(xp.sqrt(w.velocity) * (qvel - qvel_rec))
    return xp.concatenate(parts, axis=-1)


class Group(NamedTuple):
    """Segments of one model variant and sample period: arrays with a leading segment axis B."""

    variant: int
    dt: float
    qpos0: np.ndarray  # (B, nq) recorded first states
    qvel0: np.ndarray  # (B, nv)
    act0: np.ndarray  # (B, na)
    ctrl: np.ndarray  # (B, N, nu) controls of the N periods
    qpos: np.ndarray  # (B, N, nq) recorded states 1..N
    qvel: np.ndarray  # (B, N, nv)
    sensordata: np.ndarray | None  # (B, N, ns) recorded sensors at samples 1..N
    sensor_weights: np.ndarray | None  # (B, ns)
    sensor_ctrl: np.ndarray | None  # (B, N, nu) the controls the sensors at samples 1..N read
    recording: np.ndarray  # (B,) index of the recording
    start: np.ndarray  # (B,) first sample of the segment in its recording

    @property
    def size(self) -> int:
        return self.qpos0.shape[0]

    def take(self, idx) -> "Group":
        """The segments ``idx`` (NumPy indexing)."""
        pick = lambda a: None if a is None else a[idx]
        return self._replace(**{k: pick(getattr(self, k)) for k in self._fields if k not in ("variant", "dt")})

    def arrays(self) -> tuple:
        """The per-segment arrays a compiled residual takes (None where absent)."""
        return (
            self.qpos0,
            self.qvel0,
            self.act0,
            self.ctrl,
            self.qpos,
            self.qvel,
            self.sensordata,
            self.sensor_weights,
            self.sensor_ctrl,
        )


def sensor_model(sim, gain, bias, delay, dt: float, *, xp=jnp):
    """What the sensors measure: ``gain * simulated(t - delay) + bias``.

    Arguments:
        sim: (..., N + 1, ns) simulated sensor values at a segment's samples 0..N.
        gain, bias, delay: (ns,) per sensordata column (delay in seconds).
        dt: the sample period. The delay interpolates linearly between a sample and the one before,
            so it is taken in [0, dt] (clipped); sample 0 has none before it (the residual does not
            compare it).
        xp: ``jax.numpy`` or ``numpy``.
    """
    a = xp.clip(delay / dt, 0.0, 1.0)
    before = xp.concatenate([sim[..., :1, :], sim[..., :-1, :]], axis=-2)
    return gain * ((1 - a) * sim + a * before) + bias


def cut(recordings: Sequence[Recording], horizon: int, stride: int) -> list[Group]:
    """Segments of ``horizon + 1`` samples every ``stride`` samples, grouped by (variant, dt).

    Recordings must have been checked against their model (:meth:`Recording.check`): ``qvel`` and
    ``ctrl`` present."""
    keyed: dict[tuple[int, float], list[tuple[int, Recording]]] = {}
    for i, r in enumerate(recordings):
        keyed.setdefault((r.variant, r.dt), []).append((i, r))
    groups = []
    for (variant, dt), items in sorted(keyed.items()):
        with_sensors = [r.sensordata is not None for _, r in items]
        if any(with_sensors) and not all(with_sensors):
            raise ValueError(
                f"recordings of variant {variant} at dt={dt:g}: some have sensordata and some do not; "
                "give all of them sensordata or none"
            )
        cols: dict[str, list] = {k: [] for k in Group._fields[2:]}
        for i, r in items:
            starts = np.arange(0, r.T - horizon + 1, stride)
            if not len(starts):
                continue
            win = starts[:, None] + np.arange(horizon + 1)[None, :]
            na = 0 if r.act is None else r.act.shape[1]
            cols["qpos0"].append(r.qpos[starts])
            cols["qvel0"].append(r.qvel[starts])
            cols["act0"].append(r.act[starts] if r.act is not None else np.zeros((len(starts), na)))
            cols["ctrl"].append(r.ctrl[win[:, :-1]])
            cols["qpos"].append(r.qpos[win[:, 1:]])
            cols["qvel"].append(r.qvel[win[:, 1:]])
            if r.sensordata is not None:
                cols["sensordata"].append(r.sensordata[win[:, 1:]])
                sw = np.ones(r.sensordata.shape[1]) if r.sensor_weights is None else r.sensor_weights
                cols["sensor_weights"].append(np.broadcast_to(sw, (len(starts), len(sw))))
                cols["sensor_ctrl"].append(r.ctrl[np.minimum(win[:, 1:], r.T - 1)])  # the last sample reads ctrl[T-1]
            cols["recording"].append(np.full(len(starts), i))
            cols["start"].append(starts)
        if not cols["qpos0"]:
            continue
        out = {k: (np.concatenate(v) if v else None) for k, v in cols.items()}
        groups.append(Group(variant=variant, dt=dt, **out))
    return groups


def predict(
    m, base, qpos0, qvel0, act0, ctrl, cfg: Config, *, batching: str = "auto", chunks: int = 1, flags: bool = False
):
    """The states after each period of every segment, simulated by ``m`` from its first state.

    Arguments:
        m: the ``mjx.Model`` (parameters written in, traced or not).
        base: an ``mjx.Model`` of the same structure: ``mjx.make_data`` of it starts each segment.
        qpos0, qvel0, act0: (B, nq), (B, nv) and (B, na) first states.
        ctrl: (B, N, nu) controls of the N periods.
        cfg: the simulation's :class:`diffmjx.Config`.
        batching, chunks: how the B rollouts run (:func:`map_segments`; ``auto`` as :func:`resolve_batching` says).
        flags: also return which segments ran out of the step budget.

    Returns:
        ``(qpos, qvel, act)`` of shapes (B, N, nq), (B, N, nv) and (B, N, na); with ``flags`` a fourth,
        (B,) booleans: the segment's adaptive solve ran out of ``integrator.max_steps`` in some period
        (its states from there on are where the solve stopped, not the period's end).
    """
    d0 = _mjx.make_data(base)

    def one(qp, qv, a, u):
        _, traj = rollout(m, d0.replace(qpos=qp, qvel=qv, act=a), u, cfg)
        if flags:
            return traj.qpos, traj.qvel, traj.act, jnp.any(traj.stats.budget_exhausted)
        return traj.qpos, traj.qvel, traj.act

    xs = tuple(jnp.asarray(x) for x in (qpos0, qvel0, act0, ctrl))
    return map_segments(one, xs, resolve_batching(batching, cfg), chunks)


def refsafe_floor(model: mujoco.MjModel) -> float | None:
    """The least ``solref`` time constant ``model`` simulates with at its own timestep: twice the
    timestep where its ``refsafe`` flag is on (MuJoCo raises every positive time constant below it to
    it); None where the flag is off."""
    if model.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_REFSAFE:
        return None
    return 2.0 * float(model.opt.timestep)


def with_refsafe(m, floor: float):
    """``m`` (an ``mjx.Model``, traced or not) with every positive ``solref`` time constant raised to
    ``floor``: MuJoCo's ``refsafe`` at the model's own timestep, applied to the fields.

    A segment is simulated with ``opt.timestep`` set to its sample period, where MJX's ``refsafe``
    would clamp at twice that period instead (a 10 ms contact time constant of a 2 ms model recorded
    at 10 ms would be raised to 20 ms: another model, and a zero Jacobian column). So :func:`_base`
    turns the flag off and this applies the model's own clamp. MuJoCo clamps a contact's time
    constant after mixing its two geoms' ``solref`` (by ``solmix``); here each geom's is clamped
    before: the same where both are on one side of ``floor``."""
    edits = {}
    for f in SOLREF_FIELDS:
        s = getattr(m, f, None)
        if s is None or not np.size(s):
            continue
        s = jnp.asarray(s)
        tc = s[..., 0]
        edits[f] = s.at[..., 0].set(jnp.where(tc > 0, jnp.maximum(tc, floor), tc))
    return m.tree_replace(edits) if edits else m


def _base(model: mujoco.MjModel, dt: float):
    """``mjx.put_model`` of ``model`` with the control period ``dt`` (the model's own is not changed)
    and ``refsafe`` off: :func:`with_refsafe` applies the model's own clamp to the written model."""
    import copy

    m = copy.deepcopy(model)
    m.opt.timestep = dt
    m.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_REFSAFE
    # static fields the simulation never reads are cleared: another start shares the compiled programs
    return _mjx.without_unused_statics(mjx.put_model(m, device=jax.local_devices()[0]))


class GroupSpec(NamedTuple):
    """What a group's simulated residual depends on besides its traced inputs (the model, the sensor
    terms, the segment arrays): hashable, the key under which every fit of a model structure with the
    same settings reuses one compiled program (:func:`group_residuals`, :func:`group_jacobian`)."""

    cfg: Config
    weights: Weights
    batching: str  # resolved: vmap or map
    dt: float
    sensors: bool


def simulated_residuals(spec: GroupSpec, m, base, terms, arrays, flags: bool = False):
    """(B, N, k) residuals of a group's segments (unnormalised); with ``flags`` also (B,) booleans,
    the segments whose simulation ran out of the step budget (:func:`predict`).

    Arguments:
        spec: the group's :class:`GroupSpec`.
        m: the ``mjx.Model`` with the parameters written in (:meth:`Problem.edit`).
        base: the group's ``mjx.Model`` as put: ``mjx.make_data`` of it starts each segment.
        terms: the sensors' ``(gain, bias, delay)`` per sensordata column, or ``()`` without sensors.
        arrays: the segments (:meth:`Group.arrays` layout).
    """
    qpos0, qvel0, act0, ctrl, qpos, qvel, sens, sens_w, sens_ctrl = arrays
    layout = manifold.JointLayout.from_model(base)  # static fields of the model: known while tracing
    pq, pv, pa, exhausted = predict(m, base, qpos0, qvel0, act0, ctrl, spec.cfg, batching=spec.batching, flags=True)
    r = state_residuals(layout, pq, pv, qpos, qvel, spec.weights)  # (B, N, k)
    if not spec.sensors:
        return (r, exhausted) if flags else r
    # sensors at samples 0..N: the recorded first state, then the predicted ones; the residual
    # compares 1..N (sample 0 is what a delay interpolates from)
    d0 = _mjx.make_data(base)
    gain, bias, delay = terms

    def sense(q, v, a, c):
        return forward_unchecked(m, d0.replace(qpos=q, qvel=v, act=a, ctrl=c), spec.cfg).sensordata

    qs = jnp.concatenate([qpos0[:, None], pq], axis=1)
    vs = jnp.concatenate([qvel0[:, None], pv], axis=1)
    acts = jnp.concatenate([act0[:, None], pa], axis=1)
    cs = jnp.concatenate([ctrl[:, :1], sens_ctrl], axis=1)
    sim = map_segments(jax.vmap(sense), (qs, vs, acts, cs), spec.batching)
    measured = sensor_model(sim, gain, bias, delay, spec.dt)[:, 1:]
    r = jnp.concatenate([r, jnp.sqrt(spec.weights.sensor) * sens_w[:, None] * (measured - sens)], axis=-1)
    return (r, exhausted) if flags else r


@functools.partial(runtime.jit, static_argnames=("spec", "flags"))
def group_residuals(m, base, terms, arrays, *, spec: GroupSpec, flags: bool = False):
    """:func:`simulated_residuals`, compiled once per model structure and ``spec`` for every fit."""
    return simulated_residuals(spec, m, base, terms, arrays, flags)


@functools.partial(runtime.jit, static_argnames=("spec", "moved"))
def group_jacobian(z, m, base, terms, arrays, dleaves, dterms, *, spec: GroupSpec, moved: tuple[int, ...]):
    """``(r, J, exhausted)``: :func:`simulated_residuals`, its forward-mode Jacobian along the model's
    tangents, and the segments whose simulation ran out of the step budget.

    The model's leaves ``moved`` (indices into ``jax.tree.leaves(m)``) and the sensor ``terms`` move
    along ``dleaves`` and ``dterms`` (each with a leading axis of ``len(z)`` directions, e.g. their
    derivatives by the fit's coordinates): ``J[..., i]`` is the residuals' derivative along direction
    ``i``. The program depends on the parameters only through these inputs, so every fit of a model
    structure (any start, data or parameter list of the same size) reuses it: ``jax.jit`` keys it on
    the model's static fields, the shapes and ``spec`` and ``moved``.

    Arguments:
        z: zeros, one per direction (its length sets the Jacobian's width).
    """
    leaves, treedef = jax.tree.flatten(m)

    def along(z):
        moved_leaves = list(leaves)
        for i, d in zip(moved, dleaves):
            moved_leaves[i] = moved_leaves[i] + jnp.tensordot(z, d, axes=1)
        t = tuple(x + jnp.tensordot(z, d, axes=1) for x, d in zip(terms, dterms))
        r, exhausted = simulated_residuals(spec, jax.tree.unflatten(treedef, moved_leaves), base, t, arrays, True)
        return r, (r, exhausted)

    j, (r, exhausted) = jax.jacfwd(along, has_aux=True)(z)
    return r, j, exhausted


def depends_on_first(fn, *args) -> list[bool]:
    """Which output leaves of ``fn(*args)`` depend on its first argument, from its traced program
    (conservatively: an operation's outputs all depend on any input that does)."""
    closed = jax.make_jaxpr(fn)(*args)
    jaxpr = closed.jaxpr
    var = lambda v: not hasattr(v, "val")  # a Literal holds a value; a Var does not
    dep = set(jaxpr.invars[: len(jax.tree.leaves(args[0]))])
    for eqn in jaxpr.eqns:
        if any(var(v) and v in dep for v in eqn.invars):
            dep.update(eqn.outvars)
    return [var(v) and v in dep for v in jaxpr.outvars]


@dataclasses.dataclass(eq=False)
class Problem:
    """Segments of recordings, a :class:`~diffmjx.sysid.ParameterSet` and a simulation config.

    Arguments:
        params: the resolved parameters (with the model variants).
        recordings: checked recordings (:meth:`Recording.check`).
        horizon: N, periods predicted per segment.
        stride: samples between segment starts.
        cfg: the simulation's :class:`diffmjx.Config`.
        weights: the residual's :class:`Weights`.
        batching: how a group's segments run (:func:`~diffmjx.sysid.map_segments`).
        threads: how many threads :meth:`evaluate` runs each group's segments on, a share each
            (:func:`resolve_threads`; None: every CPU core on a CPU backend).
    """

    params: ParameterSet
    recordings: Sequence[Recording]
    horizon: int
    stride: int
    cfg: Config
    weights: Weights = dataclasses.field(default_factory=Weights)
    batching: str = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        self.groups = cut(self.recordings, self.horizon, self.stride)
        if not self.groups:
            raise ValueError(f"no recording holds a segment of horizon + 1 = {self.horizon + 1} samples")
        self.bases = {(g.variant, g.dt): _base(self.params.models[g.variant], g.dt) for g in self.groups}
        self.layouts = [manifold.JointLayout.from_model(mv) for mv in self.params.models]
        self.states = sum(g.size for g in self.groups) * self.horizon
        self.batching_used = resolve_batching(self.batching, self.cfg)
        self.threads_used = resolve_threads(self.threads)

    def row_segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Which segment each row of :meth:`residuals` belongs to, and each segment's
        ``(recording, first sample)``: ``(rows,)`` segment indices and ``(segments, 2)`` keys. Segments
        of one recording that share a sample share its noise (:func:`diffmjx.sysid.identify`'s
        intervals treat them as correlated)."""
        seg, keys, first = [], [], 0
        for g in self.groups:
            q, v = g.qpos[:1, :1], g.qvel[:1, :1]  # one state: the residual's width, from the residual itself
            k = state_residuals(self.layouts[g.variant], q, v, q, v, self.weights, xp=np).shape[-1]
            k += 0 if g.sensordata is None else g.sensordata.shape[-1]
            seg.append(np.repeat(np.arange(first, first + g.size), self.horizon * k))
            keys.append(np.stack([g.recording, g.start], axis=1))
            first += g.size
        return np.concatenate(seg), np.concatenate(keys)

    def arguments(self, groups: Sequence[Group] | None = None) -> tuple:
        """What :meth:`residuals` reads besides ``theta``, as a pytree to pass into a compiled function
        (so that other data or another start reuse its program): the coordinates and, per group, the
        base model and the segment arrays."""
        groups = self.groups if groups is None else groups
        return self.params.coords(), [(self.bases[(g.variant, g.dt)], g.arrays()) for g in groups]

    @functools.cached_property
    def _group_fns(self):
        return [self._residual_fn(g) for g in self.groups]

    def spec(self, g: Group) -> "GroupSpec":
        """Group ``g``'s :class:`GroupSpec`: what its simulated residual depends on besides its inputs."""
        return GroupSpec(self.cfg, self.weights, self.batching_used, float(g.dt), g.sensordata is not None)

    def edit(self, values, base, variant: int, sensors: bool):
        """``(m, terms)``: ``base`` with the physical ``values`` written in (ties, derived constants and
        the model's own ``refsafe`` clamp applied) and, with ``sensors``, the sensors' ``(gain, bias,
        delay)`` per sensordata column (else ``()``)."""
        ps = self.params
        floor = refsafe_floor(ps.models[variant])
        m = ps.model(values, base, variant)
        m = m if floor is None else with_refsafe(m, floor)
        terms = ps.sensor_terms(values, base.nsensordata, variant) if sensors else ()
        return m, terms

    def _residual_fn(self, g: Group):
        spec = self.spec(g)

        def residuals(values, base, arrays):
            m, terms = self.edit(values, base, g.variant, spec.sensors)
            return simulated_residuals(spec, m, base, terms, arrays)

        return residuals

    def moved(self, g: Group) -> tuple[int, ...]:
        """Indices of the leaves of ``jax.tree.leaves(m)`` that the parameters move in group ``g``'s model."""
        return self._moved[(g.variant, g.dt)]

    @functools.cached_property
    def _moved(self) -> dict:
        """:meth:`moved` per ``(variant, dt)``, from the traced edit of each base model."""
        out = {}
        for (variant, dt), base in self.bases.items():

            def leaves(values, base, variant=variant):
                return jax.tree.leaves(self.edit(values, base, variant, False)[0])

            deps = depends_on_first(leaves, jnp.asarray(self.params.start), base)
            out[(variant, dt)] = tuple(i for i, d in enumerate(deps) if d)
        return out

    @functools.cached_property
    def _edits(self):
        """The per-fit part of an evaluation, compiled: coordinates to the model (and the sensor terms)
        and, for Jacobians, their derivatives by the coordinates (a small program; the simulation is
        :func:`group_residuals` or :func:`group_jacobian`, shared by every fit)."""

        def edit(theta, coords, base, variant, sensors):
            return self.edit(self.params.to_values(theta, coords), base, variant, sensors)

        def tangents(theta, coords, base, variant, sensors, moved):
            def f(th):
                m, terms = edit(th, coords, base, variant, sensors)
                leaves = jax.tree.leaves(m)
                return (tuple(leaves[i] for i in moved), terms), (m, terms)

            jac, (m, terms) = jax.jacfwd(f, has_aux=True)(theta)
            dleaves, dterms = jax.tree.map(lambda a: jnp.moveaxis(a, -1, 0), jac)
            return m, terms, dleaves, dterms

        return (
            runtime.jit(edit, static_argnames=("variant", "sensors")),
            runtime.jit(tangents, static_argnames=("variant", "sensors", "moved")),
        )

    @functools.cached_property
    def _shares(self):
        """Per group: its segment arrays cut into :func:`shares` (on the device) and the rows to keep."""
        out = []
        for g in self.groups:
            idx, keep = shares(g.size, self.threads_used)
            out.append(([jax.device_put(g.take(i).arrays()) for i in idx], keep))
        return out

    def evaluate(self, theta, jacobian: bool = True, flags: bool = False):
        """:meth:`residuals` at ``theta`` and, with ``jacobian``, its forward-mode Jacobian by ``theta``
        (else None), through the compiled programs every fit of the same model structure and settings
        shares (:func:`group_residuals`, :func:`group_jacobian`): a second fit skips tracing and
        compiling the simulation. Each group's segments run in ``threads_used`` shares at once, one
        per thread (:func:`resolve_threads`). Equal to ``jax.jacfwd(self.residuals)`` to rounding.

        With ``flags``, a third result: (segments,) booleans in :meth:`row_segments`' order, True
        where the segment's simulation ran out of ``integrator.max_steps`` (its residual is of a
        solve stopped early)."""
        edit, tangents = self._edits
        coords = self.params.coords()
        theta = jnp.asarray(theta)
        calls, layout = [], []
        for g, (parts, keep) in zip(self.groups, self._shares):
            base, spec = self.bases[(g.variant, g.dt)], self.spec(g)
            if jacobian:
                moved = self.moved(g)
                m, terms, dleaves, dterms = tangents(theta, coords, base, g.variant, spec.sensors, moved)
                z = jnp.zeros(theta.shape, theta.dtype)
                fn = functools.partial(
                    group_jacobian, z, m, base, terms, dleaves=dleaves, dterms=dterms, spec=spec, moved=moved
                )
            else:
                m, terms = edit(theta, coords, base, g.variant, spec.sensors)
                fn = functools.partial(group_residuals, m, base, terms, spec=spec, flags=True)
            layout.append((len(parts), keep))
            calls += [functools.partial(fn, arrays=a) for a in parts]
        if len(calls) == 1:
            outs = [calls[0]()]
        else:  # each share's program on its own thread: they run side by side, one core each
            outs = list(_pool(self.threads_used).map(lambda call: jax.block_until_ready(call()), calls))
        rs, js, exhausted, at = [], [], [], 0
        for n, keep in layout:
            out = _unshare(outs[at : at + n], keep)
            at += n
            r, j, ex = out if jacobian else (out[0], None, out[1])
            rs.append(jnp.ravel(r))
            exhausted.append(np.asarray(ex))
            if jacobian:
                js.append(jnp.reshape(j, (-1, theta.size)))
        scale = jnp.sqrt(float(self.states))
        r = jnp.concatenate(rs) / scale
        j = jnp.concatenate(js) / scale if jacobian else None
        return (r, j, np.concatenate(exhausted)) if flags else (r, j)

    def group_residuals(self, values, k: int, base, arrays):
        """(B, N, k) residuals of group ``k``'s segments ``arrays`` (:meth:`Group.arrays` layout), unnormalised."""
        return self._group_fns[k](values, base, arrays)

    def residuals(self, theta, args=None):
        """Flat residual vector at unconstrained ``theta``: its sum of squares is :meth:`loss`.

        Arguments:
            theta: unconstrained coordinates.
            args: :meth:`arguments` (this problem's own if None).
        """
        coords, data = self.arguments() if args is None else args
        values = self.params.to_values(theta, coords)
        parts = [jnp.ravel(self.group_residuals(values, k, base, arrays)) for k, (base, arrays) in enumerate(data)]
        return jnp.concatenate(parts) / jnp.sqrt(float(self.states))

    def loss(self, theta, args=None):
        """The segment loss: mean over segments and predicted states of the squared residual."""
        r = self.residuals(theta, args)
        return jnp.sum(r * r)
