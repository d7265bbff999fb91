"""The force jump at a touchdown in the derivatives (``integrator.saltation``).

A ball thrown onto the floor, a pendulum swung into its stop and a bar dropped almost level (its two
ends touch down about 1e-9 s apart, within one step), all with MuJoCo's default impedance
(``solimp[0] = 0.9``: the force switches on with a jump). The gradient of a weighted sum of the
final state by the throw's speed, the swing's speed, the ball's radius and the bar's drop speed is checked against
central differences of a converged solve in each gradient mode that carries the jump; without the
term the same gradient is off by far more than the tolerance explains.
"""

from __future__ import annotations

import functools
import types

import diffrax
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx.integration import saltation

XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 1"/>
    <body name="ball" pos="0 0 0.1">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.05" mass="0.2"/>
    </body>
    <body name="arm" pos="0.5 0 0.5">
      <joint name="hinge" type="hinge" axis="0 1 0" limited="true" range="-0.3 0.3"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.02" mass="0.1" contype="0" conaffinity="0"/>
    </body>
    <body name="bar" pos="-0.5 0 0.05" axisangle="1 0 0 1e-6">
      <freejoint/>
      <geom name="bar" type="capsule" fromto="0 -0.1 0 0 0.1 0" size="0.02" mass="0.2"/>
    </body>
  </worldbody>
</mujoco>
"""
PERIODS = 15
P0 = np.array([-1.0, 2.5, 1.0, -1.0])  # the ball's vertical speed, the swing's speed, the radius scale, the bar's speed
WEIGHTS = np.random.default_rng(0).normal(size=15 + 13)  # qpos, then qvel
WEIGHTS[[10, 24]] = 10.0  # the bar's height and vertical speed: its term's share is not drowned


@functools.cache
def _model():
    with jax.ensure_compile_time_eval():  # built once, outside any trace, whoever calls first
        return mjx.put_model(mujoco.MjModel.from_xml_string(XML))


def _loss(p, cfg):
    m = _model()
    m = m.replace(geom_size=m.geom_size.at[1, 0].multiply(p[2]))
    d = mjx.make_data(m)
    d = d.replace(qvel=d.qvel.at[0].set(0.3).at[2].set(p[0]).at[3].set(2.0).at[6].set(p[1]).at[9].set(p[3]))
    d1, _ = diffmjx.rollout(m, d, jnp.zeros((PERIODS, 0)), cfg)
    return jnp.dot(jnp.concatenate([d1.qpos, d1.qvel]), jnp.asarray(WEIGHTS))


@functools.cache
def _reference() -> np.ndarray:
    """Central differences of a converged solve."""
    cfg = diffmjx.Config().override(
        "integrator.rtol=1e-11", "integrator.atol=1e-11", "integrator.adjoint=checkpoint", "integrator.dto_tighten=1"
    )
    f = jax.jit(lambda p: _loss(p, cfg))
    eps = 1e-6
    return np.array([(f(P0 + eps * e) - f(P0 - eps * e)) / (2 * eps) for e in np.eye(P0.size)])


def _gradient(*overrides: str) -> np.ndarray:
    cfg = diffmjx.Config().override("integrator.saltation=true", *overrides)
    forward_only = cfg.integrator.adjoint == "forward"
    g = (jax.jacfwd if forward_only else jax.grad)(lambda p: _loss(p, cfg))
    return np.asarray(jax.jit(g)(jnp.asarray(P0)))


def test_the_scene_has_jumps_and_the_term_is_opt_in():
    m = mujoco.MjModel.from_xml_string(XML)
    assert diffmjx.touchdown_jumps(m) == {"floor": 0.9, "ball": 0.9, "bar": 0.9, "joint hinge": 0.9}
    on = diffmjx.Config().override("integrator.saltation=true")
    assert on.integrator.carries_jumps and diffmjx.touchdown_jumps(m, on) == {}
    assert not diffmjx.Config().integrator.carries_jumps
    assert diffmjx.touchdown_jumps(m, diffmjx.Config()) == diffmjx.touchdown_jumps(m)
    assert not on.override("integrator.adjoint=sensitivity").integrator.carries_jumps


@pytest.mark.parametrize(
    "overrides",
    [
        ("integrator.adjoint=backsolve",),  # the default mode: the adjoint solve's steps
        # reverse mode through the steps (kink control on): the slowest compile, the same rule as forward's
        pytest.param(("integrator.adjoint=checkpoint",), marks=pytest.mark.slow),
        ("integrator.adjoint=forward", "integrator.kink_step=null"),  # forward mode, as sysid runs it
    ],
)
def test_gradient_through_touchdown_and_a_stop_matches_central_differences(overrides):
    ref = _reference()
    got = _gradient(*overrides)
    assert np.linalg.norm(got - ref) < 2e-2 * np.linalg.norm(ref), (got, ref)
    # the bar's two ends cross within one step: each crossing carries its own jump
    assert abs(got[3] - ref[3]) < 2e-2 * abs(ref[3]), (got, ref)


def test_without_the_term_the_gradient_misses_the_jump():
    ref = _reference()
    got = _gradient("integrator.adjoint=forward", "integrator.kink_step=null", "integrator.saltation=false")
    assert np.linalg.norm(got - ref) > 0.2 * np.linalg.norm(ref)


def test_the_forward_values_are_unchanged():
    on = diffmjx.Config().override("integrator.adjoint=checkpoint", "integrator.saltation=true")
    off = on.override("integrator.saltation=false")
    f = jax.jit(lambda p: jnp.stack([_loss(p, on), _loss(p, off)]))
    a, b = np.asarray(f(jnp.asarray(P0)))
    assert a == b


def test_a_crossing_too_slow_to_resolve_gets_a_bounded_term():
    # exact 1 / r_dot above the resolution's speed sqrt(|r_ddot| atol); r_dot / (r_dot^2 + |r_ddot| atol) below
    crossed = jnp.array([True, True, False])
    r_dot = jnp.array([-1.0, -1e-9, -1.0])
    coef = np.asarray(saltation.coefficients(crossed, r_dot, jnp.array([10.0, 10.0, 10.0]), 1e-8))
    assert coef[0] == pytest.approx(-1.0, rel=1e-6)
    assert coef[1] == pytest.approx(-0.01, rel=1e-6)  # not -1e9
    assert coef[2] == 0.0


def test_the_resolution_knob_sets_the_regularisation_and_rejects_bad_values():
    # integrator.saltation_resolution replaces the forward solve's atol in the term's regularisation
    cfg = diffmjx.Config().override("integrator.saltation=true", "integrator.adjoint=checkpoint")
    wrap = lambda c: saltation.wrap(
        diffrax.Tsit5(), diffrax.RecursiveCheckpointAdjoint(), types.SimpleNamespace(cfg=c), False
    )
    assert wrap(cfg).resolution == cfg.integrator.tolerances()[1] == 1e-8  # checkpoint: atol / dto_tighten
    assert wrap(cfg.override("integrator.saltation_resolution=1e-3")).resolution == 1e-3
    with pytest.raises(ValueError, match="integrator.saltation_resolution"):
        cfg.override("integrator.saltation_resolution=-1")
