"""Joint limits and system identification: a hinge that strikes its limits, or is pressed against
them, fitted with MuJoCo's default ``solimplimit`` and with ``solimplimit[0] = 0``.

    python -m experiments.sysid_limits [--steps 20] [--seeds 3]

A limit is a constraint that switches on at the end of the joint's range with its own impedance
(``solimplimit``, MuJoCo's default 0.9 at touch): the limit force jumps at every strike, as a
contact's does at touchdown (:func:`diffmjx.touchdown_jumps` lists both). The model: one hinged
link (damping 0.1, friction loss 0.05) under random motor torques held for 50 ms, in two cases:
``strikes`` (range +-0.3 rad, torques up to 0.5 N m: it swings and strikes both ends) and
``pressed`` (range +-0.01 rad, torques up to 1 N m: it is pushed into one stop or the other, the
limit engaging and releasing as the torque changes, like a gripper closed on its stop).

Per case, variant and seed (the torques): a noise-free recording of the C engine (RK4 at 0.1 ms,
1 s at 10 ms), :func:`diffmjx.sysid.identify` of both the damping and the friction loss from 30 %
above (``FitConfig`` defaults, ``--steps`` steps), and the loss at the true values (zero where
simulation and data agree). The variants, each in the real system and the model alike:
``default`` (the scene's limit as MuJoCo compiles it) and ``solimplimit0`` (``solimplimit = 0 0.95
0.001 0.5 2``: the force starts from zero; a diagnosis of the jump, not a change of the task).

Writes ``docs/results/sysid_limits.csv``: one row per case, variant and seed (loss at the truth, final
loss, largest error, whether every 95 % interval holds the truth, ``converged``, wall time).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import mujoco
import numpy as np

import diffmjx
from diffmjx import sysid
from experiments import common

VARIANTS = {"default": "", "solimplimit0": ' solimplimit="0 0.95 0.001 0.5 2"'}
CASES = {"strikes": (0.3, 0.5), "pressed": (0.01, 1.0)}  # (range half-width in rad, largest torque)
XML = """<mujoco><compiler angle="radian"/><option timestep="0.002"/><worldbody><body>
<joint name="hinge" type="hinge" axis="0 1 0" damping="0.1" frictionloss="0.05" range="-{r} {r}"{extra}/>
<geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.3"/></body></worldbody>
<actuator><motor joint="hinge" gear="1"/></actuator></mujoco>"""


def run(case: str, variant: str, seed: int, steps: int) -> dict:
    half, torque = CASES[case]
    truth = mujoco.MjModel.from_xml_string(XML.format(r=half, extra=VARIANTS[variant]))
    ctrl = np.repeat(np.random.default_rng(seed).uniform(-torque, torque, (20, 1)), 5, axis=0)
    rec = sysid.Recording.simulate(truth, ctrl, dt=0.01, step=1e-4)
    past = int(np.sum(np.abs(rec.qpos[:, 0]) > half))
    params = [sysid.Parameter("dof_damping", "hinge"), sysid.Parameter("dof_frictionloss", "hinge")]
    ps = sysid.ParameterSet(truth, params)
    fit = sysid.FitConfig(steps=steps)
    cfg = diffmjx.Config().override("integrator.saltation=false")  # made before the term: its figures are without
    at_truth = sysid.identify(
        truth, params, rec, cfg=cfg, fit=dataclasses.replace(fit, steps=1), progress=False
    ).loss_start
    t = time.perf_counter()
    res = sysid.identify(ps.write(ps.start * 1.3), params, rec, cfg=cfg, fit=fit, progress=False)
    wall = time.perf_counter() - t
    values = sysid.ParameterSet(res.model, params).start
    held = [res.intervals[k].lower <= v <= res.intervals[k].upper for k, v in zip(ps.labels, ps.start)]
    return {
        "case": case,
        "variant": variant,
        "seed": seed,
        "samples_past_range": past,
        "loss_at_truth": float(at_truth),
        "loss": float(res.loss),
        "max_rel_error": float(np.max(np.abs(values / ps.start - 1))),
        "intervals_hold_truth": all(held),
        "converged": bool(res.converged),
        "steps": len(res.history.step),
        "wall_s": wall,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--out", type=Path, default=common.RESULTS / "sysid_limits.csv")
    args = p.parse_args(argv)
    diffmjx.enable_compilation_cache()
    rows = []
    for case in CASES:
        for variant in VARIANTS:
            for seed in range(args.seeds):
                rows.append(run(case, variant, seed, args.steps))
                print(rows[-1], flush=True)
                common.write_csv(args.out, rows)


if __name__ == "__main__":
    main()
