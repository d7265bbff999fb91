"""Box-box smoothing (smooth-collision issue): a box dropped onto a box, and what the blend costs.

    python -m experiments.box_box [--quick] [--set KEY=VALUE ...]

1. Drop (scenes/box_drop.xml, 0.6 s): the final pose with MJX's box-box, the smoothed one and the
   clipped one (``collision.box_box=clipped``, the default without smoothing), against MuJoCo's C
   engine (its own box-box, RK4 at 1e-4 s) -> box_box_drop.csv.
2. Gradient of loss = final x + final qpos[6] (a quaternion entry) w.r.t. the initial y velocity,
   over a sweep of vy0: DiffMJX's AD (the preset; checkpoint, and backsolve) with the smoothed,
   MJX's and the clipped box-box, against central differences (step FD_STEP) of a REF_TOL solve
   with the same collision function -> box_box_gradient.{csv,png}.
3. Cost: MJX's box-box vs the smoothed one on N_POSES random contact poses of scenes/box_pair.xml
   (vmapped): first call (trace + compile) and median run -> box_box_timing.csv.
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

import diffmjx
from experiments import common

DEFAULT_PRESET = Path(__file__).parent / "configs" / "box_box.yaml"
DROP_PERIODS = 60
REF_TOL = 1e-10
FD_STEP = 1e-4
N_POSES = 400


def random_contact_poses(mx, n: int = N_POSES, seed: int = 0):
    """``n`` qpos of a two-free-box model: random orientations, the second box moved along a random
    direction until MJX's deepest contact is 0.2-5 mm deep (bisection), so the poses are contacts a
    simulation sees rather than deep interpenetration."""
    rng = np.random.default_rng(seed)
    q1, q2 = rng.normal(size=(n, 4)), rng.normal(size=(n, 4))
    q1 /= np.linalg.norm(q1, axis=1, keepdims=True)
    q2 /= np.linalg.norm(q2, axis=1, keepdims=True)
    u = rng.normal(size=(n, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    target = rng.uniform(2e-4, 5e-3, size=n)
    mjx_contacts = jax.jit(jax.vmap(common.contacts_fn(mx, False, 0.0)))

    def qpos(shift):
        return jnp.asarray(np.c_[np.zeros((n, 3)), q1, u * shift[:, None], q2])

    lo, hi = np.zeros(n), np.full(n, 0.2)  # deep at 0, apart at 0.2
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        deeper = -np.asarray(mjx_contacts(qpos(mid))[0]).min(1) > target
        lo, hi = np.where(deeper, mid, lo), np.where(deeper, hi, mid)
    return qpos(lo)


def _drop_fn(mx, cfg: diffmjx.Config):
    """Final qpos of the box drop as a function of the initial y velocity."""
    d0 = common.mjx.make_data(mx)
    ctrls = jnp.zeros((DROP_PERIODS, 0))

    def final_qpos(vy0):
        return diffmjx.rollout(mx, d0.replace(qvel=d0.qvel.at[1].set(vy0)), ctrls, cfg)[0].qpos

    return final_qpos


def _drop_loss(mx, cfg: diffmjx.Config):
    """Loss of the gradient sweep: final x plus final qpos[6], as a function of vy0."""
    final_qpos = _drop_fn(mx, cfg)

    def loss(vy0):
        q = final_qpos(vy0)
        return q[0] + q[6]

    return loss


RULES = {  # the study's box-box collision functions: name -> overrides
    "MJX box-box": ("collision.smooth=false", "collision.box_box=mjx"),
    "smoothed box-box": ("collision.smooth=true",),
    "clipped box-box": ("collision.smooth=false", "collision.box_box=clipped"),
}


def drop_vs_c_engine(cfg: diffmjx.Config) -> list[dict]:
    mj, mx = common.load("box_drop")
    data = common.c_engine_rk4(mj, DROP_PERIODS * 0.01, 1e-4)
    rows = []
    for name, rule in RULES.items():
        q = np.asarray(jax.jit(_drop_fn(mx, cfg.override(*rule)))(0.0))
        rows.append(dict(collision=name, x=q[0], y=q[1], z=q[2], qw=q[3], qx=q[4], qy=q[5], qz=q[6],
                         position_off_c_engine_m=float(np.linalg.norm(q[:3] - data.qpos[:3])),
                         quaternion_off_c_engine=float(np.linalg.norm(q[3:] - data.qpos[3:]))))  # fmt: skip
    q = data.qpos
    rows.append(dict(collision="C engine (RK4 1e-4)", x=q[0], y=q[1], z=q[2], qw=q[3], qx=q[4], qy=q[5], qz=q[6],
                     position_off_c_engine_m=0.0, quaternion_off_c_engine=0.0))  # fmt: skip
    return rows


def gradient_sweep(cfg: diffmjx.Config, quick: bool) -> list[dict]:
    _, mx = common.load("box_drop")
    vy0s = np.linspace(0.1, 0.5, 3 if quick else 9)
    tight = (f"integrator.rtol={REF_TOL}", f"integrator.atol={REF_TOL}")
    methods = {  # name -> (collision rule, adjoint)
        "MJX box-box, checkpoint": ("MJX box-box", "checkpoint"),
        "smoothed, checkpoint": ("smoothed box-box", "checkpoint"),
        "smoothed, backsolve": ("smoothed box-box", "backsolve"),
        "clipped, checkpoint": ("clipped box-box", "checkpoint"),
        "clipped, backsolve": ("clipped box-box", "backsolve"),
    }
    refs = {}  # keyed by collision rule
    for rule in RULES:
        loss = jax.jit(_drop_loss(mx, cfg.override(*RULES[rule], *tight)))
        refs[rule] = np.array([(float(loss(v + FD_STEP)) - float(loss(v - FD_STEP))) / (2 * FD_STEP)
                               for v in tqdm(vy0s, desc=f"reference, {rule}")])  # fmt: skip
    rows = []
    for name, (rule, adjoint) in methods.items():
        c = cfg.override(*RULES[rule], f"integrator.adjoint={adjoint}")
        vg = jax.jit(jax.value_and_grad(_drop_loss(mx, c)))
        for v, r in zip(tqdm(vy0s, desc=name), refs[rule], strict=True):
            loss, grad = (float(x) for x in vg(v))
            rows.append(dict(method=name, vy0=v, loss=loss, grad=grad, ref_grad=r, rel_error=abs(grad - r) / abs(r)))
    return rows


def timing(n: int = N_POSES) -> list[dict]:
    """First call (cold: the persistent compilation cache is off meanwhile) and median run time."""
    cache = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        return _timing(n)
    finally:
        jax.config.update("jax_enable_compilation_cache", cache)


def _timing(n: int) -> list[dict]:
    _, mx = common.load("box_pair")
    qpos = random_contact_poses(mx, n)
    sharpness = diffmjx.Config().collision.sharpness
    rows = []
    for name, smooth in (("MJX box-box", False), ("smoothed box-box", True)):
        f = jax.jit(jax.vmap(common.contacts_fn(mx, smooth, sharpness)))
        t = time.perf_counter()
        jax.block_until_ready(f(qpos))
        first = time.perf_counter() - t
        run = common.median_time(f, qpos, repeats=7)
        rows.append(dict(collision=name, poses=n, first_call_s=first, run_ms=1e3 * run, per_pair_us=1e6 * run / n))
    return rows


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_g, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, name in enumerate(dict.fromkeys(r["method"] for r in rows)):
        sel = [r for r in rows if r["method"] == name]
        v = [r["vy0"] for r in sel]
        ax_g.plot(v, [r["grad"] for r in sel], "o-", color=f"C{i}", label=f"AD: {name}")
        ax_g.plot(v, [r["ref_grad"] for r in sel], "x--", color=f"C{i}", alpha=0.6)
        ax_e.semilogy(v, [r["rel_error"] for r in sel], "o-", color=f"C{i}", label=name)
    ax_g.set(xlabel="initial y velocity (m/s)", ylabel="d loss / d vy0", title="AD (o) vs central differences (x)")
    ax_e.axhline(0.01, color="k", lw=0.8, ls="--", label="1 %")
    ax_e.set(xlabel="initial y velocity (m/s)", ylabel="relative gradient error", title="box dropped onto a box")
    ax_g.legend(fontsize=7)
    ax_e.legend(fontsize=7)
    common.save_figure(fig, path)


def run(cfg: diffmjx.Config, out: Path, quick: bool = False) -> dict:
    drop = drop_vs_c_engine(cfg)
    common.write_csv(out / "box_box_drop.csv", drop)
    cost = timing()
    common.write_csv(out / "box_box_timing.csv", cost)
    grads = gradient_sweep(cfg, quick)
    common.write_csv(out / "box_box_gradient.csv", grads)
    _plot(grads, out / "box_box_gradient.png")
    for r in drop:
        print(f"{r['collision']:<22} position off C engine {1e3 * r['position_off_c_engine_m']:.2f} mm, "
              f"quaternion {r['quaternion_off_c_engine']:.1e}")  # fmt: skip
    for r in cost:
        print(f"{r['collision']:<22} first call {r['first_call_s']:.1f} s, run {r['run_ms']:.1f} ms per {r['poses']} poses")
    for name in dict.fromkeys(r["method"] for r in grads):
        e = [r["rel_error"] for r in grads if r["method"] == name]
        print(f"{name:<26} median rel. gradient error {np.median(e):.1%}, max {np.max(e):.1%}")
    return dict(drop=drop, timing=cost, gradient=grads)


def main(argv=None):
    cfg, args = common.cli(__doc__, DEFAULT_PRESET, argv)
    run(cfg, args.out, args.quick)


if __name__ == "__main__":
    main()
