"""Studies save finished stages, so an interrupted run resumes (experiments.common.stage)."""

from experiments import common


def test_stage_reuses_saved_result_and_recomputes_on_fresh_or_new_key(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "STAGES", tmp_path)
    calls = []

    def work(value):
        def fn():
            calls.append(value)
            return {"value": value}

        return fn

    assert common.stage("s", ("cfg", 1), work(1)) == {"value": 1}
    assert common.stage("s", ("cfg", 1), work(2)) == {"value": 1}  # saved: fn not called
    assert calls == [1]
    assert common.stage("s", ("cfg", 2), work(3)) == {"value": 3}  # another key: computed
    assert common.stage("s", ("cfg", 1), work(4), fresh=True) == {"value": 4}  # fresh: recomputed
    assert common.stage("s", ("cfg", 1), work(5)) == {"value": 4}  # ... and overwritten
    assert calls == [1, 3, 4]
    assert not list(tmp_path.glob("*.tmp"))  # writes are atomic: no partial files left
