"""Model-predictive control through the simulator: iLQR, gradient MPC, predictive sampling, and a hybrid.

Every planner improves a plan of ``horizon`` controls for the current state and the running cost
``cost(d, ctrl) -> scalar`` summed over the states at the end of each control period (read through
:func:`diffmjx.rollout`'s ``observe`` hook, so a cost may use sites, tendons, actuator forces and
contacts). :func:`closed_loop` executes the first ``execute`` controls, shifts the plan and plans
again.

- ``gradient``: Adam (optax) on the plan, ``iterations`` steps per plan step, gradient clipped by
  its global norm, controls clipped to the actuators' ``ctrlrange`` after each step, and the
  lowest-cost iterate kept. The gradient is DiffMJX's (contacts from distance, smoothed collisions,
  the integrator and adjoint of the simulation :class:`~diffmjx.Config`).
- ``sampling``: MuJoCo MPC's predictive sampling: ``samples`` plans (the nominal one and noisy
  copies with temporally correlated, power-law "coloured" noise; ``noise_beta`` 2 is brown noise),
  evaluated in one ``vmap``; the cheapest is kept.
- ``hybrid``: sampling first, then ``iterations`` gradient steps from the best sample.
- ``ilqr`` (the default, with contacts from distance: the planner suite's choice, docs/mpc.md):
  second order: ``iterations`` iLQR iterations (:mod:`diffmjx.mpc.ilqr`) on the period
  Jacobians of :func:`diffmjx.linearize`, with the cost's Hessian (its negative curvature
  dropped, ``ilqr_cost_hessian``), plans sampled around each iterate (``ilqr_explore``), regularisations on
  ``Q_uu`` and step lengths searched at once (``line_search`` candidates; where none lowers the
  cost, ``ilqr_retries`` more rounds at larger regularisations on the same Jacobians; after an
  accepted round, optionally ``ilqr_reuse`` chord rounds on them), controls projected onto their
  ranges (or bounded in the backward pass, ``ilqr_box_qp``).

Each kind is a small class (:class:`GradientMethod`, :class:`SamplingMethod`,
:class:`HybridMethod`, :class:`ILQRMethod`, in :mod:`diffmjx.mpc.planners` with their knobs
:class:`PlannerConfig`) with ``init``, ``step`` and ``finish``, driven by one loop: :func:`make_planner`'s ``plan`` scans its steps in one program, :func:`closed_loop` calls the
same steps compiled one by one.

Batches of sampled plans are sharded over every visible device (a 1-D mesh on the sample axis)
when their number divides evenly; :func:`closed_loop` replicates its state over the devices for
that (call :func:`replicate` yourself when calling a planner's ``plan`` directly).

Why one file of this length: :func:`make_planner`, :func:`closed_loop` and the loop they share are
the planners' one driver (compiled plan, resumable closed loop, device placement, skipped-step
accounting); split, the loop's private state would have to become public.
"""

import dataclasses
import math
import time
import typing
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from diffmjx import checkpoint
from diffmjx.config import Config
from diffmjx.integration.integrate import rollout
from diffmjx.mpc.planners import (
    PLANNERS,
    GradientMethod,
    HybridMethod,
    ILQRMethod,
    PlannerConfig,
    SamplingMethod,
    check_cost,
    coloured_noise,
    cost_name,
    plan_cost,
    replicate,
    replicated_sharding,
)
from diffmjx.mpc.plants import CEnginePlant, contacts_only_with
from diffmjx.physics.dynamics import ctrl_bounds  # public here too (diffmjx.mpc.ctrl_bounds)

__all__ = [
    "PLANNERS",
    "CEnginePlant",
    "ClosedLoop",
    "GradientMethod",
    "HybridMethod",
    "ILQRMethod",
    "Planner",
    "PlannerConfig",
    "SamplingMethod",
    "check_cost",
    "closed_loop",
    "coloured_noise",
    "contacts_only_with",
    "ctrl_bounds",
    "make_planner",
    "plan_cost",
    "planning_config",
    "replicate",
]


class Planner(NamedTuple):
    """A planner built by :func:`make_planner`: its knobs, the simulation config, and
    ``plan(m, d, nominal, cost, key, dt0) -> (plan, info)``."""

    config: PlannerConfig
    sim: Config
    plan: Callable
    method: typing.Any = None  # the planner kind's object (GradientMethod, ILQRMethod, ...)


class ClosedLoop(NamedTuple):
    """What :func:`closed_loop` executed: one row per control period, one entry per plan step."""

    qpos: np.ndarray  # (steps, nq) state at the end of each executed period
    qvel: np.ndarray  # (steps, nv)
    act: np.ndarray  # (steps, na)
    ctrl: np.ndarray  # (steps, nu) executed controls
    cost: np.ndarray  # (steps,) running cost of each executed state
    plan_cost: np.ndarray  # (plan steps,) the chosen plan's cost over its horizon
    plan_time_s: np.ndarray  # (plan steps,) wall time of each plan step (compiled)
    jit_time_s: float  # compiling the plan step and the execution
    resumed_plan_steps: int = 0  # plan steps read back from ``checkpoint`` instead of run
    skipped: np.ndarray | None = None  # (plan steps,) iterations skipped for a non-finite cost or gradient
    iterations: np.ndarray | None = None  # (plan steps,) iterations run (-1: resumed, not run here)


def _fingerprint(m, d0, planner: "Planner", plan, key, plant=None) -> str:
    """What a closed-loop checkpoint must match to be resumed: the planner's and simulation's
    configs, the model's sizes and timestep, the start state, the first plan and the key (and,
    with a separate plant, both models' contact filters)."""
    data = checkpoint.digest(*(np.asarray(a) for a in (d0.qpos, d0.qvel, d0.act, plan)), _key_data(key))
    extra = {}
    if plant is not None and plant is not m:
        filters = lambda x: checkpoint.digest(np.asarray(x.geom_contype), np.asarray(x.geom_conaffinity))
        extra["plant"] = [filters(m), filters(plant)]
    return checkpoint.fingerprint(
        planner=repr(planner.config),
        sim=planner.sim.to_dict(),
        model=[int(m.nq), int(m.nv), int(m.nu), float(m.opt.timestep)],
        data=data,
        **extra,
    )


def _key_data(key) -> np.ndarray:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(key))
    return np.asarray(key)


def _as_key(data: np.ndarray, like):
    if jnp.issubdtype(like.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(jnp.asarray(data), impl=jax.random.key_impl(like))
    return jnp.asarray(data, like.dtype)


def _save_loop(path: Path, fingerprint: str, d, plan, key, dt, rows, plan_costs, plan_times, skipped) -> None:
    arrays = {f"d{i}": x for i, x in enumerate(jax.tree_util.tree_leaves(d))}
    arrays.update({f"rows_{k}": np.concatenate(v) for k, v in rows.items()})
    arrays.update(
        plan=plan,
        key=_key_data(key),
        dt=dt,
        plan_costs=np.asarray(plan_costs, float),
        plan_times=np.asarray(plan_times, float),
        skipped=np.asarray(skipped, int),
    )
    checkpoint.save(path, fingerprint, arrays)


def _load_loop(path: Path, fingerprint: str, d0, plan0, key0, dt0):
    f = checkpoint.load(
        path,
        fingerprint,
        "another closed loop (planner or simulation config, model, start state, first plan or key)",
        "delete it or pass another checkpoint path",
    )
    leaves, treedef = jax.tree_util.tree_flatten(d0)
    d = jax.tree_util.tree_unflatten(treedef, [jnp.asarray(f[f"d{i}"], x.dtype) for i, x in enumerate(leaves)])
    rows = {k[5:]: [v] for k, v in f.items() if k.startswith("rows_")}
    return (
        d,
        jnp.asarray(f["plan"], plan0.dtype),
        _as_key(f["key"], key0),
        jnp.asarray(f["dt"], dt0.dtype),
        rows,
        list(f["plan_costs"]),
        list(f["plan_times"]),
        list(f["skipped"]) if "skipped" in f else [0] * len(f["plan_costs"]),
    )


def planning_config(cfg: PlannerConfig, sim: Config) -> Config:
    """The simulation config a planner of ``cfg`` plans with: ``sim``, with ``cfd.enabled`` set
    where ``cfg.cfd`` asks for contacts from distance and the kind differentiates its plans
    (a planner class's ``differentiates``; sampling's does not)."""
    if not cfg.cfd or sim.cfd.enabled or not getattr(PLANNERS[cfg.kind], "differentiates", True):
        return sim
    return dataclasses.replace(sim, cfd=dataclasses.replace(sim.cfd, enabled=True))


def make_planner(cfg: PlannerConfig | None = None, sim: Config | None = None) -> Planner:
    """Build the planner ``cfg.kind`` (defaults: iLQR with contacts from distance, the planner
    suite's choice; :class:`PlannerConfig`).

    Arguments:
        cfg: :class:`PlannerConfig`; ``PlannerConfig()`` if None.
        sim: the simulation :class:`~diffmjx.Config` the plans are rolled out (and differentiated)
            with; ``Config()`` if None. With ``cfg.cfd`` (the default) a differentiating planner
            plans with its ``cfd.enabled`` set (:func:`planning_config`); the planner's ``sim``
            is the config it plans with.

    Returns:
        A :class:`Planner`, whose ``plan(m, d, nominal, cost, key, dt0)`` returns the improved
        plan and ``info`` (``cost``: the plan's cost; ``trace``: per-iteration costs of gradient
        steps or the sample costs; ``skipped``: gradient steps skipped for a non-finite gradient).
    """
    cfg = PlannerConfig() if cfg is None else cfg
    sim = planning_config(cfg, Config() if sim is None else sim)
    method = PLANNERS[cfg.kind](cfg, sim)

    def plan(m, d, nominal, cost, key, dt0=None):
        check_cost(cost, d)
        carry, costs = method.init(m, d, nominal, cost, key, dt0)
        step = lambda c, _: method.step(m, d, c, cost, dt0)
        carry, (trace, finite) = jax.lax.scan(step, carry, None, method.iterations)
        best, best_c = method.finish(m, d, carry, cost, dt0)
        trace = trace if method.iterations else costs
        return best, {"cost": best_c, "trace": trace, "skipped": jnp.sum(~finite)}

    return Planner(cfg, sim, plan, method)


def closed_loop(
    m,
    d0,
    cost,
    planner: Planner,
    steps: int,
    key,
    *,
    init=None,
    progress: bool = True,
    checkpoint=None,
    plant=None,
) -> ClosedLoop:
    """Receding-horizon control: plan, execute ``planner.config.execute`` controls, shift, repeat.

    Arguments:
        m: ``mjx.Model`` the plans are made on (its timestep is the control period).
        d0: ``mjx.Data`` to start from.
        cost: ``cost(d, ctrl) -> scalar``, the running cost of one state (``d`` has every derived
            field computed; see :func:`diffmjx.rollout`'s ``observe``).
        planner: from :func:`make_planner`.
        steps: control periods to execute in all.
        key: ``jax.random`` key (sampling noise).
        init: (horizon, nu) first nominal plan; zeros clipped to the control ranges if None.
        progress: show a progress bar over plan steps.
        checkpoint: a file (``.npz``) to save the loop to after every plan step and to resume
            from: a call with the same arguments continues after the last plan step saved there,
            so a long run (the paper preset's) can be run in pieces, and a larger ``steps``
            extends a finished one; a call whose plan steps were all saved compiles nothing.
            A file written by another loop (planner or simulation config, model, start state,
            first plan or key) raises ``ValueError``.
        plant: the system the executed controls are run on; ``m`` if None. An ``mjx.Model`` is
            simulated with the planner's simulation config; a planning model may be cheaper than
            the plant (e.g. :func:`contacts_only_with` drops the contacts the task does not need),
            while what is executed and reported, and what the next plan starts from, stays the
            plant's. Sizes and timestep must match ``m``'s. A ``mujoco.MjModel`` is MuJoCo's C
            engine as the "real system": each control is held for ``m``'s timestep, stepped
            with ``mj_step`` at the plant's own (finer) timestep, which must divide it; the start
            state, mocap poses and controls are taken from ``d0``, and each executed state's cost
            is ``cost`` on ``m``'s forward pass at that state.

    Returns:
        :class:`ClosedLoop`: the executed trajectory, the per-step cost of the executed states,
        and the wall time of each plan step (those of resumed plan steps as they were measured).
    """
    from tqdm.auto import tqdm

    cfg, sim = planner.config, planner.sim
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps={steps!r} is invalid; expected an int >= 1")
    plant = m if plant is None else plant
    c_engine = isinstance(plant, mujoco.MjModel)
    if plant is not m:
        sizes = lambda x: (int(x.nq), int(x.nv), int(x.nu), int(x.na), float(x.opt.timestep))
        if sizes(plant)[:4] != sizes(m)[:4] or (not c_engine and sizes(plant) != sizes(m)):
            raise ValueError(
                f"plant's (nq, nv, nu, na, timestep) = {sizes(plant)} differ from the planning model m's "
                f"{sizes(m)}; a plant must be the same system"
            )
    check_cost(cost, d0)
    lo, hi = ctrl_bounds(m)
    dtype = jnp.asarray(d0.qpos).dtype
    plan = jnp.clip(jnp.zeros((cfg.horizon, m.nu), dtype), lo, hi) if init is None else jnp.asarray(init, dtype)
    if plan.shape != (cfg.horizon, m.nu):
        raise ValueError(f"init must have shape (horizon, nu) = ({cfg.horizon}, {m.nu}); got {plan.shape}")
    # One program per piece, the gradient iterations looped here: a rollout's gradient nested in a
    # scan over iterations compiled for over 14 min on MyoArm (107 s on its own; docs/mpc.md).
    method = planner.method if planner.method is not None else PLANNERS[cfg.kind](cfg, sim)
    start_fn = jax.jit(lambda d, u, k, dt: method.init(m, d, u, cost, k, dt)[0])

    def one_step(d, c, dt):  # the carry and whether the iteration's cost and gradient were finite
        carry, (_, finite) = method.step(m, d, c, cost, dt)
        return carry, finite

    step_fn = jax.jit(one_step)
    finish_fn = jax.jit(lambda d, c, dt: method.finish(m, d, c, cost, dt))
    iterations = method.iterations
    first = iterations if cfg.first_iterations is None or not iterations else cfg.first_iterations
    execute = cfg.execute

    def run(d, u, dt):
        d, traj = rollout(plant, d, u, sim, observe=lambda x: cost(x, x.ctrl), dt0=dt)
        return d, traj

    exec_fn = jax.jit(run)
    if c_engine:
        exec_c = CEnginePlant(plant, m, cost, sim)
    dt = jnp.asarray(m.opt.timestep if sim.integrator.dt0 is None else sim.integrator.dt0, dtype)
    rows = {"qpos": [], "qvel": [], "act": [], "ctrl": [], "cost": []}
    plan_costs, plan_times, skipped, ran = [], [], [], []
    budget = cfg.time_budget
    d, done = d0, 0
    path = None if checkpoint is None else Path(checkpoint)
    if path is not None:  # before compiling: another loop's file fails at once
        fingerprint = _fingerprint(m, d0, planner, plan, key, plant)
        if path.exists():
            d, plan, key, dt, rows, plan_costs, plan_times, skipped = _load_loop(path, fingerprint, d0, plan, key, dt)
            done = min(len(plan_costs) * execute, steps)
    n_plans = math.ceil(steps / execute)
    resumed = min(len(plan_costs), n_plans)
    if cfg.shard:
        d0, plan, dt = replicate((d0, plan, dt))
    t0 = time.perf_counter()
    split, sub = jax.random.split(key)
    key = key if plan_costs else split  # a resumed loop's key was saved as its next plan step takes it
    if resumed < n_plans:  # nothing is compiled when every plan step asked for was saved
        carry = jax.eval_shape(start_fn, d0, plan, sub, dt)
        rep = replicated_sharding() if cfg.shard else None
        if rep is not None:  # the carry is passed replicated, like the state
            carry = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), carry)
        lowered = [
            start_fn.lower(d0, plan, sub, dt),
            step_fn.lower(d0, carry, dt) if iterations or first else None,
            finish_fn.lower(d0, carry, dt),
            None if c_engine else exec_fn.lower(d0, plan[:execute], dt),
        ]
        # compiled side by side: the gradient step's program takes longest, the others compile beside
        # it on the other cores
        with ThreadPoolExecutor(max_workers=len(lowered)) as pool:
            start_c, step_c, finish_c, compiled_exec = pool.map(
                lambda low: None if low is None else low.compile(), lowered
            )
        exec_c = exec_c if c_engine else compiled_exec
    keep = replicate if cfg.shard else (lambda tree: tree)
    jit_time = time.perf_counter() - t0
    for k in tqdm(
        range(resumed, n_plans), desc=f"closed loop ({cfg.kind})", disable=not progress, initial=resumed, total=n_plans
    ):
        key, sub = jax.random.split(key)
        if cfg.shard:
            d, plan, dt, sub = replicate((d, plan, dt, sub))
        t = time.perf_counter()
        carry = start_c(d, plan, sub, dt)
        finite, last = [], 0.0
        for _ in range(first if k == 0 else iterations):
            if budget is not None and finite and time.perf_counter() - t + last > budget:
                break  # the next iteration would take the plan step past its budget
            t_it = time.perf_counter()
            carry, ok = step_c(d, keep(carry), dt)
            finite.append(ok)
            if budget is not None:
                jax.block_until_ready(carry)
                last = time.perf_counter() - t_it
        ran.append(len(finite))
        plan, plan_c = finish_c(d, keep(carry), dt)
        jax.block_until_ready(plan)
        plan_times.append(time.perf_counter() - t)
        plan_costs.append(float(plan_c))
        skipped.append(int(sum(not bool(ok) for ok in finite)))
        if k == 0 and not np.isfinite(plan_costs[0]):  # before anything is executed
            _raise_nonfinite(m if c_engine else plant, d, plan, cost, sim, dt)
        u = plan[:execute]
        d, traj = exec_c(d, u, dt)
        n = min(execute, steps - done)
        for name, value in (
            ("qpos", traj.qpos),
            ("qvel", traj.qvel),
            ("act", traj.act),
            ("ctrl", u),
            ("cost", traj.obs),
        ):
            rows[name].append(np.asarray(value)[:n])
        done += n
        dt = traj.dt[-1]
        plan = jnp.concatenate([plan[execute:], jnp.repeat(plan[-1:], execute, axis=0)])
        if path is not None and n == execute:  # a plan step cut short by ``steps`` is not saved:
            # a longer run resumes at the last whole plan step
            _save_loop(path, fingerprint, d, plan, key, dt, rows, plan_costs, plan_times, skipped)
    skipped = np.asarray(skipped, int)[:n_plans]
    if skipped.sum():
        warnings.warn(
            f"closed_loop: {skipped.sum()} planner iterations in {np.count_nonzero(skipped)} of {n_plans} plan steps "
            f"were skipped for a non-finite cost or gradient of {cost_name(cost)!r} (ClosedLoop.skipped)",
            RuntimeWarning,
            stacklevel=2,
        )
    return ClosedLoop(
        **{k: np.concatenate(v)[:steps] for k, v in rows.items()},
        plan_cost=np.asarray(plan_costs[:n_plans]),
        plan_time_s=np.asarray(plan_times[:n_plans]),
        jit_time_s=jit_time,
        resumed_plan_steps=resumed,
        skipped=skipped,
        iterations=np.asarray([-1] * resumed + ran, int)[:n_plans],
    )


def _raise_nonfinite(m, d, plan, cost, sim: Config, dt) -> None:
    """Why the first plan's cost is not finite, as a ``ValueError``: the first period whose cost is
    not finite, and whether the state there is (the cost's fault) or not (the simulation's)."""
    finite = lambda x: jnp.all(jnp.asarray([jnp.all(jnp.isfinite(a)) for a in (x.qpos, x.qvel, x.act)]))
    observe = lambda x: (cost(x, x.ctrl), finite(x))
    _, traj = jax.jit(lambda d, u, dt: rollout(m, d, u, sim, observe=observe, dt0=dt))(d, plan, dt)
    costs, states = (np.asarray(a) for a in traj.obs)
    bad = np.flatnonzero(~np.isfinite(costs))
    t = int(bad[0]) if bad.size else 0
    name = cost_name(cost)
    if bad.size and states[t]:
        raise ValueError(
            f"cost function {name!r} returned {costs[t]} at period {t} of the first plan, where the state is "
            "finite; nothing was executed"
        )
    raise ValueError(
        f"the first plan's cost of {name!r} is not finite: the simulation's state is not finite at period {t} "
        "(check the start state, the controls' ranges and the model); nothing was executed"
    )
