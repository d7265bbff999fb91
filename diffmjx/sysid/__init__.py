"""System identification from recorded trajectories (the ContactNets cube tosses).

Built so far: :mod:`diffmjx.sysid.data`, the loader (tosses as MuJoCo free-joint states, a seeded
train / validation split by toss, segments of ``horizon + 1`` states), and
:mod:`diffmjx.sysid.model`, the cube as a differentiable model (physical parameters, their
unconstrained coordinates, an ``mjx.Model`` with every derived field traced). The training loop
comes next. This package sits above the core: the core never imports it.
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

__all__ = [
    "DT",
    "CubeParams",
    "DataConfig",
    "DataError",
    "LoadReport",
    "Segments",
    "Toss",
    "check_params",
    "cube_mjmodel",
    "cube_mjx_model",
    "from_unconstrained",
    "load_tosses",
    "segments",
    "split",
    "to_unconstrained",
]
