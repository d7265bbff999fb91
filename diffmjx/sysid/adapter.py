r"""``mujoco.sysid``'s trajectory types to and from :class:`~diffmjx.sysid.Recording`.

A ``mujoco.sysid`` user holds their data as ``SystemTrajectory`` objects (a model, a control
``TimeSeries``, a measured ``TimeSeries`` of sensors and states, an initial ``mjSTATE_FULLPHYSICS``
state) or as ``ModelSequences`` (one ``MjSpec`` and several measured sequences). :func:`from_mujoco_sysid`
turns either into recordings, :func:`to_mujoco_sysid` turns a recording back (exactly: the round
trip returns the same arrays).

Conventions. ``mujoco.sysid`` drops the last row of a control series (T + 1 rows give T steps) and
stamps a predicted row with the time *after* its step; ``mujoco.rollout``'s sensor rows are computed
at the state *before* the step, so a measured sensor row stamped ``t_{k+1}`` is compared with the
sensors of state ``k``. That is a :class:`~diffmjx.sysid.Recording`'s ``sensordata[k]``. State
signals (``<joint>_qpos``, ``<joint>_qvel``, a free body's ``<body>_qpos``) stamped ``t_k`` are
``qpos[k]`` / ``qvel[k]``; the initial state supplies sample 0 where the measured series starts
later. No ``mujoco.sysid`` row holds the last state's sensors: a converted recording repeats the
row before. Signals of other types (custom observations) are not carried over; columns a recording
cannot fill raise an error naming the signal.
"""

from __future__ import annotations

import numpy as np

from diffmjx.sysid.recording import Recording, RecordingError

__all__ = ["from_mujoco_sysid", "to_mujoco_sysid"]


def _mujoco_sysid():
    """``mujoco.sysid`` (imported on first use: :mod:`diffmjx.sysid.peer` holds the install hint)."""
    from diffmjx.sysid.peer import mujoco_sysid

    return mujoco_sysid()


def _times(ts) -> np.ndarray:
    return np.asarray(ts.times, np.float64)


def _period(times: np.ndarray, where: str) -> float:
    steps = np.diff(times)
    if not len(steps):
        raise RecordingError(f"{where}: a single time stamp gives no sample period")
    dt = float(np.mean(steps))
    if np.ptp(steps) > 1e-6 * abs(dt):
        raise RecordingError(f"{where}: time stamps are not evenly spaced; resample the series first")
    return dt


def _one(model, control, measured, initial_state, name: str, variant: int) -> Recording:
    sysid = _mujoco_sysid()
    nq, nv, nu, ns = model.nq, model.nv, model.nu, model.nsensordata
    where = f"mujoco.sysid trajectory {name!r}"
    ct = _times(control)
    dt = _period(ct, f"{where}: control")
    t_count = len(ct) - 1  # sysid drops the last control row
    if t_count < 1:
        raise RecordingError(f"{where}: the control series has {len(ct)} row(s); at least 2 are needed")
    ctrl = np.asarray(control.data, np.float64)[:t_count]
    if ctrl.shape[1] != nu:
        raise RecordingError(f"{where}: the control series has {ctrl.shape[1]} columns; the model has nu = {nu}")
    t0 = ct[0]
    mt = _times(measured)
    data = np.asarray(measured.data, np.float64)
    state0 = np.asarray(initial_state, np.float64)
    qpos = np.full((t_count + 1, nq), np.nan)
    qvel = np.full((t_count + 1, nv), np.nan)
    sens = np.full((t_count + 1, ns), np.nan)
    qpos[0], qvel[0] = state0[1 : 1 + nq], state0[1 + nq : 1 + nq + nv]
    qmap, vmap, _, _ = sysid.TimeSeries.compute_all_state_mappings(model)
    smap = sysid.TimeSeries.compute_all_sensor_mapping(model)
    kinds = sysid.SignalType
    has = {"qpos": False, "qvel": False, "sens": False}
    for sig, (kind, cols) in (measured.signal_mapping or {}).items():
        cols = np.atleast_1d(np.asarray(cols, int))
        if kind == kinds.MjSensor:
            if sig not in smap:
                raise RecordingError(f"{where}: sensor {sig!r} is not in the model")
            target, dest, shift, key = sens, smap[sig][1], 1, "sens"
        elif kind == kinds.MjStateQPos:
            target, dest, shift, key = qpos, qmap[sig][1], 0, "qpos"
        elif kind == kinds.MjStateQVel:
            target, dest, shift, key = qvel, vmap[sig][1] - nq, 0, "qvel"
        else:
            continue  # custom observations and activations are not a recording's
        rows = np.rint((mt - t0) / dt).astype(int) - shift
        ok = (rows >= 0) & (rows <= t_count)
        target[np.ix_(rows[ok], np.asarray(dest, int))] = data[np.ix_(ok, cols)]
        has[key] = True
    if not has["qpos"] or np.isnan(qpos).any():
        i, j = np.argwhere(np.isnan(qpos))[0] if np.isnan(qpos).any() else (0, 0)
        raise RecordingError(
            f"{where}: qpos[{i}, {j}] has no measured value; a recording needs every joint's "
            "position at every sample (measure <joint>_qpos / <body>_qpos signals)"
        )
    qvel_out = qvel if has["qvel"] and not np.isnan(qvel).any() else None
    sens_out = None
    if has["sens"]:
        if np.isnan(sens[-1]).all():  # no row holds the last state's sensors: it repeats the one before
            sens[-1] = sens[-2]
        if np.isnan(sens).any():
            i, j = np.argwhere(np.isnan(sens))[0]
            raise RecordingError(
                f"{where}: sensordata[{i}, {j}] has no measured value; measure every sensor of the "
                "model at every sample, or none"
            )
        sens_out = sens
    return Recording(qpos=qpos, qvel=qvel_out, ctrl=ctrl, sensordata=sens_out, dt=dt, name=name, variant=variant)


def from_mujoco_sysid(data, *, name: str | None = None, variant: int = 0) -> list[Recording]:
    """Recordings of ``mujoco.sysid`` data: a ``SystemTrajectory``, a ``ModelSequences`` or a list of them.

    Raises:
        RecordingError: a series that is not evenly spaced, a missing joint position, sizes that do
            not match the model (named).
    """
    sysid = _mujoco_sysid()
    items = data if isinstance(data, (list, tuple)) else [data]
    out = []
    for k, item in enumerate(items):
        label = name or getattr(item, "name", None) or f"trajectory {k}"
        if isinstance(item, sysid.ModelSequences):
            for j, traj in enumerate(item.measured_rollout):
                seq = item.sequence_name[j] if j < len(item.sequence_name) else str(j)
                out.append(
                    _one(traj.model, traj.control, traj.sensordata, traj.initial_state, f"{label}/{seq}", variant)
                )
        elif isinstance(item, sysid.SystemTrajectory):
            out.append(_one(item.model, item.control, item.sensordata, item.initial_state, label, variant))
        else:
            raise TypeError(f"expected mujoco.sysid.SystemTrajectory or ModelSequences; got {type(item).__name__}")
    return out


def to_mujoco_sysid(recording: Recording, model, t0: float = 0.0):
    """A :class:`~diffmjx.sysid.Recording` as a ``mujoco.sysid.SystemTrajectory`` of ``model``.

    The measured series holds ``[sensors | qpos | qvel]`` (sensors in the model's order, as
    ``mujoco.sysid``'s residual reads them), the controls ``T + 1`` rows (the last repeated, dropped by
    ``mujoco.sysid``), the initial state sample 0.
    """
    sysid = _mujoco_sysid()
    rec = recording.check(model)
    t_count = rec.T
    times = t0 + np.arange(t_count + 1) * rec.dt
    s0 = sysid.create_initial_state(model, rec.qpos[0], rec.qvel[0], None if rec.act is None else rec.act[0])
    s0[0] = t0
    ctrl = np.vstack([rec.ctrl, rec.ctrl[-1:]]) if model.nu else np.zeros((t_count + 1, 0))
    control = sysid.TimeSeries.from_control_names(times, ctrl, model) if model.nu else sysid.TimeSeries(times, ctrl)
    qmap, vmap, _, _ = sysid.TimeSeries.compute_all_state_mappings(model)
    cols, mapping, off = [], {}, 0
    if rec.sensordata is not None:
        # sensordata[k] is the state k's, which mujoco.sysid stamps t_{k+1}: shift by one row
        shifted = np.vstack([rec.sensordata[1:2], rec.sensordata[:-1]])
        cols.append(shifted)
        off = model.nsensordata
        mapping |= sysid.TimeSeries.compute_all_sensor_mapping(model)
    cols.append(rec.qpos)
    mapping |= {k: (st, np.asarray(i) + off) for k, (st, i) in qmap.items()}
    cols.append(rec.qvel)
    mapping |= {k: (st, np.asarray(i) + off) for k, (st, i) in vmap.items()}
    measured = sysid.TimeSeries(times, np.hstack(cols), mapping)
    return sysid.SystemTrajectory(model, control, measured, s0, None)
