"""The published ContactNets fit, rerun through the generic path: does it come out again?

    python -m experiments.contactnets_generic [--steps 632] [--fresh]

The published cube (``docs/results/contactnets_params.json``) is Adam, N = 4, from random start 4
at the paper preset, stopped at step 600 of 632 by its selection error
(``docs/results/contactnets_params_record.json``). Since then the cube's model is the generic
:class:`diffmjx.sysid.ParameterSet` on the shipped MJCF (derived constants by
:func:`diffmjx.set_const`), its segments are predicted by :func:`diffmjx.sysid.problem.predict` and
the Adam loop is :func:`diffmjx.sysid.train.adam_loop`. This study reruns that fit from the same
start on the same minibatches through them and evaluates the record's stopped step on the same 50
test tosses. Writes ``docs/results/contactnets_generic.csv``: per quantity (side, mass, friction,
solref, solimp, the test error in mm), the published value and the rerun's. The fit is cached
(``~/.cache/diffmjx/stages``) and checkpointed after every step, so an interrupted run resumes;
``--fresh`` reruns it (about 70 minutes on one CPU core, in float64 as published).
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil

import numpy as np

from experiments import common
from experiments import contactnets as cn
from experiments.contactnets_extended import FREE, inits_override, random_start

RECORD = common.RESULTS / "contactnets_params_record.json"


def write_comparison(out, column: str, published: cn.CubeParams, rerun: cn.CubeParams, published_error, error) -> None:
    """``out``: per quantity (side in mm, mass, friction, solref, solimp, the test error in mm) the
    published value, the rerun's (``column``) and their relative difference; printed as well."""
    rows = [
        ("side_mm", 1e3 * float(published.side_length), 1e3 * float(rerun.side_length)),
        ("mass_kg", float(published.mass), float(rerun.mass)),
        ("friction", float(published.friction), float(rerun.friction)),
    ]
    rows += [(f"solref{i}", float(a), float(b)) for i, (a, b) in enumerate(zip(published.solref, rerun.solref))]
    rows += [(f"solimp{i}", float(a), float(b)) for i, (a, b) in enumerate(zip(published.solimp, rerun.solimp))]
    rows.append(("test_error_mm", float(published_error), float(error)))
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["quantity", "published", column, "relative_difference"])
        for name, a, b in rows:
            w.writerow([name, f"{a:.9g}", f"{b:.9g}", f"{(b - a) / a:.3g}"])
            print(f"{name:14s} published {a:12.6g}  {column} {b:12.6g}  ({100 * (b - a) / a:+.3f} %)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=632, help="Adam steps (the published run's 632)")
    p.add_argument("--fresh", action="store_true")
    args = p.parse_args(argv)
    common.setup()  # float64 (the published fit's) and the compile cache
    record = json.loads(RECORD.read_text())
    published = cn.load_params_json(common.RESULTS / "contactnets_params.json").params
    step = int(record["stopped_step"])
    assert record["fit"] == "Adam, N = 4, random 4" and step <= args.steps, record["fit"]
    # the extended study's configuration of that fit (experiments.contactnets_extended.run)
    cfg = cn.SysidConfig.load(
        "paper",
        (
            "train.batching=vmap",
            *common.PAPER_CFD,
            f"train.free=[{', '.join(FREE)}]",
            "data.horizon=4",
            "train.horizon=4",
            inits_override(random_start(4)),
            f"train.steps_per_epoch={args.steps}",
        ),
    )
    tosses, train_names, val_names, report = cn.load_split(cfg.data)
    _, test_names = cn.selection_split(val_names)
    assert sorted(test_names) == sorted(record["test_tosses"]), "the test tosses differ from the record's"
    data = cn.segments(tosses, train_names, 4, report)

    # checkpointed after every step, so a run stopped part way resumes where it stopped
    ckpt = common.stage_path("contactnets-generic-ckpt", (cfg.to_yaml(), args.steps, "float64")).with_suffix("")
    if args.fresh and ckpt.exists():
        shutil.rmtree(ckpt)

    def fit():
        run = cfg.override(f"train.checkpoint_dir={ckpt}")
        return cn.train(run, data, desc="Adam N=4 from random 4 (generic path)").history

    hist = common.stage("contactnets-generic-fit", (cfg.to_yaml(), args.steps, "float64"), fit, args.fresh)
    k = int(np.flatnonzero(hist.step == step)[0])
    rerun = cn.CubeParams(**{n: np.asarray(getattr(hist.params, n)[k]) for n in cn.FREE_PARAMS})
    test = [tosses[n] for n in record["test_tosses"]]
    err = common.stage(
        "contactnets-generic-test",
        (cfg.sim.to_yaml(), cfg.iterations, common.param_key(rerun), "float64"),
        lambda: cn.grouped_trajectory_error(rerun, test, cfg),
        args.fresh,
    )
    out = common.RESULTS / "contactnets_generic.csv"
    write_comparison(out, "generic_path", published, rerun, float(record["test_error_mm"]), float(err))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
