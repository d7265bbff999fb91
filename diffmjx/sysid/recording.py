r"""Recordings of a system: what :func:`diffmjx.sysid.identify` fits a model to.

A :class:`Recording` is one trajectory sampled every ``dt`` seconds: ``T + 1`` states (``qpos``,
optionally ``qvel`` and ``act``), the ``T`` controls held over the periods between them, and
optionally sensor readings. It is checked on construction (shapes, finite values, ``dt > 0``), and
against a model by :meth:`Recording.check` (sizes, unit quaternions within a tolerance, which it
renormalises, and quaternion sign flips between samples, which it undoes); every error names the
array and its first bad sample.

Time convention: ``ctrl[k]`` is held from sample ``k`` to ``k + 1``; ``sensordata[k]`` is what
MuJoCo's ``mj_forward`` reads at state ``k`` with control ``ctrl[k]`` (``ctrl[T - 1]`` at the last
sample), the values ``d.sensordata`` holds after an ``mj_step`` from state ``k``.

Loaders: :meth:`Recording.load` reads a NumPy ``.npz`` (keys ``qpos``, ``dt`` and optionally
``qvel``, ``act``, ``ctrl``, ``sensordata``, ``sensor_weights``) or a CSV file (a header naming the
columns ``time`` or ``t``, ``qpos_0`` ..., ``qvel_0`` ..., ``act_0`` ..., ``ctrl_0`` ...,
``sensordata_0`` ...; the last row's controls may be empty); :meth:`Recording.save` writes either.
:func:`~diffmjx.sysid.from_mujoco_sysid` and :func:`~diffmjx.sysid.to_mujoco_sysid` convert
``mujoco.sysid``'s trajectory types, so a ``mujoco.sysid`` user brings their data unchanged.

Why one file of this length: :class:`Recording` with its checks and loaders; every check names the
array and its first bad sample, and those messages are much of it.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import math
from pathlib import Path

import mujoco
import numpy as np

__all__ = ["QUAT_TOL", "Recording", "RecordingError", "velocities_from_positions"]

QUAT_TOL = 1e-3
"""Largest ``|1 - |q||`` of a recorded quaternion that :meth:`Recording.check` renormalises."""

_ARRAYS = ("qpos", "qvel", "act", "ctrl", "sensordata", "sensor_weights")


class RecordingError(ValueError):
    """A recording that cannot be used; the message names the recording, the array and the sample."""


def _quat_slices(m) -> list[tuple[int, str]]:
    """``(qpos address of w, joint name)`` of every free or ball joint's quaternion."""
    out = []
    for j in range(m.njnt):
        typ = int(m.jnt_type[j])
        if typ in (mujoco.mjtJoint.mjJNT_FREE, mujoco.mjtJoint.mjJNT_BALL):
            adr = int(m.jnt_qposadr[j]) + (3 if typ == mujoco.mjtJoint.mjJNT_FREE else 0)
            out.append((adr, mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint {j}"))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Recording:
    """One recorded trajectory of a system (see the module docstring for the time convention).

    Attributes:
        qpos: (T + 1, nq) joint positions; quaternions in (w, x, y, z) order.
        qvel: (T + 1, nv) joint velocities in MuJoCo's convention, or None: central differences of
            ``qpos`` (``mujoco.mj_differentiatePos``, quaternions on the sphere) by :meth:`check`.
        ctrl: (T, nu) controls, or None: zeros.
        dt: the sample period in seconds, > 0 (required); the model's control period is set to it.
        sensordata: (T + 1, nsensordata) sensor readings, or None.
        sensor_weights: (nsensordata,) weights of the sensor residuals, >= 0, or None: ones.
        act: (T + 1, na) actuator activations, or None: zeros at every segment's start.
        name: a label for messages and results.
        variant: which of the models passed to :func:`~diffmjx.sysid.identify` produced it (0 for
            a single model): variants (say, with and without a payload) share the parameters.
    """

    qpos: np.ndarray
    qvel: np.ndarray | None = None
    ctrl: np.ndarray | None = None
    dt: float | None = None
    sensordata: np.ndarray | None = None
    sensor_weights: np.ndarray | None = None
    act: np.ndarray | None = None
    name: str = "recording"
    variant: int = 0

    def __post_init__(self) -> None:
        where = f"recording {self.name!r}"
        if self.dt is None:
            raise RecordingError(f"{where}: dt is missing; give the sample period in seconds (dt=0.01)")
        if isinstance(self.dt, bool) or not isinstance(self.dt, (int, float, np.floating, np.integer)):
            raise RecordingError(f"{where}: dt={self.dt!r} is invalid; expected a number of seconds > 0")
        if not (math.isfinite(float(self.dt)) and float(self.dt) > 0):
            raise RecordingError(f"{where}: dt={self.dt!r} is invalid; expected a finite number of seconds > 0")
        object.__setattr__(self, "dt", float(self.dt))
        if self.qpos is None:
            raise RecordingError(
                f"{where}: qpos is missing; every segment starts from a recorded state, so a recording "
                "needs qpos (T + 1, nq); sensor-only recordings (sensordata without qpos) cannot be fitted yet"
            )
        if isinstance(self.variant, bool) or not isinstance(self.variant, (int, np.integer)) or self.variant < 0:
            raise RecordingError(f"{where}: variant={self.variant!r} is invalid; expected an int >= 0")
        for key in _ARRAYS:
            value = getattr(self, key)
            if value is None:
                continue
            try:
                a = np.array(value, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise RecordingError(f"{where}: {key} is not an array of numbers ({e})") from None
            want = 1 if key == "sensor_weights" else 2
            if a.ndim != want:
                shape = "(nsensordata,)" if key == "sensor_weights" else "(samples, columns)"
                raise RecordingError(f"{where}: {key} has shape {a.shape}; expected {shape}")
            bad = ~np.isfinite(a)
            if bad.any():
                first = np.argwhere(bad)[0]
                at = f"entry {first[0]}" if a.ndim == 1 else f"sample {first[0]}, column {first[1]}"
                raise RecordingError(f"{where}: {key} has a non-finite value ({a[tuple(first)]}) at {at}")
            a.flags.writeable = False
            object.__setattr__(self, key, a)
        t1 = self.qpos.shape[0]
        if t1 < 2:
            raise RecordingError(f"{where}: qpos has {t1} sample(s); a recording needs two or more (T + 1 >= 2)")
        for key, rows in (("qvel", t1), ("act", t1), ("sensordata", t1), ("ctrl", t1 - 1)):
            a = getattr(self, key)
            if a is not None and a.shape[0] != rows:
                what = "T = len(qpos) - 1" if key == "ctrl" else "T + 1 = len(qpos)"
                raise RecordingError(f"{where}: {key} has {a.shape[0]} rows; expected {what} = {rows}")
        if self.sensor_weights is not None:
            if self.sensordata is None:
                raise RecordingError(f"{where}: sensor_weights given without sensordata")
            if self.sensor_weights.shape != (self.sensordata.shape[1],):
                raise RecordingError(
                    f"{where}: sensor_weights has shape {self.sensor_weights.shape}; expected "
                    f"({self.sensordata.shape[1]},), one per sensordata column"
                )
            if (self.sensor_weights < 0).any():
                i = int(np.argmax(self.sensor_weights < 0))
                raise RecordingError(f"{where}: sensor_weights[{i}]={self.sensor_weights[i]} is negative")

    @property
    def T(self) -> int:
        """Number of periods (samples - 1)."""
        return self.qpos.shape[0] - 1

    @property
    def duration(self) -> float:
        """``T * dt`` seconds."""
        return self.T * self.dt

    def check(self, m: mujoco.MjModel, quat_tol: float = QUAT_TOL) -> Recording:
        """This recording made consistent with model ``m``, or an error naming what does not fit.

        Checks the column counts against ``m`` (``nq``, ``nv``, ``nu``, ``na``, ``nsensordata``),
        renormalises quaternions whose norm is within ``quat_tol`` of 1 and undoes sign flips
        between consecutive samples (``q`` and ``-q`` are one rotation), fills ``qvel`` by central
        differences of ``qpos`` if absent, ``ctrl`` with zeros if absent, and checks controls
        against ``actuator_ctrlrange`` where limited (beyond it by more than 1e-9 is an error).

        Returns:
            A new :class:`Recording` (this one is unchanged).

        Raises:
            RecordingError: naming the array, the sample and what was expected.
        """
        where = f"recording {self.name!r}"
        for key, n, what in (
            ("qpos", m.nq, "nq"),
            ("qvel", m.nv, "nv"),
            ("ctrl", m.nu, "nu"),
            ("act", m.na, "na"),
            ("sensordata", m.nsensordata, "nsensordata"),
        ):
            a = getattr(self, key)
            if a is not None and a.shape[1] != n:
                raise RecordingError(f"{where}: {key} has {a.shape[1]} columns; the model has {what} = {n}")
        qpos = np.array(self.qpos)
        for adr, joint in _quat_slices(m):
            q = qpos[:, adr : adr + 4]
            norm = np.linalg.norm(q, axis=1)
            off = np.abs(norm - 1.0)
            if (off > quat_tol).any():
                i = int(np.argmax(off > quat_tol))
                raise RecordingError(
                    f"{where}: qpos[{i}, {adr}:{adr + 4}] (joint {joint!r}'s quaternion) has norm {norm[i]:.6g}; "
                    f"allowed |1 - norm| <= {quat_tol:g}"
                )
            q = q / norm[:, None]
            flips = np.r_[False, np.sum(q[1:] * q[:-1], axis=1) < 0]
            qpos[:, adr : adr + 4] = np.where((np.cumsum(flips) % 2 == 1)[:, None], -q, q)
        ctrl = np.zeros((self.T, m.nu)) if self.ctrl is None else self.ctrl
        limited = np.asarray(m.actuator_ctrllimited, bool)
        if m.nu and limited.any():
            lo, hi = np.asarray(m.actuator_ctrlrange).T
            out = limited & ((ctrl < lo - 1e-9) | (ctrl > hi + 1e-9))
            if out.any():
                i, j = np.argwhere(out)[0]
                name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, int(j)) or f"actuator {j}"
                raise RecordingError(
                    f"{where}: ctrl[{i}, {j}] = {ctrl[i, j]:g} is outside {name!r}'s ctrlrange [{lo[j]:g}, {hi[j]:g}]"
                )
        qvel = self.qvel if self.qvel is not None else velocities_from_positions(m, qpos, self.dt)
        return dataclasses.replace(self, qpos=qpos, qvel=qvel, ctrl=ctrl)

    def segment(self, start: int, stop: int) -> Recording:
        """Samples ``start`` to ``stop`` (inclusive of both ends' states: ``stop - start`` periods)."""
        if not 0 <= start < stop <= self.T:
            raise ValueError(f"segment({start}, {stop}) of {self.name!r} is outside 0 <= start < stop <= T = {self.T}")
        s = slice(start, stop + 1)
        return dataclasses.replace(
            self,
            qpos=self.qpos[s],
            qvel=None if self.qvel is None else self.qvel[s],
            act=None if self.act is None else self.act[s],
            sensordata=None if self.sensordata is None else self.sensordata[s],
            ctrl=None if self.ctrl is None else self.ctrl[start:stop],
            name=f"{self.name}[{start}:{stop}]",
        )

    def split(self, fraction: float) -> tuple[Recording, Recording]:
        """The first ``1 - fraction`` of the periods and the rest (sharing the sample between them)."""
        if not 0 < fraction < 1:
            raise ValueError(f"fraction={fraction!r} must be in (0, 1)")
        cut = min(max(int(round(self.T * (1 - fraction))), 1), self.T - 1)  # noqa: RUF046
        if self.T < 2:
            raise ValueError(f"recording {self.name!r} has T = {self.T} periods; at least 2 are needed to split it")
        return self.segment(0, cut), self.segment(cut, self.T)

    @classmethod
    def simulate(
        cls,
        model: mujoco.MjModel,
        ctrl,
        dt: float,
        *,
        qpos0=None,
        qvel0=None,
        act0=None,
        step: float | None = None,
        name: str = "simulated",
        variant: int = 0,
    ) -> Recording:
        """A recording made by MuJoCo's C engine: ``model`` from a state, ``ctrl`` held over each period.

        For recovery studies and tests, where the "real system" is a model at known values. With
        ``step``, the engine integrates with RK4 at that step (a fine step approximates the model's
        continuous dynamics, which DiffMJX's adaptive integration solves); without it, with the
        model's own integrator and timestep.

        Arguments:
            model: the ``mujoco.MjModel`` (not changed).
            ctrl: (T, nu) controls (``nu`` may be 0: T periods without control).
            dt: the sample period; a whole multiple of the integration step.
            qpos0, qvel0, act0: the first state (default the model's ``qpos0``, zeros).
            step: the integration step, or None.
            name, variant: see :class:`Recording`.

        Returns:
            The :class:`Recording` with ``qpos``, ``qvel``, ``ctrl``, ``act`` (if the model has
            activations) and ``sensordata`` (if it has sensors; the module docstring's convention).
        """
        m = copy.deepcopy(model)
        if step is not None:
            m.opt.timestep, m.opt.integrator = step, mujoco.mjtIntegrator.mjINT_RK4
        sub = round(dt / m.opt.timestep)
        if sub < 1 or abs(sub * m.opt.timestep - dt) > 1e-9 * dt:
            raise RecordingError(f"dt={dt!r} is not a whole multiple of the integration step {m.opt.timestep!r}")
        ctrl = np.asarray(ctrl, np.float64)
        if ctrl.ndim != 2 or ctrl.shape[1] != m.nu or not len(ctrl):
            raise RecordingError(f"ctrl has shape {ctrl.shape}; expected (T, nu) = (T >= 1, {m.nu})")
        d = mujoco.MjData(m)
        for key, value in (("qpos", qpos0), ("qvel", qvel0), ("act", act0)):
            if value is not None:
                getattr(d, key)[:] = value
        qpos, qvel, act, sens = [], [], [], []

        def sample(u) -> None:
            d.ctrl[:] = u
            mujoco.mj_forward(m, d)
            qpos.append(d.qpos.copy())
            qvel.append(d.qvel.copy())
            act.append(d.act.copy())
            sens.append(d.sensordata.copy())

        for u in ctrl:
            sample(u)
            for _ in range(sub):
                mujoco.mj_step(m, d)
        sample(ctrl[-1])
        return cls(
            qpos=np.array(qpos),
            qvel=np.array(qvel),
            ctrl=ctrl,
            dt=dt,
            act=np.array(act) if m.na else None,
            sensordata=np.array(sens) if m.nsensordata else None,
            name=name,
            variant=variant,
        )

    # ----------------------------------------------------------------------------------------- files
    @classmethod
    def load(cls, path: str | Path, *, dt: float | None = None, name: str | None = None, variant: int = 0) -> Recording:
        """Read a ``.npz`` or ``.csv`` file (see the module docstring for their layout).

        Arguments:
            path: the file; its suffix chooses the reader.
            dt: the sample period, if the file has none (an ``.npz`` without ``dt``, a CSV without a time column).
            name: the recording's label; default the file's stem.
            variant: see :class:`Recording`.

        Raises:
            FileNotFoundError: no such file.
            RecordingError: an unreadable file, a missing column or key, or a bad array (named).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"recording file {path} not found")
        name = path.stem if name is None else name
        if path.suffix == ".npz":
            try:
                with np.load(path, allow_pickle=False) as f:
                    arrays = {k: f[k] for k in f.files}
            except Exception as e:
                raise RecordingError(f"{path}: not a readable .npz file ({e})") from e
            unknown = sorted(set(arrays) - {*_ARRAYS, "dt"})
            if unknown:
                raise RecordingError(f"{path}: unknown key {unknown[0]!r}; allowed: dt, {', '.join(_ARRAYS)}")
            if "qpos" not in arrays:
                raise RecordingError(f"{path}: no 'qpos' array")
            file_dt = float(arrays.pop("dt")) if "dt" in arrays else None
            return cls(dt=_pick_dt(path, file_dt, dt), name=name, variant=variant, **arrays)
        if path.suffix == ".csv":
            return _read_csv(path, dt, name, variant)
        raise RecordingError(f"{path}: unknown file type {path.suffix!r}; expected .npz or .csv")

    def save(self, path: str | Path) -> Path:
        """Write this recording to ``.npz`` or ``.csv`` (by the suffix); :meth:`load` reads it back."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        present = {k: getattr(self, k) for k in _ARRAYS if getattr(self, k) is not None}
        if path.suffix == ".npz":
            np.savez(path, dt=np.float64(self.dt), **present)
        elif path.suffix == ".csv":
            if self.sensor_weights is not None:
                raise RecordingError(f"{path}: a CSV has no place for sensor_weights; save as .npz")
            header = ["time"] + [f"{k}_{j}" for k, a in present.items() for j in range(a.shape[1])]
            with path.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                for i in range(self.T + 1):
                    row = [repr(i * self.dt)]
                    for a in present.values():
                        row += [""] * a.shape[1] if i >= a.shape[0] else [repr(float(x)) for x in a[i]]
                    w.writerow(row)
        else:
            raise RecordingError(f"{path}: unknown file type {path.suffix!r}; expected .npz or .csv")
        return path


def _pick_dt(path: Path, file_dt: float | None, dt: float | None) -> float:
    if file_dt is None and dt is None:
        raise RecordingError(f"{path}: holds no sample period; pass dt=")
    if file_dt is not None and dt is not None and not math.isclose(file_dt, dt, rel_tol=1e-9):
        raise RecordingError(f"{path}: holds dt={file_dt!r}, but dt={dt!r} was passed")
    return file_dt if file_dt is not None else dt  # type: ignore[return-value]


def _read_csv(path: Path, dt: float | None, name: str, variant: int) -> Recording:
    try:
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise RecordingError(f"{path}: unreadable ({e})") from e
    if len(rows) < 2:
        raise RecordingError(f"{path}: needs a header row and at least one sample")
    header = [h.strip() for h in rows[0]]
    columns: dict[str, list[tuple[int, int]]] = {}
    time_col = None
    for c, h in enumerate(header):
        if h in ("time", "t"):
            time_col = c
            continue
        key, _, idx = h.rpartition("_")
        if key not in _ARRAYS[:5] or not idx.isdigit():
            raise RecordingError(
                f"{path}: column {c} is named {h!r}; expected time, or qpos_<i>, qvel_<i>, act_<i>, ctrl_<i>, "
                "sensordata_<i>"
            )
        columns.setdefault(key, []).append((int(idx), c))
    if "qpos" not in columns:
        raise RecordingError(f"{path}: no qpos_<i> columns")
    body = rows[1:]

    def cell(r: int, c: int) -> float:
        text = body[r][c].strip() if c < len(body[r]) else ""
        if text == "":
            return math.nan
        try:
            return float(text)
        except ValueError:
            raise RecordingError(f"{path}: row {r + 2}, column {header[c]!r}: {text!r} is not a number") from None

    arrays = {}
    for key, cols in columns.items():
        cols.sort()
        if [i for i, _ in cols] != list(range(len(cols))):
            raise RecordingError(f"{path}: {key} columns are {[i for i, _ in cols]}; expected {key}_0 ... without gaps")
        a = np.array([[cell(r, c) for _, c in cols] for r in range(len(body))])
        if key == "ctrl" and len(a) and np.all(np.isnan(a[-1])):
            a = a[:-1]  # the last sample holds no control
        arrays[key] = a
    file_dt = None
    if time_col is not None:
        t = np.array([cell(r, time_col) for r in range(len(body))])
        steps = np.diff(t)
        if len(steps) and (not np.all(np.isfinite(steps)) or np.ptp(steps) > 1e-6 * max(abs(steps.mean()), 1e-12)):
            i = (
                int(np.argmax(np.abs(steps - steps.mean()) > 1e-6 * abs(steps.mean())))
                if np.all(np.isfinite(steps))
                else 0
            )
            raise RecordingError(f"{path}: the time column is not evenly spaced (row {i + 3}); resample first")
        file_dt = float(steps.mean()) if len(steps) else None
    return Recording(dt=_pick_dt(path, file_dt, dt), name=name, variant=variant, **arrays)


def velocities_from_positions(m: mujoco.MjModel, qpos: np.ndarray, dt: float) -> np.ndarray:
    """(T + 1, nv) velocities of recorded positions: central differences (one-sided at the ends),
    by ``mujoco.mj_differentiatePos`` (quaternions differentiated on the sphere, in MuJoCo's frames)."""
    qpos = np.asarray(qpos, np.float64)
    t1 = qpos.shape[0]
    out = np.zeros((t1, m.nv))
    for k in range(t1):
        a, b = max(k - 1, 0), min(k + 1, t1 - 1)
        mujoco.mj_differentiatePos(m, out[k], (b - a) * dt, qpos[a], qpos[b])
    return out
