"""Touchdown force jumps and system identification: the fair-peer study's finger and box, fitted with
MuJoCo's default ``solimp`` and with ``solimp[0] = 0``.

    python -m experiments.sysid_touchdown [--steps 8] [--seed 0] [--rtol 1e-5] [--fit fit.KEY=VALUE]
        [--variants solimp0,default,saltation,saltation_coarse]

:mod:`experiments.sysid_peer`'s ``finger_box`` case (a two-link finger on position servos taps and
slides a free box; both dampings, both servos' kp, the box's mass and the friction), noise-free
recordings of the C engine at RK4 0.1 ms, the start 30-50 % off. Two variants of the scene, each in
both the "real system" and the fitted model: ``default`` (the scene as shipped: MuJoCo's default
``solimp``, 0.9 at touch, so the contact force jumps at every touchdown) and ``solimp0`` (every geom
``solimp = 0 0.95 0.001 0.5 2``: the force starts from zero; a diagnosis of the jump, not a change of
the study's task), and the default scene fitted with the saltation term
(``integrator.saltation=true``: ``saltation`` at its default resolution, the solve's ``atol``;
``saltation_coarse`` at ``integrator.saltation_resolution`` = 1e-3 m, which bounds the term of
crossings slower than about 0.2 m/s). Per variant, :func:`diffmjx.sysid.identify` (Levenberg-Marquardt, ``FitConfig``
defaults with the recovery study's segments, ``--fit`` overrides) runs ``--steps`` steps from the
start, and one step from the true values for the loss there (zero if simulation and data agree).

Writes ``docs/results/sysid_touchdown.csv``: one row per variant and step (loss, largest relative
error, the two dampings' errors, wall time of the step; step 0 is the start, with the setup time).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

import diffmjx
from diffmjx import sysid
from experiments import common
from experiments.sysid_peer import case
from experiments.sysid_recovery import HORIZON, STRIDE, perturbed

CONTINUOUS = [0.0, 0.95, 0.001, 0.5, 2.0]
COARSE = 1e-3  # integrator.saltation_resolution of the coarse variant (m)
VARIANTS = {  # name -> (scene edit of the real system and the model, config overrides of the fit)
    "solimp0": ("continuous", ()),
    "default": (None, ()),
    "saltation": (None, ("integrator.saltation=true",)),
    "saltation_coarse": (None, ("integrator.saltation=true", f"integrator.saltation_resolution={COARSE}")),
}


def _continuous(spec) -> None:
    for g in spec.geoms:
        g.solimp = CONTINUOUS


def run(variant: str, seed: int, steps: int, cfg: diffmjx.Config, overrides: list[str]) -> list[dict]:
    edit, sim = VARIANTS[variant]
    cfg = cfg.override(*sim)
    truth, params, ps, recs, start = case("finger_box", seed, _continuous if edit == "continuous" else None)
    fit = sysid.FitConfig(horizon=HORIZON, stride=STRIDE, steps=steps, tolerance_check=None).override(*overrides)
    at_truth = sysid.identify(
        truth, params, recs, cfg=cfg, fit=dataclasses.replace(fit, steps=1), progress=False
    ).loss_start
    res = sysid.identify(start, params, recs, cfg=cfg, fit=fit, progress=False)
    values = np.vstack([perturbed(ps, seed), res.history.values])
    rel = values / ps.start - 1
    losses = np.r_[res.loss_start, res.history.loss]
    walls = np.r_[res.start_s, res.history.wall_s]
    return [
        {
            "variant": variant,
            "seed": seed,
            "rtol": cfg.integrator.rtol,
            "step": k,
            "loss": float(losses[k]),
            "loss_at_truth": float(at_truth),
            "max_rel_error": float(np.max(np.abs(rel[k]))),
            "knuckle_damping_error": float(rel[k][0]),
            "joint_damping_error": float(rel[k][1]),
            "wall_s": float(walls[k]),
        }
        for k in range(len(losses))
    ]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtol", type=float, default=1e-5, help="integrator.rtol = atol")
    p.add_argument(
        "--fit", action="append", default=[], metavar="KEY=VALUE", help="fit.* overrides, e.g. fit.damping=0.001"
    )
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    p.add_argument("--out", type=Path, default=common.RESULTS / "sysid_touchdown.csv")
    args = p.parse_args(argv)
    diffmjx.enable_compilation_cache()
    cfg = diffmjx.Config().override(f"integrator.rtol={args.rtol}", f"integrator.atol={args.rtol}")
    rows = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"--variants: {variant!r} is not one of {', '.join(VARIANTS)}")
        rows += run(variant, args.seed, args.steps, cfg, args.fit)
        common.write_csv(args.out, rows)
        print(rows[-1], flush=True)


if __name__ == "__main__":
    main()
