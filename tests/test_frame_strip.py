"""The MPC study's frame strip: rendered where offscreen OpenGL works, skipped cleanly where not.

The strip is study output, so the study runs as a script (``--frames`` redraws the strip of a
finished run's ``<stem>_qpos.csv``); tests import no study module.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffmjx.scenes import myo

ROOT = Path(__file__).resolve().parents[1]


def _frames(out: Path, **env) -> subprocess.CompletedProcess:
    """``python -m experiments.myo_mpc --task baoding --frames --out OUT`` with ``env`` on top of ours
    (a value None removes the variable)."""
    environ = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    cmd = [
        sys.executable,
        "-m",
        "experiments.myo_mpc",
        "--task",
        "baoding",
        "--preset",
        "quick",
        "--frames",
        "--out",
        str(out),
    ]
    run = subprocess.run(cmd, cwd=ROOT, env=environ, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished baoding run's executed trajectories: two methods, three states each."""
    out = tmp_path_factory.mktemp("myo_mpc")
    mj = myo.TASKS["baoding"](False)[0]
    rows = [
        {"method": name, "step": k, **{f"q{i}": repr(float(v)) for i, v in enumerate(mj.qpos0)}}
        for name in ("gradient", "sampling 64")
        for k in range(3)
    ]
    with open(out / "myo_mpc_baoding_qpos.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out


@pytest.mark.slow  # suite budget: by default test_strip_is_skipped_before_any_run checks the frames command's guard
def test_strip_is_skipped_with_a_message_without_a_working_backend(run_dir):
    # MUJOCO_GL=disable: MuJoCo imports without any OpenGL context, so every render fails
    run = _frames(run_dir, MUJOCO_GL="disable")
    assert "frame strip skipped: offscreen rendering does not work here" in run.stdout
    assert not (run_dir / "myo_mpc_baoding_frames.png").exists()


def test_strip_is_skipped_before_any_run(tmp_path):
    run = _frames(tmp_path)
    assert "run the study first" in run.stdout
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # suite budget: a study script renders MyoSuite frames; the guard before any run is checked by default
def test_strip_renders_every_method_where_a_backend_works(run_dir):
    run = _frames(run_dir, MUJOCO_GL=None)
    path = run_dir / "myo_mpc_baoding_frames.png"
    if not path.exists():
        pytest.skip("no offscreen OpenGL backend (EGL, OSMesa) on this machine: " + run.stdout)
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    assert np.std(img[..., :3]) > 0.05  # rendered scenes, not blank panels
    assert "2 methods x 5 frames" in run.stdout  # --frames draws five frames per method
