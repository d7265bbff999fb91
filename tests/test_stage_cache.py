"""Studies save finished stages, so an interrupted run resumes (the studies' ``stage`` helper)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import diffmjx
from diffmjx import scenes

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


def test_pareto_benchmark_resumes_from_its_csv(tmp_path, monkeypatch):
    """The full Pareto grid takes over an hour: a rerun keeps the rows already measured for the same
    configuration, including those of an interrupted run, measures the rest, keeps other
    configurations' rows in the file, and ``fresh`` starts over (no JIT here: measure is stubbed)."""
    from experiments import benchmark_pareto as bp

    # run() turns the persistent cache off for cold JIT timings; keep it on for the later tests
    monkeypatch.setattr(bp.jax.config, "update", lambda *a, **k: None)
    cfg = diffmjx.Config.from_yaml(bp.DEFAULT_PRESET)
    measured, truths, fail_after = [], [], [None]

    def measure(mx, c, u0, repeats):
        if fail_after[0] is not None and len(measured) == fail_after[0]:
            raise KeyboardInterrupt  # the run is stopped in the middle of a method
        measured.append(bp.config_digest(c))
        return dict(loss=0.0, grad=1.0 + len(measured), forward_jit_s=1.0, backward_jit_s=2.0, forward_run_s=0.1,
                    backward_run_s=0.2, backward_memory_mb=1.0, accepted_steps=10, rejected_steps=0, budget_exhausted=False)  # fmt: skip

    def rows_on_disk():
        return bp.saved_rows(tmp_path / "benchmark_pareto.csv")

    monkeypatch.setattr(bp, "measure", measure)
    monkeypatch.setattr(bp, "ground_truth", lambda *a: truths.append(1) or 2.0)
    n = len(bp.methods(cfg, quick=True))
    fail_after[0] = 3
    with pytest.raises(KeyboardInterrupt):
        bp.run(cfg, tmp_path, quick=True)
    assert len(rows_on_disk()) == 3  # what finished before the stop is on disk
    fail_after[0] = None
    first = bp.run(cfg, tmp_path, quick=True)  # resumes: only the other n - 3 are measured
    assert len(measured) == n and len(truths) == 1 and len(rows_on_disk()) == n
    assert (tmp_path / "benchmark_pareto.png").exists()
    again = bp.run(cfg, tmp_path, quick=True)  # everything saved: nothing measured, same numbers
    assert len(measured) == n and len(truths) == 1
    assert [r["grad"] for r in again] == [r["grad"] for r in first] and again[3]["budget_exhausted"] is False
    assert [type(again[3][k]) for k in ("accepted_steps", "backward_run_s")] == [int, float]  # types survive the CSV
    other = cfg.override("integrator.max_steps=5000")  # another configuration: measured, and the
    assert len(bp.run(other, tmp_path, quick=True)) == n  # first one's rows stay in the file
    assert len(measured) == 2 * n and len(rows_on_disk()) == 2 * n
    bp.run(other, tmp_path, quick=True, fresh=True)
    assert len(measured) == 3 * n and len(truths) == 3


def test_pareto_summary_picks_the_fastest_backward_within_the_error_bar():
    """Fastest: any one setting within 2 %; reliable: every tighter setting of the family within
    2 % too (t1 hits 1.5 % by luck, t2 does not); a run out of step budget never counts."""
    from experiments import benchmark_pareto as bp

    def row(fam, name, err, bwd, jit=30.0, exhausted=False):
        return dict(family=fam, method=name, rel_error=err, backward_run_s=bwd, forward_run_s=0.1, backward_jit_s=jit,
                    budget_exhausted=exhausted)  # fmt: skip

    rows = [row("mjx_euler", "e1", 0.5, 0.1), row("mjx_euler", "e2", 0.01, 8.0), row("mjx_rk4", "r1", 0.015, 4.0),
            row("tsit5", "t1", 0.015, 0.2), row("tsit5", "t2", 0.3, 0.4), row("tsit5", "t3", 0.002, 0.8),
            row("tsit5", "t4", 0.001, 1.6), row("heun", "h1", 0.9, 0.1), row("heun", "h2", 0.001, 0.5, exhausted=True)]  # fmt: skip
    best = {b["family"]: b for b in bp.summary(rows)}
    assert [best[f]["fastest_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t1", ""]
    assert [best[f]["reliable_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t3", ""]
    assert best["tsit5"]["fastest_speedup"] == 20.0 and best["tsit5"]["reliable_speedup"] == 5.0
    assert best["heun"]["reliable_speedup"] == ""


def test_vjp_benchmark_counts_thunks_and_finds_the_contact_state():
    import jax.numpy as jnp

    from experiments import benchmark_vjp

    mj, _ = scenes.load("cube_toss")
    states = benchmark_vjp.states(mj)
    assert set(states) == {"free flight", "contact"}
    assert states["contact"][0][2] < states["free flight"][0][2]  # the cube came down
    counts = benchmark_vjp.thunks(lambda q, v: jnp.sum(jnp.sin(q) * v), jnp.ones(7), jnp.ones(7), calls=5)
    assert 0 < sum(counts.values()) < 50  # a handful of kernels per call, none of the containers
    assert all(not k.startswith(("while", "cond")) for k in counts)
