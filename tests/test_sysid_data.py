"""The ContactNets loader: shipped data as free-joint states, seeded split by toss, segments, bad input;
the recording as package data of a built ``diffmjx``."""

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from diffmjx import sysid
from diffmjx.sysid import DataConfig, DataError, load_tosses, segments, split

ROOT = Path(__file__).resolve().parents[1]
RECORDING_FILES = ["LICENSE", "README.md", "contactnets_cube_tosses.npz"]


@pytest.fixture(scope="module")
def shipped():
    return load_tosses()


def test_shipped_tosses_are_free_joint_states(shipped):
    tosses, report = shipped
    assert len(tosses) == 499 and report.tosses == 499
    lengths = [t.qpos.shape[0] for t in tosses.values()]
    assert min(lengths) == 80 and max(lengths) == 442 and report.samples == sum(lengths) == 52692
    for t in tosses.values():
        assert t.qpos.shape == (t.qpos.shape[0], 7) and t.qvel.shape == (t.qpos.shape[0], 6)
        np.testing.assert_allclose(np.linalg.norm(t.qpos[:, 3:], axis=1), 1.0, atol=1e-12)
    assert report.renormalised_quaternions == report.sign_flipped_quaternions == 0
    assert sysid.DT == pytest.approx(0.0067568, abs=1e-7)
    # units: a resting cube's centre sits about one half width (52 mm) above the table
    final_z = np.array([t.qpos[-1, 2] for t in tosses.values()])
    assert 0.045 < np.median(final_z) < 0.06


def test_split_is_seeded_disjoint_and_complete(shipped):
    tosses, _ = shipped
    train, val = split(tosses, 0.2, seed=0)
    assert len(val) == 100 and len(train) == 399 and not set(train) & set(val)
    assert sorted(train + val) == sorted(tosses)
    assert split(tosses, 0.2, seed=0) == (train, val) and split(tosses, 0.2, seed=1) != (train, val)
    assert split(["a", "b"], 0.01, seed=0)[1] != []  # a non-zero fraction holds out at least one toss


def test_segments_count_and_contents(shipped):
    tosses, report = shipped
    names = sorted(tosses)[:3]
    seg = segments(tosses, names, 4, report)
    assert seg.qpos.shape[1:] == (5, 7) and seg.qvel.shape[1:] == (5, 6)
    assert len(seg.toss) == sum(tosses[n].qpos.shape[0] - 4 for n in names)
    k = 17
    t = tosses[names[seg.toss[k]]]
    np.testing.assert_array_equal(seg.qpos[k], t.qpos[seg.start[k] : seg.start[k] + 5])
    assert len(segments(tosses, sorted(tosses), 4).toss) == 52692 - 4 * 499


def _write(tmp_path, **arrays):
    path = tmp_path / "tosses.npz"
    np.savez(path, **arrays)
    return path


def _toss(t=10):
    a = np.zeros((t, 13))
    a[:, 2] = np.linspace(0.3, 0.05, t)
    a[:, 3] = 1.0
    return a


def test_bad_input_names_the_toss_and_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        load_tosses(tmp_path / "missing.npz")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file")
    with pytest.raises(DataError, match="garbage.npz: not a readable"):
        load_tosses(garbage)
    with pytest.raises(DataError, match=r"toss_002: shape \(10, 12\)"):
        load_tosses(_write(tmp_path, toss_001=_toss(), toss_002=_toss()[:, :12]))
    nan = _toss()
    nan[4, 8] = np.nan
    with pytest.raises(DataError, match="toss_003: non-finite value nan at sample 4, column 8"):
        load_tosses(_write(tmp_path, toss_003=nan))
    skew = _toss()
    skew[6, 3:7] = [0.9, 0.0, 0.0, 0.0]
    with pytest.raises(DataError, match="toss_004: quaternion norm 0.9 at sample 6"):
        load_tosses(_write(tmp_path, toss_004=skew))
    with pytest.raises(ValueError, match=r"data\.horizon=0 .* >= 1"):
        DataConfig(horizon=0)
    with pytest.raises(ValueError, match=r"data\.val_fraction=1\.0 .* < 1"):
        DataConfig(val_fraction=1.0)


def test_repairs_and_left_out_tosses_are_counted(tmp_path):
    near = _toss()
    near[2, 3] = 1.0 + 1e-5  # renormalised
    flip = _toss()
    flip[5:, 3] = -1.0  # q -> -q half way: one sign flip undone
    tosses, report = load_tosses(_write(tmp_path, toss_a=near, toss_b=flip, toss_c=_toss(3)))
    assert report.renormalised_quaternions == 1 and report.sign_flipped_quaternions == 1
    np.testing.assert_array_equal(tosses["toss_b"].qpos[:, 3], 1.0)
    seg = segments(tosses, ["toss_a", "toss_b", "toss_c"], 4, report)
    assert report.too_short_tosses == 1 and len(seg.toss) == 2 * 6
    assert "1 tosses shorter than one segment" in str(report)


# The recording as package data: a built diffmjx (not the repository's data/ folder) carries it.

RESOLVE = r"""
import json
import diffmjx
from diffmjx import sysid
tosses, _ = sysid.load_tosses("")
print("RESULT " + json.dumps({"diffmjx": diffmjx.__file__, "recording": str(sysid.shipped_recording()),
                              "tosses": len(tosses)}))
"""


def _source_copy(dst: Path) -> Path:
    """What a build reads (here without cfd/ and experiments/, which the check does not need)."""
    dst.mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dst / name)
    shutil.copytree(ROOT / "diffmjx", dst / "diffmjx", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data" / "contactnets", dst / "data" / "contactnets")
    return dst


def _run(args: list[str], **kwargs) -> str:
    run = subprocess.run(args, check=False, capture_output=True, text=True, **kwargs)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def _resolve_from(site: Path, cwd: Path) -> dict:
    """Import diffmjx from ``site`` in a fresh interpreter (outside the repository) and load the tosses."""
    out = _run([sys.executable, "-c", RESOLVE], cwd=cwd, env=dict(os.environ, PYTHONPATH=str(site)))
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def _assert_found_in(site: Path, got: dict) -> None:
    assert Path(got["diffmjx"]).is_relative_to(site), got  # the built package, not the repository's
    recording = Path(got["recording"])
    assert recording == site / "diffmjx" / "sysid" / "recordings" / "contactnets_cube_tosses.npz", got
    assert not recording.is_relative_to(ROOT)
    assert got["tosses"] == 499


def test_built_package_carries_the_recording(tmp_path):
    """setup.py's build step puts the recording and its licence into the package, and the built
    package finds it with importlib.resources (a few seconds: no pip, no wheel)."""
    pytest.importorskip("setuptools")
    src = _source_copy(tmp_path / "src")
    lib = tmp_path / "lib"
    _run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=src)
    assert sorted(p.name for p in (lib / "diffmjx" / "sysid" / "recordings").iterdir()) == RECORDING_FILES
    _assert_found_in(lib, _resolve_from(lib, tmp_path))


def _build_here() -> bool:
    """Whether this environment's setuptools can build the wheel without pip's build isolation."""
    major, minor = (int(x) for x in importlib.metadata.version("setuptools").split(".")[:2])
    return (major, minor) >= (70, 1) or ((major, minor) >= (68, 0) and importlib.util.find_spec("wheel") is not None)


@pytest.mark.slow  # pip builds a wheel (fetching setuptools into an isolated build where this one is too old)
def test_wheel_carries_the_recording(tmp_path):
    """What ``pip install .`` installs: the wheel lists the recording, and installed into a bare
    folder it loads the tosses from there, run from outside the repository."""
    pytest.importorskip("setuptools")
    src = _source_copy(tmp_path / "src")
    isolation = ["--no-build-isolation"] if _build_here() else []
    pip = [sys.executable, "-m", "pip", "-q"]
    _run([*pip, "wheel", "--no-deps", *isolation, "-w", str(tmp_path / "whl"), str(src)])
    (wheel,) = (tmp_path / "whl").glob("diffmjx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in RECORDING_FILES:
        assert f"diffmjx/sysid/recordings/{name}" in names
    site = tmp_path / "site"
    _run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)])
    _assert_found_in(site, _resolve_from(site, tmp_path))
