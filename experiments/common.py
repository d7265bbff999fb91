"""Scenes and helpers shared by the studies (thin over the library; the library never imports this)."""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import hashlib
import io
import os
import pickle
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

import diffmjx
from diffmjx import collision

with contextlib.redirect_stdout(io.StringIO()):
    from mujoco import mjx

SCENES = Path(__file__).parent / "scenes"
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

# The library defaults before the gradient-fidelity suite moved them (checkpointed AD at 1e-5,
# MuJoCo's impedance floor, the model's own solver budget differentiated by unrolling, MJX's
# plane-box and plane-cylinder rules): studies whose committed figures were made at those
# defaults pin them, so a rerun reproduces the figures.
PINNED = ("integrator.adjoint=checkpoint", "integrator.rtol=1e-5", "integrator.atol=1e-5",
          "solver.impedance_floor=1e-4", "solver.min_iterations=0", "solver.max_tolerance=1",
          "solver.gradient=unroll", "collision.plane_box=mjx", "collision.plane_cylinder=mjx", "collision.box_box=mjx")  # fmt: skip

CUBE_TOSS = dict(qz0=0.2, vy0=-0.1, u0=-2.0, horizon=100)


def load(name: str, **patch) -> tuple[mujoco.MjModel, mjx.Model]:
    """MjModel and mjx.Model of ``experiments/scenes/<name>.xml``; ``patch`` sets ``opt`` fields."""
    mj = mujoco.MjModel.from_xml_path(str(SCENES / f"{name}.xml"))
    for k, v in patch.items():
        setattr(mj.opt, k, v)
    return mj, mjx.put_model(mj)


# Tossed primitives (paper Fig. 21): the cube toss with the cube's geom swapped.
PRIMITIVES = {
    "ball": 'type="sphere" size="0.05"',
    "cube": 'type="box" size="0.05 0.05 0.05" euler="60 0 0"',
    "capsule": 'type="capsule" size="0.03 0.05" euler="60 0 0"',
    "cylinder": 'type="cylinder" size="0.05 0.05" euler="60 0 0"',
    "ellipsoid": 'type="ellipsoid" size="0.06 0.05 0.04" euler="60 0 0"',
}


def primitive(kind: str) -> tuple[mujoco.MjModel, mjx.Model]:
    """The cube-toss scene with the thrown body's geom replaced by ``PRIMITIVES[kind]``."""
    if kind not in PRIMITIVES:
        raise ValueError(f"primitive {kind!r} is not known; choose one of: {', '.join(PRIMITIVES)}")
    xml = (SCENES / "cube_toss.xml").read_text()
    old = 'type="box" size="0.05 0.05 0.05" density="100" euler="60 0 0"'
    assert old in xml
    mj = mujoco.MjModel.from_xml_string(xml.replace(old, PRIMITIVES[kind] + ' density="100"'))
    return mj, mjx.put_model(mj)


def contacts_fn(mx: mjx.Model, smooth: bool, sharpness: float):
    """``qpos -> (dist, pos, frame)`` of every contact slot: MJX's collision stage, or with
    ``smooth`` DiffMJX's smoothed one at ``sharpness``. Not jitted; wrap it in ``jit``/``vmap``."""
    d0 = mjx.make_data(mx)

    def contacts(qpos):
        c = collision.detect(mx, d0.replace(qpos=qpos), sharpness if smooth else None)
        return c.dist, c.pos, c.frame

    return contacts


def box_corner_heights(mx: mjx.Model, qpos, half: float = 0.05, geom: int = 1) -> np.ndarray:
    """Heights above z = 0 of the eight corners of box ``geom`` (half-size ``half``) at ``qpos``, sorted."""
    d = jax.jit(mjx.kinematics)(mx, mjx.make_data(mx).replace(qpos=jnp.asarray(qpos)))
    centre, rot = np.asarray(d.geom_xpos[geom]), np.asarray(d.geom_xmat[geom]).reshape(3, 3)
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    return np.sort(centre[2] + (signs * half) @ rot[2])


def cube_toss_data(mx: mjx.Model, u0=CUBE_TOSS["u0"]) -> mjx.Data:
    """Initial state of the cube toss: qpos[2] = 0.2, qvel[1] = -0.1, qvel[2] = u0."""
    d = mjx.make_data(mx)
    qvel = d.qvel.at[1].set(CUBE_TOSS["vy0"]).at[2].set(u0)
    return d.replace(qpos=d.qpos.at[2].set(CUBE_TOSS["qz0"]), qvel=qvel)


def cube_toss_loss(mx: mjx.Model, cfg: diffmjx.Config, horizon: int = CUBE_TOSS["horizon"]):
    """Loss of the cube toss as a function of u0: final qpos[1] after ``horizon`` periods."""
    ctrls = jnp.zeros((horizon, mx.nu))

    def loss(u0):
        d, _ = diffmjx.rollout(mx, cube_toss_data(mx, u0), ctrls, cfg)
        return d.qpos[1]

    return loss


def _warn_refsafe(mj: mujoco.MjModel, dt: float) -> None:
    """Warn when MuJoCo's ``refsafe`` makes the reference a different physics: it raises every
    ``solref`` time constant below twice ``opt.timestep`` to that, so a model whose time constants
    sit below twice its own (control) step has softer contacts in MJX / DiffMJX than in the C engine
    at the reference's smaller ``dt``. Scenes compared with the C engine disable ``refsafe``."""
    if mj.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_REFSAFE:
        return
    solrefs = [np.asarray(getattr(mj, f)).reshape(-1, 2) for f in ("geom_solref", "pair_solref", "eq_solref", "jnt_solref")]
    timeconst = np.concatenate([r[:, 0] for r in solrefs])
    soft = timeconst[(timeconst > 0) & (timeconst < 2 * mj.opt.timestep)]
    if soft.size and dt < mj.opt.timestep:
        warnings.warn(
            f"refsafe is on and solref time constants down to {soft.min():g} s are below twice the model's "
            f"timestep ({mj.opt.timestep:g} s): MJX and DiffMJX raise them to {2 * mj.opt.timestep:g} s, the C engine at "
            f"dt = {dt:g} s does not, so the reference runs stiffer contacts. Disable refsafe in the scene",
            stacklevel=3,
        )


def c_engine_rk4(
    mj: mujoco.MjModel, seconds: float, dt: float, qpos=None, qvel=None, ctrl=None, each_step=None
) -> mujoco.MjData:
    """MuJoCo's C engine with RK4 at ``dt`` for ``seconds``: the studies' independent reference.

    Starts from ``qpos`` / ``qvel`` (the model's initial state where None) with controls ``ctrl``
    (held) on a copy of ``mj``; ``each_step(data)`` runs after every step. Returns the final
    ``MjData``.
    """
    _warn_refsafe(mj, dt)
    mj = copy.copy(mj)
    mj.opt.timestep, mj.opt.integrator = dt, mujoco.mjtIntegrator.mjINT_RK4
    data = mujoco.MjData(mj)
    if qpos is not None:
        data.qpos[:] = qpos
    if qvel is not None:
        data.qvel[:] = qvel
    if ctrl is not None:
        data.ctrl[:] = ctrl
    for _ in range(int(round(seconds / dt))):
        mujoco.mj_step(mj, data)
        if each_step is not None:
            each_step(data)
    return data


def c_engine_cube_toss(u0: float, dt: float = 1e-5, seconds: float = 1.0) -> float:
    """Final qpos[1] of the cube toss in MuJoCo's C engine with RK4 at ``dt``."""
    mj, _ = load("cube_toss")
    qpos, qvel = mj.qpos0.copy(), np.zeros(mj.nv)
    qpos[2], qvel[1], qvel[2] = CUBE_TOSS["qz0"], CUBE_TOSS["vy0"], u0
    return float(c_engine_rk4(mj, seconds, dt, qpos, qvel).qpos[1])


STAGES = Path(os.environ.get("DIFFMJX_STAGE_CACHE", Path.home() / ".cache" / "diffmjx" / "stages"))


def stage(name: str, key: object, fn, fresh: bool = False):
    """``fn()``, or its result saved by an earlier run with the same ``name`` and ``key``.

    Long studies save each finished stage, so an interrupted run resumes where it stopped instead of
    recomputing an hour of gradients. ``key`` must name everything the result depends on (config
    YAML, sweep points, ...). ``fresh=True`` (``--fresh`` on the command line) recomputes and
    overwrites; ``DIFFMJX_STAGE_CACHE`` moves the store.
    """
    digest = hashlib.sha256(repr((name, key, mujoco.__version__)).encode()).hexdigest()[:16]
    path = STAGES / f"{name}-{digest}.pkl"
    if path.exists() and not fresh:
        print(f"{name}: reusing {path}")
        with open(path, "rb") as f:
            return pickle.load(f)
    result = fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    tmp.replace(path)
    return result


def median_time(fn, *args, repeats: int = 3) -> float:
    """Median wall time of ``fn(*args)`` (blocking on the result) over ``repeats`` calls."""
    import statistics
    import time

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def program_memory_mb(compiled) -> float:
    """XLA's memory estimate of a compiled program: temporaries + arguments + outputs, in MiB."""
    mem = compiled.memory_analysis()
    if mem is None:
        return float("nan")
    return (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes) / 2**20


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` (columns: the union of their keys, first seen first) atomically: a run killed
    mid-write leaves the previous file, not a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small preset for smoke runs")
    p.add_argument("--out", type=Path, default=RESULTS, help="where CSV and PNG files go")
    p.add_argument("--fresh", action="store_true", help="recompute stages saved by an earlier run")
    diffmjx.add_cli_arguments(p)
    return p


def cli(doc: str, preset: Path, argv=None, extra=()) -> tuple[diffmjx.Config, argparse.Namespace]:
    """Parse a study's command line (``--quick --out --preset --set``), set up JAX, return the config.

    ``extra``: ``(flag, add_argument keyword arguments)`` pairs for a study's own options.
    """
    p = parser(doc.splitlines()[0])
    for flag, kwargs in extra:
        p.add_argument(flag, **kwargs)
    p.set_defaults(preset=str(preset))
    args = p.parse_args(argv)
    setup()
    return diffmjx.config_from_args(args), args


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def setup() -> None:
    """float64 and the persistent compilation cache, as every study uses."""
    diffmjx.enable_compilation_cache()
    np.set_printoptions(precision=6)
    jax.config.update("jax_enable_x64", True)
