"""The order-preserving integer image of f32 scores that every selection op ranks by."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_SIGN = np.uint32(0x80000000)


def order_key(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """u32[N]: an order-preserving integer image of f32 `scores`, 0 outside `mask`.

    Non-negative floats order like their bit patterns and negative ones in reverse, so
    flipping every bit of a negative float and the sign bit of a non-negative one maps
    the order of f32 (with -0.0 below +0.0, NaNs beyond the infinities) to the order of
    unsigned integers. Eligible keys are at least 1: 0 ranks below every eligible client.

    Args:
      scores: f32[N] (other float dtypes are cast to f32).
      mask: bool[N], eligible clients.

    Returns:
      u32[N], at least 1 inside `mask` and 0 outside.
    """
    bits = lax.bitcast_convert_type(scores.astype(jnp.float32), jnp.uint32)
    ordered = jnp.where(bits >= _SIGN, ~bits, bits | _SIGN)
    return jnp.where(mask, jnp.maximum(ordered, jnp.uint32(1)), jnp.uint32(0))
