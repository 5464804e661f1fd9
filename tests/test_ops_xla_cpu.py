"""The XLA:CPU backend of the selection ops: its search, bit packing, deposit and Floyd's
subsets against plain loops, and its batching rules against per-trial calls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import ops
from fedjax_sel.ops import _xla_cpu


@pytest.mark.parametrize("traced", [False, True], ids=["static_k", "traced_k"])
@pytest.mark.parametrize("n", [1, 3, 8, 100, 997, 1000, 1023, 1024, 1031, 1500])
def test_kth_largest_matches_sorting(n, traced):
    # Counts from packed int32 sums below 1,024 keys (summed in 1, 3, 8, 5, 1, 8 and 3
    # rows here), from there on from packed sums along blocks of 512, 1,000 (and 31 keys
    # after them) and 750 keys in this batch of 8 and from an int8 product in the batch
    # of 64 it is repeated into: all against a sort, on keys with
    # many ties, zeros (ineligible) and the extreme values, in one batch whose members
    # settle after different numbers of passes; brackets over the whole range, with
    # groups of zeros (no lower bound), narrow ones at the top of the range, and one
    # key far above the rest. A traced k brackets from the least positive key instead.
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
    assert _xla_cpu._counter(len(keys), n) is (
        _xla_cpu._blocked_counts if n >= 1024 else _xla_cpu._packed_counts
    )
    assert _xla_cpu._counter(8 * len(keys), n) is (
        _xla_cpu._product_counts if n >= 1024 else _xla_cpu._packed_counts
    )
    # A traced k is an argument: one program of each batch for every k.
    search = lambda x, k: _xla_cpu._kth_largest(x, k)
    traced_batch = jax.jit(jax.vmap(search, in_axes=(0, None)))
    traced_single = jax.jit(search)
    stopped_early = 0
    for k in sorted({1, max(1, n // 10), (n + 1) // 2, n}):
        if traced:
            batch = lambda x, k=k: traced_batch(x, jnp.int32(k))
            single = traced_single(keys[0], jnp.int32(k))
        else:
            batch = jax.jit(jax.vmap(lambda x, k=k: _xla_cpu._kth_largest(x, k)))
            single = jax.jit(lambda x, k=k: _xla_cpu._kth_largest(x, k))(keys[0])
        kth, count = batch(keys)
        got = list(zip(np.asarray(kth), np.asarray(count), strict=True))
        # Unbatched, the search runs as a batch of one; repeated into a batch of 64 from
        # 1,024 keys on, as an int8 product (below, the packed sums of the batch of 8).
        got[0] = single
        repeated = np.concatenate([keys] * 8) if n >= 1024 else keys[:0]
        if n >= 1024:
            kth64, count64 = batch(repeated)
            got += list(zip(np.asarray(kth64), np.asarray(count64), strict=True))
        for row, (got_kth, got_count) in zip(np.concatenate([keys, repeated]), got, strict=True):
            ordered = np.sort(row)[::-1]
            want = ordered[k - 1]
            want_count = int(np.sum(row >= want)) if want > 0 else 0
            if want_count == k:
                # Exactly k keys at or above the k-th: any threshold above the next key
                # down selects them, and the search may stop at one.
                below = ordered[k] if k < n else 0
                assert below < int(got_kth) <= want and int(got_count) == k, (n, k, row[:8])
                stopped_early += int(got_kth) != want
            else:
                assert (int(got_kth), int(got_count)) == (int(want), want_count), (n, k, row[:8])
    # On the keys spread over the whole range the search stops before reaching a key.
    assert stopped_early > 0 or n < 100


def test_bit_words_packs_flags_least_significant_bit_first():
    flags = np.zeros(64, bool)
    flags[[0, 1, 7, 8, 31, 32, 63]] = True
    got = np.asarray(jax.jit(_xla_cpu._bit_words)(jnp.asarray(flags)))
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
        got = np.asarray(jax.jit(_xla_cpu._bit_words)(jnp.asarray(flags)))
        np.testing.assert_array_equal(got, want, err_msg=str(n))
        # Unpacking gives the flags back.
        back = jax.jit(_xla_cpu._unpack, static_argnums=1)(jnp.asarray(got), flags.size)
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
    got = np.asarray(jax.jit(_xla_cpu._deposit)(jnp.asarray(bits), jnp.asarray(mask)))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k", [1, 15, 16, 17, 100])
def test_random_subsets_equal_floyds_plain_loop(k):
    """The batched subsets are those of a plain loop of Floyd's steps over a Python set,
    from the same random words: in one batch whose members take 0, 1, all k or every
    rank of their size, with ranks t drawn again and landing on an earlier step's j."""
    n = 4 * k + 40
    rng = np.random.default_rng(k)
    size = rng.integers(k, n + 1, 12).astype(np.int32)
    size[:4] = [k, k, 1, k + 1]
    take = np.minimum(size, rng.integers(0, k + 1, 12)).astype(np.int32)
    take[:4] = [k, 0, min(k, 1), k]
    keys = jax.random.split(jax.random.PRNGKey(k), 12)
    got = jax.jit(_xla_cpu._random_subsets, static_argnums=(3, 4))(
        jnp.asarray(size), jnp.asarray(take), keys, k, n
    )
    got = np.unpackbits(np.asarray(got).view(np.uint8), axis=1, bitorder="little")
    for b in range(12):
        words = np.asarray(jax.random.bits(keys[b], (k,)))
        chosen = set()
        for i in range(take[b]):
            j = int(size[b] - take[b] + i)
            t = int(words[i]) % (j + 1)
            chosen.add(j if t in chosen else t)
        want = np.zeros(got.shape[1], np.uint8)
        want[sorted(chosen)] = 1
        np.testing.assert_array_equal(got[b], want, err_msg=str(b))


def test_random_subsets_take_every_rank_when_asked_for_more():
    """A `take` above `size` gives the ranks 0, ..., size - 1, and nothing above them
    (sizes 0 to 40, takes up to k = 48)."""
    k, n = 48, 64
    size = np.arange(41, dtype=np.int32)
    take = np.minimum(size + 1 + size % 7, k).astype(np.int32)
    keys = jax.random.split(jax.random.PRNGKey(5), size.shape[0])
    got = jax.jit(_xla_cpu._random_subsets, static_argnums=(3, 4))(
        jnp.asarray(size), jnp.asarray(take), keys, k, n
    )
    got = np.unpackbits(np.asarray(got).view(np.uint8), axis=1, bitorder="little")
    want = np.arange(got.shape[1])[None, :] < size[:, None]
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
        return _xla_cpu._random_tied(t, lambda size: size_take, key, k)

    got = np.asarray(jax.jit(jax.vmap(chosen))(tied, take, keys))
    for b in range(batch):
        size = int(tied[b].sum())
        subset = jax.jit(_xla_cpu._random_subset, static_argnums=(2, 4))(
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


@pytest.mark.parametrize("ties", ["none", "some", "all"])
def test_batched_backend_equals_per_trial_calls(ties):
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
            lambda s, m, key: _xla_cpu.masked_top_k(s, m, k, key),
            (scores, mask, keys),
        ),
        "top_k_mask": (lambda s, m: _xla_cpu.top_k_mask(s, m, k), (scores, mask)),
        "uniform_subset": (
            lambda m, key: _xla_cpu.uniform_subset(m, k, key),
            (mask if ties != "none" else mask & (np.arange(n) < k), keys),
        ),
        "grouped_masked_top_k": (
            lambda s, m, key: ops.grouped_masked_top_k(s, m, 2, key, 3),
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


def _interval(low, high, at_or_above, above):
    return _xla_cpu._Interval(
        jnp.uint32(low), jnp.uint32(high), jnp.int32(at_or_above), jnp.int32(above)
    )


def test_snap_moves_the_interval_onto_its_least_and_largest_keys():
    # Keys 0 (ineligible), 3, 9, 9, 20, 41 and 50, in an order that is not sorted; the
    # interval [5, 45] holds 9, 9, 20 and 41: 5 keys at or above 5, 1 above 45.
    keys = jnp.array([20, 0, 9, 50, 3, 41, 9], jnp.uint32)

    def snap(low, high, at_or_above, above):
        state = _interval(low, high, at_or_above, above)
        return tuple(int(x) for x in jax.jit(_xla_cpu._snap)(keys, state))

    assert snap(5, 45, 5, 1) == (9, 41, 5, 1)
    assert snap(9, 9, 2, 0) == (9, 9, 2, 0)
    # An interval without keys (counts equal) is left as it is.
    assert snap(21, 40, 2, 2) == (21, 40, 2, 2)
    # Over lengths of row with largest divisors up to 8 of 1, 7, 8, 1, 8 and 3, against
    # NumPy.
    rng = np.random.default_rng(3)
    for n in (1, 7, 16, 97, 1000, 1023):
        row = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        low, high = np.sort(rng.integers(0, 2**32, 2, dtype=np.uint64)).astype(np.uint32)
        inside = row[(row >= low) & (row <= high)]
        at_or_above, above = int(np.sum(row >= low)), int(np.sum(row > high))
        state = _interval(low, high, at_or_above, above)
        got = tuple(int(x) for x in jax.jit(_xla_cpu._snap)(jnp.asarray(row), state))
        want = (inside.min(), inside.max()) if inside.size else (low, high)
        assert got == (int(want[0]), int(want[1]), at_or_above, above), n


def _large_rows(rng, n):
    """Score rows of n clients for the sampled first pass: continuous, tied, sorted
    either way, heavy-tailed, and one whose sampled places (every n // 4,096-th client)
    hold the lowest scores, so that the sample points far below the k-th."""
    stride = n // _xla_cpu._SAMPLE_SIZE
    aligned = np.where(np.arange(n) % stride == 0, -1.0, rng.random(n))
    uniform = rng.random(n)
    return np.stack(
        [
            uniform,
            np.round(rng.random(n) * 20) / 20,
            np.sort(uniform),
            np.sort(uniform)[::-1],
            rng.lognormal(0.0, 3.0, n),
            aligned,
        ]
    ).astype(np.float32)


def test_large_n_selections_equal_the_definitions_bit_for_bit():
    # From 2^16 clients on, the first pass thresholds at order statistics of a sample of
    # the keys: the search is exact whatever its thresholds, so the top-k masks (a
    # traced k and a static one) and the k-th keys equal the definitions' on every row,
    # including the one whose sample misleads, with all, a few or no clients eligible
    # and k from 0 (a traced k) to N.
    from fedjax_sel.ops import order, selection

    n = 70_001
    assert n >= _xla_cpu._SAMPLE_MIN_KEYS
    rng = np.random.default_rng(70)
    scores = jnp.asarray(_large_rows(rng, n))
    batch = scores.shape[0]
    top_k = jax.jit(jax.vmap(_xla_cpu.top_k_mask))
    definition = jax.jit(jax.vmap(selection.portable_top_k_mask))
    kth = jax.jit(jax.vmap(lambda s, m, k: _xla_cpu.kth_largest_key(order.order_key(s, m), k)))
    kth_definition = jax.jit(
        jax.vmap(lambda s, m, k: order.kth_largest_key(order.order_key(s, m), k))
    )
    for share in (1.0, 0.01, 0.0):
        mask = jnp.asarray(rng.random((batch, n)) < share)
        for k in (0, 1, 130, 7_000, n):
            ks = jnp.full((batch,), k, jnp.int32)
            want = definition(scores, mask, ks)
            np.testing.assert_array_equal(top_k(scores, mask, ks), want, err_msg=f"{share} {k}")
            if k > 0:
                static = jax.jit(jax.vmap(lambda s, m, k=k: _xla_cpu.top_k_mask(s, m, k)))
                np.testing.assert_array_equal(static(scores, mask), want, err_msg=f"{share} {k}")
            np.testing.assert_array_equal(
                kth(scores, mask, ks), kth_definition(scores, mask, ks), err_msg=f"{share} {k}"
            )


@pytest.mark.parametrize("k", [1, 130, 10_000, 200_000])
def test_first_pass_brackets_the_kth_key_closely_by_a_sample(k):
    # On 2^18 uniform keys the first pass of a traced k leaves an interval that holds the
    # k-th key and about 2 (3 sqrt(r) + 1) N / S keys (r = k S / N, S = 4,096 sampled
    # keys), its counts exact; the thirds of the bracket would leave about N / 3.
    n, size = 2**18, _xla_cpu._SAMPLE_SIZE
    rng = np.random.default_rng(k)
    keys = rng.integers(1, 2**32, n, dtype=np.uint64).astype(np.uint32)
    counts = _xla_cpu._counter(1, n)
    first = jax.jit(lambda x: _xla_cpu._first_pass_traced(x, jnp.int32(k), counts))
    low, high, at_or_above, above = (int(v) for v in first(jnp.asarray(keys)))
    kth = int(np.sort(keys)[::-1][k - 1])
    assert low <= kth <= high
    assert at_or_above == np.sum(keys >= low) and above == np.sum(keys > high)
    r = k * size / n
    expected = 2 * (3 * np.sqrt(r) + 1) * n / size
    # The interval's keys: a sum of the sample's spacings, within a factor of 2 here.
    assert at_or_above - above <= 2 * expected, (at_or_above - above, expected)


@pytest.mark.parametrize("n", [1, 13, 20, _xla_cpu._PAIRWISE_MAX_KEYS])
def test_few_keys_compared_pairwise_select_as_the_search_does(n, monkeypatch):
    # Up to 32 keys the k-th largest comes from comparing every pair, not from the search:
    # the selections (deterministic, and with random ties under the same tie-break key),
    # the k-th keys and the counts at or above them are the search's bit for bit, with
    # ties across the k-th place, few or no eligible clients, and k from 0 (traced) to N.
    # The search may stop at a threshold that is not a key (above the next key down, the
    # same keys at or above it); the pairwise comparison returns the k-th key itself.
    from fedjax_sel.ops import order

    rng = np.random.default_rng(n)
    batch = 24
    scores = rng.integers(0, 4, (batch, n)).astype(np.float32)
    scores[::3] = rng.random((8, n))
    scores = jnp.asarray(scores)
    mask = jnp.asarray(rng.random((batch, n)) < np.linspace(0.0, 1.0, batch)[:, None])
    keys = order.order_key(scores, mask)
    ties = jax.random.split(jax.random.key(n), batch)

    def outputs():
        out = {}
        for k in sorted({1, (n + 1) // 2, n}):
            random_ties = jax.vmap(lambda s, m, r, k=k: _xla_cpu.masked_top_k(s, m, k, r))
            out[f"masked_top_k {k}"] = jax.jit(random_ties)(scores, mask, ties)
            lowest = jax.vmap(lambda s, m, k=k: _xla_cpu.top_k_mask(s, m, k))
            out[f"top_k_mask {k}"] = jax.jit(lowest)(scores, mask)
            kth, count = jax.jit(jax.vmap(lambda x, k=k: _xla_cpu._kth_largest(x, k)))(keys)
            out[f"at or above {k}"] = (keys >= kth[:, None]) & (kth[:, None] > 0)
            out[f"count {k}"] = count
        # A traced k is an argument: one program each for every k.
        traced_top_k = jax.jit(jax.vmap(_xla_cpu.top_k_mask))
        traced_kth = jax.jit(jax.vmap(_xla_cpu.kth_largest_key))
        for k in range(n + 1):
            ks = jnp.full((batch,), k, jnp.int32)
            out[f"traced top_k_mask {k}"] = traced_top_k(scores, mask, ks)
            out[f"kth_largest_key {k}"] = traced_kth(keys, ks)
        return {name: np.asarray(x) for name, x in out.items()}

    pairwise = outputs()
    monkeypatch.setattr(_xla_cpu, "_PAIRWISE_MAX_KEYS", 0)
    searched = outputs()
    assert pairwise.keys() == searched.keys()
    for name, want in searched.items():
        np.testing.assert_array_equal(pairwise[name], want, err_msg=name)
    # The pairwise path returns the k-th largest key: checked against a sort.
    k = (n + 1) // 2
    kth, count = jax.vmap(lambda x: _xla_cpu._kth_largest_pairwise(x, k))(keys)
    rows = zip(np.asarray(keys), np.asarray(kth), np.asarray(count), strict=True)
    for row, got_kth, got_count in rows:
        want = np.sort(row)[::-1][k - 1]
        want_count = int(np.sum(row >= want)) if want > 0 else 0
        assert (int(got_kth), int(got_count)) == (int(want), want_count)
