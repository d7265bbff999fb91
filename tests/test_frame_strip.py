"""The MPC study's frame strip: rendered where offscreen OpenGL works, skipped cleanly where not."""

import csv

import numpy as np
import pytest

from experiments import myo_mpc


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished baoding run's executed trajectories: two methods, three states each."""
    out = tmp_path_factory.mktemp("myo_mpc")
    mj = myo_mpc.TASKS["baoding"](False)[0]
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


def test_strip_is_skipped_with_a_message_without_a_working_backend(run_dir, monkeypatch, capsys):
    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    assert myo_mpc.frame_strip("baoding", "quick", run_dir) is None
    assert "frame strip skipped: offscreen rendering does not work here" in capsys.readouterr().out
    assert not (run_dir / "myo_mpc_baoding_frames.png").exists()


def test_strip_is_skipped_before_any_run(tmp_path, capsys):
    assert myo_mpc.frame_strip("baoding", "quick", tmp_path) is None
    assert "run the study first" in capsys.readouterr().out


def test_strip_renders_every_method_where_a_backend_works(run_dir, monkeypatch, capsys):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    path = myo_mpc.frame_strip("baoding", "quick", run_dir, frames=3)
    if path is None:
        pytest.skip("no offscreen OpenGL backend (EGL, OSMesa) on this machine: " + capsys.readouterr().out)
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400
    assert np.std(img[..., :3]) > 0.05  # rendered scenes, not blank panels
    assert "2 methods x 3 frames" in capsys.readouterr().out
