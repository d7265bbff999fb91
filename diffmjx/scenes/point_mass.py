"""The paper's Fig. 4 toy: a 1-D point mass falling onto a floor, with exact continuous-time gradients.

The smallest problem on which a gradient through contact can be checked against the truth, in
pure JAX (no MuJoCo). A point mass (mass 1) starts at height ``q0`` with velocity ``v0 = -1``;
there is no gravity. It is integrated for ``n_steps`` steps of semi-implicit Euler
(``v <- v + h a(q, v); q <- q + h v``) with a floor at ``q = 0``; the loss is ``|q_N - q_T|`` with
``q_T = 1`` (:data:`Q_TARGET`). The two :data:`SETTINGS` both end at ``T = 2 s``.

Contact models (:data:`MODELS`), each a :class:`ContactModel` object that carries its own step,
continuous-time solution and kinks (the functions below take the object, never a name):

:data:`PENALTY` (:class:`Penalty`, ``name`` ``"penalty"``)
    A minimal spring-damper ("MuJoCo-like soft contact"): ``a = -k q - b v`` while ``q < 0`` and
    ``a = 0`` otherwise, selected with ``jnp.where`` (piecewise smooth); ``b = 2 zeta sqrt(k)``
    (:func:`penalty_constants`).
:data:`ELASTIC` (:class:`Elastic`, ``"elastic"``)
    Ideal elastic collision *without* time-of-impact correction, as in DiffTaichi's naive
    integrator: after the position update, if ``q < 0`` (and ``v < 0``) the velocity is flipped;
    the penetrated position is kept.
:data:`ELASTIC_MIRROR` (:class:`ElasticMirror`, ``"elastic_mirror"``)
    Like ``elastic`` but the position is mirrored as well (``q <- -q``): for a constant-speed
    ball this *is* the exact time-of-impact reflection.

A model's ``name`` is for tables and labels; a program that reads names (a command line) maps
them to these objects itself, e.g. ``{m.name: m for m in MODELS}[name]``.

:func:`true_final_height` is the closed-form continuous-time solution of the same model (for the
penalty model the damped contact oscillator: free fall until ``t = q0``, half a damped period in
contact, exit with restitution ``e = exp(-zeta pi / sqrt(1 - zeta^2))``); ``jax.grad`` of it is the
exact gradient. :func:`sweep` compares AD, central differences and that truth over many ``q0``,
:func:`summarize` reduces a sweep to error statistics away from the loss's kinks.

Runs in float64: enable ``jax_enable_x64`` first (:func:`diffmjx.enable_compilation_cache` does).
The study ``experiments.toy_point_mass`` sweeps it and plots the paper's figure.

Why this is library code: the tests check the model, its closed forms and the sweep
(``tests/test_toy_point_mass.py``), and tests may import only the library; it is also the
smallest benchmark with an exact gradient for a user's own contact-gradient experiment. The study
itself (the ``q0`` grid, the stiffness sweep, the CSV, the figure, the printed table and the
command line) lives in ``experiments/toy_point_mass.py``.

Why one file of this length: one toy problem, its three contact models with their closed-form
solutions, and the sweep the tests and the study share.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ELASTIC",
    "ELASTIC_MIRROR",
    "FD_EPS",
    "KINK_MARGIN",
    "MODELS",
    "PENALTY",
    "Q_TARGET",
    "SETTINGS",
    "STIFFNESS",
    "T_FINAL",
    "V0",
    "ZETA",
    "ContactModel",
    "Elastic",
    "ElasticMirror",
    "Penalty",
    "bounce_mask",
    "kink_mask",
    "loss",
    "penalty_constants",
    "simulate",
    "summarize",
    "sweep",
    "true_final_height",
    "true_loss",
]

T_FINAL = 2.0
"""End time of every simulation (s)."""
V0 = -1.0
"""Initial velocity (m/s): towards the floor."""
Q_TARGET = 1.0
"""Target height of the loss ``|q_N - Q_TARGET|``."""
# Penalty parameters.  k = 1e4 (first choice) does NOT converge at h = 1e-4: the AD gradient
# of the discrete map carries an O(k h) error (the exit speed depends on the sub-step
# penetration depth with slope ~ k h), measured median |err| 0.17 at k = 1e4.  k = 1e3
# gives k h = 0.1 at h = 1e-4.  See the stiffness sweep of ``experiments.toy_point_mass``.
STIFFNESS = 1e3
"""Penalty contact stiffness ``k`` (1/s^2, unit mass)."""
ZETA = 0.1
"""Penalty contact damping ratio."""
FD_EPS = 1e-6
"""Step of the central differences in :func:`sweep`."""
SETTINGS = ((0.1, 20), (1e-4, 20_000))
"""``(h, n_steps)`` pairs, both ending at ``T_FINAL``."""
KINK_MARGIN = 0.05
"""Distance in ``q0`` from a kink of the true loss within which :func:`summarize` leaves points out."""


def penalty_constants(k: float = STIFFNESS, zeta: float = ZETA) -> dict:
    """Damping, damped frequency, contact duration and restitution of the penalty contact."""
    omega = float(np.sqrt(k))
    omega_d = omega * float(np.sqrt(1.0 - zeta**2))
    t_contact = float(np.pi / omega_d)
    return {
        "b": 2.0 * zeta * omega,
        "omega": omega,
        "omega_d": omega_d,
        "t_contact": t_contact,
        "restitution": float(np.exp(-zeta * omega * t_contact)),
    }


# ---------------------------------------------------------------------------------------
# Contact models
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ContactModel:
    """A contact model of the toy: its discrete step, its continuous-time solution and where that
    solution's loss has kinks. Use the instances :data:`PENALTY`, :data:`ELASTIC` and
    :data:`ELASTIC_MIRROR`; the objects are hashable (``jax.jit`` takes them as static arguments).

    Attributes:
        name: the model's name in tables and labels.
    """

    name = "contact model"

    def step(self, q, v, h, k, b):
        """One semi-implicit Euler step of size ``h``.

        Arguments:
            q: height.
            v: velocity.
            h: step size (s).
            k: penalty stiffness (unit mass).
            b: penalty damping ``2 zeta sqrt(k)``.

        Returns:
            ``(q, v)`` after the step.
        """
        raise NotImplementedError

    def final_height(self, q0, k, zeta):
        """q(T) of the continuous-time dynamics from height ``q0`` (a float64 array; v0 = -1,
        impact at t = q0) with penalty stiffness ``k`` and damping ratio ``zeta``."""
        raise NotImplementedError

    def contact_time(self, k, zeta) -> float:
        """How long a contact lasts in continuous time (s); 0 for an impulsive one."""
        raise NotImplementedError

    def away_from_kinks(self, q0s: np.ndarray, k, zeta, margin) -> np.ndarray:
        """True where ``q0s`` is at least ``margin`` from the kinks of the continuous loss (see
        :func:`kink_mask`)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Penalty(ContactModel):
    """The spring-damper contact ``a = -k q - b v`` while ``q < 0`` (:data:`PENALTY`)."""

    name = "penalty"

    def step(self, q, v, h, k, b):
        a = jnp.where(q < 0.0, -k * q - b * v, 0.0)
        v = v + h * a
        q = q + h * v
        return q, v

    def final_height(self, q0, k, zeta):
        # the damped contact oscillator: free fall until t = q0, half a damped period in contact,
        # exit with the restitution
        tau = T_FINAL - q0  # time since impact
        free = q0 - T_FINAL  # never reached the floor
        c = penalty_constants(k, zeta)
        zw, wd = zeta * c["omega"], c["omega_d"]
        tau_in = jnp.clip(tau, 0.0, c["t_contact"])  # keep both branches finite
        in_contact = -(1.0 / wd) * jnp.exp(-zw * tau_in) * jnp.sin(wd * tau_in)
        after = c["restitution"] * (tau - c["t_contact"])
        return jnp.where(tau <= 0.0, free, jnp.where(tau < c["t_contact"], in_contact, after))

    def contact_time(self, k, zeta) -> float:
        return penalty_constants(k, zeta)["t_contact"]

    def away_from_kinks(self, q0s, k, zeta, margin):
        # kinks: q(T) = q_T after the bounce, q(T) = q_T without one, and the whole band where
        # the contact is still ongoing at T
        c = penalty_constants(k, zeta)
        kinks = [T_FINAL - c["t_contact"] - Q_TARGET / c["restitution"], T_FINAL + Q_TARGET]
        ok = ~((q0s > T_FINAL - c["t_contact"] - margin) & (q0s < T_FINAL + margin))
        for kq in kinks:
            ok &= np.abs(q0s - kq) >= margin
        return ok


@dataclasses.dataclass(frozen=True)
class Elastic(ContactModel):
    """Velocity flip after the position update, the penetrated position kept (:data:`ELASTIC`)."""

    name = "elastic"

    def step(self, q, v, h, k, b):
        q = q + h * v
        v = jnp.where((q < 0.0) & (v < 0.0), -v, v)
        return q, v

    def final_height(self, q0, k, zeta):
        tau = T_FINAL - q0  # time since impact
        free = q0 - T_FINAL  # never reached the floor
        return jnp.where(tau > 0.0, tau, free)

    def contact_time(self, k, zeta) -> float:
        return 0.0

    def away_from_kinks(self, q0s, k, zeta, margin):
        # kinks: q(T) = q_T after the bounce, the no-bounce boundary q0 = T, q(T) = q_T without one
        kinks = [T_FINAL - Q_TARGET, T_FINAL, T_FINAL + Q_TARGET]
        ok = np.ones_like(q0s, dtype=bool)
        for kq in kinks:
            ok &= np.abs(q0s - kq) >= margin
        return ok


@dataclasses.dataclass(frozen=True)
class ElasticMirror(Elastic):
    """Velocity flip and mirrored position, the exact reflection at constant speed
    (:data:`ELASTIC_MIRROR`); its continuous-time solution is :class:`Elastic`'s."""

    name = "elastic_mirror"

    def step(self, q, v, h, k, b):
        q = q + h * v
        hit = q < 0.0
        q = jnp.where(hit, -q, q)
        v = jnp.where(hit, -v, v)
        return q, v


PENALTY = Penalty()
"""The spring-damper contact."""
ELASTIC = Elastic()
"""The elastic collision without time-of-impact correction."""
ELASTIC_MIRROR = ElasticMirror()
"""The elastic collision with the position mirrored too."""
MODELS = (PENALTY, ELASTIC, ELASTIC_MIRROR)
"""The contact models."""


def _check(model) -> ContactModel:
    if not isinstance(model, ContactModel):
        raise TypeError(
            f"model must be a point_mass.ContactModel (one of point_mass.MODELS: PENALTY, ELASTIC, "
            f"ELASTIC_MIRROR), not {model!r}"
        )
    return model


# ---------------------------------------------------------------------------------------
# Discrete simulation
# ---------------------------------------------------------------------------------------


def simulate(q0, h, n_steps: int, model: ContactModel, k=STIFFNESS, zeta=ZETA):
    """Final height of ``n_steps`` semi-implicit Euler steps of ``model`` from height ``q0``.

    Arguments:
        q0: initial height (the velocity is :data:`V0`).
        h: step size (s).
        n_steps: number of steps.
        model: the :class:`ContactModel` (e.g. :data:`PENALTY`).
        k: penalty stiffness.
        zeta: penalty damping ratio.

    Returns:
        q_N, a float64 scalar (differentiable in ``q0``).
    """
    _check(model)
    q0 = jnp.asarray(q0, dtype=jnp.float64)
    b = 2.0 * zeta * jnp.sqrt(k)

    def step(carry, _):
        q, v = carry
        return model.step(q, v, h, k, b), None

    (q, _), _ = jax.lax.scan(step, (q0, jnp.asarray(V0, dtype=jnp.float64)), None, length=n_steps)
    return q


def loss(q0, h, n_steps: int, model: ContactModel, k=STIFFNESS, zeta=ZETA):
    """The simulated loss ``|q_N - Q_TARGET|`` (arguments as :func:`simulate`)."""
    return jnp.abs(simulate(q0, h, n_steps, model, k, zeta) - Q_TARGET)


# ---------------------------------------------------------------------------------------
# Continuous-time reference
# ---------------------------------------------------------------------------------------


def true_final_height(q0, model: ContactModel, k=STIFFNESS, zeta=ZETA):
    """q(T) of the continuous-time dynamics of ``model`` (v0 = -1, impact at t = q0).

    Arguments:
        q0: initial height (a scalar or an array).
        model: the :class:`ContactModel`.
        k: penalty stiffness.
        zeta: penalty damping ratio.

    Returns:
        q(T), float64, of ``q0``'s shape; ``jax.grad`` of it is the exact gradient.
    """
    q0 = jnp.asarray(q0, dtype=jnp.float64)
    return _check(model).final_height(q0, k, zeta)


def true_loss(q0, model: ContactModel, k=STIFFNESS, zeta=ZETA):
    """The continuous-time loss ``|q(T) - Q_TARGET|`` (arguments as :func:`true_final_height`)."""
    return jnp.abs(true_final_height(q0, model, k, zeta) - Q_TARGET)


def kink_mask(q0s, model: ContactModel, k=STIFFNESS, zeta=ZETA, margin=KINK_MARGIN) -> np.ndarray:
    """True where q0 is at least ``margin`` away from kinks of the continuous loss and the
    contact has ended before T (penalty).  Kinks: q(T) = q_T, the no-bounce boundary q0 = T
    (for the penalty model the whole band where contact is still ongoing at T).

    Arguments:
        q0s: initial heights.
        model: the :class:`ContactModel`.
        k: penalty stiffness.
        zeta: penalty damping ratio.
        margin: distance in ``q0`` from a kink.

    Returns:
        A boolean array over ``q0s``.
    """
    return _check(model).away_from_kinks(np.asarray(q0s), k, zeta, margin)


def bounce_mask(q0s, model: ContactModel, k=STIFFNESS, zeta=ZETA, margin=KINK_MARGIN) -> np.ndarray:
    """q0 for which the ball has hit the floor and left it again before T (arguments as
    :func:`kink_mask`; returns a boolean array over ``q0s``)."""
    q0s = np.asarray(q0s)
    t_c = _check(model).contact_time(k, zeta)
    return q0s < T_FINAL - t_c - margin


# ---------------------------------------------------------------------------------------
# Sweeps
# ---------------------------------------------------------------------------------------


@partial(jax.jit, static_argnames=("k", "zeta", "n_steps", "model", "with_fd"))
def _sweep_jit(q0s, h, k, zeta, n_steps: int, model: ContactModel, with_fd: bool):
    def one(q0):
        f = lambda x: loss(x, h, n_steps, model, k, zeta)
        val, g = jax.value_and_grad(f)(q0)
        dq = jax.grad(lambda x: simulate(x, h, n_steps, model, k, zeta))(q0)
        fd = (f(q0 + FD_EPS) - f(q0 - FD_EPS)) / (2 * FD_EPS) if with_fd else jnp.nan
        ft = lambda x: true_loss(x, model, k, zeta)
        return {
            "loss": val,
            "grad_ad": g,
            "grad_fd": fd,
            "loss_true": ft(q0),
            "grad_true": jax.grad(ft)(q0),
            "dqN_ad": dq,
            "dqN_true": jax.grad(lambda x: true_final_height(x, model, k, zeta))(q0),
        }

    return jax.vmap(one)(q0s)


def sweep(
    q0s, model: ContactModel, h: float, n_steps: int, k: float = STIFFNESS, zeta: float = ZETA, with_fd: bool = True
) -> dict:
    """Loss, AD gradient, central-difference gradient and true gradient over ``q0s``.

    Arguments:
        q0s: initial heights (one jitted ``vmap`` over them).
        model: the :class:`ContactModel`.
        h: step size (s).
        n_steps: number of steps.
        k: penalty stiffness.
        zeta: penalty damping ratio.
        with_fd: also central differences (step :data:`FD_EPS`).

    Returns:
        Arrays over ``q0s``: ``loss``, ``grad_ad``, ``grad_fd`` (NaN without ``with_fd``),
        ``loss_true``, ``grad_true``, and ``dqN_ad`` / ``dqN_true``, the AD and true derivatives of
        the final height.
    """
    out = _sweep_jit(jnp.asarray(q0s, dtype=jnp.float64), h, float(k), float(zeta), n_steps, _check(model), with_fd)
    return {name: np.asarray(v) for name, v in out.items()}


def summarize(q0s, res: dict, model: ContactModel, k: float = STIFFNESS, zeta: float = ZETA) -> dict:
    """Gradient-error statistics over q0 away from kinks (see :func:`kink_mask`).

    Arguments:
        q0s: the initial heights of the sweep.
        res: :func:`sweep`'s result over ``q0s``.
        model: the :class:`ContactModel` of the sweep.
        k: penalty stiffness of the sweep.
        zeta: penalty damping ratio of the sweep.

    Returns:
        ``n_points`` (away from kinks), ``median_abs_err``, ``mean_abs_err`` and ``p90_abs_err`` of
        ``|grad_ad - grad_true|``, ``frac_wrong_sign`` (and ``frac_wrong_sign_bounce`` over the
        bounced ``q0``), ``grad_ad_min`` / ``grad_ad_max``, ``median_dqN_ad_bounce`` /
        ``median_dqN_true_bounce``, and ``median_abs_fd_minus_ad`` where the sweep has central
        differences.
    """
    m = kink_mask(q0s, model, k, zeta)
    err = np.abs(res["grad_ad"] - res["grad_true"])[m]
    gt, ga = res["grad_true"][m], res["grad_ad"][m]
    nz = gt != 0
    bm = bounce_mask(q0s, model, k, zeta) & m
    out = {
        "n_points": int(m.sum()),
        "median_abs_err": float(np.median(err)),
        "mean_abs_err": float(np.mean(err)),
        "p90_abs_err": float(np.percentile(err, 90)),
        "frac_wrong_sign": float(np.mean(np.sign(ga[nz]) != np.sign(gt[nz]))),
        "frac_wrong_sign_bounce": float(np.mean(np.sign(res["grad_ad"][bm]) != np.sign(res["grad_true"][bm])))
        if bm.any()
        else np.nan,
        "grad_ad_min": float(np.min(res["grad_ad"])),
        "grad_ad_max": float(np.max(res["grad_ad"])),
        "median_dqN_ad_bounce": float(np.median(res["dqN_ad"][bm])) if bm.any() else np.nan,
        "median_dqN_true_bounce": float(np.median(res["dqN_true"][bm])) if bm.any() else np.nan,
    }
    if np.all(np.isfinite(res["grad_fd"])):
        out["median_abs_fd_minus_ad"] = float(np.median(np.abs(res["grad_fd"] - res["grad_ad"])))
    return out
