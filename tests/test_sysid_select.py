"""Early stopping and model selection (``diffmjx.sysid.select``) on histories with a known best."""

import numpy as np
import pytest

from diffmjx import sysid
from diffmjx.sysid import CubeParams


def _history(sides_mm):
    """A History whose side length after step k (from 1) is ``sides_mm[k - 1]``; the rest default."""
    n = len(sides_mm)
    d = CubeParams()
    params = CubeParams(
        side_length=np.asarray(sides_mm, float) / 1e3,
        mass=np.full(n, d.mass),
        solref=np.tile(d.solref, (n, 1)),
        solimp=np.tile(d.solimp, (n, 1)),
        friction=np.full(n, d.friction),
    )
    return sysid.History(
        step=np.arange(1, n + 1), epoch=np.zeros(n, int), loss=np.ones(n), params=params, wall_s=np.ones(n)
    )


def test_select_stops_each_run_at_its_best_snapshot_and_picks_the_best_run():
    """The score is |side - 104.8 mm|: run a passes the truth at step 4 and overshoots (early
    stopping must keep step 4), run b gets closest at its end but less close, and the stride keeps
    only steps 2, 4, 6 and the last."""
    start = CubeParams(side_length=0.080)
    runs = {
        "a": (start, _history([90, 97, 101, 104.6, 108, 112, 115])),
        "b": (start, _history([85, 88, 90, 92, 94, 96, 98])),
    }
    seen = []

    def score(p):
        seen.append(float(p.side_length))
        return abs(1e3 * float(p.side_length) - 104.8)

    best, scored = sysid.select(runs, [], sysid.SysidConfig(), every=2, progress=False, score=score)
    assert (best.run, best.step) == ("a", 4)
    np.testing.assert_allclose(best.error_mm, 0.2, atol=1e-9)
    assert [(s.run, s.step) for s in scored] == [(r, k) for r in "ab" for k in (0, 2, 4, 6, 7)]
    assert len(seen) == len(scored)  # every snapshot scored once
    np.testing.assert_allclose(float(scored[0].params.side_length), 0.080)  # step 0 is the start


def test_select_refuses_what_it_cannot_judge():
    start = CubeParams()
    with pytest.raises(ValueError, match="no runs"):
        sysid.select({}, [], sysid.SysidConfig(), every=1, progress=False, score=lambda p: 0.0)
    with pytest.raises(ValueError, match="stride"):
        sysid.snapshots(start, _history([100]), every=0)
    with pytest.raises(FloatingPointError, match="non-finite"):
        sysid.select(
            {"a": (start, _history([100]))},
            [],
            sysid.SysidConfig(),
            every=1,
            progress=False,
            score=lambda p: float("nan"),
        )


def test_selection_split_halves_the_validation_tosses_without_overlap():
    names = [f"toss_{i:03d}" for i in range(11)]
    sel, test = sysid.selection_split(names)
    assert sorted(sel + test) == names and not set(sel) & set(test)
    assert abs(len(sel) - len(test)) <= 1
    assert sysid.selection_split(names) == (sel, test)  # seeded
    with pytest.raises(ValueError, match="cannot be split"):
        sysid.selection_split(names[:1])
