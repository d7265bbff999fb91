"""System identification: segment-loss gradients, sharding, checkpoints and resume, the parameter file, knobs.

Compiled programs (module-scoped, so each is built once): the segment-loss gradient with the
perturbed losses (DiffMJX defaults), the same loss with fixed-step MJX + CFD, the training step
(fixed-step MJX), a padded whole-toss rollout (fixed-step MJX, forward only), and, in a subprocess
with two forced host devices, the loss and gradient unsharded and sharded.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmjx
from diffmjx import sysid
from diffmjx._mjx import mjx
from diffmjx.sysid import CubeParams, SysidConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
MJX_EULER = diffmjx.Config().override("integrator.solver=mjx_euler")


@pytest.fixture(scope="module")
def tosses():
    return sysid.load_tosses()[0]


def _corner_heights(qpos, half=0.0524):
    """Heights of the eight corners of a cube of half width ``half`` at a free-joint ``qpos``."""
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(qpos[3:7], np.float64))
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    return np.sort(qpos[2] + (signs * half) @ rot.reshape(3, 3)[2])


# Gradient check. The segment: the last 4 samples (3 predicted states) of toss_004, the cube resting
# flat, every bottom corner 0.9-1.4 mm inside the table (checked below), so all contact rows stay
# active over the 3 periods (the model's rest depth is 1.5 mm: it settles smoothly) and the loss is
# smooth in the parameters. In free flight the parameters have no effect at all (zero
# gradient: nothing to check); at touchdown or lift-off central differences straddle a kink.
HORIZON = 3
STEP = 1e-5  # relative
CHECKED = [("side_length", None), ("mass", None), ("solref", 0), ("solref", 1)]
RESTING_TOSS = "toss_004"


@pytest.fixture(scope="module")
def resting_segment(tosses):
    seg = sysid.segments(tosses, [RESTING_TOSS], HORIZON)
    i = len(seg.start) - 1
    return seg.qpos[i : i + 1], seg.qvel[i : i + 1]


def test_resting_segment_is_in_steady_contact(resting_segment):
    qpos, qvel = resting_segment
    for q in qpos[0]:
        bottom = _corner_heights(q)[:4]
        assert np.all(bottom < -9e-4) and np.all(bottom > -1.4e-3), bottom
    assert np.abs(qvel[0, :, :3]).max() < 0.02  # m/s: at rest up to motion-capture noise


def _perturbed(p, name, i, factor):
    v = np.array(getattr(p, name), np.float64)
    v[() if i is None else i] *= factor
    return p._replace(**{name: v})


def _value(p, name, i):
    return float(np.asarray(getattr(p, name), np.float64)[() if i is None else i])


def _as_jax(p):
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), p)


@pytest.fixture(scope="module")
def gradient_and_differences(resting_segment):
    qpos, qvel = resting_segment
    # the paper's sysid setting (checkpointed AD at 1e-5), whose gradient is the derivative of the
    # very solve that is differenced; backsolve's is within 1.3e-5 of it, not 1e-5
    cfg = diffmjx.Config.paper()
    base = mjx.put_model(sysid.cube_mjmodel(iterations=2))
    p0 = CubeParams()

    def loss(p):
        return sysid.segment_loss(p, base, qpos, qvel, cfg)

    shifted = [_perturbed(p0, n, i, 1 + s * STEP) for n, i in CHECKED for s in (1, -1)]
    batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float64) for x in xs]), *shifted)
    (value, grad), losses = jax.jit(lambda p, b: (jax.value_and_grad(loss)(p), jax.vmap(loss)(b)))(_as_jax(p0), batch)
    losses = np.asarray(losses).reshape(len(CHECKED), 2)
    fd = {(n, i): (losses[k, 0] - losses[k, 1]) / (2 * STEP * _value(p0, n, i)) for k, (n, i) in enumerate(CHECKED)}
    return float(value), grad, fd


@pytest.mark.slow  # suite budget: test_sysid_model checks the cube-parameter gradient through a rollout by default
def test_segment_loss_gradient_matches_central_differences(gradient_and_differences):
    value, grad, fd = gradient_and_differences
    assert 1e-8 < value < 1e-5  # the true cube predicts a resting segment to about a millimetre
    for (name, i), want in fd.items():
        got = float(np.asarray(getattr(grad, name))[() if i is None else i])
        if name == "mass":  # mass-invariant contact (docs/sysid.md): both ~0, rounding noise (measured
            # up to 5e-9 of the loss per relative change; the others' are above 1e-3 of it, asserted below)
            assert abs(got) * 0.37 < 1e-6 * value and abs(want) * 0.37 < 1e-6 * value, (got, want)
            continue
        assert abs(want) * _value(CubeParams(), name, i) > 1e-3 * value, (name, i, want)  # not vacuous
        assert abs(got - want) < 1e-5 * abs(want), (name, i, got, want)  # measured: 4e-7 at most


def test_quat_to_mat_matches_mujoco():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(5, 4))
    want = np.zeros((5, 9))
    for k in range(5):
        mujoco.mju_quat2Mat(want[k], q[k] / np.linalg.norm(q[k]))
    np.testing.assert_allclose(np.asarray(sysid.quat_to_mat(jnp.asarray(q))).reshape(5, 9), want, atol=1e-15)
    got = sysid.quat_to_mat(q, xp=np)  # the peer's NumPy path: the same function
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got.reshape(5, 9), want, atol=1e-15)


def test_state_residuals_square_to_the_state_error():
    """The one residual (Adam's loss, LM and the peer use it): its squared norm per state is
    |dp|^2 + ||dR||_F^2 + velocity_weight |dqvel|^2, in JAX and in NumPy alike."""
    rng = np.random.default_rng(5)
    qpos, qpos_rec = rng.normal(size=(2, 3, 4, 7))
    qvel, qvel_rec = rng.normal(size=(2, 3, 4, 6))
    r = np.asarray(sysid.state_residuals(jnp.asarray(qpos), jnp.asarray(qvel), qpos_rec, qvel_rec, 0.3))
    assert r.shape == (3, 4, 18)
    r_np = sysid.state_residuals(qpos, qvel, qpos_rec, qvel_rec, 0.3, xp=np)
    assert isinstance(r_np, np.ndarray)
    np.testing.assert_allclose(r_np, r, rtol=0, atol=1e-15)
    rot = sysid.quat_to_mat(qpos[..., 3:], xp=np) - sysid.quat_to_mat(qpos_rec[..., 3:], xp=np)
    want = (
        np.sum((qpos[..., :3] - qpos_rec[..., :3]) ** 2, axis=-1)
        + np.sum(rot**2, axis=(-2, -1))
        + 0.3 * np.sum((qvel - qvel_rec) ** 2, axis=-1)
    )
    np.testing.assert_allclose(np.sum(r**2, axis=-1), want, rtol=1e-14)
    np.testing.assert_array_equal(sysid.state_residuals(qpos, qvel, qpos_rec, qvel_rec, xp=np)[..., 12:], 0)


@pytest.mark.slow  # suite budget: CFD gradients stay covered by test_cfd, sysid gradients by test_sysid_model
def test_fixed_step_mjx_with_cfd_has_a_gradient(resting_segment):
    """A 60 mm cube at a resting cube's recorded states hangs 2 cm above the table. Fixed-step MJX
    has no gradient with respect to its side; with CFD (reach 5 cm) it has one that says "grow".
    Regression: MJX's Euler re-solves the acceleration from ``qfrc_constraint`` (Euler damping), so
    the straight-through must carry the constraint force too, not only ``qacc``."""
    qpos, qvel = resting_segment
    base = mjx.put_model(sysid.cube_mjmodel(iterations=4))
    cfd = MJX_EULER.override("collision.smooth=true", "cfd.enabled=true", "cfd.solimp=[0.0, 0.01, 0.05, 1.0, 4.0]")
    p = _as_jax(CubeParams(side_length=0.06))

    def loss(side, cfg):
        return sysid.segment_loss(p._replace(side_length=side), base, qpos, qvel, cfg)

    both = jax.jit(
        lambda s: (
            jax.value_and_grad(loss)(s, MJX_EULER.override("collision.smooth=true")),
            jax.value_and_grad(loss)(s, cfd),
        )
    )
    (v_plain, g_plain), (v_cfd, g_cfd) = both(p.side_length)
    assert float(v_plain) == float(v_cfd)  # CFD is in the gradient only
    assert abs(float(g_plain)) < 1e-15
    assert float(g_cfd) < -1e-5  # a larger cube would fall less: the loss drops


SHARDED = r"""
import json, sys
import numpy as np, jax, jax.numpy as jnp
import diffmjx
diffmjx.enable_compilation_cache(sys.argv[1])
from diffmjx import sysid
from diffmjx._mjx import mjx
assert jax.device_count() == 2, jax.devices()
tosses, _ = sysid.load_tosses()
seg = sysid.segments(tosses, [min(tosses)], 3)
idx = np.array([0, 30, 60, len(seg.start) - 1])  # flight, bounce, bounce, rest
qpos, qvel = seg.qpos[idx], seg.qvel[idx]
p = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), sysid.CubeParams(side_length=0.1))
batch, replicated = sysid.batch_sharding(4)
qs, vs = jax.device_put((qpos, qvel), batch)
flat = lambda g: [float(x) for leaf in jax.tree.leaves(g) for x in np.ravel(leaf)]
out = {"shards": len(qs.addressable_shards), "shard_rows": qs.addressable_shards[0].data.shape[0]}
for name, overrides, iterations in (("fixed", ["integrator.solver=mjx_euler"], 4), ("adaptive", [], 2)):
    cfg = diffmjx.Config().override(*overrides)
    base = mjx.put_model(sysid.cube_mjmodel(iterations=iterations))
    f = jax.jit(jax.value_and_grad(lambda p, q, v: sysid.segment_loss(p, base, q, v, cfg)))
    v1, g1 = f(p, qpos, qvel)
    v2, g2 = f(jax.device_put(p, replicated), qs, vs)
    out[name] = {"v1": float(v1), "v2": float(v2), "g1": flat(g1), "g2": flat(g2), "devices": len(v2.sharding.device_set)}
try:
    sysid.batch_sharding(3)
except ValueError as e:
    out["error"] = str(e)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow  # suite budget: a subprocess compiles both solvers again; the refusal below stays in the default run
def test_sharded_loss_and_gradient_equal_unsharded():
    """Two forced host devices, a minibatch of 4 segments (flight, bounces, rest) split 2 + 2.

    Fixed-step MJX: equal to 1e-10 (measured: 1e-19 on the loss, 1e-13 relative on the gradient).
    DiffMJX's adaptive default differs at its tolerance's level (measured 2e-4 relative on the loss,
    5e-4 on d loss / d side), and so does an unsharded minibatch cut into two halves: a vmapped
    lane rounds differently in another batch layout, and accept/reject decisions of the step-size
    controller and the 2-iteration Newton solve amplify the rounding. Not a sharding error."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    cache = os.environ.get("DIFFMJX_CACHE_DIR") or str(diffmjx.runtime.DEFAULT_CACHE)
    run = subprocess.run(
        [sys.executable, "-c", SHARDED, cache], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    r = json.loads(line.removeprefix("RESULT "))
    assert r["shards"] == 2 and r["shard_rows"] == 2  # really split over both devices
    for name, rtol in (("fixed", 1e-10), ("adaptive", 1e-2)):
        x = r[name]
        assert x["devices"] == 2
        assert x["v1"] > 0 and abs(x["v2"] - x["v1"]) <= rtol * 0.1 * abs(x["v1"]), (name, x["v1"], x["v2"])
        g1, g2 = np.array(x["g1"]), np.array(x["g2"])
        assert np.all(np.isfinite(g1)) and np.abs(g1).max() > 0
        np.testing.assert_allclose(g2, g1, rtol=rtol, atol=rtol * np.abs(g1).max(), err_msg=name)
    assert "train.batch_size=3 is not divisible by the 2 visible devices" in r["error"]


def test_batch_sharding_refuses_an_indivisible_batch():
    cpu = jax.devices()[0]
    with pytest.raises(ValueError, match=r"train\.batch_size=3 is not divisible by the 2 visible devices"):
        sysid.batch_sharding(3, devices=[cpu, cpu])
    batch, _ = sysid.batch_sharding(4)
    assert batch.spec == jax.sharding.PartitionSpec("batch")


# Training: 2 segments of a resting cube, a minibatch of 2, so every step sees the same data and the
# loss history is comparable step to step. Started at 115 mm the cube sits 5 mm deeper than the real
# one and is pushed up: the gradient says "shrink".
TRAIN_SETTINGS = (
    "integrator.solver=mjx_euler",
    "data.horizon=3",
    "train.horizon=3",
    "train.batch_size=2",
    "train.learning_rate=0.02",
    "train.inits={side_length: 0.115}",
)


@pytest.fixture(scope="module")
def train_segments(tosses):
    seg = sysid.segments(tosses, [min(tosses)], 3)
    keep = np.array([len(seg.start) - 9, len(seg.start) - 1])
    return sysid.Segments(seg.qpos[keep], seg.qvel[keep], seg.toss[keep], seg.start[keep])


@pytest.fixture(scope="module")
def training_runs(train_segments, tmp_path_factory):
    """Interrupted after epoch 2, resumed to 3; and 3 epochs in one go."""
    interrupted = tmp_path_factory.mktemp("interrupted")
    cfg = SysidConfig.load(None, TRAIN_SETTINGS)
    first = sysid.train(
        cfg.override("train.epochs=2", f"train.checkpoint_dir={interrupted}"), train_segments, progress=False
    )
    resumed = sysid.train(
        cfg.override("train.epochs=3", f"train.checkpoint_dir={interrupted}"), train_segments, progress=False
    )
    fresh_dir = tmp_path_factory.mktemp("fresh")
    fresh = sysid.train(
        cfg.override("train.epochs=3", f"train.checkpoint_dir={fresh_dir}"), train_segments, progress=False
    )
    return cfg, interrupted, first, resumed, fresh


@pytest.mark.slow  # suite budget: identify's Adam fit and its resume run by default (test_sysid_generic)
def test_training_reduces_the_loss(training_runs):
    *_, fresh = training_runs
    h = fresh.history
    np.testing.assert_array_equal(h.step, [1, 2, 3])
    np.testing.assert_array_equal(h.epoch, [0, 1, 2])
    assert np.all(np.diff(h.loss) < 0), h.loss  # same minibatch every step
    side = h.params.side_length
    assert 0.115 > side[0] > side[1] > side[2] > 0.1048, side  # shrinking towards the real cube
    assert fresh.params.side_length == side[-1]
    # only the free parameter moved
    for name in ("mass", "solref", "solimp", "friction"):
        want = getattr(CubeParams(), name)
        np.testing.assert_array_equal(getattr(h.params, name), np.broadcast_to(want, getattr(h.params, name).shape))
        np.testing.assert_array_equal(getattr(fresh.params, name), want)


@pytest.mark.slow  # suite budget: identify's Adam fit and its resume run by default (test_sysid_generic)
def test_resumed_training_ends_where_an_uninterrupted_one_does(training_runs, train_segments):
    cfg, interrupted, first, resumed, fresh = training_runs
    assert first.resumed_epochs == 0 and resumed.resumed_epochs == 2 and fresh.resumed_epochs == 0
    assert len(first.history.step) == 2
    for a, b in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(fresh.params), strict=True):
        np.testing.assert_array_equal(a, b)
    for field in ("step", "epoch", "loss"):
        np.testing.assert_array_equal(getattr(resumed.history, field), getattr(fresh.history, field))
    np.testing.assert_array_equal(resumed.history.params.side_length, fresh.history.params.side_length)
    # the checkpoint refuses another configuration and a run shorter than it
    other = cfg.override("train.epochs=4", "train.learning_rate=0.03", f"train.checkpoint_dir={interrupted}")
    with pytest.raises(ValueError, match=r"another configuration.*train\.learning_rate: 0\.02 \(checkpoint\) vs 0\.03"):
        sysid.train(other, train_segments, progress=False)
    shorter = cfg.override("train.epochs=1", f"train.checkpoint_dir={interrupted}")
    with pytest.raises(ValueError, match="holds 3 epochs, more than train.epochs=1"):
        sysid.train(shorter, train_segments, progress=False)


@pytest.mark.slow  # suite budget: identify's Adam fit and its resume run by default (test_sysid_generic)
def test_a_run_stopped_within_an_epoch_resumes_at_its_next_step(train_segments, tmp_path):
    """Checkpoints follow every step: 2 epochs of 2 minibatches, stopped after step 3 (within epoch 1) and
    resumed, end bit for bit where an uninterrupted run does; the piece's checkpoint holds 3 steps."""
    four = sysid.Segments(*(np.concatenate([x, x]) for x in train_segments))  # 2 minibatches of 2 per epoch
    cfg = SysidConfig.load(None, TRAIN_SETTINGS).override("train.epochs=2")
    piece = sysid.train(cfg.override(f"train.checkpoint_dir={tmp_path / 'a'}"), four, progress=False, stop_after=3)
    assert len(piece.history.step) == 3
    resumed = sysid.train(cfg.override(f"train.checkpoint_dir={tmp_path / 'a'}"), four, progress=False)
    whole = sysid.train(cfg.override(f"train.checkpoint_dir={tmp_path / 'b'}"), four, progress=False)
    assert (resumed.resumed_steps, resumed.resumed_epochs, whole.resumed_steps) == (3, 1, 0)
    np.testing.assert_array_equal(whole.history.epoch, [0, 0, 1, 1])
    for field in ("step", "epoch", "loss"):
        np.testing.assert_array_equal(getattr(resumed.history, field), getattr(whole.history, field))
    np.testing.assert_array_equal(resumed.history.params.side_length, whole.history.params.side_length)
    with pytest.raises(ValueError, match="stop_after=0 is invalid"):
        sysid.train(cfg, four, progress=False, stop_after=0)


def test_train_refuses_too_few_segments(train_segments):
    cfg = SysidConfig.load(None, TRAIN_SETTINGS)
    with pytest.raises(ValueError, match="2 segments hold no full minibatch of train.batch_size=4"):
        sysid.train(cfg.override("train.batch_size=4"), train_segments, progress=False)
    with pytest.raises(ValueError, match="train.steps_per_epoch=2 exceeds the 1 full minibatches"):
        sysid.train(cfg.override("train.steps_per_epoch=2"), train_segments, progress=False)
    with pytest.raises(ValueError, match=r"expected \(S, train.horizon \+ 1 = 5, 7\)"):
        sysid.train(cfg.override("data.horizon=4", "train.horizon=4"), train_segments, progress=False)


def test_trajectory_error_pads_and_masks(tosses):
    """Two tosses cut to 5 and 8 samples roll out in one padded program; each toss's error is its own
    (the padding neither changes its valid samples nor enters the mean)."""
    names = sorted(tosses)[:2]
    a5, b8 = (sysid.Toss(n, tosses[n].qpos[:k], tosses[n].qvel[:k]) for n, k in zip(names, (5, 8), strict=True))
    a8 = sysid.Toss(names[0], tosses[names[0]].qpos[:8], tosses[names[0]].qvel[:8])
    mean, per_toss = sysid.trajectory_error(CubeParams(), [a5, b8], MJX_EULER, per_toss=True)
    pq, _, mask = sysid.rollout_tosses(CubeParams(), [a8, b8], MJX_EULER)  # the same padded shape
    assert mask.all()
    err = 1e3 * np.linalg.norm(pq[:, 1:, :3] - np.stack([a8.qpos, b8.qpos])[:, 1:, :3], axis=-1)
    np.testing.assert_allclose(per_toss, [err[0, :4].mean(), err[1].mean()], rtol=1e-12)
    np.testing.assert_allclose(mean, (err[0, :4].sum() + err[1].sum()) / 11, rtol=1e-12)
    assert 0 < mean < 50  # mm over at most 7 periods (the first tosses start in flight)
    _, _, mask = sysid.rollout_tosses(CubeParams(), [a5, b8], MJX_EULER)
    np.testing.assert_array_equal(mask.sum(axis=1), [5, 8])


def test_params_json_round_trip_and_schema(tmp_path):
    path = tmp_path / "params.json"
    p = CubeParams(side_length=0.1031, friction=0.2)
    options = sysid.model_options(sysid.cube_mjmodel(iterations=4))
    assert options == {
        "timestep": sysid.DT,
        "solver": "newton",
        "iterations": 4,
        "ls_iterations": 10,
        "tolerance": 1e-8,
        "impratio": 1.0,
        "cone": "pyramidal",
    }
    assert sysid.model_options(mjx.put_model(sysid.cube_mjmodel(iterations=4))) == options
    overrides = sysid.sim_overrides(diffmjx.Config().override("cfd.enabled=true", "integrator.rtol=1e-6"))
    assert overrides == {"integrator.rtol": 1e-6, "cfd.enabled": True}
    written = sysid.save_params_json(path, p, options, overrides)
    d = json.loads(path.read_text())
    assert d == written and list(d) == list(sysid.PARAMS_JSON_KEYS)
    assert d["solref"] == [0.02, 1.0] and len(d["solimp"]) == 5 and d["side_length_m"] == 0.1031
    back = sysid.load_params_json(path)
    for name in CubeParams._fields:
        np.testing.assert_array_equal(getattr(back.params, name), getattr(p, name))
    assert back.options == options and back.config_overrides == overrides
    sysid.save_params_json(path, p, options, ["cfd.enabled=true"])
    assert sysid.load_params_json(path).config_overrides == ["cfd.enabled=true"]

    def broken(edit):
        bad = json.loads(json.dumps(written))
        edit(bad)
        path.write_text(json.dumps(bad))
        return path

    for key in sysid.PARAMS_JSON_KEYS:
        with pytest.raises(ValueError, match=f"missing key '{key}'"):
            sysid.load_params_json(broken(lambda b, key=key: b.pop(key)))
    with pytest.raises(ValueError, match="missing key 'options.cone'"):
        sysid.load_params_json(broken(lambda b: b["options"].pop("cone")))
    with pytest.raises(ValueError, match="unknown key 'extra'"):
        sysid.load_params_json(broken(lambda b: b.update(extra=1)))
    with pytest.raises(ValueError, match=r"solimp=\[0\.05\] is invalid; expected a list of 5 numbers"):
        sysid.load_params_json(broken(lambda b: b.update(solimp=[0.05])))
    with pytest.raises(ValueError, match="options.solver='fast' is not allowed; choose one of: pgs, cg, newton"):
        sysid.load_params_json(broken(lambda b: b["options"].update(solver="fast")))
    with pytest.raises(ValueError, match=r"CubeParams\.side_length \(m\)=-0\.1"):
        sysid.load_params_json(broken(lambda b: b.update(side_length_m=-0.1)))
    with pytest.raises(ValueError, match="config_overrides=3 is invalid"):
        sysid.save_params_json(tmp_path / "never.json", p, options, 3)
    assert not (tmp_path / "never.json").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"learning_rate": 0.0}, r"train\.learning_rate=0\.0 is out of range; it must be > 0"),
        ({"batch_size": 0}, r"train\.batch_size=0 is out of range; it must be >= 1"),
        ({"batch_size": 2.5}, r"train\.batch_size=2\.5 \(float\) is invalid; expected int"),
        ({"horizon": 0}, r"train\.horizon=0 is out of range"),
        ({"epochs": 0}, r"train\.epochs=0 is out of range"),
        ({"steps_per_epoch": 0}, r"train\.steps_per_epoch=0 is out of range"),
        ({"iterations": 0}, r"train\.iterations=0 is out of range"),
        ({"velocity_weight": -1.0}, r"train\.velocity_weight=-1\.0 is out of range"),
        ({"seed": -1}, r"train\.seed=-1 is out of range"),
        (
            {"free": ("size",)},
            r"train\.free: 'size' is not allowed; choose among: side_length, mass, solref, solimp, friction",
        ),
        ({"free": ()}, r"train\.free=\(\) is invalid; expected a non-empty list of names among: side_length"),
        ({"free": ("mass", "mass")}, r"train\.free=\['mass', 'mass'\] names a parameter twice"),
        ({"inits": {"size": 0.1}}, r"train\.inits: 'size' is not a CubeParams field; choose among: side_length"),
        ({"inits": {"side_length": -0.06}}, r"train\.inits: CubeParams\.side_length \(m\)=-0\.06 is invalid"),
        ({"inits": {"solref": 0.02}}, r"train\.inits\.solref=0\.02 is invalid; expected a list of 2 numbers"),
        (
            {"inits": {"solimp": [0.05, 0.95, 0.01, 0.5, 1.0]}},
            r"train\.inits: CubeParams\.solimp\[4\] \(power\)=1\.0 .*open",
        ),
        ({"inits": 0.06}, r"train\.inits=0\.06 is invalid; expected a mapping of CubeParams fields"),
        ({"checkpoint_dir": 3}, r"train\.checkpoint_dir=3 \(int\) is invalid; expected str or None"),
    ],
)
def test_train_config_bad_values_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)


def test_train_config_normalises():
    tc = TrainConfig(free=["friction", "side_length"], inits={"solref": [0.03, 1], "side_length": 0.06})
    assert tc.free == ("side_length", "friction")  # CubeParams order
    assert tc.inits == (("side_length", 0.06), ("solref", (0.03, 1.0)))
    p = tc.initial_params()
    assert float(p.side_length) == 0.06 and p.solref.tolist() == [0.03, 1.0] and float(p.mass) == 0.37
    assert TrainConfig(free="mass").free == ("mass",)
    same = TrainConfig(free=["side_length", "friction"], inits={"side_length": 0.06, "solref": (0.03, 1.0)})
    assert same == tc and hash(same) == hash(tc)  # frozen and hashable, like the DiffMJX sections


def test_sysid_config_overrides_presets_and_yaml(tmp_path):
    cfg = SysidConfig.load(
        "quick",
        [
            "integrator.solver=mjx_euler",
            "sim.collision.smooth=true",
            "train.inits={side_length: 0.06}",
            "train.free=[side_length, friction]",
        ],
    )
    assert cfg.sim.integrator.solver == "mjx_euler" and cfg.sim.collision.smooth
    assert cfg.iterations == 4 and SysidConfig().iterations == 2
    assert cfg.override("train.iterations=3").iterations == 3
    assert cfg.train.free == ("side_length", "friction") and dict(cfg.train.inits) == {"side_length": 0.06}
    cfg.to_yaml(tmp_path / "c.yaml")
    assert SysidConfig.from_yaml(tmp_path / "c.yaml") == cfg
    paper = SysidConfig.load("paper")
    assert (paper.train.learning_rate, paper.train.batch_size, paper.train.horizon) == (1e-3, 64, 4)
    assert paper.sim == diffmjx.Config.paper()  # the one definition of the paper's setting
    with pytest.raises(ValueError, match="unknown sysid preset 'fast'; choose one of: paper, quick"):
        SysidConfig.load("fast")
    with pytest.raises(ValueError, match=r"bad override 'train\.rate=1'.*train\.learning_rate"):
        cfg.override("train.rate=1")
    with pytest.raises(ValueError, match=r"train\.horizon=8 differs from data\.horizon=4"):
        cfg.override("train.horizon=8")
    assert cfg.override("train.horizon=8", "data.horizon=8").data.horizon == 8  # checked at the end
    with pytest.raises(ValueError, match=r"integrator\.solver='rk45' is not allowed"):
        cfg.override("sim.integrator.solver=rk45")
    with pytest.raises(ValueError, match="unknown config section 'model'"):
        SysidConfig.from_dict({"model": {}})


def test_batching_auto_maps_adaptive_solves_on_a_cpu_and_refuses_unknown_values():
    """``auto``: one segment after another where step counts differ (adaptive, CPU), lock-step otherwise."""
    assert jax.default_backend() == "cpu"
    assert sysid.resolve_batching("auto", diffmjx.Config()) == "map"
    assert sysid.resolve_batching("auto", diffmjx.Config().override("integrator.solver=mjx_euler")) == "vmap"
    assert sysid.resolve_batching("auto", diffmjx.Config().override("integrator.step_control=constant")) == "vmap"
    assert sysid.resolve_batching("vmap", diffmjx.Config()) == "vmap"
    with pytest.raises(ValueError, match="batching='scan' is not allowed; choose one of: auto, vmap, map"):
        sysid.resolve_batching("scan", diffmjx.Config())
    with pytest.raises(ValueError, match="train.batching='scan' is not allowed; choose one of: auto, vmap, map"):
        SysidConfig.load(None, ["train.batching=scan"])
    # map and vmap give the same rows (a function without a solve: bit for bit), in chunks or not
    x = jnp.arange(12.0).reshape(6, 2)
    f = lambda r: (jnp.sin(r) * r[::-1], r.sum())
    ref = jax.vmap(f)(x)
    for chunks in (1, 2, 3, 4):  # 4 does not divide 6: one map
        out = sysid.map_segments(f, (x,), "map", chunks)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
            np.testing.assert_array_equal(a, b)
