"""The planners of :mod:`diffmjx.mpc`: their knobs (:class:`PlannerConfig`) and one class per kind.

Each kind is a small class with ``init``, ``step`` and ``finish`` (see :class:`GradientMethod`),
registered in :data:`PLANNERS` (:data:`diffmjx.registry.PLANNERS`, ``planner.kind``'s choices);
:func:`diffmjx.mpc.make_planner` and :func:`diffmjx.mpc.closed_loop` drive them and know none by
name. Adding a planner is one class and one ``PLANNERS.register(name, cls)``.

- :class:`GradientMethod` (``gradient``): Adam on the plan, the lowest-cost iterate kept.
- :class:`SamplingMethod` (``sampling``): predictive sampling with coloured noise
  (:func:`coloured_noise`), the cheapest sample kept.
- :class:`HybridMethod` (``hybrid``): sampling, then gradient iterations from the best sample.
- :class:`ILQRMethod` (``ilqr``): iLQR iterations (:mod:`diffmjx.mpc.ilqr`).

Everything public here is re-exported by :mod:`diffmjx.mpc`.

Why one file of this length: the four planner kinds share their knobs (:class:`PlannerConfig`) and
the registry; each class is under about 90 lines.
"""

import dataclasses
import typing
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from diffmjx.config import Config, Preset, Section, knob
from diffmjx.integration.integrate import rollout
from diffmjx.jacobians import JACOBIANS, forward_config
from diffmjx.mpc import ilqr
from diffmjx.physics.dynamics import ctrl_bounds, ctrl_width
from diffmjx.registry import PLANNERS

__all__ = [
    "PLANNERS",
    "GradientMethod",
    "HybridMethod",
    "ILQRMethod",
    "PlannerConfig",
    "SamplingMethod",
    "check_cost",
    "coloured_noise",
    "plan_cost",
    "replicate",
    "replicated_sharding",
]


def _check_reach(key: str, value) -> tuple[float, ...]:
    """``planner.ilqr_reach``: a (possibly empty) sequence of shares in (0, 1]."""
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 < v <= 1.0 for v in value
    )
    if not ok:
        raise ValueError(
            f"{key}={value!r} is invalid; expected a list of shares of the control range, each in (0, 1] "
            "(e.g. [0.1, 0.3]; [] turns the rescaled steps off)"
        )
    return tuple(float(v) for v in value)


@dataclasses.dataclass(frozen=True)
class PlannerConfig(Section, Preset):
    """Knobs of the planners. The defaults are chosen on the planner suite (nine tasks nobody tuned
    for, three random starts each, every planner at equal time per plan step, docs/mpc.md): iLQR
    with contacts from distance (``kind=ilqr``, ``cfd=true``) landed 26 of 27 starts, Adam with
    contacts from distance 13, Adam without them 6, predictive sampling 10. The other knobs are the
    paper's gradient MPC (App. E.3) but for those swept on the suite (Adam's ``learning_rate``,
    iLQR's ``ilqr_*``); the ``paper`` preset is the paper's (Adam, no CFD, learning rate 0.01).

    Presets (:meth:`load`, :meth:`from_yaml`, :meth:`to_yaml`): a path, or the name of
    ``diffmjx/presets/planner_<name>.yaml`` (``paper``, ``quick``), its fields under ``planner:`` or at
    the top level.

    Attributes:
        kind: ``ilqr`` (the default), ``gradient``, ``sampling`` or ``hybrid``.
        cfd: the planner's derivatives carry contacts from distance: :func:`~diffmjx.mpc.make_planner`
            plans with ``sim``'s ``cfd.enabled`` set (its width and shape from ``sim``'s ``cfd``
            section) for the kinds that differentiate their plans (not ``sampling``). CFD acts on
            derivatives only, so the rollouts, and what is executed, are the plain physics';
            where the cost is flat until a contact is made, gradients without it see nothing
            (docs/mpc.md). false: ``sim``'s own ``cfd.enabled``.
        horizon: H, control periods per plan.
        execute: E, controls executed per plan step (then the plan shifts by E).
        learning_rate: Adam's step size (gradient, hybrid) as a fraction of each actuator's control
            range (of 1 for unlimited actuators), like ``noise_scale``: the same value moves a
            muscle's [0, 1] and a motor's [-100, 100] alike.
        iterations: K, gradient or iLQR iterations per plan step (gradient, hybrid, ilqr).
        first_iterations: iterations on a closed loop's first plan step, whose plan starts from
            nothing (the later ones start from the shifted plan that the last step refined); null:
            ``iterations``. Only :func:`~diffmjx.mpc.closed_loop` reads it (a planner's ``plan``
            is one plan step and runs ``iterations``).
        clip_norm: largest global norm of a gradient step's gradient; null: no clipping.
        samples: k, plans evaluated per plan step (sampling, hybrid), the nominal one included.
        noise_scale: standard deviation of the sampling noise as a fraction of each actuator's
            control range (of 1 for unlimited actuators).
        noise_beta: exponent of the noise's power spectrum 1/f^beta: 0 white, 1 pink, 2 brown.
        sample_batch: samples evaluated together in one ``vmap``; the batches run one after
            another (``jax.lax.map``). null: all at once (best on a GPU); on a CPU a vmap of a
            large model can be far slower than evaluating samples one by one.
        shard: shard sample batches over all visible devices.
        regularization: iLQR's first ``mu`` (ilqr; where it goes: ``ilqr_regularization``); each
            iteration tries ``mu, mu/100, 100 mu`` and keeps the cheapest's (none cheaper:
            ``ilqr_retries``, then a larger ``mu``).
        line_search: iLQR's candidate steps tried at once per iteration (ilqr): the three
            regularisations at the full step, then the three at a quarter of it, and so on.
        ilqr_box_qp: iLQR's control bounds by a box-constrained QP in the backward pass (clamped
            controls get no feedback) instead of projecting the rolled-out controls (ilqr;
            :func:`diffmjx.mpc.ilqr.iteration`'s ``box``). Measured in docs/mpc.md: on the MyoHand baoding
            plan (muscles starting at their lower bound) 4 iterations end lower than without it; on the
            box pushing plans they end higher on average.
        ilqr_retries: where none of an iLQR iteration's candidate steps lowers the cost, up to this
            many more rounds of candidates at regularisations above all tried, on the same Jacobians
            (ilqr; :func:`diffmjx.mpc.ilqr.iteration`'s ``retries``): a rejected step leaves the plan,
            and so its linearisation, unchanged, so a retry costs rollouts and a backward pass, where
            the next iteration would recompute the same Jacobians. 0: a rejected iteration ends.
        ilqr_regularization: where iLQR adds ``mu`` (ilqr; :func:`diffmjx.mpc.ilqr.iteration`'s
            ``state_regularization``): ``control``, to ``Q_uu``; ``state``, to the next state's value
            Hessian, so a step is penalised by how far it moves the state (``Q_uu + mu B'B``, feedback
            gains alike; Tassa, Erez and Todorov 2012). Measured in docs/mpc.md: ``state`` reaches
            Adam's cost on more single plans, ``control`` lands the pushed box closer (median) in
            the contact study's closed loops.
        ilqr_reuse: after an accepted iLQR round, up to this many more rounds on the same Jacobians
            (ilqr; :func:`diffmjx.mpc.ilqr.iteration`'s ``reuse``): chord steps, the cost's derivatives
            taken at the new plan, each kept only if it lowers the cost. A round costs rollouts, a
            backward pass and the cost's Hessians, not a :func:`diffmjx.linearize`. 0: one round.
        ilqr_cost_hessian: the running cost's Hessian in iLQR's quadratic model (ilqr;
            :func:`diffmjx.mpc.ilqr.iteration`'s ``convex``): ``psd``, its negative eigenvalues set to
            zero (a convex cost's unchanged); ``exact``, as ``jax.hessian`` gives it. Measured on the
            planner suite (docs/mpc.md): with ``exact``, iLQR left every hanging pendulum hanging
            (the cost ``1 - cos`` is curved downwards there), with ``psd`` it swings them up.
        ilqr_jacobian: what iLQR's linearisation differentiates (ilqr; :func:`diffmjx.linearize`'s
            ``jacobian``): ``period``, every control period whole; ``substep``, one substep of a
            fixed-step simulation (``integrator.solver`` ``mjx_*``) at each period's start, held for
            the period (an approximation, one forward-mode step per period instead of ``substeps``);
            ``auto``, ``substep`` where the planning model steps at fixed steps, else ``period``.
            Measured on the planner suite (docs/mpc.md): ``substep`` affords up to 11x the iterations
            but lands 12 of 18 unseen starts against ``period``'s 14, so ``period`` is the default.
        ilqr_reach: shares of each actuator's control range (of 1 for an unlimited one), each in
            (0, 1]: for each, iLQR also tries its step at ``mu`` rescaled so that its largest control
            change is that share (ilqr; :func:`diffmjx.mpc.ilqr.iteration`'s ``reach``), beside the
            line search's candidates and judged like them. Where the cost is flat until a contact is
            made (the object's cost before the actuated body reaches it, plus effort), contacts from
            distance give a small gradient, and the Newton step, scaled by it against the effort's
            curvature, barely moves (on the planner suite's tipped box, 5e-4 of the range: every
            iteration rejected); a step of fixed length along it reaches the contact. ``[]``: the
            line search's candidates only.
        time_budget: seconds of wall time per plan step in :func:`~diffmjx.mpc.closed_loop`: its
            iterations stop before the next would take the plan step past the budget (at least one
            runs; ``iterations`` stays the most), so planners compare at equal time per plan step;
            null: ``iterations`` always. Sampling under a budget draws further batches of
            ``sample_batch`` candidates as its iterations (:class:`SamplingMethod`). ``plan`` (one
            traced program) runs every iteration (sampling: every batch) and ignores the clock.
        ilqr_explore: plans sampled around iLQR's plan after each of its iterations (ilqr): coloured
            noise of ``noise_scale`` and ``noise_beta`` as predictive sampling draws it, in batches of
            ``sample_batch``; the cheapest replaces the plan if it costs less (``mu`` stays). Where the
            cost is flat because the actuated body is beyond contacts from distance's reach (the
            object's cost before it is touched, plus effort), the Newton step is zero and every
            iteration is rejected; where the model's gradient leads to a touch that does not move the
            object the way the cost wants, iLQR settles beside it. Random plans find the touch in
            both cases (on the planner suite's finger, docs/mpc.md). 0: iLQR's steps only.
        keep_best: execute the lowest-cost iterate of the gradient iterations (gradient, hybrid), and
            accept only iLQR steps that lower the cost (ilqr); false: the last gradient iterate (if
            finite), and iLQR's full step where no step lowers the cost. Keeping the best never executes a plan worse than
            the nominal one, but where the cost is flat until a contact is made (the object's cost
            before the actuated body reaches it, plus effort) every step towards the contact costs
            more than standing still and is never executed: contacts from distance point the way
            and only the last iterate follows it.
    """

    _section: typing.ClassVar[str] = "planner"
    _preset_kind: typing.ClassVar[str] = "planner"
    kind: str = knob("ilqr", choices=PLANNERS)
    cfd: bool = knob(True)
    horizon: int = knob(256, ge=1)
    execute: int = knob(16, ge=1)
    learning_rate: float = knob(0.1, gt=0.0)
    iterations: int = knob(32, ge=0)
    first_iterations: int | None = knob(None, ge=0)
    clip_norm: float | None = knob(1.0, gt=0.0)
    samples: int = knob(64, ge=1)
    noise_scale: float = knob(0.1, ge=0.0)
    noise_beta: float = knob(2.0, ge=0.0)
    sample_batch: int | None = knob(None, ge=1)
    shard: bool = knob(True)
    regularization: float = knob(1e-3, gt=0.0)
    line_search: int = knob(6, ge=1)
    ilqr_box_qp: bool = knob(False)
    ilqr_retries: int = knob(2, ge=0)
    ilqr_regularization: str = knob("control", choices=("control", "state"))
    ilqr_reuse: int = knob(0, ge=0)
    ilqr_cost_hessian: str = knob("psd", choices=("psd", "exact"))
    ilqr_jacobian: str = knob("period", choices=(*JACOBIANS, "auto"))
    ilqr_reach: tuple[float, ...] = knob((0.1, 0.3), check=_check_reach)
    ilqr_explore: int = knob(8, ge=0)
    keep_best: bool = knob(True)
    time_budget: float | None = knob(None, gt=0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.execute > self.horizon:
            raise ValueError(
                f"planner.execute={self.execute} is out of range; it must be <= planner.horizon={self.horizon}"
            )


def coloured_noise(key, shape, beta: float):
    """Gaussian noise with power spectrum ~ 1/f^beta along axis -2 (time), unit variance.

    Arguments:
        key: ``jax.random`` key.
        shape: ``(..., T, n)``.
        beta: 0 white, 1 pink, 2 brown (random-walk-like: neighbouring controls move together).

    Returns:
        An array of ``shape``.
    """
    *lead, steps, n = shape
    if steps == 1 or beta == 0.0:
        return jax.random.normal(key, shape)
    f = np.fft.rfftfreq(steps)
    f[0] = f[1]  # lowest frequency: the series' own length
    amp = f ** (-beta / 2.0)
    # variance of each sample of the real series (irfft's 1/T included): terms of weight 2 for the
    # real-only zero and Nyquist frequencies, 4 for the complex ones
    weight = np.full(f.size, 4.0)
    weight[0] = 2.0
    if steps % 2 == 0:
        weight[-1] = 2.0
    sigma = np.sqrt(np.sum(weight * amp**2)) / steps
    k1, k2 = jax.random.split(key)
    re = jax.random.normal(k1, (*lead, n, f.size)) * amp
    im = jax.random.normal(k2, (*lead, n, f.size)) * amp
    im = im.at[..., 0].set(0.0)
    re = re.at[..., 0].multiply(np.sqrt(2.0))
    if steps % 2 == 0:
        im = im.at[..., -1].set(0.0)
        re = re.at[..., -1].multiply(np.sqrt(2.0))
    y = jnp.fft.irfft(re + 1j * im, n=steps, axis=-1) / sigma
    return jnp.swapaxes(y, -1, -2)


def cost_name(cost) -> str:
    """How messages name a cost function: its qualified name, else its ``repr``."""
    return getattr(cost, "__qualname__", None) or repr(cost)


def check_cost(cost, d) -> None:
    """Check that ``cost(d, ctrl)`` returns a real scalar (from shapes alone; nothing is computed).

    Arguments:
        cost: the running cost ``cost(d, ctrl) -> scalar``.
        d: an ``mjx.Data`` of the model (its shapes are what is read).

    Raises:
        ValueError: naming the cost function and what it returned, for a cost that is not a scalar
            of a real floating type, or that fails on the model's data.
    """
    try:
        out = jax.eval_shape(cost, d, d.ctrl)
    except Exception as e:
        raise ValueError(f"cost function {cost_name(cost)!r} fails on the model's data: {e}") from e
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape != () or dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        what = f"shape {shape} of {dtype}" if shape is not None else type(out).__name__
        raise ValueError(
            f"cost function {cost_name(cost)!r} returns {what}; it must return a real scalar, the running "
            "cost of one period's end state (sum or weight a vector of costs yourself)"
        )


def plan_cost(m, d, ctrls, cost, sim: Config, dt0=None):
    """Summed running cost of ``ctrls`` from ``d`` and the step size to continue with.

    Arguments:
        m, d: model and state.
        ctrls: (H, nu) plan.
        cost: ``cost(d, ctrl) -> scalar`` of one period's end state.
        sim: simulation :class:`~diffmjx.Config`.
        dt0: first integrator step (see :func:`diffmjx.rollout`).

    Returns:
        ``(total cost, Trajectory)``.
    """
    _, traj = rollout(m, d, ctrls, sim, observe=lambda x: cost(x, x.ctrl), dt0=dt0)
    return jnp.sum(traj.obs), traj


def replicate(tree):
    """``tree`` placed on every visible device (replicated), so a jitted plan step that shards its
    samples over them can take it; unchanged with one device.

    Arguments:
        tree: a pytree of arrays (an ``mjx.Data``, a plan).

    Returns:
        The same pytree, replicated over a 1-D mesh of all devices.
    """
    sharding = replicated_sharding()
    return tree if sharding is None else jax.device_put(tree, sharding)


def replicated_sharding():
    """Replicated sharding over a 1-D mesh of all devices; None with one device."""
    devices = jax.devices()
    if len(devices) < 2:
        return None
    return jax.sharding.NamedSharding(jax.sharding.Mesh(np.asarray(devices), ("batch",)), jax.sharding.PartitionSpec())


def _shard_samples(x, cfg: PlannerConfig):
    devices = jax.devices()
    if not cfg.shard or len(devices) < 2 or x.shape[0] % len(devices):
        return x
    mesh = jax.sharding.Mesh(np.asarray(devices), ("batch",))
    spec = jax.sharding.PartitionSpec("batch", *([None] * (x.ndim - 1)))
    return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(mesh, spec))


def _sample(m, d, nominal, cost, key, dt0, cfg: PlannerConfig, sim: Config, keep_nominal: bool = True):
    lo, hi = ctrl_bounds(m)
    width = ctrl_width(m)
    noise = coloured_noise(key, (cfg.samples, *nominal.shape), cfg.noise_beta) * cfg.noise_scale * width
    cands = jnp.clip(nominal[None] + noise, lo, hi)
    cands = cands.at[0].set(nominal) if keep_nominal else cands
    cands = _shard_samples(cands, cfg)
    one = lambda u: plan_cost(m, d, u, cost, sim, dt0)[0]
    if cfg.sample_batch is None or cfg.sample_batch >= cfg.samples:
        costs = jax.vmap(one)(cands)
    else:
        costs = jax.lax.map(one, cands, batch_size=cfg.sample_batch)
    costs = jnp.where(jnp.isfinite(costs), costs, jnp.inf)
    best = jnp.argmin(costs)
    return cands[best], costs[best], costs


class _Descent(NamedTuple):
    """Carry of the gradient iterations: the iterate, Adam's state, and the lowest-cost plan seen."""

    u: jax.Array
    opt_state: typing.Any
    best_u: jax.Array
    best_c: jax.Array


def _optimizer(cfg: PlannerConfig):
    steps = [optax.adam(cfg.learning_rate, b1=0.9, b2=0.999)]
    if cfg.clip_norm is not None:
        steps.insert(0, optax.clip_by_global_norm(cfg.clip_norm))
    return optax.chain(*steps)


class GradientMethod:
    """``gradient``: Adam steps on the plan (see the module docstring).

    Every planner kind is a class like this one, which :func:`make_planner` and
    :func:`closed_loop` both drive: ``init`` builds the carry of the iterations from the nominal
    plan, ``step`` runs one iteration (``iterations`` of them per plan step) and returns the carry
    and ``(cost of the iterate, finite)``, ``finish`` returns the plan to execute and its cost. A
    new planner is one such class registered in :data:`PLANNERS`. Its ``differentiates`` (True
    if absent) says whether it takes derivatives of its plans, so whether ``planner.cfd`` applies."""

    differentiates = True

    def __init__(self, cfg: PlannerConfig, sim: Config):
        self.cfg, self.sim = cfg, sim
        self.iterations = cfg.iterations

    def init(self, m, d, nominal, cost, key, dt0):
        """The carry the iterations start from and the sample costs (empty without sampling)."""
        return _Descent(
            nominal, _optimizer(self.cfg).init(nominal), nominal, jnp.asarray(jnp.inf, nominal.dtype)
        ), jnp.zeros((0,), nominal.dtype)

    def step(self, m, d, carry, cost, dt0):
        """One gradient iteration: evaluate the iterate and its gradient, remember it if it is the
        cheapest so far, take a clipped Adam step (scaled by each actuator's control range) and clip to
        the control ranges. A non-finite cost or gradient skips the step."""
        cfg, sim = self.cfg, self.sim
        lo, hi = ctrl_bounds(m)
        opt = _optimizer(cfg)
        u, state, best_u, best_c = carry
        c, g = jax.value_and_grad(lambda u: plan_cost(m, d, u, cost, sim, dt0)[0])(u)
        finite = jnp.isfinite(c) & jnp.all(jnp.isfinite(g))
        better = finite & (c < best_c)
        best_u, best_c = jnp.where(better, u, best_u), jnp.where(better, c, best_c)
        update, new_state = opt.update(jnp.where(finite, g, 0.0), state, u)
        u_new = jnp.clip(optax.apply_updates(u, update * ctrl_width(m)), lo, hi)
        u = jnp.where(finite, u_new, u)
        state = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new_state, state)
        return _Descent(u, state, best_u, best_c), (c, finite)

    def finish(self, m, d, carry, cost, dt0):
        """The lowest-cost plan (or the last, ``keep_best`` false), after evaluating the last iterate
        (never evaluated by a step)."""
        if not self.iterations:
            return carry.best_u, carry.best_c
        last = plan_cost(m, d, carry.u, cost, self.sim, dt0)[0]
        better = jnp.isfinite(last) & ((last < carry.best_c) | (not self.cfg.keep_best))
        return jnp.where(better, carry.u, carry.best_u), jnp.where(better, last, carry.best_c)


class _Sampled(NamedTuple):
    """Carry of predictive sampling under a time budget: the nominal plan, the next batch's key, and
    the cheapest candidate so far."""

    nominal: jax.Array
    key: jax.Array
    best_u: jax.Array
    best_c: jax.Array


class SamplingMethod(GradientMethod):
    """``sampling``: predictive sampling, the cheapest of ``samples`` candidates around the nominal plan.

    Without ``time_budget`` there are no iterations. Under one (in :func:`~diffmjx.mpc.closed_loop`)
    each iteration draws another batch of ``sample_batch`` candidates (``samples`` if unset) around
    the same nominal plan, at most ``iterations`` batches, until the budget is spent: sampling fills
    the plan step's time as the iterative planners do, at equal time by construction."""

    differentiates = False

    def __init__(self, cfg: PlannerConfig, sim: Config):
        super().__init__(cfg, sim)
        self.iterations = 0 if cfg.time_budget is None else cfg.iterations

    def init(self, m, d, nominal, cost, key, dt0):
        u, c, costs = _sample(m, d, nominal, cost, key, dt0, self.cfg, self.sim)
        if self.iterations:
            return _Sampled(nominal, jax.random.split(key)[0], u, c), costs
        return _Descent(u, _optimizer(self.cfg).init(u), u, c), costs

    def step(self, m, d, carry, cost, dt0):
        """One more batch of candidates; the cheapest so far kept."""
        key, sub = jax.random.split(carry.key)
        batch = dataclasses.replace(self.cfg, samples=self.cfg.sample_batch or self.cfg.samples)
        u, c, _ = _sample(m, d, carry.nominal, cost, sub, dt0, batch, self.sim, keep_nominal=False)
        better = c < carry.best_c
        best_u, best_c = jnp.where(better, u, carry.best_u), jnp.where(better, c, carry.best_c)
        return _Sampled(carry.nominal, key, best_u, best_c), (c, jnp.isfinite(c))

    def finish(self, m, d, carry, cost, dt0):
        """The cheapest candidate."""
        return carry.best_u, carry.best_c


class HybridMethod(GradientMethod):
    """``hybrid``: predictive sampling, then gradient iterations from the best sample."""

    def init(self, m, d, nominal, cost, key, dt0):
        u, c, costs = _sample(m, d, nominal, cost, key, dt0, self.cfg, self.sim)
        return _Descent(u, _optimizer(self.cfg).init(u), u, c), costs


class _Explored(NamedTuple):
    """Carry of iLQR's iterations: its state and the key of the next plans sampled around it."""

    state: ilqr.ILQRState
    key: jax.Array


class ILQRMethod:
    """``ilqr``: iterations of :func:`diffmjx.mpc.ilqr.iteration` (Riccati gains on the period
    Jacobians of :func:`diffmjx.linearize`, a vmapped line search, controls projected onto their
    ranges), each followed by ``ilqr_explore`` plans sampled around its result; every accepted
    iteration or sample lowers the cost, so the last plan is the best one."""

    search_mu = True  # ilqr.iteration's regularisation search (a subclass may compare without it)

    def __init__(self, cfg: PlannerConfig, sim: Config):
        self.cfg, self.sim = cfg, sim
        self.iterations = cfg.iterations
        self.jacobian = self._jacobian()  # a substep on an adaptive model is refused here, before any plan

    def init(self, m, d, nominal, cost, key, dt0):
        return _Explored(ilqr.init(nominal, self.cfg.regularization), key), jnp.zeros((0,), nominal.dtype)

    def step(self, m, d, carry, cost, dt0):
        """One iLQR iteration, then ``ilqr_explore`` plans sampled around its result (the cheapest
        kept if it lowers the cost)."""
        state, info = ilqr.iteration(
            m,
            d,
            carry.state,
            cost,
            self.sim,
            dt0=dt0,
            line_search=self.cfg.line_search,
            descent=self.cfg.keep_best,
            box=self.cfg.ilqr_box_qp,
            search_mu=self.search_mu,
            retries=self.cfg.ilqr_retries,
            state_regularization=self.cfg.ilqr_regularization == "state",
            reuse=self.cfg.ilqr_reuse,
            convex=self.cfg.ilqr_cost_hessian == "psd",
            jacobian=self.jacobian,
            reach=self.cfg.ilqr_reach,
        )
        key = carry.key
        if self.cfg.ilqr_explore:
            key, sub = jax.random.split(key)
            batch = dataclasses.replace(self.cfg, samples=self.cfg.ilqr_explore)
            u, c, _ = _sample(m, d, state.u, cost, sub, dt0, batch, forward_config(self.sim), keep_nominal=False)
            better = c < state.cost
            state = state._replace(u=jnp.where(better, u, state.u), cost=jnp.where(better, c, state.cost))
        return _Explored(state, key), (info["cost"], info["finite"])

    def _jacobian(self) -> str:
        """``planner.ilqr_jacobian`` for this planning model (``auto`` resolved)."""
        choice = self.cfg.ilqr_jacobian
        fixed = self.sim.integrator.fixed_step
        if choice == "auto":
            return "substep" if fixed else "period"
        if choice == "substep" and not fixed:
            raise ValueError(
                "planner.ilqr_jacobian='substep' needs a fixed-step planning model (integrator.solver one of "
                f"the mjx_* solvers), got integrator.solver={self.sim.integrator.solver!r}; use 'period' or 'auto'"
            )
        return choice

    def finish(self, m, d, carry, cost, dt0):
        state = carry.state
        if not self.iterations:  # nothing evaluated the plan yet
            return state.u, plan_cost(m, d, state.u, cost, forward_config(self.sim), dt0)[0]
        return state.u, state.cost


for _kind, _cls in (
    ("gradient", GradientMethod),
    ("sampling", SamplingMethod),
    ("hybrid", HybridMethod),
    ("ilqr", ILQRMethod),
):
    PLANNERS.register(_kind, _cls)
