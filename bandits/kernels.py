"""Fixed-shape selection kernels shared by every policy.

All kernels act on one trial's arrays (`f32[N]`); `jax.vmap` adds trial or
edge-server axes. The top-k kernels do not sort: each is one or two `lax.top_k` calls;
the prefix solver of max-cost objectives sorts once.

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


def sherman_morrison_update(
    inverse: chex.Array, vector: chex.Array, mask: chex.Array
) -> chex.Array:
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


def prefix_max_cost_top_k(
    cost: chex.Array,
    value: chex.Array,
    mask: chex.Array,
    k: int,
    weight: chex.Array,
    key: chex.PRNGKey,
) -> chex.Array:
    r"""Exact minimiser of a max-cost-minus-value objective over cohorts of size min(k, |mask|).

    Solves

    .. math:: \min_{S \subseteq \text{mask},\ |S| = \min(k, |\text{mask}|)}
              w \max_{n \in S} \text{cost}_n - \sum_{n \in S} \text{value}_n,

    problem P4 (eq. 21) of Huang et al. (IEEE TPDS 2021) with cost the estimated
    exchange time, value the fairness queue and w the penalty weight V. Algorithm 1 of
    the paper tries every available client's cost as the cohort's maximum and keeps the
    top k by value among the clients not costlier. Sorting the eligible clients by cost
    makes that a prefix problem: with TopK(j) the sum of the k largest values among the
    j cheapest eligible clients,

    .. math:: P4^* = \min_{j \geq k} \; w\, \text{cost}_{(j)} - \text{TopK}(j),

    and the cohort is the top k of the minimising prefix. The top k of a prefix is the
    top k of every longer prefix whose extra clients rank lower, so each term is at least
    its cohort's objective and equals it at the cohort's costliest member: the two minima
    coincide. Fixed shapes, O(N^2) time and memory, no data-dependent loop.

    Ties in cost and in value are broken by uniform random keys; among cohorts of equal
    objective the one of the cheapest prefix wins. Equal costs and values throughout
    (round 1 of RBCS-F) thus give a uniformly random cohort.

    Args:
      cost: f32[N], finite costs of the eligible clients (others are ignored).
      value: f32[N], finite values of the eligible clients.
      mask: bool[N], eligible (available) clients.
      k: static cohort size, 1 <= k <= N.
      weight: f32[], the weight w >= 0 of the maximum cost.
      key: PRNG key for the tie-breaks.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set, all inside `mask`.
    """
    n = cost.shape[0]
    size = jnp.minimum(k, jnp.sum(mask))
    # Equal costs are ordered at random too: the cheapest prefix wins ties of the
    # objective, which would otherwise favour low client indices.
    tie_all = jax.random.uniform(key, (n,))
    order = jnp.lexsort((tie_all, jnp.where(mask, cost, jnp.inf)))
    eligible = mask[order]
    # Unavailable clients sort last; a zero cost keeps w * cost finite when w = 0.
    sorted_cost = jnp.where(eligible, cost[order], 0.0)
    sorted_value = jnp.where(eligible, value[order], 0.0)
    tie = tie_all[order]
    # rank[i]: position of sorted client i in descending (value, tie) order.
    by_value = jnp.lexsort((-tie, -sorted_value))
    rank = jnp.zeros((n,), jnp.int32).at[by_value].set(jnp.arange(n, dtype=jnp.int32))
    beats = (rank[:, None] < rank[None, :]) & eligible[:, None]
    # better[j, i]: eligible clients among the first j + 1 that rank above client i.
    better = jnp.cumsum(beats, axis=0)
    pos = jnp.arange(n)
    in_top = (pos[None, :] <= pos[:, None]) & eligible[None, :] & (better < size)
    objective = weight * sorted_cost - jnp.sum(jnp.where(in_top, sorted_value, 0.0), axis=1)
    objective = jnp.where(eligible & (pos + 1 >= size), objective, jnp.inf)
    best = jnp.argmin(objective)
    return jnp.zeros((n,), bool).at[order].set(in_top[best] & (size > 0))


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
