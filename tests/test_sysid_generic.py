"""Identifying any MuJoCo model (diffmjx.sysid.identify and its parts) on small models.

Recordings are made by MuJoCo's C engine at known values with a fine RK4 step (1e-4 s), so that the
"real system" is the model's continuous dynamics, which DiffMJX's adaptive integrator solves.
"""

import dataclasses
import re
import warnings

import jax
import mujoco
import numpy as np
import pytest

import diffmjx
from diffmjx import sysid
from diffmjx._mjx import mjx
from diffmjx.physics import constants, manifold
from diffmjx.sysid import Parameter, ParameterError, ParameterSet, Recording, RecordingError

PENDULUM = """<mujoco><option timestep="0.002"/><worldbody><geom name="floor" type="plane" size="0 0 .05"/>
<body name="arm" pos="0 0 1"><joint name="hinge" axis="0 1 0" damping="0.3"/>
<geom name="rod" type="capsule" fromto="0 0 0 .4 0 0" size=".03" mass="1" contype="0" conaffinity="0"/></body>
</worldbody><actuator><motor name="m" joint="hinge" gear="2" ctrllimited="true" ctrlrange="-1 1"/></actuator>
<sensor><jointpos name="angle" joint="hinge"/></sensor></mujoco>"""

SPHERICAL = """<mujoco><option timestep="0.002"/><worldbody>
<body name="bob" pos="0 0 1"><joint name="ball" type="ball" damping="0.05"/>
<geom type="capsule" fromto="0 0 0 0 0 -.3" size=".03" mass=".5" contype="0" conaffinity="0"/></body>
</worldbody></mujoco>"""

CONTACT = """<mujoco><option timestep="0.002"/><worldbody>
<geom name="floor" type="plane" size="0 0 .05" solimp="0 0.95 0.001 0.5 2"/>
<body name="arm" pos="0 0 1"><joint name="hinge" axis="0 1 0" damping="0.3" armature="0.01" stiffness="1"/>
<geom name="rod" type="capsule" fromto="0 0 0 .4 0 0" size=".03" mass="1" contype="0" conaffinity="0"/></body>
<body name="ball" pos="0.5 0 0.05"><freejoint/>
<geom name="ball" type="sphere" size=".05" mass=".2" solimp="0 0.95 0.001 0.5 2"/></body>
</worldbody><actuator><motor name="m" joint="hinge" gear="2"/></actuator></mujoco>"""


def record(m: mujoco.MjModel, qpos0, qvel0, ctrl: np.ndarray, dt: float, step: float | None = 1e-4) -> Recording:
    """The C engine (RK4 at ``step``; the model's own integrator with None) from ``qpos0, qvel0``."""
    return Recording.simulate(m, ctrl, dt, qpos0=qpos0, qvel0=qvel0, step=step)


def pendulum_recording(seed: int, periods: int = 40) -> Recording:
    m = mujoco.MjModel.from_xml_string(PENDULUM)
    rng = np.random.default_rng(seed)
    ctrl = np.repeat(rng.uniform(-1, 1, (periods // 5 + 1, 1)), 5, axis=0)[:periods]
    return record(m, [rng.uniform(-1, 1)], [0.0], ctrl, 0.01)


# ------------------------------------------------------------------------------------------ errors
def test_parameter_errors_name_what_is_wrong_and_what_exists():
    m = mujoco.MjModel.from_xml_string(CONTACT)
    cases = [
        (lambda: Parameter("body_masses", "arm"), "body_masses.*choose one of: body_mass"),
        (lambda: ParameterSet(m, [Parameter("body_mass", "leg")]), "no body named 'leg'.*'arm', 'ball'"),
        (lambda: ParameterSet(m, [Parameter("dof_damping", "elbow")]), "no joint named 'elbow'.*'hinge'"),
        (
            lambda: ParameterSet(m, [Parameter("geom_friction", "ball", index=3)]),
            "index 3 is out of range.*\\[0, 1, 2\\]",
        ),
        (
            lambda: ParameterSet(m, [Parameter("geom_friction", "ball", index=0, bounds=(-1, 2))]),
            "legal range \\[0, inf\\]",
        ),
        (lambda: ParameterSet(m, [Parameter("geom_solimp", "ball", index=0, bounds=(0.5, 2))]), "legal range"),
        (
            lambda: ParameterSet(m, [Parameter("body_mass", "ball", bounds=(1, 2))]),
            "value 0.2.*not strictly inside \\(1, 2\\)",
        ),
        (lambda: ParameterSet(m, [Parameter("geom_size", "floor")]), "plane; only primitive"),
        (
            lambda: ParameterSet(
                m, [Parameter("geom_solimp", ("floor", "ball")), Parameter("geom_solimp", ("floor", "ball"))]
            ),
            "given twice",
        ),
        (lambda: ParameterSet(m, [Parameter("dof_damping", "hinge", bounds=(0.5, 0.1))]), "not strictly inside|empty"),
        (lambda: Parameter("opt.gravity", "world"), "pass name=None"),
        (lambda: ParameterSet(m, [Parameter("body_ipos", "ball", index=0)]), "simple body"),
    ]
    for make, message in cases:
        with pytest.raises(ParameterError, match=message):
            make()


def test_recording_errors_name_the_array_and_the_sample():
    q = np.zeros((5, 7))
    q[:, 3] = 1.0
    m = mujoco.MjModel.from_xml_string(SPHERICAL.replace('type="ball"', 'type="free"').replace("damping", "ref"))
    with pytest.raises(RecordingError, match="dt=0"):
        Recording(qpos=q, dt=0.0)
    with pytest.raises(RecordingError, match="qpos is missing.*sensor-only recordings"):
        Recording(qpos=None, dt=0.01, sensordata=np.zeros((5, 2)))
    with pytest.raises(RecordingError, match="ctrl has 5 rows; expected T = len\\(qpos\\) - 1 = 4"):
        Recording(qpos=q, dt=0.01, ctrl=np.zeros((5, 1)))
    bad = q.copy()
    bad[3, 1] = np.nan
    with pytest.raises(RecordingError, match="qpos has a non-finite value \\(nan\\) at sample 3, column 1"):
        Recording(qpos=bad, dt=0.01)
    bad = q.copy()
    bad[2, 3] = 1.1
    with pytest.raises(RecordingError, match="qpos\\[2, 3:7\\].*norm 1.1"):
        Recording(qpos=bad, dt=0.01).check(m)
    with pytest.raises(RecordingError, match="qvel has 2 columns; the model has nv = 6"):
        Recording(qpos=q, qvel=np.zeros((5, 2)), dt=0.01).check(m)
    pm = mujoco.MjModel.from_xml_string(PENDULUM)
    with pytest.raises(RecordingError, match="ctrl\\[1, 0\\] = 3 is outside 'm''s ctrlrange"):
        Recording(qpos=np.zeros((3, 1)), ctrl=np.array([[0.0], [3.0]]), dt=0.01).check(pm)


def test_recordings_round_trip_through_npz_and_csv(tmp_path):
    rec = pendulum_recording(0, periods=6)
    for suffix in (".npz", ".csv"):
        back = Recording.load(rec.save(tmp_path / f"r{suffix}"))
        for k in ("qpos", "qvel", "ctrl", "sensordata"):
            np.testing.assert_array_equal(getattr(back, k), getattr(rec, k), err_msg=f"{suffix} {k}")
        assert back.dt == pytest.approx(rec.dt, rel=1e-12)


def test_missing_velocities_are_central_differences_on_the_sphere():
    """A body spinning at a constant body-frame rate: the differences recover the rate."""
    m = mujoco.MjModel.from_xml_string(SPHERICAL.replace('type="ball"', 'type="free"').replace("damping", "ref"))
    w = np.array([0.3, -1.2, 2.0])
    qpos = np.zeros((6, 7))
    q = np.array([1.0, 0, 0, 0])
    for k in range(6):
        qpos[k, 3:] = q
        mujoco.mju_quatIntegrate(q, w, 0.01)
    rec = Recording(qpos=qpos, dt=0.01).check(m)
    np.testing.assert_allclose(rec.qvel[:, 3:], np.tile(w, (6, 1)), rtol=1e-9)


def test_mujoco_sysid_adapter_round_trips():
    pytest.importorskip("tabulate", reason='mujoco.sysid needs its extras: pip install "mujoco[sysid]"')
    m = mujoco.MjModel.from_xml_string(PENDULUM)
    rec = pendulum_recording(1, periods=8)
    (back,) = sysid.from_mujoco_sysid(sysid.to_mujoco_sysid(rec, m))
    for k in ("qpos", "qvel", "ctrl"):
        np.testing.assert_array_equal(getattr(back, k), getattr(rec, k), err_msg=k)
    np.testing.assert_array_equal(back.sensordata[:-1], rec.sensordata[:-1])  # the last sample has no sysid row
    assert back.dt == pytest.approx(rec.dt)


def test_mujoco_sysid_peer_recovers_its_own_engines_values():
    """The peer on recordings of the C engine at the model's own timestep finds the values exactly."""
    pytest.importorskip("tabulate", reason='mujoco.sysid needs its extras: pip install "mujoco[sysid]"')
    truth = mujoco.MjModel.from_xml_string(PENDULUM)
    rng = np.random.default_rng(2)
    recs = [record(truth, [0.5], [0.0], rng.uniform(-1, 1, (40, 1)), 0.01, step=None)]
    start = mujoco.MjModel.from_xml_string(
        PENDULUM.replace('damping="0.3"', 'damping="0.42"').replace('gear="2"', 'gear="1.4"')
    )
    fit = sysid.identify_mujoco_sysid(
        start, [Parameter("dof_damping", "hinge"), Parameter("actuator_gear", "m", index=0)], recs
    )
    assert fit.values["dof_damping:hinge"] == pytest.approx(0.3, rel=1e-5)
    assert fit.values["actuator_gear:m[0]"] == pytest.approx(2.0, rel=1e-5)
    assert fit.loss < 1e-6 * fit.loss_start


# ------------------------------------------------------------------------------------------ model
TIES = """<mujoco><option timestep="0.002" gravity="0 0 -9.81"/><worldbody><geom name="floor" type="plane" size="0 0 .05"/>
<body name="box" pos="0 0 .5"><freejoint/><geom name="box" type="box" size=".1 .06 .04" mass="2"/></body>
<body name="pair" pos="1 0 .5" simple="false"><freejoint/><geom name="pa" type="sphere" size=".05" pos=".1 0 0"/>
<geom name="pb" type="capsule" size=".03 .1" pos="-.05 .02 0" euler="0 90 20"/></body>
<body name="link" pos="0 1 1"><joint name="j" axis="0 1 0" armature=".02"/>
<geom name="lg" type="cylinder" fromto="0 0 0 .3 0 0" size=".03" contype="0" conaffinity="0"/></body>
<body name="full" pos="0 -1 1"><joint name="k" axis="1 0 0"/><inertial pos=".01 .02 .1" mass="1.5" fullinertia=".02 .03 .04 .001 -.002 .003"/>
<geom name="fg" type="sphere" size=".05" contype="0" conaffinity="0"/></body></worldbody>
<actuator><motor name="mj" joint="j" gear="3"/></actuator></mujoco>"""


def test_parameters_and_ties_match_the_c_model_rebuilt_at_other_values():
    """Mass with inertia, sizes and positions with the body's mass properties, a shared friction,
    a full log-Cholesky inertial, an option, an armature and a gear: the traced model equals the
    C model recompiled from the edited MjSpec, leaf by leaf (derived constants included)."""
    spec = mujoco.MjSpec.from_string(TIES)
    params = [
        Parameter("body_mass", "box"),
        Parameter("geom_size", "box"),
        Parameter("geom_size", "pa", index=0),
        Parameter("geom_pos", "pb", index=(0, 1), bounds=(-0.5, 0.5)),
        Parameter("geom_friction", ("floor", "box", "pa"), index=0),
        Parameter("body_inertial", "full"),
        Parameter("opt.gravity", index=2),
        Parameter("dof_armature", "j"),
        Parameter("actuator_gear", "mj", index=0),
    ]
    ps = ParameterSet(spec.compile(), params, spec=spec)
    new = {
        "body_mass:box": 3.0,
        "geom_size:box": [0.12, 0.05, 0.045],
        "geom_size:pa[0]": 0.07,
        "geom_pos:pb[0,1]": [-0.08, 0.05],
        "geom_friction:floor+box+pa[0]": 0.4,
        "opt.gravity[2]": -9.0,
        "dof_armature:j": 0.05,
        "actuator_gear:mj[0]": 1.5,
    }
    values = ps.from_dict(new)
    # the full inertial: other mass, centre of mass and inertia, through its log-Cholesky coordinates
    inertia = np.array([[0.025, 0.002, -0.001], [0.002, 0.035, 0.004], [-0.001, 0.004, 0.045]])
    values[ps.components("body_inertial:full")] = constants.log_cholesky_from_mass_properties(
        1.8, [0.02, -0.01, 0.12], inertia
    )
    got = jax.jit(ps.model)(values, mjx.put_model(ps.models[0]))

    edit = spec.copy()
    edit.body("box").geoms[0].mass = 3.0  # one geom: the body's mass (its inertia follows at the new size)
    edit.geom("box").size = [0.12, 0.05, 0.045]
    edit.geom("pa").size = [0.07, 0, 0]
    edit.geom("pa").mass = float(ps.models[0].body_mass[2]) * _share(ps.models[0], "pa")
    edit.geom("pb").mass = float(ps.models[0].body_mass[2]) * (1 - _share(ps.models[0], "pa"))
    edit.geom("pb").pos = [-0.08, 0.05, 0.0]
    for g in ("floor", "box", "pa"):
        edit.geom(g).friction[0] = 0.4
    edit.body("full").mass, edit.body("full").ipos = 1.8, [0.02, -0.01, 0.12]
    edit.body("full").fullinertia = [0.025, 0.035, 0.045, 0.002, -0.001, 0.004]
    edit.option.gravity = [0, 0, -9.0]
    edit.joint("j").armature = 0.05
    edit.actuator("mj").gear[0] = 1.5
    want = mjx.put_model(edit.compile())
    for leaf in sorted(
        constants.WRITTEN_LEAVES - {"body_iquat", "body_inertia"}
        | {"geom_size", "geom_pos", "geom_friction", "opt.gravity", "dof_armature"}
    ):
        np.testing.assert_allclose(
            np.asarray(_get(got, leaf)), np.asarray(_get(want, leaf)), rtol=1e-8, atol=1e-10, err_msg=leaf
        )
    # inertias compared as tensors: the principal axes of equal moments are not unique
    for b in range(1, ps.models[0].nbody):
        np.testing.assert_allclose(_tensor(got, b), _tensor(want, b), rtol=1e-8, atol=1e-12, err_msg=f"body {b}")


def _share(m, geom: str) -> float:
    """A geom's share of its body's mass at one density (the tie keeps each geom's mass)."""
    g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, geom)
    b = m.geom_bodyid[g]
    vol = {
        i: float(constants.geom_volume(int(m.geom_type[i]), m.geom_size[i])) for i in np.flatnonzero(m.geom_bodyid == b)
    }
    return vol[g] / sum(vol.values())


def _tensor(m, b):
    r = np.asarray(manifold.quat_to_mat(m.body_iquat[b]))
    return r @ np.diag(np.asarray(m.body_inertia[b])) @ r.T


def _get(m, leaf):
    for part in leaf.split("."):
        m = getattr(m, part)
    return m


# ------------------------------------------------------------------------------------------ gradients
CONTACT_PARAMS = [
    Parameter("body_mass", "arm"),
    Parameter("dof_damping", "hinge"),
    Parameter("dof_armature", "hinge"),
    Parameter("jnt_stiffness", "hinge"),
    Parameter("actuator_gear", "m", index=0),
    Parameter("geom_friction", ("floor", "ball"), index=0),
    Parameter("geom_solref", ("floor", "ball")),
    Parameter("geom_size", "ball", index=0),
    Parameter("opt.gravity", index=2),
]


def test_segment_jacobian_matches_central_differences_of_a_tightened_solve():
    """Every parameter kind's column of the residual's forward-mode Jacobian (what Levenberg–Marquardt
    uses; a ball sliding on the floor, an arm swinging) against central differences of the same
    residual at rtol 1e-10."""
    m = mujoco.MjModel.from_xml_string(CONTACT)
    rng = np.random.default_rng(3)
    qpos0 = np.r_[0.4, 0.5, 0.0, 0.0499, 1.0, 0.0, 0.0, 0.0]
    qvel0 = np.r_[0.0, 0.8, 0.3, 0.0, 0.0, 0.0, 0.0]
    rec = record(m, qpos0, qvel0, rng.uniform(-1, 1, (8, 1)), 0.01)
    cfg = diffmjx.Config().override("integrator.rtol=1e-10", "integrator.atol=1e-10", "integrator.adjoint=forward")
    ps = ParameterSet(m, CONTACT_PARAMS)
    problem = sysid.Problem(ps, [rec.check(m)], horizon=4, stride=4, cfg=cfg)
    ((base, arrays),) = problem.arguments()[1]

    def residual(values):
        return problem.group_residuals(values, 0, base, arrays).ravel()

    # one program: the residual and one directional derivative (a column with a unit tangent)
    fn = jax.jit(lambda v, t: jax.jvp(residual, (v,), (t,)))
    x = ps.start * 1.1
    zero = np.zeros_like(x)
    for i, label in enumerate(ps.labels):
        h = 1e-5 * abs(x[i])
        plus, minus, unit = x.copy(), x.copy(), zero.copy()
        plus[i] += h
        minus[i] -= h
        unit[i] = 1.0
        cd = (np.asarray(fn(plus, zero)[0]) - np.asarray(fn(minus, zero)[0])) / (2 * h)
        col = np.asarray(fn(x, unit)[1])
        assert np.linalg.norm(col) > 1e-6, f"{label}: no effect on the residual"
        err = np.linalg.norm(col - cd) / np.linalg.norm(cd)
        assert err < 1e-4, f"{label}: relative error {err:.2e}"


# ------------------------------------------------------------------------------------------ identify
PAYLOAD = (
    '<body name="payload" pos=".4 0 0"><geom type="sphere" size=".04" mass=".3" contype="0" conaffinity="0"/></body>'
)
START = PENDULUM.replace('damping="0.3"', 'damping="0.42"').replace('gear="2"', 'gear="1.3"')
PENDULUM_PARAMS = [
    Parameter("dof_damping", "hinge"),
    Parameter("actuator_gear", "m", index=0),
    Parameter("opt.wind", index=0),  # zero density and viscosity: no fluid forces for a wind to move
]


def payload_recording(seed: int) -> Recording:
    """The pendulum with a payload at its tip (a model variant sharing the parameters)."""
    m = mujoco.MjModel.from_xml_string(PENDULUM.replace("</body>", PAYLOAD + "</body>", 1))
    ctrl = np.repeat(np.random.default_rng(seed).uniform(-1, 1, (9, 1)), 5, axis=0)[:40]
    return dataclasses.replace(record(m, [0.3], [0.0], ctrl, 0.01), variant=1)


def _pendulum_identify(steps: int, checkpoint_path, horizon: int = 5):
    variant = START.replace("</body>", PAYLOAD + "</body>", 1)
    recs = [pendulum_recording(0), payload_recording(1)]
    return sysid.identify(
        mujoco.MjModel.from_xml_string(START),
        PENDULUM_PARAMS,
        recs,
        variants=[variant_model(variant)],
        held_out=pendulum_recording(2),  # one recording, not in a list: accepted as one
        fit=sysid.FitConfig(horizon=horizon, steps=steps),
        checkpoint_path=checkpoint_path,
        progress=False,
    )


@pytest.fixture(scope="module")
def pendulum_checkpoint(tmp_path_factory):
    return tmp_path_factory.mktemp("pendulum") / "fit.npz"


@pytest.fixture(scope="module")
def pendulum_fit(pendulum_checkpoint):
    """Damping and gear from 40 % off, with and without a payload (two model variants), a wind the
    recordings cannot see (warned of at the start), a held-out recording; checkpointed."""
    with pytest.warns(UserWarning, match=r"^opt.wind\[0\]: no effect on the simulated recordings"):
        return _pendulum_identify(15, pendulum_checkpoint)


def variant_model(xml: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(xml)


def test_identify_recovers_two_parameters_of_a_hinge_model_within_one_percent(pendulum_fit):
    r = pendulum_fit
    assert r.values["dof_damping:hinge"] == pytest.approx(0.3, rel=0.01)
    assert r.values["actuator_gear:m[0]"] == pytest.approx(2.0, rel=0.01)
    assert r.loss < 1e-3 * r.loss_start
    assert r.model.dof_damping[0] == pytest.approx(r.values["dof_damping:hinge"])
    assert r.models[1].body_mass[2] == pytest.approx(0.3) and r.models[1].dof_damping[0] == r.model.dof_damping[0]
    # the returned step is the held-out best
    held = r.history.held_out
    assert r.step == int(r.history.step[np.nanargmin(held)])


def test_a_later_fit_of_the_same_model_reuses_the_compiled_simulation(pendulum_fit, monkeypatch):
    """Another start and other data of the pendulum (the fixture's fit compiled its simulation):
    ``Problem.evaluate`` traces nothing of the simulation again, and its residual and Jacobian equal
    JAX's own ``jacfwd`` of the residual, to rounding."""
    start = mujoco.MjModel.from_xml_string(START.replace('damping="0.42"', 'damping="0.2"'))
    ps = ParameterSet(start, PENDULUM_PARAMS)
    cfg = sysid.forward_config(diffmjx.Config())
    problem = sysid.Problem(ps, [pendulum_recording(3).check(start)], horizon=5, stride=5, cfg=cfg)
    traced = []
    simulate = sysid.problem.simulated_residuals
    monkeypatch.setattr(sysid.problem, "simulated_residuals", lambda *a: traced.append(1) or simulate(*a))
    theta = jax.numpy.asarray(ps.theta0) + 0.1
    r, j = problem.evaluate(theta)
    assert traced == [], "the simulation was traced again"
    j_ad = jax.jit(jax.jacfwd(problem.residuals))(theta)
    np.testing.assert_allclose(np.asarray(r), np.asarray(problem.residuals(theta)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(j), np.asarray(j_ad), rtol=0, atol=1e-10 * float(np.max(np.abs(j_ad))))
    assert np.max(np.abs(np.asarray(j)[:, :2])) > 1e-3  # damping and gear move the residual


def test_segments_run_in_shares_on_threads_give_the_one_thread_values(pendulum_fit):
    """``Problem(threads=k)`` deals the segments to k shares that run side by side: every segment once,
    in order (8 segments on 3 threads: the last share repeats one, dropped), and the same residual
    and Jacobian as one thread, to rounding."""
    idx, keep = sysid.problem.shares(8, 3)
    assert idx.shape == (3, 3) and idx[:, 0].tolist() == [0, 1, 2]  # strided: share j holds j, j + 3, ...
    assert np.array_equal(idx.T.reshape(-1)[keep], np.arange(8))
    assert sysid.problem.shares(2, 4)[0].shape == (2, 1)  # never more shares than segments
    with pytest.raises(ValueError, match="threads=0 is not allowed"):
        sysid.problem.resolve_threads(0)
    ps = ParameterSet(mujoco.MjModel.from_xml_string(START), PENDULUM_PARAMS)
    cfg = sysid.forward_config(diffmjx.Config())
    rec = pendulum_recording(3).check(ps.models[0])
    theta = jax.numpy.asarray(ps.theta0) + 0.1
    (r1, j1), (r3, j3) = (
        sysid.Problem(ps, [rec], horizon=5, stride=5, cfg=cfg, threads=k).evaluate(theta) for k in (1, 3)
    )
    assert sysid.Problem(ps, [rec], horizon=5, stride=5, cfg=cfg).threads_used >= 1
    np.testing.assert_allclose(np.asarray(r3), np.asarray(r1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(j3), np.asarray(j1), rtol=0, atol=1e-10 * float(np.max(np.abs(j1))))


def test_segments_out_of_step_budget_are_warned_of_and_listed(pendulum_fit):
    """A fit whose simulation runs out of ``integrator.max_steps`` (here: two steps per period at
    rtol 1e-12) warns at the start, naming the recording and sample, and once for its held-out
    recordings, and lists the segments at the returned values; a fit within budget lists none."""
    assert pendulum_fit.budget_exhausted == []
    ps = ParameterSet(mujoco.MjModel.from_xml_string(START), PENDULUM_PARAMS[:1])
    rec = dataclasses.replace(pendulum_recording(5, periods=10), name="swing")
    cfg = diffmjx.Config().override("integrator.rtol=1e-12", "integrator.atol=1e-12", "integrator.max_steps=2")
    fit = sysid.FitConfig(horizon=5, stride=5, steps=1, intervals=False)
    held = dataclasses.replace(pendulum_recording(6, periods=5), name="held")
    with pytest.warns(sysid.BudgetExhaustedWarning) as caught:
        res = sysid.identify(
            ps.models[0], PENDULUM_PARAMS[:1], [rec], held_out=[held], cfg=cfg, fit=fit, progress=False
        )
    messages = [str(w.message) for w in caught if w.category is sysid.BudgetExhaustedWarning]
    assert any(re.search(r"2 of 2 segments .* at the start, .* recording 'swing' from sample 0", m) for m in messages)
    assert any("1 of 1 segments" in m and "held-out" in m and "'held' from sample 0" in m for m in messages)
    assert res.budget_exhausted == [("swing", 0), ("swing", 5)]


def test_starts_that_differ_in_every_parameter_share_the_programs_key():
    """Starts of the contact model that differ in every parameter, the ball's size included (MJX keeps
    a static copy of each geom's bounding radius for height fields): the simulated models have one
    static structure, the key of the compiled simulation, so a later fit reuses it; the values differ."""
    m = mujoco.MjModel.from_xml_string(CONTACT)
    rec = record(m, np.r_[0.4, 0.5, 0.0, 0.06, 1.0, 0.0, 0.0, 0.0], np.zeros(m.nv), np.zeros((3, 1)), 0.01)
    ps = ParameterSet(m, CONTACT_PARAMS)
    bases = [
        sysid.Problem(
            ParameterSet(ps.write(ps.start * f), CONTACT_PARAMS), [rec.check(m)], 2, 1, diffmjx.Config()
        ).bases
        for f in (1.0, 1.3)
    ]
    b0, b1 = (next(iter(b.values())) for b in bases)
    assert jax.tree.structure(b0) == jax.tree.structure(b1)
    assert float(b0.geom_size[2, 0]) != float(b1.geom_size[2, 0])


def test_identify_reports_a_parameter_the_data_cannot_determine(pendulum_fit):
    r = pendulum_fit
    assert r.values["opt.wind[0]"] == 0.0  # never moved: nothing in the model feels a wind
    assert np.isinf(r.intervals["opt.wind[0]"].std)
    assert len(r.unidentifiable) == 1 and set(r.unidentifiable[0][1]) == {"opt.wind[0]"}
    for key, true in (("dof_damping:hinge", 0.3), ("actuator_gear:m[0]", 2.0)):
        iv = r.intervals[key]
        assert np.isfinite(iv.std) and iv.upper - iv.lower < 0.01 * true


def test_intervals_carry_the_simulations_own_error():
    """A recording simulated by DiffMJX itself at rtol 1e-11, so that the only mismatch is the fit's
    looser tolerance (1e-4): the tolerance check (``FitConfig.tolerance_check``, on by default)
    estimates the shift of the values that a tighter simulation implies, which is the ball's radius
    error (98 % of it measured), and the intervals hold the truth."""
    m = mujoco.MjModel.from_xml_string(CONTACT)
    m.opt.timestep = 0.01
    mx = mjx.put_model(m)
    tight = diffmjx.Config().override("integrator.rtol=1e-11", "integrator.atol=1e-11")
    recs, simulate = [], jax.jit(lambda d, u: diffmjx.rollout(mx, d, u, tight))
    for seed in range(1):  # one recording: the arm swings under random torques, the ball drops and bounces
        rng = np.random.default_rng(seed)
        q0 = np.r_[rng.uniform(-0.5, 0.5), 0.5, 0.0, 0.15, 1.0, 0.0, 0.0, 0.0]
        v0 = np.r_[0.0, rng.uniform(0.3, 1), rng.uniform(-0.5, 0.5), 0.0, 0.0, 0.0, 0.0]
        ctrl = np.repeat(rng.uniform(-1, 1, (9, 1)), 5, axis=0)[:40]
        d0 = mjx.make_data(mx).replace(qpos=q0, qvel=v0)
        _, traj = simulate(d0, ctrl)
        qpos, qvel = np.r_[q0[None], traj.qpos], np.r_[v0[None], traj.qvel]
        recs.append(Recording(qpos=qpos, qvel=qvel, ctrl=ctrl, dt=0.01))
    params = [Parameter("dof_damping", "hinge"), Parameter("geom_size", "ball", index=0)]
    ps = ParameterSet(m, params)
    truth = dict(zip(ps.labels, ps.start))
    loose = diffmjx.Config().override("integrator.rtol=1e-4", "integrator.atol=1e-4")
    r = sysid.identify(
        ps.write(ps.start * np.array([1.2, 0.9]), 0),
        params,
        recs,
        cfg=loose,
        fit=sysid.FitConfig(horizon=5),
        progress=False,
    )
    assert r.converged
    for key, iv in r.intervals.items():
        assert iv.lower <= truth[key] <= iv.upper, (key, iv, truth[key])
    radius = r.intervals["geom_size:ball[0]"]
    error = truth["geom_size:ball[0]"] - radius.value  # 7.6e-7: the bounce integrated at rtol 1e-4
    assert abs(error) > 1e-7 and abs(error - radius.bias) < 0.1 * abs(error), (error, radius)


def test_the_linear_gain_tells_a_floor_from_a_wrong_jacobian():
    """``linear_gain``: the share of the loss the Gauss-Newton step removes. At a stationary point with
    the right Jacobian (the residual orthogonal to its columns) none, whatever the loss left; with a
    Jacobian that points elsewhere most of it: an LM fit stopped there by rejected steps is a stall
    (``STALL_GAIN``), not a converged fit."""
    rng = np.random.default_rng(0)
    jac = rng.normal(size=(40, 3))
    q, _ = np.linalg.qr(jac, mode="complete")
    floor = q[:, 3:] @ rng.normal(size=37)  # orthogonal to the Jacobian's columns: J^T r = 0
    assert sysid.linear_gain(floor, jac) == pytest.approx(0.0, abs=1e-12)
    promised = jac @ rng.normal(size=3) + 0.1 * floor  # mostly in the Jacobian's range
    gain = sysid.linear_gain(promised, jac)
    assert gain > 0.9 and gain == pytest.approx(1 - 0.01 * (floor @ floor) / (promised @ promised), rel=1e-9)
    assert sysid.linear_gain(np.zeros(40), jac) == 0.0


def test_a_time_constant_that_the_models_refsafe_clamps_is_named():
    """A contact time constant that starts below twice the model's own timestep (2 ms here), where
    MuJoCo's refsafe raises it, is warned of by name before anything is compiled."""
    m = mujoco.MjModel.from_xml_string(CONTACT)
    qpos0 = np.r_[0.4, 0.5, 0.0, 0.0499, 1.0, 0.0, 0.0, 0.0]
    rec = record(m, qpos0, np.zeros(m.nv), np.zeros((3, 1)), 0.02)
    contact = Parameter("geom_solref", ("floor", "ball"), index=0)
    start = sysid.ParameterSet(m, [contact]).write(np.array([0.003]))
    with pytest.warns(UserWarning, match=r"^geom_solref:floor\+ball\[0\]: the time constant 0.003 s is below"):
        with pytest.raises(ValueError, match="no recording holds a segment"):  # stops before compiling
            sysid.identify(start, [contact], rec, fit=sysid.FitConfig(horizon=10), progress=False)


def test_contacts_whose_force_jumps_at_touchdown_are_named_before_compiling():
    """MuJoCo's default solimp (0.9 at touch) makes the contact force jump at every touchdown: where
    the fit's Jacobians miss it (integrator.saltation off, the default) identify names the geoms
    before anything is compiled; with the term (opt-in) and with solimp[0] = 0 (the test model's
    own) it stays quiet."""
    default = mujoco.MjModel.from_xml_string(CONTACT.replace(' solimp="0 0.95 0.001 0.5 2"', ""))
    qpos0 = np.r_[0.4, 0.5, 0.0, 0.0499, 1.0, 0.0, 0.0, 0.0]
    mass = [Parameter("body_mass", "ball")]
    off = diffmjx.Config().override("integrator.saltation=false")
    for m, cfg, jumps in (
        (default, off, True),
        (default, diffmjx.Config().override("integrator.saltation=true"), False),
        (mujoco.MjModel.from_xml_string(CONTACT), off, False),
    ):
        rec = record(m, qpos0, np.zeros(m.nv), np.zeros((3, 1)), 0.02)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="no recording holds a segment"):  # stops before compiling
                sysid.identify(m, mass, rec, cfg=cfg, fit=sysid.FitConfig(horizon=10), progress=False)
        shown = [str(w.message) for w in caught if issubclass(w.category, diffmjx.TouchdownJumpWarning)]
        if jumps:
            assert len(shown) == 1
            assert shown[0].startswith("identify: contacts of 'floor' (0.9), 'ball' (0.9) start with solimp[0] > 0")
        else:
            assert shown == []


def test_refsafe_clamps_at_the_models_timestep_not_the_sample_period():
    """A segment is simulated (adaptive Tsit5, the default) with the timestep set to its 20 ms sample
    period, yet a contact time constant clamps as in the model at its own 2 ms step: 10 ms and 15 ms (below twice the sample
    period) give different residuals, 1 ms and 3 ms (both below 4 ms) the same."""
    m = mujoco.MjModel.from_xml_string(CONTACT)
    qpos0 = np.r_[0.4, 0.5, 0.0, 0.049, 1.0, 0.0, 0.0, 0.0]  # the ball pressed 1 mm into the floor
    rec = record(m, qpos0, np.zeros(m.nv), np.zeros((3, 1)), 0.02).check(m)
    ps = sysid.ParameterSet(m, [Parameter("geom_solref", ("floor", "ball"), index=0)])
    problem = sysid.problem.Problem(ps, [rec], horizon=2, stride=1, cfg=diffmjx.Config())  # adaptive
    base, arrays = problem.arguments()[1][0]
    residual = jax.jit(lambda v: problem.group_residuals(v, 0, base, arrays))
    r = {tc: np.asarray(residual(jax.numpy.array([tc]))) for tc in (0.001, 0.003, 0.01, 0.015)}
    np.testing.assert_array_equal(r[0.001], r[0.003])
    assert np.max(np.abs(r[0.01] - r[0.015])) > 1e-3 * np.max(np.abs(r[0.01])), r


def test_identify_with_adam_on_a_quaternion_joint():
    """A spherical pendulum (ball joint) swinging and spinning: its damping from 50 % off, by Adam
    (forward-mode gradients; the reverse-mode adjoints' compile is the study's, not this test's)."""
    truth = mujoco.MjModel.from_xml_string(SPHERICAL)
    q = np.array([np.cos(0.3), np.sin(0.3), 0.0, 0.0])
    rec = record(truth, q, [0.0, 1.0, 2.0], np.zeros((30, 0)), 0.01)
    start = mujoco.MjModel.from_xml_string(SPHERICAL.replace('damping="0.05"', 'damping="0.075"'))
    fwd = sysid.forward_config(diffmjx.Config())  # Adam's gradient in forward mode: one parameter, one tangent
    r = sysid.identify(
        start,
        [Parameter("dof_damping", "ball", uniform=True)],
        [rec],
        cfg=fwd,
        fit=sysid.FitConfig(method="adam", horizon=5, steps=25, learning_rate=0.05, intervals=False),
        progress=False,
    )
    assert r.values["dof_damping:ball"] == pytest.approx(0.05, rel=0.02)
    assert r.loss < 1e-2 * r.loss_start


def test_adams_loss_on_every_segment_is_taken_a_minibatch_at_a_time():
    """With minibatches smaller than the data, Adam's start and end losses are the loss on every
    segment, summed a minibatch's worth at a time (a padded last chunk masked out). ``full_loss=false``
    (NaN, nothing evaluated) runs in the two-process test (tests/test_sysid_distributed.py)."""
    rec = pendulum_recording(0)  # 8 segments of 5 periods: chunks of 3, 3 and 2 (+1 padded)
    start = mujoco.MjModel.from_xml_string(START)
    params = PENDULUM_PARAMS[:2]
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler")
    fit = sysid.FitConfig(method="adam", horizon=5, steps=1, batch_size=3, intervals=False, tolerance_check=None)
    r = sysid.identify(start, params, [rec], cfg=cfg, fit=fit, progress=False)
    ps = ParameterSet(start, params)
    problem = sysid.Problem(ps, [rec.check(start)], 5, 5, cfg, fit.weights, fit.batching)
    whole = jax.jit(problem.loss)
    assert r.loss_start == pytest.approx(float(whole(jax.numpy.asarray(ps.theta0))), rel=1e-12)
    assert r.loss == pytest.approx(float(whole(jax.numpy.asarray(ps.to_theta(list(r.values.values()))))), rel=1e-12)
    assert r.loss != r.loss_start  # the step moved the values


@pytest.mark.slow  # suite budget: the MPC closed loop's resume test checks the shared checkpoint file by default
def test_identify_resumes_from_its_checkpoint(pendulum_fit, pendulum_checkpoint):
    """The fit run on from its checkpoint: the steps it holds kept, the same problem carried on."""
    done = len(pendulum_fit.history.step)
    resumed = _pendulum_identify(done + 2, pendulum_checkpoint)
    np.testing.assert_array_equal(resumed.history.step[:done], pendulum_fit.history.step)
    np.testing.assert_array_equal(resumed.history.values[:done], pendulum_fit.history.values)
    assert len(resumed.history.step) > done or resumed.converged
    with pytest.raises(ValueError, match="another fit \\(fit.horizon: 5 \\(checkpoint\\) vs 4 \\(now\\)\\)"):
        _pendulum_identify(done + 2, pendulum_checkpoint, horizon=4)


def test_fit_config_preset_overrides_and_bad_values():
    assert sysid.FitConfig.load("default") == sysid.FitConfig()
    cfg = sysid.FitConfig.load("default", ["fit.method=adam", "fit.horizon=4"])
    assert (cfg.method, cfg.horizon) == ("adam", 4)
    with pytest.raises(ValueError, match="fit.method='bfgs' is not allowed; choose one of: lm, adam"):
        sysid.FitConfig(method="bfgs")
    with pytest.raises(ValueError, match="fit.horizon=0 is out of range"):
        sysid.FitConfig.load(None, ["fit.horizon=0"])
    with pytest.raises(ValueError, match="fit.KEY=VALUE with KEY one of: method"):
        sysid.FitConfig().override("fit.solver=newton")


def test_select_fit_picks_the_lowest_held_out_loss(pendulum_fit):
    from types import SimpleNamespace

    worse = SimpleNamespace(held_out_loss=2 * pendulum_fit.held_out_loss)
    assert sysid.select_fit({"worse": worse, "fit": pendulum_fit})[0] == "fit"
    with pytest.raises(ValueError, match="fit 'none' has no finite held-out loss"):
        sysid.select_fit({"none": SimpleNamespace(held_out_loss=None)})


SERVO = PENDULUM.replace(
    '<motor name="m" joint="hinge" gear="2" ctrllimited="true" ctrlrange="-1 1"/>',
    '<position name="m" joint="hinge" kp="6" kv="0.2" ctrlrange="-1 1"/>',
)


def test_servo_kp_and_sensor_terms_are_identified_into_the_model():
    """A ``<position>`` servo's kp from 30 % off as one parameter (MuJoCo stores it as gainprm[0] and
    -biasprm[1]), and a position sensor that reads 1.2 x the angle 4 ms late, plus 0.05 (gain, bias
    and delay from their neutral starts), from readings with noise (0.1 mrad on the angle, 1e-3 on
    velocities and the sensor): kp within 1 %, every 95 % interval holding the truth; the fitted
    model holds kp in both fields and the delay in ``sensor_delay`` with a history buffer, which the
    C engine then reads; what MuJoCo cannot hold is listed."""
    truth = mujoco.MjModel.from_xml_string(SERVO)
    ctrl = np.repeat(np.random.default_rng(4).uniform(-1, 1, (9, 1)), 5, axis=0)[:40]
    rec = record(truth, [0.5], [0.0], ctrl, 0.01)
    sensed = sysid.problem.sensor_model(rec.sensordata, 1.2, 0.05, 0.004, rec.dt, xp=np)
    rng = np.random.default_rng(7)
    rec = dataclasses.replace(
        rec,
        qpos=rec.qpos + 1e-4 * rng.normal(size=rec.qpos.shape),
        qvel=rec.qvel + 1e-3 * rng.normal(size=rec.qvel.shape),
        sensordata=sensed + 1e-3 * rng.normal(size=sensed.shape),
    )
    params = [
        Parameter("actuator_kp", "m"),
        Parameter("sensor_gain", "angle"),
        Parameter("sensor_bias", "angle"),
        Parameter("sensor_delay", "angle"),
    ]
    spec = mujoco.MjSpec.from_string(SERVO.replace('kp="6"', 'kp="4.2"'))
    r = sysid.identify(spec, params, [rec], fit=sysid.FitConfig(horizon=5, steps=20), progress=False)
    assert r.values["actuator_kp:m"] == pytest.approx(6.0, rel=0.01)
    truths = {"actuator_kp:m": 6.0, "sensor_gain:angle": 1.2, "sensor_bias:angle": 0.05, "sensor_delay:angle": 0.004}
    for key, true in truths.items():
        iv = r.intervals[key]
        assert abs(iv.value - true) < 0.75 * (iv.upper - iv.value), (key, iv)  # inside, with a margin
        assert iv.upper - iv.lower < 0.1 * abs(true) + 0.01, (key, iv)
    m = r.model
    assert m.actuator_gainprm[0, 0] == -m.actuator_biasprm[0, 1] == r.values["actuator_kp:m"]
    assert m.actuator_biasprm[0, 2] == -0.2  # kv untouched
    assert m.sensor_delay[0] == r.values["sensor_delay:angle"] and m.sensor_history[0, 1] == 1
    assert set(r.not_in_model) == {"sensor_gain:angle", "sensor_bias:angle"}
    d = mujoco.MjData(m)
    d.qpos[0] = 0.5
    angle, read = [], []
    for _ in range(20):  # a reading is of the state its step starts from, ``delay`` earlier, interpolated
        angle.append(d.qpos[0])
        mujoco.mj_step(m, d)
        read.append(d.sensordata[0])
    back = m.sensor_delay[0] / m.opt.timestep  # about two 2 ms steps
    n, f = int(back), back - int(back)
    want = [(1 - f) * angle[k - n] + f * angle[k - n - 1] for k in range(n + 1, 20)]
    np.testing.assert_allclose(read[n + 1 :], want, rtol=0, atol=1e-9)


def test_fields_mujoco_stores_twice_are_tied_or_refused():
    """A servo's gain column writes its bias column too, as the compiler does; the bias column alone,
    a column the actuator's type never reads, and a contact property of a geom that touches nothing
    are errors that say what to fit instead."""
    muscle = '<muscle name="mu" joint="hinge" lengthrange=".5 1.5"/>'
    m = mujoco.MjModel.from_xml_string(SERVO.replace("</actuator>", muscle + "</actuator>"))
    ps = ParameterSet(m, [Parameter("actuator_gainprm", "m", index=0), Parameter("actuator_gainprm", "mu", index=2)])
    out = ps.write([7.5, 30.0])
    assert out.actuator_gainprm[0, 0] == 7.5 and out.actuator_biasprm[0, 1] == -7.5
    assert out.actuator_gainprm[1, 2] == out.actuator_biasprm[1, 2] == 30.0
    for bad, match in (
        (Parameter("actuator_biasprm", "m", index=1), r"position servo.*fit Parameter\('actuator_kp', 'm'\)"),
        (Parameter("actuator_biasprm", "mu", index=2), r"muscle.*fit Parameter\('actuator_gainprm', 'mu', index=2\)"),
        (Parameter("actuator_gainprm", "m", index=1), r"gain type fixed, which never reads actuator_gainprm\[1\]"),
        (Parameter("actuator_kv", "mu"), "kv is a parameter of a <position>, <intvelocity> or <velocity> servo"),
        (Parameter("geom_friction", "rod", index=0), "'rod' collide with nothing"),
    ):
        with pytest.raises(ParameterError, match=match):
            ParameterSet(m, [bad])


def test_parameters_that_set_one_bodys_mass_properties_two_ways_are_refused():
    """The mass ties read each field's role from its kind (``FieldKind.mass_role``): a mass that
    scales the inertia beside the inertia, the full mass properties beside a part of them, and a
    geom's size beside its body's centre of mass are errors naming both; a body's mass beside a geom
    position is one consistent model. A kind with an unknown role is refused when it is made."""
    xml = """<mujoco><worldbody><body name="b"><freejoint/>
      <geom name="g" type="box" size=".1 .1 .1"/><geom name="h" type="sphere" pos=".2 0 0" size=".05"/>
    </body></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    for pair, match in (
        (("body_mass", "body_inertia"), "body_inertia of the same body is a parameter too; pass scale_inertia=False"),
        (("body_inertial", "body_mass"), r"other mass parameters \(body_mass\) contradict"),
        (("geom_size", "body_ipos"), "inertia or centre of mass is a parameter too; pass mass_from_geoms=False"),
    ):
        params = [Parameter(f, "g" if f.startswith("geom") else "b") for f in pair]
        with pytest.raises(ParameterError, match=match):
            ParameterSet(m, params)
    ps = ParameterSet(m, [Parameter("geom_pos", "h"), Parameter("body_mass", "b")])
    assert ps.ties[0].mass and ps.ties[0].geo
    with pytest.raises(ValueError, match="mass_role must be one of"):
        sysid.FieldKind(mujoco.mjtObj.mjOBJ_BODY, 1, (0.0,), (1.0,), mass_role="density")


def test_a_geom_of_a_body_with_an_explicit_inertial_changes_its_shape_only():
    """As MuJoCo's compiler: the sphere's size does not set the inertia its body's <inertial> gives."""
    spec = mujoco.MjSpec.from_string(TIES)
    with pytest.warns(UserWarning, match="body 'full': its mass properties are an explicit <inertial>"):
        ps = ParameterSet(spec.compile(), [Parameter("geom_size", "fg", index=0)], spec=spec)
    assert not ps.ties[0].geo and ps.models[0].body_simple.tolist() == spec.compile().body_simple.tolist()


def test_intervals_of_a_parameter_seen_in_few_segments_still_hold_the_truth():
    """``confidence_intervals`` on a linear model whose second parameter only two of 40 segments see
    (a contact time constant seen in two bounces): its cluster-robust variance rests on two terms, so
    its degrees of freedom are about one and Student's t widens its interval accordingly. Over 400
    noisy data sets both parameters' 95 % intervals hold the truth 90-99 % of the time (with the
    segments less the parameters as degrees of freedom, the second's held it 79 % of the time)."""
    rng = np.random.default_rng(0)
    nseg, rows = 40, 5
    seg = np.repeat(np.arange(nseg), rows)
    keys = np.stack([np.zeros(nseg, int), np.arange(nseg) * 100], axis=1)  # far apart: no shared samples
    jac = np.stack([rng.normal(size=nseg * rows), np.where(seg < 2, rng.normal(size=nseg * rows), 0.0)], axis=1)
    truth = np.array([1.0, -2.0])
    covered, halfwidths = np.zeros(2), []
    for _ in range(400):
        y = jac @ truth + rng.normal(size=nseg * rows)
        est = np.linalg.lstsq(jac, y, rcond=None)[0]
        ivs, _ = sysid.confidence_intervals(jac @ est - y, jac, ["a", "b"], est, 0.95, (seg, keys, 1))
        covered += [ivs[k].lower <= t <= ivs[k].upper for k, t in zip("ab", truth)]
        halfwidths.append([(ivs[k].upper - ivs[k].value) / ivs[k].std for k in "ab"])
    assert np.all((covered / 400 >= 0.90) & (covered / 400 <= 0.99)), covered / 400
    t = np.median(halfwidths, axis=0)  # Student's t quantile each interval used
    assert 1.9 < t[0] < 2.2 and t[1] > 4.0, t
