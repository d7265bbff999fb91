"""Soft replacements for hard case splits: sigmoid masks and blends."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def soft_where(weight, x, y):
    """``weight * x + (1 - weight) * y``: ``jnp.where`` with a weight in [0, 1] for the condition."""
    return weight * x + (1.0 - weight) * y


def soft_greater(x, threshold, sharpness):
    """Smooth indicator of ``x > threshold``: ``sigmoid(sharpness * (x - threshold))``."""
    return jax.nn.sigmoid(sharpness * (x - threshold))


def soft_max_mask(values, skin, sharpness):
    """Weights in [0, 1] of entries within ``skin`` of the largest; the largest gets exactly 1.

    The hard rule ``values > values.max() - skin`` becomes a sigmoid of width ~ 1/sharpness,
    normalised so that the extreme entry keeps full weight (the physics of the deepest point
    does not move).
    """
    top = jnp.max(values)
    w = soft_greater(values, top - skin, sharpness)
    return w / soft_greater(top, top - skin, sharpness)


def soft_step(x, threshold, width):
    """C1 step of ``x > threshold``: exactly 0 below ``threshold - width/2``, exactly 1 above
    ``threshold + width/2``, a cubic in between. Unlike a sigmoid it leaves no residual weight
    away from the switch, so blended cases do not leak into each other."""
    s = jnp.clip((x - threshold) / width + 0.5, 0.0, 1.0)
    return s * s * (3.0 - 2.0 * s)
