"""Process-level settings that DiffMJX users want: float64, a persistent compile cache, and
resumable stages for long runs."""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import mujoco

DEFAULT_CACHE = Path(os.environ.get("DIFFMJX_CACHE_DIR", Path.home() / ".cache" / "diffmjx" / "jax"))


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Turn on JAX's persistent compilation cache (gradient JITs through MJX take a minute).

    Also enables float64, which every DiffMJX study and test uses.

    Arguments:
        path: cache directory; default ``$DIFFMJX_CACHE_DIR`` or ``~/.cache/diffmjx/jax``.

    Returns:
        The cache directory (created if missing).
    """
    path = Path(path) if path is not None else DEFAULT_CACHE
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def stage_store() -> Path:
    """Where :func:`stage` saves results: ``$DIFFMJX_STAGE_CACHE`` or ``~/.cache/diffmjx/stages``."""
    return Path(os.environ.get("DIFFMJX_STAGE_CACHE", Path.home() / ".cache" / "diffmjx" / "stages"))


def stage(name: str, key: object, fn: Callable[[], Any], fresh: bool = False, store: str | Path | None = None) -> Any:
    """``fn()``, or its result saved by an earlier run with the same ``name`` and ``key``.

    Long runs save each finished stage, so an interrupted run resumes where it stopped instead of
    recomputing an hour of gradients. ``key`` must name everything the result depends on (config,
    sweep points, ...); the MuJoCo version is part of it. Results are pickled, and written
    atomically: a run killed mid-write leaves no partial file.

    Arguments:
        name: the stage's name (the file name's prefix).
        key: what the result depends on; its ``repr`` is hashed.
        fn: computes the result.
        fresh: recompute and overwrite (``--fresh`` on a study's command line).
        store: the folder; :func:`stage_store` if None.

    Returns:
        The result, computed now or loaded.
    """
    digest = hashlib.sha256(repr((name, key, mujoco.__version__)).encode()).hexdigest()[:16]
    path = (stage_store() if store is None else Path(store)) / f"{name}-{digest}.pkl"
    if path.exists() and not fresh:
        print(f"{name}: reusing {path}")
        with open(path, "rb") as f:
            return pickle.load(f)
    result = fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    tmp.replace(path)
    return result
