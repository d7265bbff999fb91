"""The published cube (docs/results/contactnets_params.json) predicts what its record says it does.

The file is read as a user would read it, with ``json``: its values go into a plain MJCF box on a
plane (none of the study's model code), its ``config_overrides`` into a ``diffmjx.Config``, and whole
test tosses (named by ``contactnets_params_record.json``, never trained or selected on; read from the
data file as :class:`diffmjx.sysid.Recording` s) are rolled out with ``diffmjx.rollout`` from their
first recorded state. Their mean position errors must be the
recorded ones, to within what rounding-level changes of the start move them (measured here).
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

import diffmjx
from diffmjx import sysid

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
TOSSES = ROOT / "data" / "contactnets" / "contactnets_cube_tosses.npz"
N_TOSSES = 2  # the shortest test tosses: the check's cost
ENSEMBLE = 6  # rollouts per toss: as recorded, and perturbed at rounding level
_SOLVERS = {"pgs": "PGS", "cg": "CG", "newton": "Newton"}


def _box_on_plane(fp: dict) -> str:
    o = fp["options"]
    contact = (
        f'condim="3" solref="{" ".join(map(repr, fp["solref"]))}" '
        f'solimp="{" ".join(map(repr, fp["solimp"]))}" friction="{float(fp["friction"])!r} 0.005 0.0001"'
    )
    half = float(fp["side_length_m"]) / 2
    return f"""
<mujoco>
  <option timestep="{o["timestep"]!r}" solver="{_SOLVERS[o["solver"]]}"
          iterations="{o["iterations"]}" ls_iterations="{o["ls_iterations"]}" tolerance="{o["tolerance"]!r}"
          impratio="{o["impratio"]!r}" cone="{o["cone"]}"/>
  <worldbody>
    <geom type="plane" size="0 0 0.05" {contact}/>
    <body>
      <freejoint/>
      <geom type="box" size="{half!r} {half!r} {half!r}" mass="{float(fp["mass_kg"])!r}" {contact}/>
    </body>
  </worldbody>
</mujoco>"""


def _config(overrides: dict) -> diffmjx.Config:
    sections: dict = {}
    for key, value in overrides.items():
        section, field = key.split(".", 1)
        sections.setdefault(section, {})[field] = value
    return diffmjx.Config.from_dict(sections)


@pytest.mark.slow  # suite budget: experiments.contactnets_generic reruns the fit and its test error
def test_published_params_reproduce_their_recorded_test_error():
    fp = json.loads((RESULTS / "contactnets_params.json").read_text())
    record = json.loads((RESULTS / "contactnets_params_record.json").read_text())
    m = mujoco.MjModel.from_xml_string(_box_on_plane(fp))
    with np.load(TOSSES) as f:
        tosses = {
            n: sysid.Recording(qpos=f[n][:, :7], qvel=f[n][:, 7:], dt=1 / 148, name=n).check(m)
            for n in record["test_tosses"]
        }
    assert set(record["test_tosses"]).isdisjoint(record["selection_tosses"])
    names = sorted(record["test_tosses"], key=lambda n: (tosses[n].qpos.shape[0], n))[:N_TOSSES]
    length = max(tosses[n].qpos.shape[0] for n in names)

    assert np.isclose(m.geom_size[1, 0] * 2, fp["side_length_m"]) and np.isclose(m.body_mass[1], fp["mass_kg"])
    mx = mjx.put_model(m)
    cfg = _config(fp["config_overrides"])
    d0 = mjx.make_data(mx)

    # The file's simulation (the paper's 2-iteration Newton solve at rtol 1e-5) makes a whole toss
    # sensitive to rounding: initial velocities perturbed by 1e-15 relative move toss_211's error
    # between 10.05 and 10.99 mm in 12 rollouts, mostly near 10.15 (the record, from the sysid
    # model's batched rollout: 10.78). So each toss runs as a small ensemble, lane 0 as recorded, the
    # others so perturbed, and the recorded error must lie within the ensemble's range widened by half
    # its width and 10 % (a few lanes may miss a rare mode): a wrong parameter, option or override moves
    # it by more (the pre-tuned cube's recorded error, 0.4-2x the published one here, lies outside).
    rng = np.random.default_rng(0)

    @jax.jit
    def positions(qpos0, qvel0):
        def one(qvel0):
            _, traj = diffmjx.rollout(mx, d0.replace(qpos=qpos0, qvel=qvel0), jnp.zeros((length - 1, 0)), cfg)
            return traj.qpos[:, :3]

        return jax.vmap(one)(qvel0)

    for name in names:
        t = tosses[name]
        scale = np.ones((ENSEMBLE, t.qvel.shape[1]))
        scale[1:] += 1e-15 * rng.standard_normal((ENSEMBLE - 1, t.qvel.shape[1]))
        sim = np.asarray(positions(jnp.asarray(t.qpos[0]), jnp.asarray(t.qvel[0] * scale)))[:, : t.qpos.shape[0] - 1]
        err_mm = 1e3 * np.mean(np.linalg.norm(sim - t.qpos[None, 1:, :3], axis=-1), axis=1)
        lo, hi = err_mm.min(), err_mm.max()
        lo, hi = lo * 0.9 - (hi - lo) / 2, hi * 1.1 + (hi - lo) / 2
        recorded, pretuned = record["per_toss_test_error_mm"][name], record["pretuned_per_toss_test_error_mm"][name]
        assert lo <= recorded <= hi, f"{name}: recorded {recorded:.2f} mm, rolled out {np.round(err_mm, 2)} mm"
        assert not lo <= pretuned <= hi, f"{name}: the check cannot tell the pre-tuned cube ({pretuned:.2f} mm) apart"
    assert record["test_error_mm"] <= 0.85 * record["pretuned_test_error_mm"]
