"""Selection ops: which clients a round takes, defined portably, run sort-free on CPU.

Every op acts on one trial's arrays (`f32[N]`, `bool[N]`); `jax.vmap` adds trial or
edge-server axes. Scores are ranked in the total order of f32 (`order.order_key`: -0.0
below +0.0, NaN above +inf), and ineligible clients never rank.

The module reads in two parts. First the definitions (`portable_*`), a few lines each
that run on every platform: masked top-k with uniform random tie-breaking is `lax.top_k`
of the clients taken in a uniformly random order, since XLA's TopK breaks ties to the
lower index, which is then a uniformly random one. Then the public ops, which choose an
implementation by platform (`jax.lax.platform_dependent`, resolved when the program is
lowered, so that the compiled program holds one of them only): on CPU, the sort-free
kernels of `fedjax_sel.ops._xla_cpu`, since XLA:CPU runs TopK as a single-threaded
partial sort of every row; elsewhere, the definition.

The cohort size k is a Python int (static, 1 <= k <= N: the platform's implementation)
or a traced int32[] (0 <= k <= N; a decaying exploration count, say): a traced k runs the
definition, with an order statistic found by bisection (`order.kth_largest_key`) in place
of `lax.top_k`, and from the same permutation as a static k, so the two select the same
clients on every input. The deterministic ops, `top_k_mask` and `kth_largest_key`, run
the CPU search for a traced k too.

`top_k_mask`, `kth_largest_key` and `count_true` are equal on every platform bit for bit. The CPU
`masked_top_k` and `uniform_subset` break ties with other random numbers than the
permutation (Floyd's algorithm), so they select the same clients as the definition
wherever no tie crosses the k-th place, and the same in distribution everywhere.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from fedjax_sel.ops import _xla_cpu, order
from fedjax_sel.ops.batching import where_needed
from fedjax_sel.ops.order import order_key


def _is_static(k) -> bool:
    return isinstance(k, numbers.Integral)


def _take_first(keys: jax.Array, k) -> jax.Array:
    """bool[N]: the positive `keys` (u32[N]) among the first k in descending order, ties
    to the lower index: `lax.top_k` for a static k; for a traced one, the keys above the
    k-th largest (`order.kth_largest_key`, no sort) and the lowest-indexed of those equal
    to it (a cumulative count, in rounds where they do not all fit)."""
    n = keys.shape[0]
    if _is_static(k):
        values, first = lax.top_k(keys, k)
        return jnp.zeros(n, bool).at[first].set(values > 0)
    kth = order.kth_largest_key(keys, k)
    above = keys > kth
    tied = keys == kth
    room = jnp.asarray(k, jnp.int32) - jnp.sum(above, dtype=jnp.int32)
    # The lowest-indexed `room` of the tied, counted only where they do not all fit.
    taken = where_needed(
        jnp.sum(tied, dtype=jnp.int32) > room,
        lambda t, r: t & (jnp.cumsum(t, dtype=jnp.int32) <= r),
        lambda t, r: t,
        tied,
        room,
    )
    return (above | taken) & (keys > 0)


def portable_masked_top_k(scores: jax.Array, mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """The definition of `masked_top_k`: the top k of the clients in a random order."""
    order = jax.random.permutation(key, scores.shape[0])
    chosen = _take_first(order_key(scores, mask)[order], k)
    return jnp.zeros(chosen.shape, bool).at[order].set(chosen)


def portable_uniform_subset(mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """The definition of `uniform_subset`: every eligible client tied."""
    return portable_masked_top_k(jnp.zeros(mask.shape, jnp.float32), mask, k, key)


def portable_top_k_mask(scores: jax.Array, mask: jax.Array, k) -> jax.Array:
    """The definition of `top_k_mask`: the top k in index order."""
    return _take_first(order_key(scores, mask & (scores > -jnp.inf)), k)


def _gumbel_top_k(top_k: Callable, logits: jax.Array, mask: jax.Array, k, key: jax.Array):
    """`top_k` (a masked top-k) of Gumbel-perturbed `logits`."""
    noise_key, tie_key = jax.random.split(key)
    perturbed = logits + jax.random.gumbel(noise_key, logits.shape, logits.dtype)
    return top_k(perturbed, mask, k, tie_key)


def portable_gumbel_top_k(logits: jax.Array, mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """The definition of `gumbel_top_k`, on `portable_masked_top_k`."""
    return _gumbel_top_k(portable_masked_top_k, logits, mask, k, key)


def portable_true_indices(flags: jax.Array, size: int) -> jax.Array:
    """The definition of `true_indices`: `jnp.nonzero` with a fixed size."""
    return jnp.nonzero(flags, size=size, fill_value=flags.shape[0])[0].astype(jnp.int32)


def portable_nth_true(flags: jax.Array, rank: jax.Array) -> jax.Array:
    """The definition of `nth_true`: the first place where the running count of True
    entries exceeds `rank`."""
    running = jnp.cumsum(flags, dtype=jnp.int32)
    return jnp.searchsorted(running, rank, side="right").astype(jnp.int32)


def portable_random_true(flags: jax.Array, key: jax.Array) -> jax.Array:
    """The definition of `random_true`: `nth_true` of a rank drawn uniformly below
    `count_true`."""
    rank = jax.random.randint(key, (), 0, portable_count_true(flags))
    return portable_nth_true(flags, rank)


def portable_count_true(flags: jax.Array) -> jax.Array:
    """The definition of `count_true`: an int32 sum."""
    return jnp.sum(flags, dtype=jnp.int32)


def _k_op(
    portable: Callable,
    cpu: Callable,
    cpu_traced_k: bool = False,
    lowest_k: int = 1,
    k_at_most_n: bool = True,
) -> Callable:
    """`(k, *operands) -> cpu(k, *operands)` on CPU and `portable(k, *operands)` elsewhere
    (chosen when the program is lowered) for a static k, jitted: JAX traces it once per
    k and operand shapes, and reuses that jaxpr wherever the op recurs (the rounds, the
    oracle, the metrics of every policy). A traced k runs `portable` on every platform,
    or, with `cpu_traced_k`, `cpu` on CPU too (ops whose two implementations are equal
    bit for bit: their random streams do not depend on k's being static), jitted as well:
    Oort's four traced top-k masks share one trace, and its three k-th keys another.
    A static k below `lowest_k`, or above N (the first operand's last axis) where
    `k_at_most_n`, is refused in Python, naming it, before anything is traced."""

    @functools.partial(jax.jit, static_argnums=0)
    def by_platform(k, *operands):
        return lax.platform_dependent(
            *operands,
            cpu=lambda *o: cpu(k, *o),
            default=lambda *o: portable(k, *o),
        )

    @jax.jit
    def by_platform_traced(k, *operands):
        return lax.platform_dependent(k, *operands, cpu=cpu, default=portable)

    def op(k, *operands):
        if _is_static(k):
            n = operands[0].shape[-1] if k_at_most_n else k
            if not lowest_k <= k <= n:
                raise ValueError(f"k must be an integer in [{lowest_k}, {n}], got {k}.")
            return by_platform(k, *operands)
        if cpu_traced_k:
            return by_platform_traced(jnp.asarray(k, jnp.int32), *operands)
        return portable(k, *operands)

    return op


_MASKED_TOP_K = _k_op(
    lambda k, s, m, r: portable_masked_top_k(s, m, k, r),
    lambda k, s, m, r: _xla_cpu.masked_top_k(s, m, k, r),
)
_UNIFORM_SUBSET = _k_op(
    lambda k, m, r: portable_uniform_subset(m, k, r),
    lambda k, m, r: _xla_cpu.uniform_subset(m, k, r),
)
_TOP_K_MASK = _k_op(
    lambda k, s, m: portable_top_k_mask(s, m, k),
    lambda k, s, m: _xla_cpu.top_k_mask(s, m, k),
    cpu_traced_k=True,
)
_KTH_LARGEST_KEY = _k_op(
    lambda k, keys: order.kth_largest_key(keys, k),
    lambda k, keys: _xla_cpu.kth_largest_key(keys, k),
    cpu_traced_k=True,
    lowest_k=0,
)
_TRUE_INDICES = _k_op(
    lambda size, f: portable_true_indices(f, size),
    lambda size, f: _xla_cpu.true_indices(f, size),
    k_at_most_n=False,
)


def masked_top_k(scores: jax.Array, mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """The k highest-scoring clients in `mask`, ties broken uniformly at random.

    The clients are taken in a uniformly random order (`jax.random.permutation`), and
    the k largest masked scores in that order are selected, ties to the earlier client
    (`lax.top_k`): every subset of the clients tied at the k-th place is equally likely.
    Clients scoring `-inf` are eligible like any other; fewer than k eligible clients
    leave slots empty. Scores are compared in the total order of f32 (-0.0 below +0.0,
    NaN above +inf). On CPU a static k runs `_xla_cpu.masked_top_k` (no sort; ties
    broken by Floyd's algorithm).

    Args:
      scores: f32[N], higher is better (indices, sampled means, ...).
      mask: bool[N], eligible (available) clients.
      k: cohort size: a Python int, 1 <= k <= N, or a traced int32[], 0 <= k <= N
        (then the definition on every platform).
      key: PRNG key for the tie-break.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    return _MASKED_TOP_K(k, scores, mask, key)


def uniform_subset(mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """A uniformly random subset of size min(k, sum(mask)) of the clients in `mask`.

    `masked_top_k` of equal scores. On CPU a static k runs `_xla_cpu.uniform_subset`
    (Floyd's algorithm).

    Args:
      mask: bool[N], eligible clients.
      k: cohort size: a Python int, 1 <= k <= N, or a traced int32[], 0 <= k <= N.
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set, all inside `mask`.
    """
    return _UNIFORM_SUBSET(k, mask, key)


def top_k_mask(scores: jax.Array, mask: jax.Array, k) -> jax.Array:
    """Deterministic top-k of `scores` in `mask`, ties to the lower index (for oracles).

    Equal on every platform to `lax.top_k` of the masked scores; on CPU `_xla_cpu.top_k_mask`
    runs it (no sort), for a static k and a traced one alike.

    Args:
      scores: f32[N]; `-inf` and NaN are never selected.
      mask: bool[N], eligible clients.
      k: cohort size: a Python int, 1 <= k <= N, or a traced int32[], 0 <= k <= N.

    Returns:
      bool[N] with exactly min(k, sum(mask & (scores > -inf))) entries set.
    """
    return _TOP_K_MASK(k, scores, mask)


def kth_largest_key(keys: jax.Array, k) -> jax.Array:
    """u32[]: the k-th largest of `keys` (u32[N], e.g. `order_key(scores, mask)`),
    counting repeats; 0 when fewer than k keys are positive, the all-ones key for k = 0.

    Defined by `order.kth_largest_key` (32 bisection passes, for a k known only when the
    program runs); on CPU `_xla_cpu.kth_largest_key`, the selection ops' search, equal
    bit for bit in about a third of the passes.

    Args:
      keys: u32[N].
      k: a Python int or a traced int32[], 0 <= k <= N.
    """
    return _KTH_LARGEST_KEY(k, keys)


def gumbel_top_k(logits: jax.Array, mask: jax.Array, k, key: jax.Array) -> jax.Array:
    """Samples min(k, sum(mask)) clients without replacement, P proportional to exp(logits).

    The Gumbel-top-k trick (Kool et al., 2019): the top k of `logits + Gumbel` is a
    draw of k items without replacement from softmax(logits) restricted to `mask`. The
    key is split into the noise's and the tie-break's (`masked_top_k`).

    Args:
      logits: f32[N], unnormalised log-weights.
      mask: bool[N], eligible clients.
      k: sample size, static or traced (as for `masked_top_k`).
      key: PRNG key.

    Returns:
      bool[N] with exactly min(k, sum(mask)) entries set.
    """
    return _gumbel_top_k(masked_top_k, logits, mask, k, key)


def count_true(flags: jax.Array) -> jax.Array:
    """int32[], the number of True entries of `flags` (bool[N]), exactly.

    On CPU `_xla_cpu.count_true` (a bf16 sum in f32, exact below 2^24 entries).
    """
    return lax.platform_dependent(flags, cpu=_xla_cpu.count_true, default=portable_count_true)


def random_true(flags: jax.Array, key: jax.Array) -> jax.Array:
    """int32[], the place of a uniformly random True entry of `flags` (bool[N]), or N if
    none is: `nth_true` of a rank drawn by `jax.random.randint(key, (), 0, count)` below
    their number `count` (`count_true`), one random integer in place of one per entry.

    On CPU `_xla_cpu.random_true`, bit for bit the definition, the count taken from the
    words the flags are packed in for `nth_true` instead of a pass of its own.

    Args:
      flags: bool[N].
      key: PRNG key.
    """
    return lax.platform_dependent(
        flags, key, cpu=_xla_cpu.random_true, default=portable_random_true
    )


def true_indices(flags: jax.Array, size: int) -> jax.Array:
    """int32[size], the places of the first `size` True entries of `flags` in increasing
    order, padded with N: `jnp.nonzero(flags, size=size, fill_value=N)`, bit for bit.

    For the clients a round observes (the selected ones, `size` = k), so that work can
    follow them rather than N. On CPU `_xla_cpu.true_indices` (one pass over N packing
    the flags into words; `jnp.nonzero`'s cumulative sum over N costs several).

    Args:
      flags: bool[N].
      size: a Python int >= 1.
    """
    return _TRUE_INDICES(size, flags)


def nth_true(flags: jax.Array, rank: jax.Array) -> jax.Array:
    """int32[], the place of the True entry of rank `rank` of `flags`, counted from 0 in
    index order, or N if fewer than `rank` + 1 entries are True: a uniformly random one
    of them for a `rank` uniform below their number (`count_true`), one random integer
    in place of one per entry.

    On CPU `_xla_cpu.nth_true` (the flags packed into words, as `true_indices`), bit for
    bit the definition, a cumulative sum over N.

    Args:
      flags: bool[N].
      rank: int32[] >= 0, traced or not.
    """
    return lax.platform_dependent(flags, rank, cpu=_xla_cpu.nth_true, default=portable_nth_true)
