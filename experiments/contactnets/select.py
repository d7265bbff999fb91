r"""Early stopping and model selection for system identification, by whole-toss trajectory error.

The training loss scores a fit on segments of a few samples; what a user of the fitted cube needs
is a model that predicts whole tosses it has never seen. :func:`select` judges every fit at a
series of its optimiser steps (:func:`snapshots`: the start, every ``every`` steps and the last)
by the mean position error of whole-toss rollouts on a *selection* split
(:func:`~experiments.contactnets.trajectory_error`), stops each run where that error is lowest (early
stopping) and picks the run whose stopped parameters score best (model selection). The figure to
report is the winner's error on a third split that neither training nor selection saw
(:func:`selection_split` cuts the validation tosses in two)::

    from experiments import contactnets as cn

    tosses, train_names, val_names, _ = cn.load_split(cfg.data)
    sel_names, test_names = cn.selection_split(val_names)
    runs = {"Adam, pre-tuned start": (cfg.train.initial_params(), cn.train(cfg).history)}
    best, scored = cn.select(runs, [tosses[n] for n in sel_names], cfg, every=10)
    cn.trajectory_error(best.params, [tosses[n] for n in test_names], cfg)
"""

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from diffmjx.config import Config
from experiments.contactnets.config import FREE_PARAMS, SysidConfig
from experiments.contactnets.data import Toss, split
from experiments.contactnets.evaluate import trajectory_error
from experiments.contactnets.model import CubeParams
from experiments.contactnets.train import History

__all__ = ["Scored", "grouped_trajectory_error", "select", "selection_split", "snapshots"]


class Scored(NamedTuple):
    """One fit's parameters at one optimiser step, with their whole-toss error on the selection split."""

    run: str  # the run's name (a key of ``select``'s ``runs``)
    step: int  # optimiser step (0: the start)
    params: CubeParams  # physical parameters after ``step`` steps
    error_mm: float  # mean position error of whole-toss rollouts on the selection tosses


def selection_split(val_names: Sequence[str], seed: int = 1) -> tuple[list[str], list[str]]:
    """The validation tosses cut in two halves, seeded: ``(selection, test)``.

    Early stopping and model selection read the first; the figure a study reports is the winner's
    error on the second, which nothing was chosen on.
    """
    if len(val_names) < 2:
        raise ValueError(f"{len(val_names)} validation tosses cannot be split into selection and test tosses")
    test, selection = split(val_names, 0.5, seed)
    return selection, test


def snapshots(init: CubeParams, history: History, every: int) -> list[tuple[int, CubeParams]]:
    """``(step, parameters)`` at the start (step 0), after every ``every``-th step and after the last.

    Arguments:
        init: the run's initial physical parameters.
        history: its :class:`~experiments.contactnets.History` (parameters after each step).
        every: stride in optimiser steps (>= 1).
    """
    if every < 1:
        raise ValueError(f"every={every!r}: give a stride of at least 1 step")
    out = [(0, init)]
    steps = np.asarray(history.step)
    for k, s in enumerate(steps):
        if s % every == 0 or k == len(steps) - 1:
            out.append((int(s), CubeParams(**{n: np.asarray(getattr(history.params, n)[k]) for n in FREE_PARAMS})))
    return out


def grouped_trajectory_error(
    params: CubeParams,
    tosses: Mapping[str, Toss] | Sequence[Toss],
    cfg: SysidConfig | Config,
    *,
    group_size: int = 8,
    workers: int = 2,
    per_toss: bool = False,
):
    """:func:`~experiments.contactnets.trajectory_error` over groups of tosses of similar length, on threads.

    One padded, vmapped rollout of every toss runs each lane as long as the longest toss, and every
    control period as long as its stiffest lane: on a CPU, a set of tosses of 80 to 440 samples costs
    several times its own work. Here the tosses are sorted by length and rolled out ``group_size``
    at a time (one compiled program per group length, reused by later calls with the same tosses),
    ``workers`` groups at once. The mean is the same sample-weighted mean (adaptive steps of a
    smaller batch may differ from the big batch's at the solve's tolerance).

    Returns:
        The mean error in mm, or ``(mean, per_toss_means)`` (in the given order) with ``per_toss``.
    """
    items = list(tosses.values()) if isinstance(tosses, Mapping) else list(tosses)
    if not items:
        raise ValueError("no tosses given")
    if group_size < 1 or workers < 1:
        raise ValueError(f"group_size={group_size!r}, workers={workers!r}: give at least 1 each")
    order = sorted(range(len(items)), key=lambda i: items[i].qpos.shape[0])
    groups = [order[k : k + group_size] for k in range(0, len(order), group_size)]

    def one(group):
        return trajectory_error(params, [items[i] for i in group], cfg, per_toss=True)[1]

    with ThreadPoolExecutor(workers) as pool:
        means = list(pool.map(one, groups))
    per = np.zeros(len(items))
    for group, m in zip(groups, means, strict=True):
        per[group] = m
    counts = np.array([t.qpos.shape[0] - 1 for t in items], float)
    mean = float(np.sum(per * counts) / np.sum(counts))
    return (mean, per) if per_toss else mean


def select(
    runs: Mapping[str, tuple[CubeParams, History]],
    tosses: Mapping[str, Toss] | Sequence[Toss],
    cfg: SysidConfig | Config,
    *,
    every: int,
    progress: bool = True,
    score: Callable[[CubeParams], float] | None = None,
) -> tuple[Scored, list[Scored]]:
    """Early stopping of every run and selection among them, by whole-toss error on ``tosses``.

    Arguments:
        runs: name -> ``(initial parameters, history)`` of each fit (e.g. :func:`~experiments.contactnets.train`
            from several starts and segment lengths).
        tosses: the selection tosses (never trained on; not the ones the result is reported on).
        cfg: the simulation the errors are measured with (:func:`~experiments.contactnets.trajectory_error`).
        every: evaluate each run every this many optimiser steps (and at its start and end).
        progress: a tqdm bar over the evaluations.
        score: ``params -> error`` instead of :func:`grouped_trajectory_error` of ``tosses`` (e.g. a
            cached one).

    Returns:
        ``(best, scored)``: the :class:`Scored` with the lowest error over every run and snapshot
        (ties: the earlier run, then the earlier step), and every :class:`Scored` in run order.
    """
    from tqdm.auto import tqdm

    if not runs:
        raise ValueError("no runs to select from")
    score = score or (lambda p: grouped_trajectory_error(p, tosses, cfg))
    plan = [(name, step, p) for name, (init, hist) in runs.items() for step, p in snapshots(init, hist, every)]
    scored = [
        Scored(name, step, p, float(score(p))) for name, step, p in tqdm(plan, desc="selection", disable=not progress)
    ]
    finite = [s for s in scored if np.isfinite(s.error_mm)]
    if not finite:
        raise FloatingPointError("every snapshot's trajectory error is non-finite")
    return min(finite, key=lambda s: s.error_mm), scored
