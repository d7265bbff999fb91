"""MuJoCo's C engine as the independent trajectory reference.

A DiffMJX trajectory is checked against the C engine run with RK4 at a much smaller step
(:func:`c_engine_rk4`): a different code base and integrator, the same model. The comparison is
only meaningful where both run the same physics; :func:`c_engine_rk4` warns where MuJoCo's
``refsafe`` makes them differ (see ``docs/gradcheck.md``).

Needs no JAX: it sits beside :mod:`diffmjx.scenes` above the core, and nothing in the core imports it.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import mujoco
import numpy as np

__all__ = ["c_engine_rk4"]


def _warn_refsafe(mj: mujoco.MjModel, dt: float) -> None:
    """Warn when MuJoCo's ``refsafe`` makes the reference a different physics: it raises every
    ``solref`` time constant below twice ``opt.timestep`` to that, so a model whose time constants
    sit below twice its own (control) step has softer contacts in MJX / DiffMJX than in the C engine
    at the reference's smaller ``dt``. Scenes compared with the C engine disable ``refsafe``."""
    if mj.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_REFSAFE:
        return
    solrefs = [
        np.asarray(getattr(mj, f)).reshape(-1, 2) for f in ("geom_solref", "pair_solref", "eq_solref", "jnt_solref")
    ]
    timeconst = np.concatenate([r[:, 0] for r in solrefs])
    soft = timeconst[(timeconst > 0) & (timeconst < 2 * mj.opt.timestep)]
    if soft.size and dt < mj.opt.timestep:
        warnings.warn(
            f"refsafe is on and solref time constants down to {soft.min():g} s are below twice the model's "
            f"timestep ({mj.opt.timestep:g} s): MJX and DiffMJX raise them to {2 * mj.opt.timestep:g} s, the C engine at "
            f"dt = {dt:g} s does not, so the reference runs stiffer contacts. Disable refsafe in the scene",
            stacklevel=3,
        )


def c_engine_rk4(
    mj: mujoco.MjModel,
    seconds: float,
    dt: float,
    qpos=None,
    qvel=None,
    ctrl=None,
    each_step: Callable[[mujoco.MjData], object] | None = None,
) -> mujoco.MjData:
    """MuJoCo's C engine with RK4 at ``dt`` for ``seconds``: the independent reference.

    Warns (``UserWarning``) when ``refsafe`` is on and the model has ``solref`` time constants below
    twice its own timestep while ``dt`` is smaller: MJX and DiffMJX would then run softer contacts
    than this reference.

    Args:
        mj: the model; a copy is stepped, ``mj`` itself is left unchanged.
        seconds: simulated time; ``round(seconds / dt)`` steps are taken.
        dt: the reference's step.
        qpos: initial positions (the model's ``qpos0`` where None).
        qvel: initial velocities (zero where None).
        ctrl: controls, held for the whole run (zero where None).
        each_step: called with the ``MjData`` after every step (e.g. to record a trajectory).

    Returns:
        The final ``MjData``.
    """
    _warn_refsafe(mj, dt)
    mj = copy.copy(mj)
    mj.opt.timestep, mj.opt.integrator = dt, mujoco.mjtIntegrator.mjINT_RK4
    data = mujoco.MjData(mj)
    if qpos is not None:
        data.qpos[:] = qpos
    if qvel is not None:
        data.qvel[:] = qvel
    if ctrl is not None:
        data.ctrl[:] = ctrl
    for _ in range(int(round(seconds / dt))):  # noqa: RUF046  (seconds or dt may be a JAX or NumPy scalar)
        mujoco.mj_step(mj, data)
        if each_step is not None:
            each_step(data)
    return data
