"""Toy study: gradients through contact for a 1-D point mass (DiffMJX paper, Fig. 4 / Fig. 16).

A point mass (mass 1) starts at height ``q0`` with velocity ``v0 = -1``; there is no gravity.
It is integrated for ``N`` steps of semi-implicit Euler (``v <- v + h a(q, v); q <- q + h v``)
with a floor at ``q = 0`` and the loss ``L = |q_N - q_T|`` with ``q_T = 1``.  Two step sizes
are compared, ``h = 0.1`` (20 steps) and ``h = 1e-4`` (20 000 steps), both ending at ``T = 2 s``.

Contact models (all pure JAX, no MuJoCo):

``penalty``
    A minimal spring-damper ("MuJoCo-like soft contact") model: ``a = -k q - b v`` while
    ``q < 0`` and ``a = 0`` otherwise, selected with ``jnp.where`` (piecewise smooth).
    ``b = 2 zeta sqrt(k)``.  Default ``k = 1e3``, ``zeta = 0.1`` (see ``STIFFNESS``).
``elastic``
    Ideal elastic collision *without* time-of-impact correction, as in DiffTaichi's naive
    integrator: after the position update, if ``q < 0`` (and ``v < 0``) the velocity is
    flipped, ``v <- -v``; the penetrated position is kept.
``elastic_mirror``
    Like ``elastic`` but the position is mirrored as well (``q <- -q``, ``v <- -v``).  For a
    constant-speed ball this *is* the exact time-of-impact reflection, so its gradient is
    included as a contrast.

Reference ("true") gradients are the exact derivatives of the continuous-time solution of
the same model: for the elastic models ``q(T) = T - q0`` after a bounce (``q0 < T``) and
``q(T) = q0 - T`` otherwise; for the penalty model the closed-form solution of the linear
damped contact oscillator (free fall until ``t = q0``, half a damped period in contact of
length ``t_c = pi / omega_d``, exit with speed ``e = exp(-zeta pi / sqrt(1 - zeta^2))``, so
``q(T) = e (T - q0 - t_c)`` once the contact has ended).  These closed forms are
differentiated with ``jax.grad``.

Run:  ``python -m experiments.toy_point_mass [--quick] [--out docs/results]``
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import argparse  # noqa: E402
import csv  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

T_FINAL = 2.0
V0 = -1.0
Q_TARGET = 1.0
# Penalty parameters.  k = 1e4 (first choice) does NOT converge at h = 1e-4: the AD gradient
# of the discrete map carries an O(k h) error (the exit speed depends on the sub-step
# penetration depth with slope ~ k h), measured median |err| 0.17 at k = 1e4.  k = 1e3
# gives k h = 0.1 at h = 1e-4.  See the stiffness sweep in ``run``.
STIFFNESS = 1e3
ZETA = 0.1
FD_EPS = 1e-6
SETTINGS = ((0.1, 20), (1e-4, 20_000))  # (h, n_steps); T = h * n_steps = 2 s
MODELS = ("penalty", "elastic", "elastic_mirror")
KINK_MARGIN = 0.05
STIFFNESS_SWEEP = (1e2, 1e3, 1e4)
N_Q0_FULL = 400
N_Q0_QUICK = 60
Q0_RANGE = (0.0, 3.0)


def penalty_constants(k: float = STIFFNESS, zeta: float = ZETA) -> dict:
    """Damping, damped frequency, contact duration and restitution of the penalty contact."""
    omega = float(np.sqrt(k))
    omega_d = omega * float(np.sqrt(1.0 - zeta**2))
    t_contact = float(np.pi / omega_d)
    return {
        "b": 2.0 * zeta * omega,
        "omega": omega,
        "omega_d": omega_d,
        "t_contact": t_contact,
        "restitution": float(np.exp(-zeta * omega * t_contact)),
    }


# ---------------------------------------------------------------------------------------
# Discrete simulation
# ---------------------------------------------------------------------------------------


def simulate(q0, h, n_steps: int, model: str, k=STIFFNESS, zeta=ZETA):
    """Final height q_N after ``n_steps`` semi-implicit Euler steps of size ``h``."""
    q0 = jnp.asarray(q0, dtype=jnp.float64)
    b = 2.0 * zeta * jnp.sqrt(k)

    def step(carry, _):
        q, v = carry
        if model == "penalty":
            a = jnp.where(q < 0.0, -k * q - b * v, 0.0)
            v = v + h * a
            q = q + h * v
        elif model == "elastic":
            q = q + h * v
            v = jnp.where((q < 0.0) & (v < 0.0), -v, v)
        elif model == "elastic_mirror":
            q = q + h * v
            hit = q < 0.0
            q = jnp.where(hit, -q, q)
            v = jnp.where(hit, -v, v)
        else:
            raise ValueError(f"unknown model {model!r}")
        return (q, v), None

    (q, _), _ = jax.lax.scan(step, (q0, jnp.asarray(V0, dtype=jnp.float64)), None, length=n_steps)
    return q


def loss(q0, h, n_steps: int, model: str, k=STIFFNESS, zeta=ZETA):
    return jnp.abs(simulate(q0, h, n_steps, model, k, zeta) - Q_TARGET)


# ---------------------------------------------------------------------------------------
# Continuous-time reference
# ---------------------------------------------------------------------------------------


def true_final_height(q0, model: str, k=STIFFNESS, zeta=ZETA):
    """q(T) of the continuous-time dynamics of ``model`` (v0 = -1, impact at t = q0)."""
    q0 = jnp.asarray(q0, dtype=jnp.float64)
    tau = T_FINAL - q0  # time since impact
    free = q0 - T_FINAL  # never reached the floor
    if model in ("elastic", "elastic_mirror"):
        return jnp.where(tau > 0.0, tau, free)
    if model != "penalty":
        raise ValueError(f"unknown model {model!r}")
    c = penalty_constants(k, zeta)
    zw, wd = zeta * c["omega"], c["omega_d"]
    tau_in = jnp.clip(tau, 0.0, c["t_contact"])  # keep both branches finite
    in_contact = -(1.0 / wd) * jnp.exp(-zw * tau_in) * jnp.sin(wd * tau_in)
    after = c["restitution"] * (tau - c["t_contact"])
    return jnp.where(tau <= 0.0, free, jnp.where(tau < c["t_contact"], in_contact, after))


def true_loss(q0, model: str, k=STIFFNESS, zeta=ZETA):
    return jnp.abs(true_final_height(q0, model, k, zeta) - Q_TARGET)


def kink_mask(q0s, model: str, k=STIFFNESS, zeta=ZETA, margin=KINK_MARGIN) -> np.ndarray:
    """True where q0 is at least ``margin`` away from kinks of the continuous loss and the
    contact has ended before T (penalty).  Kinks: q(T) = q_T, the no-bounce boundary q0 = T
    (for the penalty model the whole band where contact is still ongoing at T)."""
    q0s = np.asarray(q0s)
    if model == "penalty":
        c = penalty_constants(k, zeta)
        kinks = [T_FINAL - c["t_contact"] - Q_TARGET / c["restitution"], T_FINAL + Q_TARGET]
        ok = ~((q0s > T_FINAL - c["t_contact"] - margin) & (q0s < T_FINAL + margin))
    else:
        kinks = [T_FINAL - Q_TARGET, T_FINAL, T_FINAL + Q_TARGET]
        ok = np.ones_like(q0s, dtype=bool)
    for kq in kinks:
        ok &= np.abs(q0s - kq) >= margin
    return ok


def bounce_mask(q0s, model: str, k=STIFFNESS, zeta=ZETA, margin=KINK_MARGIN) -> np.ndarray:
    """q0 for which the ball has hit the floor and left it again before T."""
    q0s = np.asarray(q0s)
    t_c = penalty_constants(k, zeta)["t_contact"] if model == "penalty" else 0.0
    return q0s < T_FINAL - t_c - margin


# ---------------------------------------------------------------------------------------
# Sweeps
# ---------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("k", "zeta", "n_steps", "model", "with_fd"))
def _sweep_jit(q0s, h, k, zeta, n_steps: int, model: str, with_fd: bool):
    def one(q0):
        f = lambda x: loss(x, h, n_steps, model, k, zeta)  # noqa: E731
        val, g = jax.value_and_grad(f)(q0)
        dq = jax.grad(lambda x: simulate(x, h, n_steps, model, k, zeta))(q0)
        fd = (f(q0 + FD_EPS) - f(q0 - FD_EPS)) / (2 * FD_EPS) if with_fd else jnp.nan
        ft = lambda x: true_loss(x, model, k, zeta)  # noqa: E731
        return {
            "loss": val,
            "grad_ad": g,
            "grad_fd": fd,
            "loss_true": ft(q0),
            "grad_true": jax.grad(ft)(q0),
            "dqN_ad": dq,
            "dqN_true": jax.grad(lambda x: true_final_height(x, model, k, zeta))(q0),
        }

    return jax.vmap(one)(q0s)


def sweep(
    q0s, model: str, h: float, n_steps: int, k: float = STIFFNESS, zeta: float = ZETA, with_fd: bool = True
) -> dict:
    """Loss, AD gradient, central-difference gradient and true gradient over ``q0s``."""
    out = _sweep_jit(jnp.asarray(q0s, dtype=jnp.float64), h, float(k), float(zeta), n_steps, model, with_fd)
    return {name: np.asarray(v) for name, v in out.items()}


def summarize(q0s, res: dict, model: str, k: float = STIFFNESS, zeta: float = ZETA) -> dict:
    """Gradient-error statistics over q0 away from kinks (see ``kink_mask``)."""
    m = kink_mask(q0s, model, k, zeta)
    err = np.abs(res["grad_ad"] - res["grad_true"])[m]
    gt, ga = res["grad_true"][m], res["grad_ad"][m]
    nz = gt != 0
    bm = bounce_mask(q0s, model, k, zeta) & m
    out = {
        "n_points": int(m.sum()),
        "median_abs_err": float(np.median(err)),
        "mean_abs_err": float(np.mean(err)),
        "p90_abs_err": float(np.percentile(err, 90)),
        "frac_wrong_sign": float(np.mean(np.sign(ga[nz]) != np.sign(gt[nz]))),
        "frac_wrong_sign_bounce": float(np.mean(np.sign(res["grad_ad"][bm]) != np.sign(res["grad_true"][bm])))
        if bm.any()
        else np.nan,
        "grad_ad_min": float(np.min(res["grad_ad"])),
        "grad_ad_max": float(np.max(res["grad_ad"])),
        "median_dqN_ad_bounce": float(np.median(res["dqN_ad"][bm])) if bm.any() else np.nan,
        "median_dqN_true_bounce": float(np.median(res["dqN_true"][bm])) if bm.any() else np.nan,
    }
    if np.all(np.isfinite(res["grad_fd"])):
        out["median_abs_fd_minus_ad"] = float(np.median(np.abs(res["grad_fd"] - res["grad_ad"])))
    return out


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------

COLORS = {"penalty": "tab:blue", "elastic": "tab:red", "elastic_mirror": "tab:green"}
# Penalty AD gradients at h = 0.1 reach O(100): symmetric-log axes, linear for |y| < 2.
SYMLOG_LINTHRESH = 2.0


def make_plot(q0s, results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for col, (h, n) in enumerate(SETTINGS):
        ax_l, ax_g = axes[0, col], axes[1, col]
        for model in MODELS:
            r = results[(model, h)]
            lw = 1.0 if model == "elastic_mirror" else 1.4
            ax_l.plot(q0s, r["loss"], color=COLORS[model], lw=lw, label=f"{model} (sim)")
            ax_g.plot(q0s, r["grad_ad"], color=COLORS[model], lw=lw, label=f"{model} (AD)")
        for model, label in (("penalty", "penalty"), ("elastic", "elastic")):
            r = results[(model, h)]
            ax_l.plot(q0s, r["loss_true"], color=COLORS[model], ls="--", lw=1.0, label=f"{label} (true, continuous)")
            ax_g.plot(q0s, r["grad_true"], color=COLORS[model], ls="--", lw=1.0, label=f"{label} (true)")
        ax_l.set_title(f"h = {h:g}, N = {n}")
        for ax, key, lim in ((ax_l, "loss", (0.0, 1.3)), (ax_g, "grad_ad", (-1.4, 1.4))):
            big = max(np.abs(results[(m, h)][key]).max() for m in MODELS) > 3.0
            if big:
                ax.set_yscale("symlog", linthresh=SYMLOG_LINTHRESH)
                ax.set_ylim(bottom=lim[0] if key == "loss" else None)
            else:
                ax.set_ylim(*lim)
            ax.set_ylabel(
                ("loss |q_N - 1|" if key == "loss" else "dL/dq0") + (" (symlog, linear for |y| < 2)" if big else "")
            )
        ax_g.set_xlabel("q0")
        for ax in (ax_l, ax_g):
            ax.grid(alpha=0.3)
    axes[0, 1].legend(fontsize=7, loc="upper right")
    axes[1, 1].legend(fontsize=7, loc="upper right")
    fig.suptitle("1-D point mass, v0 = -1, T = 2 s: loss and gradient through contact")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(q0s, results: dict, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "h", "n_steps", "q0", "loss", "grad_ad", "grad_fd", "grad_true"])
        for model in MODELS:
            for h, n in SETTINGS:
                r = results[(model, h)]
                for i, q0 in enumerate(q0s):
                    w.writerow(
                        [
                            model,
                            f"{h:g}",
                            n,
                            f"{q0:.10g}",
                            f"{r['loss'][i]:.10g}",
                            f"{r['grad_ad'][i]:.10g}",
                            f"{r['grad_fd'][i]:.10g}",
                            f"{r['grad_true'][i]:.10g}",
                        ]
                    )


def run(quick: bool, out_dir: Path) -> dict:
    """Run the study, write CSV + PNG to ``out_dir`` and return the summary numbers.

    Returns ``{"params": ..., "summary": {model: {h: stats}}, "stiffness_sweep":
    {k: {h: median_abs_err}}, "files": [...]}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    q0s = np.linspace(*Q0_RANGE, N_Q0_QUICK if quick else N_Q0_FULL)
    t0 = time.perf_counter()

    results, summary = {}, {}
    for model in MODELS:
        summary[model] = {}
        for h, n in SETTINGS:
            res = sweep(q0s, model, h, n)
            results[(model, h)] = res
            summary[model][h] = summarize(q0s, res, model)

    stiff = {}
    for k in STIFFNESS_SWEEP:
        stiff[k] = {}
        for h, n in SETTINGS:
            res = results[("penalty", h)] if k == STIFFNESS else sweep(q0s, "penalty", h, n, k=k, with_fd=False)
            stiff[k][h] = summarize(q0s, res, "penalty", k=k)["median_abs_err"]

    csv_path, png_path = out_dir / "toy_point_mass.csv", out_dir / "toy_point_mass.png"
    write_csv(q0s, results, csv_path)
    make_plot(q0s, results, png_path)

    pc = penalty_constants()
    return {
        "params": {
            "k": STIFFNESS,
            "zeta": ZETA,
            "b": pc["b"],
            "t_contact": pc["t_contact"],
            "restitution": pc["restitution"],
            "n_q0": len(q0s),
            "kink_margin": KINK_MARGIN,
            "fd_eps": FD_EPS,
        },
        "summary": summary,
        "stiffness_sweep": stiff,
        "files": [str(csv_path), str(png_path)],
        "seconds": time.perf_counter() - t0,
    }


def format_summary(out: dict) -> str:
    p = out["params"]
    lines = [
        f"penalty: k={p['k']:g}, zeta={p['zeta']:g}, b={p['b']:.4g}, "
        f"t_contact={p['t_contact']:.4f} s, restitution={p['restitution']:.4f}; "
        f"{p['n_q0']} q0 in [0, 3], kink margin {p['kink_margin']}",
        f"{'model':<15}{'h':>8}{'n':>5}{'med|ad-true|':>14}{'mean':>10}{'p90':>10}"
        f"{'wrong sign':>12}{'(bounce)':>10}{'dqN/dq0 AD':>12}{'true':>8}{'med|fd-ad|':>12}",
    ]
    for model, per_h in out["summary"].items():
        for h, s in per_h.items():
            lines.append(
                f"{model:<15}{h:>8g}{s['n_points']:>5d}{s['median_abs_err']:>14.4g}"
                f"{s['mean_abs_err']:>10.4g}{s['p90_abs_err']:>10.4g}"
                f"{s['frac_wrong_sign']:>12.3f}{s['frac_wrong_sign_bounce']:>10.3f}{s['median_dqN_ad_bounce']:>12.4g}"
                f"{s['median_dqN_true_bounce']:>8.4g}"
                f"{s.get('median_abs_fd_minus_ad', float('nan')):>12.3g}"
            )
    lines.append("penalty stiffness sweep, median |grad_ad - grad_true|:")
    for k, per_h in out["stiffness_sweep"].items():
        lines.append(f"  k={k:<8g}" + "".join(f"  h={h:g}: {v:.4g}" for h, v in per_h.items()))
    lines.append(f"wrote {', '.join(out['files'])} in {out['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"{N_Q0_QUICK} q0 instead of {N_Q0_FULL}")
    ap.add_argument("--out", type=Path, default=Path("docs/results"))
    args = ap.parse_args(argv)
    out = run(args.quick, args.out)
    print(format_summary(out))
    return out


if __name__ == "__main__":
    main()
