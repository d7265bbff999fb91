"""Smoothed collision functions: converge to MJX's as sharpness grows, smooth gradients, wiring."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mujoco import mjx

import diffmjx
from diffmjx import _mjx
from diffmjx.physics import collision
from diffmjx.scenes import box_corner_heights, contacts_fn, cube_toss_loss, load, primitive

MODELS = {kind: primitive(kind)[1] for kind in ("cube", "capsule", "cylinder")}


@functools.lru_cache
def _contacts_fn(smooth: bool, sharpness: float, kind: str = "cube"):
    return jax.jit(contacts_fn(MODELS[kind], smooth, sharpness))


# jitted (one compile per model and rule set): eagerly, MJX's kinematics and collisions compile op by op
_detect = jax.jit(collision.detect, static_argnums=2)
_forward = jax.jit(diffmjx.forward, static_argnums=2)


@functools.lru_cache
def _kinematics(kind):
    return jax.jit(lambda d, qpos: _mjx.kinematics(MODELS[kind], d.replace(qpos=qpos)))


def _pose(quat, height):
    q = np.asarray(quat, dtype=float)
    q = q / np.linalg.norm(q)
    return jnp.array([0.0, 0.0, height, *q])


quats = st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(lambda q: np.linalg.norm(q) > 0.2)


@pytest.mark.parametrize("kind", ["cube", "capsule", "cylinder"])
@settings(max_examples=40, deadline=None)
@given(quat=quats, height=st.floats(0.0, 0.09))
def test_smoothed_pairs_converge_to_mjx(kind, quat, height):
    d = mjx.make_data(MODELS[kind])
    qpos = _pose(quat, height)
    # MJX's own case splits are discontinuous at their thresholds: skip poses exactly on them
    axis_z = float(np.asarray(_kinematics(kind)(d, qpos).geom_xmat[1])[2, 2])
    if kind == "capsule":
        assume(abs(np.sqrt(max(1 - axis_z**2, 0.0)) - 0.5) > 1e-6)
    if kind == "cylinder":
        assume(abs(abs(axis_z) * 0.05 - 1e-3) > 1e-6 and abs(axis_z) < 1 - 1e-9)
    ref = [np.asarray(x) for x in _contacts_fn(False, 0.0, kind)(qpos)]
    ours = [np.asarray(x) for x in _contacts_fn(True, 1e9, kind)(qpos)]
    # active contacts (dist < 0) carry the physics; compare them as sets ordered by depth
    act_ref, act = ref[0] < 0, ours[0] < -1e-9
    assert act_ref.sum() == act.sum()

    def order(dist, pos):  # contacts as a set: sort by depth, then position
        return np.lexsort((np.round(pos[:, 1], 7), np.round(pos[:, 0], 7), np.round(dist, 7)))

    o_ref = order(ref[0][act_ref], ref[1][act_ref])
    o = order(ours[0][act], ours[1][act])
    np.testing.assert_allclose(ours[0][act][o], ref[0][act_ref][o_ref], atol=1e-7)
    np.testing.assert_allclose(ours[1][act][o], ref[1][act_ref][o_ref], atol=1e-7)
    np.testing.assert_allclose(ours[2][act][o], ref[2][act_ref][o_ref], atol=1e-7)


@pytest.mark.parametrize("height", [0.12, 0.0695])
def test_plane_box_reports_true_gaps_above_the_plane(height):
    """Non-penetrating vertices keep their real distance (CFD builds rows from it), whatever the
    skin weight: a hovering cube reports its four lowest vertices' heights, not a fade to 0."""
    qpos = _pose([0.92, 0.38, 0.05, 0.0], height)
    heights = box_corner_heights(MODELS["cube"], qpos)
    dist = np.sort(np.asarray(_contacts_fn(True, 1e4)(qpos)[0]))
    above = heights[:4] > 0
    assert above.any()
    np.testing.assert_allclose(dist[-above.sum() :], heights[:4][above], atol=1e-12)
    assert (dist[: (~above).sum()] <= 0).all()


def _total_depth(qpos, sharpness):
    dist, _, _ = _contacts_fn(True, sharpness)(qpos)
    return jnp.sum(jnp.minimum(dist, 0.0))


@pytest.mark.parametrize(
    "quat, height",
    [
        ([1.0, 0.0, 0.0, 0.0], 0.049),  # face down: four-way tie
        ([0.924, 0.383, 0.0, 0.0], 0.0695),  # edge down: two-way tie
        ([0.924, 0.383, 0.02, 0.0], 0.0695),  # near the edge tie
        ([0.88, 0.3, 0.25, 0.2], 0.06),  # generic corner
    ],
)
def test_plane_box_gradient_matches_central_differences(quat, height):
    qpos = _pose(quat, height)
    f = jax.jit(lambda q: _total_depth(q, 1e4))
    g = np.asarray(jax.grad(f)(qpos))
    h = 1e-7
    fd = np.array([(f(qpos.at[i].add(h)) - f(qpos.at[i].add(-h))) / (2 * h) for i in range(7)])
    np.testing.assert_allclose(g, fd, atol=2e-5 * max(1.0, np.abs(fd).max()))


def _pyramid_term(frame, b):
    """A function of the friction frames that a pyramid cares about: normal, and tangents up to
    sign and 90-degree turns ((t1.c)^4 + (t2.c)^4 is invariant under exactly those)."""
    n, t1, t2 = frame[:, 0], frame[:, 1], frame[:, 2]
    return 1e-3 * (jnp.sum(n @ b[0]) + jnp.sum((t1 @ b[1]) ** 4 + (t2 @ b[1]) ** 4))


def _about_x(alpha_deg, kind):
    """Body turned about x by alpha; lowered so its lowest point penetrates the floor by 4 mm."""
    a = np.deg2rad(alpha_deg)
    az = abs(np.cos(np.deg2rad(60.0) + a))
    extent = 0.05 * az + (0.03 if kind == "capsule" else 0.05 * np.sqrt(max(1 - az * az, 0.0)))
    return jnp.array([0.0, 0.0, extent - 0.004, np.cos(a / 2), np.sin(a / 2), 0.0, 0.0])


def _contact_scalar(kind, sharpness):
    rng = np.random.default_rng(1)
    a, b = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=(3, 3)))
    fn = _contacts_fn(True, sharpness, kind)

    def scalar(qpos):
        dist, pos, frame = fn(qpos)
        pen = jnp.minimum(dist, 0.0)
        return jnp.sum(pen * (1.0 + pos @ a)) + _pyramid_term(frame, b)

    return jax.jit(scalar)


@pytest.mark.parametrize(
    "kind, alpha",
    [
        ("capsule", -30.0),  # tangent switch: projected axis length exactly 0.5
        ("capsule", -29.99),
        ("capsule", 10.0),
        ("cylinder", 30.0),  # lying exactly parallel
        ("cylinder", 28.85),  # |n . axis| * half-length near 1 mm
        ("cylinder", -59.999),  # nearly upright: rim direction ill-defined
        ("cylinder", 5.0),
    ],
)
def test_capsule_cylinder_gradients_match_central_differences(kind, alpha):
    f = _contact_scalar(kind, 1e4)
    qpos = _about_x(alpha, kind)
    assert float(f(qpos)) < 0  # in contact
    g = np.asarray(jax.grad(f)(qpos))
    h = 1e-7
    fd = np.array([(f(qpos.at[i].add(h)) - f(qpos.at[i].add(-h))) / (2 * h) for i in range(7)])
    np.testing.assert_allclose(g, fd, atol=1e-4 * max(1.0, np.abs(fd).max()))


def test_cube_toss_physics_does_not_move():
    _, mx = load("cube_toss")
    base = diffmjx.Config().override("integrator.rtol=1e-9", "integrator.atol=1e-9")
    hard = float(jax.jit(cube_toss_loss(mx, base))(-2.0))
    soft = float(jax.jit(cube_toss_loss(mx, base.override("collision.smooth=true")))(-2.0))
    assert abs(soft - hard) < 1e-4  # 0.1 mm; the published smoothed variant moved it by 4 cm


def test_bad_sharpness_and_unsupported_pair():
    with pytest.raises(ValueError, match=r"collision\.sharpness"):
        diffmjx.Config().override("collision.sharpness=0")
    with pytest.raises(ValueError, match=r"collision\.sharpness"):
        diffmjx.Config().override("collision.sharpness='sharp'")
    import mujoco

    xml = """<mujoco><worldbody><body><freejoint/><geom type="cylinder" size="0.1 0.1"/></body>
      <body pos="0 0 1"><freejoint/><geom type="box" size="0.1 0.1 0.1"/></body></worldbody></mujoco>"""
    mj = mujoco.MjModel.from_xml_string(xml)
    with pytest.raises(ValueError, match="cylinder-box.*supported pairs"):
        collision.check_model(mj)


PAIR_XML = """<mujoco><option gravity="0 0 0"/><worldbody>
  <body><freejoint/><geom type="capsule" size="0.03 0.08"/></body>
  <body pos="0 0 0.2"><freejoint/><geom {other}/></body></worldbody></mujoco>"""
PAIRS = {"sphere": 'type="sphere" size="0.05"', "capsule": 'type="capsule" size="0.04 0.06"'}


@functools.lru_cache
def _pair_fn(other: str, smooth: bool, sharpness: float):
    import mujoco

    mx = mjx.put_model(mujoco.MjModel.from_xml_string(PAIR_XML.format(other=PAIRS[other])))
    return jax.jit(contacts_fn(mx, smooth, sharpness))


def _quat_axis(q):
    """Body z axis of the unit quaternion q (w, x, y, z)."""
    w, x, y, z = q
    return np.array([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)])


def _pair_qpos(q1, q2, offset):
    q1, q2 = np.asarray(q1) / np.linalg.norm(q1), np.asarray(q2) / np.linalg.norm(q2)
    return jnp.asarray(np.r_[0, 0, 0, q1, offset, q2])


@pytest.mark.parametrize("other", ["sphere", "capsule"])
@settings(max_examples=40, deadline=None)
@given(q1=quats, q2=quats, offset=st.lists(st.floats(-0.12, 0.12), min_size=3, max_size=3))
def test_sphere_and_capsule_capsule_converge_to_mjx(other, q1, q2, offset):
    # hypothesis favours symmetric values (exact ties between MJX's candidate pairs, where any
    # choice is right): a fixed irrational nudge moves examples off those measure-zero sets
    jitter = np.sqrt([2.0, 3.0, 5.0, 7.0]) * 1e-3
    qpos = _pair_qpos(np.add(q1, jitter), np.add(q2, jitter[::-1]), np.add(offset, jitter[:3]))
    if other == "capsule":  # parallel axes touch along a segment: any point of it is MJX's answer
        r1 = np.asarray(_quat_axis(np.asarray(qpos[3:7])))
        r2 = np.asarray(_quat_axis(np.asarray(qpos[10:14])))
        assume(abs(abs(r1 @ r2) - 1.0) > 1e-6)
    ref = [np.asarray(x) for x in _pair_fn(other, False, 0.0)(qpos)]
    ours = [np.asarray(x) for x in _pair_fn(other, True, 1e12)(qpos)]
    n_ref = ref[2][0, 0]
    assume(abs(abs(n_ref[1]) - 0.5) > 1e-6)  # MJX's frame switch itself
    radii = 0.03 + (0.05 if other == "sphere" else 0.04)
    assume(ref[0][0] > -0.5 * radii)  # near-intersecting axes: the normal is ill-conditioned for both
    # near-ties of MJX's two candidate point pairs blend them; both are then equally close
    tol = 1e-7 if other == "sphere" else 1e-5
    np.testing.assert_allclose(ours[0], ref[0], atol=tol)
    np.testing.assert_allclose(ours[1], ref[1], atol=tol)
    np.testing.assert_allclose(ours[2], ref[2], atol=max(tol, 2e-6))


@pytest.mark.parametrize(
    "other, q2, offset",
    [
        ("sphere", [1, 0, 0, 0], [0.0, 0.0, 0.12]),  # beyond the capsule's end: clamp corner
        ("sphere", [1, 0, 0, 0], [0.06, 0.03, 0.05]),  # normal with |n_y| near 0.5: frame blend
        ("capsule", [1, 0, 0, 0], [0.06, 0.0, 0.0]),  # parallel axes: the end-point case split
        ("capsule", [0.92, 0.38, 0, 0], [0.05, 0.02, 0.13]),  # ends nearly equidistant
    ],
)
def test_sphere_and_capsule_capsule_gradients(other, q2, offset):
    rng = np.random.default_rng(2)
    a, b = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=(3, 3)))
    fn = _pair_fn(other, True, 1e4)

    def scalar(qpos):
        dist, pos, frame = fn(qpos)
        return jnp.sum(dist * (1.0 + pos @ a)) + _pyramid_term(frame, b)

    f = jax.jit(scalar)
    qpos = _pair_qpos([1, 0, 0, 0], q2, offset)
    g = np.asarray(jax.grad(f)(qpos))
    h = 1e-7
    fd = np.array([(f(qpos.at[i].add(h)) - f(qpos.at[i].add(-h))) / (2 * h) for i in range(14)])
    np.testing.assert_allclose(g, fd, atol=1e-4 * max(1.0, np.abs(fd).max()))


def test_plane_box_deepest_keeps_every_penetrating_corner():
    """MJX's plane-box keeps only vertices within 1 mm of the deepest; ``collision.plane_box=deepest``
    (the default) reports the four deepest at their true distances, as MuJoCo's C engine reports
    every penetrating vertex, so a corner cannot drop out of the contact set while in the plane."""
    mx = MODELS["cube"]
    tilt = _pose([0.92, 0.38, 0.05, 0.0], 0.0)
    heights = box_corner_heights(mx, tilt)
    assert heights[1] - heights[0] > 2e-3  # the two lowest corners are more than MJX's skin apart
    qpos = tilt.at[2].set(-heights[1] - 1e-3)  # second-lowest corner 1 mm deep, the lowest deeper
    truth = box_corner_heights(mx, qpos)[:4]
    d = mjx.make_data(mx).replace(qpos=qpos)
    stock = np.asarray(_detect(mx, d, None).dist)
    rules = diffmjx.CollisionConfig(plane_box="deepest", plane_cylinder="mjx", box_box="mjx")
    deepest = np.asarray(_detect(mx, d, rules).dist)
    smooth = diffmjx.CollisionConfig(
        smooth=True, sharpness=1e4, plane_box="deepest", plane_cylinder="mjx", box_box="mjx"
    )
    smooth_deepest = np.asarray(_detect(mx, d, smooth).dist)
    assert (stock < 0).sum() == 1  # MJX drops the second penetrating corner
    np.testing.assert_allclose(np.sort(deepest), truth, atol=1e-12)
    np.testing.assert_allclose(np.sort(smooth_deepest), truth, atol=1e-12)
    assert (deepest < 0).sum() == 2
    # the rule is a config knob that reaches the forward pass; a bad value names the field
    cfg = diffmjx.Config()
    assert cfg.collision.plane_box == "deepest"
    n_active = [
        int((np.asarray(_mjx.contact(_forward(mx, d, cfg.override(f"collision.plane_box={rule}"))).dist) < 0).sum())
        for rule in ("deepest", "mjx")
    ]
    assert n_active == [2, 1]
    with pytest.raises(ValueError, match=r"collision.plane_box.*deepest, mjx"):
        cfg.override("collision.plane_box=all")


def test_plane_cylinder_deepest_keeps_the_far_end_in_contact():
    """A cylinder lying on a plane, tilted so that its far end is 4 mm higher than its near end,
    pressed in 5 mm: both ends penetrate. MJX reports the far end only within 1 mm of parallel, so
    it drops that contact; the ``deepest`` rule keeps it at its true distance."""
    mx = MODELS["cylinder"]
    radius, half = (float(x) for x in np.asarray(mx.geom_size[1])[:2])
    a_z = 2e-3 / half  # |n . axis| * half-length = 2 mm, past MJX's 1 mm
    theta = np.arccos(a_z) - np.pi / 3  # about x; the geom itself sits at euler="60 0 0" in its body
    quat = [np.cos(theta / 2), np.sin(theta / 2), 0.0, 0.0]
    rim = radius * np.sqrt(1 - a_z**2)  # a disk's lowest rim point is this far below its centre
    z = rim + half * a_z - 5e-3  # near end 5 mm deep, far end 1 mm deep
    qpos = _pose(quat, z)
    truth = np.array([z - half * a_z - rim, z + half * a_z - rim])
    np.testing.assert_allclose(truth, [-5e-3, -1e-3], atol=1e-12)
    d = mjx.make_data(mx).replace(qpos=qpos)
    np.testing.assert_allclose(float(np.asarray(_kinematics("cylinder")(d, qpos).geom_xmat[1])[2, 2]), a_z, atol=1e-12)
    stock = np.asarray(_detect(mx, d, None).dist)
    assert (stock < 0).sum() == 1  # MJX drops the far end
    for smooth in (False, True):
        rules = diffmjx.CollisionConfig(
            smooth=smooth, sharpness=1e4, plane_box="mjx", plane_cylinder="deepest", box_box="mjx"
        )
        dist = np.sort(np.asarray(_detect(mx, d, rules).dist))
        np.testing.assert_allclose(dist[:2], truth, atol=1e-12)
        assert dist[2] > 0.01  # the third slot: the near disk's 120-degree point, well above
    cfg = diffmjx.Config()
    assert cfg.collision.plane_cylinder == "deepest"
    n_active = [
        int(
            (np.asarray(_mjx.contact(_forward(mx, d, cfg.override(f"collision.plane_cylinder={rule}"))).dist) < 0).sum()
        )
        for rule in ("deepest", "mjx")
    ]
    assert n_active == [2, 1]
    with pytest.raises(ValueError, match=r"collision.plane_cylinder.*deepest, mjx"):
        cfg.override("collision.plane_cylinder=both")


def test_plane_cylinder_deepest_keeps_its_rim_contacts_still_through_upright():
    """A cylinder rocking through upright on its end: MJX's three rim points follow the tilt's
    direction, which turns by 180 deg as the tilt passes through zero, so they jump across the
    disk while all of them press in (90 % gradient error on a cylinder landing on its end). The
    ``deepest`` rule anchors them to the body below ``UPRIGHT_TILT``: they move continuously, and
    beyond three times that tilt they are MJX's own."""
    from types import SimpleNamespace

    from diffmjx.physics.collision.pairs import UPRIGHT_TILT, cylinder_candidates, plane_cylinder_deepest

    radius, half, depth = 0.05, 0.04, 3e-3
    plane = SimpleNamespace(pos=jnp.zeros(3), mat=jnp.eye(3))
    turn = jnp.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # body x along world y

    def cylinder(tilt):  # tilted by `tilt` about the world y axis, its lowest rim point 3 mm deep
        c, s = jnp.cos(tilt), jnp.sin(tilt)
        mat = jnp.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]]) @ turn
        z = half * c + radius * jnp.abs(s) - depth
        return SimpleNamespace(pos=jnp.array([0.0, 0.0, z]), mat=mat, size=jnp.array([radius, half, 0.0]))

    @jax.jit
    def contacts(tilt):
        dist, pos, _ = plane_cylinder_deepest(plane, cylinder(tilt))
        return dist, pos

    @jax.jit
    def stock(tilt):  # MJX's rim direction: the same candidates without the anchor
        _, _, (p1, _, p2b, _), _ = cylinder_candidates(plane, cylinder(tilt), None)
        return jnp.stack([p1, p2b])

    tilts = np.linspace(-4 * UPRIGHT_TILT, 4 * UPRIGHT_TILT, 801)  # through upright, steps of 1e-4 rad
    dist, pos = (np.stack(x) for x in zip(*[[np.asarray(a) for a in contacts(t)] for t in tilts]))
    ref = np.stack([np.asarray(stock(t)) for t in tilts])
    assert (dist[np.abs(tilts) <= UPRIGHT_TILT] < 0).all()  # near upright all three rim points press in
    # continuous: neighbouring tilts move a contact by far less than the disk's size (MJX: a diameter)
    assert np.abs(np.diff(pos, axis=0)).max() < 0.01 * radius
    assert np.abs(np.diff(ref, axis=0)).max() > radius
    far = np.abs(tilts) > 3 * UPRIGHT_TILT + 1e-9
    np.testing.assert_allclose(pos[far][:, [0, 2]], ref[far], atol=1e-12)
    assert np.isfinite(np.asarray(jax.jacfwd(lambda t: contacts(t)[1])(0.0))).all()  # exactly upright


_SPHERE_CYLINDER_XML = """
<mujoco>
  <worldbody>
    <geom name="cyl" type="cylinder" size="0.1 0.05" pos="0.01 -0.02 0.3" euler="20 -10 35"/>
    <body name="ball"><freejoint/><geom name="ball" type="sphere" size="0.02"/></body>
  </worldbody>
</mujoco>
"""


def _ball_qpos(mj, local, geom="cyl"):
    """Ball centre at ``local`` in the frame of the fixed geom ``geom``."""
    import mujoco

    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)
    g = mj.geom(geom).id
    q = np.zeros(mj.nq)
    q[:3] = d.geom_xpos[g] + d.geom_xmat[g].reshape(3, 3) @ np.asarray(local)
    q[3] = 1.0
    return q


# ball centres in the cylinder's frame (radius 0.1, half height 0.05; ball radius 0.02): beside the
# side, above the cap, off the rim, just penetrating the cap, on the axis (MJX's distance search
# gives a NaN derivative just above a cap), deep inside nearer the side, exactly on the rim
SPHERE_CYLINDER_POSES = {
    "side": (0.13, 0.02, 0.01),
    "cap": (0.03, -0.04, 0.08),
    "rim": (0.11, 0.03, 0.07),
    "cap_penetrating": (0.02, 0.01, 0.065),
    "axis": (0.0, 0.0, 0.0745),
    "inside_near_side": (0.085, 0.0, 0.0),
    "on_rim": (0.1, 0.0, 0.05),
}


def _ball_scene(xml):
    """A ball on a free joint beside a fixed geom: the model, the ball's first contact
    (distance, position, frame) through DiffMJX's collision stage, and the distance's Jacobian."""
    import mujoco

    mj = mujoco.MjModel.from_xml_string(xml)
    mx = mjx.put_model(mj)
    d0 = mjx.make_data(mx)

    def contact(qpos):
        rules = diffmjx.CollisionConfig(plane_box="deepest", plane_cylinder="mjx", box_box="mjx")
        c = collision.detect(mx, d0.replace(qpos=qpos), rules)
        return c.dist[0], c.pos[0], c.frame[0]

    return mj, jax.jit(contact), jax.jit(jax.jacrev(lambda q: contact(q)[0]))


def _check_ball_contact(scene, other, q, exact=True, differentiable=True):
    """The ball's contact with geom ``other`` at ``q`` against the C engine: distance equal to
    ``mj_geomDistance`` (if ``exact``), normal from the ball's nearest point to the other geom's,
    unit frame, finite Jacobian equal to central differences (if ``differentiable``)."""
    import mujoco

    mj, contact, jac = scene
    dist, _pos, frame = (np.asarray(x) for x in contact(q))
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    fromto = np.zeros(6)
    c_dist = mujoco.mj_geomDistance(mj, d, mj.geom("ball").id, mj.geom(other).id, 1.0, fromto)
    if exact:
        assert dist == pytest.approx(c_dist, abs=1e-6)
    if dist > 1e-6:
        along = fromto[3:] - fromto[:3]
        np.testing.assert_allclose(frame[0], along / np.linalg.norm(along), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(frame, axis=1), 1.0, atol=1e-12)
    g = np.asarray(jac(jnp.asarray(q)))
    assert np.all(np.isfinite(g)) and np.any(g != 0)
    if differentiable:
        h = 1e-7
        for i in range(3):
            e = np.zeros(mj.nq)
            e[i] = h
            fd = (float(contact(q + e)[0]) - float(contact(q - e)[0])) / (2 * h)
            assert g[i] == pytest.approx(fd, abs=1e-6)


@pytest.fixture(scope="module")
def sphere_cylinder_scene():
    return _ball_scene(_SPHERE_CYLINDER_XML)


@pytest.mark.parametrize("pose", list(SPHERE_CYLINDER_POSES))
def test_sphere_cylinder_is_exact_with_finite_derivatives(sphere_cylinder_scene, pose):
    """DiffMJX's closed-form sphere-cylinder: the distance equals MuJoCo's C engine
    (``mj_geomDistance``; skipped where the ball is deep inside, which the C engine does not
    resolve), the normal points from the ball into the cylinder, and the derivative of the
    distance is finite and equals central differences (skipped exactly on the rim, where the
    distance has a kink)."""
    mj = sphere_cylinder_scene[0]
    q = _ball_qpos(mj, SPHERE_CYLINDER_POSES[pose])
    _check_ball_contact(
        sphere_cylinder_scene, "cyl", q, exact=pose != "inside_near_side", differentiable=pose != "on_rim"
    )


_SPHERE_BOX_XML = """
<mujoco>
  <worldbody>
    <geom name="box" type="box" size="0.1 0.06 0.04" pos="0.01 -0.02 0.3" euler="20 -10 35"/>
    <body name="ball"><freejoint/><geom name="ball" type="sphere" size="0.02"/></body>
  </worldbody>
</mujoco>
"""
# ball centres in the box's frame (half sizes 0.1, 0.06, 0.04; ball radius 0.02): 3 cm off a face
# (the tennis ball beside the racket), off an edge, off a corner, 30 cm away (MJX reports 1 for all
# four), touching a face, just penetrating a face, deep inside nearer the smallest face
SPHERE_BOX_POSES = {
    "face": (0.02, 0.01, 0.09),
    "edge": (0.12, 0.08, 0.0),
    "corner": (0.13, -0.07, 0.06),
    "far": (0.0, 0.3, 0.1),
    "touching": (0.03, 0.02, 0.06),
    "penetrating": (-0.05, 0.0, 0.055),
    "inside": (0.02, 0.01, 0.03),
}


@pytest.fixture(scope="module")
def sphere_box_scene():
    return _ball_scene(_SPHERE_BOX_XML)


@pytest.mark.parametrize("pose", list(SPHERE_BOX_POSES))
def test_sphere_box_gives_the_true_distance_apart_and_touching(sphere_box_scene, pose):
    """DiffMJX's closed-form sphere-box: the signed distance equals MuJoCo's C engine
    (``mj_geomDistance``) apart and touching, where MJX reports 1 for every separated pose (so
    contacts from distance would see nothing); the normal points from the ball into the box; the
    derivative equals central differences."""
    q = _ball_qpos(sphere_box_scene[0], SPHERE_BOX_POSES[pose], geom="box")
    _check_ball_contact(sphere_box_scene, "box", q)


_CAPSULE_BOX_XML = """
<mujoco>
  <worldbody>
    <geom name="box" type="box" size="0.1 0.06 0.04" pos="0.01 -0.02 0.3" euler="20 -10 35"/>
    <body name="cap"><freejoint/><geom name="cap" type="capsule" size="0.01 0.03"/></body>
  </worldbody>
</mujoco>
"""
# capsule centre and axis in the box's frame (half sizes 0.1, 0.06, 0.04; capsule radius 0.01, half
# length 0.03): apart off a face (tilted), off an edge, off a corner, lying parallel to a face, far
# away (MJX reports 1 for all five), and lying on a face pressed in 2 mm (MJX's manifold kept)
CAPSULE_BOX_POSES = {
    "face": ((0.02, 0.01, 0.09), (0.3, 0.2, 1.0)),
    "edge": ((0.14, 0.09, 0.0), (0.0, 0.0, 1.0)),
    "corner": ((0.13, -0.08, 0.07), (1.0, -1.0, 1.0)),
    "parallel": ((0.0, 0.0, 0.07), (1.0, 0.0, 0.0)),
    "far": ((0.0, 0.3, 0.1), (0.0, 1.0, 0.2)),
    "pressed": ((0.0, 0.0, 0.048), (1.0, 0.0, 0.0)),
}


@pytest.fixture(scope="module")
def capsule_box_scene():
    import mujoco

    mj = mujoco.MjModel.from_xml_string(_CAPSULE_BOX_XML)
    mx = mjx.put_model(mj)
    d0 = mjx.make_data(mx)

    def contact(qpos, rule="deepest"):  # "mjx": MJX's own collision stage
        rules = diffmjx.CollisionConfig(
            plane_box=rule,
            plane_cylinder=rule,
            box_box="mjx",
            capsule_capsule="mjx",
            capsule_box="blended" if rule != "mjx" else "mjx",
        )
        c = collision.detect(mx, d0.replace(qpos=qpos), rules)
        return c.dist, c.pos, c.frame

    return (
        mj,
        jax.jit(contact),
        jax.jit(functools.partial(contact, rule="mjx")),
        jax.jit(jax.jacrev(lambda q: contact(q)[0][0])),
    )


def _capsule_box_qpos(mj, centre, axis):
    import mujoco

    q = _ball_qpos(mj, centre, geom="box")
    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)
    world_axis = d.geom_xmat[mj.geom("box").id].reshape(3, 3) @ (np.asarray(axis) / np.linalg.norm(axis))
    quat = np.zeros(4)
    mujoco.mju_quatZ2Vec(quat, world_axis)
    q[3:7] = quat
    return q


def _capsule_box_load(contact_fn, mj, q):
    """Depth-weighted sums of the penetrating contacts: normal (a force proxy) and moment about the
    box's origin (a torque proxy), in the box's frame."""
    dist, pos, frame = (np.asarray(x) for x in contact_fn(jnp.asarray(q)))
    import mujoco

    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    g = mj.geom("box").id
    rot, origin = d.geom_xmat[g].reshape(3, 3), d.geom_xpos[g]
    depth = np.maximum(-dist, 0.0)[:, None]
    n = frame[:, 0] @ rot
    p = (pos - origin) @ rot
    return np.r_[(depth * n).sum(0), (depth * np.cross(p, n)).sum(0)]


def test_capsule_box_hands_the_face_contact_over_to_the_edge_continuously(capsule_box_scene):
    """A capsule on the box's top edge, its axis through a point 0.8 mm into the face above the
    edge and tilted down past it (8.6 to 12 degrees), its inner end 4 mm inside the edge: as the
    tilt grows the inner end lifts off the face. MJX then switches from the two face contacts to
    the edge contact at once (measured: the depth-weighted normal jumps 0.19 mm in one 1e-4 rad
    step, as in the fidelity suite's capsule-box sliding shot 6, 18.6 %); DiffMJX blends the two
    (largest step 1.2e-6 m, the sweep's own rate)."""
    mj, contact, stock, _ = capsule_box_scene

    def pose(t):
        u = np.array([np.cos(t), 0.0, -np.sin(t)])
        centre = np.array([0.1, 0.0, 0.0492]) + (0.03 - 0.004 / np.cos(t)) * u
        return _capsule_box_qpos(mj, centre, u)

    steps = {}
    for name, fn in (("ours", contact), ("mjx", stock)):
        loads = np.array([_capsule_box_load(fn, mj, pose(t)) for t in np.linspace(0.15, 0.21, 601)])
        steps[name] = np.abs(np.diff(loads[:, :3], axis=0)).max()
    assert steps["mjx"] > 1e-4  # the switch MJX makes at depth
    assert steps["ours"] < 0.05 * steps["mjx"]


@pytest.mark.parametrize("pose", list(CAPSULE_BOX_POSES))
def test_capsule_box_gives_the_true_distance_apart_and_mjx_manifold_touching(capsule_box_scene, pose):
    """DiffMJX's capsule-box: apart, the first contact's distance equals MuJoCo's C engine
    (``mj_geomDistance``; MJX reports 1) with the normal from the capsule into the box and a
    derivative equal to central differences; touching, both contacts are MJX's own."""
    import mujoco

    mj, contact, stock, jac = capsule_box_scene
    q = _capsule_box_qpos(mj, *CAPSULE_BOX_POSES[pose])
    dist, pos, frame = (np.asarray(x) for x in contact(jnp.asarray(q)))
    s_dist, s_pos, _s_frame = (np.asarray(x) for x in stock(jnp.asarray(q)))
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    fromto = np.zeros(6)
    c_dist = mujoco.mj_geomDistance(mj, d, mj.geom("cap").id, mj.geom("box").id, 1.0, fromto)
    if pose == "pressed":
        assert c_dist < 0
        np.testing.assert_allclose(dist, s_dist, atol=1e-12)
        np.testing.assert_allclose(pos, s_pos, atol=1e-12)
        return
    assert np.all(s_dist == 1.0)  # what MJX reports apart
    assert dist[0] == pytest.approx(c_dist, abs=1e-6) and dist[1] == 1.0
    along = fromto[3:] - fromto[:3]
    np.testing.assert_allclose(frame[0, 0], along / np.linalg.norm(along), atol=1e-5)
    g = np.asarray(jac(jnp.asarray(q)))
    assert np.all(np.isfinite(g)) and np.any(g != 0)
    h = 1e-7
    for i in range(3):
        e = np.zeros(mj.nq)
        e[i] = h
        fd = (float(contact(q + e)[0][0]) - float(contact(q - e)[0][0])) / (2 * h)
        assert g[i] == pytest.approx(fd, abs=1e-6)


CAPSULES = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="rail" type="capsule" fromto="0 -0.1 0 0 0.1 0" size="0.02"/>
    <body name="bar" pos="0 0.05 0.039">
      <freejoint/>
      <geom name="bar" type="capsule" fromto="0 -0.08 0 0 0.08 0" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
</mujoco>
"""


def _axis_angle(axis, angle):
    return np.r_[np.cos(angle / 2), np.sin(angle / 2) * np.asarray(axis, float)]


CAPSULE_POSES = {  # the bar's position and orientation; the rail lies along y at the origin
    "parallel, shifted": ([0.0, 0.05, 0.039], [1.0, 0.0, 0.0, 0.0]),
    "anti-parallel": ([0.0, 0.05, 0.039], _axis_angle([1, 0, 0], np.pi)),
    "parallel, inside, 6 mm deep": ([0.0, 0.0, 0.034], [1.0, 0.0, 0.0, 0.0]),
    "tilted 5e-5 rad (parallel to the C engine)": ([0.0, 0.02, 0.039], _axis_angle([1, 0, 0], 5e-5)),
    "tilted 0.09 rad": ([0.0, 0.05, 0.039], _axis_angle([0, 0, 1], 0.09)),
    "crossed through the rail's axis": ([0.0, 0.0, 0.0], _axis_angle([0, 0, 1], np.pi / 2)),
}


@pytest.mark.parametrize("pose", list(CAPSULE_POSES))
def test_capsule_pairs_get_the_c_engines_contacts(pose):
    """A bar lying on a fixed rail: ``collision.capsule_capsule=paired`` (the default) makes the C
    engine's contacts (for parallel axes, within 1e-4 rad, the two ends of the overlap; else the
    closest points; axes that cross, the normal along their cross product) and so its accelerations.
    MJX's rule (one contact, mid-overlap, its closest points found otherwise) gives other ones."""
    import mujoco

    m = mujoco.MjModel.from_xml_string(CAPSULES)
    mx = mjx.put_model(m)
    cfg = diffmjx.Config()
    assert cfg.collision.capsule_capsule == "paired"
    pos, quat = CAPSULE_POSES[pose]
    d = mujoco.MjData(m)
    d.qpos[:] = [*pos, *(np.asarray(quat) / np.linalg.norm(quat))]
    d.qvel[:] = [0.1, 0.0, -0.2, 0.3, 0.0, 0.5]
    mujoco.mj_forward(m, d)
    dx = mjx.make_data(mx).replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel))
    out = {rule: _forward(mx, dx, cfg.override(f"collision.capsule_capsule={rule}")) for rule in ("paired", "mjx")}
    c = _mjx.contact(out["paired"])
    on = np.asarray(c.dist) < 0
    mine = sorted(((x, tuple(p)) for x, p in zip(np.asarray(c.dist)[on], np.asarray(c.pos)[on])), key=lambda x: x[1])
    theirs = sorted(((x.dist, tuple(x.pos)) for x in d.contact[: d.ncon]), key=lambda x: x[1])
    assert len(mine) == len(theirs) == (2 if "parallel" in pose else 1)
    np.testing.assert_allclose([x[0] for x in mine], [x[0] for x in theirs], atol=1e-12)
    np.testing.assert_allclose([x[1] for x in mine], [x[1] for x in theirs], atol=1e-12)
    np.testing.assert_allclose(np.asarray(out["paired"].qacc), d.qacc, rtol=1e-7, atol=1e-7)
    assert np.max(np.abs(np.asarray(out["mjx"].qacc) - d.qacc)) > 1e-3


def _capsule_box_engine_cases(n_models=4, n_poses=60, seed=0):
    """Random capsule-box poses, apart and touching (a third with the capsule's axis within about
    1 degree of a box axis, half of those turned 45 degrees about it), each with the C engine's
    contacts (margin 2 m: every contact it makes, at its true distance)."""
    import mujoco

    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n_models):
        half, r, length = rng.uniform(0.02, 0.1, 3), rng.uniform(0.005, 0.03), rng.uniform(0.01, 0.1)
        xml = f"""<mujoco><worldbody>
          <body><freejoint/><geom name="box" type="box" size="{half[0]} {half[1]} {half[2]}" margin="2"/></body>
          <body><freejoint/><geom name="cap" type="capsule" size="{r} {length}" margin="2"/></body>
        </worldbody></mujoco>"""
        m = mujoco.MjModel.from_xml_string(xml)
        d = mujoco.MjData(m)
        gb, gc = m.geom("box").id, m.geom("cap").id
        for k in range(n_poses):
            q = np.zeros(14)
            q[:3], q[3:7] = 0.02 * rng.normal(size=3), rng.normal(size=4)
            q[3:7] /= np.linalg.norm(q[3:7])
            q[7:10] = rng.uniform(-1, 1, 3) * (half + r + length) * rng.choice([0.5, 1.0, 1.3])
            quat = rng.normal(size=4)
            if k % 3 == 0:
                near = np.array([1.0, 0.0, 0.0, 0.0]) + 0.01 * rng.normal(size=4)
                if k % 2:
                    mujoco.mju_mulQuat(near, near.copy(), [np.cos(np.pi / 8), np.sin(np.pi / 8), 0.0, 0.0])
                mujoco.mju_mulQuat(quat, q[3:7], near / np.linalg.norm(near))
            q[10:] = quat / np.linalg.norm(quat)
            d.qpos[:] = q
            mujoco.mj_forward(m, d)
            geoms = [np.r_[d.geom_xpos[g], d.geom_xmat[g], m.geom_size[g]] for g in (gc, gb)]
            engine = sorted((c.dist, *c.pos, *c.frame[:3]) for c in d.contact[: d.ncon])
            cases.append((np.concatenate(geoms), engine))
    return cases


def test_capsule_box_spheres_are_the_c_engines_contacts():
    """``collision.capsule_box=spheres`` makes MuJoCo's C engine's capsule-box contacts (its
    ``mjraw_CapsuleBox``): on 240 random poses and sizes, apart and touching, the same contacts
    (one or two) at the same distance, position and normal to 1e-9, and a derivative that is
    finite everywhere and equals central differences of the distances."""
    from types import SimpleNamespace

    from diffmjx.physics.collision.pairs import capsule_box_spheres

    def contacts(g):
        cap = SimpleNamespace(pos=g[:3], mat=g[3:12].reshape(3, 3), size=g[12:15])
        box = SimpleNamespace(pos=g[15:18], mat=g[18:27].reshape(3, 3), size=g[27:30])
        return capsule_box_spheres(cap, box)

    cases = _capsule_box_engine_cases()
    geoms = jnp.asarray(np.stack([g for g, _ in cases]))
    dist, pos, frame = (np.asarray(x) for x in jax.jit(jax.vmap(contacts))(geoms))
    counts = set()
    for k, (_, engine) in enumerate(cases):
        ours = sorted((dist[k, i], *pos[k, i], *frame[k, i, 0]) for i in range(2) if dist[k, i] != 1.0)
        assert len(ours) == len(engine), k
        np.testing.assert_allclose(np.array(ours), np.array(engine), atol=1e-9, err_msg=str(k))
        counts.add(len(engine))
    assert counts == {1, 2}
    # derivative of the distances in the capsule's position: finite, and central differences agree
    shift = jnp.zeros(30).at[:3].set(1.0)

    def dists(g, eps):
        return contacts(g + eps * shift)[0]

    grads = np.asarray(jax.jit(jax.vmap(jax.jacfwd(dists, argnums=1), (0, None)))(geoms, 0.0))
    assert np.all(np.isfinite(grads))
    h = 1e-7
    fd = (np.asarray(jax.vmap(dists, (0, None))(geoms, h)) - np.asarray(jax.vmap(dists, (0, None))(geoms, -h))) / (
        2 * h
    )
    live = dist != 1.0
    agree = np.abs(grads - fd)[live] < 1e-5  # a pose within 1e-7 of one of the rule's switches may not
    assert agree.mean() > 0.97


def test_a_capsule_pressed_into_a_box_edge_gets_the_c_engines_two_contacts():
    """A capsule pressed across a box's edge (the finger on the fair-peer study's box): the C engine
    makes a contact on each of the two faces; ``capsule_box=spheres`` makes the same two and so the
    same accelerations, where the blended MJX rule makes one contact and other accelerations."""
    import mujoco

    m = mujoco.MjModel.from_xml_string(_CAPSULE_BOX_XML)
    mx = mjx.put_model(m)
    d = mujoco.MjData(m)
    d.qpos[:] = _capsule_box_qpos(m, (0.1, 0.0, 0.046), (0.25, 1.0, -0.3))
    d.qvel[:] = [0.1, 0.0, -0.2, 0.3, 0.0, 0.5]
    mujoco.mj_forward(m, d)
    assert d.ncon == 2 and np.all(d.contact.dist[:2] < 0)
    dx = mjx.make_data(mx).replace(qpos=jnp.asarray(d.qpos), qvel=jnp.asarray(d.qvel))
    cfg = diffmjx.Config()
    out = {rule: _forward(mx, dx, cfg.override(f"collision.capsule_box={rule}")) for rule in ("spheres", "blended")}
    c = _mjx.contact(out["spheres"])
    on = np.asarray(c.dist) < 0
    mine = sorted((x, *p) for x, p in zip(np.asarray(c.dist)[on], np.asarray(c.pos)[on]))
    theirs = sorted((x.dist, *x.pos) for x in d.contact[: d.ncon])
    np.testing.assert_allclose(mine, theirs, atol=1e-12)
    np.testing.assert_allclose(np.asarray(out["spheres"].qacc), d.qacc, rtol=1e-7, atol=1e-7)
    assert int((np.asarray(_mjx.contact(out["blended"]).dist) < 0).sum()) == 1
    assert np.max(np.abs(np.asarray(out["blended"].qacc) - d.qacc)) > 1e-2
