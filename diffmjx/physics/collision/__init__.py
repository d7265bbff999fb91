"""Smoothed collision detection (``collision.smooth``).

Modules, bottom up: :mod:`~diffmjx.physics.collision.soft` (sigmoid and C1 blends),
:mod:`~diffmjx.physics.collision.frames` (contact-frame helpers), :mod:`~diffmjx.physics.collision.pairs` and
:mod:`~diffmjx.physics.collision.box_box` (the smoothed pair functions; neither imports the other), and
:mod:`~diffmjx.physics.collision.driver` (the table of smoothed pairs and the collision stage, configured by one
:class:`diffmjx.config.CollisionConfig`).
"""

from diffmjx.physics.collision.driver import (
    BOX_BOX_SLOTS,
    SMOOTHED_PAIRS,
    allocate,
    check_model,
    collide,
    contact_dims,
    detect,
    has_box_pairs,
    stage,
    table,
)

__all__ = [
    "BOX_BOX_SLOTS",
    "SMOOTHED_PAIRS",
    "allocate",
    "check_model",
    "collide",
    "contact_dims",
    "detect",
    "has_box_pairs",
    "stage",
    "table",
]
