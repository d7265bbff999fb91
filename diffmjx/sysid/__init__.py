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
- :mod:`diffmjx.sysid.train`: the Adam loop every Adam fit runs (:func:`~diffmjx.sysid.train.adam_loop`:
  minibatches sharded over devices and processes, checkpoints), :mod:`diffmjx.sysid.distributed`;
- :mod:`diffmjx.sysid.peer`: the same fits with MuJoCo's own ``mujoco.sysid`` (:func:`identify_mujoco_sysid`).

One stack: the ContactNets cube study is a user of these (its Parameters on the shipped MJCF
``contactnets_cube``, its tosses as :class:`Recording` s); its study code (the tosses' loader, the
whole-toss evaluation and selection, the published-parameter file) lives with the study in the
repository's ``experiments/contactnets/``, not in the installed package. This package sits above
the core: the core never imports it. Every public name is importable from ``diffmjx.sysid`` or, for the
building blocks (``train.adam_loop``, ``peer.drive``), from its module.
"""

from diffmjx.sysid import distributed as distributed
from diffmjx.sysid.adapter import from_mujoco_sysid, to_mujoco_sysid
from diffmjx.sysid.distributed import batch_sharding
from diffmjx.sysid.fields import FIELDS, FieldKind
from diffmjx.sysid.identify import (
    METHODS,
    BudgetExhaustedWarning,
    FitConfig,
    History,
    IdentifyResult,
    Interval,
    StalledFitWarning,
    confidence_intervals,
    forward_config,
    identify,
    linear_gain,
    load_model,
    select_fit,
)
from diffmjx.sysid.parameter import Parameter, ParameterError, ParameterSet, Transform
from diffmjx.sysid.peer import PeerFit, identify_mujoco_sysid
from diffmjx.sysid.problem import BATCHINGS, ORIENTATIONS, Problem, Weights, map_segments, resolve_batching
from diffmjx.sysid.recording import QUAT_TOL, Recording, RecordingError, velocities_from_positions
from diffmjx.sysid.train import ADAM

__all__ = [
    "ADAM",
    "BATCHINGS",
    "FIELDS",
    "METHODS",
    "ORIENTATIONS",
    "QUAT_TOL",
    "BudgetExhaustedWarning",
    "FieldKind",
    "FitConfig",
    "History",
    "IdentifyResult",
    "Interval",
    "Parameter",
    "ParameterError",
    "ParameterSet",
    "PeerFit",
    "Problem",
    "Recording",
    "RecordingError",
    "StalledFitWarning",
    "Transform",
    "Weights",
    "batch_sharding",
    "confidence_intervals",
    "forward_config",
    "from_mujoco_sysid",
    "identify",
    "identify_mujoco_sysid",
    "linear_gain",
    "load_model",
    "map_segments",
    "resolve_batching",
    "select_fit",
    "to_mujoco_sysid",
    "velocities_from_positions",
]
