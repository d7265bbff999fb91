"""diffmjx.set_const: every derived constant, leaf by leaf, against the C model rebuilt at other values.

Each model is compiled twice by MuJoCo: as written (A) and with its masses, inertias, geom sizes and
positions, armatures and gears changed in the MjSpec (B; geoms that tendons wrap keep their size and place). ``set_const`` of A's ``mjx.Model`` with
B's primary fields written in must give B's derived fields: the subtree masses, the mass matrix's
diagonal and inverse weights at qpos0, the actuators' reference accelerations, the tendons' lengths
and inverse weights, the statistics and the geoms' bounds. Models: free bodies on a plane, a hinge
chain with a ball joint, a slider and actuators, a tendon model (spatial with a wrapping geom,
fixed with armature, a muscle), MyoSuite's muscle finger.
"""

import os

import jax
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from diffmjx import set_const
from diffmjx.physics import constants

FREE = """<mujoco><worldbody><geom name="floor" type="plane" size="0 0 .05"/>
<body name="a" pos="0 0 1"><freejoint/><geom name="a1" type="box" size=".1 .2 .3" pos=".05 0 0" euler="10 20 30"/>
<geom name="a2" type="sphere" size=".1" pos="-.1 .1 0"/></body>
<body name="b" pos="1 0 1"><freejoint/><geom name="b1" type="capsule" size=".05 .2"/></body></worldbody></mujoco>"""

CHAIN = """<mujoco><default><geom contype="0" conaffinity="0"/></default><worldbody>
<body name="l1" pos="0 0 1"><joint name="j1" axis="0 1 0" armature=".1"/><geom name="g1" type="capsule" fromto="0 0 0 .5 0 0" size=".05"/>
<body name="l2" pos=".5 0 0"><joint name="j2" axis="0 1 0"/><geom name="g2" type="cylinder" fromto="0 0 0 .4 0 0" size=".04"/><site name="tip" pos=".4 0 0"/>
<body name="l3" pos=".4 0 0"><joint name="j3" type="ball"/><geom name="g3" type="ellipsoid" size=".1 .05 .03" pos=".1 0 0"/></body></body></body>
<body name="s" pos="2 0 0"><joint name="sl" type="slide" axis="1 0 0"/><geom name="gs" type="box" size=".1 .1 .1"/></body></worldbody>
<actuator><motor name="m1" joint="j1" gear="2"/><motor name="m2" joint="j2" gear="1"/></actuator></mujoco>"""

TENDON = """<mujoco><worldbody><site name="s0" pos="0 0 2"/>
<body name="l1" pos="0 0 1"><joint name="j1" axis="0 1 0" range="-1 1"/><geom name="c" type="cylinder" size=".05 .05" euler="90 0 0"/>
<geom name="r1" type="capsule" fromto="0 0 0 .5 0 0" size=".05"/><site name="s1" pos=".3 0 .05"/>
<body name="l2" pos=".5 0 0"><joint name="j2" axis="0 1 0"/><geom name="r2" type="capsule" fromto="0 0 0 .4 0 0" size=".04"/><site name="s2" pos=".3 0 0"/></body></body></worldbody>
<tendon><spatial name="t"><site site="s0"/><site site="s1"/><geom geom="c"/><site site="s2"/></spatial>
<fixed name="f" armature=".01"><joint joint="j1" coef="1"/><joint joint="j2" coef="-.5"/></fixed></tendon>
<actuator><motor name="mt" tendon="t"/><muscle name="mu" tendon="f" lengthrange="-1 1"/></actuator></mujoco>"""


def _finger() -> mujoco.MjSpec:
    import myo_sim

    path = os.path.join(os.path.dirname(myo_sim.__file__), "models", "legacy", "finger", "myofinger_v0.xml")
    return mujoco.MjSpec.from_file(path)


def _wrapping(m: mujoco.MjModel) -> set[str]:
    """Names of the geoms tendons wrap around: MJX decides once, from their sizes, whether a tendon wraps
    them from inside (a static flag), so their sizes stay as written here."""
    kinds = {int(mujoco.mjtWrap.mjWRAP_SPHERE), int(mujoco.mjtWrap.mjWRAP_CYLINDER)}
    ids = [int(g) for t, g in zip(m.wrap_type, m.wrap_objid) if int(t) in kinds]
    return {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_GEOM, g) for g in ids}


def _edit(spec: mujoco.MjSpec, rng: np.random.Generator) -> None:
    """Change the spec's masses, sizes, positions, armatures and gears (every geom-derived inertia follows)."""
    fixed = _wrapping(spec.compile())
    for g in spec.geoms:
        if g.type in (mujoco.mjtGeom.mjGEOM_PLANE, mujoco.mjtGeom.mjGEOM_MESH):
            continue
        if not np.isnan(g.mass) and g.mass > 0:
            g.mass = g.mass * rng.uniform(0.5, 2.0)
        else:
            g.density = g.density * rng.uniform(0.5, 2.0)
        if g.name in fixed:
            continue
        g.size = np.asarray(g.size) * rng.uniform(0.7, 1.3, 3)
        if np.isnan(g.fromto[0]):
            g.pos = np.asarray(g.pos) + rng.uniform(-0.02, 0.02, 3)
        else:  # a geom placed by its end points: move them
            g.fromto = np.asarray(g.fromto) * rng.uniform(0.8, 1.2, 6)
    for j in spec.joints:
        j.armature = j.armature * rng.uniform(0.5, 2.0) + rng.uniform(0.0, 0.05)
    for a in spec.actuators:
        a.gear = np.asarray(a.gear) * rng.uniform(0.5, 2.0)


PRIMARY = (
    "body_mass",
    "body_inertia",
    "body_ipos",
    "body_iquat",
    "geom_size",
    "geom_pos",
    "geom_quat",
    "dof_armature",
    "actuator_gear",
    "qpos0",
)


@pytest.mark.parametrize("name", ["free", "chain", "tendon", "myofinger"])
def test_set_const_matches_the_c_model_rebuilt_at_other_values(name):
    spec_a = (
        _finger()
        if name == "myofinger"
        else mujoco.MjSpec.from_string({"free": FREE, "chain": CHAIN, "tendon": TENDON}[name])
    )
    spec_b = spec_a.copy()
    _edit(spec_b, np.random.default_rng(0))
    a, b = spec_a.compile(), spec_b.compile()
    assert not np.allclose(a.body_mass, b.body_mass)  # the edit moved the masses
    mx_a, mx_b = mjx.put_model(a), mjx.put_model(b)
    m = constants.general_structure(mx_a).tree_replace({k: getattr(mx_b, k) for k in PRIMARY})
    got = jax.jit(set_const)(m)
    for leaf in sorted(constants.WRITTEN_LEAVES - {"body_mass", "body_inertia", "body_ipos", "body_iquat"}):
        g, w = np.asarray(_get(got, leaf)), np.asarray(_get(mx_b, leaf))
        before = np.asarray(_get(mx_a, leaf))
        assert g.shape == w.shape, leaf
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12, err_msg=f"{name}: {leaf}")
        if leaf in ("body_subtreemass", "dof_M0", "body_invweight0") or (leaf == "actuator_acc0" and a.nu):
            assert not np.allclose(before, w), f"{leaf} did not change: the check would pass without set_const"


def _get(m, leaf):
    for part in leaf.split("."):
        m = getattr(m, part)
    return m


def test_set_const_differentiates_masses_into_the_inverse_weights():
    """grad of the contact regulariser's scale (body_invweight0) w.r.t. a mass: central differences."""
    mx = mjx.put_model(mujoco.MjModel.from_xml_string(CHAIN))

    def weight(mass):
        return set_const(mx.tree_replace({"body_mass": mx.body_mass.at[2].set(mass)})).body_invweight0[3, 0]

    f = jax.jit(jax.value_and_grad(weight))
    m0 = float(mx.body_mass[2])
    _, g = f(m0)
    h = 1e-5 * m0
    cd = (f(m0 + h)[0] - f(m0 - h)[0]) / (2 * h)
    assert abs(float(g)) > 1e-3
    np.testing.assert_allclose(float(g), float(cd), rtol=1e-6)


def test_set_const_under_vmap_randomises_masses():
    """Domain randomisation: a batch of masses, each model's constants as if built alone."""
    mx = mjx.put_model(mujoco.MjModel.from_xml_string(CHAIN))
    masses = np.array([0.5, 1.0, 2.0])
    batch = jax.jit(jax.vmap(lambda m: set_const(mx.tree_replace({"body_mass": mx.body_mass.at[1].set(m)}))))(masses)
    one = jax.jit(lambda m: set_const(mx.tree_replace({"body_mass": mx.body_mass.at[1].set(m)})))
    for i, m in enumerate(masses):
        np.testing.assert_allclose(batch.body_invweight0[i], one(m).body_invweight0, rtol=1e-12)
        assert batch.body_subtreemass[i, 0] == pytest.approx(float(np.sum(mx.body_mass)) - float(mx.body_mass[1]) + m)
