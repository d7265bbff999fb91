"""Derivative rules: a value computed one way, differentiated as another expression of the same inputs.

MJX's stages compute small-vector algebra one scalar at a time. Forward, XLA fuses those slices
into a few kernels; differentiated, every slice becomes a kernel of its own (a pad of zeros in
reverse mode). :func:`value_with_derivative` keeps the forward program as it is and gives the
value the derivative of an equivalent expression written over whole arrays, as a
``jax.custom_jvp``: forward mode pushes tangents through that expression, reverse mode transposes
it, ``vmap`` batches both. Only the inputs that carry a tangent are pushed through (a model or
data that nothing differentiates has symbolic-zero tangents), as JAX's own derivative would.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

__all__ = ["value_with_derivative"]


def value_with_derivative(fn, value, *args):
    """``value`` with the derivative of ``fn`` at ``args``.

    Arguments:
        fn: a function of ``args`` (pytrees of arrays) whose output has ``value``'s structure,
            shapes and dtypes; it must not close over traced values.
        value: ``fn(*args)`` computed another way (equal to it up to rounding), or zeros where
            ``fn`` is a correction that vanishes at the primal.
        args: the inputs; their tangents, where they have any, are pushed through ``fn``.

    Returns:
        ``value``, unchanged. A program that does not differentiate it never evaluates ``fn``.
    """

    @jax.custom_jvp
    def rule(value, *args):
        return value

    def jvp(primals, tangents):
        value, *args = primals
        leaves, tree = jax.tree.flatten(args)
        zero = lambda t: isinstance(t, SymbolicZero)
        tans = jax.tree.leaves(list(tangents[1:]), is_leaf=zero)
        live = [i for i, t in enumerate(tans) if not zero(t)]
        if not live:  # only the value's own inputs moved: fn's derivative is zero
            return value, jax.tree.map(jnp.zeros_like, value)

        def of_live(*xs):
            full = list(leaves)
            for i, x in zip(live, xs, strict=True):
                full[i] = x
            return fn(*jax.tree.unflatten(tree, full))

        _, tangent = jax.jvp(of_live, [leaves[i] for i in live], [tans[i] for i in live])
        return value, tangent

    rule.defjvp(jvp, symbolic_zeros=True)
    return rule(value, *args)
