"""What a compiled JAX program executes: the XLA thunks (kernels) of one call, counted by JAX's profiler.

On a small model most kernels of a gradient are tiny, so how many run is a large part of what the
backward pass costs (docs/speed.md)::

    from diffmjx.profiling import thunks

    counts = thunks(jax.grad(f, argnums=(0, 1)), q, v)   # instruction name -> thunks per call
    sum(counts.values())                                  # kernels per call

Needs nothing from the rest of DiffMJX; nothing in the core imports it.
"""

from __future__ import annotations

import collections
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import jax

__all__ = ["thunks"]


def thunks(g: Callable, *args, calls: int = 50) -> collections.Counter:
    """XLA thunks (kernels) one call of jitted ``g(*args)`` executes, by HLO instruction name
    without its numeric suffix, from JAX's profiler. Only events named after an instruction of the
    compiled program count (XLA runs thunks on its worker threads and on the caller's); loops and
    conditionals are containers, not kernels, and are left out.

    Arguments:
        g: the function; compiled here with ``jax.jit``.
        *args: its arguments.
        calls: profiled calls (after one warm-up call); the counts are their average.

    Returns:
        ``Counter`` of instruction name -> thunks per call.
    """
    compiled = jax.jit(g).lower(*args).compile()
    names = set(re.findall(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = ", compiled.as_text(), flags=re.MULTILINE))
    names = {n for n in names if not n.startswith(("while", "cond", "conditional", "call"))}
    jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp)
        for _ in range(calls):
            jax.block_until_ready(compiled(*args))
        jax.profiler.stop_trace()
        (path,) = Path(tmp).rglob("*.xplane.pb")
        data = jax.profiler.ProfileData.from_file(str(path))
    counts = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            for ev in line.events:
                if ev.name in names:
                    counts[re.sub(r"\.\d+$", "", ev.name)] += 1
    return collections.Counter({k: n / calls for k, n in counts.items()})
