"""Selection per group of clients (per edge server): k per group, or within a budget.

The k-per-group forms run a selection op on each of `num_groups` contiguous blocks of
clients, so they are exactly the op applied block by block, on the CPU backend on CPU. The
blocks are equal by default; `sizes` gives blocks of unequal sizes, laid out as the rows of
a fixed [num_groups, max size] array whose padding is never eligible.
The budgeted forms take clients in descending score while the running cost fits a
budget (per group: arbitrary group ids, one budget each); they are portable only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_sel.ops.order import order_key
from fedjax_sel.ops.selection import masked_top_k, top_k_mask, uniform_subset


def _padded_layout(sizes: tuple[int, ...], num_clients: int) -> tuple[np.ndarray, ...]:
    """The groups of `sizes` as rows of a padded array.

    Returns:
      (int[G, n] client of each slot (0 at padding), bool[G, n] real slots, int[N] flat
      slot of each client), with n the largest size.
    """
    sizes = np.asarray(sizes, np.int64)
    if sizes.ndim != 1 or np.any(sizes < 1) or sizes.sum() != num_clients:
        raise ValueError(
            f"sizes must be positive group sizes summing to N = {num_clients}, got "
            f"{sizes.tolist()}."
        )
    valid = np.arange(sizes.max())[None, :] < sizes[:, None]
    starts = np.cumsum(sizes) - sizes
    index = np.where(valid, starts[:, None] + np.arange(sizes.max())[None, :], 0)
    return index, valid, np.flatnonzero(valid)


def _per_group(kernel, arrays: tuple[jax.Array, ...], num_groups: int, key=None, sizes=None):
    """Runs `kernel` on each of `num_groups` contiguous blocks of the client axis.

    Clients `g * n, ..., g * n + n - 1` (n = N / num_groups) form group g, or, with
    `sizes`, the `sizes[g]` clients after the first `sum(sizes[:g])`; each group gets its
    own key, so the groups' random choices are independent. The last of `arrays` is the
    eligibility mask, False on the padding of unequal groups.
    """
    if sizes is None:
        blocks = tuple(a.reshape(num_groups, -1) for a in arrays)
    else:
        if len(sizes) != num_groups:
            raise ValueError(f"sizes must have num_groups = {num_groups} entries, got {sizes}.")
        index, valid, slot = _padded_layout(sizes, arrays[-1].shape[0])
        *values, mask = arrays
        blocks = (*(a[index] for a in values), mask[index] & valid)
    if key is None:
        out = jax.vmap(kernel)(*blocks)
    else:
        out = jax.vmap(kernel)(*blocks, jax.random.split(key, num_groups))
    return out.reshape(-1) if sizes is None else out.reshape(-1)[slot]


def grouped_masked_top_k(
    scores: jax.Array,
    mask: jax.Array,
    k: int,
    key: jax.Array,
    num_groups: int,
    sizes: tuple[int, ...] | None = None,
) -> jax.Array:
    """`masked_top_k` in each of `num_groups` contiguous groups (k per group).

    For hierarchical settings where every edge server schedules k clients of its own
    cell: group g holds clients `g * N / num_groups` to `(g + 1) * N / num_groups - 1`
    (equal cells), or the `sizes[g]` clients after the first `sum(sizes[:g])`.

    Args:
      scores: f32[N], higher is better.
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      key: PRNG key for the tie-breaks (split over groups).
      num_groups: static number of groups, dividing N when `sizes` is None.
      sizes: static positive group sizes summing to N (k <= max size), or None for equal
        groups.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    kernel = lambda s, m, kk: masked_top_k(s, m, k, kk)
    return _per_group(kernel, (scores, mask), num_groups, key, sizes)


def grouped_uniform_subset(
    mask: jax.Array, k: int, key: jax.Array, num_groups: int, sizes: tuple[int, ...] | None = None
) -> jax.Array:
    """`uniform_subset` in each of `num_groups` contiguous groups (k per group).

    Args:
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      key: PRNG key (split over groups).
      num_groups: static number of groups, dividing N when `sizes` is None.
      sizes: static group sizes as in `grouped_masked_top_k`, or None for equal groups.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    return _per_group(lambda m, kk: uniform_subset(m, k, kk), (mask,), num_groups, key, sizes)


def grouped_top_k_mask(
    scores: jax.Array,
    mask: jax.Array,
    k: int,
    num_groups: int,
    sizes: tuple[int, ...] | None = None,
) -> jax.Array:
    """`top_k_mask` (deterministic, for oracles) in each of `num_groups` groups.

    Args:
      scores: f32[N] of finite values.
      mask: bool[N], eligible clients.
      k: static cohort size per group, 1 <= k <= N / num_groups.
      num_groups: static number of groups, dividing N when `sizes` is None.
      sizes: static group sizes as in `grouped_masked_top_k`, or None for equal groups.

    Returns:
      bool[N] with exactly min(k, eligible in group) entries set in each group.
    """
    return _per_group(lambda s, m: top_k_mask(s, m, k), (scores, mask), num_groups, sizes=sizes)


def _segment_cumsum(values: jax.Array, starts: jax.Array) -> jax.Array:
    """f32[N]: the running sums of `values` (f32[N]), restarted where `starts` (bool[N])."""

    def combine(a, b):
        return a[0] | b[0], jnp.where(b[0], b[1], a[1] + b[1])

    return lax.associative_scan(combine, (starts, values))[1]


def grouped_budgeted_top_k(
    scores: jax.Array,
    cost: jax.Array,
    mask: jax.Array,
    group: jax.Array,
    budget: jax.Array,
    key: jax.Array,
) -> jax.Array:
    """In each group, the clients of highest score whose running cost fits its budget.

    Within each group the eligible clients are ranked by score, highest first, equal
    scores in a uniformly random order (one random permutation of all clients); the
    running cost of a client is the total cost of its group's clients ranked up to and
    including it. A group's selection is the longest prefix of its ranking whose
    running cost is at most the group's budget: the first client that would exceed it
    ends the group's selection, and no later (cheaper) client is taken in its place. A
    client costlier than its group's whole budget, ranked first, leaves the group empty.
    Scores are compared as in `masked_top_k` (-inf eligible, total order of f32).

    The ranking is one sort by (group, score descending, random position); the running
    costs are a segmented prefix sum over it.

    Args:
      scores: f32[N], higher is better.
      cost: f32[N], finite costs >= 0 of the eligible clients (others are ignored).
      mask: bool[N], eligible clients.
      group: int32[N], the group of each client, in [0, G).
      budget: f32[G], each group's budget.
      key: PRNG key for the tie-break.

    Returns:
      bool[N], inside `mask`: in each group g, a prefix of its ranking whose total cost is
      at most `budget[g]`.
    """
    n = scores.shape[0]
    order = jax.random.permutation(key, n)
    position = jnp.arange(n, dtype=jnp.int32)
    keys = order_key(scores, mask)[order]
    *_, ranked = lax.sort((group[order], ~keys, position, position), num_keys=3)
    client = order[ranked]
    in_group = group[client]
    eligible = mask[client]
    starts = jnp.concatenate([jnp.ones(1, bool), in_group[1:] != in_group[:-1]])
    spent = _segment_cumsum(jnp.where(eligible, cost[client], 0.0), starts)
    # The first rank of each group whose running cost exceeds its budget ends the group.
    over = eligible & (spent > budget[in_group])
    stop = jax.ops.segment_min(jnp.where(over, position, n), in_group, num_segments=budget.shape[0])
    return jnp.zeros(n, bool).at[client].set(eligible & (position < stop[in_group]))


def budgeted_top_k(
    scores: jax.Array, cost: jax.Array, mask: jax.Array, budget: jax.Array, key: jax.Array
) -> jax.Array:
    """The clients of highest score whose running cost fits `budget`.

    `grouped_budgeted_top_k` with one group: the eligible clients ranked by score,
    highest first, ties in a uniformly random order; selected is the longest prefix of
    the ranking whose total cost is at most `budget`.

    Args:
      scores: f32[N], higher is better.
      cost: f32[N], finite costs >= 0 of the eligible clients.
      mask: bool[N], eligible clients.
      budget: f32[], the budget.
      key: PRNG key for the tie-break.

    Returns:
      bool[N], inside `mask`, of total cost at most `budget`.
    """
    group = jnp.zeros(scores.shape, jnp.int32)
    return grouped_budgeted_top_k(scores, cost, mask, group, jnp.reshape(budget, (1,)), key)
