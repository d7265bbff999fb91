"""Smoothed collision detection (``collision.smooth``).

Modules, bottom up: :mod:`~diffmjx.collision.soft` (sigmoid and C1 blends),
:mod:`~diffmjx.collision.frames` (contact-frame helpers), :mod:`~diffmjx.collision.pairs` and
:mod:`~diffmjx.collision.box_box` (the smoothed pair functions; neither imports the other), and
:mod:`~diffmjx.collision.driver` (the table of smoothed pairs and the collision stage, configured by one
:class:`diffmjx.config.CollisionConfig`).
"""

from diffmjx.collision.driver import (
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
