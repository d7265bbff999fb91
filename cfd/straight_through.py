"""The straight-through trick: one function's values, another's derivatives."""

from __future__ import annotations

import jax
from jax.lax import stop_gradient


def straight_through(forward_value, backward_value):
    """Leaf by leaf ``sg(forward) + backward - sg(backward)``.

    The result equals ``forward_value``; its derivatives are those of ``backward_value``. With
    MJX's accelerations as ``forward_value`` and the contacts-from-distance accelerations as
    ``backward_value``, the trajectory stays physical while gradients see forces between bodies
    that do not touch (paper Sec. 4, eq. 4).
    """
    return jax.tree.map(lambda f, b: stop_gradient(f) + (b - stop_gradient(b)), forward_value, backward_value)
