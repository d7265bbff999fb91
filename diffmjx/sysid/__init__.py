"""System identification from recorded trajectories (the ContactNets cube tosses).

Built so far: :mod:`diffmjx.sysid.data`, the loader (tosses as MuJoCo free-joint states, a seeded
train / validation split by toss, segments of ``horizon + 1`` states). The parameter model and the
training loop come next. This package sits above the core: the core never imports it.
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

__all__ = ["DT", "DataConfig", "DataError", "LoadReport", "Segments", "Toss", "load_tosses", "segments", "split"]
