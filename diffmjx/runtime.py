"""Process-level settings that DiffMJX users want: float64, a persistent compile cache, loops kept
on the GPU, and resumable stages for long runs."""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import mujoco

from diffmjx import _mjx

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


CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
"""XLA options :func:`jit` compiles with on a CPU: XLA:CPU's elemental emitters instead of its newer
fusion emitters. Measured on system identification's Jacobian programs (one share, one thread, cold
cache; a one-off probe, not a committed benchmark): compilation 10-14 % shorter and runs 5-16 %
shorter on three models (a 2-link arm, a thrown box, a muscle finger). Results agree to rounding
(neither setting uses fast math)."""


@functools.cache
def compiler_options() -> dict[str, Any]:
    """The per-program XLA options :func:`jit` uses: :data:`CPU_COMPILER_OPTIONS` on a CPU backend
    whose XLA knows them, else none (an accelerator, or a jaxlib that dropped an option: an option
    XLA does not know fails every compile, so it is tried once on a tiny program first)."""
    if jax.default_backend() != "cpu":
        return {}
    try:
        jax.jit(lambda x: x + 1, compiler_options=CPU_COMPILER_OPTIONS)(0.0)
    except Exception as e:  # XLA's error type differs across jaxlib versions
        if "compile option" not in str(e):
            raise
        return {}
    return dict(CPU_COMPILER_OPTIONS)


def jit(fn: Callable, **kwargs) -> Callable:
    """``jax.jit(fn, **kwargs)`` compiled with :func:`compiler_options`, decided at the first call
    (so importing DiffMJX never starts JAX's backends). Concurrent first calls share one ``jax.jit``
    (and so one trace and compile). ``lower`` is forwarded for profiling."""
    lock = threading.Lock()
    compiled: list[Callable] = []

    def get() -> Callable:
        if not compiled:
            with lock:
                if not compiled:
                    compiled.append(jax.jit(fn, compiler_options=compiler_options(), **kwargs))
        return compiled[0]

    @functools.wraps(fn)
    def call(*args, **kw):
        return get()(*args, **kw)

    call.lower = lambda *args, **kw: get().lower(*args, **kw)
    return call


GPU_XLA_FLAGS = ("--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL", "--xla_gpu_graph_min_graph_size=1")
"""XLA flags :func:`enable_gpu` adds: while loops and conditionals are captured into CUDA graphs
with everything around them, so a loop's trip test runs on the GPU instead of a copy to the host
each trip."""


def enable_gpu() -> str:
    """Keep DiffMJX's loops on the GPU: add :data:`GPU_XLA_FLAGS` to ``XLA_FLAGS``.

    An adaptive solve is thousands of short, sequential kernels inside loops of unknown trip count
    (Diffrax's step loop, MJX's constraint solve and line search). By default XLA copies each loop
    condition to the host and launches the next trip from there; with these flags the loops are
    CUDA graphs with on-device conditions. Measured on an H200 (``experiments/benchmark_device``,
    docs/speed.md): a forward-dynamics call 1.36 -> 0.77 ms, the cube-toss gradient 8.5 -> 6.9 s.
    Flags another setting already put into ``XLA_FLAGS`` for the same option are kept. Harmless on a
    CPU (XLA ignores GPU options there).

    Call it before JAX's first computation: XLA reads ``XLA_FLAGS`` once, when JAX creates its
    backends.

    Returns:
        The resulting ``XLA_FLAGS``.

    Raises:
        RuntimeError: JAX's backends already exist, so the flags would be silently ignored.
    """
    if _mjx.jax_backends_initialized():
        raise RuntimeError(
            "diffmjx.enable_gpu() must run before JAX's first computation (XLA reads XLA_FLAGS once, when JAX "
            "creates its backends); call it right after the imports, or set XLA_FLAGS="
            f"'{' '.join(GPU_XLA_FLAGS)}' in the environment"
        )
    current = os.environ.get("XLA_FLAGS", "").split()
    named = {f.split("=", 1)[0] for f in current}
    added = [f for f in GPU_XLA_FLAGS if f.split("=", 1)[0] not in named]
    os.environ["XLA_FLAGS"] = " ".join([*current, *added])
    return os.environ["XLA_FLAGS"]


def stage_store() -> Path:
    """Where :func:`stage` saves results: ``$DIFFMJX_STAGE_CACHE`` or ``~/.cache/diffmjx/stages``."""
    return Path(os.environ.get("DIFFMJX_STAGE_CACHE", Path.home() / ".cache" / "diffmjx" / "stages"))


def stage_path(name: str, key: object, store: str | Path | None = None) -> Path:
    """The file :func:`stage` saves ``name``'s result for ``key`` in (it exists once that stage is done)."""
    digest = hashlib.sha256(repr((name, key, mujoco.__version__)).encode()).hexdigest()[:16]
    return (stage_store() if store is None else Path(store)) / f"{name}-{digest}.pkl"


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
    path = stage_path(name, key, store)
    if path.exists() and not fresh:
        try:
            with open(path, "rb") as f:
                result = pickle.load(f)
        except (AttributeError, ImportError, pickle.UnpicklingError, EOFError) as e:
            # a result pickled by an older layout (a class that moved) or a damaged file: compute it again
            print(f"{name}: cannot read {path} ({type(e).__name__}: {e}); computing it again")
        else:
            print(f"{name}: reusing {path}")
            return result
    result = fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    tmp.replace(path)
    return result
