"""Process-level JAX settings that DiffMJX users want: float64 and a persistent compile cache."""

from __future__ import annotations

import os
from pathlib import Path

import jax

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
