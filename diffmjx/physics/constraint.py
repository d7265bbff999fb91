r"""Constraint rows: where DiffMJX builds or rewrites MJX's rows (as MJX's ``constraint.py``).

MJX's ``make_constraint`` builds the rows of contacts with negative signed distance;
:func:`make_constraint` runs it with the contacts' impedance inputs frozen and differentiates the
impedance itself (MJX's derivative of it is NaN for every contact candidate farther than solimp's
``width``). One change is made on those rows, a function ``(m, d) -> d``; :mod:`diffmjx.physics.solver`
only solves them.

* :func:`with_impedance_floor` lowers MuJoCo's impedance floor (``solver.impedance_floor``), so
  touchdown is continuous.

The rows of contacts from distance are built from these (:func:`make_constraint`,
:func:`contact_rows`, :func:`row_impedance`, :func:`row_weight`, :func:`stiffness_damping`) in
:mod:`diffmjx.physics.cfd`. Every rewrite of a contact row's impedance goes through the same three steps:
the impedance MJX used (:func:`row_impedance`), the row weight ``w`` it implies
(:func:`row_weight`), and ``D = d / ((1 - d) w)`` for the new impedance ``d`` (:func:`row_D`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.physics.impedance import MAXIMP, MINIMP, mujoco_impedance

__all__ = [
    "SOLREF_FIELDS",
    "ContactRows",
    "contact_rows",
    "elliptic_friction_rows",
    "make_constraint",
    "row_D",
    "row_impedance",
    "row_stiffness_damping",
    "row_weight",
    "stiffness_damping",
    "with_impedance_floor",
]


SOLREF_FIELDS = (
    "geom_solref",
    "pair_solref",
    "pair_solreffriction",
    "eq_solref",
    "jnt_solref",
    "dof_solref",
    "tendon_solref_lim",
    "tendon_solref_fri",
)
"""The model fields whose ``[..., 0]`` is a constraint's time constant (MuJoCo's ``refsafe`` clamps it,
:func:`stiffness_damping`)."""


class ContactRows(NamedTuple):
    """Row indices of the contacts' constraint rows and, per row, the contact it belongs to."""

    rows: np.ndarray  # (nrows,) int32 indices into the efc_* arrays
    contact: np.ndarray  # (nrows,) int32 indices into d.contact


def contact_rows(m, c) -> ContactRows:
    """Every contact's constraint rows in MJX's row layout.

    Pyramidal cones give a contact of condim ``dim`` ``2 (dim - 1)`` rows (1 for condim 1),
    elliptic ones ``dim`` rows; contacts without rows (``efc_address < 0``) are skipped.

    Arguments:
        m: ``mjx.Model``.
        c: ``mjx.Contact`` of the data whose rows are indexed (concrete, not traced).

    Returns:
        :class:`ContactRows`.
    """
    pyramidal = m.opt.cone == _mjx.ConeType.PYRAMIDAL
    rows, con = [], []
    for i, (dim, adr) in enumerate(zip(np.asarray(c.dim), np.asarray(c.efc_address), strict=True)):
        if adr < 0:
            continue
        n = 1 if dim == 1 else (2 * (dim - 1) if pyramidal else int(dim))
        rows.extend(range(adr, adr + n))
        con.extend([i] * n)
    return ContactRows(np.asarray(rows, dtype=np.int32), np.asarray(con, dtype=np.int32))


def row_impedance(r, solimp, floor=MINIMP):
    """MuJoCo's impedance of contact rows at violations ``r``, clipped to ``[floor, MAXIMP]`` as MJX clips it.

    Arguments:
        r: (n,) signed distances less the margins, in m.
        solimp: (n, 5) the rows' contacts' solimp.
        floor: the least impedance (MuJoCo's ``MINIMP`` by default; see
            :func:`diffmjx.physics.impedance.mujoco_impedance`).

    Returns:
        (n,) impedances.
    """
    imp = jnp.vectorize(mujoco_impedance, signature="(),(5),()->()")(r, solimp, floor)
    return jnp.clip(imp, floor, MAXIMP)


def row_weight(D, imp):
    """The row weight ``w`` of rows whose ``D = d / ((1 - d) w)`` MJX built with impedance ``d = imp``."""
    return (1.0 / D) * imp / (1.0 - imp)


def row_D(imp, weight):
    """``D = d / ((1 - d) w)``: a row's inverse regulariser for impedance ``d = imp`` and weight ``w``."""
    return imp / (weight * (1.0 - imp))


def stiffness_damping(m, solref, solimp):
    """MuJoCo's stiffness k and damping b of the reference acceleration, per row.

    Arguments:
        m: ``mjx.Model`` (timestep and the ``refsafe`` flag).
        solref: (n, 2) time constant and damping ratio, or direct negative stiffness and damping.
        solimp: (n, 5) impedance parameters (``dwidth`` scales k and b).

    Returns:
        ``(k, b)``, each (n,).
    """
    tc, dr = solref[:, 0], solref[:, 1]
    if not m.opt.disableflags & _mjx.DisableBit.REFSAFE:
        tc = jnp.maximum(tc, 2 * m.opt.timestep)
    dmax = jnp.clip(solimp[:, 1], MINIMP, MAXIMP)
    k = 1 / (dmax * dmax * tc * tc * dr * dr)
    b = 2 / (dmax * tc)
    k = jnp.where(solref[:, 0] <= 0, -solref[:, 0] / (dmax * dmax), k)
    b = jnp.where(solref[:, 1] <= 0, -solref[:, 1] / dmax, b)
    return k, b


def elliptic_friction_rows(m, c, rows, con) -> np.ndarray:
    """Which of the contacts' rows are friction rows of an elliptic cone (none for pyramidal ones).

    An elliptic contact's first row is its normal, the others its friction directions; a pyramid's
    edges each mix the normal with one friction direction, so no pyramidal row is a friction row.
    """
    if m.opt.cone != _mjx.ConeType.ELLIPTIC:
        return np.zeros(rows.size, dtype=bool)
    return rows != np.asarray(c.efc_address)[con]


def row_stiffness_damping(m, c, con, friction_row):
    """MuJoCo's ``(k, b)`` of contact rows: ``solref`` for normal rows and pyramid edges, an elliptic
    friction row's ``solreffriction`` where the contact sets it (:func:`stiffness_damping`)."""
    srf = c.solreffriction[con]
    own = jnp.asarray(friction_row) & jnp.any(srf != 0, axis=1)
    return stiffness_damping(m, jnp.where(own[:, None], srf, c.solref[con]), c.solimp[con])


def make_constraint(m, d):
    r"""MJX's constraint rows, with the contacts' impedance differentiated by DiffMJX.

    MJX's impedance evaluates both pieces of MuJoCo's solimp spline for every contact candidate
    and keeps one with ``jnp.where``; for a candidate farther than ``width`` from touching (on
    either side) the other piece is ``(1 - |r| / width)^p`` of a negative base, whose derivative is
    NaN (w.r.t. ``p`` always, w.r.t. ``r`` and ``width`` for a non-integer ``p``). The NaN survives
    the ``where`` in reverse mode, and reaches every parameter of a scene with a body in flight.

    Here MJX builds the rows from contacts whose impedance inputs (``dist``, ``includemargin``,
    ``solref``, ``solreffriction``, ``solimp``) are frozen, so its rows carry the derivatives of
    the Jacobians, friction and row weights only; the derivatives through those inputs are added
    from :func:`diffmjx.physics.impedance.mujoco_impedance` and :func:`stiffness_damping`, which are
    finite everywhere. Values are MJX's exactly (each added term is ``x - stop_gradient(x)``).

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` after the collision stage.

    Returns:
        ``d`` with its constraint rows.
    """
    c = _mjx.contact(d)
    sg = jax.lax.stop_gradient
    frozen = c.replace(
        dist=sg(c.dist),
        includemargin=sg(c.includemargin),
        solref=sg(c.solref),
        solreffriction=sg(c.solreffriction),
        solimp=sg(c.solimp),
    )
    d = _mjx.make_constraint(m, _mjx.with_contact(d, frozen))
    d = _mjx.with_contact(
        d,
        _mjx.contact(d).replace(
            dist=c.dist,
            includemargin=c.includemargin,
            solref=c.solref,
            solreffriction=c.solreffriction,
            solimp=c.solimp,
        ),
    )
    rows, con = contact_rows(m, c)
    if rows.size == 0:
        return d
    efc = _mjx.efc(d)
    r = c.dist[con] - c.includemargin[con]
    solimp = c.solimp[con]
    imp = row_impedance(r, solimp)
    friction_row = elliptic_friction_rows(m, c, rows, con)
    k, b = row_stiffness_damping(m, c, con, friction_row)
    weight = sg(row_weight(efc.D[rows], imp))  # MJX's row weight, held
    d_live = row_D(imp, weight)
    pos = jnp.where(~jnp.asarray(friction_row) & (r < 0), r, 0.0)
    aref_live = -b * sg(efc.J[rows] @ d.qvel) - k * imp * pos
    return _mjx.with_efc(
        d,
        efc_D=efc.D.at[rows].add(d_live - sg(d_live)),
        efc_aref=efc.aref.at[rows].add(aref_live - sg(aref_live)),
    )


def with_impedance_floor(m, d, floor: float):
    r"""Contact rows with the impedance floor ``floor`` instead of MuJoCo's 1e-4.

    MuJoCo clips every impedance to at least ``mjMINIMP`` = 1e-4, so a contact whose ``solimp[0]``
    is 0 still switches on with a small force at zero distance: a jump in the dynamics that the
    ODE solver steps over and reverse-mode AD does not see (the missing term is the force jump
    times the change in touchdown time). With ``floor = 0`` the force starts from zero and the
    dynamics are continuous. Each row's ``D = d / ((1 - d) w)`` is rescaled for the new
    impedance; the row weight ``w`` and the reference acceleration are MJX's. Within solimp's
    ``width`` the impedance curve moves by at most the old floor (1e-4 of its range); deeper
    rows are unchanged.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` whose constraint rows MJX has built.
        floor: the least impedance, in [0, MAXIMP).

    Returns:
        ``d`` with the contact rows' ``efc_D`` rescaled.
    """
    c = _mjx.contact(d)
    rows, con = contact_rows(m, c)
    if rows.size == 0:
        return d
    efc = _mjx.efc(d)
    r, solimp = c.dist[con] - c.includemargin[con], c.solimp[con]
    old, new = row_impedance(r, solimp), row_impedance(r, solimp, floor)
    scale = new * (1.0 - old) / ((1.0 - new) * old)
    return _mjx.with_efc(d, efc_D=efc.D.at[rows].set(efc.D[rows] * scale))
