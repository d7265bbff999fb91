"""The differentiable cube model: traced mjx.Model equals MJX's own, reparametrisation, bad values, gradients.

Three gradient programs are compiled: a rollout per integrator (its gradient and the
finite-difference losses in one JIT) and one forward pass for the strict xfail; everything else is cheap.
"""

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import diffmjx
from diffmjx import sysid
from diffmjx._mjx import mjx
from diffmjx.sysid import CubeParams, cube_mjmodel, cube_mjx_model, from_unconstrained, to_unconstrained

RNG = np.random.default_rng(20240)


def _random_params(rng) -> CubeParams:
    return CubeParams(
        side_length=rng.uniform(0.02, 0.3),
        mass=rng.uniform(0.05, 3.0),
        solref=np.array([rng.uniform(0.015, 0.05), rng.uniform(0.5, 2.0)]),
        solimp=np.array(
            [
                rng.uniform(0.01, 0.5),
                rng.uniform(0.6, 0.99),
                rng.uniform(1e-3, 0.05),
                rng.uniform(0.2, 0.8),
                rng.uniform(1.0, 4.0),
            ]
        ),
        friction=rng.uniform(0.05, 1.0),
    )


# two random sets and a cube small enough (sqrt(3) h < 0.01 m) that stat.extent takes the plane's bound
PARAM_SETS = [_random_params(RNG), _random_params(RNG), CubeParams(side_length=0.005, mass=0.01)]


# the mjx.Model leaves that depend on the parameters (diffing put_model at two parameter sets)
DERIVED = {
    ".geom_size",
    ".geom_rbound",
    ".geom_aabb",
    ".body_mass",
    ".body_subtreemass",
    ".body_inertia",
    ".body_invweight0",
    ".dof_invweight0",
    ".dof_M0",
    ".stat.meanmass",
    ".stat.meaninertia",
    ".stat.meansize",
    ".stat.extent",
    ".geom_solref",
    ".geom_solimp",
    ".geom_friction",
}


@pytest.fixture(scope="module")
def base():
    return mjx.put_model(cube_mjmodel())


@pytest.fixture(scope="module")
def traced_model():
    return jax.jit(cube_mjx_model)  # one compilation serves every parameter set


def _leaves(tree):
    return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_c_model_settings():
    m = cube_mjmodel()
    assert m.opt.timestep == sysid.DT and m.opt.solver == 2 and m.opt.iterations == 2  # 2: mjSOL_NEWTON
    assert m.opt.ls_iterations == 10 and m.opt.tolerance == 1e-8 and m.opt.impratio == 1 and m.opt.cone == 0
    assert cube_mjmodel(iterations=4).opt.iterations == 4
    np.testing.assert_array_equal(m.geom_size[1], [0.0524] * 3)
    assert m.body_mass[1] == pytest.approx(0.37, rel=1e-15)
    np.testing.assert_allclose(m.body_inertia[1], 0.37 * 0.1048**2 / 6, rtol=1e-14)  # uniform density
    for g in (0, 1):
        np.testing.assert_array_equal(m.geom_solref[g], [0.02, 1.0])
        np.testing.assert_array_equal(m.geom_solimp[g], [0.05, 0.95, 0.01, 0.5, 2.0])
        assert m.geom_friction[g, 0] == 0.18 and m.geom_condim[g] == 3


@pytest.mark.parametrize("params", PARAM_SETS, ids=["random0", "random1", "tiny"])
def test_traced_model_equals_put_model(base, traced_model, params):
    got = traced_model(params, base)
    want = mjx.put_model(cube_mjmodel(params))
    # the one field cube_mjx_model keeps from base: MJX's static copy of geom_rbound for height fields
    np.testing.assert_allclose(want._impl.geom_rbound_hfield, np.asarray(want.geom_rbound), rtol=0)
    want = want.tree_replace({"_impl.geom_rbound_hfield": base._impl.geom_rbound_hfield})
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    got, want = _leaves(got), _leaves(want)
    assert got.keys() == want.keys()
    before = _leaves(base)
    changed = []
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{name}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-300, err_msg=f"mjx.Model field {name}")
        if not np.array_equal(w, np.asarray(before[name])):
            changed.append(name)
    # every field the parameters change (the module docstring's list) was exercised
    contact = {".geom_solref", ".geom_solimp", ".geom_friction"}
    assert set(changed) == (DERIVED if params.solref is not CubeParams().solref else DERIVED - contact)


def test_reparametrisation_round_trip():
    for p in [CubeParams(), *PARAM_SETS]:
        back = from_unconstrained(to_unconstrained(p))
        for name in CubeParams._fields:
            np.testing.assert_allclose(getattr(back, name), getattr(p, name), rtol=1e-12, atol=0, err_msg=name)
    z = jax.tree.map(lambda x: RNG.normal(size=np.shape(x)) * 3, to_unconstrained(CubeParams()))
    again = to_unconstrained(from_unconstrained(z))
    for name in CubeParams._fields:
        np.testing.assert_allclose(getattr(again, name), getattr(z, name), rtol=1e-10, atol=1e-12, err_msg=name)
    # any coordinates give a valid model, and the map is differentiable
    for scale in (30.0, -30.0):
        sysid.check_params(from_unconstrained(jax.tree.map(lambda x, s=scale: jnp.full_like(x, s), z)))
    grad = jax.grad(lambda z: sum(jnp.sum(x) for x in from_unconstrained(z)))(z)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        (CubeParams(side_length=-0.1), r"CubeParams\.side_length \(m\)=-0\.1"),
        (CubeParams(mass=0.0), r"CubeParams\.mass"),
        (CubeParams(solref=(0.02, -1.0)), r"CubeParams\.solref\[1\] \(dampratio\)"),
        (CubeParams(solref=(0.02, 1.0, 3.0)), r"CubeParams\.solref has shape \(3,\)"),
        (CubeParams(solimp=(1.5, 0.95, 0.01, 0.5, 2.0)), r"CubeParams\.solimp\[0\] \(d0\)"),
        (CubeParams(solimp=(0.05, 0.95, 0.01, 0.5, 0.5)), r"CubeParams\.solimp\[4\] \(power\)"),
        (CubeParams(friction=float("nan")), r"CubeParams\.friction=\[?nan"),
    ],
)
def test_bad_values_name_the_field(params, match):
    with pytest.raises(ValueError, match=match):
        cube_mjmodel(params)
    with pytest.raises(ValueError, match=match):
        to_unconstrained(params)


def test_bad_arguments(base):
    with pytest.raises(ValueError, match="iterations=0"):
        cube_mjmodel(iterations=0)
    # MuJoCo's closed bounds are a valid model but lie outside the open image of the reparametrisation
    edge = CubeParams(solimp=(0.05, 0.95, 0.01, 0.5, 1.0))
    cube_mjmodel(edge)
    with pytest.raises(ValueError, match=r"solimp\[4\] \(power\)=1\.0 .*open interval"):
        to_unconstrained(edge)
    with pytest.raises(ValueError, match="not the cube scene"):
        cube_mjx_model(CubeParams(), mjx.put_model(cube_mjmodel()).replace(ngeom=3))
    with pytest.raises(ValueError, match="concrete parameters"):
        jax.jit(lambda s: cube_mjmodel(CubeParams(side_length=s)))(0.1)


# Gradient of a 3-period rollout: the cube starts flat, 2 mm deep in the plane (its rest depth is
# 1.5 mm), sliding at 0.3 m/s. It stays in contact on all four corners, every pyramid edge active
# (checked in the C engine), so the loss is smooth in the parameters and central differences converge.
HORIZON = 3
STEP = 1e-5  # relative; the differences agree with AD to ~1e-8 at this step
CHECKED = [
    ("side_length", None),
    ("mass", None),
    ("solref", 0),
    ("solref", 1),
    ("friction", None),
    ("solimp", 0),
    ("solimp", 2),
]


def _value(p, name, i):
    return float(np.asarray(getattr(p, name), np.float64)[() if i is None else i])


def _perturbed(p, name, i, factor):
    v = np.array(getattr(p, name), np.float64)
    v[() if i is None else i] *= factor
    return p._replace(**{name: v})


def _gradient_and_differences(cfg, iterations):
    base = mjx.put_model(cube_mjmodel(iterations=iterations))
    p0 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), CubeParams())
    d0 = mjx.make_data(base)
    d0 = d0.replace(qpos=d0.qpos.at[2].set(0.0524 - 0.002), qvel=d0.qvel.at[0].set(0.3))
    ctrls = jnp.zeros((HORIZON, 0))

    def loss(p):
        d, _ = diffmjx.rollout(cube_mjx_model(p, base), d0, ctrls, cfg)
        return jnp.sum(d.qpos[:3] ** 2) + jnp.sum(d.qpos[4:] ** 2)

    shifted = [_perturbed(CubeParams(), n, i, 1 + s * STEP) for n, i in CHECKED for s in (1, -1)]
    batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float64) for x in xs]), *shifted)
    # one program: the gradient at p0 and the perturbed losses (vmapped over parameter sets)
    (value, grad), losses = jax.jit(lambda p, b: (jax.value_and_grad(loss)(p), jax.vmap(loss)(b)))(p0, batch)
    losses = np.asarray(losses).reshape(len(CHECKED), 2)
    fd = {
        (n, i): (losses[k, 0] - losses[k, 1]) / (2 * STEP * _value(CubeParams(), n, i))
        for k, (n, i) in enumerate(CHECKED)
    }
    return float(value), grad, fd


@pytest.mark.parametrize(
    ("cfg", "iterations"),
    [
        # suite budget: the generic path's Jacobian test (tests/test_sysid_generic.py) checks every parameter
        # kind the cube uses (a size with its inertia, solref, friction) through contact by default
        pytest.param(diffmjx.Config(), 2, id="default", marks=pytest.mark.slow),
        # suite budget: fixed-step MJX's gradient through the traced model runs under -m slow
        pytest.param(
            diffmjx.Config().override("integrator.solver=mjx_euler"), 4, id="mjx_euler", marks=pytest.mark.slow
        ),
    ],
)
def test_rollout_gradient_matches_central_differences(cfg, iterations):
    value, grad, fd = _gradient_and_differences(cfg, iterations)
    assert 2e-3 < value < 3e-3  # |centre|^2: still on the plane
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grad))
    for (name, i), want in fd.items():
        got = float(np.asarray(getattr(grad, name))[() if i is None else i])
        if name == "mass":
            # MuJoCo's contact is mass-invariant for a lone free body: the regulariser scales with
            # body_invweight0 = 1/m like J M^-1 J', so every acceleration is independent of m. A
            # stale invweight0 (or inertia) would break this and show up here.
            assert abs(got) * 0.37 < 1e-9 * value and abs(want) * 0.37 < 1e-9 * value, (got, want)
            continue
        assert abs(got - want) < 1e-4 * abs(want), (name, i, got, want)


def test_impedance_gradient_is_finite_and_right_beyond_solimp_width(base):
    """A tilted cube with one edge 3 mm deep, solimp width 1 mm and a non-integer power: every contact
    candidate lies beyond the width, in penetration or in the air. MJX's impedance gave NaN
    derivatives there (side length and all of solimp); DiffMJX differentiates the impedance itself
    (diffmjx.physics.constraint.make_constraint), and the result equals central differences."""
    p0 = CubeParams(solimp=np.array([0.05, 0.95, 0.001, 0.4, 2.5]))
    # tilted about (1, 0.5, 0): one corner lowest, 0.5 mm deep (inside the width, where the power
    # shapes the impedance); the other candidates are in the air, beyond the width
    axis, angle, h = np.array([1.0, 0.5, 0.0]) / np.sqrt(1.25), 0.3, 0.0524
    quat = np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, quat)
    corners = np.array([[sx, sy, sz] for sx in (-h, h) for sy in (-h, h) for sz in (-h, h)]) @ rot.reshape(3, 3).T
    depth = np.sort(corners[:, 2])
    assert depth[1] - depth[0] > 0.002  # the next corner is more than a width above the plane
    d = mjx.make_data(base)
    d = d.replace(qpos=jnp.asarray(np.concatenate([[0.0, 0.0, -depth[0] - 0.0005], quat])))

    def f(p):
        return jnp.sum(diffmjx.forward(cube_mjx_model(p, base), d).qacc * jnp.arange(1.0, 7.0))

    grad = jax.jit(jax.grad(f))(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), p0))
    bad = [name for name, g in grad._asdict().items() if not np.all(np.isfinite(g))]
    assert not bad, f"NaN gradient for {bad}"
    checked = [
        ("side_length", None),
        ("solref", 0),
        ("solimp", 0),
        ("solimp", 1),
        ("solimp", 2),
        ("solimp", 3),
        ("solimp", 4),
    ]
    shifted = [_perturbed(p0, n, i, 1 + s * 1e-6) for n, i in checked for s in (1, -1)]
    batch = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float64) for x in xs]), *shifted)
    values = np.asarray(jax.jit(jax.vmap(f))(batch)).reshape(len(checked), 2)
    for k, (n, i) in enumerate(checked):
        want = (values[k, 0] - values[k, 1]) / (2e-6 * _value(p0, n, i))
        got = float(np.asarray(getattr(grad, n))[() if i is None else i])
        assert abs(got - want) <= 1e-5 * abs(want) + 1e-9, (n, i, got, want)
    assert abs(float(grad.solimp[4])) > 1e-3  # the power matters here: the check is not vacuous
