"""Shared test setup: float64 and JAX's persistent compilation cache (gradient JITs are slow)."""

import os

import diffmjx

CACHE = os.environ.get("DIFFMJX_CACHE_DIR")  # default: ~/.cache/diffmjx/jax, shared with studies
diffmjx.enable_compilation_cache(CACHE)

try:  # property tests draw the same examples on every machine and run (no flaky draws, no database)
    from hypothesis import settings

    settings.register_profile("diffmjx", derandomize=True, database=None)
    settings.load_profile("diffmjx")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass
