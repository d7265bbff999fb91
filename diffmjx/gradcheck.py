"""Gradient check: automatic differentiation against central differences of a converged solve.

Typical use compares the gradient a user's settings produce (``loss``) with central differences of
the same loss solved to tight tolerances (``reference_loss``), sweeping the difference step so the
plateau between truncation and round-off error is found rather than guessed.
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

DEFAULT_STEPS = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)


class GradCheck(NamedTuple):
    """Result of :func:`gradcheck`; gradients are flat vectors over the raveled parameters."""

    loss: float
    ad: np.ndarray
    fd: np.ndarray
    fd_sweep: np.ndarray  # (len(steps), n) central differences for each step
    steps: np.ndarray
    step: float  # chosen step: the middle of the flattest part of the sweep
    rel_error: float  # |ad - fd| / |fd| (2-norms)

    def __str__(self) -> str:
        return (
            f"loss {self.loss:.6g} | AD {np.array2string(self.ad, precision=6)} | "
            f"FD {np.array2string(self.fd, precision=6)} (step {self.step:.0e}) | "
            f"rel. error {self.rel_error:.2e}"
        )


def central_differences(
    loss: Callable, params, steps: Sequence[float] = DEFAULT_STEPS
) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of a scalar ``loss(params)``, one estimate per step.

    Arguments:
        loss: scalar function of a parameter pytree (jitted here).
        params: parameter pytree, raveled to a vector for differencing.
        steps: absolute difference steps, in parameter units.

    Returns:
        ``(sweep, steps)``: the (len(steps), n) estimates over the raveled parameters, and the
        steps as an array.
    """
    flat, unravel = ravel_pytree(params)
    f = jax.jit(lambda x: loss(unravel(x)))
    sweep = np.zeros((len(steps), flat.size))
    for k, h in enumerate(steps):
        for i in range(flat.size):
            e = jnp.zeros_like(flat).at[i].set(h)
            sweep[k, i] = (float(f(flat + e)) - float(f(flat - e))) / (2 * h)
    return sweep, np.asarray(steps, dtype=float)


def pick_plateau(sweep: np.ndarray) -> int:
    """Index of the step whose estimate changes least relative to its neighbours."""
    if len(sweep) < 3:
        return len(sweep) - 1
    scale = np.linalg.norm(sweep, axis=1).max() + 1e-300
    change = np.linalg.norm(np.diff(sweep, axis=0), axis=1) / scale
    # Step k sits between change[k-1] and change[k]; ends use one side.
    around = np.maximum(np.r_[np.inf, change], np.r_[change, np.inf])
    return int(np.argmin(around))


def gradcheck(
    loss: Callable,
    params,
    *,
    reference_loss: Callable | None = None,
    steps: Sequence[float] = DEFAULT_STEPS,
) -> GradCheck:
    """AD gradient of ``loss`` at ``params`` vs central differences of ``reference_loss``.

    Arguments:
        loss: scalar function of a parameter pytree, differentiated with ``jax.grad``.
        params: parameter pytree (raveled to a vector for differencing).
        reference_loss: the same loss solved tightly; defaults to ``loss``.
        steps: difference steps to sweep (absolute, in parameter units).

    Returns:
        :class:`GradCheck` with the AD and central-difference gradients, the whole step sweep,
        the chosen step and the relative error.
    """
    value, grad = jax.jit(jax.value_and_grad(loss))(params)
    ad = np.asarray(ravel_pytree(grad)[0])
    sweep, steps_arr = central_differences(reference_loss or loss, params, steps)
    k = pick_plateau(sweep)
    fd = sweep[k]
    rel = float(np.linalg.norm(ad - fd) / max(np.linalg.norm(fd), 1e-300))
    return GradCheck(float(value), ad, fd, sweep, steps_arr, float(steps_arr[k]), rel)
