"""Shared test setup: float64 and JAX's persistent compilation cache (gradient JITs are slow)."""

import os

import diffmjx

CACHE = os.environ.get("DIFFMJX_CACHE_DIR")  # default: ~/.cache/diffmjx/jax, shared with studies
diffmjx.enable_compilation_cache(CACHE)
