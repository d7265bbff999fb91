"""The shipped scenes (``diffmjx.scenes``) and the C-engine reference (``diffmjx.reference``)."""

import warnings

import mujoco
import numpy as np
import pytest
from mujoco import mjx

from diffmjx import scenes
from diffmjx.reference import c_engine_rk4

SHIPPED = (
    "actuated_hinge",
    "billiard",
    "box_drop",
    "box_pair",
    "box_stack",
    "contactnets_cube",
    "cube_toss",
    "flick",
    "push",
    "pushed_box",
    "sphere_drop",
    "suite_block_push",
    "suite_box_tip",
    "suite_cartpole",
    "suite_double_cartpole",
    "suite_finger_turn",
    "suite_hopper",
    "suite_pendulum",
    "suite_reacher",
    "sysid_arm",
    "sysid_ball",
    "sysid_box",
    "sysid_finger",
    "sysid_legged",
    "tumbling_box",
    "two_balls",
)


def test_the_shipped_scenes_are_package_files():
    assert scenes.names() == SHIPPED
    assert scenes.DIR.is_dir() and scenes.DIR.parent.name == "diffmjx"
    assert scenes.path("cube_toss") == scenes.DIR / "cube_toss.xml"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scene_loads(name):
    mj, mx = scenes.load(name)
    assert isinstance(mj, mujoco.MjModel) and isinstance(mx, mjx.Model)
    assert (mx.nq, mx.nv, mx.ngeom, mx.nu) == (mj.nq, mj.nv, mj.ngeom, mj.nu)
    assert mj.nbody > 1  # a world and at least one body
    np.testing.assert_array_equal(np.asarray(mx.qpos0), mj.qpos0)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_limited_hinge_can_move(name):
    """A limited hinge's range spans more than a tenth of a radian: a range written in radians while
    the MJCF's default unit is degrees (``<compiler angle="radian"/>`` forgotten) pins the joint
    (the system-identification finger and legged body did: their fits could not see the servos)."""
    mj = mujoco.MjModel.from_xml_path(str(scenes.path(name)))
    hinge = (mj.jnt_type == mujoco.mjtJoint.mjJNT_HINGE) & (mj.jnt_limited == 1)
    span = np.diff(mj.jnt_range[hinge], axis=1).ravel()
    assert np.all(span > 0.1), (name, span)


def test_load_patches_opt_fields_before_the_model_is_put():
    mj, mx = scenes.load("cube_toss", timestep=0.005, iterations=7)
    assert mj.opt.timestep == 0.005 and mj.opt.iterations == 7
    assert float(mx.opt.timestep) == 0.005 and int(mx.opt.iterations) == 7
    assert scenes.load("cube_toss")[0].opt.timestep == 0.01  # the file is untouched


@pytest.mark.parametrize("lookup", [scenes.path, scenes.load])
def test_an_unknown_scene_names_the_known_ones(lookup):
    with pytest.raises(ValueError, match="scene 'cube_tos' is not known") as err:
        lookup("cube_tos")
    assert all(name in str(err.value) for name in SHIPPED)


@pytest.mark.parametrize(
    "kind, geom_type",
    [
        ("ball", mujoco.mjtGeom.mjGEOM_SPHERE),
        ("cube", mujoco.mjtGeom.mjGEOM_BOX),
        ("capsule", mujoco.mjtGeom.mjGEOM_CAPSULE),
        ("cylinder", mujoco.mjtGeom.mjGEOM_CYLINDER),
        ("ellipsoid", mujoco.mjtGeom.mjGEOM_ELLIPSOID),
    ],
)
def test_primitive_swaps_the_thrown_geom(kind, geom_type):
    mj, mx = scenes.primitive(kind)
    toss, _ = scenes.load("cube_toss")
    assert mj.ngeom == 2 and mj.geom_type[1] == geom_type and mj.geom_type[0] == mujoco.mjtGeom.mjGEOM_PLANE
    assert isinstance(mx, mjx.Model)
    # the same density: the mass scales with the volume
    volume = {
        "ball": 4 / 3 * np.pi * 0.05**3,
        "cube": 0.1**3,
        "cylinder": np.pi * 0.05**2 * 0.1,
        "capsule": np.pi * 0.03**2 * (0.1 + 4 / 3 * 0.03),
        "ellipsoid": 4 / 3 * np.pi * 0.06 * 0.05 * 0.04,
    }
    np.testing.assert_allclose(mj.body_mass[1], 100 * volume[kind], rtol=1e-12)
    np.testing.assert_allclose(toss.body_mass[1], 100 * 0.1**3, rtol=1e-12)
    assert set(scenes.PRIMITIVES) == {"ball", "cube", "capsule", "cylinder", "ellipsoid"}


def test_an_unknown_primitive_names_the_known_ones():
    with pytest.raises(ValueError, match="ball, cube, capsule, cylinder, ellipsoid"):
        scenes.primitive("torus")


def test_cube_toss_data_sets_the_documented_initial_state():
    mj, mx = scenes.load("cube_toss")
    assert scenes.CUBE_TOSS == {"qz0": 0.2, "vy0": -0.1, "u0": -2.0, "horizon": 100}
    d = scenes.cube_toss_data(mx)
    np.testing.assert_array_equal(np.asarray(d.qpos), [0.0, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(d.qvel), [0.0, -0.1, -2.0, 0.0, 0.0, 0.0])
    d = scenes.cube_toss_data(mx, u0=-1.5)
    np.testing.assert_array_equal(np.asarray(d.qvel), [0.0, -0.1, -1.5, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(mj.qpos0, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def test_box_corner_heights_of_the_tilted_cube():
    """The cube is turned 60 degrees about x: its corners sit at 0.2 +- 0.05 (sin 60 +- cos 60), twice each."""
    _, mx = scenes.load("cube_toss")
    heights = scenes.box_corner_heights(mx, [0.0, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0])
    s, c = np.sin(np.pi / 3), np.cos(np.pi / 3)
    expected = 0.2 + 0.05 * np.repeat([-(s + c), -(s - c), s - c, s + c], 2)
    np.testing.assert_allclose(heights, expected, atol=1e-12)


FALL = """
<mujoco>
  <option timestep="0.01" gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="ball" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1" mass="2"/></body>
    <body name="slider" pos="0 1 0"><joint name="z" type="slide" axis="0 0 1"/><geom type="box" size="0.1 0.1 0.1" mass="4"/></body>
  </worldbody>
  <actuator><motor joint="z" gear="1"/></actuator>
</mujoco>
"""


def test_c_engine_rk4_integrates_free_fall_and_a_held_force_exactly():
    """RK4 is exact for constant accelerations: the ball follows z0 + v0 t - g t^2 / 2 and
    x0 + vx t, and the slider pushed by the held control F = 10 N follows v0 t + (F / m - g) t^2 / 2."""
    mj = mujoco.MjModel.from_xml_string(FALL)
    g, t, force, mass = 9.81, 0.7, 10.0, 4.0
    qpos = mj.qpos0.copy()
    qvel = np.zeros(mj.nv)
    qvel[:3] = [0.3, 0.0, 2.0]  # the ball thrown up and sideways
    qvel[6] = -0.5  # the slider moving down
    seen = []
    data = c_engine_rk4(mj, t, 1e-3, qpos, qvel, ctrl=[force], each_step=lambda d: seen.append(d.time))
    assert len(seen) == 700 and abs(data.time - t) < 1e-12
    np.testing.assert_allclose(data.qpos[:3], [0.3 * t, 0.0, 1.0 + 2.0 * t - g * t**2 / 2], rtol=0, atol=1e-9)
    np.testing.assert_allclose(data.qvel[:3], [0.3, 0.0, 2.0 - g * t], rtol=0, atol=1e-9)
    np.testing.assert_allclose(data.qpos[3:7], [1.0, 0.0, 0.0, 0.0], rtol=0, atol=1e-12)
    a = force / mass - g
    np.testing.assert_allclose(data.qpos[7], -0.5 * t + a * t**2 / 2, rtol=0, atol=1e-9)
    assert mj.opt.timestep == 0.01 and mj.opt.integrator == mujoco.mjtIntegrator.mjINT_EULER  # mj untouched


def test_c_engine_rk4_starts_from_the_model_state_by_default():
    mj = mujoco.MjModel.from_xml_string(FALL)
    data = c_engine_rk4(mj, 0.5, 1e-3)
    np.testing.assert_allclose(data.qpos[2], 1.0 - 9.81 * 0.5**2 / 2, rtol=0, atol=1e-9)
    np.testing.assert_allclose(data.qpos[7], -9.81 * 0.5**2 / 2, rtol=0, atol=1e-9)


def test_c_engine_rk4_warns_where_refsafe_makes_another_physics():
    """A 5 ms solref below twice the 10 ms step: MJX raises it to 20 ms, the reference at 1 ms does not."""
    soft = FALL.replace('<flag contact="disable"/>', "").replace(
        'size="0.1" mass="2"', 'size="0.1" mass="2" solref="0.005 1"'
    )
    mj = mujoco.MjModel.from_xml_string(soft)
    with pytest.warns(UserWarning, match="refsafe is on and solref time constants down to 0.005 s") as caught:
        c_engine_rk4(mj, 0.01, 1e-3)
    assert caught[0].filename == __file__  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c_engine_rk4(mj, 0.01, 0.01)  # the model's own step: the same physics
        mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_REFSAFE
        c_engine_rk4(mj, 0.01, 1e-3)
        scenes.c_engine_cube_toss(-2.0, dt=1e-3, seconds=0.01)  # the shipped scenes disable refsafe
