"""Long runs save finished stages, so an interrupted run resumes (``diffmjx.runtime.stage``), and the
studies that rely on it resume from their files (checked by ``experiments.selfcheck`` in a subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diffmjx.runtime import stage, stage_path

ROOT = Path(__file__).resolve().parents[1]


def test_stage_reuses_saved_result_and_recomputes_on_fresh_or_new_key(tmp_path):
    calls = []

    def work(value):
        def fn():
            calls.append(value)
            return {"value": value}

        return fn

    assert not stage_path("s", ("cfg", 1), tmp_path).exists()
    assert stage("s", ("cfg", 1), work(1), store=tmp_path) == {"value": 1}
    assert stage_path("s", ("cfg", 1), tmp_path).exists()  # where a study looks for a finished stage
    assert stage("s", ("cfg", 1), work(2), store=tmp_path) == {"value": 1}  # saved: fn not called
    assert calls == [1]
    assert stage("s", ("cfg", 2), work(3), store=tmp_path) == {"value": 3}  # another key: computed
    assert stage("s", ("cfg", 1), work(4), fresh=True, store=tmp_path) == {"value": 4}  # fresh: recomputed
    assert stage("s", ("cfg", 1), work(5), store=tmp_path) == {"value": 4}  # ... and overwritten
    assert calls == [1, 3, 4]
    assert len(list(tmp_path.glob("s-*.pkl"))) == 2  # one file per key
    assert not list(tmp_path.glob("*.tmp"))  # writes are atomic: no partial files left
    # a file that no longer unpickles (a class that moved, a damaged file) is computed again, not fatal
    stage_path("s", ("cfg", 2), tmp_path).write_bytes(b"not a pickle")
    assert stage("s", ("cfg", 2), work(6), store=tmp_path) == {"value": 6}
    assert stage("s", ("cfg", 2), work(7), store=tmp_path) == {"value": 6}  # ... and saved again
    assert calls == [1, 3, 4, 6]


def _study(check: str, *args: str, stdin: str | None = None):
    """Run ``python -m experiments.selfcheck CHECK ARGS`` (study code: tests import no study module)
    at the repository root and return the JSON it prints on its last line."""
    run = subprocess.run(
        [sys.executable, "-m", "experiments.selfcheck", check, *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # suite budget: the stage cache's reuse and recompute are checked by default in the test above
def test_pareto_benchmark_resumes_from_its_csv(tmp_path):
    """The full Pareto grid takes over an hour: a rerun keeps the rows already measured for the same
    configuration, including those of an interrupted run, measures the rest, keeps other
    configurations' rows in the file, and ``fresh`` starts over (no JIT here: the study's measure
    and ground truth are stubbed in its subprocess)."""
    res = _study("pareto-resume", str(tmp_path))
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


def test_pareto_summary_picks_the_fastest_backward_within_the_error_bar():
    """Fastest: any one setting within 2 %; reliable: every tighter setting of the family within
    2 % too (t1 hits 1.5 % by luck, t2 does not); a run out of step budget never counts."""

    def row(fam, name, err, bwd, jit=30.0, exhausted=False):
        return {
            "family": fam,
            "method": name,
            "rel_error": err,
            "backward_run_s": bwd,
            "forward_run_s": 0.1,
            "backward_jit_s": jit,
            "budget_exhausted": exhausted,
        }

    rows = [
        row("mjx_euler", "e1", 0.5, 0.1),
        row("mjx_euler", "e2", 0.01, 8.0),
        row("mjx_rk4", "r1", 0.015, 4.0),
        row("tsit5", "t1", 0.015, 0.2),
        row("tsit5", "t2", 0.3, 0.4),
        row("tsit5", "t3", 0.002, 0.8),
        row("tsit5", "t4", 0.001, 1.6),
        row("heun", "h1", 0.9, 0.1),
        row("heun", "h2", 0.001, 0.5, exhausted=True),
    ]
    best = {b["family"]: b for b in _study("pareto-summary", stdin=json.dumps(rows))}
    assert [best[f]["fastest_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t1", ""]
    assert [best[f]["reliable_method"] for f in ("mjx_euler", "mjx_rk4", "tsit5", "heun")] == ["e2", "r1", "t3", ""]
    assert best["tsit5"]["fastest_speedup"] == 20.0 and best["tsit5"]["reliable_speedup"] == 5.0
    assert best["heun"]["reliable_speedup"] == ""


def test_vjp_benchmark_finds_the_contact_state():
    states = _study("vjp-states")
    assert set(states) == {"free flight", "contact"}
    assert states["contact"][0][2] < states["free flight"][0][2]  # the cube came down


def test_thunk_counter_counts_kernels_not_containers():
    """The XLA thunk counter the VJP benchmark reports (``diffmjx.profiling.thunks``)."""
    import jax.numpy as jnp

    from diffmjx.profiling import thunks

    counts = thunks(lambda q, v: jnp.sum(jnp.sin(q) * v), jnp.ones(7), jnp.ones(7), calls=5)
    assert 0 < sum(counts.values()) < 50  # a handful of kernels per call, none of the containers
    assert all(not k.startswith(("while", "cond")) for k in counts)
