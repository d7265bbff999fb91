"""Checks of study code that tests cannot import (``tests/`` imports the library only): each
prints one JSON line for ``tests/test_stage_cache.py`` to assert on.

    python -m experiments.selfcheck pareto-resume OUT    # Pareto benchmark resumes (JIT stubbed)
    python -m experiments.selfcheck pareto-summary < ROWS.json
    python -m experiments.selfcheck vjp-states
"""

import json
import sys
from pathlib import Path

import diffmjx
from diffmjx import scenes
from experiments import benchmark_pareto as bp
from experiments import benchmark_vjp


def pareto_resume(argv):
    out = Path(argv[0])
    cfg = diffmjx.Config.from_yaml(bp.DEFAULT_PRESET)
    measured, truths, fail_after = [], [], [None]

    def measure(mx, c, u0, repeats):  # no JIT: a stub that counts what is measured
        if fail_after[0] is not None and len(measured) == fail_after[0]:
            raise KeyboardInterrupt  # the run is stopped in the middle of a method
        measured.append(bp.config_digest(c))
        return dict(
            loss=0.0,
            grad=1.0 + len(measured),
            forward_jit_s=1.0,
            backward_jit_s=2.0,
            forward_run_s=0.1,
            backward_run_s=0.2,
            backward_memory_mb=1.0,
            accepted_steps=10,
            rejected_steps=0,
            budget_exhausted=False,
        )

    bp.measure = measure
    bp.ground_truth = lambda *a: truths.append(1) or 2.0

    def seen(**extra):
        rows = len(bp.saved_rows(out / "benchmark_pareto.csv"))
        return dict(measured=len(measured), truths=len(truths), on_disk=rows, **extra)

    result = {"methods": len(bp.methods(cfg, quick=True))}
    fail_after[0] = 3
    try:
        bp.run(cfg, out, quick=True)
    except KeyboardInterrupt:
        result["stopped"] = seen()
    fail_after[0] = None
    first = bp.run(cfg, out, quick=True)  # resumes
    result["resumed"] = seen(png=(out / "benchmark_pareto.png").exists())
    again = bp.run(cfg, out, quick=True)  # everything saved
    result["again"] = seen(
        same_grads=[r["grad"] for r in again] == [r["grad"] for r in first],
        exhausted=again[3]["budget_exhausted"],
        types=[type(again[3][k]).__name__ for k in ("accepted_steps", "backward_run_s")],
    )
    other = cfg.override("integrator.max_steps=5000")  # another configuration
    result["other"] = seen(rows=len(bp.run(other, out, quick=True)))
    bp.run(other, out, quick=True, fresh=True)
    result["fresh"] = seen()
    print(json.dumps(result))


def pareto_summary(argv):
    print(json.dumps(bp.summary(json.load(sys.stdin))))


def vjp_states(argv):
    states = benchmark_vjp.states(scenes.load("cube_toss")[0])
    print(json.dumps({name: [q.tolist(), v.tolist()] for name, (q, v) in states.items()}))


CHECKS = {"pareto-resume": pareto_resume, "pareto-summary": pareto_summary, "vjp-states": vjp_states}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CHECKS:
        sys.exit("usage: python -m experiments.selfcheck {" + ",".join(CHECKS) + "} [ARGS]")
    CHECKS[sys.argv[1]](sys.argv[2:])
