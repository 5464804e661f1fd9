"""Fixed-shape selection kernels shared by every policy.

All kernels act on one trial's arrays (`f32[N]`); `jax.vmap` adds trial or
edge-server axes. None of them sorts: each is one or two `lax.top_k` calls.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from jax import lax

# Tie-break priorities are 30-bit random integers; strictly better clients get this.
_ABOVE = jnp.int32(2**30)


def _select_by_priority(priority: chex.Array, k: int) -> chex.Array:
    """bool[N]: the k clients of largest non-negative int32 priority (negative = never)."""
    values, index = lax.top_k(priority, k)
    return jnp.zeros(priority.shape, bool).at[index].set(values >= 0)


def uniform_subset(mask: chex.Array, k: int, key: chex.PRNGKey) -> chex.Array:
    """A uniformly random subset of size min(k, sum(mask)) of the clients in `mask`.

    Args:
      mask: bool[N], eligible clients.
      k: static cohort size, 1 <= k <= N.
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set, all inside `mask`.
    """
    u = (jax.random.bits(key, mask.shape, jnp.uint32) >> 2).astype(jnp.int32)
    return _select_by_priority(jnp.where(mask, u, -1), k)


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
    kth = lax.top_k(masked, k)[0][k - 1]
    u = (jax.random.bits(key, mask.shape, jnp.uint32) >> 2).astype(jnp.int32)
    priority = jnp.where(masked > kth, _ABOVE, jnp.where(masked == kth, u, -1))
    return _select_by_priority(jnp.where(mask, priority, -1), k)


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


def _per_group(kernel, arrays: tuple[chex.Array, ...], num_groups: int, key=None) -> chex.Array:
    """Runs `kernel` on each of `num_groups` equal contiguous blocks of the client axis.

    Clients `g * n, ..., g * n + n - 1` (n = N / num_groups) form group g; each group
    gets its own key, so the groups' random choices are independent.
    """
    blocks = tuple(a.reshape(num_groups, -1) for a in arrays)
    if key is None:
        out = jax.vmap(kernel)(*blocks)
    else:
        out = jax.vmap(kernel)(*blocks, jax.random.split(key, num_groups))
    return out.reshape(-1)


def grouped_masked_top_k(
    scores: chex.Array, mask: chex.Array, k: int, key: chex.PRNGKey, num_groups: int
) -> chex.Array:
    """`masked_top_k` in each of `num_groups` equal contiguous groups (k per group).

    For hierarchical settings where every edge server schedules k clients of its own
    cell: group g holds clients `g * N / num_groups` to `(g + 1) * N / num_groups - 1`.

    Args:
      scores: f32[N], higher is better.
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      key: PRNG key for the tie-breaks (split over groups).
      num_groups: static number of groups, dividing N.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    return _per_group(lambda s, m, kk: masked_top_k(s, m, k, kk), (scores, mask), num_groups, key)


def grouped_uniform_subset(
    mask: chex.Array, k: int, key: chex.PRNGKey, num_groups: int
) -> chex.Array:
    """`uniform_subset` in each of `num_groups` equal contiguous groups (k per group).

    Args:
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      key: PRNG key (split over groups).
      num_groups: static number of groups, dividing N.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    return _per_group(lambda m, kk: uniform_subset(m, k, kk), (mask,), num_groups, key)


def grouped_top_k_mask(scores: chex.Array, mask: chex.Array, k: int, num_groups: int) -> chex.Array:
    """`top_k_mask` (deterministic, for oracles) in each of `num_groups` equal groups.

    Args:
      scores: f32[N] of finite values.
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      num_groups: static number of groups, dividing N.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    return _per_group(lambda s, m: top_k_mask(s, m, k), (scores, mask), num_groups)
