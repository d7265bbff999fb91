"""The finite-difference peer (``mujoco.sysid``, C engine): loss identity, a side-length fit, errors.

No JAX compilation: the reference loss is a NumPy re-implementation of ``segment_loss`` on
rollouts stepped here with ``mujoco.mj_step`` (from each recorded state, zero warm start).
"""

import sys
import types

import mujoco
import numpy as np
import pytest
from conftest import near_table_segments

from diffmjx import sysid
from diffmjx.sysid import CubeParams, fit_mujoco_sysid

pytest.importorskip("tabulate", reason='mujoco.sysid needs its extras: pip install "mujoco[sysid]"')

HORIZON = 4
START_SIDE = 0.095  # m; the cube still reaches the table within the horizon in the chosen segments
TRUE_SIDE = 0.1048


@pytest.fixture(scope="module")
def near_table():
    """20 training segments that come within 6 cm of the table while sliding (seeded choice)."""
    return near_table_segments(20, HORIZON)


def _reference_loss(params, qpos, qvel, velocity_weight=0.0, iterations=2):
    """``segment_loss`` in NumPy on C-engine rollouts (``mj_step``, zero warm start per segment)."""
    m = sysid.cube_mjmodel(params, iterations=iterations)
    d = mujoco.MjData(m)
    rot, rot_rec = np.zeros(9), np.zeros(9)
    errors = []
    for qp, qv in zip(qpos, qvel, strict=True):
        mujoco.mj_resetData(m, d)
        d.qpos[:], d.qvel[:] = qp[0], qv[0]
        for k in range(1, qp.shape[0]):
            mujoco.mj_step(m, d)
            mujoco.mju_quat2Mat(rot, d.qpos[3:7] / np.linalg.norm(d.qpos[3:7]))
            mujoco.mju_quat2Mat(rot_rec, qp[k, 3:7] / np.linalg.norm(qp[k, 3:7]))
            errors.append(
                np.sum((d.qpos[:3] - qp[k, :3]) ** 2)
                + np.sum((rot - rot_rec) ** 2)
                + velocity_weight * np.sum((d.qvel - qv[k]) ** 2)
            )
    return float(np.mean(errors))


@pytest.fixture(scope="module")
def side_fit(near_table):
    qpos, qvel = near_table
    return fit_mujoco_sysid(qpos, qvel, CubeParams(side_length=START_SIDE), ["side_length"])


def test_side_length_fit_moves_towards_the_cube(side_fit):
    r = side_fit
    assert r.loss_final < 0.8 * r.loss_init, r
    side = float(r.params.side_length)
    assert abs(side - TRUE_SIDE) < abs(START_SIDE - TRUE_SIDE), r  # measured: 0.1020 from 0.095
    assert r.evaluations > 0 and r.iterations is not None and r.iterations >= 1 and r.wall_s > 0, r
    fixed = CubeParams()
    for name in ("mass", "solref", "solimp", "friction"):  # only the free field moves
        np.testing.assert_array_equal(getattr(r.params, name), getattr(fixed, name))


def test_losses_equal_segment_loss_on_c_rollouts(near_table, side_fit):
    qpos, qvel = near_table
    init = CubeParams(side_length=START_SIDE)
    assert side_fit.loss_init == pytest.approx(_reference_loss(init, qpos, qvel), rel=1e-9)
    assert side_fit.loss_final == pytest.approx(_reference_loss(side_fit.params, qpos, qvel), rel=1e-9)
    # with the velocity term and another iteration count (no optimiser step: only the losses)
    r = fit_mujoco_sysid(qpos, qvel, init, ["friction"], velocity_weight=0.3, iterations=4, max_iters=0)
    want = _reference_loss(init, qpos, qvel, velocity_weight=0.3, iterations=4)
    assert r.loss_init == pytest.approx(want, rel=1e-9)
    assert r.loss_init > _reference_loss(init, qpos, qvel, iterations=4)  # the velocity term counts


@pytest.mark.parametrize("free", [["side_length", "stiffness"], [], ["mass", "mass"]])
def test_bad_free_raises(near_table, free):
    qpos, qvel = near_table
    with pytest.raises(ValueError, match="side_length, mass, solref, solimp, friction|twice"):
        fit_mujoco_sysid(qpos[:1], qvel[:1], CubeParams(), free)


def test_init_outside_the_optimiser_box_raises(near_table):
    qpos, qvel = near_table
    with pytest.raises(ValueError, match="init.solimp=.*PEER_BOUNDS"):
        fit_mujoco_sysid(qpos[:1], qvel[:1], CubeParams(solimp=np.array([1e-4, 0.95, 0.01, 0.5, 2.0])), ["solimp"])


def test_missing_extras_raise_import_error(near_table, monkeypatch):
    empty = types.ModuleType("mujoco.sysid")  # what mujoco.sysid exports without its extras
    monkeypatch.setitem(sys.modules, "mujoco.sysid", empty)
    monkeypatch.setattr(mujoco, "sysid", empty, raising=False)
    qpos, qvel = near_table
    with pytest.raises(ImportError, match=r'pip install "mujoco\[sysid\]==3.17.0"'):
        fit_mujoco_sysid(qpos[:1], qvel[:1], CubeParams(), ["side_length"])
