"""A conditional that stays a conditional under `jax.vmap`."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax


def where_needed(need: jax.Array, full: Callable, short: Callable, *operands):
    """`full(*operands)` where `need` (bool[]), else `short(*operands)`, for functions
    that agree wherever `need` is False.

    For work a round does not always need: a tie-break when no tie crosses the k-th place,
    an oracle's search when every client is available. Under `jax.vmap` a `lax.cond` on
    a batched predicate runs both branches, so the batching rule
    (`jax.custom_batching.custom_vmap`) conditions on the whole batch: `full` runs,
    vmapped, only in rounds where some member needs it, and since the two agree
    elsewhere the result is the same as choosing per member. The operands (arrays, or
    pytrees of them, batched or not leaf by leaf) cross the conditional as materialised
    arrays; outside it, XLA would recompute them (and what they are computed from) in
    every consumer.
    """

    @jax.custom_batching.custom_vmap
    def run(need, *operands):
        return lax.cond(need, full, short, *operands)

    @run.def_vmap
    def run_batch(axis_size, in_batched, need, *operands):
        axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched[1:]))
        full_b = jax.vmap(full, in_axes=axes, axis_size=axis_size)
        short_b = jax.vmap(short, in_axes=axes, axis_size=axis_size)
        out = lax.cond(jnp.any(need), full_b, short_b, *operands)
        return out, jax.tree.map(lambda _: True, out)

    return run(need, *operands)
