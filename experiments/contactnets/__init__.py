"""The ContactNets cube study's code: a user of :mod:`diffmjx.sysid` with the cube's own data and bookkeeping.

The cube is the shipped MJCF ``diffmjx.scenes.path("contactnets_cube")`` and its quantities are
generic :class:`diffmjx.sysid.Parameter` s; the residual, the Adam loop, the batching of segments
and the ``mujoco.sysid`` driver are the library's. What is the study's alone lives here:

- :mod:`~experiments.contactnets.model`: :class:`CubeParams` (the study's units, the side length)
  and the coordinates the committed fits were made in;
- :mod:`~experiments.contactnets.data`: the tosses (load, check, split, cut into segments; as
  :class:`diffmjx.sysid.Recording` s by :func:`toss_recordings`);
- :mod:`~experiments.contactnets.loss`: the segment loss on the library's residual;
- :mod:`~experiments.contactnets.config`: :class:`SysidConfig` (``data``, ``train``, ``sim``);
- :mod:`~experiments.contactnets.train`, :mod:`~experiments.contactnets.lm`: Adam (on
  :func:`diffmjx.sysid.train.adam_loop`) and Levenberg–Marquardt over the cube's coordinates;
- :mod:`~experiments.contactnets.evaluate`, :mod:`~experiments.contactnets.select`: whole-toss
  errors, early stopping and model selection on held-out tosses;
- :mod:`~experiments.contactnets.params`: the published-parameter file;
- :mod:`~experiments.contactnets.peer`: the cube's fit by ``mujoco.sysid``.
"""

from experiments.contactnets.config import FREE_PARAMS, SysidConfig, TrainConfig, sim_overrides
from experiments.contactnets.data import (
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
from experiments.contactnets.evaluate import pad_tosses, rollout_tosses, trajectory_error
from experiments.contactnets.lm import LMHistory, LMResult, fit_lm
from experiments.contactnets.loss import predict_segments, segment_loss, segment_residuals, state_residuals
from experiments.contactnets.model import (
    CubeParams,
    check_params,
    cube_mjmodel,
    cube_mjx_model,
    cube_parameters,
    from_unconstrained,
    to_unconstrained,
)
from experiments.contactnets.params import (
    OPTION_KEYS,
    PARAMS_JSON_KEYS,
    FittedParams,
    load_params_json,
    model_options,
    save_params_json,
)
from experiments.contactnets.peer import PEER_BOUNDS, PeerResult, fit_mujoco_sysid
from experiments.contactnets.select import Scored, grouped_trajectory_error, select, selection_split, snapshots
from experiments.contactnets.train import History, TrainResult, train

__all__ = [
    "DT",
    "FREE_PARAMS",
    "OPTION_KEYS",
    "PARAMS_JSON_KEYS",
    "PEER_BOUNDS",
    "CubeParams",
    "DataConfig",
    "DataError",
    "FittedParams",
    "History",
    "LMHistory",
    "LMResult",
    "LoadReport",
    "PeerResult",
    "Scored",
    "Segments",
    "SysidConfig",
    "Toss",
    "TrainConfig",
    "TrainResult",
    "check_params",
    "cube_mjmodel",
    "cube_mjx_model",
    "cube_parameters",
    "fit_lm",
    "fit_mujoco_sysid",
    "from_unconstrained",
    "grouped_trajectory_error",
    "load_params_json",
    "load_split",
    "load_tosses",
    "model_options",
    "pad_tosses",
    "predict_segments",
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
    "to_unconstrained",
    "toss_recordings",
    "train",
    "trajectory_error",
]
