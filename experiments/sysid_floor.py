"""Where the legged body's floor came from: the loss at the true values, per capsule rule and tolerance.

    python -m experiments.sysid_floor [--model legged] [--seed 0] [--tolerances 1e-4,1e-5,1e-7]
                                      [--capsule-rules paired,mjx]

:mod:`experiments.sysid_peer`'s fits of the legged body ended 0.2-0.8 % off at every tolerance,
where the peer reached 0.1 % on one start. This study evaluates, at the true values, the problem
:func:`diffmjx.sysid.identify`'s Levenberg-Marquardt solves (its forward-mode simulation, the
recovery study's segments; one residual and Jacobian evaluation): DiffMJX's loss at each tolerance
(zero only where simulation and data agree), the share of it the five worst segments carry, and
the segments whose adaptive solve ran out of ``integrator.max_steps`` (what
``IdentifyResult.budget_exhausted`` lists), with ``collision.capsule_capsule`` ``paired`` (the
default: the C engine's contacts) and ``mjx`` (MJX's rule, which the body's crossing legs and feet
exposed: docs/collision.md).

Beside it, what the data allow: the "real system" is the C engine with RK4 at 0.1 ms; the loss at
the truth of the C engine itself with RK4 at that step divided by 1, 4 and 16 (the same segments
and residual, each from its recorded first state: zero at the data's own step), and the largest
change of a recorded ``qpos`` when the whole recording is simulated at a quarter of the step.

Writes ``docs/results/sysid_floor.csv``: rows of ``kind`` ``data`` (per recording: the largest
``qpos`` change at a quarter step and its time), ``c_engine`` (per step: loss at the truth) and
``fit`` (per capsule rule and tolerance: loss at the truth, the worst five segments' share,
exhausted segments, the first of them, wall time).
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import mujoco
import numpy as np

import diffmjx
from diffmjx import sysid
from experiments import common
from experiments import sysid_recovery as recovery
from experiments.sysid_peer import case


def fit_rows(name: str, seed: int, tolerances: list[float], rules: list[str]) -> list[dict]:
    truth, _, ps, recs, _ = case(name, seed)
    recs = [r.check(truth) for r in recs]
    theta = ps.to_theta(ps.start)
    rows = []
    for rule, tol in ((rule, tol) for rule in rules for tol in tolerances):
        # the problem identify's Levenberg-Marquardt solves (its forward-mode simulation), at the truth
        over = (f"integrator.rtol={tol}", f"integrator.atol={tol}", f"collision.capsule_capsule={rule}")
        cfg = sysid.forward_config(diffmjx.Config().override(*over))
        problem = sysid.Problem(ps, recs, recovery.HORIZON, recovery.STRIDE, cfg)
        t = time.perf_counter()
        r, _, exhausted = problem.evaluate(theta, flags=True)
        wall = time.perf_counter() - t
        r = np.asarray(r)
        seg, keys = problem.row_segments()
        per_segment = np.bincount(seg, weights=r * r)
        bad = keys[exhausted]
        rows.append(
            {
                "kind": "fit",
                "model": name,
                "seed": seed,
                "rtol": tol,
                "capsule_capsule": rule,
                "loss_at_truth": float(r @ r),
                "worst5_share": float(np.sort(per_segment)[::-1][:5].sum() / per_segment.sum()),
                "segments": len(per_segment),
                "exhausted_segments": len(bad),
                "first_exhausted": f"{recs[bad[0][0]].name} from sample {bad[0][1]}" if len(bad) else "",
                "wall_s": wall,
            }
        )
        print(rows[-1], flush=True)
    return rows


def c_engine_loss(problem: sysid.Problem, truth: mujoco.MjModel, step: float) -> float:
    """The loss of ``problem`` (the same segments, residual and normalisation) with every segment
    predicted by the C engine at the true values, RK4 at ``step``, from its recorded first state:
    zero at the recordings' own step, and what a simulation that differs from the data only by
    that data's step size leaves."""
    from diffmjx.sysid.problem import state_residuals

    m = copy.deepcopy(truth)
    m.opt.timestep, m.opt.integrator = step, mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    total = 0.0
    for g in problem.groups:
        sub = round(g.dt / step)
        pq, pv = np.zeros_like(g.qpos), np.zeros_like(g.qvel)
        for b in range(g.size):
            mujoco.mj_resetData(m, d)
            d.qpos[:], d.qvel[:] = g.qpos0[b], g.qvel0[b]
            for n in range(g.ctrl.shape[1]):
                d.ctrl[:] = g.ctrl[b, n]
                for _ in range(sub):
                    mujoco.mj_step(m, d)
                pq[b, n], pv[b, n] = d.qpos, d.qvel
        r = state_residuals(problem.layouts[g.variant], pq, pv, g.qpos, g.qvel, problem.weights, xp=np)
        total += float(np.sum(r * r))
    return total / problem.states


def data_rows(name: str, seed: int) -> list[dict]:
    truth, _, _, recs, _ = case(name, seed)
    fine = [
        recovery.record(name, truth, 100 * seed + k, False, step=recovery.GEN_STEP / 4)
        for k in range(recovery.MODELS[name]["recordings"])
    ]
    rows = []
    for a, b in zip(recs, fine):
        change = np.max(np.abs(b.qpos - a.qpos), axis=1)
        k = int(np.argmax(change))
        rows.append(
            {
                "kind": "data",
                "model": name,
                "seed": seed,
                "recording": a.name,
                "step": recovery.GEN_STEP,
                "finer_step": recovery.GEN_STEP / 4,
                "max_qpos_change": float(change[k]),
                "at_s": k * a.dt,
            }
        )
        print(rows[-1], flush=True)
    return rows


def c_engine_rows(name: str, seed: int) -> list[dict]:
    truth, _, ps, recs, _ = case(name, seed)
    problem = sysid.Problem(ps, [r.check(truth) for r in recs], recovery.HORIZON, recovery.STRIDE, diffmjx.Config())
    rows = []
    for div in (1, 4, 16):
        step = recovery.GEN_STEP / div
        rows.append(
            {
                "kind": "c_engine",
                "model": name,
                "seed": seed,
                "step": step,
                "loss_at_truth": c_engine_loss(problem, truth, step),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="legged")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerances", default="1e-4,1e-5,1e-7", help="integrator.rtol = atol, comma-separated")
    p.add_argument("--capsule-rules", default="paired,mjx", help="collision.capsule_capsule values, comma-separated")
    p.add_argument("--out", type=Path, default=common.RESULTS / "sysid_floor.csv")
    args = p.parse_args(argv)
    common.setup()
    rows = data_rows(args.model, args.seed)
    common.write_csv(args.out, rows)
    rows += c_engine_rows(args.model, args.seed)
    common.write_csv(args.out, rows)
    tolerances = [float(t) for t in args.tolerances.split(",")]
    rows += fit_rows(args.model, args.seed, tolerances, args.capsule_rules.split(","))
    common.write_csv(args.out, rows)


if __name__ == "__main__":
    main()
