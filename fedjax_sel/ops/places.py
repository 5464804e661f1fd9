"""Reading and updating per-client arrays at the places of a cohort.

A decision that carries its clients' places (`Decision.indices`) lists them as int32[m]
entries in [0, N], each client at most once and N for an empty slot. These ops read and
update f32[N] or bool[N] arrays there alone, O(m) rather than O(N): an empty slot reads
`fill_value` and updates nothing. The places are never negative, and never repeat, which
XLA is told (no wrapping of negative indices, unique scatter indices).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def take(values: jax.Array, places: jax.Array, fill_value) -> jax.Array:
    """`values` (x[N]) at `places` (int32[m]): x[m], `fill_value` at empty slots."""
    return (
        jnp.asarray(values)
        .at[places]
        .get(mode="fill", fill_value=fill_value, unique_indices=True, wrap_negative_indices=False)
    )


def add(values: jax.Array, places: jax.Array, update) -> jax.Array:
    """`values` (x[N]) plus `update` (a scalar or x[m]) at `places` (int32[m])."""
    return (
        jnp.asarray(values)
        .at[places]
        .add(update, mode="drop", unique_indices=True, wrap_negative_indices=False)
    )


def put(values: jax.Array, places: jax.Array, update) -> jax.Array:
    """`values` (x[N]) with `update` (a scalar or x[m]) set at `places` (int32[m])."""
    return (
        jnp.asarray(values)
        .at[places]
        .set(update, mode="drop", unique_indices=True, wrap_negative_indices=False)
    )
