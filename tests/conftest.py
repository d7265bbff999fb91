"""Shared test setup: float64, JAX's persistent compilation cache and quick compiles (gradient JITs are slow)."""

import os

# The suite's time is mostly XLA compiling programs it then runs for a fraction of a second: compile
# them with LLVM's backend optimisations off (a quarter less compile time on the suite's heaviest
# files) and with XLA:CPU's older elemental emitters instead of its fusion emitters (a quarter less
# again: test_linearize and test_sysid_generic 126 -> 92 s cold). Results agree to rounding, no
# fast-math at either level. Set before JAX creates its backend, which reads XLA_FLAGS once; a flag
# the caller set wins. Studies and users compile at XLA's default.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_use_fusion_emitters=false").strip()

import diffmjx

CACHE = os.environ.get("DIFFMJX_CACHE_DIR")  # default: ~/.cache/diffmjx/jax, shared with studies
diffmjx.enable_compilation_cache(CACHE)

try:  # property tests draw the same examples on every machine and run (no flaky draws, no database)
    from hypothesis import settings

    settings.register_profile("diffmjx", derandomize=True, database=None)
    settings.load_profile("diffmjx")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass


# The heaviest files first (cold seconds, measured with --durations=0), the rest in their usual order:
# with `--dist loadfile` each worker takes the next file when it is free, so starting with the largest
# leaves the two workers finishing together instead of one idle while the other runs a late, heavy
# file. xdist's own reordering (files with the most tests first) is off (`--no-loadscope-reorder`
# in pyproject.toml): it put light files of many small tests first and the heaviest last.
HEAVY_FIRST = (
    "test_sysid_generic.py",
    "test_mpc.py",
    "test_contact_tasks.py",
    "test_linearize.py",
    "test_integrators.py",
    "test_cfd.py",
    "test_collision.py",
    "test_solver.py",
    "test_cube_toss.py",
    "test_box_box.py",
    "test_mpc_guide.py",  # the default planner (iLQR with CFD) on the C engine: 34 s cold
    "test_guide_pages.py",
    "test_collision_sdf.py",
    "test_guide_example.py",
    "test_smooth.py",
    "test_registry.py",
    "test_myo.py",
    "test_constants.py",
    "test_api_docs.py",
    "test_cache.py",
    "test_stage_cache.py",
    "test_muscle_smoothing.py",
    "test_toy_point_mass.py",
    "test_sysid_cube.py",
    "test_layers.py",
    "test_fidelity.py",
    "test_vmap_drops.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept
