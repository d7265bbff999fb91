"""DiffMJX's compiled programs can be stored in JAX's persistent compilation cache."""

import jax
import pytest

import diffmjx
from diffmjx.scenes import cube_toss_loss, load


@pytest.mark.parametrize(
    "overrides, cacheable",
    [
        ((), True),  # the defaults: backsolve, whose adjoint solve holds its first step too
        # suite budget: the other two trace a second and third gradient program; run with -m slow
        pytest.param(("integrator.adjoint=checkpoint",), True, marks=pytest.mark.slow),
        pytest.param(("integrator.on_budget_exhausted=raise",), False, marks=pytest.mark.slow),  # a host callback
    ],
)
def test_gradient_program_has_no_host_callback(overrides, cacheable):
    """JAX never writes a program with a host callback to the persistent cache. A traced ``dt0``
    made Diffrax insert one (a run-time sign check), so no gradient was ever cached."""
    _, mx = load("cube_toss")
    cfg = diffmjx.Config().override(*overrides)
    text = jax.jit(jax.grad(cube_toss_loss(mx, cfg, horizon=2))).lower(-2.0).as_text()
    assert ("callback" not in text) == cacheable


def test_enable_gpu_adds_flags_once_and_refuses_after_jax_ran():
    """``enable_gpu`` keeps a flag the user set, adds the others, and, in a process where JAX already
    ran (this one), raises instead of leaving the flags silently unread."""
    import subprocess
    import sys

    script = (
        "import os, jax, diffmjx\n"
        "os.environ['XLA_FLAGS'] = '--xla_gpu_graph_min_graph_size=5'\n"
        "flags = diffmjx.enable_gpu()\n"
        "assert flags.split() == ['--xla_gpu_graph_min_graph_size=5', "
        "'--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL'], flags\n"
        "assert float(jax.jit(lambda x: x + 1)(1.0)) == 2.0\n"  # XLA accepts them (on a CPU too)
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
    jax.numpy.zeros(1).block_until_ready()
    with pytest.raises(RuntimeError, match="before JAX's first computation"):
        diffmjx.enable_gpu()


def test_runtime_jit_compiles_with_the_cpu_options_and_gives_jax_jit_values(monkeypatch):
    """``runtime.jit`` adds the CPU's compiler options where this jaxlib knows them (a CPU here), gives
    ``jax.jit``'s values, and compiles without an option XLA refuses instead of failing every call."""
    import jax.numpy as jnp

    from diffmjx import runtime

    assert runtime.compiler_options() == runtime.CPU_COMPILER_OPTIONS
    f = runtime.jit(lambda x, n: jnp.sin(x) ** n, static_argnames=("n",))
    x = jnp.linspace(0.0, 1.0, 5)
    assert jnp.array_equal(f(x, n=3), jax.jit(lambda x: jnp.sin(x) ** 3)(x))

    runtime.compiler_options.cache_clear()
    monkeypatch.setattr(runtime, "CPU_COMPILER_OPTIONS", {"xla_no_such_option_in_any_jaxlib": False})
    try:
        assert runtime.compiler_options() == {}
        assert float(runtime.jit(lambda x: x * 2)(1.5)) == 3.0
    finally:
        runtime.compiler_options.cache_clear()
