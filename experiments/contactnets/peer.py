r"""The finite-difference peer of the cube study: fit the cube's parameters with MuJoCo's own ``mujoco.sysid``.

:func:`fit_mujoco_sysid` identifies the same parameters as :func:`experiments.contactnets.train`, from the
same recorded segments and with the same loss, but with none of DiffMJX: the C engine
(:func:`~experiments.contactnets.cube_mjmodel` rolled out by ``mujoco.rollout``), Jacobians by finite
differences (one model compile and one batched rollout of every segment per perturbed
parameter), and the Levenberg–Marquardt-type box-bounded least squares of
``mujoco.minimize.least_squares``, all driven through ``mujoco.sysid`` (``model_residual`` with
the project's model builder, then ``optimize``). It is the baseline the gradient-based fits are
compared against. It needs MuJoCo's optional extras: ``pip install "mujoco[sysid]==3.17.0"``.

The residual of a segment is the one of every fit, :func:`~experiments.contactnets.state_residuals` (here
in NumPy): per predicted state, the position error (3), the difference of the rotation matrices
(9, quaternions in (w, x, y, z) order, normalised first) and ``sqrt(velocity_weight)`` times the
velocity error (6), all divided by ``sqrt(B N)``, so that its
sum of squares is :func:`~experiments.contactnets.segment_loss` (the mean over segments and predicted
states of ``|dp|^2 + ||dR||_F^2 + velocity_weight |dqvel|^2``), here with MuJoCo's C solver.
Each rollout starts from the segment's recorded state with a zero warm start, as MJX's
``make_data`` does.

The optimiser works on the free components (``solref`` and ``solimp`` component by component)
in units of their initial values, so ``eps`` is a relative finite-difference step for every
component (MuJoCo's own step is ``eps * max(1, |x|)``, absolute below 1), inside the finite
box :data:`PEER_BOUNDS` (strictly inside the intervals of :func:`~experiments.contactnets.check_params`).

Sharp bits:

- The loss is exactly flat while the cube does not touch the table: in free flight no parameter
  acts on the motion, the Jacobian is zero and the optimiser stops at once ("zero gradient").
  Choose segments in contact, and starting values for which the cube reaches the table within
  the horizon (a too small side length can leave every segment airborne).
- The mass is not identifiable: with MuJoCo's ``solref`` time-constant parametrisation the
  contact of a lone free body is mass-invariant (see :mod:`experiments.contactnets.model`), and free flight
  never depends on it. Its Jacobian column is zero up to rounding; keep it fixed.
- Contact onset and lift-off are kinks of the loss: a finite difference that straddles one is
  not a derivative. Keep ``eps`` small, but large against the solver's rounding noise.
- ``mujoco.sysid.optimize`` makes MuJoCo's backend print every iteration (its ``verbose`` is not
  forwarded); :func:`fit_mujoco_sysid` swallows standard output unless ``verbose``.

The driver is the library's (:func:`diffmjx.sysid.peer.drive`, shared with
:func:`diffmjx.sysid.identify_mujoco_sysid`); the model builder and the residual are the study's.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from diffmjx.physics.impedance import MAXIMP, MINIMP
from diffmjx.sysid.peer import drive, mujoco_sysid
from experiments.contactnets.config import FREE_PARAMS, check_free
from experiments.contactnets.data import DT
from experiments.contactnets.loss import state_residuals
from experiments.contactnets.model import PARAM_SHAPES, CubeParams, check_params, cube_mjmodel

__all__ = ["PEER_BOUNDS", "PeerResult", "fit_mujoco_sysid"]

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


class PeerResult(NamedTuple):
    """Outcome of :func:`fit_mujoco_sysid`.

    Attributes:
        params: the fitted :class:`~experiments.contactnets.CubeParams` (NumPy float64; the fixed fields
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


def _check_segments(qpos, qvel) -> tuple[np.ndarray, np.ndarray]:
    qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
    if qpos.ndim != 3 or qpos.shape[2] != 7 or qpos.shape[1] < 2 or qpos.shape[0] < 1:
        raise ValueError(f"qpos has shape {qpos.shape}; expected (B, N + 1, 7) with B >= 1, N >= 1")
    if qvel.shape != (*qpos.shape[:2], 6):
        raise ValueError(f"qvel has shape {qvel.shape}; expected {(*qpos.shape[:2], 6)} to match qpos")
    if not (np.all(np.isfinite(qpos)) and np.all(np.isfinite(qvel))):
        raise ValueError("qpos and qvel must be finite")
    return qpos, qvel


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
            (:class:`~experiments.contactnets.Segments` fields): state 0 starts the prediction, the other N
            are predicted, one control period :data:`~experiments.contactnets.DT` apart.
        init: initial :class:`~experiments.contactnets.CubeParams`; the fields not in ``free`` stay fixed.
        free: names of the fields to fit, among ``CubeParams._fields`` (``solref`` and ``solimp``
            are fitted component by component).
        iterations: Newton iterations of the C model (:func:`~experiments.contactnets.cube_mjmodel`).
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

    run = drive(
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
