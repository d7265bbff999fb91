"""Shared test setup: float64, JAX's persistent compilation cache and quick compiles (gradient JITs are slow)."""

import os

# The suite's time is mostly XLA compiling programs it then runs for a fraction of a second: compile
# them with LLVM's backend optimisations off (a quarter less compile time on the suite's heaviest
# files; results agree to rounding, no fast-math at either level). Set before JAX creates its backend,
# which reads XLA_FLAGS once; a flag the caller set wins. Studies and users compile at XLA's default.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import diffmjx

CACHE = os.environ.get("DIFFMJX_CACHE_DIR")  # default: ~/.cache/diffmjx/jax, shared with studies
diffmjx.enable_compilation_cache(CACHE)

try:  # property tests draw the same examples on every machine and run (no flaky draws, no database)
    from hypothesis import settings

    settings.register_profile("diffmjx", derandomize=True, database=None)
    settings.load_profile("diffmjx")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass


def near_table_segments(n: int, horizon: int = 4):
    """``n`` training segments of the shipped ContactNets data that come within 6 cm of the table
    while sliding faster than 0.2 m/s (a seeded choice): segments that carry contact information."""
    import numpy as np

    from diffmjx import sysid

    tosses, train_names, _, _ = sysid.load_split(sysid.DataConfig(horizon=horizon))
    seg = sysid.segments(tosses, train_names, horizon)
    near = seg.qpos[:, :, 2].min(1) < 0.06
    sliding = np.linalg.norm(seg.qvel[:, 0, :2], axis=1) > 0.2
    idx = np.random.default_rng(0).choice(np.flatnonzero(near & sliding), n, replace=False)
    return np.asarray(seg.qpos[idx]), np.asarray(seg.qvel[idx])
