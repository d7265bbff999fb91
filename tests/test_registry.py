"""One registry per choice (diffmjx.registry): each config choice list is its registry (solver, collision rule,
gradient mode, planner kind, sysid fit method), and adding a solver, a gradient mode or a planner is
one class (or none) plus one ``register`` line, run by name."""

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import mpc, registry, sysid
from diffmjx.integration.method import integration_method
from diffmjx.jacobians import forward_config
from diffmjx.physics.collision import detect
from diffmjx.registry import (
    BOX_BOX_RULES,
    CAPSULE_CAPSULE_RULES,
    FIT_METHODS,
    GRADIENT_MODES,
    PLANE_BOX_RULES,
    PLANE_CYLINDER_RULES,
    PLANNERS,
    SOLVERS,
    CollisionRuleEntry,
    GradientModeEntry,
    SolverEntry,
)
from diffmjx.sysid import ties

SLIDER = """
<mujoco>
  <option timestep="0.05"/>
  <worldbody>
    <body name="cart">
      <joint name="x" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.05 0.05 0.05" mass="2" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator><motor joint="x" ctrlrange="-1 1"/></actuator>
</mujoco>
"""


def _choice_fields(section_cls):
    return {f.name: f.metadata["choices"] for f in dataclasses.fields(section_cls) if "choices" in f.metadata}


def test_each_config_choice_list_is_its_registry():
    """The fields that pick an implementation take their choices from the registry itself (not a copy),
    and every registered entry is a choice, so nothing can be registered without being configurable."""
    fields = {
        ("integrator", "solver"): SOLVERS,
        ("integrator", "adjoint"): GRADIENT_MODES,
        ("collision", "plane_box"): PLANE_BOX_RULES,
        ("collision", "plane_cylinder"): PLANE_CYLINDER_RULES,
        ("collision", "box_box"): BOX_BOX_RULES,
        ("collision", "capsule_capsule"): CAPSULE_CAPSULE_RULES,
    }
    for (section, name), reg in fields.items():
        section_cls = type(getattr(diffmjx.Config(), section))
        assert _choice_fields(section_cls)[name] is reg, (section, name)
    assert _choice_fields(mpc.PlannerConfig)["kind"] is PLANNERS
    assert mpc.PLANNERS is PLANNERS
    assert _choice_fields(sysid.FitConfig)["method"] is FIT_METHODS and tuple(FIT_METHODS) == ("lm", "adam")
    # the built-ins, with the properties the library reads instead of their names
    assert SOLVERS.where(fixed_step=True) == ("mjx_euler", "mjx_rk4", "mjx_implicitfast")
    assert SOLVERS.where(embedded=False) == ("euler",)  # the adaptive controller refuses it
    assert GRADIENT_MODES.where(continuous=True) == ("backsolve", "interpolated", "sensitivity")
    assert GRADIENT_MODES.where(forward=True) == ("sensitivity", "forward")
    assert GRADIENT_MODES.where(reverse=False) == ("forward",)
    assert tuple(PLANNERS) == ("gradient", "sampling", "hybrid", "ilqr")
    assert tuple(PLANE_BOX_RULES) == tuple(PLANE_CYLINDER_RULES) == ("deepest", "mjx")
    assert tuple(BOX_BOX_RULES) == ("clipped", "mjx")
    assert tuple(CAPSULE_CAPSULE_RULES) == ("paired", "mjx")


def test_a_toy_collision_rule_runs_by_name():
    """A plane-box rule of one's own (the ``deepest`` rule with every contact 1 cm further away) is
    one function and one ``register`` line, and the config picks it by name."""
    deepest = PLANE_BOX_RULES["deepest"]

    def lifted(sharpness, apart):
        inner = deepest.build(sharpness, apart)

        def collide(m, d, key, geom):
            dist, pos, frame = inner(m, d, key, geom)
            return dist + 0.01, pos, frame

        collide.ncon = inner.ncon
        return collide

    PLANE_BOX_RULES.register("lifted", CollisionRuleEntry(lifted))
    try:
        mj = mujoco.MjModel.from_xml_string(
            '<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body pos="0 0 .2" euler="10 20 0">'
            '<freejoint/><geom type="box" size=".1 .1 .1"/></body></worldbody></mujoco>'
        )
        mx = mjx.put_model(mj)
        d = mjx.make_data(mx)
        contacts = jax.jit(detect, static_argnums=2)
        base = contacts(mx, d, diffmjx.Config().collision)
        toy = contacts(mx, d, diffmjx.Config().override("collision.plane_box=lifted").collision)
        assert np.asarray(base.dist).shape == (4,)
        np.testing.assert_allclose(np.asarray(toy.dist), np.asarray(base.dist) + 0.01, rtol=0, atol=1e-12)
    finally:
        PLANE_BOX_RULES.unregister("lifted")


def test_a_registry_refuses_a_second_entry_of_a_name_and_names_its_choices():
    reg = registry.Registry("demo.kind")
    reg.register("a", 1)
    with pytest.raises(ValueError, match="demo.kind='a' is registered already"):
        reg.register("a", 2)
    with pytest.raises(KeyError, match="demo.kind='b' is not registered; choose one of: a"):
        reg["b"]
    assert reg.unregister("a") == 1 and len(reg) == 0
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", 3)
    with pytest.raises(ValueError, match="integrator.solver='toy' is not allowed; choose one of: tsit5"):
        diffmjx.Config().override("integrator.solver=toy")


@pytest.fixture
def toys():
    """A toy solver (Diffrax's Heun under another name) and a toy gradient mode (recursive
    checkpointing with 2 checkpoints): one ``register`` line each, no other edit."""
    SOLVERS.register("toy_heun", SolverEntry(lambda cfg: diffrax.Heun()))
    GRADIENT_MODES.register(
        "toy_checkpoint",
        GradientModeEntry(
            lambda cfg, solver, controller: diffrax.RecursiveCheckpointAdjoint(checkpoints=2),
            continuous=False,
            forward=False,
        ),
    )
    try:
        yield
    finally:
        SOLVERS.unregister("toy_heun")
        GRADIENT_MODES.unregister("toy_checkpoint")


def test_a_toy_solver_and_gradient_mode_run_by_name(toys):
    """Configured by name, validated, built, read by ``linearize`` (a reverse-only mode switches to
    ``forward``), and a gradient through them is right: a motor's constant force F on a free mass M
    for one period T moves it by F T^2 / (2 M), so d x / d u = T^2 / (2 M)."""
    cfg = diffmjx.Config().override("integrator.solver=toy_heun", "integrator.adjoint=toy_checkpoint")
    method = integration_method(cfg)
    assert isinstance(method.solver, diffrax.Heun)
    assert isinstance(method.adjoint, diffrax.RecursiveCheckpointAdjoint) and method.adjoint.checkpoints == 2
    assert cfg.integrator.tolerances() == (1e-8, 1e-8)  # discretise-then-optimise: rtol / dto_tighten
    assert forward_config(cfg).integrator.adjoint == "forward"
    mx = mjx.put_model(mujoco.MjModel.from_xml_string(SLIDER))
    d0 = mjx.make_data(mx)
    x1 = lambda u: diffmjx.rollout(mx, d0, u[None, None], cfg)[0].qpos[0]
    g = jax.jit(jax.grad(x1))(jnp.asarray(0.3))
    np.testing.assert_allclose(float(g), 0.05**2 / (2 * 2.0), rtol=1e-6)


class IdlePlanner:
    """A toy planner: executes the nominal plan unchanged (no iterations)."""

    def __init__(self, cfg, sim):
        self.cfg, self.sim, self.iterations = cfg, sim, 0

    def init(self, m, d, nominal, cost, key, dt0):
        return nominal, jnp.zeros((0,), nominal.dtype)

    def step(self, m, d, carry, cost, dt0):  # traced by plan's scan of length 0, never run
        return carry, (jnp.zeros((), carry.dtype), jnp.asarray(True))

    def finish(self, m, d, carry, cost, dt0):
        return carry, mpc.plan_cost(m, d, carry, cost, self.sim, dt0)[0]


def test_a_toy_planner_is_one_class_and_one_register_line():
    PLANNERS.register("idle", IdlePlanner)
    try:
        cfg = mpc.PlannerConfig.load(None, ["kind=idle", "horizon=3", "execute=1"])  # text at the edge
        assert cfg.kind == "idle"
        sim = diffmjx.Config().override("integrator.solver=mjx_euler")
        mx = mjx.put_model(mujoco.MjModel.from_xml_string(SLIDER))
        nominal = jnp.full((3, 1), 0.5)
        u, info = mpc.make_planner(cfg, sim).plan(
            mx, mjx.make_data(mx), nominal, lambda d, c: d.qpos[0] ** 2, jax.random.key(0)
        )
        np.testing.assert_array_equal(np.asarray(u), np.asarray(nominal))
        assert float(info["cost"]) > 0.0
    finally:
        PLANNERS.unregister("idle")
    with pytest.raises(ValueError, match="planner.kind='idle' is not allowed"):
        mpc.PlannerConfig(kind="idle")


TWO_HINGES = """<mujoco><option timestep="0.002"/><worldbody>
<body name="a" pos="0 0 1"><joint name="j1" axis="0 1 0" damping="0.4"/>
<geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass="1" contype="0" conaffinity="0"/>
<body name="b" pos=".3 0 0"><joint name="j2" axis="0 1 0" damping="0.4"/>
<geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass="1" contype="0" conaffinity="0"/></body></body>
</worldbody></mujoco>"""


class _EveryDofDamping(sysid.FieldKind):
    """A toy field kind: one damping written into every degree of freedom (no element named)."""

    def place(self, m, key, field, flat, elements, columns):
        every = np.arange(m.nv)[:, None]
        return [ties.Write("dof_damping", every, 1.0, (0,))], np.full((1, 1), m.dof_damping[0])


def test_a_toy_parameter_field_is_one_class_and_one_register_line():
    """A parameter field of one's own, registered by name, is resolved, written into the model and
    fitted by :func:`diffmjx.sysid.identify` like the built-in ones."""
    sysid.FIELDS.register("toy_damping", _EveryDofDamping(None, 1, (0.0,), (np.inf,)))
    try:
        m = mujoco.MjModel.from_xml_string(TWO_HINGES)
        ps = sysid.ParameterSet(m, [sysid.Parameter("toy_damping")])
        assert ps.labels == ("toy_damping",) and ps.start.tolist() == [0.4]
        np.testing.assert_array_equal(ps.write(np.array([0.9])).dof_damping, [0.9, 0.9])
        rec = sysid.Recording.simulate(m, np.zeros((20, 0)), 0.01, qpos0=[1.0, -0.5], qvel0=[0.0, 0.0], step=1e-4)
        start = TWO_HINGES.replace('damping="0.4"', 'damping="0.55"')
        fit = sysid.identify(
            mujoco.MjModel.from_xml_string(start),
            [sysid.Parameter("toy_damping")],
            rec,
            fit=sysid.FitConfig(horizon=5, tolerance_check=None),
            progress=False,
        )
        assert fit.values["toy_damping"] == pytest.approx(0.4, rel=1e-3)
        np.testing.assert_allclose(fit.model.dof_damping, fit.values["toy_damping"])
    finally:
        sysid.FIELDS.unregister("toy_damping")
