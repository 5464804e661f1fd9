"""The order-preserving integer image of f32 scores that every selection op ranks by, and
order statistics found on it by bisection (no sort)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_SIGN = np.uint32(0x80000000)
_QUIET_NAN = np.uint32(0x7FC00000)


def order_key(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """u32[N]: an order-preserving integer image of f32 `scores`, 0 outside `mask`.

    Non-negative floats order like their bit patterns and negative ones in reverse, so
    flipping every bit of a negative float and the sign bit of a non-negative one maps
    the order of f32 (with -0.0 below +0.0) to the order of unsigned integers. Every NaN
    is first made the quiet NaN 0x7FC00000, so that all rank above +inf, equal: the NaN
    of 0/0 or inf - inf on x86 has its sign bit set, and would rank below -inf. Eligible
    keys are at least 1: 0 ranks below every eligible client.

    Args:
      scores: f32[N] (other float dtypes are cast to f32).
      mask: bool[N], eligible clients.

    Returns:
      u32[N], at least 1 inside `mask` and 0 outside.
    """
    scores = scores.astype(jnp.float32)
    bits = lax.bitcast_convert_type(scores, jnp.uint32)
    bits = jnp.where(jnp.isnan(scores), _QUIET_NAN, bits)
    ordered = jnp.where(bits >= _SIGN, ~bits, bits | _SIGN)
    return jnp.where(mask, jnp.maximum(ordered, jnp.uint32(1)), jnp.uint32(0))


def order_value(keys: jax.Array) -> jax.Array:
    """f32[...]: the scores whose `order_key` (inside the mask) is `keys`, its inverse."""
    bits = jnp.where(keys >= _SIGN, keys ^ _SIGN, ~keys)
    return lax.bitcast_convert_type(bits, jnp.float32)


def kth_largest_key(keys: jax.Array, k) -> jax.Array:
    """u32[]: the k-th largest of `keys` (u32[N]), counting repeats; 0 when fewer than k
    keys are positive.

    The largest v with at least k keys >= v, found bit by bit from the top (32 counting
    passes over the keys, O(N) memory): the order statistic without a sort, for a k known
    only when the program runs. For k = 0 it is the all-ones key, above every key. The
    definition of `ops.kth_largest_key`, which runs fewer passes on CPU.

    Args:
      keys: u32[N], e.g. `order_key(scores, mask)`.
      k: int, static or a traced int32[], 0 <= k <= N.
    """
    k = jnp.asarray(k, jnp.int32)

    def bit(i, v):
        candidate = v | (jnp.uint32(1) << (31 - i).astype(jnp.uint32))
        return jnp.where(jnp.sum(keys >= candidate, dtype=jnp.int32) >= k, candidate, v)

    return lax.fori_loop(0, 32, bit, jnp.uint32(0))
