"""System identification: fit the parameters of any MuJoCo model to recorded trajectories.

Start with :func:`identify` (``identify(model, params, recordings)``): the :class:`Parameter` s
name what is fitted (an ``MjModel`` field and an element's name), the :class:`Recording` s what
was measured, and the result holds the fitted values, the fitted ``MjModel``, the loss history,
confidence intervals and unidentifiable directions. One module per concern, each name with one
home:

- :mod:`diffmjx.sysid.parameter`: :class:`Parameter`, :class:`ParameterSet` (resolution against a
  model, coordinates, the traced model with its ties and :func:`diffmjx.set_const`);
- :mod:`diffmjx.sysid.recording`: :class:`Recording` (checks, files, ``Recording.simulate``) and
  :mod:`diffmjx.sysid.adapter` (``mujoco.sysid``'s trajectory types both ways);
- :mod:`diffmjx.sysid.problem`: segments, their prediction (:func:`~diffmjx.sysid.problem.predict`,
  :func:`map_segments`) and the one residual every fit uses (:class:`Problem`);
- :mod:`diffmjx.sysid.identify`: :func:`identify` (Levenberg–Marquardt or Adam, held-out early
  stopping, intervals, checkpoints) and :class:`FitConfig`;
- :mod:`diffmjx.sysid.train`: the Adam loop every fit runs (:func:`~diffmjx.sysid.train.adam_loop`:
  minibatches sharded over devices and processes, checkpoints), :mod:`diffmjx.sysid.distributed`;
- :mod:`diffmjx.sysid.peer`: the same fits with MuJoCo's own ``mujoco.sysid`` (:func:`identify_mujoco_sysid`).

The ContactNets cube is one instance: :mod:`diffmjx.sysid.model` (:class:`CubeParams`,
:func:`cube_parameters` on the shipped MJCF), :mod:`diffmjx.sysid.data` (the tosses),
:mod:`diffmjx.sysid.loss`, :mod:`diffmjx.sysid.config` (:class:`SysidConfig`), :func:`train`,
:func:`fit_lm`, :mod:`diffmjx.sysid.evaluate` (whole tosses), :mod:`diffmjx.sysid.select`
(selection on held-out tosses) and :mod:`diffmjx.sysid.params` (the fitted-parameter file).
This package sits above the core: the core never imports it. Every public name is importable from
``diffmjx.sysid``.
"""

from diffmjx.sysid import distributed as distributed
from diffmjx.sysid.adapter import from_mujoco_sysid, to_mujoco_sysid
from diffmjx.sysid.config import FREE_PARAMS, SysidConfig, TrainConfig, sim_overrides
from diffmjx.sysid.data import (
    DT,
    DataConfig,
    DataError,
    LoadReport,
    Segments,
    Toss,
    load_split,
    load_tosses,
    segments,
    shipped_recording,
    split,
    toss_recordings,
)
from diffmjx.sysid.evaluate import pad_tosses, rollout_tosses, trajectory_error
from diffmjx.sysid.fields import FIELDS, FieldKind
from diffmjx.sysid.identify import (
    METHODS,
    FitConfig,
    IdentifyResult,
    Interval,
    confidence_intervals,
    forward_config,
    identify,
    load_model,
    select_fit,
)
from diffmjx.sysid.lm import LMHistory, LMResult, fit_lm
from diffmjx.sysid.loss import (
    BATCHINGS,
    map_segments,
    predict_segments,
    quat_to_mat,
    resolve_batching,
    segment_loss,
    segment_residuals,
    state_residuals,
)
from diffmjx.sysid.model import (
    CubeParams,
    check_params,
    cube_mjmodel,
    cube_mjx_model,
    from_unconstrained,
    to_unconstrained,
)
from diffmjx.sysid.parameter import Parameter, ParameterError, ParameterSet, Transform
from diffmjx.sysid.params import (
    OPTION_KEYS,
    PARAMS_JSON_KEYS,
    FittedParams,
    load_params_json,
    model_options,
    save_params_json,
)
from diffmjx.sysid.peer import PEER_BOUNDS, PeerFit, PeerResult, fit_mujoco_sysid, identify_mujoco_sysid
from diffmjx.sysid.problem import ORIENTATIONS, Problem, Weights
from diffmjx.sysid.recording import QUAT_TOL, Recording, RecordingError, velocities_from_positions
from diffmjx.sysid.select import Scored, grouped_trajectory_error, select, selection_split, snapshots
from diffmjx.sysid.train import ADAM, History, TrainResult, batch_sharding, train

__all__ = [
    "ADAM",
    "BATCHINGS",
    "DT",
    "FIELDS",
    "FREE_PARAMS",
    "METHODS",
    "OPTION_KEYS",
    "ORIENTATIONS",
    "PARAMS_JSON_KEYS",
    "PEER_BOUNDS",
    "QUAT_TOL",
    "CubeParams",
    "DataConfig",
    "DataError",
    "FieldKind",
    "FitConfig",
    "FittedParams",
    "History",
    "IdentifyResult",
    "Interval",
    "LMHistory",
    "LMResult",
    "LoadReport",
    "Parameter",
    "ParameterError",
    "ParameterSet",
    "PeerFit",
    "PeerResult",
    "Problem",
    "Recording",
    "RecordingError",
    "Scored",
    "Segments",
    "SysidConfig",
    "Toss",
    "TrainConfig",
    "TrainResult",
    "Transform",
    "Weights",
    "batch_sharding",
    "check_params",
    "confidence_intervals",
    "cube_mjmodel",
    "cube_mjx_model",
    "fit_lm",
    "fit_mujoco_sysid",
    "forward_config",
    "from_mujoco_sysid",
    "from_unconstrained",
    "grouped_trajectory_error",
    "identify",
    "identify_mujoco_sysid",
    "load_model",
    "load_params_json",
    "load_split",
    "load_tosses",
    "map_segments",
    "model_options",
    "pad_tosses",
    "predict_segments",
    "quat_to_mat",
    "resolve_batching",
    "rollout_tosses",
    "save_params_json",
    "segment_loss",
    "segment_residuals",
    "segments",
    "select",
    "select_fit",
    "selection_split",
    "shipped_recording",
    "sim_overrides",
    "snapshots",
    "split",
    "state_residuals",
    "to_mujoco_sysid",
    "to_unconstrained",
    "toss_recordings",
    "train",
    "trajectory_error",
    "velocities_from_positions",
]
