"""System identification over several processes: settings of ``sysid.distributed`` and a two-process run.

The two-process test launches, with ``subprocess``, two processes of one CPU device each that find
each other through a coordinator on a free localhost port (``jax.distributed``, gloo collectives),
and one process with two forced host devices; all three train the same fixed-step run and evaluate
the same tosses sharded, and the two-process results must equal the one-process ones.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import diffmjx
from diffmjx.sysid import distributed

ROOT = Path(__file__).resolve().parents[1]
ENV_VARS = (distributed.ENV_COORDINATOR, distributed.ENV_NUM_PROCESSES, distributed.ENV_PROCESS_ID)


def _env(coordinator=None, count=None, pid=None):
    return {k: v for k, v in zip(ENV_VARS, (coordinator, count, pid)) if v is not None}


def test_settings_from_environment_and_arguments():
    assert distributed.process_settings(environ={}) == (0, 1, None)  # nothing set: one process
    assert distributed.process_settings(environ=_env("", "", "")) == (0, 1, None)  # empty counts as unset
    assert distributed.process_settings(environ=_env(count="1")) == (0, 1, None)
    env = _env("node001:12355", " 4 ", "3")
    assert distributed.process_settings(environ=env) == (3, 4, "node001:12355")
    # an argument wins over its variable
    assert distributed.process_settings("10.0.0.1:1234", 2, 0, environ=env) == (0, 2, "10.0.0.1:1234")
    assert distributed.process_settings(process_id=1, environ=env) == (1, 4, "node001:12355")


@pytest.mark.parametrize(
    ("args", "env", "match"),
    [
        ({}, _env(count="two"), r"num_processes \(DIFFMJX_NUM_PROCESSES\)='two' is invalid; expected an integer >= 1"),
        ({"num_processes": 0}, {}, r"num_processes \(DIFFMJX_NUM_PROCESSES\)=0 is invalid; expected an integer >= 1"),
        ({"num_processes": 2.5}, {}, r"num_processes \(DIFFMJX_NUM_PROCESSES\)=2.5 is invalid"),
        ({}, _env("h:1", "2", "-1"), r"process_id \(DIFFMJX_PROCESS_ID\)='-1' is invalid; expected an integer >= 0"),
        ({}, _env("h:1", "2", "2"), r"process_id \(DIFFMJX_PROCESS_ID\)=2 is not allowed with num_processes=2"),
        ({}, _env("h:3", "4", "7"), r"expected one of 0\.\.3"),
        ({}, _env("node001", "2", "0"), r"coordinator_address \(DIFFMJX_COORDINATOR\)='node001' is invalid"),
        ({}, _env("node001", "2", "0"), r"expected HOST:PORT"),
        ({}, _env("node001:99999", "2", "0"), r"expected HOST:PORT with a port in 1\.\.65535"),
        ({}, _env(count="2", pid="0"), r"num_processes=2 needs coordinator_address \(DIFFMJX_COORDINATOR\) as well"),
        ({}, _env("h:1", "2"), r"num_processes=2 needs process_id \(DIFFMJX_PROCESS_ID\) as well"),
        ({}, _env(pid="1"), r"process_id=1 is set but num_processes \(DIFFMJX_NUM_PROCESSES\) is not"),
        ({}, _env("h:1"), r"coordinator_address='h:1' is set but num_processes \(DIFFMJX_NUM_PROCESSES\) is not"),
    ],
)
def test_bad_or_contradictory_settings_name_the_setting(args, env, match):
    with pytest.raises(ValueError, match=match):
        distributed.process_settings(**args, environ=env)


def test_initialize_is_a_no_op_for_one_process(monkeypatch):
    for k in ENV_VARS:
        monkeypatch.delenv(k, raising=False)
    assert distributed.initialize() == (0, 1, None)
    assert distributed.initialize(num_processes=1) == (0, 1, None)
    monkeypatch.setenv(distributed.ENV_NUM_PROCESSES, "2")  # bad settings raise before JAX is touched
    with pytest.raises(ValueError, match="needs coordinator_address"):
        distributed.initialize()


# A worker: fixed-step MJX (exact to rounding across layouts; docs/sysid.md), 2 free parameters,
# 4 segments near the table, minibatches of 2 (one per device), 2 Adam steps; then 3 tosses of 8
# samples rolled out sharded (padded to 4). argv: compile cache, output folder.
WORKER = r"""
import json, sys
from pathlib import Path
from diffmjx import sysid
procs = sysid.distributed.initialize()  # DIFFMJX_* variables; none set: one process
import jax, numpy as np, diffmjx
diffmjx.enable_compilation_cache(sys.argv[1])
out = Path(sys.argv[2])
assert jax.device_count() == 2, jax.devices()
tosses, train_names, _, _ = sysid.load_split(sysid.DataConfig(horizon=2))
seg = sysid.segments(tosses, train_names, 2)
near = np.flatnonzero((seg.qpos[:, :, 2].min(1) < 0.06) & (np.linalg.norm(seg.qvel[:, 0, :2], axis=1) > 0.2))
keep = np.random.default_rng(0).choice(near, 4, replace=False)
data = sysid.Segments(seg.qpos[keep], seg.qvel[keep], seg.toss[keep], seg.start[keep])
cfg = sysid.SysidConfig.load(None, [
    "integrator.solver=mjx_euler", "data.horizon=2", "train.horizon=2", "train.batch_size=2",
    "train.learning_rate=0.02", "train.free=[side_length, solref]", "train.inits={side_length: 0.11}",
    f"train.checkpoint_dir={out / f'checkpoint{jax.process_index()}'}",
])
res = sysid.train(cfg, data, progress=False)
names = sorted(tosses)[:3]
short = [sysid.Toss(n, tosses[n].qpos[:8], tosses[n].qvel[:8]) for n in names]
r = {
    "processes": [jax.process_index(), jax.process_count()], "settings": list(procs),
    "local_devices": jax.local_device_count(),
    "params": [float(x) for leaf in jax.tree.leaves(res.params) for x in np.ravel(leaf)],
    "loss": res.history.loss.tolist(),
    "side": res.history.params.side_length.tolist(),
    "error_sharded": sysid.trajectory_error(res.params, short, cfg, devices=jax.devices()),
}
if jax.process_count() == 1:
    r["error_unsharded"] = sysid.trajectory_error(res.params, short, cfg)
print("RESULT " + json.dumps(r), flush=True)
"""

AGREEMENT = 1e-12  # relative, docs/sysid.md "On more than one machine"; measured: bit for bit (difference 0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _result(proc: subprocess.Popen, timeout: float) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1].removeprefix("RESULT "))


@pytest.mark.slow  # suite budget: 71 s warm, 168 s with an empty compile cache (2 shared cores); process 1
# compiles every time (JAX's persistent cache serves process 0 only)
def test_two_processes_train_and_evaluate_like_one_with_two_devices(tmp_path):
    cache = os.environ.get("DIFFMJX_CACHE_DIR") or str(diffmjx.runtime.DEFAULT_CACHE)
    base = {k: v for k, v in os.environ.items() if k not in ENV_VARS and "proxy" not in k.lower()}
    base["JAX_PLATFORMS"] = "cpu"
    coordinator = f"127.0.0.1:{_free_port()}"
    t0 = time.perf_counter()
    procs = []
    for name, env in (
        ("one", {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}),
        *((f"p{i}", {"XLA_FLAGS": "", **_env(coordinator, "2", str(i))}) for i in range(2)),
    ):
        (tmp_path / name).mkdir()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, cache, str(tmp_path / name)],
                env={**base, **env},
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        one, p0, p1 = (_result(p, timeout=900) for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    print(f"wall {time.perf_counter() - t0:.1f} s")
    assert one["processes"] == [0, 1] and one["local_devices"] == 2 and one["settings"] == [0, 1, None]
    for i, r in enumerate((p0, p1)):
        assert r["processes"] == [i, 2] and r["local_devices"] == 1 and r["settings"] == [i, 2, coordinator]
    # the run moved: two steps, both free parameters changed (side 110 -> 112.1 -> 110.2 mm when written)
    assert len(one["loss"]) == 2 and abs(one["side"][1] - 0.11) > 1e-4 and abs(one["side"][0] - 0.11) > 1e-3
    assert abs(one["params"][2] - 0.02) > 1e-8 and abs(one["params"][3] - 1.0) > 1e-4  # solref
    for r in (p0, p1):
        for key in ("params", "loss", "side"):
            np.testing.assert_allclose(r[key], one[key], rtol=AGREEMENT, atol=0, err_msg=key)
        np.testing.assert_allclose(r["error_sharded"], one["error_sharded"], rtol=AGREEMENT)
    np.testing.assert_allclose(one["error_sharded"], one["error_unsharded"], rtol=AGREEMENT)
    diffs = [np.max(np.abs(np.subtract(r[k], one[k])) / np.abs(one[k])) for r in (p0, p1) for k in ("params", "loss")]
    print(f"largest relative difference from the one-process run: {max(diffs):.1e}")
    # process 0 alone writes the checkpoint
    assert (tmp_path / "p0" / "checkpoint0" / "checkpoint.npz").is_file()
    assert not (tmp_path / "p1" / "checkpoint1").exists()
    assert (tmp_path / "one" / "checkpoint0" / "checkpoint.npz").is_file()
