r"""Contact constraint rows out to ``w_c`` with the CFD impedance and reference acceleration.

MJX builds a contact's rows only where its signed distance ``r`` is negative. Here MJX's own
``make_constraint`` runs on distances shifted by ``-w_c``, which gives every contact with
``r < w_c`` its rows (Jacobians, friction pyramid, MJX's regulariser weights); the rows' impedance
and reference acceleration are then rebuilt for the true ``r`` with :mod:`cfd.impedance`:
``R = w (1 - d(r)) / d(r)`` with the row weight ``w`` recovered from MJX's ``R``, and
``aref = -b J v + k d(r) softplus(-s r) / s``.
"""

from __future__ import annotations

import jax.numpy as jnp

from cfd.impedance import MAXIMP, MINIMP, cfd_impedance, mujoco_impedance, position_term
from diffmjx import _mjx


def _stiffness_damping(m, solref, solimp):
    """MuJoCo's k and b of the reference acceleration (refsafe, direct negative solref)."""
    tc, dr = solref[:, 0], solref[:, 1]
    if not m.opt.disableflags & _mjx.DisableBit.REFSAFE:
        tc = jnp.maximum(tc, 2 * m.opt.timestep)
    dmax = jnp.clip(solimp[:, 1], MINIMP, MAXIMP)
    k = 1 / (dmax * dmax * tc * tc * dr * dr)
    b = 2 / (dmax * tc)
    k = jnp.where(solref[:, 0] <= 0, -solref[:, 0] / (dmax * dmax), k)
    b = jnp.where(solref[:, 1] <= 0, -solref[:, 1] / dmax, b)
    return k, b


def make_constraint(m, d, cfd_cfg, floor=MINIMP):
    """``mjx`` constraint rows ``(m, d) -> d`` with contacts from distance (pyramidal cones).

    ``floor``: the least impedance of a row (``solver.impedance_floor``; MuJoCo's is 1e-4). With 0,
    rows fade out continuously at ``r = w_c`` when ``d_c = 0`` and in contact follow the forward's.
    """
    if m.opt.cone != _mjx.ConeType.PYRAMIDAL:
        raise ValueError("cfd.enabled=True supports cone='pyramidal' only")
    c = _mjx.contact(d)
    cfd_solimp = jnp.asarray(cfd_cfg.solimp)
    w_c = cfd_cfg.solimp[2]
    shifted = _mjx.make_constraint(m, _mjx.with_contact(d, c.replace(dist=c.dist - w_c)))
    rows, con = _mjx.contact_rows(m, c)
    if rows.size == 0:
        return shifted
    efc_j, efc_d, aref_all, _, _, _ = _mjx.efc(shifted)
    r = c.dist[con] - c.includemargin[con]
    active = r < w_c
    solref, solimp = c.solref[con], c.solimp[con]
    # recover MJX's row weight from R = w (1 - d) / d at the shifted distance MJX saw
    imp_mjx = jnp.clip(jnp.vectorize(mujoco_impedance, signature="(),(5)->()")(r - w_c, solimp), MINIMP, MAXIMP)
    weight = (1.0 / efc_d[rows]) * imp_mjx / (1.0 - imp_mjx)
    imp = jnp.vectorize(lambda r, s, c: cfd_impedance(r, s, c, floor), signature="(),(5),(5)->()")(r, solimp, cfd_solimp)
    imp = jnp.clip(imp, floor, MAXIMP)
    k, b = _stiffness_damping(m, solref, solimp)
    jv = efc_j[rows] @ d.qvel
    aref = -b * jv + k * imp * position_term(r, cfd_cfg.sharpness)
    # D = 1 / R with R = w (1 - d) / d >= MINVAL, written without dividing by d (0 with floor 0)
    efc_cfd = jnp.minimum(imp / (weight * (1.0 - imp)), 1.0 / _mjx.MINVAL)
    return _mjx.with_efc(
        shifted,
        efc_D=efc_d.at[rows].set(jnp.where(active, efc_cfd, efc_d[rows])),
        efc_aref=aref_all.at[rows].set(jnp.where(active, aref, 0.0)),
    )
