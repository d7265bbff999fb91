"""Where JIT time goes (speed issue, item 2): trace, lower and XLA-compile times of the cube toss.

    python -m experiments.benchmark_jit [--name NAME] [--set KEY=VALUE ...]

For the forward loss and its ``jax.grad`` under several configurations (the preset's and, in the
variants named ``Config()``, the library's defaults, with MJX's Euler beside them), ``jax.jit(f)`` is split
into ``.trace`` (Python and JAX's autodiff passes), ``.lower`` (to StableHLO) and ``.compile``
(XLA), each timed cold (the persistent cache is off here), with the size of the lowered program,
the compiled program's run time (median of 3) and its value. Variants named "... fewer LLVM
passes" compile with XLA's ``xla_llvm_disable_expensive_passes``. Last, the default backward is
compiled in two fresh processes sharing an empty persistent cache: the second one's JIT time is
what a user with ``diffmjx.enable_compilation_cache()`` pays from the second run on (row
"default, warm persistent cache"). Writes docs/results/NAME.csv (NAME defaults to benchmark_jit).
Run nothing else beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
from tqdm import tqdm

import diffmjx
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "speed.yaml"
FEWER_PASSES = {"xla_llvm_disable_expensive_passes": True}
EULER = ("integrator.solver=mjx_euler", "integrator.substeps=10")
VARIANTS = {  # name: (config overrides of the preset, XLA compiler options)
    "default": ((), {}),
    "implicit solve": (("solver.gradient=implicit",), {}),
    "remat": (("integrator.remat=true",), {}),
    "mjx_euler dt 1e-3": (EULER, {}),
    "default, fewer LLVM passes": ((), FEWER_PASSES),
    "mjx_euler dt 1e-3, fewer LLVM passes": (EULER, FEWER_PASSES),
}
LIBRARY_VARIANTS = {  # name: overrides of diffmjx.Config() (not the preset): what a user gets by default
    "Config()": (),
    "Config(), mjx_euler dt 1e-3": EULER,
}


def breakdown(f, arg, compiler_options=None) -> dict:
    """Cold trace / lower / compile seconds of ``jax.jit(f)`` at ``arg``, the HLO's line count, and
    the compiled program's run time (median of 3 after a warm-up call) and value."""
    t0 = time.perf_counter()
    traced = jax.jit(f).trace(arg)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile(compiler_options) if compiler_options else lowered.compile()
    t3 = time.perf_counter()
    value = float(jax.block_until_ready(compiled(arg)))  # also the warm-up call
    return dict(
        trace_s=t1 - t0,
        lower_s=t2 - t1,
        compile_s=t3 - t2,
        jit_s=t3 - t0,
        hlo_lines=lowered.as_text().count("\n"),
        run_s=common.median_time(compiled, arg),
        value=value,
    )


_PROBE = """
import json, sys, time, jax
from experiments import common
import diffmjx
diffmjx.enable_compilation_cache(sys.argv[1])
cfg = diffmjx.Config.from_yaml(sys.argv[2])
_, mx = common.load("cube_toss")
u0 = common.CUBE_TOSS["u0"]
t0 = time.perf_counter()
lowered = jax.jit(jax.grad(common.cube_toss_loss(mx, cfg))).trace(u0).lower()
t1 = time.perf_counter()
compiled = lowered.compile()
t2 = time.perf_counter()
print(json.dumps(dict(trace_lower_s=t1 - t0, compile_s=t2 - t1, jit_s=t2 - t0, value=float(compiled(u0)))))
"""


def warm_cache(cfg: diffmjx.Config) -> list[dict]:
    """The default backward's JIT time in a fresh process with an empty, then a warm persistent cache.

    trace_s holds trace plus lower (the cache is looked up by the lowered program).
    """
    with tempfile.TemporaryDirectory() as tmp:
        preset = Path(tmp) / "config.yaml"
        preset.write_text(cfg.to_yaml())
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        runs = []
        for _ in range(2):  # the first fills the cache, the second reads it
            out = subprocess.run(
                [sys.executable, "-c", _PROBE, str(Path(tmp) / "cache"), str(preset)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    return [
        dict(
            variant=f"default, fresh process, {state} persistent cache",
            program="backward",
            trace_s=r["trace_lower_s"],
            lower_s=float("nan"),
            compile_s=r["compile_s"],
            jit_s=r["jit_s"],
            hlo_lines=-1,
            run_s=float("nan"),
            value=r["value"],
        )
        for state, r in zip(("empty", "warm"), runs)
    ]


def run(cfg: diffmjx.Config, out: Path, name: str = "benchmark_jit") -> list[dict]:
    jax.config.update("jax_enable_compilation_cache", False)  # cold compiles
    _, mx = common.load("cube_toss")
    u0 = common.CUBE_TOSS["u0"]
    rows = []
    variants = [(name, cfg, overrides, options) for name, (overrides, options) in VARIANTS.items()]
    variants += [(name, diffmjx.Config(), overrides, {}) for name, overrides in LIBRARY_VARIANTS.items()]
    for variant, base, overrides, options in tqdm(variants, desc="variants"):
        try:
            c = base.override(*overrides)
        except ValueError as e:  # a knob this version of the library does not have
            print(f"{variant}: skipped ({e})")
            continue
        loss = common.cube_toss_loss(mx, c)
        for program, f in (("forward", loss), ("backward", jax.grad(loss))):
            rows.append(dict(variant=variant, program=program, **breakdown(f, u0, options)))
            common.write_csv(out / f"{name}.csv", rows)
    rows += warm_cache(cfg)
    common.write_csv(out / f"{name}.csv", rows)
    print(
        f"\n{'variant':<38} {'program':<9} {'trace':>7} {'lower':>7} {'compile':>8} {'total':>7} {'run':>7} {'value':>10}"
    )
    for r in rows:
        print(
            f"{r['variant']:<38} {r['program']:<9} {r['trace_s']:7.1f} {r['lower_s']:7.1f} {r['compile_s']:8.1f} "
            f"{r['jit_s']:7.1f} {r['run_s']:7.3f} {r['value']:10.6f}"
        )
    return rows


def main(argv=None):
    name = dict(default="benchmark_jit", help="CSV file name (without .csv) in --out")
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv, extra=[("--name", name)])
    run(cfg, args.out, args.name)


if __name__ == "__main__":
    main()
