"""Soft replacements for hard case splits: sigmoid masks and blends."""

from __future__ import annotations

import jax
import jax.numpy as jnp


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


def soft_argmin_weights(values, width):
    """Blend weights (summing to 1) for ``jnp.argmin(values)``, with compact support.

    Entry ``k`` is weighed down by every other entry ``j`` that is smaller, through a C1 step of
    the gap ``values[j] - values[k]`` over a band of ``width``. The band is placed so that an exact
    tie goes to the lower index, as ``jnp.argmin`` does: at a tie the weights are exactly one-hot,
    and entries more than ``width`` above the minimum get exactly 0. For two candidates the
    weights are ``s(gap)`` and ``1 - s(gap)``; near-ties of several blend them all.
    """
    gap = values[None, :] - values[:, None]  # gap[k, j] = values[j] - values[k]
    idx = jnp.arange(values.shape[0])
    before = idx[None, :] < idx[:, None]  # j < k: k must beat j strictly
    factor = jnp.where(before, soft_step(gap, 0.5 * width, width), soft_step(gap, -0.5 * width, width))
    factor = jnp.where(idx[None, :] == idx[:, None], 1.0, factor)
    g = jnp.prod(factor, axis=1)
    return g / jnp.maximum(jnp.sum(g), 1e-300)
