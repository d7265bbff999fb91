"""Helpers shared by the studies: stage cache, CSV, command line, figures (the library never imports this).

The scenes and their helpers live in the library (:mod:`diffmjx.scenes`, :mod:`diffmjx.reference`);
they are re-exported here under their old names so the studies read ``common.load(...)`` unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
from pathlib import Path

import jax
import numpy as np

import diffmjx
from diffmjx.reference import c_engine_rk4  # noqa: F401  (re-exported)
from diffmjx.runtime import stage, stage_path  # noqa: F401  (re-exported: the studies call common.stage)
from diffmjx.scenes import (  # noqa: F401  (re-exported)
    CUBE_TOSS,
    PRIMITIVES,
    box_corner_heights,
    c_engine_cube_toss,
    contacts_fn,
    cube_toss_data,
    cube_toss_loss,
    load,
    primitive,
)
from diffmjx.scenes import DIR as SCENES  # noqa: F401  (re-exported: the studies read common.SCENES)

with contextlib.redirect_stdout(io.StringIO()):  # MJX's notice about its optional Warp backend
    from mujoco import mjx  # noqa: F401  (re-exported: the studies use common.mjx)

PAPER_CFD = ("cfd.enabled=true", "cfd.friction=distance")
"""Contacts from distance as the paper defines them (the friction pyramid acts at a distance too),
as the paper-reproducing studies made their committed results; the library's default is
``cfd.friction=contact`` (docs/cfd.md, "Friction at a distance")."""
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def median_time(fn, *args, repeats: int = 3) -> float:
    """Median wall time of ``fn(*args)`` (blocking on the result) over ``repeats`` calls."""
    import statistics
    import time

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def program_memory_mb(compiled) -> float:
    """XLA's memory estimate of a compiled program: temporaries + arguments + outputs, in MiB."""
    mem = compiled.memory_analysis()
    if mem is None:
        return float("nan")
    return (mem.temp_size_in_bytes + mem.argument_size_in_bytes + mem.output_size_in_bytes) / 2**20


def typed(value: str):
    """A CSV cell back to the type :func:`write_csv` wrote it from (bool, int, float or text)."""
    if value in ("True", "False"):
        return value == "True"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def replaced_rows(old: list[dict], new: list[dict], key) -> list[dict]:
    """``old`` rows (a CSV's) with each row of ``new`` in the place of the one of the same ``key(row)``,
    and ``new``'s others appended: a rerun of part of a study leaves the CSV's other rows as they were."""
    fresh = {key(r): r for r in new}
    out = [fresh.pop(key(r), r) for r in old]
    return out + list(fresh.values())


def write_csv(path: Path, rows: list[dict]) -> None:
    """Write ``rows`` (columns: the union of their keys, first seen first) atomically: a run killed
    mid-write leaves the previous file, not a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def merge_rows(path: Path, rows: list[dict], group: tuple, order: tuple | None = None) -> list[dict]:
    """``rows`` in place of ``path``'s rows of the same group (their values in the ``group``
    columns); the file's other rows kept (read back with :func:`typed`). Rows are ordered by their
    ``order`` columns' values (default: ``group``), first as in the file, new values last; within
    one such value the order is kept. For a study's ``--update``."""
    with open(path, newline="") as f:
        old = [{k: typed(v) for k, v in r.items()} for r in csv.DictReader(f)]
    key = lambda r, cols: tuple(str(r[c]) for c in cols)
    order = group if order is None else order
    new = {key(r, group) for r in rows}
    seen = list(dict.fromkeys([key(r, order) for r in old] + [key(r, order) for r in rows]))
    merged = [r for r in old if key(r, group) not in new] + rows
    return sorted(merged, key=lambda r: seen.index(key(r, order)))  # stable


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small preset for smoke runs")
    p.add_argument("--out", type=Path, default=RESULTS, help="where CSV and PNG files go")
    p.add_argument("--fresh", action="store_true", help="recompute stages saved by an earlier run")
    diffmjx.add_cli_arguments(p)
    return p


def cli(doc: str, preset: Path, argv=None, extra=()) -> tuple[diffmjx.Config, argparse.Namespace]:
    """Parse a study's command line (``--quick --out --preset --set``), set up JAX, return the config.

    ``extra``: ``(flag, add_argument keyword arguments)`` pairs for a study's own options.
    """
    p = parser(doc.splitlines()[0])
    for flag, kwargs in extra:
        p.add_argument(flag, **kwargs)
    p.set_defaults(preset=str(preset))
    args = p.parse_args(argv)
    setup()
    return diffmjx.config_from_args(args), args


def param_key(params) -> tuple:
    """A stage key of a NamedTuple of parameters (e.g. ``experiments.contactnets.CubeParams``): every field, every digit."""
    return tuple(tuple(np.atleast_1d(np.asarray(v, np.float64)).tolist()) for v in params)


def save_figure(fig, path: Path, dpi: int = 120, rect=None) -> None:
    """Lay ``fig`` out tightly (within ``rect``, figure fractions, e.g. to leave room for a figure
    legend), write it to ``path`` and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def setup() -> None:
    """float64, the persistent compilation cache and, on a GPU, loops kept on the device, as every study uses."""
    with contextlib.suppress(RuntimeError):  # JAX already ran: the process keeps XLA's defaults
        diffmjx.enable_gpu()
    diffmjx.enable_compilation_cache()
    np.set_printoptions(precision=6)
    jax.config.update("jax_enable_x64", True)
