r"""Contacts from distance (CFD): the method's one home in the library (paper Sec. 4).

When two bodies do not touch, MJX has no force between them and every gradient of their approach
is zero. CFD builds contact rows for signed distances :math:`0 < r < w_c` as well, solves them
next to MJX's, and by default uses them only for the derivatives (straight-through), so the
trajectory stays MJX's.

**Impedance.** MuJoCo's impedance (:func:`diffmjx.physics.impedance.mujoco_impedance`) is kept for
:math:`r \le 0` and continued for :math:`0 < r < w_c` by a second spline of the same family
(:func:`diffmjx.physics.impedance.spline`), parametrised by ``cfd.solimp = (d_c, d_0, w_c, m_c, p_c)``:

.. math:: d(r) = d_c + y\!\left(\tfrac{w_c - r}{w_c};\, m_c, p_c\right)(d_0 - d_c), \qquad
          d(r) = d_c \text{ for } r \ge w_c,

so the continuation leaves :math:`r = 0` at :math:`d_0` and lands flat on :math:`d_c` at
:math:`r = w_c`. With ``d_0 = solimp[0]``, ``power, p_c > 1`` and ``m_c < 1`` it is C1 at both joins.
The position term of the reference acceleration, :math:`k\,d(r)\,\max(0, -r)` in MuJoCo, becomes
:math:`k\,d(r)\,\operatorname{softplus}(-s r)/s` (:func:`position_term`).

**Rows.** :func:`distance_rows` runs DiffMJX's row stage
(:func:`diffmjx.physics.constraint.make_constraint`) on distances shifted by ``-w_c``, which gives every
contact with ``r < w_c`` its rows (Jacobians, friction pyramid, MJX's regulariser weights); the
rows' impedance and reference acceleration are then rebuilt for the true ``r``:
``R = w (1 - d(r)) / d(r)`` with the row weight ``w`` recovered from MJX's ``R``, and
``aref = -b J v + k d(r) softplus(-s r) / s``. :func:`cfd_contacts` picks the contacts they are
built from.

**Forward.** :func:`accelerations` is the constraint solve of :func:`diffmjx.forward` under
``cfd.enabled``: MJX's rows and CFD's rows solved on the same positions and velocities, combined by
:func:`straight_through` (or CFD's alone with ``cfd.in_forward``).

The public face of the method is the :mod:`cfd` package, which sits above :mod:`diffmjx` and
re-exports these functions.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from diffmjx import _mjx
from diffmjx.config import CFDConfig, Config
from diffmjx.physics import collision, solver
from diffmjx.physics.constraint import (
    contact_rows,
    elliptic_friction_rows,
    make_constraint,
    row_D,
    row_impedance,
    row_stiffness_damping,
    row_weight,
)
from diffmjx.physics.impedance import MAXIMP, MINIMP, MINVAL, mujoco_impedance, spline

__all__ = [
    "accelerations",
    "cfd_contacts",
    "cfd_impedance",
    "continuation",
    "derivative_only",
    "distance_rows",
    "position_term",
    "straight_through",
]


def continuation(r, cfd_solimp):
    """The CFD spline alone, for 0 <= r <= w_c: from ``d_0`` at r = 0, flat onto ``d_c`` at ``w_c``.

    Arguments:
        r: signed distance in m.
        cfd_solimp: (5,) ``(d_c, d_0, w_c, m_c, p_c)``.

    Returns:
        The continued impedance.
    """
    d_c, d_0, w_c, m_c, p_c = cfd_solimp
    return d_c + spline((w_c - r) / w_c, m_c, p_c) * (d_0 - d_c)


def cfd_impedance(r, solimp, cfd_solimp, floor=MINIMP):
    """Impedance for signed distance ``r``: MuJoCo's for r <= 0, the CFD continuation above.

    Arguments:
        r: signed distance in m.
        solimp: (5,) MuJoCo's solimp of the contact.
        cfd_solimp: (5,) ``(d_c, d_0, w_c, m_c, p_c)``.
        floor: least impedance inside contact, as in :func:`diffmjx.physics.impedance.mujoco_impedance`.

    Returns:
        The impedance ``d(r)``; ``d_c`` for ``r >= w_c``.
    """
    d_c, w_c = cfd_solimp[0], cfd_solimp[2]
    inside = mujoco_impedance(r, solimp, floor)
    return jnp.where(r <= 0, inside, jnp.where(r < w_c, continuation(r, cfd_solimp), d_c))


def position_term(r, sharpness):
    """``softplus(-s r) / s``: the reference acceleration's ``max(0, -r)``, smoothed.

    Arguments:
        r: signed distance in m.
        sharpness: s in 1/m.

    Returns:
        The smoothed penetration depth in m.
    """
    return jax.nn.softplus(-sharpness * r) / sharpness


def distance_rows(m, d, cfd: CFDConfig, floor: float = MINIMP):
    """Constraint rows with contacts from distance ``(m, d) -> d``.

    Arguments:
        m: ``mjx.Model`` (pyramidal or elliptic cones).
        d: ``mjx.Data`` with contacts (their signed distances may be positive).
        cfd: the ``cfd`` section of :class:`diffmjx.Config` (``solimp``, ``sharpness``, ``friction``).
        floor: the least impedance of a row (``solver.impedance_floor``; MuJoCo's is 1e-4). With
            0, rows fade out continuously at ``r = w_c`` when ``d_c = 0`` and in contact follow
            the forward's.

    Returns:
        ``d`` with constraint rows for every contact closer than ``w_c``. With ``cfd.friction``
        ``contact``, a contact at ``r >= 0`` pushes along its normal only: a pyramid edge's
        Jacobian ``J_n + mu J_t`` becomes the mean of the contact's edges, ``J_n`` (the rows' weights
        kept, so the pyramid's response to a normal approach is unchanged), and an elliptic
        friction row gets no Jacobian and no reference acceleration (no force).
    """
    c = _mjx.contact(d)
    cfd_solimp = jnp.asarray(cfd.solimp)
    w_c = cfd.solimp[2]
    shifted = make_constraint(m, _mjx.with_contact(d, c.replace(dist=c.dist - w_c)))
    rows, con = contact_rows(m, c)
    if rows.size == 0:
        return shifted
    efc = _mjx.efc(shifted)
    r = c.dist[con] - c.includemargin[con]
    active = r < w_c
    solimp = c.solimp[con]
    friction_row = elliptic_friction_rows(m, c, rows, con)
    J = efc.J[rows]
    if cfd.friction == "contact":  # from a distance, along the normal only
        apart = r >= 0
        if m.opt.cone == _mjx.ConeType.ELLIPTIC:
            normal = jnp.where(jnp.asarray(friction_row)[:, None], 0.0, J)
        else:  # a contact's pyramid edges come in pairs J_n +- mu J_t: their mean is J_n
            ncon = c.dist.shape[0]
            count = np.maximum(np.bincount(con, minlength=ncon), 1)
            normal = (jax.ops.segment_sum(J, jnp.asarray(con), num_segments=ncon) / count[:, None])[con]
        J = jnp.where(apart[:, None], normal, J)
        active_friction = jnp.asarray(friction_row) & ~apart  # elliptic friction rows that still act
    else:
        active_friction = jnp.asarray(friction_row)
    # recover MJX's row weight from R = w (1 - d) / d at the shifted distance MJX saw
    weight = row_weight(efc.D[rows], row_impedance(r - w_c, solimp))
    imp = jnp.vectorize(lambda r, s, c: cfd_impedance(r, s, c, floor), signature="(),(5),(5)->()")(
        r, solimp, cfd_solimp
    )
    imp = jnp.clip(imp, floor, MAXIMP)
    k, b = row_stiffness_damping(m, c, con, friction_row)
    # elliptic friction rows: damping only (no position term), as MuJoCo builds them
    position = jnp.where(jnp.asarray(friction_row), 0.0, k * imp * position_term(r, cfd.sharpness))
    aref = -b * (J @ d.qvel) + position
    dropped = jnp.asarray(friction_row) & ~active_friction
    aref = jnp.where(dropped, 0.0, aref)
    # D = 1 / R with R = w (1 - d) / d >= MINVAL, written without dividing by d (0 with floor 0)
    efc_cfd = jnp.minimum(row_D(imp, weight), 1.0 / MINVAL)
    return _mjx.with_efc(
        shifted,
        efc_J=efc.J.at[rows].set(J),
        efc_D=efc.D.at[rows].set(jnp.where(active, efc_cfd, efc.D[rows])),
        efc_aref=efc.aref.at[rows].set(jnp.where(active, aref, 0.0)),
    )


def cfd_contacts(m, d, cfg: Config):
    """``d`` with the contacts contacts-from-distance builds its rows from.

    With ``collision.smooth`` these are the forward's own, except box-box under
    ``collision.box_box=clipped``: the clipped construction reports only penetrating points, so
    CFD takes the smoothed blend of MJX's rule there, which keeps the true distance of boxes apart
    (in the same slots). Without smoothing, MJX's contacts serve the forward, but CFD takes
    DiffMJX's smoothed collision functions (at ``collision.sharpness``) for the pairs that have
    one: for a box above a plane, MJX's plane-box reports four vertices that are not the lowest
    ones (its manifold rule assumes penetration), so CFD would pull on the wrong corners.

    Arguments:
        m: ``mjx.Model``.
        d: ``mjx.Data`` after the forward's position stages.
        cfg: :class:`diffmjx.Config` (its ``collision`` section is read).

    Returns:
        ``d`` with CFD's contacts.
    """
    c = cfg.collision
    if c.smooth and not (c.box_box == "clipped" and collision.has_box_pairs(m)):
        return d
    return collision.collide(m, d, dataclasses.replace(c, smooth=True), apart=True)


def straight_through(forward_value, backward_value):
    """One function's values, another's derivatives: leaf by leaf ``sg(f) + b - sg(b)``.

    With MJX's accelerations as ``forward_value`` and the contacts-from-distance accelerations as
    ``backward_value``, the trajectory stays physical while gradients see forces between bodies
    that do not touch (paper Sec. 4, eq. 4).

    Arguments:
        forward_value: pytree whose values the result takes.
        backward_value: pytree of the same structure whose derivatives the result takes.

    Returns:
        A pytree equal to ``forward_value`` with the derivatives of ``backward_value``.
    """
    sg = jax.lax.stop_gradient
    return jax.tree.map(lambda f, b: sg(f) + (b - sg(b)), forward_value, backward_value)


def derivative_only(fn, like, *args):
    """Zeros that carry ``fn``'s derivatives: ``b - sg(b)`` with ``b = fn(*args)``, without ``b``.

    The value is zeros and ``fn`` is not evaluated unless something differentiates through the
    result (``jvp``, ``grad``, ``vjp``); then ``fn``'s tangent is the result's. So
    ``sg(f) + derivative_only(g, f, x)`` is :func:`straight_through` ``(f, g(x))`` with ``g`` left
    out of every evaluation that is not differentiated: the forward sweep of a checkpointed solve,
    a rollout under plain ``jit``, a step-size controller's trial steps.

    Arguments:
        fn: a jittable function of ``args`` (it must not close over traced values).
        like: a pytree with the structure, shapes and dtypes of ``fn(*args)``, computed from the
            same inputs (the forward value ``f``): the zeros are taken from it, so that they are
            batched wherever ``fn``'s derivatives are (zeros made from nothing are not, and JAX
            then fails to batch a ``grad`` of a ``vmap`` of a ``scan``). Its derivatives are ignored.
        *args: ``fn``'s arguments (pytrees; integer leaves get no derivative).

    Returns:
        A pytree of zeros like ``like`` (where ``like`` is not finite, zeros as well).
    """
    return _derivative_only(fn, jax.lax.stop_gradient(like), *args)


def _zeros_from(x):
    return jnp.where(jnp.isfinite(x), 0.0 * x, 0.0).astype(x.dtype)  # exact zeros, data-dependent on x


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _derivative_only(fn, like, *args):
    return jax.tree.map(_zeros_from, like)


@_derivative_only.defjvp
def _derivative_only_jvp(fn, primals, tangents):
    like, *args = primals
    _, tangent = jax.jvp(fn, tuple(args), tuple(tangents[1:]))
    return jax.tree.map(_zeros_from, like), tangent


def accelerations(m, d, cfg: Config, remat_iterations: bool = True):
    """The constraint solve of :func:`diffmjx.forward` with ``cfd.enabled``: ``(m, d) -> d``.

    CFD's rows (:func:`distance_rows` on :func:`cfd_contacts`) are solved on the same positions
    and velocities as MJX's rows in ``d``. With ``cfd.in_forward`` CFD's solution is the result;
    otherwise MJX's solution is, with CFD's derivatives (:func:`straight_through`, built with
    :func:`derivative_only`, so CFD costs nothing where nothing is differentiated) on ``qacc``
    and on ``qfrc_constraint``, which MJX's Euler (with Euler damping, MuJoCo's default) and
    implicit integrators turn into the acceleration again (``M^-1 (qfrc_smooth + qfrc_constraint)``).

    Arguments:
        m: ``mjx.Model`` (pyramidal or elliptic cones).
        d: ``mjx.Data`` with MJX's constraint rows built and ``qacc_smooth`` computed.
        cfg: :class:`diffmjx.Config` (the ``cfd``, ``collision`` and ``solver`` sections are read).
        remat_iterations: passed to :func:`diffmjx.physics.solver.solve`.

    Returns:
        ``d`` with ``qacc`` and ``qfrc_constraint`` (acceleration sensors not yet evaluated).
    """
    sc = cfg.solver

    def cfd_solve(m, d):
        ms = solver.solve_model(m, sc)  # the solve's budget; every other stage keeps m
        rows = distance_rows(m, cfd_contacts(m, d, cfg), cfg.cfd, sc.impedance_floor)
        return solver.solve(ms, rows, sc.gradient, remat_iterations)

    if cfg.cfd.in_forward:
        return cfd_solve(m, d)

    def cfd_forces(m, d):
        s = cfd_solve(m, d)
        return s.qacc, s.qfrc_constraint

    # straight-through, with CFD's rows and solve built only where something differentiates
    d_mjx = solver.solve(solver.solve_model(m, sc), d, sc.gradient, remat_iterations)
    forces = (d_mjx.qacc, d_mjx.qfrc_constraint)
    dqacc, dqfrc = derivative_only(cfd_forces, forces, m, d)
    sg = jax.lax.stop_gradient
    return d_mjx.replace(qacc=sg(d_mjx.qacc) + dqacc, qfrc_constraint=sg(d_mjx.qfrc_constraint) + dqfrc)
