r"""Identify any MuJoCo model from recordings: :func:`identify`.

``identify(model, params, recordings)`` fits the :class:`~diffmjx.sysid.Parameter` list to the
:class:`~diffmjx.sysid.Recording` list on the segment loss of :class:`~diffmjx.sysid.Problem`
(N-step predictions from recorded states, every gradient through DiffMJX's integrator, contacts
included), by

- ``lm`` (default): Levenberg–Marquardt (optimistix) on forward-mode Jacobians of the residual
  vector, every segment in every step: for tens of parameters and up to thousands of segments;
- ``adam``: Adam (the paper's settings) on minibatches of segments, for large data sets.

The start is the model's own values. Given ``held_out`` recordings, the same loss on them is
evaluated every ``fit.eval_every`` steps; the fit returns the values where it was lowest (early
stopping, with ``fit.patience``: stop after that many evaluations without improvement) and reports
it. At the returned values the residual and its Jacobian give confidence intervals
(:func:`confidence_intervals`: a cluster-robust sandwich over segments, since a recorded state's
noise correlates the residuals of every segment that reads it), and the eigenvectors of ``J^T J``
with eigenvalues below ``1e-9`` of the largest are reported as unidentifiable directions:
combinations of parameters the recordings do not determine (their intervals are infinite).

Knobs: :class:`FitConfig` (section ``fit``, YAML presets ``diffmjx/presets/fit_<name>.yaml``,
``fit.field=value`` overrides) and the simulation's :class:`diffmjx.Config`.

Why one file of this length: :func:`identify` and the two optimiser loops it drives (``lm``, ``adam``),
their checkpoints and the confidence intervals share the fit's private state; each loop is one class
of at most about 110 lines.
"""

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import checkpoint
from diffmjx.config import Config, Preset, Section, knob
from diffmjx.physics.checks import TouchdownJumpWarning, jump_message, touchdown_jumps
from diffmjx.registry import FIT_METHODS, GRADIENT_MODES
from diffmjx.sysid.distributed import batch_sharding, replicate, sharded_rows
from diffmjx.sysid.fields import FIELDS
from diffmjx.sysid.parameter import Parameter, ParameterSet
from diffmjx.sysid.problem import BATCHINGS, ORIENTATIONS, Problem, Weights, refsafe_floor
from diffmjx.sysid.recording import Recording
from diffmjx.sysid.train import ADAM, adam_loop

__all__ = [
    "METHODS",
    "STALL_GAIN",
    "FitConfig",
    "IdentifyResult",
    "Interval",
    "StalledFitWarning",
    "confidence_intervals",
    "forward_config",
    "identify",
    "linear_gain",
    "load_model",
    "select_fit",
    "tolerance_bias",
]

METHODS = FIT_METHODS  # fit.method's choices: the runners registered below (diffmjx.registry)
"""Optimisers of :func:`identify`."""

_CKPT_HINT = "delete it or pass another checkpoint_path"
# a stalled fit's warning with the saltation term on: where contacts graze again and again, its exact
# derivatives are those of grazing impacts, far larger than the loss's change at a step's scale
_GRAZING_HINT = (
    ". With integrator.saltation=true, contacts that graze again and again (a pushed body rocking on its "
    "corners) have exact derivatives far larger than the loss's change over a step: smooth them with "
    "integrator.saltation_resolution=1e-3 (m; it fitted a finger pushing a box), or fit without the term"
)


@dataclasses.dataclass(frozen=True)
class FitConfig(Section, Preset):
    """Knobs of :func:`identify`.

    Presets (:meth:`load`, :meth:`from_yaml`, :meth:`to_yaml`): a path, or the name of
    ``diffmjx/presets/fit_<name>.yaml`` (``default``), its fields at the top level or under ``fit:``.

    Attributes:
        method: ``lm`` (Levenberg–Marquardt on forward-mode Jacobians) or ``adam``.
        horizon: N, periods predicted from each segment's recorded first state.
        stride: samples between segment starts; None: ``horizon`` (segments share only their ends).
        steps: optimiser steps at most.
        learning_rate: Adam's step on the unconstrained coordinates (``LOG`` coordinates: relative).
        batch_size: Adam's segments per step; None: all of them.
        seed: seed of Adam's minibatches.
        position, orientation, velocity, sensor: weights of the residual's parts.
        orientation_metric: ``geodesic`` (rotation angle) or ``matrix`` (rotation-matrix difference).
        xtol, ftol: Levenberg–Marquardt stops after an accepted step shorter than ``xtol`` (relative,
            in unconstrained coordinates) or one that lowers the loss by less than ``ftol`` of it, or
            after five rejected steps in a row.
        damping: Levenberg–Marquardt's first damping, relative to the Gauss–Newton Hessian's
            diagonal (Marquardt's scaling): 1 takes about half a Gauss–Newton step.
        max_step: the longest step in any unconstrained coordinate (a trust region: with ``LOG``
            coordinates 0.5 changes a value by at most a factor 1.65 per step).
        batching: how segments are simulated: ``auto``, ``map`` or ``vmap``.
        threads: Levenberg–Marquardt's residuals and Jacobians run the segments in this many shares
            at once, one thread each; None: every CPU core on a CPU backend, 1 on an accelerator
            (:func:`~diffmjx.sysid.problem.resolve_threads`). Results move by rounding only.
        eval_every: held-out evaluation every this many steps.
        patience: stop after this many held-out evaluations without improvement; None: never.
        confidence: level of the reported intervals.
        intervals: compute the intervals and unidentifiable directions (Levenberg–Marquardt always
            has them; Adam compiles the residual's Jacobian for them, which ``false`` skips).
        full_loss: Adam without intervals: evaluate the training loss on every segment at the start
            and at the returned values (:attr:`IdentifyResult.loss_start`, ``.loss``), a minibatch
            at a time. On a large data set that is two epochs of forward passes; ``false`` skips
            both (they are NaN; a non-finite segment is still refused, by the first step whose
            minibatch holds it). With intervals (and with Levenberg–Marquardt) both losses come
            from the residual-and-Jacobian program over every segment, which they need anyway.
        tolerance_check: the intervals' check of the simulation's own error: the residual at the
            returned values is computed again with ``integrator.rtol`` and ``atol`` times this
            factor (fixed-step solvers: ``substeps`` divided by it), and the shift of the
            least-squares values that the tighter simulation implies (:attr:`Interval.bias`) widens
            the intervals. Without it, a fit to accurate data has intervals far narrower than its
            integration error (on noise-free data they miss the truth). None: no check (one
            compile and one evaluation less).
    """

    _section: ClassVar[str] = "fit"
    _preset_kind: ClassVar[str] = "fit"

    method: str = knob("lm", choices=METHODS)
    horizon: int = knob(10, ge=1)
    stride: int | None = knob(None, ge=1)
    steps: int = knob(50, ge=1)
    learning_rate: float = knob(0.02, gt=0)
    batch_size: int | None = knob(None, ge=1)
    seed: int = knob(0, ge=0)
    position: float = knob(1.0, ge=0)
    orientation: float = knob(1.0, ge=0)
    velocity: float = knob(0.0, ge=0)
    sensor: float = knob(1.0, ge=0)
    orientation_metric: str = knob("geodesic", choices=ORIENTATIONS)
    xtol: float = knob(1e-8, gt=0)
    ftol: float = knob(1e-6, ge=0)
    damping: float = knob(1.0, gt=0)
    max_step: float = knob(0.5, gt=0)
    intervals: bool = knob(True)
    full_loss: bool = knob(True)
    batching: str = knob("auto", choices=BATCHINGS)
    threads: int | None = knob(None, ge=1)
    eval_every: int = knob(1, ge=1)
    patience: int | None = knob(None, ge=1)
    confidence: float = knob(0.95, gt=0, lt=1)
    tolerance_check: float | None = knob(0.01, gt=0, lt=1)

    @property
    def weights(self) -> Weights:
        return Weights(self.position, self.orientation, self.velocity, self.sensor, self.orientation_metric)


class History(NamedTuple):
    """One entry per optimiser step (from 1)."""

    step: np.ndarray  # (S,)
    loss: np.ndarray  # (S,) training loss at the values after the step (Adam: the minibatch's before it)
    held_out: np.ndarray  # (S,) held-out loss after the step (NaN where not evaluated)
    values: np.ndarray  # (S, P) physical values after the step, in ParameterSet.labels order
    accepted: np.ndarray  # (S,) LM: whether the step was accepted; Adam: True
    wall_s: np.ndarray  # (S,) wall time of the step (the first includes compilation)


class Interval(NamedTuple):
    """A parameter component's estimate and confidence interval (inf where unidentifiable).

    ``std`` is the estimate's standard error from the residuals; ``bias`` the shift of the estimate
    that a tighter simulation implies (``FitConfig.tolerance_check``; 0 without the check). The
    interval holds ``value`` and ``value + bias``, widened by the t-quantile times ``std`` and by half
    of ``|bias|`` for the error of that estimate itself."""

    value: float
    lower: float
    upper: float
    std: float
    bias: float = 0.0


class IdentifyResult(NamedTuple):
    """What :func:`identify` returns.

    Attributes:
        values: ``{Parameter.key: value}``, physical (a float, or an array for several components;
            ``body_inertial``: mass, centre of mass (3), inertia xx yy zz xy xz yz).
        model: the ``mujoco.MjModel`` with the values written and its constants recomputed (the
            first variant's; ``models`` holds every variant's).
        models: one per model variant.
        history: per-step :class:`History`.
        step: the step whose values are returned (0: the start); with held-out recordings the
            held-out best, else the last.
        loss: the training loss at the returned values (NaN: not evaluated, ``fit.full_loss``).
        loss_start: the training loss at the start (NaN: not evaluated).
        held_out_loss: the held-out loss at the returned values (None without held-out recordings).
        intervals: ``{label: Interval}`` per component (:attr:`ParameterSet.labels`); empty with
            Adam and ``fit.intervals`` false.
        unidentifiable: ``[(eigenvalue ratio, {label: coefficient})]``, the directions the data do not
            determine (coefficients of the unit eigenvector, largest first).
        converged: LM's termination test was met (Adam: False): its last step changed the values or
            the loss too little, or five trial steps in a row raised the loss while its linear model
            promised at most ``STALL_GAIN`` of it. One that stopped on rejected steps the linear
            model promised more of is not converged (a :class:`StalledFitWarning`: the Jacobian
            does not describe the loss there).
        wall_s: wall time of the fit (steps and held-out evaluations; compilation included).
        setup_s: of which before the first step: compiling and evaluating the start (LM: the residual
            and its Jacobian; Adam: the loss).
        params: the :class:`~diffmjx.sysid.ParameterSet` (labels, start values, coordinates).
        not_in_model: ``{key: why}`` of fitted values ``model`` cannot hold (sensor gain and bias:
            MuJoCo has no such fields; a sensor delay without a history buffer); every other value is
            written into MuJoCo's own fields (a servo's kp into its gain and bias, a delay into
            ``sensor_delay`` with the sensor's history).
        residual: the residual vector at the returned values (None with Adam and ``fit.intervals``
            false); its sum of squares is ``loss``.
        jacobian: its Jacobian with respect to the physical values (rows of ``residual``, columns
            of ``params.labels``).
        segments: ``(row segment, segment keys, horizon)``, :meth:`Problem.row_segments` and the
            horizon: with ``residual`` and ``jacobian``, what :func:`confidence_intervals` reads.
        start_s: seconds from the call to the first step (``setup_s`` and the held-out loss at the
            start, compiled): with ``history.wall_s`` summed, the time at which a step's values
            were reached.
        budget_exhausted: ``(recording name, first sample)`` of the segments whose simulation at
            the returned values ran out of ``integrator.max_steps`` (their residuals are of a solve
            stopped early; :class:`BudgetExhaustedWarning`); None where not evaluated (Adam without
            intervals).
    """

    values: dict[str, Any]
    model: mujoco.MjModel
    models: list[mujoco.MjModel]
    history: History
    step: int
    loss: float
    loss_start: float
    held_out_loss: float | None
    intervals: dict[str, Interval]
    unidentifiable: list[tuple[float, dict[str, float]]]
    converged: bool
    wall_s: float
    setup_s: float
    params: ParameterSet
    not_in_model: dict[str, str]
    residual: np.ndarray | None
    jacobian: np.ndarray | None
    segments: tuple | None
    start_s: float = math.nan
    budget_exhausted: list[tuple[str, int]] | None = None


def select_fit(fits):
    """Model selection: the fit with the lowest held-out loss among several (say, from several starts).

    Arguments:
        fits: ``{name: IdentifyResult}`` (or a list), each fitted with the same ``held_out`` recordings.

    Returns:
        ``(name, result)`` of the best (a list's index as the name).

    Raises:
        ValueError: no fits, or a fit without a held-out loss (pass ``held_out`` to :func:`identify`).
    """
    items = list(fits.items()) if hasattr(fits, "items") else list(enumerate(fits))
    if not items:
        raise ValueError("no fits to select from")
    for name, r in items:
        if r.held_out_loss is None or not math.isfinite(r.held_out_loss):
            raise ValueError(f"fit {name!r} has no finite held-out loss; fit every candidate with held_out=[...]")
    return min(items, key=lambda kv: kv[1].held_out_loss)


def load_model(model) -> tuple[mujoco.MjModel, mujoco.MjSpec | None]:
    """``(MjModel, MjSpec or None)`` of an ``MjModel``, an ``MjSpec`` or an MJCF path."""
    if isinstance(model, mujoco.MjModel):
        return model, None
    if isinstance(model, mujoco.MjSpec):
        return model.compile(), model
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"model file {path} not found")
        spec = mujoco.MjSpec.from_file(str(path))
        return spec.compile(), spec
    raise TypeError(f"model must be a mujoco.MjModel, a mujoco.MjSpec or an MJCF path; got {type(model).__name__}")


def _check_recordings(recordings, models, what: str) -> list[Recording]:
    if isinstance(recordings, Recording):  # one recording: a list of it
        recordings = [recordings]
    try:
        recordings = list(recordings)
    except TypeError:
        raise TypeError(
            f"{what} must be a diffmjx.sysid.Recording or a list of them; got {type(recordings).__name__}"
        ) from None
    for r in recordings:
        if not isinstance(r, Recording):
            raise TypeError(f"{what} must be diffmjx.sysid.Recording objects; got {type(r).__name__}")
        if r.variant >= len(models):
            raise ValueError(f"recording {r.name!r} is of variant {r.variant}, but {len(models)} model(s) were given")
    return [r.check(models[r.variant]) for r in recordings]


def _fingerprint(fit: FitConfig, cfg: Config, ps: ParameterSet, recs: Sequence[Recording]) -> str:
    arrays = [a for r in recs for a in (r.qpos, r.qvel, r.ctrl, np.float64(r.dt)) if a is not None]
    # a fit may run longer or stop otherwise, and batching moves results by rounding only: none of them is compared
    free = ("batching", "threads", "steps", "patience", "intervals", "confidence")
    return checkpoint.fingerprint(
        fit={k: v for k, v in fit.to_dict().items() if k not in free},
        sim=cfg.to_dict(),
        params=list(ps.labels),
        start=ps.start.tolist(),
        data=checkpoint.digest(*arrays),
    )


def identify(
    model,
    params: Sequence[Parameter],
    recordings: Sequence[Recording] | Recording,
    *,
    held_out: Sequence[Recording] | Recording = (),
    variants: Sequence = (),
    cfg: Config | None = None,
    fit: FitConfig | None = None,
    progress: bool = True,
    checkpoint_path: str | Path | None = None,
) -> IdentifyResult:
    """Fit ``params`` of ``model`` to ``recordings`` (see the module docstring).

    Arguments:
        model: a ``mujoco.MjModel``, ``mujoco.MjSpec`` or MJCF path; its values are the start.
        params: the :class:`~diffmjx.sysid.Parameter` list.
        recordings: :class:`~diffmjx.sysid.Recording` list, or one recording (``variant`` picks
            the model).
        held_out: recordings for early stopping and the reported held-out loss (a list, or one).
        variants: further models (``MjModel``, ``MjSpec`` or paths) sharing the parameters: a
            recording of ``variant=k`` is simulated with ``variants[k - 1]``.
        cfg: the simulation's :class:`diffmjx.Config` (CFD, tolerances); ``Config()`` if None.
        fit: :class:`FitConfig`; ``FitConfig()`` if None.
        progress: show a progress bar.
        checkpoint_path: an ``.npz`` file written after every step; an existing one of the same
            fit (configuration, parameters, start, data) is resumed.

    Returns:
        :class:`IdentifyResult`.

    Raises:
        ParameterError, RecordingError: bad parameters or recordings, named.
        FloatingPointError: a non-finite loss at the start.
    """

    cfg = Config() if cfg is None else cfg
    fit = FitConfig() if fit is None else fit
    if not jax.config.jax_enable_x64:
        warnings.warn(
            "identify runs in float32 (jax_enable_x64 is off): losses below about 1e-7 and tolerances "
            "below 1e-6 are rounding; call diffmjx.enable_compilation_cache() (float64 and a compile "
            "cache) or jax.config.update('jax_enable_x64', True) first",
            stacklevel=2,
        )
    if not isinstance(cfg, Config):
        raise TypeError(f"cfg must be a diffmjx.Config; got {type(cfg).__name__}")
    if not isinstance(fit, FitConfig):
        raise TypeError(f"fit must be a diffmjx.sysid.FitConfig; got {type(fit).__name__}")
    m0, spec = load_model(model)
    loaded = [load_model(v) for v in variants]
    models = [m0, *(mv for mv, _ in loaded)]
    ps = ParameterSet(m0, params, models[1:], spec, [sv for _, sv in loaded])
    recs = _check_recordings(recordings, models, "recordings")
    if not recs:
        raise ValueError("no recordings given")
    held = _check_recordings(held_out, models, "held_out")
    _warn_refsafe(ps, models, recs)
    stride = fit.stride or fit.horizon
    runner_cls = FIT_METHODS[fit.method]  # the one place the method is read
    sim = runner_cls.simulation(cfg)
    if not cfg.cfd.enabled:
        _warn_touchdown_jumps(models, recs, sim)
    problem = Problem(ps, recs, fit.horizon, stride, sim, fit.weights, fit.batching, fit.threads)
    held_problem = dataclasses.replace(problem, recordings=held, cfg=cfg) if held else None
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    fp = _fingerprint(fit, cfg, ps, recs + held)
    saved = None if ckpt is None else checkpoint.load(ckpt, fp, "another fit", _CKPT_HINT)  # refused before compiling
    start = time.perf_counter()
    held_fn = None
    if held_problem is not None:
        held_warned = [False]

        def held_fn(th):
            r, _, exhausted = held_problem.evaluate(_local(th), jacobian=False, flags=True)
            if not held_warned[0]:  # once per fit, at the first held-out evaluation that runs out
                held_warned[0] = _warn_budget(held_problem, exhausted, "held-out recordings' evaluation")
            return float(jnp.sum(r**2))

    runner = runner_cls(problem, fit)
    theta = jnp.asarray(ps.theta0)
    state = runner.init(theta)
    setup = time.perf_counter() - start
    loss_start, jac0 = runner.start(theta, state)
    if not (math.isfinite(loss_start) or (math.isnan(loss_start) and not getattr(runner, "evaluates_loss", True))):
        raise FloatingPointError(
            f"the loss at the start is {loss_start}: the model's simulation of the recordings "
            "is not finite; check the recordings' states and controls"
        )
    if jac0 is not None:
        _warn_no_effect(np.asarray(jac0), ps)
    warned = _warn_budget(problem, getattr(runner, "exhausted", None), "start")
    track = _Track(ps, fit, held_fn, float(held_fn(theta)) if held_fn else math.inf)
    start_s = time.perf_counter() - start
    hist = runner.run(theta, state, track, fp, ckpt, saved, progress)
    best = track.best
    values = np.asarray(best[2], np.float64)
    step = best[1]
    theta_best = jnp.asarray(ps.to_theta(values))
    intervals: dict[str, Interval] = {}
    unident: list = []
    jacobian = segments = None
    loss_best, residual, jac = runner.end(theta_best)
    exhausted = _exhausted_segments(problem, getattr(runner, "exhausted", None))
    if not warned:  # once per fit: the start's warning already told where the budget runs out
        _warn_budget(problem, getattr(runner, "exhausted", None), "fitted values")
    if jac is not None:
        # the Jacobian in physical values: the coordinates map each component on its own
        _, dx = jax.jvp(ps.to_values, (theta_best,), (jnp.ones_like(theta_best),))
        jacobian = jac / np.asarray(dx)[None, :]
        segments = (*problem.row_segments(), problem.horizon)
        bias = None
        if fit.tolerance_check is not None:
            tight = dataclasses.replace(problem, cfg=_tightened(cfg, fit.tolerance_check))
            r_tight, _, exhausted_tight = tight.evaluate(theta_best, jacobian=False, flags=True)
            r_tight = np.asarray(r_tight)
            _warn_budget(tight, exhausted_tight, "intervals' tolerance check (fit.tolerance_check)")
            bias = tolerance_bias(residual, r_tight, jacobian)
        intervals, unident = confidence_intervals(
            residual, jacobian, ps.labels, values, fit.confidence, segments, bias=bias
        )
    held_best = float(held_fn(theta_best)) if held_fn else None
    stalled = getattr(runner, "stalled", None)
    if stalled is not None:
        hint = _GRAZING_HINT if problem.cfg.integrator.carries_jumps else ""
        warnings.warn(
            f"identify: Levenberg-Marquardt stopped after five trial steps in a row raised the loss, though its "
            f"linear model (the Jacobian) promised {100 * stalled:.0f} % less loss from the values it stopped at: "
            "the Jacobian does not describe the loss there, so the fit is not converged (converged=False). Check "
            "the derivatives (diffmjx.gradcheck); a force jump at touchdowns they miss (diffmjx.touchdown_jumps), "
            f"or a loss that is not smooth at the scale of a step, do this{hint}",
            StalledFitWarning,
            stacklevel=2,
        )
    fitted = [ps.write(values, v) for v in range(len(models))]
    wall = time.perf_counter() - start
    history = History(
        step=np.asarray(hist["step"], int),
        loss=np.asarray(hist["loss"], float),
        held_out=np.asarray(hist["held_out"], float),
        values=np.asarray(hist["values"], float).reshape(-1, ps.size),
        accepted=np.asarray(hist["accepted"], bool),
        wall_s=np.asarray(hist["wall_s"], float),
    )
    return IdentifyResult(
        values=ps.as_dict(values),
        model=fitted[0],
        models=fitted,
        history=history,
        step=step,
        loss=loss_best,
        loss_start=loss_start,
        held_out_loss=held_best,
        intervals=intervals,
        unidentifiable=unident,
        converged=track.converged and stalled is None,
        wall_s=wall,
        setup_s=setup,
        params=ps,
        not_in_model=ps.not_in_model(values),
        residual=residual,
        jacobian=jacobian,
        segments=segments,
        start_s=start_s,
        budget_exhausted=exhausted,
    )


def _exhausted_segments(problem: Problem, flags) -> list[tuple[str, int]] | None:
    """``(recording name, first sample)`` of each segment flagged in ``flags`` (None: not evaluated)."""
    if flags is None:
        return None
    flags = np.asarray(flags, bool)
    if not flags.any():  # the common case, after every held-out evaluation: no segment keys built
        return []
    keys = problem.row_segments()[1][flags]
    return [(problem.recordings[int(i)].name, int(s)) for i, s in keys]


def _warn_budget(problem: Problem, flags, where: str) -> bool:
    """Warn of segments whose simulation ran out of ``integrator.max_steps`` (their residuals are of a
    solve stopped early), naming the first and how many; whether it warned."""
    bad = _exhausted_segments(problem, flags)
    if not bad:
        return False
    name, first = bad[0]
    warnings.warn(
        f"identify: {len(bad)} of {len(flags)} segments ran out of the integrator's step budget "
        f"(integrator.max_steps={problem.cfg.integrator.max_steps}) at the {where}, the first of recording "
        f"{name!r} from sample {first}: their residuals are of simulations stopped early, which pull the fit "
        "off. The adaptive solve could not meet integrator.rtol and atol there (e.g. a body resting on a "
        "contact that switches on and off at every step): loosen the tolerances or raise integrator.max_steps",
        BudgetExhaustedWarning,
        stacklevel=3,
    )
    return True


class StalledFitWarning(UserWarning):
    """A Levenberg–Marquardt fit that stopped on rejected steps while its linear model promised a
    substantial decrease (:func:`linear_gain` above ``STALL_GAIN``): the Jacobian disagrees with the
    loss, and :attr:`IdentifyResult.converged` is False."""


STALL_GAIN = 0.1
"""The fraction of the loss above which a Gauss–Newton model's promise makes a stop on rejected steps a stall."""


def linear_gain(r, jac) -> float:
    """The fraction of the loss ``|r|^2`` that the Gauss–Newton model ``r + J d`` removes at its best
    step ``d``: ``|P r|^2 / |r|^2``, ``P`` the projection onto the range of ``jac``. Zero at a
    stationary point of the loss whose Jacobian is right (``J^T r = 0``), whatever is left of the loss
    (noise, the simulation's own error); near one where the Jacobian is wrong."""
    r, jac = np.asarray(r, np.float64), np.asarray(jac, np.float64)
    loss = float(r @ r)
    if loss == 0.0 or jac.size == 0:
        return 0.0
    d = np.linalg.lstsq(jac, -r, rcond=None)[0]
    rest = r + jac @ d
    return max(0.0, 1.0 - float(rest @ rest) / loss)


class BudgetExhaustedWarning(UserWarning):
    """Segments of a fit whose adaptive simulation ran out of ``integrator.max_steps``
    (:attr:`IdentifyResult.budget_exhausted` lists them at the returned values)."""


def _local(theta) -> np.ndarray:
    """This process's copy of coordinates that Adam's loop keeps on every device (a jitted function
    of unplaced arguments refuses them beside a copy on several devices, or on other processes')."""
    return np.asarray(theta.addressable_data(0) if isinstance(theta, jax.Array) else theta)


def _warn_refsafe(ps: ParameterSet, models, recs) -> None:
    """Warn, naming it, of a fitted contact time constant that starts where MuJoCo's ``refsafe``
    clamps it in the user's model: below twice the model's own timestep the model simulates with
    that instead, so the parameter cannot move the simulation (a zero Jacobian column). The sample
    period does not matter: :mod:`.problem` clamps as the model at its own timestep does."""
    for v, m in enumerate(models):
        floor = refsafe_floor(m)
        if floor is None or not any(r.variant == v for r in recs):
            continue
        for r in ps.resolved[v]:
            col = FIELDS[r.param.field].time_constant
            if col is None or col not in r.columns:
                continue
            j = 0 if r.param.uniform else r.columns.index(col)
            start = float(r.start[j])
            if 0.0 < start < floor:
                warnings.warn(
                    f"{r.labels[j]}: the time constant {start:g} s is below twice the model's timestep "
                    f"({floor:g} s), where MuJoCo's refsafe raises it to {floor:g} s, so the fit cannot move it. "
                    'Disable refsafe in the model (<option><flag refsafe="disable"/></option>), or give it a '
                    "smaller timestep, or start it above the clamp",
                    stacklevel=3,
                )


def _warn_touchdown_jumps(models, recs, sim: Config) -> None:
    """Warn, naming the geoms, of contacts whose force jumps at touchdown (``solimp[0] > 0``,
    MuJoCo's default) in a model that recordings are fitted with, where the fit's derivatives
    (``sim``, the simulation they differentiate) miss the jump's term: at every touchdown, which
    slows Levenberg–Marquardt to a crawl on contact-rich recordings (docs/sysid.md, the fair-peer
    study's finger and box). With ``integrator.saltation`` (the default) they carry it."""
    for v, m in enumerate(models):
        jumps = touchdown_jumps(m, sim) if any(r.variant == v for r in recs) else {}
        if jumps:
            warnings.warn(jump_message(jumps, sim, "identify: "), TouchdownJumpWarning, stacklevel=3)
            return


def _warn_no_effect(jac: np.ndarray, ps: ParameterSet) -> None:
    """Warn, naming them, of components whose Jacobian column is zero at the start: nothing in the
    recordings moves with them (they end in ``unidentifiable`` with infinite intervals)."""
    cols = np.linalg.norm(jac, axis=0)
    dead = [lab for lab, c in zip(ps.labels, cols) if not c > 1e-12 * max(float(np.max(cols)), 1e-300)]
    if dead:
        warnings.warn(
            f"{', '.join(dead)}: no effect on the simulated recordings at the start (a zero Jacobian column); "
            "the recordings cannot determine them, so they stay at their starts with infinite intervals "
            "(fit.unidentifiable). Remove them, or record motion that excites them (a contact for a "
            "friction, a load for a gain)",
            stacklevel=3,
        )


def forward_config(cfg: Config) -> Config:
    """``cfg`` differentiated in forward mode (for Jacobians), simulating as ``cfg`` does.

    The ``forward`` adjoint would tighten the forward solve (``integrator.dto_tighten``) and turn on
    kink control (``integrator.kink_step=auto``) where ``cfg``'s adjoint (``backsolve`` by default)
    has neither; the forward solve's tolerances and kink step are kept as ``cfg`` resolves them, so the
    fit simulates what the user configured (kink control can cost ten times the steps in sliding
    contact)."""
    ic = cfg.integrator
    rtol, atol = ic.tolerances()
    fwd = dataclasses.replace(
        ic, adjoint="forward", rtol=rtol, atol=atol, dto_tighten=1.0, kink_step=ic.kink_step_used()
    )
    return dataclasses.replace(cfg, integrator=fwd)


def _tightened(cfg: Config, factor: float) -> Config:
    """``cfg`` simulating more accurately: ``rtol`` and ``atol`` (as the forward solve uses them)
    times ``factor``, or, with a fixed-step solver, ``substeps`` divided by it (rounded up)."""
    ic = cfg.integrator
    if ic.fixed_step:
        ic = dataclasses.replace(ic, substeps=math.ceil(ic.substeps / factor))
    else:
        rtol, atol = ic.tolerances()
        ic = dataclasses.replace(ic, rtol=rtol * factor, atol=atol * factor, dto_tighten=1.0)
    return dataclasses.replace(cfg, integrator=ic)


def tolerance_bias(r, r_tight, jac) -> np.ndarray:
    """The shift of the least-squares values that a more accurate simulation implies: the
    Gauss–Newton step ``-(J^T J)^+ J^T (r_tight - r)`` from the residual ``r`` to ``r_tight`` of the
    same data at the same values (their difference is the simulation's own error: the data's noise
    cancels), with ``jac`` the Jacobian in physical values. Zero along directions the data cannot
    determine."""
    r, r_tight, jac = np.asarray(r), np.asarray(r_tight), np.asarray(jac)
    *_, inv = _gauss_newton(jac)
    return -inv @ (jac.T @ (r_tight - r))


def _cluster_dof(weight_sq, weight_jac, inv, pairs) -> np.ndarray:
    """Per component, the degrees of freedom of its cluster-robust variance (Bell and McCaffrey's
    Satterthwaite approximation): ``tr(M)^2 / tr(M^2)`` with ``M = G^T G W``, where column ``s`` of
    ``G`` is ``(I - H)`` times segment ``s``'s weights of the component (``weight_sq``: their squared
    norms, ``weight_jac``: their products with the segment's Jacobian) and ``W`` (``pairs``, sparse)
    marks which segments' terms the variance multiplies. About the number of segments where each
    carries a like share of the component's information; near 1 where one or two carry all of it (a
    contact time constant seen in a few bounces), whose variance estimate is then that uncertain.

    ``G^T G = D - Q A^-1 Q^T`` (``D`` the squared norms, ``Q`` the products): the traces are taken
    from ``D``, ``Q`` and ``W`` without forming a matrix of segments by segments."""
    nseg, p = weight_sq.shape
    w2 = pairs.multiply(pairs)
    dof = np.empty(p)
    for i in range(p):
        d, q = weight_sq[:, i], weight_jac[:, i, :]  # D's diagonal; Q: (segments, parameters)
        wq = pairs @ q
        c = q.T @ wq  # Q^T W Q
        trace = float(d @ pairs.diagonal()) - float(np.sum(inv * c.T))
        square = (
            float(d @ (w2 @ d))
            - 2.0 * float(np.sum(inv * ((wq * d[:, None]).T @ wq)))
            + float(np.sum((inv @ c) * (inv @ c).T))
        )
        dof[i] = trace**2 / square if square > 0 else max(nseg - p, 1)
    return np.clip(dof, 1.0, max(nseg - p, 1))


def _gauss_newton(jac: np.ndarray):
    """``(eigenvalues, eigenvectors, null, pseudo-inverse)`` of ``J^T J``: directions with an
    eigenvalue below 1e-9 of the largest are the null ones the data cannot determine."""
    w, v = np.linalg.eigh(jac.T @ jac)
    null = w < 1e-9 * max(float(w[-1]), 1e-300)
    return w, v, null, (v[:, ~null] / w[~null]) @ v[:, ~null].T


def _with_bias(intervals: dict[str, Interval], bias) -> dict[str, Interval]:
    """``intervals`` (in :attr:`ParameterSet.labels` order) widened by the estimate's ``bias`` (see
    :class:`Interval`): each holds the value and the value plus the bias, and half the bias more."""
    out = {}
    for (lab, iv), b in zip(intervals.items(), np.asarray(bias, float)):
        b = float(b) if math.isfinite(iv.std) else 0.0
        lo, hi = min(iv.value, iv.value + b), max(iv.value, iv.value + b)
        out[lab] = Interval(
            iv.value, lo - (iv.value - iv.lower) - abs(b) / 2, hi + (iv.upper - iv.value) + abs(b) / 2, iv.std, b
        )
    return out


def _forward(problem: Problem) -> Problem:
    """The problem with its simulation differentiated in forward mode (for Jacobians)."""
    return dataclasses.replace(problem, cfg=forward_config(problem.cfg))


class _Track:
    """Held-out evaluation, early stopping and the returned step, after each optimiser step."""

    def __init__(self, ps: ParameterSet, fit: FitConfig, held_fn, held_start: float):
        self.ps, self.fit, self.held_fn = ps, fit, held_fn
        self.best = (held_start, 0, np.asarray(ps.start))  # (held-out loss, step, values)
        self.stale = 0
        self.converged = False

    def after(self, k: int, theta, loss: float, converged: bool = False) -> tuple[np.ndarray, float]:
        """Record step ``k`` (from 1): ``(values, held-out loss or NaN)``."""
        self.converged = converged
        values = np.asarray(self.ps.to_values(theta))
        if not math.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {k}; values: {self.ps.as_dict(values)}")
        held = math.nan
        if self.held_fn is None:
            self.best = (math.inf, k, values)
        elif k % self.fit.eval_every == 0 or k == self.fit.steps or converged:
            held = float(self.held_fn(theta))
            if held < self.best[0]:
                self.best, self.stale = (held, k, values), 0
            else:
                self.stale += 1
        return values, held

    @property
    def stop(self) -> bool:
        return self.converged or (self.fit.patience is not None and self.stale >= self.fit.patience)

    def state(self) -> dict:
        return {
            "best": np.asarray([self.best[0], self.best[1]]),
            "best_values": np.asarray(self.best[2]),
            "stale": np.asarray(self.stale),
        }

    def restore(self, saved: dict) -> None:
        b = saved["best"]
        self.best = (float(b[0]), int(b[1]), np.asarray(saved["best_values"]))
        self.stale = int(saved["stale"])


def _lm_loop(
    runner: "_LM", theta, state, track: _Track, fp: str, ckpt: Path | None, saved: dict | None, progress: bool
) -> dict:
    """Levenberg–Marquardt's steps with held-out tracking and a checkpoint after each (resumed from ``saved``)."""
    from tqdm.auto import tqdm

    fit = track.fit
    hist: dict[str, list] = {k: [] for k in History._fields}
    if saved is not None:
        theta, state = runner.restore(saved)
        hist = {k: list(saved[f"history/{k}"]) for k in History._fields}
        track.restore(saved)
    bar = tqdm(total=fit.steps, initial=len(hist["step"]), desc="identify (lm)", disable=not progress, leave=False)
    try:
        for k in range(len(hist["step"]), fit.steps):
            if track.stop:
                break
            t = time.perf_counter()
            theta, state, loss, accepted, converged = runner.step(theta, state, k)
            values, held = track.after(k + 1, theta, loss, converged)
            for name, v in zip(History._fields, (k + 1, loss, held, values, accepted, time.perf_counter() - t)):
                hist[name].append(v)
            if ckpt is not None:
                arrays = {f"history/{n}": np.asarray(v) for n, v in hist.items()}
                arrays.update(runner.save(theta, state), **track.state())
                checkpoint.save(ckpt, fp, arrays)
            bar.update()
            bar.set_postfix(loss=f"{loss:.3g}", **({"held_out": f"{held:.3g}"} if math.isfinite(held) else {}))
    finally:
        bar.close()
    return hist


class _LM:
    """``lm``: Levenberg–Marquardt (Marquardt's scaling, Nielsen's damping update, steps capped at
    ``fit.max_step``) on the residual vector.

    One compiled program, the residual and its forward-mode Jacobian at a point
    (:meth:`Problem.evaluate`), serves every step: a trial point's Jacobian is the next step's if the
    trial is accepted (most are). It also gives the start's loss, the returned values' loss and the
    intervals, and it serves later fits of a model of the same structure with the same settings
    in the same process (other starts, data, bounds), which skip its tracing and compilation.

    A fit method (registered in :data:`FIT_METHODS`) is a class like this one: ``simulation(cfg)``
    (the config its problem simulates with), ``init``, ``start`` (the start's loss and Jacobian, or
    None), ``run`` (every step, tracked and checkpointed: the history) and ``end`` (the loss,
    residual and Jacobian at the returned values; None for the last two without intervals), and
    optionally ``evaluates_loss`` (False: ``start`` may return a NaN loss for "not evaluated"; a
    method without it must return a finite start loss, or the fit is refused)."""

    @staticmethod
    def simulation(cfg: Config) -> Config:
        """The simulation differentiated in forward mode (Jacobians), simulating as ``cfg`` does."""
        return forward_config(cfg)

    def __init__(self, problem: Problem, fit: FitConfig):
        self.fit = fit
        self.problem = problem
        self.exhausted: np.ndarray | None = None  # the last evaluation's segments out of step budget
        self.stalled: float | None = None  # the linear model's promise where the steps stalled (linear_gain)

    def evaluate(self, theta):
        r, j, self.exhausted = self.problem.evaluate(theta, flags=True)
        return np.asarray(r), np.asarray(j)

    def init(self, theta):
        r, j = self.evaluate(theta)
        return {"theta": np.asarray(theta), "r": r, "j": j, "mu": self.fit.damping, "nu": 2.0}

    def start(self, theta, state):
        return float(state["r"] @ state["r"]), state["j"]

    def run(self, theta, state, track: "_Track", fp: str, ckpt: Path | None, saved: dict | None, progress: bool):
        return _lm_loop(self, theta, state, track, fp, ckpt, saved, progress)

    def end(self, theta):
        r, j = self.evaluate(theta)
        return float(r @ r), r, j

    def step(self, theta, state, k):
        r, j, mu = state["r"], state["j"], state["mu"]
        jtj, g = j.T @ j, j.T @ r
        diag = np.diag(jtj)
        dscale = np.maximum(diag, 1e-6 * max(float(np.max(diag)), 1e-300))
        loss = float(r @ r)
        try:
            delta = -np.linalg.solve(jtj + mu * np.diag(dscale), g)
        except np.linalg.LinAlgError:
            delta = -g / (mu * dscale)
        longest = float(np.max(np.abs(delta))) if delta.size else 0.0
        if longest > self.fit.max_step:  # a trust region in the coordinates: far jumps leave the linear model
            delta = delta * (self.fit.max_step / longest)
        trial = state["theta"] + delta
        r2, j2 = self.evaluate(jnp.asarray(trial))
        loss2 = float(r2 @ r2) if np.all(np.isfinite(r2)) else math.inf
        lin = r + j @ delta
        predicted = loss - float(lin @ lin)  # the decrease the linear model promises
        rho = (loss - loss2) / predicted if predicted > 0 else -1.0
        if rho > 0 and np.all(np.isfinite(j2)):
            state = {"theta": trial, "r": r2, "j": j2, "mu": mu * max(1 / 3, 1 - (2 * rho - 1) ** 3), "nu": 2.0}
            small_step = np.max(np.abs(delta)) <= self.fit.xtol * (np.max(np.abs(trial)) + self.fit.xtol)
            converged = bool(small_step or (loss - loss2) <= self.fit.ftol * loss or loss2 == 0.0)
            return jnp.asarray(trial), state, loss2, True, converged
        state = {**state, "mu": mu * state["nu"], "nu": 2 * state["nu"]}
        # five rejections in a row (the damping 2^15 times larger): no step along the linear model lowers the
        # loss any more, which is where the simulation's own error floor stops a converged fit. Unless the
        # linear model still promises much of the loss: then the Jacobian is wrong there, and the fit stalled
        stop = bool(state["nu"] >= 2.0**6)
        if stop:
            gain = linear_gain(r, j)
            self.stalled = gain if gain > STALL_GAIN else None
        return jnp.asarray(state["theta"]), state, loss, False, stop

    def save(self, theta, state) -> dict:
        return {"theta": np.asarray(state["theta"]), "lm/mu": np.asarray(state["mu"]), "lm/nu": np.asarray(state["nu"])}

    def restore(self, saved):
        theta = jnp.asarray(saved["theta"])
        state = self.init(theta)
        state.update(mu=float(saved["lm/mu"]), nu=float(saved["lm/nu"]))
        return theta, state


class _Adam:
    """``adam``: Adam steps on minibatches of segments (every group in proportion to its size); the
    gradient in reverse mode through the config's adjoint, or in forward mode (one tangent per
    component, cheaper for a few parameters) when the config's ``integrator.adjoint`` has no reverse
    mode (``forward``). With ``fit.intervals``, :class:`_LM`'s program (compiled for that only) gives
    the start's Jacobian and the intervals."""

    @staticmethod
    def simulation(cfg: Config) -> Config:
        return cfg

    def __init__(self, problem: Problem, fit: FitConfig):
        import optax

        self.problem, self.fit = problem, fit
        self.jacobians = _LM(_forward(problem), fit) if fit.intervals else None
        self.scale = optax.scale_by_adam(**ADAM)
        total = sum(g.size for g in problem.groups)
        want = total if fit.batch_size is None else min(fit.batch_size, total)
        ndev = len(jax.devices())  # minibatches are sharded over every device: sizes are multiples of their count
        self.sizes = [max(ndev, round(want * g.size / total) // ndev * ndev) for g in problem.groups]
        for g, n in zip(problem.groups, self.sizes):
            if g.size < n:
                raise ValueError(
                    f"the recordings of model variant {g.variant} sampled every {g.dt:g} s hold {g.size} segments, "
                    f"fewer than their share of a minibatch ({n}: fit.batch_size={fit.batch_size}, a multiple of the "
                    f"{ndev} devices); record more, lower fit.horizon or fit.stride, or run on fewer devices"
                )
        groups = problem.groups
        weights = [n * problem.horizon for n in self.sizes]

        def loss(theta, coords, bases, batches):
            values = problem.params.to_values(theta, coords)
            sq = [
                jnp.sum(problem.group_residuals(values, k, base, b) ** 2)
                for k, (base, b) in enumerate(zip(bases, batches))
            ]
            return sum(sq) / float(sum(weights))

        forward = not GRADIENT_MODES[problem.cfg.integrator.adjoint].reverse  # forward mode only: P tangents

        def value_and_grad(theta, coords, bases, batches):
            if forward:
                grad, value = jax.jacfwd(lambda th: (loss(th, coords, bases, batches),) * 2, has_aux=True)(theta)
                return value, grad
            return jax.value_and_grad(loss)(theta, coords, bases, batches)

        def step(theta, opt_state, lr, coords, bases, batches):
            value, grad = value_and_grad(theta, coords, bases, batches)
            updates, opt_state = self.scale.update(grad, opt_state, theta)
            return theta - lr * updates, opt_state, value, grad

        self._step = jax.jit(step)
        self.groups = groups
        coords, data = problem.arguments()
        # the step's constants on every device its minibatch is sharded over (with several devices
        # or processes, a jitted step refuses arguments placed on one device beside sharded ones)
        self.replicated = batch_sharding(ndev)[1]
        self.coords, self.bases, self.lr = replicate(
            (coords, [base for base, _ in data], np.float64(fit.learning_rate)), self.replicated
        )
        self._full = None

    def init(self, theta):
        return self.scale.init(theta)

    @property
    def exhausted(self) -> np.ndarray | None:
        """The segments out of step budget at the intervals' last evaluation (None without intervals)."""
        return None if self.jacobians is None else self.jacobians.exhausted

    @property
    def evaluates_loss(self) -> bool:
        return self.fit.full_loss or self.jacobians is not None

    def start(self, theta, state):
        if self.jacobians is not None:  # the intervals' program gives the loss with the Jacobian
            r, jac = self.jacobians.evaluate(theta)
            return float(np.asarray(r) @ np.asarray(r)), jac
        return (self.loss(theta) if self.fit.full_loss else math.nan), None

    def end(self, theta):
        if self.jacobians is None:
            return (self.loss(theta) if self.fit.full_loss else math.nan), None, None
        return self.jacobians.end(theta)

    def loss(self, theta) -> float:
        """The loss on every segment: the step's own program (placed as :meth:`run` places its
        arguments, so it is not compiled again) when a step takes them all, else a minibatch's
        worth of segments at a time (one program per group, memory bounded by the minibatch)."""
        if all(n == g.size for g, n in zip(self.groups, self.sizes)):
            placed = []
            for g in self.groups:
                batch, _ = batch_sharding(g.size)
                placed.append(
                    tuple(None if a is None else sharded_rows(a, np.arange(g.size), batch) for a in g.arrays())
                )
            theta, state = replicate((theta, self.init(theta)), self.replicated)
            return float(self._step(theta, state, self.lr, self.coords, self.bases, placed)[2])
        if self._full is None:
            problem = self.problem

            def chunk(theta, coords, base, arrays, mask, k):
                r = problem.group_residuals(problem.params.to_values(theta, coords), k, base, arrays)
                return jnp.sum(mask[:, None, None] * r * r)

            self._full = jax.jit(chunk, static_argnums=5)
        local = _local(theta)
        coords, data = self.problem.arguments()
        total = 0.0
        for k, (g, n) in enumerate(zip(self.groups, self.sizes)):
            for first in range(0, g.size, n):
                rows = np.arange(first, first + n)  # the last chunk repeats rows, masked out
                mask = (rows < g.size).astype(np.float64)
                total += float(self._full(local, coords, data[k][0], g.take(rows % g.size).arrays(), mask, k))
        return total / float(self.problem.states)

    def run(self, theta, state, track: _Track, fp: str, ckpt: Path | None, saved, progress: bool) -> dict:
        """Adam's steps through :func:`diffmjx.sysid.train.adam_loop` (minibatches, sharding,
        checkpoints; it resumes from ``ckpt`` itself, so ``state`` and ``saved`` are unused)."""

        fit = self.fit
        data = [g.arrays() for g in self.groups]
        # a group's arrays may hold None (no sensors): the loop shards arrays, the step takes the tuple back
        present = [tuple(i for i, a in enumerate(arrays) if a is not None) for arrays in data]
        packed = [tuple(arrays[i] for i in idx) for arrays, idx in zip(data, present)]

        def unpack(batches):
            out = []
            for b, idx in zip(batches, present):
                full: list = [None] * len(data[0])
                for i, a in zip(idx, b):
                    full[i] = a
                out.append(tuple(full))
            return out

        def step(theta, opt_state, batches):
            return self._step(theta, opt_state, self.lr, self.coords, self.bases, unpack(batches))

        per_epoch = min(g.size // n for g, n in zip(self.groups, self.sizes))
        held_log: list[float] = []

        def on_step(number, theta, loss, extra):
            _, held = track.after(number, theta, loss)
            held_log.append(held)
            extra.update(track.state(), held_out=np.asarray(held_log))
            return track.stop or number >= fit.steps

        def on_resume(extra):
            if "best" in extra:
                track.restore(extra)
                held_log.extend(np.asarray(extra["held_out"]).tolist())

        loop = adam_loop(
            step,
            theta,
            packed,
            self.sizes,
            epochs=-(-fit.steps // per_epoch),
            steps_per_epoch=per_epoch,
            seed=fit.seed,
            fingerprint=fp,
            checkpoint_path=ckpt,
            progress=progress,
            desc="identify (adam)",
            record=lambda th: {"values": np.asarray(track.ps.to_values(th))},
            on_step=on_step,
            on_resume=on_resume,
            hint=_CKPT_HINT,
            knobs={
                "batch_size": "fit.batch_size",
                "steps_per_epoch": "fit.batch_size",
                "epochs": "fit.steps",
                "checkpoint": "checkpoint_path",
            },
        )
        h = loop.history
        n = len(h["step"])
        return {
            "step": h["step"],
            "loss": h["loss"],
            "held_out": list(loop.extra.get("held_out", [math.nan] * n)),
            "values": h["values"],
            "accepted": [True] * n,
            "wall_s": h["wall_s"],
        }


FIT_METHODS.register("lm", _LM)
FIT_METHODS.register("adam", _Adam)


def confidence_intervals(r, jac, labels: Sequence[str], values, level: float = 0.95, segments=None, bias=None):
    """Gauss–Newton confidence intervals and unidentifiable directions from the residual ``r`` and its
    Jacobian ``jac`` in physical values (:attr:`IdentifyResult.residual`, ``.jacobian``,
    ``.segments``): ``({label: Interval}, unidentifiable)`` as :func:`identify` reports them.

    The covariance is the cluster-robust sandwich ``A^-1 B A^-1`` (``A = J^T J``; ``B`` sums
    ``g_s g_t^T`` of the segments' gradient terms over every pair of segments of one recording that
    share a recorded sample, ``segments`` = :meth:`Problem.row_segments`): a recorded state's noise
    enters every prediction from it and every residual against it, so the residuals of a segment, and
    of overlapping segments, are correlated, and ``s^2 A^-1`` (independent residuals, used where
    ``segments`` is None) is too narrow. Each segment's term is ``J_s^T (I - H_s)^-1 r_s`` with its
    leverage ``H_s = J_s A^-1 J_s^T`` taken out (the jackknife-like CR3 form: a few segments that
    carry most of a parameter's information, a contact's bounces, would otherwise shrink their own
    residuals). Student's t, per component with the degrees of freedom of its variance estimate
    (:func:`_cluster_dof`: at most the segments less the parameters, fewer where a few segments carry
    the component's information).

    ``bias`` (:func:`tolerance_bias`, per component), if given, widens each interval to hold the
    value and the value plus its bias, and half the bias more (:class:`Interval`)."""
    from scipy import sparse, stats

    r, jac = np.asarray(r), np.asarray(jac)
    n, p = jac.shape
    w, v, null, inv = _gauss_newton(jac)
    top = max(float(w[-1]), 1e-300)
    if segments is None or len(segments[0]) != n:
        dof = max(n - p, 1)
        cov = inv * (float(r @ r) / dof)
    else:
        seg, keys, horizon = segments
        nseg = len(keys)
        g = np.zeros((nseg, p))
        # per segment, the rows (I - H_s)^-1 J_s A^-1 that weigh its residuals into each component's
        # variance (their norms and their products with J: the degrees of freedom below)
        weight_sq, weight_jac = np.zeros((nseg, p)), np.zeros((nseg, p, p))
        cuts = np.flatnonzero(np.diff(seg)) + 1  # a segment's rows are contiguous
        for rows in np.split(np.arange(n), cuts):
            js = jac[rows]
            lev = np.eye(len(rows)) - js @ inv @ js.T  # I - H: the segment's leverage taken out (CR3)
            rhs = np.column_stack([r[rows], js @ inv])  # the residuals and the weights, one solve
            try:
                sol = np.linalg.solve(lev, rhs)
            except np.linalg.LinAlgError:
                sol = np.linalg.lstsq(lev, rhs, rcond=None)[0]
            rs, ws = sol[:, 0], sol[:, 1:]
            k = seg[rows[0]]
            g[k] = js.T @ rs
            weight_sq[k], weight_jac[k] = np.sum(ws * ws, axis=0), ws.T @ js
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        g, keys, weight_sq, weight_jac = g[order], keys[order], weight_sq[order], weight_jac[order]
        # W: which segments' terms the meat multiplies, each with itself and with every segment of its
        # recording it shares a sample with (sorted by recording and start: those are the near lags)
        first, second = [np.arange(nseg)], [np.arange(nseg)]
        lag = 1
        while lag < nseg:
            near = (keys[lag:, 0] == keys[:-lag, 0]) & (keys[lag:, 1] - keys[:-lag, 1] <= horizon)
            if not near.any():
                break
            i = np.flatnonzero(near)
            first += [i, i + lag]
            second += [i + lag, i]
            lag += 1
        rows_, cols_ = np.concatenate(first), np.concatenate(second)
        pairs = sparse.csr_matrix((np.ones(rows_.size), (rows_, cols_)), shape=(nseg, nseg))
        meat = g.T @ (pairs @ g)
        mw, mv = np.linalg.eigh(meat)
        meat = (mv * np.maximum(mw, 0.0)) @ mv.T
        cov = inv @ meat @ inv
        dof = _cluster_dof(weight_sq, weight_jac, inv, pairs)
    std = np.sqrt(np.maximum(np.diag(cov), 0.0))
    touched = np.any(np.abs(v[:, null]) > 1e-3, axis=1) if null.any() else np.zeros(p, bool)
    std = np.where(touched, np.inf, std)
    t = stats.t.ppf(0.5 + level / 2, np.broadcast_to(dof, (p,)))
    intervals = {
        lab: Interval(
            float(values[i]), float(values[i] - t[i] * std[i]), float(values[i] + t[i] * std[i]), float(std[i])
        )
        for i, lab in enumerate(labels)
    }
    if bias is not None:
        intervals = _with_bias(intervals, bias)
    unident = []
    for j in np.flatnonzero(null):
        vec = v[:, j]
        order = np.argsort(-np.abs(vec))
        unident.append((float(w[j] / top), {labels[i]: float(vec[i]) for i in order if abs(vec[i]) > 1e-3}))
    return intervals, unident
