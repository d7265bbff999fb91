"""The published ContactNets fit, run by :func:`diffmjx.sysid.identify` as a user of the library would.

    python -m experiments.contactnets_identify [--steps 600] [--fresh]

The published cube (``docs/results/contactnets_params.json``) is Adam, N = 4, from random start 4 at
the paper preset, stopped at step 600 by its selection error (``contactnets_params_record.json``).
Here the same fit is one call of :func:`diffmjx.sysid.identify`: the cube's quantities as generic
:class:`~diffmjx.sysid.Parameter` s on the shipped MJCF ``contactnets_cube`` (the half size with the
body's inertia tied to it, the mass, solref, solimp and the sliding friction shared by the floor and
the cube) in the coordinates the study uses (softplus for the positive quantities, ``1 + softplus``
for solimp's power, a sigmoid into MuJoCo's ``[1e-4, 0.9999]`` for solimp's ``d0``, ``dwidth`` and
midpoint), the training tosses as :class:`~diffmjx.sysid.Recording` s, the rotation-matrix residual,
minibatches of 64 at learning rate 1e-3, the paper's simulation with contacts from distance. What
differs from the study's own loop: the library cuts and orders the segments itself (so the
minibatches differ), and it steps the half size rather than the side length. The fit's value at
step 600 is then judged on the record's 50 test tosses, as the published one was.

Writes ``docs/results/contactnets_identify.csv``: per quantity (side, mass, friction, solref,
solimp, the test error in mm), the published value and this fit's (its wall time is printed, not
written: the run shares its machine). The fit is checkpointed after every step (``~/.cache/diffmjx/stages``), so an interrupted run resumes;
``--fresh`` reruns it (about 2.5 hours on 2 CPU cores, float64).
"""

from __future__ import annotations

import argparse
import json
import time

import mujoco
import numpy as np

from diffmjx import scenes, sysid
from experiments import common
from experiments import contactnets as cn
from experiments.contactnets_extended import random_start
from experiments.contactnets_generic import write_comparison

RECORD = common.RESULTS / "contactnets_params_record.json"
OUT = common.RESULTS / "contactnets_identify.csv"
BOTH = ("floor", "cube")
SOFTPLUS, LOGIT = sysid.Transform.SOFTPLUS, sysid.Transform.LOGIT


def cube_parameters() -> list[sysid.Parameter]:
    """The cube's quantities in the study's coordinates, in CubeParams order: each within its field's
    legal range (MuJoCo's), softplus above a lower bound (``0``, solimp's power ``1``), a sigmoid
    between two (solimp's ``d0``, ``dwidth``, midpoint: ``[1e-4, 0.9999]``)."""
    solimp = (LOGIT, LOGIT, SOFTPLUS, LOGIT, SOFTPLUS)  # d0, dwidth, width, midpoint, power
    return [
        sysid.Parameter("geom_size", "cube", uniform=True, transform=SOFTPLUS),
        sysid.Parameter("body_mass", "cube", transform=SOFTPLUS),
        sysid.Parameter("geom_solref", BOTH, index=0, transform=SOFTPLUS),
        sysid.Parameter("geom_solref", BOTH, index=1, transform=SOFTPLUS),
        *(sysid.Parameter("geom_solimp", BOTH, index=i, transform=t) for i, t in enumerate(solimp)),
        sysid.Parameter("geom_friction", BOTH, index=0, transform=SOFTPLUS),
    ]


def values_of(p: cn.CubeParams) -> np.ndarray:
    """:func:`cube_parameters`' physical values of ``p`` (the half size, not the side)."""
    return np.array([p.side_length / 2, p.mass, *np.asarray(p.solref), *np.asarray(p.solimp), p.friction], float)


def cube_params(v) -> cn.CubeParams:
    v = np.asarray(v, np.float64)
    return cn.CubeParams(side_length=2 * v[0], mass=v[1], solref=v[2:4], solimp=v[4:9], friction=v[9])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600, help="Adam steps (the record stopped at step 600)")
    p.add_argument("--fresh", action="store_true")
    args = p.parse_args(argv)
    common.setup()  # float64 (the published fit's) and the compile cache
    record = json.loads(RECORD.read_text())
    published = cn.load_params_json(common.RESULTS / "contactnets_params.json").params
    step = int(record["stopped_step"])
    assert record["fit"] == "Adam, N = 4, random 4" and step <= args.steps, record["fit"]
    study = cn.SysidConfig.load("paper", (*common.PAPER_CFD, "data.horizon=4", "train.horizon=4"))
    tosses, train_names, val_names, _ = cn.load_split(study.data)
    _, test_names = cn.selection_split(val_names)
    assert sorted(test_names) == sorted(record["test_tosses"]), "the test tosses differ from the record's"

    model = mujoco.MjModel.from_xml_path(str(scenes.path("contactnets_cube")))
    params = cube_parameters()
    start = sysid.ParameterSet(model, params).write(values_of(random_start(4)))
    recordings = [sysid.Recording(qpos=tosses[n].qpos, qvel=tosses[n].qvel, dt=cn.DT, name=n) for n in train_names]
    fit = sysid.FitConfig(
        method="adam",
        horizon=4,
        stride=1,
        steps=args.steps,
        learning_rate=study.train.learning_rate,
        batch_size=study.train.batch_size,
        seed=study.train.seed,
        orientation_metric="matrix",
        batching="vmap",
        intervals=False,
        tolerance_check=None,
        full_loss=False,  # two epochs of forward passes; the study judges the fit on its test tosses
    )
    key = (study.sim.to_yaml(), fit.to_yaml(), values_of(random_start(4)).tolist(), sorted(train_names), "float64")
    ckpt = common.stage_path("contactnets-identify-ckpt", key).with_suffix(".npz")
    if args.fresh:
        ckpt.unlink(missing_ok=True)

    def run():
        t0 = time.perf_counter()
        r = sysid.identify(start, params, recordings, cfg=study.sim, fit=fit, checkpoint_path=ckpt)
        return r.history, time.perf_counter() - t0

    hist, wall = common.stage("contactnets-identify-fit", key, run, args.fresh)
    k = int(np.flatnonzero(hist.step == step)[0])
    fitted = cube_params(hist.values[k])
    test = [tosses[n] for n in record["test_tosses"]]
    err = common.stage(
        "contactnets-identify-test",
        (study.sim.to_yaml(), study.iterations, common.param_key(fitted), "float64"),
        lambda: cn.grouped_trajectory_error(fitted, test, study),
        args.fresh,
    )
    write_comparison(OUT, "identify", published, fitted, float(record["test_error_mm"]), float(err))
    print(f"identify: {len(hist.step)} steps in {wall:.0f} s; wrote {OUT}")


if __name__ == "__main__":
    main()
