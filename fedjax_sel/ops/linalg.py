"""Batched linear algebra of the contextual policies."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sherman_morrison_update(inverse: jax.Array, vector: jax.Array, mask: jax.Array) -> jax.Array:
    r"""Batched rank-one updates of inverse Gram matrices, one per client.

    For each masked client n, returns the inverse of :math:`H_n + c_n c_n^\top` from
    :math:`P_n = H_n^{-1}` by the Sherman-Morrison formula

    .. math:: P_n - \frac{P_n c_n c_n^\top P_n}{1 + c_n^\top P_n c_n},

    in O(N d^2) instead of the O(N d^3) of a fresh inversion. Unmasked clients keep
    :math:`P_n`. The result is symmetrised, so that rounding does not let the batch of
    symmetric positive-definite matrices drift away from symmetry over many updates.

    Args:
      inverse: f32[N, d, d], symmetric positive-definite :math:`P_n`.
      vector: f32[N, d], the rank-one direction :math:`c_n` of each client.
      mask: bool[N], clients to update.

    Returns:
      f32[N, d, d], the updated inverses.
    """
    pc = jnp.einsum("nij,nj->ni", inverse, vector)
    denom = 1.0 + jnp.einsum("ni,ni->n", vector, pc)
    delta = pc[:, :, None] * pc[:, None, :] / denom[:, None, None]
    updated = inverse - jnp.where(mask[:, None, None], delta, 0.0)
    return 0.5 * (updated + jnp.swapaxes(updated, -1, -2))
