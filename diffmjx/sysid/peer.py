r"""The finite-difference peer: fit the cube's parameters with MuJoCo's own ``mujoco.sysid``.

:func:`fit_mujoco_sysid` identifies the same parameters as :func:`diffmjx.sysid.train`, from the
same recorded segments and with the same loss, but with none of DiffMJX: the C engine
(:func:`~diffmjx.sysid.cube_mjmodel` rolled out by ``mujoco.rollout``), Jacobians by finite
differences (one model compile and one batched rollout of every segment per perturbed
parameter), and the Levenberg–Marquardt-type box-bounded least squares of
``mujoco.minimize.least_squares``, all driven through ``mujoco.sysid`` (``model_residual`` with
the project's model builder, then ``optimize``). It is the baseline the gradient-based fits are
compared against. It needs MuJoCo's optional extras: ``pip install "mujoco[sysid]==3.17.0"``.

The residual of a segment is the one of every fit, :func:`~diffmjx.sysid.state_residuals` (here
in NumPy): per predicted state, the position error (3), the difference of the rotation matrices
(9, quaternions in (w, x, y, z) order, normalised first) and ``sqrt(velocity_weight)`` times the
velocity error (6), all divided by ``sqrt(B N)``, so that its
sum of squares is :func:`~diffmjx.sysid.segment_loss` (the mean over segments and predicted
states of ``|dp|^2 + ||dR||_F^2 + velocity_weight |dqvel|^2``), here with MuJoCo's C solver.
Each rollout starts from the segment's recorded state with a zero warm start, as MJX's
``make_data`` does.

The optimiser works on the free components (``solref`` and ``solimp`` component by component)
in units of their initial values, so ``eps`` is a relative finite-difference step for every
component (MuJoCo's own step is ``eps * max(1, |x|)``, absolute below 1), inside the finite
box :data:`PEER_BOUNDS` (strictly inside the intervals of :func:`~diffmjx.sysid.check_params`).

Sharp bits:

- The loss is exactly flat while the cube does not touch the table: in free flight no parameter
  acts on the motion, the Jacobian is zero and the optimiser stops at once ("zero gradient").
  Choose segments in contact, and starting values for which the cube reaches the table within
  the horizon (a too small side length can leave every segment airborne).
- The mass is not identifiable: with MuJoCo's ``solref`` time-constant parametrisation the
  contact of a lone free body is mass-invariant (see :mod:`diffmjx.sysid.model`), and free flight
  never depends on it. Its Jacobian column is zero up to rounding; keep it fixed.
- Contact onset and lift-off are kinks of the loss: a finite difference that straddles one is
  not a derivative. Keep ``eps`` small, but large against the solver's rounding noise.
- ``mujoco.sysid.optimize`` makes MuJoCo's backend print every iteration (its ``verbose`` is not
  forwarded); :func:`fit_mujoco_sysid` swallows standard output unless ``verbose``.

Why one file of this length: the peer fit through ``mujoco.sysid`` end to end (its model, driver
and bounds), kept apart so that nothing of DiffMJX enters the comparison.
"""

import contextlib
import io
import time
from collections.abc import Sequence
from typing import NamedTuple

import mujoco
import numpy as np

from diffmjx.physics.impedance import MAXIMP, MINIMP
from diffmjx.sysid.config import FREE_PARAMS, check_free
from diffmjx.sysid.data import DT
from diffmjx.sysid.loss import state_residuals
from diffmjx.sysid.model import PARAM_SHAPES, CubeParams, check_params, cube_mjmodel

__all__ = ["PEER_BOUNDS", "PeerFit", "PeerResult", "fit_mujoco_sysid", "identify_mujoco_sysid", "mujoco_sysid"]

_MARGIN = 1e-6  # keeps solimp's clamped components strictly inside MuJoCo's [1e-4, 0.9999]

PEER_BOUNDS: dict[str, tuple[tuple[float, float], ...]] = {
    "side_length": ((1e-3, 1.0),),  # m
    "mass": ((1e-3, 1e2),),  # kg
    "solref": ((1e-4, 1.0), (1e-3, 1e2)),  # timeconst (s), dampratio
    "solimp": (
        (MINIMP + _MARGIN, MAXIMP - _MARGIN),  # d0
        (MINIMP + _MARGIN, MAXIMP - _MARGIN),  # dwidth
        (1e-6, 1.0),  # width, m
        (MINIMP + _MARGIN, MAXIMP - _MARGIN),  # midpoint
        (1.0 + 1e-3, 10.0),  # power
    ),
    "friction": ((1e-4, 10.0),),
}
"""Finite box of each component for the optimiser, ``field -> ((lower, upper), ...)`` (MuJoCo's
least squares needs finite bounds); every box lies strictly inside the field's valid interval."""

_INSTALL = 'mujoco.sysid needs MuJoCo\'s optional extras: pip install "mujoco[sysid]==3.17.0"'


class PeerResult(NamedTuple):
    """Outcome of :func:`fit_mujoco_sysid`.

    Attributes:
        params: the fitted :class:`~diffmjx.sysid.CubeParams` (NumPy float64; the fixed fields
            are the initial values).
        loss_init: the loss at the initial parameters (sum of squared residuals).
        loss_final: the loss at the fitted parameters.
        wall_s: wall-clock seconds of the optimisation (the two loss evaluations excluded).
        evaluations: residual evaluations of the optimisation, counted in parameter points (each
            one compiled model and one batched rollout of every segment; a finite-difference
            Jacobian over ``k`` free components counts ``k``).
        iterations: optimiser iterations, or None where the backend does not report them.
    """

    params: CubeParams
    loss_init: float
    loss_final: float
    wall_s: float
    evaluations: int
    iterations: int | None


def mujoco_sysid():
    """``mujoco.sysid``, or ImportError with the install hint when its extras are missing."""
    try:
        from mujoco import sysid
    except ImportError as e:  # pragma: no cover - mujoco itself is a dependency
        raise ImportError(_INSTALL) from e
    if not hasattr(sysid, "optimize"):  # its __init__ swallows a missing extra and exports nothing
        raise ImportError(_INSTALL)
    return sysid


def _check_segments(qpos, qvel) -> tuple[np.ndarray, np.ndarray]:
    qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
    if qpos.ndim != 3 or qpos.shape[2] != 7 or qpos.shape[1] < 2 or qpos.shape[0] < 1:
        raise ValueError(f"qpos has shape {qpos.shape}; expected (B, N + 1, 7) with B >= 1, N >= 1")
    if qvel.shape != (*qpos.shape[:2], 6):
        raise ValueError(f"qvel has shape {qvel.shape}; expected {(*qpos.shape[:2], 6)} to match qpos")
    if not (np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel))):
        raise ValueError("qpos and qvel must be finite")
    return qpos, qvel


class _Driven(NamedTuple):
    fitted: object  # the fitted mujoco.sysid.ParameterDict
    loss_start: float
    loss: float
    wall_s: float
    evaluations: int
    iterations: int | None


def _drive(sysid, pdict, build, trajs, modify_residual, *, n_threads: int, verbose: bool, **optimize) -> _Driven:
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
    return _Driven(fitted, loss_start, loss(fitted), wall_s, evaluations, n_iter)


def fit_mujoco_sysid(
    qpos,
    qvel,
    init: CubeParams,
    free: Sequence[str],
    *,
    iterations: int = 2,
    velocity_weight: float = 0.0,
    max_iters: int = 50,
    eps: float = 1e-4,
    n_threads: int = 1,
    verbose: bool = False,
) -> PeerResult:
    """Fit ``free`` parameters of the cube to recorded segments with ``mujoco.sysid`` (C engine, FD).

    Arguments:
        qpos, qvel: (B, N + 1, 7) and (B, N + 1, 6) recorded segments
            (:class:`~diffmjx.sysid.Segments` fields): state 0 starts the prediction, the other N
            are predicted, one control period :data:`~diffmjx.sysid.DT` apart.
        init: initial :class:`~diffmjx.sysid.CubeParams`; the fields not in ``free`` stay fixed.
        free: names of the fields to fit, among ``CubeParams._fields`` (``solref`` and ``solimp``
            are fitted component by component).
        iterations: Newton iterations of the C model (:func:`~diffmjx.sysid.cube_mjmodel`).
        velocity_weight: weight of the squared velocity error, >= 0.
        max_iters: optimiser iterations at most, >= 0.
        eps: relative finite-difference step, > 0 (each component moves by about ``eps`` times
            its initial value).
        n_threads: threads of the batched rollout, >= 1.
        verbose: let the backend print its iterations (standard output is swallowed otherwise).

    Returns:
        A :class:`PeerResult`.

    Raises:
        ImportError: ``mujoco.sysid``'s optional extras are missing.
        ValueError: a name in ``free`` that is not a parameter (the message lists the allowed
            ones), ``init`` invalid or outside :data:`PEER_BOUNDS`, bad segment shapes or a bad
            option.
    """
    sysid = mujoco_sysid()
    free = check_free("free", free)
    check_params(init)
    qpos, qvel = _check_segments(qpos, qvel)
    if not (np.isfinite(velocity_weight) and velocity_weight >= 0):
        raise ValueError(f"velocity_weight={velocity_weight!r} is invalid; expected a finite value >= 0")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps={eps!r} is invalid; expected a finite value > 0")
    for key, value, low in (("max_iters", max_iters, 0), ("n_threads", n_threads, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{key}={value!r} is invalid; expected an int >= {low}")

    # Parameters in units of their initial values; frozen ones are the fixed fields.
    scale = {n: np.asarray(getattr(init, n), np.float64).reshape(-1) for n in FREE_PARAMS}
    pdict = sysid.ParameterDict()
    for name in FREE_PARAMS:
        lo, hi = (np.array(b) for b in zip(*PEER_BOUNDS[name], strict=True))
        if name in free and np.any((scale[name] <= lo) | (scale[name] >= hi)):
            raise ValueError(
                f"init.{name}={scale[name].tolist()!r} is outside the optimiser's bounds "
                f"{list(PEER_BOUNDS[name])!r} (PEER_BOUNDS)"
            )
        pdict.add(sysid.Parameter(name, np.ones_like(lo), lo / scale[name], hi / scale[name], frozen=name not in free))

    def physical(p) -> CubeParams:
        return CubeParams(
            **{n: (p[n].value * scale[n]).reshape(PARAM_SHAPES[n]).astype(np.float64) for n in FREE_PARAMS}
        )

    def build(p):
        return cube_mjmodel(physical(p), iterations=iterations)

    # One measured trajectory per segment, each rolled out from its recorded state.
    batch, n_pred = qpos.shape[0], qpos.shape[1] - 1
    model0 = build(pdict)
    times = np.arange(n_pred + 1) * DT
    trajs = [
        sysid.SystemTrajectory(
            model0,
            sysid.TimeSeries(times, np.zeros((n_pred + 1, 0))),  # nu = 0; the last row is dropped: N steps
            sysid.TimeSeries.from_names(times, np.hstack([qpos[i], qvel[i]]), model0, ["cube_qpos", "cube_qvel"]),
            sysid.create_initial_state(model0, qpos[i, 0], qvel[i, 0]),
            None,
        )
        for i in range(batch)
    ]
    nq = model0.nq
    norm = 1.0 / np.sqrt(batch * n_pred)

    def modify_residual(p, pred_ts, meas_ts, model, return_pred_all, state=None, **_):
        # state: (N, 1 + nstate) predicted mjSTATE_FULLPHYSICS after steps 1..N, column 0 the time
        qp, qv = state[:, 1 : 1 + nq], state[:, 1 + nq : 1 + nq + 6]
        meas = meas_ts.data[1:]  # the recorded state 0 only starts the rollout
        res = state_residuals(qp, qv, meas[:, :7], meas[:, 7:], float(velocity_weight), xp=np)
        pred = sysid.TimeSeries(state[:, 0], np.hstack([qp, qv]), meas_ts.signal_mapping)
        return norm * res, pred, sysid.TimeSeries(state[:, 0], meas, meas_ts.signal_mapping)

    run = _drive(
        sysid,
        pdict,
        build,
        trajs,
        modify_residual,
        n_threads=n_threads,
        verbose=verbose,
        max_iters=int(max_iters),
        eps=float(eps),
        xtol=1e-10,
        gtol=1e-12,
    )
    return PeerResult(
        params=physical(run.fitted),
        loss_init=run.loss_start,
        loss_final=run.loss,
        wall_s=run.wall_s,
        evaluations=run.evaluations,
        iterations=run.iterations,
    )


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

    run = _drive(
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
