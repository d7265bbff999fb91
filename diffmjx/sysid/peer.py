r"""The finite-difference peer: any fit of :func:`diffmjx.sysid.identify`, done by MuJoCo's own ``mujoco.sysid``.

:func:`identify_mujoco_sysid` fits the same :class:`~diffmjx.sysid.Parameter` s to the same
recordings, cut into the same segments and scored by the same residual
(:class:`~diffmjx.sysid.Problem`'s), but with none of DiffMJX's simulation: the C engine rolls
the segments out (``mujoco.rollout`` through ``mujoco.sysid.model_residual``), Jacobians are finite
differences (one batched rollout of every segment per perturbed parameter), and the optimiser is
the Levenberg–Marquardt-type box-bounded least squares of ``mujoco.minimize.least_squares``. It is
the baseline the gradient-based fits are compared against. It needs MuJoCo's optional extras:
``pip install "mujoco[sysid]==3.17.0"``.

:func:`drive` is the one driver of ``mujoco.sysid.optimize`` (counting the points it evaluates and
swallowing the backend's printing); a study with its own model builder (the ContactNets cube's,
``experiments/contactnets/peer.py``) runs it too.

Sharp bits:

- A loss that is exactly flat (an object in free flight, where no contact parameter acts) has a
  zero finite-difference Jacobian and the optimiser stops at once ("zero gradient"): choose
  recordings in which every parameter acts.
- Contact onset and lift-off are kinks of the loss: a finite difference that straddles one is
  not a derivative.
- ``mujoco.sysid.optimize`` makes MuJoCo's backend print every iteration (its ``verbose`` is not
  forwarded); :func:`drive` swallows standard output unless ``verbose``.
"""

import contextlib
import io
import time
from typing import NamedTuple

import mujoco
import numpy as np

__all__ = ["Driven", "PeerFit", "drive", "identify_mujoco_sysid", "mujoco_sysid"]

_INSTALL = 'mujoco.sysid needs MuJoCo\'s optional extras: pip install "mujoco[sysid]==3.17.0"'


def mujoco_sysid():
    """``mujoco.sysid``, or ImportError with the install hint when its extras are missing."""
    try:
        from mujoco import sysid
    except ImportError as e:  # pragma: no cover - mujoco itself is a dependency
        raise ImportError(_INSTALL) from e
    if not hasattr(sysid, "optimize"):  # its __init__ swallows a missing extra and exports nothing
        raise ImportError(_INSTALL)
    return sysid


class Driven(NamedTuple):
    """What :func:`drive` returns."""

    fitted: object  # the fitted mujoco.sysid.ParameterDict
    loss_start: float
    loss: float
    wall_s: float
    evaluations: int
    iterations: int | None


def drive(sysid, pdict, build, trajs, modify_residual, *, n_threads: int, verbose: bool, **optimize) -> Driven:
    """``mujoco.sysid.optimize`` on one residual vector over ``trajs`` (one per segment), counting
    the parameter points it evaluates and swallowing the backend's printing unless ``verbose``."""
    counter = {"points": 0}
    batch = len(trajs)

    def residual_fn(x, p):
        x = np.asarray(x, np.float64)
        counter["points"] += 1 if x.ndim == 1 else x.shape[1]
        r, pred, meas = sysid.model_residual(
            x, p, build, trajs, modify_residual=modify_residual, resample_true=False, n_threads=int(n_threads)
        )
        if x.ndim == 2:  # (per-segment residual, point * segment) with columns (point, segment)
            r = r.reshape(r.shape[0], x.shape[1], batch).transpose(2, 0, 1).reshape(-1, x.shape[1])
        return [r], pred, meas

    def loss(p) -> float:
        r = residual_fn(p.as_vector(), p.copy())[0][0]
        return float(r @ r)

    loss_start = loss(pdict)
    counter["points"] = 0
    out = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    start = time.perf_counter()
    with out:
        fitted, info = sysid.optimize(pdict, residual_fn, optimizer="mujoco", verbose=False, **optimize)
    wall_s = time.perf_counter() - start
    evaluations = counter["points"]
    objective = getattr(info, "extras", {}).get("objective")
    n_iter = len(objective) - 1 if objective else None  # the trace ends with one entry at the end point
    return Driven(fitted, loss_start, loss(fitted), wall_s, evaluations, n_iter)


class PeerFit(NamedTuple):
    """Outcome of :func:`identify_mujoco_sysid`.

    Attributes:
        values: ``{Parameter.key: value}`` (as :attr:`diffmjx.sysid.IdentifyResult.values`).
        model: the ``mujoco.MjModel`` with the fitted values written (constants recomputed).
        loss_start: the segment loss at the start (the C engine's; sum of squared residuals).
        loss: the segment loss at the fitted values.
        wall_s: wall-clock seconds of the optimisation (the two loss evaluations excluded).
        evaluations: residual evaluations, counted in parameter points (a finite-difference
            Jacobian over ``k`` components counts ``k``).
        iterations: optimiser iterations, or None where the backend does not report them.
    """

    values: dict
    model: mujoco.MjModel
    loss_start: float
    loss: float
    wall_s: float
    evaluations: int
    iterations: int | None


def _peer_box(lo: float, hi: float, start: float) -> tuple[float, float]:
    """A finite box for the optimiser: the bounds where finite, else a decade around the start."""
    span = 10 * max(abs(start), 1e-3)
    a = lo if np.isfinite(lo) else start - span
    b = hi if np.isfinite(hi) else start + span
    if np.isfinite(lo) and not np.isfinite(hi) and lo >= 0:
        b = max(start * 10, start + 1e-3)
    if not np.isfinite(lo) and np.isfinite(hi) and hi <= 0:
        a = min(start * 10, start - 1e-3)
    pad = 1e-9 * max(abs(a), abs(b), 1.0)
    return a + pad, b - pad


def identify_mujoco_sysid(
    model,
    params,
    recordings,
    *,
    fit=None,
    max_iters: int = 50,
    n_threads: int = 1,
    verbose: bool = False,
) -> PeerFit:
    """Fit ``params`` of ``model`` to ``recordings`` with MuJoCo's own ``mujoco.sysid`` (C engine,
    finite-difference Jacobians, ``mujoco.minimize.least_squares``): the peer of
    :func:`diffmjx.sysid.identify`, on the same segments and residual.

    The C engine simulates each segment from its recorded state at the model's own ``opt.timestep``
    (each recording's ``dt`` must be a whole multiple of it; the control is held over the period),
    the residual of :class:`diffmjx.sysid.Problem` is taken at the recorded samples, and the values
    are written into the model by the same :class:`~diffmjx.sysid.ParameterSet` (ties and
    constants included). The optimiser works in units of the start values inside a finite box (the
    parameters' bounds where finite, else a decade around the start); its finite-difference step is
    ``mujoco.minimize``'s default (about 1.5e-8 of each value).

    Arguments:
        model: ``mujoco.MjModel``, ``MjSpec`` or MJCF path (the start values); one variant only.
        params: :class:`~diffmjx.sysid.Parameter` list.
        recordings: :class:`~diffmjx.sysid.Recording` list.
        fit: :class:`~diffmjx.sysid.FitConfig` (``horizon``, ``stride`` and the residual's weights
            are used).
        max_iters: optimiser iterations at most.
        n_threads: threads of the batched C rollouts.
        verbose: let the backend print its iterations.

    Raises:
        ImportError: ``mujoco.sysid``'s extras are missing.
        ValueError: a recording period that is not a multiple of the model's timestep.
    """
    from diffmjx.physics import manifold
    from diffmjx.sysid.identify import FitConfig, load_model
    from diffmjx.sysid.parameter import ParameterSet
    from diffmjx.sysid.problem import cut, sensor_model, state_residuals

    sysid = mujoco_sysid()
    fit = FitConfig() if fit is None else fit
    m0, spec = load_model(model)
    ps = ParameterSet(m0, params, (), spec)
    recs = [r.check(m0) for r in recordings]
    if any(r.variant for r in recs):
        raise ValueError("identify_mujoco_sysid fits one model: every recording must have variant 0")
    groups = cut(recs, fit.horizon, fit.stride or fit.horizon)
    h = float(m0.opt.timestep)
    layout = manifold.JointLayout.from_model(m0)
    w = fit.weights
    nq, nv = m0.nq, m0.nv
    start = ps.start
    scale = np.where(start != 0, np.abs(start), 1.0)
    pdict = sysid.ParameterDict()
    for i in range(ps.size):
        a, b = _peer_box(ps.lower[i], ps.upper[i], start[i])
        pdict.add(
            sysid.Parameter(
                f"p{i}", np.array([start[i] / scale[i]]), np.array([a / scale[i]]), np.array([b / scale[i]])
            )
        )

    def values_of(p) -> np.ndarray:
        return np.array([p[f"p{i}"].value[0] * scale[i] for i in range(ps.size)])

    def build(p):
        return ps.write(values_of(p))

    trajs, meta = [], []
    for g in groups:
        k = round(g.dt / h)
        if k < 1 or abs(k * h - g.dt) > 1e-9 * g.dt:
            raise ValueError(f"recording period dt={g.dt:g} s is not a whole multiple of the model's timestep {h:g} s")
        n = g.ctrl.shape[1] + (g.sensordata is not None)  # one more period gives the last sample's sensors
        times = np.arange(n * k + 1) * h
        for b in range(g.size):
            u = g.ctrl[b] if g.sensordata is None else np.vstack([g.ctrl[b], g.sensor_ctrl[b][-1:]])
            ctrl = np.repeat(u, k, axis=0)
            ctrl = np.vstack([ctrl, ctrl[-1:]]) if m0.nu else np.zeros((n * k + 1, 0))
            control = sysid.TimeSeries(times, ctrl)
            measured = sysid.TimeSeries(
                times, np.zeros((n * k + 1, 1)), {"row": (sysid.SignalType.CustomObs, np.array([0]))}
            )
            s0 = sysid.create_initial_state(m0, g.qpos0[b], g.qvel0[b], g.act0[b] if m0.na else None)
            trajs.append(sysid.SystemTrajectory(m0, control, measured, s0, None))
            meta.append((g, b, k))
    total = sum(g.size for g in groups) * fit.horizon
    norm = 1.0 / np.sqrt(total)
    index = {id(t.sensordata): i for i, t in enumerate(trajs)}

    def modify_residual(p, pred_ts, meas_ts, model, return_pred_all, state=None, **_):
        g, b, k = meta[index[id(meas_ts)]]
        n = fit.horizon
        qp, qv = state[k - 1 :: k, 1 : 1 + nq][:n], state[k - 1 :: k, 1 + nq : 1 + nq + nv][:n]
        res = state_residuals(layout, qp, qv, g.qpos[b], g.qvel[b], w, xp=np)
        if g.sensordata is not None:
            vals = values_of(p)
            gain, bias, delay = (np.asarray(x) for x in ps.sensor_terms(vals, model.nsensordata))
            sim = np.asarray(pred_ts.data)[0 : k * (n + 1) : k]  # samples 0..N (a row is its step's start)
            measured = sensor_model(sim, gain, bias, delay, g.dt, xp=np)[1:]
            res = np.hstack([res, np.sqrt(w.sensor) * g.sensor_weights[b] * (measured - g.sensordata[b])])
        return norm * res, meas_ts, meas_ts  # the residual is ours; mujoco.sysid checks the mappings agree

    run = drive(
        sysid, pdict, build, trajs, modify_residual, n_threads=n_threads, verbose=verbose, max_iters=int(max_iters)
    )
    values = values_of(run.fitted)
    return PeerFit(
        values=ps.as_dict(values),
        model=ps.write(values),
        loss_start=run.loss_start,
        loss=run.loss,
        wall_s=run.wall_s,
        evaluations=run.evaluations,
        iterations=run.iterations,
    )
