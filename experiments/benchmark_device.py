"""Device benchmark: per-call latency, cube-toss gradients and a sysid step on whatever backend JAX finds.

    python -m experiments.benchmark_device [--budget-s 420] [--tag NAME] [--variants default,graphs]

The same script runs on this project's 2-core CPU and on a GPU (docs/speed.md, "On a GPU"). It
measures, float64, with the persistent compilation cache of its own (an empty folder per run):

``calls``
    One forward-dynamics call of the cube in contact (``mjx.forward``, ``diffmjx.forward`` at
    ``Config()``, the gradient of its accelerations), and ``diffmjx.forward`` vmapped over 1, 64 and
    1024 perturbed states: median wall time per call, dispatch included (what a Python loop pays).
``toss``
    The cube toss (1 s, 100 control periods) at ``Config()``: the forward rollout and its
    value-and-gradient, with accepted and rejected steps.
``toss_vmap``
    The toss gradient vmapped over ``--toss-batch`` initial velocities.
``euler``
    MJX's Euler at dt = 3e-5 (333 substeps per period, the fixed step that matches DiffMJX's
    accuracy on the toss), value-and-gradient, vmapped over ``--euler-batch`` velocities.
``sysid``
    Adam steps of the Fig. 9 study's DiffMJX + CFD configuration (paper preset, 64 segments of
    N = 4, side from 140 mm), with the library's converged constraint solve (``solver`` section at
    its defaults, implicit gradient, no impedance floor), with that solve and the library's
    plane-box rule (``library setting``), and with the paper's own solver settings.

Variants are XLA flag sets, each run in its own processes (``XLA_FLAGS`` is read once, at start):
``default`` (none) and ``graphs`` (while loops and conditionals captured into CUDA graphs, so a
loop's trip test stays on the GPU: ``--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL
--xla_gpu_graph_min_graph_size=1``; GPU only), and either of them suffixed ``-mjx-stages`` (the same
flags, with MJX's own ``kinematics`` and ``com_pos`` in place of DiffMJX's derivative-friendly ones,
:mod:`diffmjx.physics.smooth`: the rules' "before"). On a machine with spare cores every (variant, job)
first compiles in parallel into the run's cache (``jit_s`` is that cold compile, measured under
that contention); the measuring processes then run one at a time and load the compiled programs.
Every row is appended to ``<out>/benchmark_device_<tag>.csv`` as soon as it is measured, so a run
stopped at ``--budget-s`` keeps what it finished. ``--plot`` redraws
``docs/results/benchmark_device.png`` from every ``benchmark_device_*.csv`` there.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diffmjx.runtime import GPU_XLA_FLAGS
from experiments import contactnets as cn

VARIANTS = {  # name -> XLA flag sets, the first one this XLA accepts is used
    "default": ("",),
    "graphs": (  # diffmjx.enable_gpu()'s flags, then the same spelled out for an XLA without the +/- syntax
        " ".join(GPU_XLA_FLAGS),
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE "
        "--xla_gpu_graph_min_graph_size=1",
    ),
}
# a variant named "<flags>-mjx-stages" runs with <flags>' XLA flags and MJX's own kinematics and com_pos
# stages in place of DiffMJX's (diffmjx.physics.smooth): the derivative rules' "before"
MJX_STAGES = "-mjx-stages"
VARIANTS.update({f"{name}{MJX_STAGES}": flags for name, flags in list(VARIANTS.items())})
_FLAGS: dict[str, str] = {}  # variant -> the accepted flag set (driver)
JOBS = ("calls,toss", "sysid", "toss_vmap,euler", "sysid_paper")  # measured in this order for each variant
FIELDS = (
    "device",
    "jax",
    "variant",
    "pass",
    "section",
    "what",
    "batch",
    "jit_s",
    "run_s",
    "per_call_ms",
    "repeats",
    "accepted",
    "rejected",
    "value",
    "grad",
    "xla_flags",
    "note",
)
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
SYSID_INIT_M = 0.14
_COMPILE_ONLY = False  # set in a worker of the parallel compile pass: compile and run once, time nothing


def _emit(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow({k: row.get(k, "") for k in FIELDS})
    shown = {k: row[k] for k in ("variant", "section", "what", "batch", "jit_s", "run_s", "per_call_ms") if k in row}
    print("ROW", shown, flush=True)


def _timed(fn, args, repeats: int, warm: bool = True) -> float:
    """Median wall time of ``fn(*args)`` (``common.median_time``), after a warm-up call; nan in the
    compile pass."""
    import jax

    from experiments import common

    if _COMPILE_ONLY:
        return float("nan")
    if warm:
        jax.block_until_ready(fn(*args))  # the first call after loading a program allocates
    return common.median_time(fn, *args, repeats=repeats)


def _compile(fn, *args):
    """AOT compile (a cache hit in the measuring pass); returns (compiled, seconds)."""
    import jax

    t = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t


# ---------------------------------------------------------------- sections (run inside a worker)


def section_calls(ctx, emit, batches=(1, 64, 1024), repeats=50):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from mujoco import mjx

    import diffmjx
    from diffmjx import scenes
    from experiments.benchmark_vjp import states

    mj, mx = scenes.load("cube_toss")
    q0, v0 = (jnp.asarray(x) for x in states(mj)["contact"])  # the toss's first loaded state
    d0 = mjx.make_data(mx).replace(qpos=q0, qvel=v0)
    cfg = diffmjx.Config()

    def grad_qacc(q, v):
        return jax.grad(lambda q, v: jnp.sum(diffmjx.forward(mx, d0.replace(qpos=q, qvel=v), cfg).qacc), (0, 1))(q, v)

    single = {
        "mjx.forward": (lambda d: mjx.forward(mx, d).qacc, (d0,)),
        "diffmjx.forward": (lambda d: diffmjx.forward(mx, d, cfg).qacc, (d0,)),
        "diffmjx.forward gradient": (grad_qacc, (q0, v0)),
    }
    for what, (fn, args) in single.items():
        compiled, jit_s = _compile(fn, *args)
        med = _timed(compiled, args, repeats)
        emit(section="calls", what=what, batch=1, jit_s=jit_s, run_s=med, per_call_ms=1e3 * med, repeats=repeats)
    rng = np.random.default_rng(0)
    for b in batches:
        vs = v0 + 1e-3 * jnp.asarray(rng.standard_normal((b, v0.shape[0])))
        fn = jax.vmap(lambda v: diffmjx.forward(mx, d0.replace(qvel=v), cfg).qacc)
        compiled, jit_s = _compile(fn, vs)
        med = _timed(compiled, (vs,), max(10, repeats // 5))
        emit(
            section="calls",
            what="diffmjx.forward vmapped",
            batch=b,
            jit_s=jit_s,
            run_s=med,
            per_call_ms=1e3 * med,
            repeats=max(10, repeats // 5),
        )


def _toss_fns(cfg):
    import jax

    import diffmjx
    from diffmjx import scenes

    _, mx = scenes.load("cube_toss")
    ctrls = jax.numpy.zeros((scenes.CUBE_TOSS["horizon"], mx.nu))

    def forward(u0):
        d, traj = diffmjx.rollout(mx, scenes.cube_toss_data(mx, u0), ctrls, cfg)
        return d.qpos[1], traj.stats.accepted.sum(), traj.stats.rejected.sum()

    return forward, jax.value_and_grad(scenes.cube_toss_loss(mx, cfg))


def section_toss(ctx, emit, repeats=3):
    import jax.numpy as jnp

    import diffmjx
    from diffmjx import scenes

    u0 = jnp.asarray(scenes.CUBE_TOSS["u0"])
    forward, vg = _toss_fns(diffmjx.Config())
    compiled, jit_s = _compile(forward, u0)
    med = _timed(compiled, (u0,), repeats)
    value, acc, rej = (float("nan"),) * 3 if _COMPILE_ONLY else compiled(u0)
    emit(
        section="toss",
        what="forward",
        batch=1,
        jit_s=jit_s,
        run_s=med,
        repeats=repeats,
        accepted=float(acc),
        rejected=float(rej),
        value=float(value),
    )
    compiled, jit_s = _compile(vg, u0)
    med = _timed(compiled, (u0,), repeats)
    value, grad = (float("nan"),) * 2 if _COMPILE_ONLY else compiled(u0)
    emit(
        section="toss",
        what="value and gradient",
        batch=1,
        jit_s=jit_s,
        run_s=med,
        repeats=repeats,
        value=float(value),
        grad=float(grad),
    )


def section_toss_vmap(ctx, emit):
    import jax
    import jax.numpy as jnp

    import diffmjx
    from diffmjx import scenes

    b = ctx.toss_batch
    u0 = scenes.CUBE_TOSS["u0"] + jnp.linspace(-0.05, 0.05, b)
    _, vg = _toss_fns(diffmjx.Config())
    compiled, jit_s = _compile(jax.vmap(vg), u0)
    med = _timed(compiled, (u0,), 1, warm=False)
    emit(
        section="toss_vmap",
        what="value and gradient vmapped",
        batch=b,
        jit_s=jit_s,
        run_s=med,
        per_call_ms=1e3 * med / b,
        repeats=1,
    )


def section_euler(ctx, emit):
    import jax
    import jax.numpy as jnp

    import diffmjx
    from diffmjx import scenes

    b = ctx.euler_batch
    cfg = diffmjx.Config().override("integrator.solver=mjx_euler", "integrator.substeps=333")
    u0 = scenes.CUBE_TOSS["u0"] + jnp.linspace(-0.05, 0.05, b)
    _, vg = _toss_fns(cfg)
    compiled, jit_s = _compile(jax.vmap(vg), u0)
    med = _timed(compiled, (u0,), 1, warm=False)
    value, grad = (jnp.full(b, jnp.nan),) * 2 if _COMPILE_ONLY else compiled(u0)
    emit(
        section="euler",
        what="MJX Euler dt 3e-5, value and gradient vmapped",
        batch=b,
        jit_s=jit_s,
        run_s=med,
        per_call_ms=1e3 * med / b,
        repeats=1,
        value=float(value[b // 2]),
        grad=float(grad[b // 2]),
    )


def section_sysid(ctx, emit, setups=("converged solve", "library setting")):
    import numpy as np

    from experiments.contactnets_sysid import CONVERGED_SOLVE, LIBRARY_SOLVE

    base = cn.SysidConfig.load("paper", ["sim.cfd.enabled=true", "sim.cfd.friction=distance"])
    tosses, train_names, _, report = cn.load_split(base.data)
    data = cn.segments(tosses, train_names, base.data.horizon, report)
    # the library setting: the converged solve with the library's plane-box rule (every penetrating corner,
    # not MJX's 1 mm skin whose contact set flickers), as the Fig. 9 study's "library setting" run
    overrides = {"converged solve": CONVERGED_SOLVE, "library setting": LIBRARY_SOLVE, "paper solver": ()}
    for name in setups:
        extra = overrides[name]
        steps = 1 if _COMPILE_ONLY else ctx.sysid_steps
        cfg = base.override(
            *extra,
            "train.epochs=1",
            f"train.steps_per_epoch={steps}",
            "train.checkpoint_dir=null",
            f"train.inits={{side_length: {SYSID_INIT_M}}}",
        )
        result = cn.train(cfg, data, progress=False)
        wall = np.asarray(result.history.wall_s)
        med = float(np.median(wall[1:])) if len(wall) > 1 else float("nan")
        emit(
            section="sysid",
            what=f"Adam step, DiffMJX + CFD, {name}",
            batch=cfg.train.batch_size,
            jit_s=float(wall[0] - (med if np.isfinite(med) else 0.0)),
            run_s=med,
            repeats=len(wall) - 1,
            value=float(result.history.loss[-1]),
            note=f"side {1e3 * float(result.params.side_length):.3f} mm "
            f"after {len(wall)} steps from {1e3 * SYSID_INIT_M:g} mm",
        )


SECTIONS = {
    "calls": section_calls,
    "toss": section_toss,
    "toss_vmap": section_toss_vmap,
    "euler": section_euler,
    "sysid": section_sysid,
    "sysid_paper": lambda ctx, emit: section_sysid(ctx, emit, ("paper solver",)),
}


def worker(args) -> None:
    global _COMPILE_ONLY
    _COMPILE_ONLY = args.compile_only
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", args.cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    dev = jax.devices()[0]
    device = f"{dev.platform}: {getattr(dev, 'device_kind', dev.platform)}"
    out = Path(args.csv)
    if args.variant.endswith(MJX_STAGES):
        from diffmjx import _mjx
        from diffmjx.physics import smooth

        smooth.kinematics, smooth.com_pos = _mjx.kinematics, _mjx.com_pos

    def emit(**row):
        kind = "compile" if args.compile_only else "measure"
        _emit(
            out,
            {
                "device": device,
                "jax": jax.__version__,
                "variant": args.variant,
                "pass": kind,
                "xla_flags": os.environ.get("XLA_FLAGS", ""),
                **row,
            },
        )

    for name in args.sections.split(","):
        t = time.perf_counter()
        try:
            SECTIONS[name](args, emit)
        except Exception as e:  # a broken section must not cost the others their results
            print(f"SECTION {name} FAILED: {type(e).__name__}: {e}", flush=True)
            emit(section=name, what="failed", note=f"{type(e).__name__}: {str(e)[:200]}")
        print(
            f"section {name} ({args.variant}{', compile only' if args.compile_only else ''}): "
            f"{time.perf_counter() - t:.1f} s",
            flush=True,
        )


# ---------------------------------------------------------------- driver


def _run(cmd, env, timeout):
    try:
        return subprocess.run(cmd, env=env, timeout=max(1.0, timeout)).returncode
    except subprocess.TimeoutExpired:
        print(f"stopped at its time limit ({timeout:.0f} s): {' '.join(cmd[3:])}", flush=True)
        return -1


def _worker_cmd(args, variant, sections, cache, csv_path, compile_only):
    cmd = [
        sys.executable,
        "-m",
        "experiments.benchmark_device",
        "--worker",
        "--variant",
        variant,
        "--sections",
        sections,
        "--cache",
        cache,
        "--csv",
        str(csv_path),
        "--toss-batch",
        str(args.toss_batch),
        "--euler-batch",
        str(args.euler_batch),
        "--sysid-steps",
        str(args.sysid_steps),
    ]
    return cmd + (["--compile-only"] if compile_only else [])


def _env(variant, flags=None):
    # no preallocation: several processes share the GPU in the compile pass
    env = dict(os.environ, PYTHONUNBUFFERED="1", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    flags = " ".join(x for x in (env.get("XLA_FLAGS", ""), _FLAGS[variant] if flags is None else flags) if x)
    if flags:
        env["XLA_FLAGS"] = flags
    return env


def _accepted_flags(variant) -> str | None:
    """The first of the variant's flag sets with which a jitted program runs (XLA aborts on a bad flag)."""
    probe = "import jax; jax.block_until_ready(jax.jit(lambda x: x + 1)(1.0))"
    for flags in VARIANTS[variant]:
        if not flags or subprocess.run([sys.executable, "-c", probe], env=_env(variant, flags)).returncode == 0:
            return flags
        print(f"variant {variant}: XLA refused {flags!r}", flush=True)
    return None


def drive(args) -> Path:
    t_end = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"benchmark_device_{args.tag}.csv"
    with open(csv_path, "w", newline="") as f:  # the header first: workers only append lines
        csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    cache = tempfile.mkdtemp(prefix="diffmjx-bench-cache-")
    variants = []
    for v in args.variants.split(","):
        flags = _accepted_flags(v)
        if flags is not None:
            _FLAGS[v] = flags
            variants.append(v)
            print(f"variant {v}: XLA_FLAGS={flags!r}", flush=True)
    jobs = [(v, j) for j in args.jobs.split(";") for v in variants]
    try:
        if args.parallel > 1:  # compile every job at once into the shared cache
            procs = [subprocess.Popen(_worker_cmd(args, v, j, cache, csv_path, True), env=_env(v)) for v, j in jobs]
            deadline = time.monotonic() + args.compile_budget_s
            for p in procs:
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
            print(f"parallel compile pass: {args.budget_s - (t_end - time.monotonic()):.0f} s", flush=True)
        for v, j in jobs:
            left = t_end - time.monotonic()
            if left < 10:
                print(f"budget spent: skipped {v}: {j}", flush=True)
                continue
            _run(_worker_cmd(args, v, j, cache, csv_path, False), _env(v), left)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return csv_path


def summary(csv_path: Path) -> None:
    if not csv_path.exists():
        print("no rows")
        return
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    compiled = {(r["variant"], r["section"], r["what"], r["batch"]): r["jit_s"] for r in rows if r["pass"] == "compile"}
    rows = [
        dict(r, jit_s=compiled.get((r["variant"], r["section"], r["what"], r["batch"]), r["jit_s"]))
        for r in rows
        if r["pass"] == "measure"
    ]
    print(f"\n{'variant':<8} {'section':<9} {'what':<48} {'batch':>5} {'JIT s':>7} {'run s':>9} {'ms/call':>9} steps")

    def num(r, k, fmt):
        return format(float(r[k]), fmt) if r[k] not in ("", "nan") else ""

    for r in rows:
        steps = f"{r['accepted']}+{r['rejected']}" if r["accepted"] else ""
        print(
            f"{r['variant']:<8} {r['section']:<9} {r['what'][:48]:<48} {r['batch']:>5} {num(r, 'jit_s', '7.1f'):>7} "
            f"{num(r, 'run_s', '9.4f'):>9} {num(r, 'per_call_ms', '9.3f'):>9} {steps}"
        )


RUNS = {"h200": "8b63e11", "h200_rules": "87fa88c"}  # CSV tag -> the commit its run measured (docs/speed.md)


def _label(row: dict, tag: str = "") -> str:
    device = row["device"].split(": ")[-1].replace("NVIDIA ", "")
    if device == "cpu":
        return "CPU (this project's 2 cores)"
    if tag in RUNS:
        device = f"{device} at {RUNS[tag]}"
    flags = "XLA defaults" if row["variant"].startswith("default") else "enable_gpu() flags"
    stages = ", MJX's own kinematics stages" if row["variant"].endswith(MJX_STAGES) else ""
    return f"{device}, {flags}{stages}"


def plot(results: Path) -> None:
    """docs/results/benchmark_device.png from every benchmark_device_<tag>.csv in ``results``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    series: dict[str, dict] = {}
    for path in sorted(results.glob("benchmark_device_*.csv")):
        tag = path.stem.removeprefix("benchmark_device_")
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["pass"] != "measure" or r["what"] == "failed" or r["run_s"] in ("", "nan"):
                    continue
                series.setdefault(_label(r, tag), {})[(r["section"], r["what"], r["batch"])] = r
    # (section, what, batch or None for any, tick label, value in the panel's unit)
    ms = lambda r: float(r["per_call_ms"])
    sec = lambda r: float(r["run_s"])
    panels = (
        (
            "wall time of one call (ms)\n(a vmapped call runs its whole batch)",
            [
                ("calls", "mjx.forward", "1", "mjx.forward", ms),
                ("calls", "diffmjx.forward", "1", "diffmjx.forward", ms),
                ("calls", "diffmjx.forward gradient", "1", "its gradient", ms),
                ("calls", "diffmjx.forward vmapped", "64", "diffmjx.forward\nvmap 64", ms),
                ("calls", "diffmjx.forward vmapped", "1024", "diffmjx.forward\nvmap 1024", ms),
            ],
        ),
        (
            "run time (s)",
            [
                ("toss", "forward", "1", "toss\nforward", sec),
                ("toss", "value and gradient", "1", "toss\ngradient", sec),
                (
                    "toss_vmap",
                    "value and gradient vmapped",
                    None,
                    "toss gradient,\nper toss in a\nvmapped batch*",
                    lambda r: ms(r) / 1e3,
                ),
                ("sysid", "Adam step, DiffMJX + CFD, converged solve", "64", "sysid step\n(converged\nsolve)", sec),
                ("sysid", "Adam step, DiffMJX + CFD, library setting", "64", "sysid step\n(library\nsetting)", sec),
                ("sysid", "Adam step, DiffMJX + CFD, paper solver", "64", "sysid step\n(paper's\nsolver)", sec),
            ],
        ),
    )
    fig, axes = plt.subplots(1, 2, figsize=(14, 6.2))
    width = 0.8 / max(1, len(series))
    for ax, (ylabel, items) in zip(axes, panels):
        shown = []
        for i, (label, rows) in enumerate(series.items()):
            xs, ys = [], []
            for k, (section, what, batch, _, value) in enumerate(items):
                hits = [r for (s_, w_, b_), r in rows.items() if s_ == section and w_ == what and batch in (None, b_)]
                if hits:
                    xs.append(k + (i - (len(series) - 1) / 2) * width)
                    ys.append(value(hits[0]))
            ax.bar(xs, ys, width, label=label, color=f"C{i}")
            shown += ys
        ax.set_xticks(range(len(items)), [it[3] for it in items], fontsize=8)
        ax.set_yscale("log")
        if shown:
            ax.set_ylim(min(shown) / 1.6, max(shown) * 1.6)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower left", ncol=3, fontsize=8, frameon=False)
    axes[1].text(
        0.01,
        -0.28,
        "* batch of 64; at 8b63e11 the H200's sysid step predates the CFD and batching "
        "changes of 50e54a2 and ecc68fb (docs/speed.md)",
        transform=axes[1].transAxes,
        fontsize=8,
    )
    fig.suptitle(
        "Device benchmark, float64 (cube toss at Config(); sysid: 64 segments of N = 4 from 140 mm, DiffMJX + CFD)"
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(results / "benchmark_device.png", dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=420.0, help="wall-time budget of the whole run (default 420)")
    p.add_argument("--compile-budget-s", type=float, default=180.0, help="of it, for the parallel compile pass")
    p.add_argument(
        "--tag", default=None, help="CSV name: benchmark_device_<tag>.csv (default: cpu, or the GPU's kind, e.g. h200)"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--variants", default=None, help="comma-separated (default: default,graphs on a GPU, else default)")
    p.add_argument("--jobs", default=";".join(JOBS), help="';'-separated jobs of comma-separated sections, in order")
    p.add_argument("--parallel", type=int, default=None, help="compile in parallel first (default: if >= 8 cores)")
    p.add_argument("--toss-batch", type=int, default=64)
    p.add_argument("--euler-batch", type=int, default=16)
    p.add_argument("--sysid-steps", type=int, default=4, help="Adam steps per sysid setting (the first compiles)")
    p.add_argument("--plot", action="store_true", help="only redraw benchmark_device.png from the CSVs in --out")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="default", help=argparse.SUPPRESS)
    p.add_argument("--sections", default="", help=argparse.SUPPRESS)
    p.add_argument("--cache", default="", help=argparse.SUPPRESS)
    p.add_argument("--csv", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return
    if args.plot:
        plot(args.out)
        return
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the driver only asks for the platform
    import jax

    dev = jax.devices()[0]
    platform = dev.platform
    kind = str(getattr(dev, "device_kind", platform)).lower().replace("nvidia ", "").replace(" ", "-")
    args.tag = args.tag or (platform if platform == "cpu" else kind)  # e.g. benchmark_device_h200.csv
    args.variants = args.variants or ("default,graphs" if platform == "gpu" else "default")
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"--variants: unknown {sorted(unknown)}; allowed: {', '.join(VARIANTS)}")
    args.parallel = args.parallel if args.parallel is not None else (6 if (os.cpu_count() or 1) >= 8 else 1)
    summary(drive(args))


if __name__ == "__main__":
    main()
