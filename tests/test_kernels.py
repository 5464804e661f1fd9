"""Selection kernels: exact against brute force, uniform tie-breaking, Gumbel sampling."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bandits import kernels


def _brute_force_ok(scores, mask, k, selected):
    """A selection is a correct top-k iff it has min(k, |mask|) eligible clients and no
    unselected eligible client scores strictly above a selected one."""
    eligible = np.flatnonzero(mask)
    if selected.sum() != min(k, eligible.size) or np.any(selected & ~mask):
        return False
    if selected.sum() == 0:
        return True
    worst_in = scores[selected].min()
    rest = scores[mask & ~selected]
    return rest.size == 0 or rest.max() <= worst_in


def test_masked_top_k_matches_brute_force_on_random_instances():
    rng = np.random.default_rng(0)
    n = 9
    batch = 2000
    # Few distinct values so that ties are frequent; some all-unavailable rows.
    scores = rng.integers(0, 4, size=(batch, n)).astype(np.float32)
    scores[rng.random((batch, n)) < 0.1] = -np.inf
    mask = rng.random((batch, n)) < 0.7
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    for k in (1, 3, 9):
        sel = jax.jit(jax.vmap(lambda s, m, key, k=k: kernels.masked_top_k(s, m, k, key)))(
            scores, mask, keys
        )
        sel = np.asarray(sel)
        assert all(_brute_force_ok(scores[i], mask[i], k, sel[i]) for i in range(batch))


def test_masked_top_k_breaks_ties_uniformly():
    # Client 0 is strictly best; clients 1..4 tie for the 2 remaining slots of k=3:
    # each pair of them must come up with probability 1/6.
    scores = jnp.array([5.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    mask = jnp.ones(6, bool)
    draws = 12000
    keys = jax.random.split(jax.random.PRNGKey(0), draws)
    sel = np.asarray(jax.vmap(lambda key: kernels.masked_top_k(scores, mask, 3, key))(keys))
    assert sel[:, 0].all() and not sel[:, 5].any()
    pairs = list(itertools.combinations(range(1, 5), 2))
    freq = np.array([np.mean(sel[:, a] & sel[:, b]) for a, b in pairs])
    p = 1 / 6
    tol = 4.5 * np.sqrt(p * (1 - p) / draws)  # 4.5 sigma, six comparisons
    np.testing.assert_allclose(freq, p, atol=tol)


def test_uniform_subset_size_and_frequency():
    mask = jnp.array([True, False, True, True, True, False, True, True])
    draws = 8000
    keys = jax.random.split(jax.random.PRNGKey(3), draws)
    sel = np.asarray(jax.vmap(lambda key: kernels.uniform_subset(mask, 2, key))(keys))
    np.testing.assert_array_equal(sel.sum(1), 2)
    assert not sel[:, ~np.asarray(mask)].any()
    p = 2 / 6
    tol = 4.0 * np.sqrt(p * (1 - p) / draws)
    np.testing.assert_allclose(sel[:, np.asarray(mask)].mean(0), p, atol=tol)


def test_uniform_subset_fewer_eligible_than_k_takes_all():
    mask = jnp.array([False, True, False, True])
    sel = kernels.uniform_subset(mask, 3, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(sel, mask)


def test_gumbel_top_k_samples_softmax_for_k1():
    logits = jnp.log(jnp.array([0.5, 0.3, 0.15, 0.05]))
    mask = jnp.ones(4, bool)
    draws = 20000
    keys = jax.random.split(jax.random.PRNGKey(7), draws)
    sel = np.asarray(jax.vmap(lambda key: kernels.gumbel_top_k(logits, mask, 1, key))(keys))
    p = np.array([0.5, 0.3, 0.15, 0.05])
    tol = 4.0 * np.sqrt(p * (1 - p) / draws)
    freq = sel.mean(0)
    assert np.all(np.abs(freq - p) < tol), (freq, p, tol)


def test_gumbel_top_k_without_replacement_second_draw():
    # P(second item | first) follows the renormalised weights (Plackett-Luce):
    # P({0,1}) = w0 w1/(1-w0) + w1 w0/(1-w1).
    w = np.array([0.5, 0.3, 0.2])
    draws = 20000
    keys = jax.random.split(jax.random.PRNGKey(11), draws)
    sel = np.asarray(
        jax.vmap(lambda key: kernels.gumbel_top_k(jnp.log(w), jnp.ones(3, bool), 2, key))(keys)
    )
    p01 = w[0] * w[1] / (1 - w[0]) + w[1] * w[0] / (1 - w[1])
    tol = 4.0 * np.sqrt(p01 * (1 - p01) / draws)
    assert abs(np.mean(sel[:, 0] & sel[:, 1]) - p01) < tol


@pytest.mark.parametrize("k", [1, 2, 4])
def test_top_k_mask_is_deterministic_lowest_index_on_ties(k):
    scores = jnp.array([1.0, 3.0, 3.0, 2.0, 3.0])
    mask = jnp.array([True, True, True, True, False])
    sel = np.asarray(kernels.top_k_mask(scores, mask, k))
    expected = {1: [1], 2: [1, 2], 4: [0, 1, 2, 3]}[k]
    np.testing.assert_array_equal(np.flatnonzero(sel), expected)


@pytest.mark.parametrize("n", [1, 3, 8, 100, 997, 1000, 1023, 1024, 1500])
def test_kth_largest_matches_sorting(n):
    # Counts from packed int32 sums below 1,024 keys (summed in 1, 3, 8, 5, 1, 8 and 3
    # rows here), from an int8 product from there on: both against a sort, on keys with
    # many ties, zeros (ineligible) and the extreme values, in one batch whose members
    # settle after different numbers of passes; brackets over the whole range, with
    # groups of zeros (no lower bound), narrow ones at the top of the range, and one
    # key far above the rest.
    rng = np.random.default_rng(n)
    full_range = rng.integers(0, 2**32, n, dtype=np.uint64)
    outlier = np.full(n, 1000)
    outlier[n // 2] = 2**32 - 1
    rows = [
        full_range,
        rng.integers(0, 4, n) * (2**30 + 7),
        np.where(rng.random(n) < 0.5, 0, 2**32 - 1),
        np.zeros(n),
        np.full(n, 5),
        np.where(np.arange(n) % 2 == 0, 0, full_range),
        2**32 - 1 - rng.integers(0, 5, n),
        outlier,
    ]
    keys = np.stack(rows).astype(np.uint32)
    for k in sorted({1, max(1, n // 10), (n + 1) // 2, n}):
        kth, count = jax.jit(jax.vmap(lambda x, k=k: kernels._kth_largest(x, k)))(keys)
        got = list(zip(np.asarray(kth), np.asarray(count), strict=True))
        # Unbatched, the search runs as a batch of one.
        got[0] = jax.jit(lambda x, k=k: kernels._kth_largest(x, k))(keys[0])
        for row, (got_kth, got_count) in zip(keys, got, strict=True):
            want = np.sort(row)[::-1][k - 1]
            want_count = int(np.sum(row >= want)) if want > 0 else 0
            assert (int(got_kth), int(got_count)) == (int(want), want_count), (n, k, row[:8])


def test_bit_words_packs_flags_least_significant_bit_first():
    flags = np.zeros(64, bool)
    flags[[0, 1, 7, 8, 31, 32, 63]] = True
    got = np.asarray(jax.jit(kernels._bit_words)(jnp.asarray(flags)))
    np.testing.assert_array_equal(got, np.array([0x80000183, 0x80000001], np.uint32))
    # Against NumPy's bit packing, every byte pattern of four flags included, and a
    # last partial word of every length.
    rng = np.random.default_rng(5)
    patterns = np.unpackbits(np.arange(16, dtype=np.uint8), bitorder="little")
    patterns = patterns.reshape(16, 8)[:, :4].reshape(-1)
    for n in (1, 5, 31, 32, 33, 64, 100, 1000, 1087):
        flags = np.concatenate([patterns, rng.random(n) < 0.3])
        padded = np.pad(flags, (0, -flags.size % 32))
        want = np.packbits(padded, bitorder="little").view("<u4")
        got = np.asarray(jax.jit(kernels._bit_words)(jnp.asarray(flags)))
        np.testing.assert_array_equal(got, want, err_msg=str(n))
        # Unpacking gives the flags back.
        back = jax.jit(kernels._unpack, static_argnums=1)(jnp.asarray(got), flags.size)
        np.testing.assert_array_equal(np.asarray(back), flags, err_msg=str(n))


def test_deposit_places_bits_at_the_set_bits_of_the_mask():
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    mask = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32)
    mask[:100] = 0
    mask[100:200] = 0xFFFFFFFF
    mask[200:232] = np.uint32(1) << np.arange(32, dtype=np.uint32)
    mask[232:264] = np.uint32(0x80000000) >> np.arange(32, dtype=np.uint32)
    mask[264:800] &= rng.integers(0, 2**32, 536, dtype=np.uint64).astype(np.uint32)
    mask[800:1300] |= rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32)

    def deposit(x, m):
        out, j = 0, 0
        for i in range(32):
            if m >> i & 1:
                out |= (x >> j & 1) << i
                j += 1
        return out

    want = np.array([deposit(int(x), int(m)) for x, m in zip(bits, mask, strict=True)], np.uint32)
    got = np.asarray(jax.jit(kernels._deposit)(jnp.asarray(bits), jnp.asarray(mask)))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [7, 32, 100, 1000])
def test_random_tied_chooses_the_tied_clients_of_the_subset_ranks(n):
    """The tied client of rank r (r tied clients before it) is chosen iff Floyd's
    subset holds r: the per-word deposit against a plain loop over the clients."""
    rng = np.random.default_rng(n)
    batch, k = 16, max(1, n // 4)
    tied = rng.random((batch, n)) < rng.random((batch, 1))
    tied[0] = True
    tied[1] = False
    take = np.minimum(tied.sum(1), rng.integers(0, k + 1, batch)).astype(np.int32)
    keys = jax.random.split(jax.random.PRNGKey(n), batch)

    def chosen(t, size_take, key):
        return kernels._random_tied(t, lambda size: size_take, key, k)

    got = np.asarray(jax.jit(jax.vmap(chosen))(tied, take, keys))
    for b in range(batch):
        size = int(tied[b].sum())
        subset = jax.jit(kernels._random_subset, static_argnums=(2, 4))(
            jnp.int32(size), jnp.int32(take[b]), k, keys[b], n
        )
        ranks = np.unpackbits(np.asarray(subset).view(np.uint8), bitorder="little")
        assert ranks.sum() == take[b] and not ranks[size:].any()
        want = np.zeros(n, bool)
        rank = 0
        for i in range(n):
            if tied[b, i]:
                want[i] = ranks[rank] == 1
                rank += 1
        np.testing.assert_array_equal(got[b], want, err_msg=str(b))


def test_top_k_mask_equals_lax_top_k():
    # The bisection finds what XLA's TopK finds, ties to the lower index included.
    rng = np.random.default_rng(4)
    batch, n, k = 300, 40, 7
    scores = rng.integers(-3, 4, (batch, n)).astype(np.float32) * rng.choice([0.5, 1e-3, 1e30])
    scores[rng.random((batch, n)) < 0.05] = np.inf
    scores[:, 0] = -0.0
    mask = rng.random((batch, n)) < rng.random((batch, 1))

    def reference(s, m):
        values, index = jax.lax.top_k(jnp.where(m, s, -jnp.inf), k)
        return jnp.zeros(s.shape, bool).at[index].set(values > -jnp.inf)

    got = jax.vmap(lambda s, m: kernels.top_k_mask(s, m, k))(scores, mask)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.vmap(reference)(scores, mask)))


def test_uniform_subset_draws_every_subset_equally_often():
    # Floyd's algorithm: 3 of the 5 eligible clients, each of the 10 subsets with
    # probability 1/10 (4.5 sigma over 10 comparisons).
    mask = jnp.array([True, False, True, True, True, False, True])
    draws = 20000
    keys = jax.random.split(jax.random.PRNGKey(7), draws)
    sel = np.asarray(jax.jit(jax.vmap(lambda key: kernels.uniform_subset(mask, 3, key)))(keys))
    assert np.all(sel.sum(1) == 3) and not np.any(sel[:, [1, 5]])
    subsets = [c for c in itertools.combinations(range(7), 3) if not {1, 5} & set(c)]
    freq = np.array([np.mean(np.all(sel[:, list(c)], axis=1)) for c in subsets])
    np.testing.assert_allclose(freq, 0.1, atol=4.5 * np.sqrt(0.1 * 0.9 / draws))


@pytest.mark.parametrize("ties", ["none", "some", "all"])
def test_batched_kernels_equal_per_trial_calls(ties):
    """Under vmap the tie-break runs only in batches where some trial needs it; every
    trial's selection must still equal the unbatched call's, bit for bit."""
    rng = np.random.default_rng({"none": 0, "some": 1, "all": 2}[ties])
    batch, n, k = 8, 12, 4
    scores = rng.permutation(np.arange(batch * n)).reshape(batch, n).astype(np.float32)
    mask = rng.random((batch, n)) < 0.8
    mask[0, :] = False
    mask[1, 2:] = False  # fewer eligible than k: nothing to break
    if ties != "none":
        tied_rows = range(2, batch) if ties == "all" else [5]
        for i in tied_rows:
            scores[i] = rng.integers(0, 3, n)
            mask[i] = True
    keys = jax.random.split(jax.random.PRNGKey(3), batch)
    calls = {
        "masked_top_k": (
            lambda s, m, key: kernels.masked_top_k(s, m, k, key),
            (scores, mask, keys),
        ),
        "top_k_mask": (lambda s, m: kernels.top_k_mask(s, m, k), (scores, mask)),
        "uniform_subset": (
            lambda m, key: kernels.uniform_subset(m, k, key),
            (mask if ties != "none" else mask & (np.arange(n) < k), keys),
        ),
        "grouped_masked_top_k": (
            lambda s, m, key: kernels.grouped_masked_top_k(s, m, 2, key, 3),
            (scores, mask, keys),
        ),
    }
    for name, (fn, args) in calls.items():
        batched = np.asarray(jax.jit(jax.vmap(fn))(*args))
        looped = np.stack([np.asarray(jax.jit(fn)(*(a[i] for a in args))) for i in range(batch)])
        np.testing.assert_array_equal(batched, looped, err_msg=name)
        # The selections are the right size, whichever branch ran.
        if name != "grouped_masked_top_k":
            eligible = args[1] if name != "uniform_subset" else args[0]
            np.testing.assert_array_equal(
                batched.sum(1), np.minimum(k, np.asarray(eligible).sum(1)), err_msg=name
            )
