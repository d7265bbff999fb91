"""The ContactNets cube through the generic path, and the residual's and batching's building blocks.

The cube study (``experiments/contactnets/``) is a user of :mod:`diffmjx.sysid`: its quantities are
generic :class:`~diffmjx.sysid.Parameter` s on the shipped MJCF ``contactnets_cube``, its tosses are
:class:`~diffmjx.sysid.Recording` s, and its residual is :class:`~diffmjx.sysid.Problem`'s with the
rotation-matrix metric. These tests check those pieces with the library alone (tests never import
``experiments``); one gradient program is compiled.
"""

import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmjx
from diffmjx import scenes, sysid
from diffmjx._mjx import mjx
from diffmjx.physics import manifold
from diffmjx.sysid import Parameter, ParameterSet, Recording, problem

TOSSES = Path(__file__).resolve().parents[1] / "data" / "contactnets" / "contactnets_cube_tosses.npz"
DT = 1.0 / 148.0  # the recordings' sample period
BOTH = ("floor", "cube")  # contact settings: one value shared by the two geoms
CUBE_PARAMS = [
    Parameter("geom_size", "cube", uniform=True),  # the half size; the body's inertia follows
    Parameter("body_mass", "cube"),
    Parameter("geom_solref", BOTH),
    Parameter("geom_solimp", BOTH),
    Parameter("geom_friction", BOTH, index=0),
]


def cube_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(scenes.path("contactnets_cube")))


def test_contactnets_tosses_are_recordings_of_the_cube():
    """The study's data as a user loads it: each toss's (T, 13) array is ``qpos | qvel`` of the free
    joint, one :class:`Recording` per toss, checked against the cube's model."""
    m = cube_model()
    with np.load(TOSSES) as f:
        names = sorted(f.files)[:3]
        arrays = {n: f[n] for n in names}
    recs = [Recording(qpos=a[:, :7], qvel=a[:, 7:], dt=DT, name=n).check(m) for n, a in arrays.items()]
    for r, a in zip(recs, arrays.values()):
        assert r.T == a.shape[0] - 1 and r.ctrl.shape == (r.T, 0) and r.dt == DT
        np.testing.assert_array_equal(r.qvel, a[:, 7:])
        np.testing.assert_allclose(np.linalg.norm(r.qpos[:, 3:], axis=1), 1.0, atol=1e-12)  # renormalised
        np.testing.assert_allclose(np.abs(r.qpos[:, 3:]), np.abs(a[:, 3:7]), atol=2e-3)  # within the tolerance
    ps = ParameterSet(m, CUBE_PARAMS)
    assert ps.labels[0].startswith("geom_size:cube") and ps.size == 1 + 1 + 2 + 5 + 1
    np.testing.assert_allclose(ps.start[:2], [0.0524, 0.37])


def test_quat_to_mat_matches_mujoco():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(5, 4))
    want = np.zeros((5, 9))
    for k in range(5):
        mujoco.mju_quat2Mat(want[k], q[k] / np.linalg.norm(q[k]))
    np.testing.assert_allclose(np.asarray(manifold.quat_to_mat(jnp.asarray(q))).reshape(5, 9), want, atol=1e-15)
    got = manifold.quat_to_mat(q, xp=np)  # the peer's NumPy path: the same function
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got.reshape(5, 9), want, atol=1e-15)


def test_matrix_residual_squares_to_the_state_error():
    """The one residual with the cube study's metric: per free-joint state its squared norm is
    |dp|^2 + ||dR||_F^2 + w_v |dqvel|^2, in JAX and in NumPy alike."""
    layout = manifold.JointLayout.from_model(cube_model())
    w = sysid.Weights(position=1.0, orientation=1.0, velocity=0.3, orientation_metric="matrix")
    rng = np.random.default_rng(5)
    qpos, qpos_rec = rng.normal(size=(2, 3, 4, 7))
    qvel, qvel_rec = rng.normal(size=(2, 3, 4, 6))
    r = np.asarray(problem.state_residuals(layout, jnp.asarray(qpos), jnp.asarray(qvel), qpos_rec, qvel_rec, w))
    assert r.shape == (3, 4, 18)
    r_np = problem.state_residuals(layout, qpos, qvel, qpos_rec, qvel_rec, w, xp=np)
    assert isinstance(r_np, np.ndarray)
    np.testing.assert_allclose(r_np, r, rtol=0, atol=1e-15)
    rot = manifold.quat_to_mat(qpos[..., 3:], xp=np) - manifold.quat_to_mat(qpos_rec[..., 3:], xp=np)
    want = (
        np.sum((qpos[..., :3] - qpos_rec[..., :3]) ** 2, axis=-1)
        + np.sum(rot**2, axis=(-2, -1))
        + 0.3 * np.sum((qvel - qvel_rec) ** 2, axis=-1)
    )
    np.testing.assert_allclose(np.sum(r**2, axis=-1), want, rtol=1e-14)


def test_batch_sharding_refuses_an_indivisible_batch():
    cpu = jax.devices()[0]
    with pytest.raises(ValueError, match=r"fit\.batch_size=3 is not divisible by the 2 visible devices"):
        sysid.batch_sharding(3, devices=[cpu, cpu], knob="fit.batch_size")
    batch, _ = sysid.batch_sharding(4, devices=[cpu])
    assert batch.spec == jax.sharding.PartitionSpec("batch")


def test_batching_auto_maps_adaptive_solves_on_a_cpu_and_refuses_unknown_values():
    """``auto``: one segment after another where step counts differ (adaptive, CPU), lock-step otherwise."""
    if jax.default_backend() != "cpu":
        pytest.skip("auto's choice on a CPU")
    assert sysid.resolve_batching("auto", diffmjx.Config()) == "map"
    assert sysid.resolve_batching("auto", diffmjx.Config().override("integrator.solver=mjx_euler")) == "vmap"
    assert sysid.resolve_batching("auto", diffmjx.Config().override("integrator.step_control=constant")) == "vmap"
    assert sysid.resolve_batching("vmap", diffmjx.Config()) == "vmap"
    with pytest.raises(ValueError, match="batching='scan' is not allowed; choose one of: auto, vmap, map"):
        sysid.resolve_batching("scan", diffmjx.Config())
    with pytest.raises(ValueError, match="fit.batching='scan' is not allowed; choose one of: auto, vmap, map"):
        sysid.FitConfig.load(None, ["batching=scan"])
    # map and vmap give the same rows (a function without a solve: bit for bit), in chunks or not
    x = jnp.arange(12.0).reshape(6, 2)
    f = lambda r: (jnp.sin(r) * r[::-1], r.sum())
    ref = jax.vmap(f)(x)
    for chunks in (1, 2, 3, 4):  # 4 does not divide 6: one map
        out = sysid.map_segments(f, (x,), "map", chunks)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
            np.testing.assert_array_equal(a, b)


def test_impedance_gradient_is_finite_and_right_beyond_solimp_width():
    """A tilted cube with one corner 0.5 mm deep, solimp width 1 mm and a non-integer power: the
    other contact candidates lie beyond the width, in the air. MJX's impedance gave NaN derivatives
    there (half size and all of solimp); DiffMJX differentiates the impedance itself, and the
    gradient with respect to the generic parameters equals central differences."""
    m = cube_model()
    ps = ParameterSet(m, CUBE_PARAMS)
    base = mjx.put_model(m)
    v0 = np.array(ps.start, np.float64)
    v0[4:9] = [0.05, 0.95, 0.001, 0.4, 2.5]  # solimp
    # tilted about (1, 0.5, 0): one corner lowest, 0.5 mm deep (inside the width, where the power
    # shapes the impedance); the other candidates are in the air, beyond the width
    axis, angle, h = np.array([1.0, 0.5, 0.0]) / np.sqrt(1.25), 0.3, 0.0524
    quat = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, quat)
    corners = np.array([[sx, sy, sz] for sx in (-h, h) for sy in (-h, h) for sz in (-h, h)]) @ rot.reshape(3, 3).T
    depth = np.sort(corners[:, 2])
    assert depth[1] - depth[0] > 0.002  # the next corner is more than a width above the plane
    d = mjx.make_data(base)
    d = d.replace(qpos=jnp.asarray(np.concatenate([[0.0, 0.0, -depth[0] - 0.0005], quat])))

    def f(v):
        return jnp.sum(diffmjx.forward(ps.model(v, base), d).qacc * jnp.arange(1.0, 7.0))

    checked = [0, 2, 4, 5, 6, 7, 8]  # half size, solref's time constant, the five of solimp
    shifted = np.repeat(v0[None], 2 * len(checked), axis=0)
    for k, i in enumerate(checked):
        shifted[2 * k, i] *= 1 + 1e-6
        shifted[2 * k + 1, i] *= 1 - 1e-6
    grad, values = jax.jit(lambda v, b: (jax.grad(f)(v), jax.vmap(f)(b)))(jnp.asarray(v0), jnp.asarray(shifted))
    grad, values = np.asarray(grad), np.asarray(values).reshape(len(checked), 2)
    assert np.all(np.isfinite(grad)), dict(zip(ps.labels, grad))
    for k, i in enumerate(checked):
        want = (values[k, 0] - values[k, 1]) / (2e-6 * v0[i])
        assert abs(grad[i] - want) <= 1e-5 * abs(want) + 1e-9, (ps.labels[i], grad[i], want)
    assert abs(grad[8]) > 1e-3  # the power matters here: the check is not vacuous


def test_missing_peer_extras_raise_import_error(monkeypatch):
    empty = types.ModuleType("mujoco.sysid")  # what mujoco.sysid exports without its extras
    monkeypatch.setitem(sys.modules, "mujoco.sysid", empty)
    monkeypatch.setattr(mujoco, "sysid", empty, raising=False)
    rec = Recording(qpos=np.tile([0.0, 0, 1, 1, 0, 0, 0], (3, 1)), qvel=np.zeros((3, 6)), dt=DT)
    with pytest.raises(ImportError, match=r'pip install "mujoco\[sysid\]==3.17.0"'):
        sysid.identify_mujoco_sysid(cube_model(), [Parameter("geom_friction", BOTH, index=0)], [rec])
