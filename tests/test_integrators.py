"""Every integrator name runs and converges; MJX's own integrators match mjx.step; activations are state."""

import math

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.integration.stepsize import pid_controller, with_first_step
from diffmjx.reference import c_engine_rk4
from diffmjx.scenes import load

QVEL0 = np.array([0.1, -0.05, 0.02, 0.2, 10.0, 0.2])
PERIODS = 20


@pytest.fixture(scope="module")
def tumbling_reference():
    return c_engine_rk4(load("tumbling_box")[0], PERIODS * 0.01, 1e-5, qvel=QVEL0).qpos.copy()


# suite budget: one solver per order family by default (5th: tsit5, dopri5; 2nd: heun; 1st: euler);
# dopri8, bosh3, midpoint and ralston under -m slow
@pytest.mark.parametrize(
    "solver, extra, tol",
    [
        ("tsit5", (), 1e-6),
        ("dopri5", (), 1e-6),
        pytest.param("dopri8", (), 1e-6, marks=pytest.mark.slow),
        pytest.param("bosh3", (), 1e-6, marks=pytest.mark.slow),
        ("heun", (), 1e-5),
        pytest.param("midpoint", (), 1e-5, marks=pytest.mark.slow),
        pytest.param("ralston", (), 1e-5, marks=pytest.mark.slow),
        ("euler", ("integrator.step_control=constant", "integrator.substeps=200"), 2e-2),
    ],
)
def test_diffrax_solvers_converge_to_c_engine(tumbling_reference, solver, extra, tol):
    _, mx = load("tumbling_box")
    cfg = diffmjx.Config().override(
        f"integrator.solver={solver}", "integrator.rtol=1e-8", "integrator.atol=1e-8", *extra
    )
    d = mjx.make_data(mx).replace(qvel=jnp.asarray(QVEL0))
    d, traj = jax.jit(lambda d: diffmjx.rollout(mx, d, jnp.zeros((PERIODS, 0)), cfg))(d)
    assert not bool(traj.stats.budget_exhausted.any())
    assert np.max(np.abs(np.asarray(d.qpos) - tumbling_reference)) < tol


@pytest.mark.parametrize(
    "name, integrator",
    [("mjx_rk4", mujoco.mjtIntegrator.mjINT_RK4), ("mjx_implicitfast", mujoco.mjtIntegrator.mjINT_IMPLICITFAST)],
)
def test_mjx_integrators_equal_mjx_step(name, integrator):
    mj, _ = load("actuated_hinge")
    mj.opt.integrator = integrator
    mx = mjx.put_model(mj)
    d = mjx.make_data(mx).replace(qpos=jnp.array([0.4]), qvel=jnp.array([1.0]), ctrl=jnp.array([0.8]))
    ref = jax.jit(mjx.step)(mx, d)
    ours = jax.jit(lambda d: diffmjx.step(mx, d, diffmjx.Config().override(f"integrator.solver={name}")))(d)
    for field in ("qpos", "qvel", "act"):
        np.testing.assert_allclose(getattr(ours, field), getattr(ref, field), rtol=0, atol=1e-12)


def _hinge_rollout(cfg, ctrl, periods=50):
    _, mx = load("actuated_hinge")
    d = mjx.make_data(mx)
    return diffmjx.rollout(mx, d, jnp.full((periods, 1), ctrl), cfg)


def test_activation_is_state_with_clamping():
    cfg = diffmjx.Config().override("integrator.rtol=1e-10", "integrator.atol=1e-10")
    d, traj = jax.jit(lambda: _hinge_rollout(cfg, 1.0))()
    t = np.asarray(traj.time)
    # filter dynamics act' = (ctrl - act) / 0.05 from act = 0, clamped at actrange[1] = 0.5
    expected = np.minimum(1.0 - np.exp(-t / 0.05), 0.5)
    np.testing.assert_allclose(np.asarray(traj.act[:, 0]), expected, atol=1e-8)

    # MuJoCo's RK4 clamps act once per step, which makes it first order in dt once the limit
    # is hit: extrapolate dt -> 0 from two step sizes and compare with that limit.
    mj = load("actuated_hinge")[0]
    coarse = c_engine_rk4(mj, 0.5, 1e-4, ctrl=1.0).qpos[0]
    fine = c_engine_rk4(mj, 0.5, 1e-5, ctrl=1.0).qpos[0]
    limit = fine + (fine - coarse) / 9.0
    assert abs(fine - coarse) > 1e-3  # the C engine's clamping error is real
    assert abs(float(d.qpos[0]) - limit) < 1e-5
    assert float(d.act[0]) == 0.5


def test_gradient_through_activation():
    """The gradient of the hinge's end position with respect to a control that reaches it only
    through the activation state, against central differences, in the default (reverse) mode: the
    adjoint carries the activations too."""
    cfg = diffmjx.Config().override("integrator.rtol=1e-10", "integrator.atol=1e-10")
    loss = lambda u: _hinge_rollout(cfg, u)[0].qpos[0]
    vg = jax.jit(jax.value_and_grad(loss))  # one program for the gradient and the differences' values
    g = float(vg(0.3)[1])
    fd = (float(vg(0.3 + 1e-5)[0]) - float(vg(0.3 - 1e-5)[0])) / 2e-5
    assert abs(g) > 1e-3
    assert abs(g - fd) < 1e-5 * abs(fd)


def test_dtmax_caps_the_step():
    # free flight at loose tolerance: one step per 10 ms period unless dtmax caps it
    _, mx = load("tumbling_box")
    d = mjx.make_data(mx).replace(qvel=jnp.asarray(QVEL0))
    steps = {}
    for dtmax in (None, 0.0025):
        cfg = diffmjx.Config().override(
            "integrator.rtol=1e-3", "integrator.atol=1e-3", f"integrator.dtmax={dtmax if dtmax else 'null'}"
        )
        _, traj = jax.jit(lambda d, cfg=cfg: diffmjx.rollout(mx, d, jnp.zeros((3, 0)), cfg))(d)
        steps[dtmax] = np.asarray(traj.stats.accepted)
    assert np.all(steps[0.0025] >= 4)
    assert np.all(steps[None] < 4)


@pytest.fixture(scope="module")
def toss():
    from diffmjx.scenes import cube_toss_data

    _, mx = load("cube_toss")
    return mx, cube_toss_data(mx)


def _final(mx, d, cfg, **objects):
    return jax.jit(lambda d: diffmjx.rollout(mx, d, jnp.zeros((30, 0)), cfg, **objects)[0].qpos)(d)


@pytest.mark.slow  # suite budget: objects are still checked up front below, and kink_step_used in test_config
def test_diffrax_objects_equal_config_strings(toss):
    """A solver, step-size controller and adjoint passed as Diffrax objects give what the
    equivalent config strings give, bit for bit (the PID controller keeps its warm start). The
    strings' forward tolerances are their own (``dto_tighten`` 1: a checkpointed solve's are
    otherwise ten times tighter) and kink control is off on both sides."""
    import diffrax

    mx, d = toss
    no_kinks = diffmjx.Config().override("integrator.kink_step=null")
    cfg = no_kinks.override(
        "integrator.rtol=1e-6",
        "integrator.atol=1e-6",
        "integrator.solver=bosh3",
        "integrator.adjoint=checkpoint",
        "integrator.dto_tighten=1",
    )
    pid = diffrax.PIDController(rtol=1e-6, atol=1e-6, pcoeff=0.2, icoeff=0.4)
    ref = _final(mx, d, cfg)
    objects = _final(
        mx,
        d,
        no_kinks,
        solver=diffrax.Bosh3(),
        stepsize_controller=pid,
        adjoint=diffrax.RecursiveCheckpointAdjoint(),
    )
    np.testing.assert_array_equal(np.asarray(objects), np.asarray(ref))
    # a controller the config cannot name: a looser PID with a step cap moves the result, and runs
    loose = diffrax.PIDController(rtol=1e-3, atol=1e-3, pcoeff=0.2, icoeff=0.4, dtmax=2e-3)
    other = _final(mx, d, cfg, stepsize_controller=loose)
    assert 0 < np.max(np.abs(np.asarray(other) - np.asarray(ref))) < 1e-2


def test_diffrax_objects_are_checked_up_front(toss):
    import diffrax

    mx, d = toss
    u = jnp.zeros((2, 0))
    with pytest.raises(ValueError, match=r"integrator\.step_control"):
        diffmjx.rollout(mx, d, u, solver=diffrax.Euler())  # the default PID needs an error estimate
    with pytest.raises(ValueError, match=r"integrator\.solver='mjx_euler'"):
        diffmjx.rollout(mx, d, u, diffmjx.Config().override("integrator.solver=mjx_euler"), solver=diffrax.Tsit5())
    with pytest.raises(ValueError, match="stepsize_controller=.*diffrax.AbstractStepSizeController"):
        diffmjx.step(mx, d, stepsize_controller="pid")


def test_elliptic_cones_are_refused_before_tracing():
    """The implicit solver gradient needs pyramidal cones; the error comes from diffmjx.validate,
    not from inside a trace. (Contacts from distance build elliptic rows too:
    tests/test_contact_tasks.py.)"""
    _, mx = load("cube_toss", cone=mujoco.mjtCone.mjCONE_ELLIPTIC)
    cfg = diffmjx.Config().override("solver.gradient=implicit")
    diffmjx.validate(mx, diffmjx.Config().override("cfd.enabled=true"))  # no error
    with pytest.raises(ValueError, match=r"pyramidal"):
        diffmjx.validate(mx, cfg)
    with pytest.raises(ValueError, match=r"pyramidal"):
        diffmjx.rollout(mx, mjx.make_data(mx), jnp.zeros((1, 0)), cfg)


def test_kink_control_shrinks_straddling_steps_and_keeps_the_trajectory(toss):
    """integrator.kink_step rejects steps over which the contact state changes: more steps (the
    kinks located), a trajectory within the tolerance of the uncontrolled one, and the same steps
    while no contact row is active (free flight of the first periods)."""
    mx, d = toss
    cfg = diffmjx.Config().override(  # kink control applies to checkpoint (backsolve has its own error control)
        "integrator.adjoint=checkpoint",
        "integrator.rtol=1e-8",
        "integrator.atol=1e-8",
        "solver.impedance_floor=0",
        "integrator.kink_step=null",  # off (checkpoint's default, auto, would turn it on)
        "integrator.dto_tighten=1",  # the forward solve at the rtol named
    )
    run = jax.jit(lambda d, c: diffmjx.rollout(mx, d, jnp.zeros((60, 0)), c), static_argnums=1)
    d_off, t_off = run(d, cfg)
    d_on, t_on = run(d, cfg.override("integrator.kink_step=1e-7"))
    steps = lambda t: int(t.stats.accepted.sum() + t.stats.rejected.sum())
    assert steps(t_on) > steps(t_off) + 20
    assert not bool(t_on.stats.budget_exhausted.any())
    np.testing.assert_allclose(np.asarray(d_on.qpos), np.asarray(d_off.qpos), atol=1e-5)
    free = np.asarray(t_off.qpos[:, 2]) > 0.1  # the cube's lowest corner is then >= 3 cm up
    assert free.sum() >= 2
    np.testing.assert_array_equal(np.asarray(t_on.stats.accepted)[free], np.asarray(t_off.stats.accepted)[free])


def test_kink_control_brackets_the_kink():
    """Kink control's controller, fed a step oracle with one kink: the step that holds the kink
    is at most kink_step; once a straddle is rejected no later trial reaches past that step's end
    (the bracket) other than by kink_step itself; locating the kink takes about log2(h0 /
    kink_step) trials (the controller without the bracket took 22 on average, up to 28, here)."""
    ks, h0 = 1e-7, 1e-3
    ctrl = with_first_step(pid_controller(diffmjx.Config(), backsolve=False), jnp.asarray(h0), ks)
    y = (jnp.zeros(2), jnp.zeros(1))  # (state, sentinel)
    adapt = jax.jit(lambda t0, t1, err, state: ctrl.adapt_step_size(t0, t1, y, y, None, err, 5, state))

    def trials_to_pass(kink):
        t0 = 0.0
        t1, state = ctrl.init(None, 0.0, 1.0, y, None, None, None, 5)
        end, n = math.inf, 0
        while n < 100:
            lo, hi = float(t0), float(t1)
            assert hi <= max(end, lo + 1.5 * ks), (kink, lo, hi, end)
            n += 1
            straddle = lo < kink <= hi  # the sentinel's error says the constraint state changed
            err = (jnp.full(2, 1e-12), jnp.array([1e-3 if straddle else 0.0]))
            keep, t0, t1, _, state, _ = adapt(lo, hi, err, state)
            if straddle and bool(keep):
                assert hi - lo <= 1.5 * ks
                return n
            end = min(end, hi) if straddle else (math.inf if bool(keep) and hi >= end else end)
        raise AssertionError(f"kink at {kink} not passed in 100 trials")

    trials = [trials_to_pass(k) for k in np.linspace(0.0, h0, 21)[1:]]
    assert np.mean(trials) <= math.log2(h0 / ks) + 4 and max(trials) <= math.log2(h0 / ks) + 8, trials

    # inside a bracket, a step of kink_step that fails the error test is shrunk further (a jump in
    # the force can need it): the bracket caps steps from above only, or the solve would stall
    _, state = ctrl.init(None, 0.0, 1.0, y, None, None, None, 5)
    no_change, change = jnp.zeros(1), jnp.ones(1)
    _, t0, t1, _, state, _ = adapt(0.0, h0, (jnp.full(2, 1e-12), change), state)  # bracket: (0, h0]
    keep, t0, t1, _, state, _ = adapt(t0, t0 + ks, (jnp.full(2, 1.0), no_change), state)
    assert not bool(keep) and float(t1 - t0) < 0.5 * ks


def test_the_adjoint_solve_bisects_to_each_kink_and_steps_over_it():
    """The backsolve adjoint's backward controller (kink control of the adjoint, whose rate jumps at
    each kink), fed a step oracle with one kink and an error estimate far above tolerance on every
    step over it: the step that holds the kink is at most kink_step and is taken (the error
    control alone would shrink it without end); every trial halves the bracket, so locating the
    kink takes about log2(h0 / kink_step) trials; the step after it is the one tried before the
    kink was found, not a regrowth from kink_step; the sentinel takes no part in the error norm."""
    from diffmjx.integration.adjoints import BacksolveState

    ks, h0 = 1e-7, 1e-3
    back = pid_controller(diffmjx.Config(), backsolve=True, adjoint_solve=True)
    ctrl = with_first_step(back, jnp.asarray(h0), ks, adjoint_solve=True)
    s = BacksolveState(jnp.zeros(2), jnp.zeros(2), [jnp.zeros(1), None], jnp.zeros(3))
    adapt = jax.jit(lambda t0, t1, err, state: ctrl.adapt_step_size(t0, t1, s, s, None, err, 5, state))

    def error(straddle, size=1e-12):
        return BacksolveState(
            jnp.full(2, size), jnp.full(2, 1.0 if straddle else size), [jnp.ones(1), None], jnp.full(3, 1e-3 * straddle)
        )

    def pass_kink(kink):
        t0 = 0.0
        t1, state = ctrl.init(None, 0.0, 1.0, s, None, None, None, 5)
        for n in range(1, 100):
            lo, hi = float(t0), float(t1)
            straddle = lo < kink <= hi
            keep, t0, t1, _, state, _ = adapt(lo, hi, error(straddle), state)
            if straddle and bool(keep):
                assert hi - lo <= 1.5 * ks
                return n, float(t1 - t0)
        raise AssertionError(f"kink at {kink} not passed in 100 trials")

    passed = [pass_kink(k) for k in np.linspace(0.0, h0, 21)[1:]]
    trials = [n for n, _ in passed]
    assert np.mean(trials) <= math.log2(h0 / ks) + 2 and max(trials) <= math.log2(h0 / ks) + 4, trials
    assert all(h_next >= 0.99 * h0 for _, h_next in passed), passed  # resumed at the first straddle's step

    # without a kink, the parameters' adjoint and the sentinel do not count: a step whose state
    # and state adjoint are within tolerance is kept
    _, state = ctrl.init(None, 0.0, 1.0, s, None, None, None, 5)
    big = BacksolveState(jnp.full(2, 1e-12), jnp.full(2, 1e-12), [jnp.full(1, 1e3), None], jnp.zeros(3))
    assert bool(adapt(0.0, 1e-4, big, state)[0])


def test_the_stages_bracket_each_kink_and_the_controller_bisects_the_bracket():
    """KinkBracketing: in a step over a kink, the stages before it saw the step start's constraint
    state and those after did not, so the bracket between them (fractions of the step) holds the
    kink, for any kink time and Tsit5's and Dopri5's stages; a step with no kink gives the whole step.
    The controller, backward and forward, fed that bracket with a straddle, tries its middle next
    (not the step's half, nor the least factor's cut) and knows the kink lies before the bracket's end."""
    import diffrax

    from diffmjx.integration.adjoints import BacksolveState
    from diffmjx.integration.stepsize import BracketedSentinel
    from diffmjx.integration.wrapped import bracketing

    def state(kink):
        def vf(t, s, args):  # a decaying state; two constraint rows, the first switching at `kink`
            code = jnp.stack([jnp.where(t > kink, 1.0, 0.0), jnp.ones(())])
            return BacksolveState(-s.y, -s.a_y, [], BracketedSentinel(code, jnp.zeros(2)))

        return diffrax.ODETerm(vf)

    s0 = BacksolveState(jnp.ones(2), jnp.ones(2), [], BracketedSentinel(jnp.zeros(2), jnp.zeros(2)))
    h = 1e-3
    for rk in (diffrax.Tsit5(), diffrax.Dopri5()):
        solver = bracketing(rk)
        for frac in (0.05, 0.2, 0.5, 0.85, 0.95, 0.99, 1.5):
            term = state(frac * h)
            y1 = solver.step(term, 0.0, h, s0, None, solver.init(term, 0.0, h, s0, None), False)[0]
            lo, hi = np.asarray(y1.sentinel.bracket)
            if frac < 1:
                assert lo <= frac < hi and hi - lo < 0.6, (rk, frac, lo, hi)
            else:
                assert (lo, hi) == (0.0, 1.0)

    # the forward solve's state, (y, sentinel): the bracket lands in its sentinel alike
    def forward(t, y, args):
        return -y[0], BracketedSentinel(jnp.stack([jnp.where(t > 0.5 * h, 1.0, 0.0), 1.0]), jnp.zeros(2))

    term, y0 = diffrax.ODETerm(forward), (jnp.ones(2), BracketedSentinel(jnp.zeros(2), jnp.zeros(2)))
    solver = bracketing(diffrax.Tsit5())
    lo, hi = np.asarray(solver.step(term, 0.0, h, y0, None, solver.init(term, 0.0, h, y0, None), False)[0][1].bracket)
    assert lo <= 0.5 < hi and hi - lo < 0.6

    ks = 1e-7
    back = pid_controller(diffmjx.Config(), backsolve=True, adjoint_solve=True)
    ctrl = with_first_step(back, jnp.asarray(h), ks, adjoint_solve=True)
    s = BacksolveState(jnp.zeros(2), jnp.zeros(2), [jnp.zeros(1), None], BracketedSentinel(jnp.zeros(3), jnp.zeros(2)))
    _, state0 = ctrl.init(None, 0.0, 1.0, s, None, None, None, 5)
    candidate = s._replace(sentinel=BracketedSentinel(jnp.zeros(3), jnp.asarray([0.327, 0.9])))
    err = BacksolveState(
        jnp.full(2, 1e-12), jnp.full(2, 1e-12), [jnp.ones(1), None], BracketedSentinel(jnp.full(3, 1e-3), jnp.zeros(2))
    )
    keep, t0, t1, _, (_, bracket_end, _), _ = ctrl.adapt_step_size(0.0, h, s, candidate, None, err, 5, state0)
    assert not bool(keep) and float(t0) == 0.0
    assert float(t1) == pytest.approx(0.5 * (0.327 + 0.9) * h) and float(bracket_end) == pytest.approx(0.9 * h)

    # the forward solve's controller (state (y, sentinel)) bisects the stages' bracket alike
    fwd = with_first_step(pid_controller(diffmjx.Config(), backsolve=False), jnp.asarray(h), ks)
    y = (jnp.zeros(2), BracketedSentinel(jnp.zeros(3), jnp.zeros(2)))
    _, state0 = fwd.init(None, 0.0, 1.0, y, None, None, None, 5)
    candidate = (y[0], BracketedSentinel(jnp.zeros(3), jnp.asarray([0.327, 0.9])))
    err = (jnp.full(2, 1e-12), BracketedSentinel(jnp.full(3, 1e-3), jnp.zeros(2)))
    keep, t0, t1, _, (_, bracket_end, _), _ = fwd.adapt_step_size(0.0, h, y, candidate, None, err, 5, state0)
    assert not bool(keep) and float(t0) == 0.0
    assert float(t1) == pytest.approx(0.5 * (0.327 + 0.9) * h) and float(bracket_end) == pytest.approx(0.9 * h)
    # no bracket (a solver without stages to bracket with): the least factor's cut, as before
    candidate = (y[0], BracketedSentinel(jnp.zeros(3), jnp.zeros(2)))
    keep, _, t1, _, (_, bracket_end, _), _ = fwd.adapt_step_size(0.0, h, y, candidate, None, err, 5, state0)
    assert not bool(keep) and float(t1) < 0.5 * h and float(bracket_end) == pytest.approx(h)


def test_backsolve_simulates_what_diffrax_backsolve_does():
    """The default gradient mode (DiffMJX's backsolve, kink control in its backward solve only) adds
    nothing to a simulation that is not differentiated: the cube toss through its first bounce is
    Diffrax's BacksolveAdjoint's forward bit for bit, step counts included (its accuracy: the
    backsolve row of test_cube_toss's sweep)."""
    import diffrax

    from diffmjx.integration.adjoints import KinkAwareBacksolve
    from diffmjx.scenes import CUBE_TOSS, cube_toss_data

    _, mx = load("cube_toss")
    cfg = diffmjx.Config()
    assert isinstance(diffmjx.diffrax_method(cfg).adjoint, KinkAwareBacksolve)
    theirs = diffrax.BacksolveAdjoint(
        solver=diffrax.Tsit5(), stepsize_controller=pid_controller(cfg, backsolve=True, adjoint_solve=True)
    )
    ctrls = jnp.zeros((10, mx.nu))
    d0 = cube_toss_data(mx, CUBE_TOSS["u0"])
    out = [jax.jit(lambda d, a=a: diffmjx.rollout(mx, d, ctrls, cfg, adjoint=a))(d0) for a in (None, theirs)]
    (d_a, t_a), (d_b, t_b) = out
    assert int(t_a.stats.rejected.sum()) > 0  # the bounce is in the window
    for a, b in ((d_a.qpos, d_b.qpos), (d_a.qvel, d_b.qvel), (t_a.stats.accepted, t_b.stats.accepted)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_diffrax_args_are_only_the_traced_leaves():
    """The backsolve adjoint integrates an adjoint for every inexact leaf of Diffrax's args, so
    only traced leaves go there: a model the caller's jit closes over stays a constant, a leaf a
    parameter map replaced travels, and unpacking gives the tree back leaf for leaf."""
    from diffmjx.integration.term import traced_args

    _, mx = load("cube_toss")
    seen = {}

    def f(mass):
        m = mx.replace(body_mass=mx.body_mass.at[1].set(mass))
        args, unpack = traced_args((m, {"ctrl": np.zeros(0)}))
        seen["n"] = len(args)
        back, _ = unpack(args)
        for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(m), strict=True):
            assert a is b
        return back.body_mass[1]

    assert float(jax.jit(f)(0.3)) == 0.3
    assert seen["n"] == 1  # body_mass only: the other 123 model leaves and ctrl are constants

    def passed(m):  # a model passed to jit as an argument: every leaf is traced, every leaf travels
        seen["all"] = len(traced_args(m)[0]) == len(jax.tree.leaves(m))
        return 0.0

    jax.jit(passed)(mx)
    assert seen["all"]
