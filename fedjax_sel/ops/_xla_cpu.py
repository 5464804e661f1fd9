"""The XLA:CPU backend of the selection ops: the same selections without a sort.

`fedjax_sel.ops.selection` defines each op in a few portable lines (a random permutation
and `lax.top_k`) and picks these functions instead when the program is lowered for CPU
(`jax.lax.platform_dependent`). They take the same arguments and act on one trial's
arrays (`f32[N]`); `jax.vmap` adds trial or edge-server axes. None of them sorts, and
none calls `lax.top_k`: on CPU, XLA's TopK is a single-threaded `std::partial_sort` of
every row, about 20 us per row at N = 1,000 and k = 100. Instead,

- the k-th largest score is found by a search over the order-preserving integer image
  of the scores (`fedjax_sel.ops.order.order_key`): one pass over the keys brackets it
  (at large N, closely, by a sample of the keys), and each later vectorised pass counts
  the keys at or above three thresholds, keeping a quarter of the bracket (about 11
  passes where a search over all 32 bits takes 16), until a threshold has exactly k keys
  at or above it or the bracket is one key; when tied scores leave its passes splitting
  no keys, the bracket's ends move onto the keys in it;
- ties at the k-th place, and uniform subsets, are resolved by Floyd's algorithm
  (Bentley and Floyd, CACM 1987), which draws a uniformly random r-subset of the ranks
  of the tied clients from r random integers (r <= k) instead of one random number per
  client; the tied clients, packed 32 to a word, take their chosen ranks word by word
  (a bit deposit), so that no client's rank is computed.

The search's counts are its own (`_kth_largest`), and the tie-break takes the number of
tied clients from the words it packs them in (`_choose_by_rank`); the eligible clients of
`uniform_subset` are counted by `count_true`. Tie-breaking is skipped when every tied
client fits in the cohort; under `jax.vmap` it is skipped when that holds for every
member of the batch (`where_needed`).

Against the portable definitions: `top_k_mask`, `kth_largest_key` (both for a static k
and for one known only at run time) and `count_true` are equal bit for bit;
`masked_top_k` and `uniform_subset` draw their tie-breaks from other random numbers
(Floyd's subset of the tied ranks, not a permutation of all clients), so they are equal
where no tie crosses the k-th place and equal in distribution everywhere
(tests/test_ops.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from fedjax_sel.ops import order
from fedjax_sel.ops.batching import where_needed
from fedjax_sel.ops.order import order_key


def count_true(flags: jax.Array) -> jax.Array:
    """int32[], the number of True entries of `flags` (bool[N]), exactly.

    Below 2^24 entries the flags are summed as bf16 in f32: XLA's CPU code vectorises
    that better than an int32 sum, and a bf16 copy of the flags is half an f32 one.
    """
    if flags.shape[-1] < 2**24:
        return jnp.sum(flags.astype(jnp.bfloat16), dtype=jnp.float32).astype(jnp.int32)
    return jnp.sum(flags, dtype=jnp.int32)


# Counts of up to 2^10 - 1 clients fit a 10-bit field: three share one int32 sum.
_FIELD_BITS = 10
# The packed flags are summed in at most this many rows (`_packed_counts`).
_MAX_ROWS = 8


def _rows(x: jax.Array) -> jax.Array:
    """`x` (1-D) as R equal rows, R the largest divisor of its length up to `_MAX_ROWS`:
    a reduction over the rows is an elementwise loop that XLA's CPU backend vectorises."""
    return x.reshape(max(r for r in range(1, _MAX_ROWS + 1) if x.shape[0] % r == 0), -1)


def _packed_counts(keys: jax.Array, thresholds: list[jax.Array]) -> list[jax.Array]:
    """The numbers of `keys` (u32[N], N < 2^10) at or above each of three thresholds,
    from one int32 sum of their flags packed as `f1 + f2 << 10 + f3 << 20`.

    The keys are read as R equal rows, R the largest divisor of N up to `_MAX_ROWS`,
    whose packed flags are added row by row (an elementwise loop XLA vectorises)
    before one sum along the row: XLA's CPU backend rewrites a single sum over N into
    a `reduce-window`, whose loop took as long as the packing.
    Padding N to a multiple of R instead costs more than it saves.
    """
    packed = _packed_flags(_rows(keys), thresholds)
    row_sum = packed[0]
    for r in range(1, packed.shape[0]):
        row_sum = row_sum + packed[r]
    return _fields(jnp.sum(row_sum), len(thresholds))


def _packed_flags(keys: jax.Array, thresholds: list[jax.Array]) -> jax.Array:
    """int32[...]: for each of `keys` (u32[...]), its flags at or above each of up to
    three thresholds, threshold j's as bit `10 j`: sums of fewer than 2^10 of them keep
    each count in its own 10-bit field."""
    return sum((keys >= t).astype(jnp.int32) << (j * _FIELD_BITS) for j, t in enumerate(thresholds))


def _fields(packed: jax.Array, num: int) -> list[jax.Array]:
    """The first `num` 10-bit fields of int32[...] `packed` (`_packed_flags` summed)."""
    field = jnp.int32((1 << _FIELD_BITS) - 1)
    return [(packed >> (j * _FIELD_BITS)) & field for j in range(num)]


def _product_counts(keys: jax.Array, thresholds: list[jax.Array]) -> list[jax.Array]:
    """The numbers of `keys` (u32[N]) at or above each threshold, as one int8 matrix
    product of their flags, int8[3, N], with ones, int8[N, 8], summed in int32.

    XLA's CPU backend hands an int8 product whose outer dimensions both exceed 1 to
    YNNPACK (`vmap` stacks the trials' flags into one [3 B, N] matrix), which sums
    faster than XLA's own integer reduction; eight columns keep it a matrix product.
    """
    flags = (keys >= jnp.stack(thresholds)[:, None]).astype(jnp.int8)
    ones = jnp.ones((keys.shape[-1], 8), jnp.int8)
    counts = jnp.dot(flags, ones, preferred_element_type=jnp.int32)[:, 0]
    return [counts[j] for j in range(len(thresholds))]


def _blocked_counts(keys: jax.Array, thresholds: list[jax.Array]) -> list[jax.Array]:
    """The numbers of `keys` (u32[N], N >= 2^10) at or above each of three thresholds:
    the keys read as rows of C < 2^10 (the largest divisor of N from 512 to 1,023, else
    1,000, the last N % 1,000 keys counted apart by `_packed_counts`), each row's flags
    packed into 10-bit fields as in `_packed_counts` and summed along the row, then each
    field summed over the rows.

    A sum over all N keys XLA's CPU backend runs as a `reduce-window` over flags it
    first stores, 4 bytes a key and threshold; summed along rows shorter than 2^10, the
    packed flags are never stored.
    """
    n = keys.shape[-1]
    width = max((d for d in range(512, 1 << _FIELD_BITS) if n % d == 0), default=1000)
    rows = keys[: n - n % width].reshape(-1, width)
    per_row = jnp.sum(_packed_flags(rows, thresholds), axis=1)
    counts = [jnp.sum(f) for f in _fields(per_row, len(thresholds))]
    if n % width:
        rest = _packed_counts(keys[n - n % width :], thresholds)
        counts = [a + b for a, b in zip(counts, rest, strict=True)]
    return counts


# From this many rows on, the search counts by an int8 matrix product (`_counter`).
_PRODUCT_MIN_ROWS = 64


def _counter(rows: int, n: int) -> Callable:
    """How `_kth_largest` counts keys at its thresholds in `rows` rows of `n` keys: packed
    sums below 2^10 keys (`_packed_counts`); beyond, packed sums along blocks of fewer
    than 2^10 keys (`_blocked_counts`), or an int8 matrix product (`_product_counts`)
    from `_PRODUCT_MIN_ROWS` rows on.

    Three thresholds, on the Xeon (ms a batch, the blocks then the product, then a sum
    per threshold): 1 row of 10^6 keys 0.39, 3.8, 1.0; 16 rows of 10^5 0.59, 0.91, 1.41;
    16 rows of 10^4 0.09, 0.18, 0.26; 64 rows of 10^4 0.35, 0.34; 128 rows of 10^4 0.69,
    0.57.
    """
    if n < 2**_FIELD_BITS:
        return _packed_counts
    return _product_counts if rows >= _PRODUCT_MIN_ROWS else _blocked_counts


def _fold(op: Callable, x: jax.Array) -> jax.Array:
    """`op` (an elementwise minimum or maximum) over all of `x` (1-D), by halving.

    XLA's CPU backend runs a min or max reduction over more than 32 entries as a scalar
    loop with a branch per entry (a `reduce-window`); halving stays vectorised.
    """
    while x.shape[0] > 1:
        x = jnp.pad(x, (0, x.shape[0] % 2), mode="edge")
        x = op(x[0::2], x[1::2])
    return x[0]


def _largest(x: jax.Array) -> jax.Array:
    """The largest entry of `x` (u32[N]): a maximum over its rows (`_rows`), then a fold."""
    return _fold(jnp.maximum, jnp.max(_rows(x), axis=0))


def _whole_batch(batch_fn: Callable) -> Callable:
    """`batch_fn`, written for arrays with a leading batch axis, as a function of one
    member: alone it runs on a batch of one, and under `jax.vmap` on the whole batch at
    once (`jax.custom_batching.custom_vmap`; unbatched operands are broadcast).

    For kernels whose loops stop when every member is done (`_kth_largest`, Floyd's
    `_random_subsets`): vmapped member by member, each loop step would become a batched
    `while` with a select per member, or index pairs per member.
    """

    @jax.custom_batching.custom_vmap
    def one(*operands):
        out = batch_fn(*(x[None] for x in operands))
        return jax.tree.map(lambda x: x[0], out)

    @one.def_vmap
    def whole(axis_size, in_batched, *operands):
        operands = (
            x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
            for x, b in zip(operands, in_batched, strict=True)
        )
        out = batch_fn(*operands)
        return out, jax.tree.map(lambda _: True, out)

    return one


def _kth_largest(keys: jax.Array, k) -> tuple[jax.Array, jax.Array]:
    """(u32[], int32[]): a threshold that splits the k largest entries of `keys` (u32[N])
    from the rest, and the number of keys at or above it; k is a Python int or a traced
    int32[], 1 <= k <= N.

    The k-th largest key `v` is the largest threshold with at least k keys at or above
    it; a threshold of 0 (never accepted, count 0) means fewer than k keys are positive.
    When exactly k keys are at or above `v`, every threshold in `(w, v]` (`w` the next
    key below) selects the same k keys, and the search stops at the first such
    threshold it accepts: the count is then k and the threshold need not be a key (it
    may depend on the other members of a batch; the keys at or above it do not). When
    more than k keys are at or above `v` (a tie crosses the k-th place), `v` itself is
    returned. The search narrows an interval known to hold `v`, `[low, high]`, three
    thresholds per pass:

    - one pass over the keys brackets it: `high` is their maximum, and `low` the least
      of the maxima of k disjoint groups, since k keys (one per group) are at or above
      it (`_first_pass`). A traced k cannot shape the groups, and `low` is then the
      least positive key (`_first_pass_traced`);
    - the first pass counts the keys at or above `low` (so that the count of the
      answer is known) and at two points that cut the rest in thirds, or, from
      `_SAMPLE_MIN_KEYS` keys on, at two order statistics of a sample of the keys that
      bracket the k-th closely (`_sampled_offsets`); each later pass
      counts at the three points `low + j * ceil(width / 4)` and keeps the highest with
      at least k keys, which leaves a quarter of the interval;
    - when two passes leave the same keys in an interval that is still open, the keys in
      it are few and far apart (scores that take few values: empirical means, UCB
      indices over small counts), and quartering would take a pass for every two bits
      of the gaps between them. The interval's ends then move onto the least and the
      largest key in it (`_snap`, one pass);
    - it stops when the interval is one value, or when the accepted `low` has exactly k
      keys at or above it. On continuous scores (Thompson sampling's draws) the gap
      below the k-th key is wide against the interval, and stopping at a count of k
      saves about half the passes.

    Moving onto the keys made the rounds of `epsilon_greedy` and `ucb` 13 to 16% faster
    at N = 1,000 and 27 to 30% at N = 10,000 (docs/benchmarks.md).

    The counts come from one int32 sum of packed flags below 2^10 keys
    (`_packed_counts`), beyond from packed sums along blocks of the keys
    (`_blocked_counts`), or an int8 matrix product in batches of 64 or more
    (`_product_counts`; `_counter`). The
    search is exact whatever the bracket; a narrow bracket only saves passes: without
    the two rules above, about 11 for the indices of `ucb` at N = 100, 1,000 and 10,000,
    where a search over all 32 bits takes 16 (docs/benchmarks.md).

    Up to `_PAIRWISE_MAX_KEYS` keys there is no search: every pair of keys is compared
    (`_kth_largest_pairwise`), and the threshold is the k-th key itself.

    Under `jax.vmap` the batch is searched at once (`_search_batch`, `_whole_batch`),
    until every member has settled; a member that has settled repeats its last pass,
    which leaves a one-value interval unchanged and a threshold with k keys at or above
    it a threshold with the same k keys.
    """
    if keys.shape[-1] <= _PAIRWISE_MAX_KEYS:
        return _kth_largest_pairwise(keys, k)
    if isinstance(k, int):
        return _whole_batch(lambda keys: _search_batch(keys, k, _first_pass))(keys)
    search = lambda keys, k: _search_batch(keys, k, _first_pass_traced)
    return _whole_batch(search)(keys, jnp.asarray(k, jnp.int32))


# Up to this many keys, `_kth_largest` compares every pair of keys instead of searching.
_PAIRWISE_MAX_KEYS = 32


def _kth_largest_pairwise(keys: jax.Array, k) -> tuple[jax.Array, jax.Array]:
    """`_kth_largest` of a few keys (u32[N], N <= `_PAIRWISE_MAX_KEYS`) by comparing every
    pair: the keys with fewer than k keys above them are those at or above the k-th
    largest, which is their least. It returns that key itself (or 0 and a count of 0 when
    fewer than k keys are positive).

    No loop and a few fusions: at N = 13 and 20 it compiles in about 0.07 s against 0.43
    s for the search, and runs 0.17 to 0.22 us a row against 0.27 to 0.36 (batches of
    512 rows on one CPU device); from about 32 keys on the N^2 comparisons cost more than the
    search's passes (at 40 keys 1.0 against 0.3 us, docs/benchmarks.md).
    """
    above = jnp.sum(keys[:, None] > keys[None, :], axis=0, dtype=jnp.int32)
    at_or_above = above < k
    kth = jnp.min(jnp.where(at_or_above, keys, jnp.uint32(0xFFFFFFFF)))
    positive = kth > 0
    return jnp.where(positive, kth, 0), jnp.where(positive, count_true(at_or_above), 0)


class _Interval(NamedTuple):
    """The state of `_kth_largest`'s search: the interval `[low, high]` known to hold the
    k-th key, the number of keys at or above `low` and the number above `high`."""

    low: jax.Array
    high: jax.Array
    at_or_above: jax.Array
    above: jax.Array

    @property
    def inside(self) -> jax.Array:
        """The number of keys in the interval."""
        return self.at_or_above - self.above

    def unsettled(self, k) -> jax.Array:
        """Whether the search goes on: the interval is open, and more than k keys are at
        or above `low`."""
        return (self.high > self.low) & (self.at_or_above != k)


def _search_pass(keys: jax.Array, k, state: _Interval, offsets, counts: Callable) -> _Interval:
    """One pass of `_kth_largest` on u32[N] `keys`: counts (`counts`, `_counter`) at
    `low + d` for the three `offsets` d (clipped to `high`) and narrows the interval."""
    low, high, at_or_above, above = state
    # Thresholds below 1 would count ineligible keys: they are raised to 1.
    candidates = [jnp.maximum(low + jnp.minimum(d, high - low), 1) for d in offsets]
    # Counts fall as thresholds rise: the accepted candidates come first, the last of
    # them is the new `low`, and the first rejected one bounds the answer.
    for candidate, count in zip(candidates, counts(keys, candidates), strict=True):
        accept = count >= k
        low = jnp.where(accept, candidate, low)
        at_or_above = jnp.where(accept, count, at_or_above)
        lowers = ~accept & (candidate - 1 < high)
        above = jnp.where(lowers, count, above)
        high = jnp.where(lowers, candidate - 1, high)
    return _Interval(low, high, at_or_above, above)


def _first_pass(keys: jax.Array, k: int, counts: Callable) -> _Interval:
    """The bracket of u32[N] `keys` and the first pass of `_kth_largest` in it."""
    n = keys.shape[-1]
    # k disjoint groups: group i holds keys g * k + i (g < N // k), and one more key
    # for the first N % k groups.
    per_group = n // k
    group_max = jnp.max(keys[: k * per_group].reshape(per_group, k), axis=0)
    group_max = jnp.maximum(group_max, jnp.pad(keys[k * per_group :], (0, k - n % k)))
    low, high = _fold(jnp.minimum, group_max), _fold(jnp.maximum, group_max)
    return _pass_in_bracket(keys, k, low, high, counts)


# From this many keys on, the first pass places its inner thresholds by a sample of
# `_SAMPLE_SIZE` keys (`_sampled_offsets`) instead of at the thirds of the bracket; at
# N = 1,000, a sample of 64 keys cost more than it saved (docs/benchmarks.md).
_SAMPLE_MIN_KEYS = 2**16
_SAMPLE_SIZE = 2**12


def _pass_in_bracket(keys: jax.Array, k, low, high, counts: Callable) -> _Interval:
    """The first pass of `_kth_largest` in the bracket `[low, high]` (`high` the largest
    key): at `low` itself (with either bracket, rejected only when fewer than k keys are
    positive), then at the thirds of the bracket, or from `_SAMPLE_MIN_KEYS` keys on at
    two order statistics of a sample of them (`_sampled_offsets`)."""
    if keys.shape[-1] >= _SAMPLE_MIN_KEYS:
        inner = _sampled_offsets(keys, k, low, high)
    else:
        third = (high - low) // 3 + 1
        inner = [third, 2 * third]
    state = _Interval(low, high, jnp.int32(0), jnp.int32(0))
    return _search_pass(keys, k, state, [jnp.uint32(0), *inner], counts)


def _sampled_offsets(keys: jax.Array, k, low, high) -> list[jax.Array]:
    """Two offsets from `low` that bracket the k-th largest of u32[N] `keys` closely with
    high probability: the order statistics of `_SAMPLE_SIZE` evenly spaced keys (a sample
    of S out of N) at ranks r + d and r - d, r = k S / N and d = 3 sqrt(r) + 1.

    About Binomial(S, k / N) of the sampled keys are at or above the k-th largest: r on
    average, with a standard deviation below sqrt(r), so the two order statistics fall
    on either side of it but rarely, and the first pass leaves about 6 sqrt(r) N / S keys
    in the interval instead of a third of the bracket (a traced top-k of one row of 10^6
    uniform keys: 5.3 to 6.9 ms against 11.8 to 12.1 at k = 13 to 650, docs/benchmarks.md).
    The search is exact whatever its thresholds, so a sample that misses (keys ordered
    against the spacing) costs passes, not exactness. The sample's order statistics take
    32 counting passes over its S keys (`order.kth_largest_key`), no sort.
    """
    n = keys.shape[-1]
    stride = n // _SAMPLE_SIZE
    sample = keys[: stride * _SAMPLE_SIZE : stride]
    r = jnp.asarray(k, jnp.float32) * (_SAMPLE_SIZE / n)
    d = 3.0 * jnp.sqrt(r) + 1.0
    ranks = jnp.stack([jnp.ceil(r + d), jnp.floor(r - d)])
    # Rank 0 is the all-ones key (above every key), a rank past the positive keys 0:
    # the offsets are clipped into the bracket either way.
    ranks = jnp.clip(ranks, 0, _SAMPLE_SIZE).astype(jnp.int32)
    below, above = jax.vmap(order.kth_largest_key, in_axes=(None, 0))(sample, ranks)
    return [jnp.maximum(t, low) - low for t in (below, jnp.minimum(above, high))]


def _first_pass_traced(keys: jax.Array, k: jax.Array, counts: Callable) -> _Interval:
    """`_first_pass` for a traced k (int32[]): the bracket from the least positive key to
    the largest, and the first pass in it."""
    high = _largest(keys)
    low = jnp.minimum(~_largest(jnp.where(keys > 0, ~keys, 0)), high)
    state = _pass_in_bracket(keys, k, low, high, counts)
    # `low` rejected: fewer than k keys are positive, and the answer is the threshold 0.
    zero = _Interval(jnp.uint32(0), jnp.uint32(0), jnp.int32(0), jnp.int32(0))
    return jax.tree.map(lambda z, s: jnp.where(state.at_or_above == 0, z, s), zero, state)


def _later_passes(keys: jax.Array, k, state: _Interval, counts: Callable) -> _Interval:
    """Two passes of `_kth_largest`, each keeping a quarter of the interval."""
    for _ in range(2):
        step = (state.high - state.low) // 4 + 1
        state = _search_pass(keys, k, state, [step, 2 * step, 3 * step], counts)
    return state


def _snap(keys: jax.Array, state: _Interval) -> _Interval:
    """The interval with its ends moved onto the least and the largest key in it (no key
    lies between the old ends and the new, so the counts stay)."""
    inside = (keys >= state.low) & (keys <= state.high)
    largest = _largest(jnp.where(inside, keys, 0))
    least = ~_largest(jnp.where(inside, ~keys, 0))
    some = state.inside > 0
    return state._replace(
        low=jnp.where(some, least, state.low), high=jnp.where(some, largest, state.high)
    )


def _search_batch(keys: jax.Array, k, first_pass: Callable) -> tuple[jax.Array, jax.Array]:
    """`_kth_largest` of each row of u32[B, N] `keys`: (u32[B], int32[B]), for a static
    k (a Python int) or one per row (int32[B]); `first_pass(keys, k)` brackets a row.

    The bracket is taken inside the loop, in its first iteration, so that the loop is
    the only consumer of `keys`: XLA then computes them once, where a second consumer
    outside it would make XLA recompute them (and the scores behind them) in each.
    """
    k_axis = None if isinstance(k, int) else 0
    counts = _counter(*keys.shape)
    first = jax.vmap(functools.partial(first_pass, counts=counts), in_axes=(0, k_axis))
    later = jax.vmap(functools.partial(_later_passes, counts=counts), in_axes=(0, k_axis, 0))
    snap = jax.vmap(_snap)

    def body(carry):
        i, state = carry

        def if_later(state):
            new = later(keys, k, state)
            # Two passes that left the same keys in an unsettled interval: its keys are
            # sparse (ties, few values), and its ends move onto them.
            stalled = new.unsettled(k) & (new.inside == state.inside)
            return lax.cond(jnp.any(stalled), lambda n: snap(keys, n), lambda n: n, new)

        return i + 1, lax.cond(i == 0, lambda state: first(keys, k), if_later, state)

    def unsettled(carry):
        i, state = carry
        return (i == 0) | jnp.any(state.unsettled(k))

    bound = jnp.zeros(keys.shape[0], jnp.uint32)
    count = jnp.zeros(keys.shape[0], jnp.int32)
    _, state = lax.while_loop(
        unsettled, body, (jnp.int32(0), _Interval(bound, bound, count, count))
    )
    return state.low, state.at_or_above


def _random_subsets(size, take, key, k: int, n: int) -> jax.Array:
    """u32[B, n // 32 + 2]: for each b, a uniformly random subset of `take[b]` of the
    ranks `0, ..., size[b] - 1` (`size`, `take`: int32[B]; `key`: B PRNG keys), rank r
    as bit r % 32 of word r // 32; the last word stays 0.

    Floyd's algorithm: for j = size - take, ..., size - 1, draw t uniform in [0, j] and
    add t, or j when t is already in; every subset of the right size is equally likely.
    `size <= n` and `take <= k`; `k` bounds the iterations, and a `take` above `size`
    gives every rank. t is a 32-bit random word modulo j + 1, uniform up to a relative
    bias below n / 2^32.

    The batch is one flat array of words, so that each step is a single gather and
    scatter over B flat positions: the per-trial loop under `jax.vmap` builds (trial,
    word) index pairs at every step instead. A rank is added to its word by adding its
    bit, which is not yet set.
    """
    batch = size.shape[0]
    width = n // 32 + 2
    # Every rank when `take` is above `size`: then j runs from 0.
    take = jnp.minimum(take, size)
    last = size[:, None] - take[:, None] + jnp.arange(k, dtype=jnp.int32)
    span = (last + 1).astype(jnp.uint32)
    draw = (jax.vmap(lambda kk: jax.random.bits(kk, (k,)))(key) % span).astype(jnp.int32)
    offset = width * jnp.arange(batch, dtype=jnp.int32)

    def add(i, chosen):
        t = draw[:, i]
        taken = chosen[offset + (t >> 5)] >> (t & 31).astype(jnp.uint32) & 1
        pos = jnp.where(taken == 1, last[:, i], t)
        keep = i < take
        bit = jnp.uint32(1) << (pos & 31).astype(jnp.uint32)
        return chosen.at[jnp.where(keep, offset + (pos >> 5), batch * width)].add(bit, mode="drop")

    # Steps past every member's `take` add nothing: the loop stops at the largest.
    steps = jnp.clip(jnp.max(take), 0, k)
    chosen = lax.fori_loop(0, steps, add, jnp.zeros((batch * width,), jnp.uint32))
    return chosen.reshape(batch, width)


def _random_subset(size: jax.Array, take: jax.Array, k: int, key: jax.Array, n: int):
    """u32[n // 32 + 2]: a uniformly random subset of `take` of the ranks `0, ...,
    size - 1`, as bits (`_random_subsets` of one; under `jax.vmap`, of the whole batch
    at once)."""
    subsets = lambda size, take, key: _random_subsets(size, take, key, k, n)
    return _whole_batch(subsets)(size, take, key)


# Times a u32 holding four 0/1 bytes, moves byte i's bit to bit 21 + i (no carries).
_GATHER_4_BITS = np.uint32(0x00204081)
# The bytes of a u32, one mask each.
_BYTES = np.uint32(0xFF) << (8 * np.arange(4, dtype=np.uint32))


def _bit_words(flags: jax.Array) -> jax.Array:
    """u32[ceil(N / 32)]: `flags` (bool[N]) packed 32 to a word, flag 32 w + i as bit
    i of word w (the last word's missing flags are 0).

    Four flags read as the bytes of one u32 are gathered into a nibble by one multiply
    (byte i times 2^(21 - 7 i); no two partial products overlap), and the eight
    nibbles of a word are summed: about twice as fast as summing 32 shifted flags, and
    the sum (a reduction) makes XLA store the words rather than recompute them in every
    consumer. The N % 32 flags of a last partial word are summed
    apart: padding the flags to whole words made the packing 4 to 5 times slower.
    """
    n = flags.shape[0]
    whole = flags[: n - n % 32].astype(jnp.uint8).reshape(-1, 8, 4)
    nibbles = (lax.bitcast_convert_type(whole, jnp.uint32) * _GATHER_4_BITS) >> 21 & 15
    words = jnp.sum(nibbles << (4 * jnp.arange(8, dtype=jnp.uint32)), axis=-1, dtype=jnp.uint32)
    if n % 32:
        tail = flags[n - n % 32 :].astype(jnp.uint32) << jnp.arange(n % 32, dtype=jnp.uint32)
        words = jnp.concatenate([words, jnp.sum(tail, keepdims=True, dtype=jnp.uint32)])
    return words


def _select_bit(words: jax.Array, rank: jax.Array) -> jax.Array:
    """u32: the place of the set bit of rank `rank` (from 0, lowest first) in each of
    `words` (u32 arrays; `rank` below the word's number of set bits): a binary search
    over halves, quarters, ... of the word by their numbers of set bits."""
    place = jnp.zeros_like(words)
    rank = rank.astype(jnp.uint32)
    for width in (16, 8, 4, 2, 1):
        low = lax.population_count((words >> place) & np.uint32((1 << width) - 1))
        up = rank >= low
        place = place + jnp.where(up, np.uint32(width), np.uint32(0))
        rank = rank - jnp.where(up, low, np.uint32(0))
    return place


def _places(flags: jax.Array, ranks: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """int32 like the ranks: the place of the True entry of each rank (from 0) of
    `flags` (bool[N]), N for a rank at or above their number; `ranks(count)` gives the
    ranks from the number of True entries (int32[]).

    The flags are packed 32 to a word (`_bit_words`), the cumulative sum runs over the
    words' numbers of set bits (its last entry is the count), and each rank finds its
    word by a binary search of those sums and its bit by `_select_bit`: one pass over N,
    then work in the ranks.
    """
    words = _bit_words(flags)
    counts = lax.population_count(words).astype(jnp.int32)
    ends = jnp.cumsum(counts)
    wanted = ranks(ends[-1])
    word = jnp.minimum(jnp.searchsorted(ends, wanted, side="right"), words.shape[0] - 1)
    rank = wanted - ends[word] + counts[word]
    place = 32 * word + _select_bit(words[word], rank).astype(jnp.int32)
    return jnp.where(wanted < ends[-1], place, flags.shape[0])


def true_indices(flags: jax.Array, size: int) -> jax.Array:
    """int32[size]: the places of the first `size` True entries of `flags` (bool[N]) in
    increasing order, then N (`jnp.nonzero(flags, size=size, fill_value=N)`, bit for bit).

    `jnp.nonzero` counts over all N (a cumulative sum, then a scatter); here `_places`
    packs the flags into words and counts over those.
    """
    return _places(flags, lambda count: jnp.arange(size, dtype=jnp.int32))


def nth_true(flags: jax.Array, rank: jax.Array) -> jax.Array:
    """int32[]: the place of the True entry of rank `rank` (int32[], from 0) of `flags`
    (bool[N]), N if `rank` is at or above their number (`_places`; the definition's
    cumulative sum over N takes several passes on XLA:CPU)."""
    return _places(flags, lambda count: jnp.asarray(rank, jnp.int32))


def random_true(flags: jax.Array, key: jax.Array) -> jax.Array:
    """int32[]: `nth_true` of a rank drawn uniformly below the number of True entries of
    `flags` (bool[N]), that number taken from the packed words (the definition counts the
    flags in a pass of their own); N where none is True."""
    return _places(flags, lambda count: jax.random.randint(key, (), 0, count))


def _unpack(words: jax.Array, n: int) -> jax.Array:
    """bool[n]: bit i of word w (`words`, u32[ceil(n / 32)]) as flag 32 w + i."""
    # The shifts as an iota, not a constant array: XLA's CPU code loads a constant's
    # entries one by one, and the loop over the flags was left scalar.
    bits = words[:, None] >> jnp.arange(32, dtype=jnp.uint32) & 1
    return bits.reshape(-1)[:n] == 1


def _deposit(bits: jax.Array, mask: jax.Array) -> jax.Array:
    """u32: the low bits of `bits` placed, in order, at the set bits of `mask` (both
    u32 arrays; the x86 PDEP instruction, elementwise).

    The "expand" of Hacker's Delight (Warren, 2nd ed., sec. 7-5): five stages move each
    bit left by the number of clear bits of `mask` below its place, 16, 8, 4, 2 and 1
    at a time, each stage's moves found by a parallel prefix over the mask.
    """
    original = mask
    clear_below = ~mask << 1
    moves = []
    for stage in range(5):
        odd = clear_below ^ (clear_below << 1)
        for shift in (2, 4, 8, 16):
            odd = odd ^ (odd << shift)
        move = odd & mask
        moves.append(move)
        mask = (mask ^ move) | (move >> (1 << stage))
        clear_below = clear_below & ~odd
    for stage in reversed(range(5)):
        move = moves[stage]
        bits = (bits & ~move) | ((bits << (1 << stage)) & move)
    return bits & original


def _choose_by_rank(flags: jax.Array, window: Callable) -> jax.Array:
    """bool[N]: the True entries of `flags` (bool[N]) whose ranks among them are
    chosen, the r-th True entry (from 0) being chosen when bit r of a bitmap is set.

    `window(start, size)` gives, for each word of packed flags, the 32 bits of the
    bitmap from its first rank on (`start`, int32[ceil(N / 32)], the True entries
    before the word; `size`, int32[], all of them). Each word's window is deposited at
    its set flags (`_deposit`), so that no rank is computed per entry: the per-entry
    gather this replaces ran on CPU as a scalar loop. The deposited words are summed
    over their four bytes: that reduction makes XLA compute them once per word, where
    fused into the unpacking it would recompute the deposit for each of 32 entries.
    """
    words = _bit_words(flags)
    per_word = lax.population_count(words).astype(jnp.int32)
    through = jnp.cumsum(per_word)
    chosen = _deposit(window(through - per_word, through[-1]), words)
    chosen = jnp.sum(chosen[:, None] & _BYTES, axis=-1, dtype=jnp.uint32)
    return _unpack(chosen, flags.shape[0])


def _random_tied(tied: jax.Array, take: Callable, key: jax.Array, k: int) -> jax.Array:
    """bool[N]: a uniformly random subset of `take(size) <= k` of the `size` `tied`
    clients (Floyd's)."""

    def window(start, size):
        chosen = _random_subset(size, take(size), k, key, tied.shape[0])
        first, shift = start >> 5, (start & 31).astype(jnp.uint32)
        # Bits `start, ..., start + 31` of the bitmap: the high part of one word and
        # the low part of the next (none when the start is word-aligned).
        high = jnp.where(shift > 0, chosen[first + 1] << (32 - shift), jnp.uint32(0))
        return chosen[first] >> shift | high

    return _choose_by_rank(tied, window)


def _lowest_tied(tied: jax.Array, take: Callable) -> jax.Array:
    """bool[N]: the `take(size)` tied clients of lowest index, of `size` tied."""

    def window(start, size):
        # Ranks below take(size): the low take(size) - start bits of each window.
        width = jnp.clip(take(size) - start, 0, 32).astype(jnp.uint32)
        return jnp.where(width < 32, (jnp.uint32(1) << width) - 1, jnp.uint32(0xFFFFFFFF))

    return _choose_by_rank(tied, window)


def _top_k_of_keys(keys: jax.Array, k, choose: Callable[..., jax.Array], *key):
    """bool[N]: the k largest positive `keys` (k: a Python int, or a traced int32[]
    >= 1), `choose(tied, take, *key)` picking `take(size)` of the `size` clients tied at
    the k-th place; all positive keys when fewer than k.

    With exactly k keys at or above the search's threshold (`_kth_largest`), they are
    the cohort. With more, the threshold is the k-th key: the `at_or_above - size` keys
    above it are all selected, and the tied ones fill the other slots.
    """
    kth, at_or_above = _kth_largest(keys, k)

    def full(keys, kth, excess, *key):
        # With kth = 0 no client is tied, and no slot is left to fill.
        take = lambda size: size - jnp.maximum(excess, 0)
        return (keys > kth) | choose((keys == kth) & (kth > 0), take, *key)

    def short(keys, kth, excess, *key):
        del excess, key
        return keys >= jnp.maximum(kth, 1)

    excess = at_or_above - k
    return where_needed(excess > 0, full, short, keys, kth, excess, *key)


def uniform_subset(mask: jax.Array, k: int, key: jax.Array) -> jax.Array:
    """A uniformly random subset of size min(k, sum(mask)) of the clients in `mask`.

    Args:
      mask: bool[N], eligible clients.
      k: static cohort size, 1 <= k <= N.
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set, all inside `mask`.
    """
    full = lambda mask, key: _random_tied(mask, lambda size: jnp.minimum(size, k), key, k)
    short = lambda mask, key: mask
    return where_needed(count_true(mask) > k, full, short, mask, key)


def masked_top_k(scores: jax.Array, mask: jax.Array, k: int, key: jax.Array) -> jax.Array:
    """The k highest-scoring clients in `mask`, ties broken uniformly at random.

    The k-th largest masked score `v` splits the eligible clients into those strictly
    above `v` (all selected) and those equal to `v` (the remaining slots are filled by a
    uniformly random subset of them). Clients scoring `-inf` are eligible like any other;
    fewer than k eligible clients leave slots empty. Scores are compared in the total
    order of f32 (-0.0 below +0.0).

    Args:
      scores: f32[N], higher is better (indices, sampled means, ...).
      mask: bool[N], eligible (available) clients.
      k: static cohort size, 1 <= k <= N.
      key: PRNG key for the tie-break.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    choose = functools.partial(_random_tied, k=k)
    return _top_k_of_keys(order_key(scores, mask), k, choose, key)


def top_k_mask(scores: jax.Array, mask: jax.Array, k) -> jax.Array:
    """Deterministic top-k of `scores` in `mask`, ties to the lower index (for oracles).

    Args:
      scores: f32[N] of finite values (`-inf` is never selected).
      mask: bool[N], eligible clients.
      k: cohort size: a Python int, 1 <= k <= N, or a traced int32[], 0 <= k <= N.

    Returns:
      bool[N] with exactly min(k, sum(mask & (scores > -inf))) entries set.
    """
    keys = order_key(scores, mask & (scores > -jnp.inf))
    if isinstance(k, int):
        return _top_k_of_keys(keys, k, _lowest_tied)
    # The search takes k >= 1; a k of 0 selects no one.
    k = jnp.asarray(k, jnp.int32)
    return _top_k_of_keys(keys, jnp.maximum(k, 1), _lowest_tied) & (k > 0)


def kth_largest_key(keys: jax.Array, k) -> jax.Array:
    """u32[]: `order.kth_largest_key` (the k-th largest of `keys`, u32[N], counting
    repeats; the all-ones key for k <= 0), bit for bit, from `_kth_largest`'s search.

    The search may stop at a threshold that is not a key, with exactly k keys at or above
    it: the k-th largest is then the least of those (one pass).
    """
    if isinstance(k, int) and k >= 1:
        low, _ = _kth_largest(keys, k)
    else:
        low, _ = _kth_largest(keys, jnp.maximum(jnp.asarray(k, jnp.int32), 1))
    least = ~_largest(jnp.where(keys >= low, ~keys, 0))
    kth = jnp.where(low > 0, least, jnp.uint32(0))
    return jnp.where(jnp.asarray(k) > 0, kth, jnp.uint32(0xFFFFFFFF))
