"""System identification from recorded trajectories (the ContactNets cube tosses).

One module per concern, each name with one home: :mod:`diffmjx.sysid.data`, the loader (tosses as
MuJoCo free-joint states, a seeded train / validation split by toss, segments of ``horizon + 1``
states); :mod:`diffmjx.sysid.model`, the cube as a differentiable model (physical parameters, their
unconstrained coordinates, an ``mjx.Model`` with every derived field traced);
:mod:`diffmjx.sysid.config`, the run's knobs (:class:`SysidConfig`, :class:`TrainConfig`, YAML
presets, overrides); :mod:`diffmjx.sysid.loss`, the segment prediction and the one residual that
every fit uses (:func:`state_residuals`, :func:`segment_loss`, :func:`segment_residuals`);
:mod:`diffmjx.sysid.train`, the Adam loop (checkpoints, sharded minibatches);
:mod:`diffmjx.sysid.distributed`, runs over several processes or machines (``initialize``);
:mod:`diffmjx.sysid.evaluate`, whole-toss rollouts and their error; :mod:`diffmjx.sysid.select`,
early stopping and model selection by that error on held-out tosses; :mod:`diffmjx.sysid.params`,
the fitted-parameter file; :mod:`diffmjx.sysid.lm`, the same fit by Levenberg–Marquardt on
forward-mode Jacobians (optimistix); and :mod:`diffmjx.sysid.peer`, the finite-difference peer
(the same fit with MuJoCo's own ``mujoco.sysid`` on the C engine). This package sits above the
core: the core never imports it. Every public name is importable from ``diffmjx.sysid``.
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
)
from diffmjx.sysid.evaluate import pad_tosses, rollout_tosses, trajectory_error
from diffmjx.sysid.identify import METHODS, FitConfig, IdentifyResult, Interval, forward_config, identify, load_model
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
from diffmjx.sysid.parameter import FIELDS, Parameter, ParameterError, ParameterSet, Transform
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
    "selection_split",
    "shipped_recording",
    "sim_overrides",
    "snapshots",
    "split",
    "state_residuals",
    "to_mujoco_sysid",
    "to_unconstrained",
    "train",
    "trajectory_error",
    "velocities_from_positions",
]
