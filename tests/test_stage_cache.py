"""Studies save finished stages, so an interrupted run resumes (the studies' ``stage`` helper)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAGE_SCRIPT = textwrap.dedent(
    """
    from experiments.common import stage

    calls = []

    def work(value):
        def fn():
            calls.append(value)
            return {"value": value}

        return fn

    assert stage("s", ("cfg", 1), work(1)) == {"value": 1}
    assert stage("s", ("cfg", 1), work(2)) == {"value": 1}  # saved: fn not called
    assert calls == [1]
    assert stage("s", ("cfg", 2), work(3)) == {"value": 3}  # another key: computed
    assert stage("s", ("cfg", 1), work(4), fresh=True) == {"value": 4}  # fresh: recomputed
    assert stage("s", ("cfg", 1), work(5)) == {"value": 4}  # ... and overwritten
    assert calls == [1, 3, 4]
    """
)


def test_stage_reuses_saved_result_and_recomputes_on_fresh_or_new_key(tmp_path):
    """The stage cache is study code: it runs in a subprocess (tests import no study module), with
    ``DIFFMJX_STAGE_CACHE`` pointing the store at ``tmp_path``."""
    env = {**os.environ, "DIFFMJX_STAGE_CACHE": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", STAGE_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(list(tmp_path.glob("s-*.pkl"))) == 2  # one file per key
    assert not list(tmp_path.glob("*.tmp"))  # writes are atomic: no partial files left


def _study(script: str, *args: str, stdin: str | None = None):
    """Run ``script`` (study code: tests import no study module) in a fresh interpreter at the
    repository root and return the JSON it prints on its last line."""
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, input=stdin, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


PARETO_RESUME_SCRIPT = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    import diffmjx
    from experiments import benchmark_pareto as bp

    out = Path(sys.argv[1])
    cfg = diffmjx.Config.from_yaml(bp.DEFAULT_PRESET)
    measured, truths, fail_after = [], [], [None]

    def measure(mx, c, u0, repeats):  # no JIT: a stub that counts what is measured
        if fail_after[0] is not None and len(measured) == fail_after[0]:
            raise KeyboardInterrupt  # the run is stopped in the middle of a method
        measured.append(bp.config_digest(c))
        return dict(loss=0.0, grad=1.0 + len(measured), forward_jit_s=1.0, backward_jit_s=2.0, forward_run_s=0.1,
                    backward_run_s=0.2, backward_memory_mb=1.0, accepted_steps=10, rejected_steps=0,
                    budget_exhausted=False)

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
    result["again"] = seen(same_grads=[r["grad"] for r in again] == [r["grad"] for r in first],
                           exhausted=again[3]["budget_exhausted"],
                           types=[type(again[3][k]).__name__ for k in ("accepted_steps", "backward_run_s")])
    other = cfg.override("integrator.max_steps=5000")  # another configuration
    result["other"] = seen(rows=len(bp.run(other, out, quick=True)))
    bp.run(other, out, quick=True, fresh=True)
    result["fresh"] = seen()
    print(json.dumps(result))
    """
)


def test_pareto_benchmark_resumes_from_its_csv(tmp_path):
    """The full Pareto grid takes over an hour: a rerun keeps the rows already measured for the same
    configuration, including those of an interrupted run, measures the rest, keeps other
    configurations' rows in the file, and ``fresh`` starts over (no JIT here: the study's measure
    and ground truth are stubbed in its subprocess)."""
    res = _study(PARETO_RESUME_SCRIPT, str(tmp_path))
    n = res["methods"]
    assert res["stopped"]["on_disk"] == 3  # what finished before the stop is on disk
    resumed = res["resumed"]  # only the other n - 3 are measured
    assert resumed["measured"] == n and resumed["truths"] == 1 and resumed["on_disk"] == n and resumed["png"]
    again = res["again"]  # everything saved: nothing measured, same numbers
    assert again["measured"] == n and again["truths"] == 1
    assert again["same_grads"] and again["exhausted"] is False
    assert again["types"] == ["int", "float"]  # types survive the CSV
    other = res["other"]  # another configuration: measured, and the first one's rows stay in the file
    assert other["rows"] == n and other["measured"] == 2 * n and other["on_disk"] == 2 * n
    assert res["fresh"]["measured"] == 3 * n and res["fresh"]["truths"] == 3


PARETO_SUMMARY_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    from experiments import benchmark_pareto as bp

    print(json.dumps(bp.summary(json.load(sys.stdin))))
    """
)


def test_pareto_summary_picks_the_fastest_backward_within_the_error_bar():
    """Fastest: any one setting within 2 %; reliable: every tighter setting of the family within
    2 % too (t1 hits 1.5 % by luck, t2 does not); a run out of step budget never counts."""

    def row(fam, name, err, bwd, jit=30.0, exhausted=False):
        return {"family": fam, "method": name, "rel_error": err, "backward_run_s": bwd, "forward_run_s": 0.1,
                "backward_jit_s": jit, "budget_exhausted": exhausted}  # fmt: skip

    rows = [row("mjx_euler", "e1", 0.5, 0.1), row("mjx_euler", "e2", 0.01, 8.0), row("mjx_rk4", "r1", 0.015, 4.0),
            row("tsit5", "t1", 0.015, 0.2), row("tsit5", "t2", 0.3, 0.4), row("tsit5", "t3", 0.002, 0.8),
            row("tsit5", "t4", 0.001, 1.6), row("heun", "h1", 0.9, 0.1), row("heun", "h2", 0.001, 0.5, exhausted=True)]  # fmt: skip
    best = {b["family"]: b for b in _study(PARETO_SUMMARY_SCRIPT, stdin=json.dumps(rows))}
    assert [best[f]["fastest_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t1", ""]
    assert [best[f]["reliable_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t3", ""]
    assert best["tsit5"]["fastest_speedup"] == 20.0 and best["tsit5"]["reliable_speedup"] == 5.0
    assert best["heun"]["reliable_speedup"] == ""


VJP_STATES_SCRIPT = textwrap.dedent(
    """
    import json

    from diffmjx import scenes
    from experiments import benchmark_vjp

    states = benchmark_vjp.states(scenes.load("cube_toss")[0])
    print(json.dumps({name: [q.tolist(), v.tolist()] for name, (q, v) in states.items()}))
    """
)


def test_vjp_benchmark_finds_the_contact_state():
    states = _study(VJP_STATES_SCRIPT)
    assert set(states) == {"free flight", "contact"}
    assert states["contact"][0][2] < states["free flight"][0][2]  # the cube came down


def test_thunk_counter_counts_kernels_not_containers():
    """The XLA thunk counter the VJP benchmark reports (``diffmjx.profiling.thunks``)."""
    import jax.numpy as jnp

    from diffmjx.profiling import thunks

    counts = thunks(lambda q, v: jnp.sum(jnp.sin(q) * v), jnp.ones(7), jnp.ones(7), calls=5)
    assert 0 < sum(counts.values()) < 50  # a handful of kernels per call, none of the containers
    assert all(not k.startswith(("while", "cond")) for k in counts)
