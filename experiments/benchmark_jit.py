"""Where JIT time goes (speed issue, item 2): trace, lower and XLA-compile times of the cube toss.

    python -m experiments.benchmark_jit [--name NAME] [--set KEY=VALUE ...]

For the forward loss and its ``jax.grad`` under several configurations, ``jax.jit(f)`` is split
into ``.trace`` (Python and JAX's autodiff passes), ``.lower`` (to StableHLO) and ``.compile``
(XLA), each timed cold (the persistent cache is off here), with the size of the lowered program.
Writes docs/results/NAME.csv (NAME defaults to benchmark_jit). Run nothing else beside it.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
from tqdm import tqdm

import diffmjx
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "cube_toss.yaml"
VARIANTS = {
    "default": (),
    "implicit solve": ("solver.gradient=implicit",),
    "remat": ("integrator.remat=true",),
    "mjx_euler dt 1e-3": ("integrator.solver=mjx_euler", "integrator.substeps=10"),
}


def breakdown(f, arg) -> dict:
    """Cold trace / lower / compile seconds of ``jax.jit(f)`` at ``arg``, and the HLO's line count."""
    t0 = time.perf_counter()
    traced = jax.jit(f).trace(arg)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    return dict(trace_s=t1 - t0, lower_s=t2 - t1, compile_s=t3 - t2, jit_s=t3 - t0,
                hlo_lines=lowered.as_text().count("\n"))  # fmt: skip


def run(cfg: diffmjx.Config, out: Path, name: str = "benchmark_jit") -> list[dict]:
    jax.config.update("jax_enable_compilation_cache", False)  # cold compiles
    _, mx = common.load("cube_toss")
    u0 = common.CUBE_TOSS["u0"]
    rows = []
    for variant, overrides in tqdm(VARIANTS.items(), desc="variants"):
        try:
            c = cfg.override(*overrides)
        except ValueError as e:  # a knob this version of the library does not have
            print(f"{variant}: skipped ({e})")
            continue
        loss = common.cube_toss_loss(mx, c)
        for program, f in (("forward", loss), ("backward", jax.grad(loss))):
            rows.append(dict(variant=variant, program=program, **breakdown(f, u0)))
            common.write_csv(out / f"{name}.csv", rows)
    print(f"\n{'variant':<20} {'program':<9} {'trace':>7} {'lower':>7} {'compile':>8} {'total':>7} {'HLO lines':>10}")
    for r in rows:
        print(f"{r['variant']:<20} {r['program']:<9} {r['trace_s']:7.1f} {r['lower_s']:7.1f} {r['compile_s']:8.1f} "
              f"{r['jit_s']:7.1f} {r['hlo_lines']:10d}")  # fmt: skip
    return rows


def main(argv=None):
    name = dict(default="benchmark_jit", help="CSV file name (without .csv) in --out")
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv, extra=[("--name", name)])
    run(cfg, args.out, args.name)


if __name__ == "__main__":
    main()
