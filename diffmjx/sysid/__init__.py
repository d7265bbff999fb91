"""System identification from recorded trajectories (the ContactNets cube tosses).

Built so far: :mod:`diffmjx.sysid.data`, the loader (tosses as MuJoCo free-joint states, a seeded
train / validation split by toss, segments of ``horizon + 1`` states), and
:mod:`diffmjx.sysid.model`, the cube as a differentiable model (physical parameters, their
unconstrained coordinates, an ``mjx.Model`` with every derived field traced), and
:mod:`diffmjx.sysid.train`, the training loop (segment loss, Adam on the unconstrained coordinates
of the free parameters, checkpoints, sharded minibatches), whole-toss evaluation and the
fitted-parameter file; :mod:`diffmjx.sysid.lm`, the same fit by Levenberg–Marquardt on
forward-mode Jacobians (optimistix); and :mod:`diffmjx.sysid.peer`, the finite-difference peer
(the same fit with MuJoCo's own ``mujoco.sysid`` on the C engine). This package sits above the core: the core
never imports it.
"""

from diffmjx.sysid.data import (
    DT,
    DataConfig,
    DataError,
    LoadReport,
    Segments,
    Toss,
    load_tosses,
    segments,
    split,
)
from diffmjx.sysid.model import (
    CubeParams,
    check_params,
    cube_mjmodel,
    cube_mjx_model,
    from_unconstrained,
    to_unconstrained,
)
from diffmjx.sysid.lm import LMHistory, LMResult, fit_lm, segment_residuals
from diffmjx.sysid.peer import PEER_BOUNDS, PeerResult, fit_mujoco_sysid
from diffmjx.sysid.train import (
    ADAM,
    FREE_PARAMS,
    OPTION_KEYS,
    PARAMS_JSON_KEYS,
    FittedParams,
    History,
    SysidConfig,
    TrainConfig,
    TrainResult,
    batch_sharding,
    load_params_json,
    load_split,
    model_options,
    pad_tosses,
    predict_segments,
    quat_to_mat,
    rollout_tosses,
    save_params_json,
    segment_loss,
    sim_overrides,
    train,
    trajectory_error,
)

__all__ = [
    "ADAM",
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
    "Segments",
    "SysidConfig",
    "Toss",
    "TrainConfig",
    "TrainResult",
    "batch_sharding",
    "check_params",
    "cube_mjmodel",
    "cube_mjx_model",
    "fit_lm",
    "fit_mujoco_sysid",
    "from_unconstrained",
    "load_params_json",
    "load_split",
    "load_tosses",
    "model_options",
    "pad_tosses",
    "predict_segments",
    "quat_to_mat",
    "rollout_tosses",
    "save_params_json",
    "segment_loss",
    "segment_residuals",
    "segments",
    "sim_overrides",
    "split",
    "to_unconstrained",
    "train",
    "trajectory_error",
]
