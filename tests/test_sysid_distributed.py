"""System identification over several processes: settings of ``sysid.distributed`` and a two-process run.

The two-process test launches, with ``subprocess``, two processes of one CPU device each that find
each other through a coordinator on a free localhost port (``jax.distributed``, gloo collectives),
and one process with two forced host devices; all three run the same fixed-step Adam fit of
:func:`diffmjx.sysid.identify` with its minibatches sharded, and the two-process results must equal
the one-process ones.
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


# A worker: fixed-step MJX (exact to rounding across layouts; docs/sysid.md), a driven pendulum's
# damping and gear from 30 % off, 8 segments, minibatches of 2 (one per device), 2 Adam steps of
# sysid.identify with a held-out recording, full_loss=false. argv: compile cache, output folder.
WORKER = r"""
import json, sys
from pathlib import Path
from diffmjx import sysid
procs = sysid.distributed.initialize()  # DIFFMJX_* variables; none set: one process
import jax, mujoco, numpy as np, diffmjx
diffmjx.enable_compilation_cache(sys.argv[1])
out = Path(sys.argv[2])
assert jax.device_count() == 2, jax.devices()
XML = ('<mujoco><option timestep="0.002"/><worldbody><body name="arm" pos="0 0 1">'
       '<joint name="hinge" axis="0 1 0" damping="0.3"/><geom type="capsule" fromto="0 0 0 .4 0 0" size=".03" mass="1"/>'
       '</body></worldbody><actuator><motor name="m" joint="hinge" gear="2"/></actuator></mujoco>')
truth = mujoco.MjModel.from_xml_string(XML)
ctrl = np.random.default_rng(0).uniform(-1, 1, (16, 1))
rec = sysid.Recording.simulate(truth, ctrl, 0.01, qpos0=[0.3], qvel0=[0.0], step=1e-3)
start = mujoco.MjModel.from_xml_string(XML.replace('damping="0.3"', 'damping="0.39"').replace('gear="2"', 'gear="2.6"'))
res = sysid.identify(
    start,
    [sysid.Parameter("dof_damping", "hinge"), sysid.Parameter("actuator_gear", "m", index=0)],
    [rec],
    held_out=sysid.Recording.simulate(truth, ctrl[::-1], 0.01, qpos0=[-0.2], qvel0=[0.0], step=1e-3),
    cfg=diffmjx.Config().override("integrator.solver=mjx_euler"),
    fit=sysid.FitConfig(method="adam", horizon=2, batch_size=2, steps=2, learning_rate=0.05, intervals=False,
                        tolerance_check=None, full_loss=False),
    checkpoint_path=out / f"checkpoint{jax.process_index()}" / "fit.npz",
    progress=False,
)
r = {
    "processes": [jax.process_index(), jax.process_count()], "settings": list(procs),
    "local_devices": jax.local_device_count(),
    "params": [float(v) for v in res.values.values()],
    "loss": res.history.loss.tolist(),
    "damping": [float(v[0]) for v in res.history.values],
    "held_out": res.history.held_out.tolist(),
    "losses_skipped": bool(np.isnan(res.loss_start) and np.isnan(res.loss)),
}
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


@pytest.mark.slow  # suite budget: 52-58 s on 2 cores (measured with a warm compile cache); process 1
# compiles every time (JAX's persistent cache serves process 0 only)
def test_two_processes_fit_like_one_with_two_devices(tmp_path):
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
    # the run moved: two steps, both free parameters changed (from 0.39 and 2.6)
    assert len(one["loss"]) == 2 and abs(one["damping"][1] - one["damping"][0]) > 1e-4
    assert abs(one["params"][0] - 0.39) > 1e-3 and abs(one["params"][1] - 2.6) > 1e-3
    assert len(one["held_out"]) == 2 and all(np.isfinite(one["held_out"]))  # evaluated after every step
    assert one["losses_skipped"] and p0["losses_skipped"]  # full_loss=false: start and end losses NaN
    for r in (p0, p1):
        for key in ("params", "loss", "damping", "held_out"):
            np.testing.assert_allclose(r[key], one[key], rtol=AGREEMENT, atol=0, err_msg=key)
    diffs = [np.max(np.abs(np.subtract(r[k], one[k])) / np.abs(one[k])) for r in (p0, p1) for k in ("params", "loss")]
    print(f"largest relative difference from the one-process run: {max(diffs):.1e}")
    # process 0 alone writes the checkpoint
    assert (tmp_path / "p0" / "checkpoint0" / "fit.npz").is_file()
    assert not (tmp_path / "p1" / "checkpoint1").exists()
    assert (tmp_path / "one" / "checkpoint0" / "fit.npz").is_file()
