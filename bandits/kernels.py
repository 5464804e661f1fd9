"""Fixed-shape selection kernels shared by every policy.

All kernels act on one trial's arrays (`f32[N]`); `jax.vmap` adds trial or
edge-server axes. None of them sorts: each is one or two `lax.top_k` calls.

On CPU, XLA runs `lax.top_k` as its partial-sort TopK kernel only for f32 operands
whose first k outputs are used as a whole; an int32 operand, or a single element picked
from the output, falls back to a full sort of all N entries, several times slower
(docs/benchmarks.md). The kernels therefore keep every top-k in f32 (tie-break
priorities are integers bit-cast to f32, which preserves their order) and read the k-th
value as the minimum of the k.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from jax import lax

# Tie-break priorities are 30-bit random integers, offset to the bit pattern of the
# smallest normal f32 so that, bit-cast to f32, they are positive normal numbers in the
# same order (no denormals, which CPUs may flush to zero). Strictly better clients get
# `_ABOVE` (a larger finite f32), ineligible ones `_NEVER` (the bits of -1.0).
_OFFSET = jnp.int32(0x00800000)
_ABOVE = jnp.int32(0x7F000000)
_NEVER = jnp.int32(-0x40800000)


def _tie_break(key: chex.PRNGKey, shape: tuple[int, ...]) -> chex.Array:
    """int32 random priorities, uniform over 2^30 values, each a positive normal f32."""
    return (jax.random.bits(key, shape, jnp.uint32) >> 2).astype(jnp.int32) + _OFFSET


def _select_by_priority(priority: chex.Array, k: int) -> chex.Array:
    """bool[N]: the k clients of largest priority (int32 bit patterns; `_NEVER` = never)."""
    values, index = lax.top_k(lax.bitcast_convert_type(priority, jnp.float32), k)
    return jnp.zeros(priority.shape, bool).at[index].set(values > 0)


def uniform_subset(mask: chex.Array, k: int, key: chex.PRNGKey) -> chex.Array:
    """A uniformly random subset of size min(k, sum(mask)) of the clients in `mask`.

    Args:
      mask: bool[N], eligible clients.
      k: static cohort size, 1 <= k <= N.
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set, all inside `mask`.
    """
    return _select_by_priority(jnp.where(mask, _tie_break(key, mask.shape), _NEVER), k)


def masked_top_k(scores: chex.Array, mask: chex.Array, k: int, key: chex.PRNGKey) -> chex.Array:
    """The k highest-scoring clients in `mask`, ties broken uniformly at random.

    The k-th largest masked score `v` splits the eligible clients into those strictly
    above `v` (all selected) and those equal to `v` (the remaining slots are filled by a
    uniformly random subset of them). Clients scoring `-inf` are eligible like any other;
    fewer than k eligible clients leave slots empty.

    Args:
      scores: f32[N], higher is better (indices, sampled means, ...).
      mask: bool[N], eligible (available) clients.
      k: static cohort size, 1 <= k <= N.
      key: PRNG key for the tie-break.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    masked = jnp.where(mask, scores, -jnp.inf)
    kth = jnp.min(lax.top_k(masked, k)[0])
    u = _tie_break(key, mask.shape)
    priority = jnp.where(masked > kth, _ABOVE, jnp.where(masked == kth, u, _NEVER))
    return _select_by_priority(jnp.where(mask, priority, _NEVER), k)


def gumbel_top_k(logits: chex.Array, mask: chex.Array, k: int, key: chex.PRNGKey) -> chex.Array:
    """Samples min(k, sum(mask)) clients without replacement, P proportional to exp(logits).

    The Gumbel-top-k trick (Kool et al., 2019): the top k of `logits + Gumbel` is a
    draw of k items without replacement from softmax(logits) restricted to `mask`.

    Args:
      logits: f32[N], unnormalised log-weights.
      mask: bool[N], eligible clients.
      k: static sample size.
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    noise_key, tie_key = jax.random.split(key)
    perturbed = logits + jax.random.gumbel(noise_key, logits.shape, logits.dtype)
    return masked_top_k(perturbed, mask, k, tie_key)


def top_k_mask(scores: chex.Array, mask: chex.Array, k: int) -> chex.Array:
    """Deterministic top-k of `scores` in `mask`, ties to the lower index (for oracles).

    Args:
      scores: f32[N] of finite values.
      mask: bool[N], eligible clients.
      k: static cohort size.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    values, index = lax.top_k(jnp.where(mask, scores, -jnp.inf), k)
    return jnp.zeros(scores.shape, bool).at[index].set(values > -jnp.inf)
