"""ContactNets cube tosses as MuJoCo free-joint states: load, check, split by toss, cut segments.

The file (``data/contactnets/contactnets_cube_tosses.npz`` of the repository, see its README;
:func:`shipped_recording`) holds one float64
array of shape (T, 13) per toss, key ``toss_NNN``: columns 0:7 are a free joint's ``qpos``
(position in m, quaternion w x y z) and 7:13 its ``qvel`` (linear velocity in the world frame,
angular velocity in the body frame), sampled every :data:`DT` = 1/148 s.

Nothing is dropped silently: a file that is missing or unreadable, a toss of the wrong shape, a
non-finite value or a quaternion whose norm is off by more than ``quat_tol`` raises
:class:`DataError` naming the toss and the sample; what is repaired (quaternions renormalised
within ``quat_tol``, sign flips between samples undone) or left out (tosses too short for one
segment) is counted in the :class:`LoadReport`.
"""

import dataclasses
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from diffmjx.config import Section, knob

__all__ = [
    "DT",
    "DataConfig",
    "DataError",
    "LoadReport",
    "Segments",
    "Toss",
    "load_split",
    "load_tosses",
    "segments",
    "shipped_recording",
    "split",
    "toss_recordings",
]

DT = 1.0 / 148.0
"""Sample period of the recordings (s)."""

RECORDING = "contactnets_cube_tosses.npz"
"""File name of the shipped recording (with its ``LICENSE`` and ``README.md`` beside it)."""


def shipped_recording() -> Path:
    """The repository's recording, ``data/contactnets/`` (beside its ``LICENSE`` and ``README.md``)."""
    return Path(__file__).resolve().parents[2] / "data" / "contactnets" / RECORDING


@dataclasses.dataclass(frozen=True)
class DataConfig(Section):
    """Which recordings, how they are split and cut.

    Attributes:
        path: the ``.npz`` file; empty means the shipped recording (:func:`shipped_recording`).
        horizon: N, the states predicted per segment (a segment holds N + 1 states).
        val_fraction: share of tosses held out for validation, in [0, 1).
        seed: seed of the split.
        quat_tol: largest ``|1 - |q||`` accepted (and renormalised) before a toss is refused.
    """

    _section = "data"

    path: str = knob("")
    horizon: int = knob(4, ge=1)
    val_fraction: float = knob(0.2, ge=0, lt=1)
    seed: int = knob(0, ge=0)
    quat_tol: float = knob(1e-3, gt=0, lt=0.5)


class DataError(ValueError):
    """A recording that cannot be used; the message names the file, the toss and the problem."""


class Toss(NamedTuple):
    """One recorded toss."""

    name: str  # the file's key, e.g. "toss_012"
    qpos: np.ndarray  # (T, 7) position (m) and unit quaternion (w, x, y, z)
    qvel: np.ndarray  # (T, 6) linear velocity (world, m/s) and angular velocity (body, rad/s)


@dataclasses.dataclass
class LoadReport:
    """What loading repaired or left out, per reason (counts of samples or tosses)."""

    tosses: int = 0
    samples: int = 0
    renormalised_quaternions: int = 0
    sign_flipped_quaternions: int = 0
    too_short_tosses: int = 0  # fewer than horizon + 1 samples: no segment (counted by segments())

    def __str__(self) -> str:
        return (
            f"{self.tosses} tosses, {self.samples} samples; repaired: {self.renormalised_quaternions} "
            f"quaternions renormalised, {self.sign_flipped_quaternions} sign flips undone; "
            f"left out: {self.too_short_tosses} tosses shorter than one segment"
        )


def _check_toss(path: Path, name: str, a, quat_tol: float, report: LoadReport) -> Toss:
    where = f"{path.name}: {name}"
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[1] != 13 or a.shape[0] < 1:
        raise DataError(f"{where}: shape {a.shape}, expected (T, 13) with T >= 1")
    if not np.issubdtype(a.dtype, np.floating):
        raise DataError(f"{where}: dtype {a.dtype}, expected floating point")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DataError(f"{where}: non-finite value {a[i, j]} at sample {i}, column {j}")
    q = a[:, 3:7]
    norm = np.linalg.norm(q, axis=1)
    off = np.abs(norm - 1.0)
    if (off > quat_tol).any():
        i = int(np.argmax(off > quat_tol))
        raise DataError(f"{where}: quaternion norm {norm[i]:.6g} at sample {i}; allowed |1 - norm| <= {quat_tol:g}")
    renorm = off > 1e-12
    report.renormalised_quaternions += int(renorm.sum())
    q = q / norm[:, None]
    # q and -q are one rotation; keep consecutive samples on one hemisphere
    jumps = np.r_[False, np.sum(q[1:] * q[:-1], axis=1) < 0]
    report.sign_flipped_quaternions += int(jumps.sum())
    q = np.where((np.cumsum(jumps) % 2 == 1)[:, None], -q, q)
    report.tosses += 1
    report.samples += a.shape[0]
    return Toss(name, np.concatenate([a[:, :3], q], axis=1), a[:, 7:13].copy())


def load_tosses(path: str | Path = "", quat_tol: float = 1e-3) -> tuple[dict[str, Toss], LoadReport]:
    """Every toss of a recording file, checked.

    Arguments:
        path: the ``.npz`` file; empty for the shipped recording (:func:`shipped_recording`).
        quat_tol: largest ``|1 - |q||`` that is renormalised instead of refused.

    Returns:
        ``(tosses, report)``: ``{name: Toss}`` in the file's order, and the :class:`LoadReport`.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: the file is unreadable, or a toss has the wrong shape, a non-finite value or a
            quaternion off unit norm by more than ``quat_tol``.
    """
    path = Path(path) if str(path) else shipped_recording()
    if not path.is_file():
        raise FileNotFoundError(f"recording file {path} not found (the project ships data/contactnets/)")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from e
    report = LoadReport()
    tosses = {}
    with archive:
        if not archive.files:
            raise DataError(f"{path}: holds no tosses")
        for name in archive.files:
            try:
                arr = archive[name]
            except (OSError, ValueError, zipfile.BadZipFile) as e:
                raise DataError(f"{path.name}: {name}: unreadable ({e})") from e
            tosses[name] = _check_toss(path, name, arr, quat_tol, report)
    return tosses, report


def toss_recordings(tosses: dict[str, Toss], names=None) -> list:
    """The tosses as :class:`~diffmjx.sysid.Recording` s of the cube's free joint (no controls, ``dt`` =
    :data:`DT`), for :func:`diffmjx.sysid.identify` on :func:`experiments.contactnets.cube_parameters`.

    Arguments:
        tosses: from :func:`load_tosses`.
        names: which tosses (default all, in order); tosses of one sample are left out.
    """
    from diffmjx.sysid.recording import Recording

    names = list(tosses) if names is None else list(names)
    return [
        Recording(qpos=tosses[n].qpos, qvel=tosses[n].qvel, dt=DT, name=n) for n in names if len(tosses[n].qpos) > 1
    ]


def split(names, val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """Seeded split of toss names into (train, validation); every toss lands in exactly one.

    Arguments:
        names: toss names.
        val_fraction: share held out for validation (rounded; at least one toss when > 0 and there
            are two or more tosses).
        seed: NumPy seed of the permutation.

    Returns:
        ``(train, validation)``, each sorted.
    """
    names = sorted(names)
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction!r} must be in [0, 1)")
    n_val = int(round(val_fraction * len(names)))  # noqa: RUF046 - NumPy < 2 rounds its floats to floats
    if val_fraction > 0 and len(names) >= 2:
        n_val = min(max(n_val, 1), len(names) - 1)
    order = np.random.default_rng(seed).permutation(len(names))
    val = sorted(names[i] for i in order[:n_val])
    train = sorted(names[i] for i in order[n_val:])
    return train, val


def load_split(data: DataConfig) -> tuple[dict[str, Toss], list[str], list[str], LoadReport]:
    """The recordings of ``data.path`` and their seeded split.

    Returns:
        ``(tosses, train_names, val_names, report)``.
    """
    tosses, report = load_tosses(data.path, data.quat_tol)
    train_names, val_names = split(tosses, data.val_fraction, data.seed)
    return tosses, train_names, val_names, report


class Segments(NamedTuple):
    """Windows of ``horizon + 1`` consecutive states: the first is the initial state, the rest are
    to be predicted."""

    qpos: np.ndarray  # (S, horizon + 1, 7)
    qvel: np.ndarray  # (S, horizon + 1, 6)
    toss: np.ndarray  # (S,) index into the ``names`` the segments were cut from
    start: np.ndarray  # (S,) sample index of the initial state within its toss


def segments(tosses: dict[str, Toss], names, horizon: int, report: LoadReport | None = None) -> Segments:
    """Every window of ``horizon + 1`` consecutive samples of the named tosses (stride 1).

    Arguments:
        tosses: from :func:`load_tosses`.
        names: which tosses (e.g. one side of :func:`split`).
        horizon: N >= 1, states to predict per segment.
        report: where tosses too short for one segment are counted (they give no segment).

    Returns:
        :class:`Segments`.
    """
    if horizon < 1:
        raise ValueError(f"horizon={horizon!r} must be >= 1")
    qpos, qvel, toss, start = [], [], [], []
    for k, name in enumerate(names):
        if name not in tosses:
            raise KeyError(f"no toss named {name!r}")
        t = tosses[name]
        count = t.qpos.shape[0] - horizon
        if count < 1:
            if report is not None:
                report.too_short_tosses += 1
            continue
        idx = np.arange(count)[:, None] + np.arange(horizon + 1)[None, :]
        qpos.append(t.qpos[idx])
        qvel.append(t.qvel[idx])
        toss.append(np.full(count, k))
        start.append(np.arange(count))
    if not qpos:
        empty = np.zeros(0, int)
        return Segments(np.zeros((0, horizon + 1, 7)), np.zeros((0, horizon + 1, 6)), empty, empty)
    return Segments(np.concatenate(qpos), np.concatenate(qvel), np.concatenate(toss), np.concatenate(start))
