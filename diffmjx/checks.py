"""Up-front checks of a model, a config and Diffrax objects: the one place DiffMJX raises on bad input.

:func:`validate` runs in plain Python before anything is traced, so a bad combination fails with
a message that names the field and what is allowed, not with an error from deep inside a trace.
:func:`diffmjx.step`, :func:`diffmjx.rollout` and :func:`diffmjx.forward` call it.
"""

from __future__ import annotations

import diffrax

from diffmjx import _mjx, collision
from diffmjx.config import Config

__all__ = ["validate"]


def _check_objects(cfg: Config, solver, stepsize_controller, adjoint) -> None:
    given = {"solver": solver, "stepsize_controller": stepsize_controller, "adjoint": adjoint}
    kinds = {
        "solver": diffrax.AbstractSolver,
        "stepsize_controller": diffrax.AbstractStepSizeController,
        "adjoint": diffrax.AbstractAdjoint,
    }
    for name, obj in given.items():
        if obj is not None and not isinstance(obj, kinds[name]):
            raise ValueError(f"{name}={obj!r} is not a diffrax.{kinds[name].__name__}")
    passed = [k for k, v in given.items() if v is not None]
    if passed and cfg.integrator.solver.startswith("mjx_"):
        raise ValueError(
            f"integrator.solver={cfg.integrator.solver!r} is one of MJX's fixed-step integrators, which take no "
            f"Diffrax {', '.join(passed)}; choose a Diffrax integrator.solver or drop the objects"
        )


def validate(m, cfg: Config, *, solver=None, stepsize_controller=None, adjoint=None) -> None:
    """Raise ``ValueError`` for a model / config / Diffrax-object combination DiffMJX cannot run.

    Arguments:
        m: ``mjx.Model`` (or ``mujoco.MjModel``).
        cfg: :class:`diffmjx.Config`; each section already validated its own fields.
        solver, stepsize_controller, adjoint: Diffrax objects that replace the config's
            ``integrator.solver``, ``integrator.step_control`` (with its tolerances) and
            ``integrator.adjoint``; None keeps the config's.

    Raises:
        ValueError: naming the field (or argument) and what is allowed.
    """
    if not isinstance(cfg, Config):
        raise ValueError(f"cfg must be a diffmjx.Config, got {type(cfg).__name__}")  # noqa: TRY004
    _check_objects(cfg, solver, stepsize_controller, adjoint)
    ic = cfg.integrator
    adaptive = (
        isinstance(stepsize_controller, diffrax.AbstractAdaptiveStepSizeController)
        if stepsize_controller is not None
        else ic.step_control == "pid"
    )
    embedded = isinstance(solver, diffrax.AbstractAdaptiveSolver) if solver is not None else ic.solver != "euler"
    if adaptive and embedded is False and not ic.solver.startswith("mjx_"):
        what = f"solver={solver!r}" if solver is not None else f"integrator.solver={ic.solver!r}"
        raise ValueError(
            f"an adaptive step-size controller (integrator.step_control='pid') needs an embedded error estimate, "
            f"which {what} lacks; choose integrator.step_control='constant' (or pass "
            "stepsize_controller=diffrax.ConstantStepSize()) or another solver"
        )
    pyramidal = m.opt.cone == _mjx.ConeType.PYRAMIDAL
    if cfg.solver.gradient == "implicit" and not pyramidal:
        raise ValueError(
            "solver.gradient='implicit' supports cone='pyramidal' only; use solver.gradient='unroll' for elliptic cones"
        )
    if cfg.cfd.enabled and not pyramidal:
        raise ValueError("cfd.enabled=True supports cone='pyramidal' only; set the model's cone to pyramidal")
    if cfg.collision.smooth:
        collision.check_model(m)
