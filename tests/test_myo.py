"""MyoSuite's 39-muscle baoding hand runs through diffmjx.rollout (muscle models, tendon wrapping)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.scenes.myo import BAODING_ENV, reset_env


@pytest.fixture(scope="module")
def hand():
    pytest.importorskip("myosuite.utils")
    mj = reset_env(BAODING_ENV).model
    mj.opt.iterations, mj.opt.ls_iterations = 4, 16
    return mj, mjx.put_model(mj)


@pytest.mark.slow  # suite budget: the MyoSuite scene tests below cover the hand models by default
def test_fixed_step_rollout_of_the_baoding_hand_equals_mjx_step(hand):
    """MJX's tendon stage returns its wrap indices as int64 under x64 where make_data made int32;
    a fixed-step period keeps the dtypes it came in, so the MJX integrators run on muscle models
    (they failed with a carry type error), and two periods equal two mjx.step calls."""
    mj, mx = hand
    d = mjx.make_data(mx).replace(qpos=jnp.asarray(mj.qpos0), ctrl=0.3 * jnp.ones(mj.nu))
    u = 0.3 * jnp.ones((2, mj.nu))
    cfg = diffmjx.Config().override(
        "integrator.solver=mjx_euler",
        "solver.min_iterations=0",
        "solver.max_tolerance=1",
        "collision.capsule_capsule=mjx",  # MJX's contacts, which mjx.step makes
        "collision.capsule_box=mjx",
    )
    ours, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, u, cfg))(d)
    ref = jax.jit(lambda d: mjx.step(mx, mjx.step(mx, d)))(d)
    assert traj.qpos.shape == (2, mj.nq)
    np.testing.assert_allclose(np.asarray(ours.qpos), np.asarray(ref.qpos), rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ours.act), np.asarray(ref.act), rtol=0, atol=1e-10)
    assert float(jnp.abs(ours.act - d.act).max()) > 1e-3  # the muscles did activate


def _hinge_columns(mj):
    """(qpos indices, dof indices) of the hinge and slide joints (where d qpos = d dof)."""
    j = [i for i in range(mj.njnt) if mj.jnt_type[i] in (2, 3)]
    return np.asarray(mj.jnt_qposadr[j]), np.asarray(mj.jnt_dofadr[j])


def _random_pose(mj, rng):
    q = np.array(mj.qpos0)
    for j in range(mj.njnt):
        if mj.jnt_type[j] == 3 and mj.jnt_limited[j]:
            q[mj.jnt_qposadr[j]] = rng.uniform(*mj.jnt_range[j])
    return q


def _tendon_outputs(mx, stage):
    from diffmjx import _mjx

    def f(qpos):
        d = mjx.make_data(mx).replace(qpos=qpos)
        d = _mjx.fwd_position_with(mx, d, tendon=stage)
        i = d._impl
        return d.ten_length, i.ten_J, i.wrap_xpos, i.wrap_obj, i.ten_wrapnum, i.ten_wrapadr

    return f


def _check_tendon_stage(mj, mx, poses):
    """DiffMJX's tendon stage equals MJX's and the C engine's, and its derivatives are the moment arms."""
    import mujoco

    from diffmjx import _mjx
    from diffmjx.physics import tendon

    ours = jax.jit(_tendon_outputs(mx, tendon.tendon))
    theirs = jax.jit(_tendon_outputs(mx, _mjx.tendon))
    jac = jax.jit(jax.jacrev(lambda q: _tendon_outputs(mx, tendon.tendon)(q)[0]))
    qcols, dcols = _hinge_columns(mj)
    for q in poses:
        a, b = ours(jnp.asarray(q)), theirs(jnp.asarray(q))
        for name, x, y in zip(["ten_length", "ten_J", "wrap_xpos", "wrap_obj", "ten_wrapnum", "ten_wrapadr"], a, b):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=1e-12, err_msg=name)
        dc = mujoco.MjData(mj)
        dc.qpos[:] = q
        mujoco.mj_fwdPosition(mj, dc)
        np.testing.assert_allclose(np.asarray(a[0]), dc.ten_length, rtol=0, atol=1e-8)
        g = np.asarray(jac(jnp.asarray(q)))
        assert np.isfinite(g).all()
        # the length's derivative along each hinge is that hinge's moment arm (computed from Jacobians)
        # The length's derivative along each hinge is that hinge's moment arm (which MuJoCo computes
        # from Jacobians at the tangent points). Exact where the path is the shortest one; an inside
        # wrap's Newton solve stops at |residual| <= 1e-4, so there the two differ slightly (up to 6e-6 measured).
        gap = np.abs(g[:, qcols] - np.asarray(a[1])[:, dcols]).max(axis=1)
        inside = _inside_wrapped(mj, mx)
        assert gap[~inside].max() < 1e-9 and gap[inside].max(initial=0) < 1e-4


def _inside_wrapped(mj, mx):
    """(ntendon,) whether a tendon wraps around a geom from inside (side site within the geom)."""
    out = np.zeros(mj.ntendon, dtype=bool)
    (geom_wraps,) = np.nonzero((mj.wrap_type == 4) | (mj.wrap_type == 5))
    for w, inside in zip(geom_wraps, np.asarray(mx._impl.is_wrap_inside)):
        out[np.searchsorted(mj.tendon_adr, w, side="right") - 1] |= bool(inside)
    return out


@pytest.mark.slow  # suite budget (76 s cold): the inside wrap behind its NaNs stays covered by the next test's model
def test_tendon_stage_of_the_baoding_hand_is_mjx_with_finite_derivatives(hand):
    """MJX's inside wrap evaluates arcsin / arccos / sqrt outside their domains in branches jnp.where
    drops: every tendon length's derivative of this hand came out NaN through MJX's stage."""
    mj, mx = hand
    rng = np.random.default_rng(0)
    _check_tendon_stage(mj, mx, [np.array(mj.qpos0)] + [_random_pose(mj, rng) for _ in range(3)])


WRAPS = """
<mujoco>
  <worldbody>
    <site name="anchor" pos="0 0 1"/>
    <site name="anchor2" pos="0.3 0 1"/>
    <geom name="post" type="cylinder" size="0.05 0.2" pos="0.15 0.05 0.8" euler="90 0 0"/>
    <site name="post_side" pos="0.15 0.05 0.9"/>
    <body pos="0 0 0.6">
      <joint name="h1" type="hinge" axis="0 1 0" range="-1 1" limited="true"/>
      <joint name="s1" type="slide" axis="1 0 0" range="-0.2 0.2" limited="true"/>
      <geom type="capsule" size="0.02" fromto="0 0 0 0 0 -0.3"/>
      <geom name="ball" type="sphere" size="0.06" pos="0 0 -0.15"/>
      <site name="ball_in" pos="0.01 0 -0.15"/>
      <site name="tip" pos="0.05 0 -0.3"/>
      <body pos="0 0 -0.3">
        <joint name="h2" type="hinge" axis="0 1 0" range="-1.5 1.5" limited="true"/>
        <geom type="capsule" size="0.02" fromto="0 0 0 0.3 0 0"/>
        <site name="end" pos="0.3 0 0.02"/>
      </body>
    </body>
  </worldbody>
  <tendon>
    <spatial name="over_sphere">
      <site site="anchor"/><geom geom="ball" sidesite="ball_in"/><site site="end"/>
    </spatial>
    <spatial name="around_post">
      <site site="anchor2"/><geom geom="post" sidesite="post_side"/><site site="tip"/><site site="end"/>
    </spatial>
    <spatial name="pulley">
      <site site="anchor"/><site site="tip"/><pulley divisor="2"/><site site="anchor2"/><site site="end"/>
    </spatial>
    <fixed name="coupling"><joint joint="h1" coef="1"/><joint joint="h2" coef="-0.5"/></fixed>
  </tendon>
</mujoco>
"""


def test_tendon_stage_covers_pulleys_fixed_tendons_and_cylinders():
    import mujoco

    mj = mujoco.MjModel.from_xml_string(WRAPS)
    mx = mjx.put_model(mj)
    assert bool(np.asarray(mx._impl.is_wrap_inside).any())  # the sphere's side site is inside it
    rng = np.random.default_rng(1)
    poses = [np.array([rng.uniform(-0.8, 0.8), rng.uniform(-0.15, 0.15), rng.uniform(-1.2, 1.2)]) for _ in range(6)]
    _check_tendon_stage(mj, mx, poses)


@pytest.mark.slow  # suite budget (3 min cold): muscle gradients stay covered by test_muscle_smoothing, the hand's scenes by the compile tests below
def test_muscle_gradient_through_the_baoding_hand_is_finite_and_matches_differences(hand):
    """Four fixed-step periods of the 39-muscle hand (mjx_euler, as MyoSuite steps it): the gradient of
    a ball-position and activation cost w.r.t. every control is finite and equals central differences."""
    mj, mx = hand
    nq, steps = mj.nq, 4
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")
    d0 = mjx.make_data(mx).replace(qpos=jnp.asarray(mj.qpos0))

    def loss(u):
        d, traj = diffmjx.rollout(mx, d0, u, cfg)
        return jnp.sum(traj.qpos[:, nq - 14 :] ** 2) + jnp.sum(d.act**2)

    u = 0.3 + 0.1 * jnp.asarray(np.random.default_rng(0).standard_normal((steps, mj.nu)))
    g = np.asarray(jax.jit(jax.grad(loss))(u))
    assert np.isfinite(g).all() and np.abs(g).max() > 1e-3
    f, h = jax.jit(loss), 1e-6
    for i, j in [(0, 0), (0, 20), (steps - 1, 38), (2, 5)]:
        fd = (f(u.at[i, j].add(h)) - f(u.at[i, j].add(-h))) / (2 * h)
        np.testing.assert_allclose(g[i, j], float(fd), rtol=1e-5)


def test_bionic_tennis_scene_misses_both_hands_and_compiles_for_mjx():
    """The tennis task's premise, on the C engine: with relaxed muscles and the prosthesis holding
    its zero pose the ball flies past the racket (closest approach 1-5 cm) and touches nothing, so
    a ball-only cost has no contact to learn from. Its collision pairs are the ball's alone, and
    the MJX model builds (no unsupported cylinder-mesh pairs are left)."""
    import mujoco

    from diffmjx.physics.collision import driver
    from diffmjx.scenes import myo

    mj, mx, d0, _ = myo.bionic_tennis(cfd=False)
    assert mj.opt.timestep == 0.0025 and mj.opt.iterations == 4 and mj.opt.ls_iterations == 16
    assert mj.nu == 80 and int(np.sum(mj.actuator_dyntype == mujoco.mjtDyn.mjDYN_MUSCLE)) == 63
    ball = mj.geom("ball").id
    assert not np.any((mj.geom_contype != 0) | (mj.geom_conaffinity != 0))
    assert np.all((mj.pair_geom1 == ball) | (mj.pair_geom2 == ball)) and mj.npair == 21
    driver.check_model(mx)
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = np.asarray(d0.qpos), np.asarray(d0.qvel)
    goal = np.asarray(myo.TENNIS_GOAL)
    head = mj.geom("racket_head").id
    closest, costs = np.inf, []
    for _ in range(80):  # 0.2 s, past the racket
        mujoco.mj_step(mj, d)
        assert d.ncon == 0
        closest = min(closest, mujoco.mj_geomDistance(mj, d, ball, head, 1.0, None))
        costs.append(np.linalg.norm(d.xpos[mj.body("ball").id] - goal))
    assert 0.01 < closest < 0.05
    assert 0.25 < costs[0] and min(costs) > 0.25  # the ball never comes near the goal on its own


def test_die_scene_holds_the_die_in_contact_and_compiles_for_mjx():
    """The die task's premise, on the C engine: the die starts resting in the palm (touching the
    hand within 10 periods) and, with relaxed muscles, the hand lets it sink, so the cost grows and
    a planner has work to do. The pairs stock MJX lacks (world cylinder-box, ellipsoid-box) are
    switched off and the MJX model builds."""
    import mujoco

    from diffmjx.physics.collision import driver
    from diffmjx.scenes import myo

    mj, mx, d0, cost = myo.die_reorient(cfd=False)
    assert mj.nu == 39 and mj.opt.timestep == 0.0025 and mj.opt.iterations == 4
    ellipsoid = mj.geom_type == mujoco.mjtGeom.mjGEOM_ELLIPSOID
    assert ellipsoid.sum() == 5 and not np.any(mj.geom_contype[ellipsoid] | mj.geom_conaffinity[ellipsoid])
    driver.check_model(mx)
    d = mujoco.MjData(mj)
    d.qpos[:] = np.asarray(d0.qpos)
    die = mj.body("Object").id
    mujoco.mj_forward(mj, d)
    start = d.xpos[die].copy()
    c0 = float(cost(types.SimpleNamespace(xpos=jnp.asarray(d.xpos), xquat=jnp.asarray(d.xquat)), None))
    assert 0.5 < c0 < 1.0  # the goal orientation is ~45 degrees away; the position error is 0
    touching = []
    for _ in range(200):  # 0.5 s
        mujoco.mj_step(mj, d)
        touching.append(any(die in (mj.geom_bodyid[c.geom1], mj.geom_bodyid[c.geom2]) for c in d.contact))
    assert all(touching[10:])  # held by the hand throughout
    assert 0.03 < start[2] - d.xpos[die][2] < 0.1  # ... which sinks under gravity


def test_die_on_a_table_rests_there_clear_of_the_hand():
    """The on-the-table die task's premise, on the C engine: the die starts on the added table
    (touching it, not the hand, palm down 2 cm above it), stays there with relaxed muscles (moves
    less than 3 mm in 0.5 s; measured 1.5 mm), and the drooping hand touches it only later, so
    reaching it is the planner's job; the MJX model builds."""
    import mujoco

    from diffmjx.physics.collision import driver
    from diffmjx.scenes import myo

    mj, mx, d0, cost = myo.die_reorient(cfd=False, on_table=True)
    driver.check_model(mx)
    d = mujoco.MjData(mj)
    d.qpos[:] = np.asarray(d0.qpos)
    die, table = mj.body("Object").id, mj.geom("table").id
    mujoco.mj_forward(mj, d)
    start = d.xpos[die].copy()
    assert abs(start[2] - myo.DIE_TABLE[2] - myo.DIE_HALF) < 1e-9
    c0 = float(cost(types.SimpleNamespace(xpos=jnp.asarray(d.xpos), xquat=jnp.asarray(d.xquat)), None))
    assert 0.5 < c0 < 1.0  # the goal orientation is ~45 degrees away; the position error is 0

    def touching():
        """(die-table contact, die-hand contact) now."""
        g1, g2 = d.contact.geom1[: d.ncon], d.contact.geom2[: d.ncon]
        on_die = (mj.geom_bodyid[g1] == die) | (mj.geom_bodyid[g2] == die)
        on_table = (g1 == table) | (g2 == table)
        return bool(np.any(on_die & on_table)), bool(np.any(on_die & ~on_table))

    states = []
    for _ in range(200):  # 0.5 s
        mujoco.mj_step(mj, d)
        states.append(touching())
    assert all(t for t, _ in states[4:])  # on the table throughout (it starts at zero distance)
    touched = [h for _, h in states]
    assert not any(touched[:20])  # clear of the hand for the first 50 ms
    assert np.linalg.norm(d.xpos[die] - start) < 3e-3


def test_baoding_scene_starts_palm_up_and_holds_both_balls():
    """The baoding task starts from MyoSuite's episode start (``reset``: forearm palm up), not the
    model's ``qpos0`` (forearm at 0), from which the balls roll off the hand and reach the floor in
    0.64 s. On the C engine with relaxed muscles both balls stay in the hand over the paper's
    horizon (256 periods), each touching it at the end; the swap cost starts at the balls' distance
    to each other's place, twice their centre distance."""
    import mujoco

    from diffmjx.scenes import myo

    mj, _mx, d0, cost = myo.baoding(cfd=False)
    assert float(d0.qpos[0]) == -1.57 and mj.qpos0[0] == 0.0
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = np.asarray(d0.qpos), np.asarray(d0.qvel)
    mujoco.mj_forward(mj, d)
    balls = [mj.body(f"ball{i}").id for i in (1, 2)]
    gap = np.linalg.norm(d.xpos[balls[0]] - d.xpos[balls[1]])
    c0 = float(
        cost(
            types.SimpleNamespace(
                xpos=jnp.asarray(d.xpos), xmat=jnp.asarray(d.xmat).reshape(-1, 3, 3), qpos=jnp.asarray(d.qpos)
            ),
            None,
        )
    )
    assert abs(c0 - 2 * gap) < 1e-6 * gap and gap > 0.03
    start_z = min(d.xpos[b][2] for b in balls)
    for _ in range(256):
        mujoco.mj_step(mj, d)
    assert min(d.xpos[b][2] for b in balls) > start_z - 0.2  # measured 1.44 -> 1.36 m (from qpos0: 0.02 m)
    bodies = {(mj.geom_bodyid[c.geom1], mj.geom_bodyid[c.geom2]) for c in d.contact[: d.ncon]}
    for b in balls:
        assert any(b in pair and set(pair) != set(balls) for pair in bodies)
