"""The selection ops: each definition against brute force, the CPU backend against the
definition (exactly where the random streams allow, in distribution where they do not),
static against traced k, and the budgeted forms against a plain loop."""

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_sel import ops
from fedjax_sel.ops import _xla_cpu, order, selection


class Impl(NamedTuple):
    masked_top_k: object
    uniform_subset: object
    top_k_mask: object
    gumbel_top_k: object
    count_true: object


def _cpu_gumbel_top_k(logits, mask, k, key):
    noise_key, tie_key = jax.random.split(key)
    perturbed = logits + jax.random.gumbel(noise_key, logits.shape, logits.dtype)
    return _xla_cpu.masked_top_k(perturbed, mask, k, tie_key)


# Every implementation of the selection ops, called directly (on CPU the public ops are the
# XLA:CPU ones, tests/test_ops_dispatch.py).
IMPLS = {
    "definition": Impl(
        selection.portable_masked_top_k,
        selection.portable_uniform_subset,
        selection.portable_top_k_mask,
        selection.portable_gumbel_top_k,
        selection.portable_count_true,
    ),
    "xla_cpu": Impl(
        _xla_cpu.masked_top_k,
        _xla_cpu.uniform_subset,
        _xla_cpu.top_k_mask,
        _cpu_gumbel_top_k,
        _xla_cpu.count_true,
    ),
}
impls = pytest.mark.parametrize("impl", list(IMPLS.values()), ids=list(IMPLS))


def _batched(fn, *args):
    return np.asarray(jax.jit(jax.vmap(fn))(*args))


def _is_top_k(scores, mask, k, selected):
    """A selection is a correct top-k iff it has min(k, |mask|) eligible clients and no
    unselected eligible client scores strictly above a selected one."""
    if selected.sum() != min(k, mask.sum()) or np.any(selected & ~mask):
        return False
    rest = scores[mask & ~selected]
    return selected.sum() == 0 or rest.size == 0 or rest.max() <= scores[selected].min()


def _subset_counts(selected, n, k):
    """The number of draws (rows of `selected`, bool[D, n]) of each k-subset of range(n)."""
    assert np.all(selected.sum(1) == k)
    index = {c: i for i, c in enumerate(itertools.combinations(range(n), k))}
    rows = [index[tuple(np.flatnonzero(row))] for row in selected]
    return np.bincount(rows, minlength=len(index))


def _uniform_enough(counts):
    """Chi-square test of equal subset frequencies at p = 1e-6 (fixed keys: deterministic)."""
    expected = counts.sum() / counts.size
    statistic = np.sum((counts - expected) ** 2 / expected)
    return statistic < stats.chi2.ppf(1 - 1e-6, counts.size - 1)


@impls
def test_masked_top_k_matches_brute_force(impl):
    # Few distinct values so that ties are frequent, +-inf, and some empty masks.
    rng = np.random.default_rng(0)
    batch, n = 500, 9
    scores = rng.integers(0, 4, (batch, n)).astype(np.float32)
    scores[rng.random((batch, n)) < 0.1] = np.inf
    scores[rng.random((batch, n)) < 0.1] = -np.inf
    mask = rng.random((batch, n)) < rng.random((batch, 1))
    keys = jax.random.split(jax.random.PRNGKey(1), batch)
    for k in (1, 3, 9):
        sel = _batched(lambda s, m, r, k=k: impl.masked_top_k(s, m, k, r), scores, mask, keys)
        assert all(_is_top_k(scores[i], mask[i], k, sel[i]) for i in range(batch)), k


@impls
def test_masked_top_k_orders_floats_totally(impl):
    # -0.0 below +0.0, NaN above +inf, -inf eligible.
    scores = jnp.array([0.0, -0.0, jnp.nan, jnp.inf, -jnp.inf, 1.0])
    mask = jnp.ones(6, bool)
    key = jax.random.PRNGKey(0)
    expected = {1: [2], 2: [2, 3], 4: [0, 2, 3, 5], 5: [0, 1, 2, 3, 5], 6: list(range(6))}
    for k, want in expected.items():
        got = np.flatnonzero(jax.jit(impl.masked_top_k, static_argnums=2)(scores, mask, k, key))
        np.testing.assert_array_equal(got, want, err_msg=str(k))


@impls
def test_a_nan_of_either_sign_ranks_above_inf(impl):
    # XLA's 0/0 and inf - inf on x86 are the NaN 0xFFC00000, sign bit set: it ranks
    # first, as jnp.nan does (it ranked below -inf), and the two tie.
    negative_nan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    nan = jax.jit(lambda x: x / x)(jnp.float32(0.0))
    assert np.isnan(nan) and np.signbit(nan)
    scores = jnp.array([0.0, negative_nan, -jnp.inf, jnp.inf, 1.0])
    mask, key = jnp.ones(5, bool), jax.random.PRNGKey(0)
    top = jax.jit(impl.masked_top_k, static_argnums=2)
    np.testing.assert_array_equal(np.flatnonzero(top(scores, mask, 1, key)), [1])
    both = scores.at[0].set(jnp.nan)
    picks = {int(np.flatnonzero(top(both, mask, 1, jax.random.PRNGKey(s)))[0]) for s in range(40)}
    assert picks == {0, 1}


@impls
def test_masked_top_k_breaks_ties_uniformly(impl):
    # Six tied clients, two slots: each of the 15 pairs equally often.
    draws = 4500
    keys = jax.random.split(jax.random.PRNGKey(2), draws)
    scores, mask = jnp.ones(6), jnp.ones(6, bool)
    sel = _batched(lambda r: impl.masked_top_k(scores, mask, 2, r), keys)
    assert _uniform_enough(_subset_counts(sel, 6, 2))


@impls
def test_masked_top_k_breaks_ties_at_the_kth_place_uniformly(impl):
    # Client 0 is strictly best and client 5 worst; clients 1..4 tie for the 2 remaining
    # slots of k = 3; client 2 is ineligible.
    scores = jnp.array([5.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    mask = jnp.array([True, True, False, True, True, True])
    draws = 3000
    keys = jax.random.split(jax.random.PRNGKey(0), draws)
    sel = _batched(lambda r: impl.masked_top_k(scores, mask, 3, r), keys)
    assert sel[:, 0].all() and not sel[:, [2, 5]].any()
    assert _uniform_enough(_subset_counts(sel[:, [1, 3, 4]], 3, 2))


@impls
def test_uniform_subset_draws_every_subset_equally_often(impl):
    mask = jnp.array([True, False, True, True, True, False, True])
    draws = 5000
    keys = jax.random.split(jax.random.PRNGKey(7), draws)
    sel = _batched(lambda r: impl.uniform_subset(mask, 3, r), keys)
    assert not np.any(sel[:, [1, 5]])
    assert _uniform_enough(_subset_counts(sel[:, np.asarray(mask)], 5, 3))


@impls
def test_uniform_subset_fewer_eligible_than_k_takes_all(impl):
    mask = jnp.array([False, True, False, True])
    np.testing.assert_array_equal(impl.uniform_subset(mask, 3, jax.random.PRNGKey(0)), mask)


@impls
def test_gumbel_top_k_samples_without_replacement(impl):
    # k = 1 follows softmax(logits); with k = 2 the pair {0, 1} follows Plackett-Luce:
    # P({0, 1}) = w0 w1 / (1 - w0) + w1 w0 / (1 - w1).
    w = np.array([0.5, 0.3, 0.15, 0.05])
    draws = 10000
    keys = jax.random.split(jax.random.PRNGKey(7), draws)
    mask = jnp.ones(4, bool)
    first = _batched(lambda r: impl.gumbel_top_k(jnp.log(w), mask, 1, r), keys)
    tol = 4.5 * np.sqrt(w * (1 - w) / draws)
    np.testing.assert_array_less(np.abs(first.mean(0) - w), tol)
    pair = _batched(lambda r: impl.gumbel_top_k(jnp.log(w), mask, 2, r), keys)
    p01 = w[0] * w[1] / (1 - w[0]) + w[1] * w[0] / (1 - w[1])
    assert abs(np.mean(pair[:, 0] & pair[:, 1]) - p01) < 4.5 * np.sqrt(p01 * (1 - p01) / draws)


@impls
@pytest.mark.parametrize("k", [1, 2, 4])
def test_top_k_mask_is_deterministic_lowest_index_on_ties(impl, k):
    scores = jnp.array([1.0, 3.0, 3.0, 2.0, 3.0, -jnp.inf])
    mask = jnp.array([True, True, True, True, False, True])
    expected = {1: [1], 2: [1, 2], 4: [0, 1, 2, 3]}[k]
    np.testing.assert_array_equal(np.flatnonzero(impl.top_k_mask(scores, mask, k)), expected)


def _tied_scores(rng, batch, n):
    scores = rng.integers(-3, 4, (batch, n)).astype(np.float32) * rng.choice([0.5, 1e-3, 1e30])
    scores[rng.random((batch, n)) < 0.05] = np.inf
    scores[rng.random((batch, n)) < 0.05] = -np.inf
    scores[:, 0] = -0.0
    return scores


def test_top_k_mask_backends_are_equal_and_equal_lax_top_k():
    rng = np.random.default_rng(4)
    batch, n, k = 300, 40, 7
    scores = _tied_scores(rng, batch, n)
    mask = rng.random((batch, n)) < rng.random((batch, 1))

    def lax_top_k(s, m):
        values, index = jax.lax.top_k(jnp.where(m, s, -jnp.inf), k)
        return jnp.zeros(s.shape, bool).at[index].set(values > -jnp.inf)

    want = _batched(lax_top_k, scores, mask)
    for name, impl in IMPLS.items():
        got = _batched(lambda s, m, impl=impl: impl.top_k_mask(s, m, k), scores, mask)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_count_true_backends_are_equal():
    rng = np.random.default_rng(5)
    for n in (1, 7, 1000, 4097):
        flags = jnp.asarray(rng.random((3, n)) < rng.random((3, 1)))
        want = np.asarray(flags).sum(1)
        for name, impl in IMPLS.items():
            got = _batched(impl.count_true, flags)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {n}")


@pytest.mark.parametrize(
    "true_indices",
    [selection.portable_true_indices, _xla_cpu.true_indices],
    ids=["definition", "xla_cpu"],
)
def test_true_indices_are_the_places_of_the_true_entries(true_indices):
    # Against a plain loop: the first `size` places in increasing order, then N; a
    # partial last word (33 and 1025 entries), empty, sparse, dense and full rows, sizes
    # below and above the number of True entries.
    rng = np.random.default_rng(6)
    for n in (33, 1025):
        flags = rng.random((8, n)) < np.array([0.0, 0.0, 0.02, 0.02, 0.3, 0.3, 1.0, 1.0])[:, None]
        for size in (1, n // 10, n + 3):
            got = _batched(lambda f, size=size: true_indices(f, size), jnp.asarray(flags))
            for row, places in zip(flags, got, strict=True):
                want = list(np.flatnonzero(row)[:size])
                np.testing.assert_array_equal(places, want + [n] * (size - len(want)))


@pytest.mark.parametrize(
    "nth_true", [selection.portable_nth_true, _xla_cpu.nth_true], ids=["definition", "xla_cpu"]
)
def test_nth_true_is_the_place_of_each_rank(nth_true):
    # Against a plain loop: every rank below the number of True entries, and two at or
    # above it (N); partial last words, empty, sparse, dense and full rows.
    rng = np.random.default_rng(7)
    for n in (1, 33, 1025):
        flags = rng.random((6, n)) < np.array([0.0, 0.02, 0.3, 0.3, 0.9, 1.0])[:, None]
        ranks = np.arange(n + 2, dtype=np.int32)
        got = jax.jit(jax.vmap(jax.vmap(nth_true, (None, 0)), (0, None)))(flags, ranks)
        for row, places in zip(flags, np.asarray(got), strict=True):
            want = np.flatnonzero(row)
            np.testing.assert_array_equal(places, [*want, *[n] * (n + 2 - want.size)])


def test_random_true_equals_its_definition_and_is_uniform_over_the_true_entries():
    # The CPU backend counts the True entries from its packed words, the definition in a
    # pass of its own: the same rank from the same key, so the same place, bit for bit,
    # on empty, sparse, dense and full rows with partial last words (N for an empty
    # row). Over 4,000 keys each True entry of a row of 1,025 is drawn about equally
    # often: a chi-square test at the 0.1% level (df = 20 ties - 1).
    rng = np.random.default_rng(8)
    keys = jax.random.split(jax.random.key(8), 64)
    both = [selection.portable_random_true, _xla_cpu.random_true]
    for n in (1, 33, 1025, 15_504):
        flags = jnp.asarray(rng.random((64, n)) < np.resize([0.0, 0.001, 0.3, 1.0], 64)[:, None])
        got = [np.asarray(jax.jit(jax.vmap(f))(flags, keys)) for f in both]
        np.testing.assert_array_equal(got[1], got[0], err_msg=str(n))
        for row, place in zip(np.asarray(flags), got[1], strict=True):
            assert row[place] if row.any() else place == n
    row = np.zeros(1025, bool)
    row[rng.choice(1025, 20, replace=False)] = True
    draws = jax.jit(jax.vmap(_xla_cpu.random_true, (None, 0)))(
        jnp.asarray(row), jax.random.split(jax.random.key(9), 4000)
    )
    counts = np.bincount(np.searchsorted(np.flatnonzero(row), np.asarray(draws)), minlength=20)
    assert counts.sum() == 4000 and counts.size == 20
    assert stats.chisquare(counts).pvalue > 1e-3


def _untied_batch(rng, batch, n, k):
    """Scores and masks on which no tie crosses the k-th place: distinct scores, ties
    only among the clients surely selected, and rows with fewer than k eligible."""
    scores = np.stack([rng.permutation(n) for _ in range(batch)]).astype(np.float32)
    top = scores[: batch // 2]
    scores[: batch // 2] = np.where(top > n - k, n, top)  # the top k - 1 tied
    mask = rng.random((batch, n)) < 0.9
    mask[batch // 2 :: 4] = False
    mask[batch // 2 :: 4, : k - 1] = True
    mask[: batch // 2] = True
    return scores, mask


def test_masked_top_k_backends_are_equal_where_no_tie_crosses_the_kth_place():
    rng = np.random.default_rng(6)
    batch, n, k = 64, 50, 6
    scores, mask = _untied_batch(rng, batch, n, k)
    keys = jax.random.split(jax.random.PRNGKey(6), batch)
    results = {
        name: _batched(lambda s, m, r, impl=impl: impl.masked_top_k(s, m, k, r), scores, mask, keys)
        for name, impl in IMPLS.items()
    }
    np.testing.assert_array_equal(results["xla_cpu"], results["definition"])
    # Fewer eligible than k: every eligible client, whichever backend; so for a subset.
    few = mask & (np.arange(n) < k)
    subsets = {
        name: _batched(lambda m, r, impl=impl: impl.uniform_subset(m, k, r), few, keys)
        for name, impl in IMPLS.items()
    }
    np.testing.assert_array_equal(subsets["xla_cpu"], few)
    np.testing.assert_array_equal(subsets["definition"], few)


def _traced(fn):
    """`fn` with its cohort size an argument of the compiled function, so traced."""
    return jax.jit(jax.vmap(fn, in_axes=(0, 0, None, 0)))


@pytest.mark.parametrize("k", [0, 1, 5, 12])
def test_traced_k_equals_the_definition_exactly_ties_included(k):
    rng = np.random.default_rng(k)
    batch, n = 100, 12
    scores = _tied_scores(rng, batch, n)
    mask = rng.random((batch, n)) < rng.random((batch, 1))
    keys = jax.random.split(jax.random.PRNGKey(k), batch)
    traced = _traced(ops.masked_top_k)(scores, mask, jnp.int32(k), keys)
    assert all(_is_top_k(scores[i], mask[i], k, np.asarray(traced[i])) for i in range(batch))
    subset = _traced(lambda s, m, kk, r: ops.uniform_subset(m, kk, r))(scores, mask, k, keys)
    np.testing.assert_array_equal(np.asarray(subset).sum(1), np.minimum(k, mask.sum(1)))
    det = _traced(lambda s, m, kk, r: ops.top_k_mask(s, m, kk))(scores, mask, k, keys)
    if k == 0:
        assert not np.any(traced) and not np.any(subset) and not np.any(det)
        return
    # The static definition draws the same permutation: the same clients, ties included.
    static = _batched(
        lambda s, m, r: selection.portable_masked_top_k(s, m, k, r), scores, mask, keys
    )
    np.testing.assert_array_equal(np.asarray(traced), static)
    np.testing.assert_array_equal(
        np.asarray(det), _batched(lambda s, m: ops.top_k_mask(s, m, k), scores, mask)
    )


def test_traced_k_equals_static_k_on_tie_free_inputs():
    # On CPU the static k runs the sort-free backend: equal where no tie crosses k.
    rng = np.random.default_rng(8)
    batch, n, k = 64, 50, 6
    scores, mask = _untied_batch(rng, batch, n, k)
    keys = jax.random.split(jax.random.PRNGKey(8), batch)
    static = _batched(lambda s, m, r: ops.masked_top_k(s, m, k, r), scores, mask, keys)
    traced = _traced(ops.masked_top_k)(scores, mask, jnp.int32(k), keys)
    np.testing.assert_array_equal(np.asarray(traced), static)
    # A different k per trial.
    per_trial = jnp.asarray(rng.integers(0, n + 1, batch), jnp.int32)
    sel = jax.jit(jax.vmap(ops.masked_top_k))(scores, mask, per_trial, keys)
    np.testing.assert_array_equal(
        np.asarray(sel).sum(1), np.minimum(per_trial, mask.sum(1)), err_msg="per-trial k"
    )


def test_traced_k_breaks_ties_uniformly():
    draws = 4500
    keys = jax.random.split(jax.random.PRNGKey(9), draws)
    fn = jax.jit(jax.vmap(lambda r, k: ops.masked_top_k(jnp.ones(6), jnp.ones(6, bool), k, r)))
    sel = np.asarray(fn(keys, jnp.full(draws, 2, jnp.int32)))
    assert _uniform_enough(_subset_counts(sel, 6, 2))


def test_ops_run_eagerly_jitted_and_vmapped_alike():
    rng = np.random.default_rng(10)
    scores = jnp.asarray(rng.integers(0, 3, (4, 20)).astype(np.float32))
    mask = jnp.asarray(rng.random((4, 20)) < 0.8)
    keys = jax.random.split(jax.random.PRNGKey(10), 4)
    calls = {
        "masked_top_k": lambda s, m, r: ops.masked_top_k(s, m, 5, r),
        "uniform_subset": lambda s, m, r: ops.uniform_subset(m, 5, r),
        "top_k_mask": lambda s, m, r: ops.top_k_mask(s, m, 5),
        "gumbel_top_k": lambda s, m, r: ops.gumbel_top_k(s, m, 5, r),
        "budgeted_top_k": lambda s, m, r: ops.budgeted_top_k(s, s + 1.0, m, 9.0, r),
    }
    for name, fn in calls.items():
        eager = np.stack([np.asarray(fn(scores[i], mask[i], keys[i])) for i in range(4)])
        np.testing.assert_array_equal(_batched(fn, scores, mask, keys), eager, err_msg=name)
    np.testing.assert_array_equal(ops.count_true(mask[0]), np.asarray(mask[0]).sum())


def _budgeted_loop(scores, cost, mask, group, budget, key):
    """Per group, the eligible clients by descending score, equal scores in the order of
    the op's random permutation, taken until the running cost exceeds the budget."""
    n = scores.shape[0]
    position = np.empty(n, int)
    position[np.asarray(jax.random.permutation(key, n))] = np.arange(n)
    selected = np.zeros(n, bool)
    for g, limit in enumerate(budget):
        members = [i for i in range(n) if mask[i] and group[i] == g]
        spent = 0.0
        for i in sorted(members, key=lambda i: (-scores[i], position[i])):
            spent += cost[i]
            if spent > limit:
                break
            selected[i] = True
    return selected


def _budgeted_instance(rng, n, num_groups):
    # Scores with ties and -inf; costs and budgets in quarters, so that every running
    # cost is exact in f32 whatever the order of the additions.
    scores = rng.integers(0, 4, n).astype(np.float32)
    scores[rng.random(n) < 0.1] = -np.inf
    cost = rng.integers(0, 9, n) / 4
    mask = rng.random(n) < 0.8
    group = rng.integers(0, num_groups, n).astype(np.int32)
    budget = rng.integers(0, 4 * n // num_groups + 1, num_groups) / 4
    return scores, cost.astype(np.float32), mask, group, budget.astype(np.float32)


@pytest.mark.parametrize("num_groups", [1, 3, 7])
def test_grouped_budgeted_top_k_equals_a_loop(num_groups):
    rng = np.random.default_rng(num_groups)
    fn = jax.jit(ops.grouped_budgeted_top_k)
    for trial in range(40):
        scores, cost, mask, group, budget = _budgeted_instance(rng, 30, num_groups)
        key = jax.random.PRNGKey(trial)
        want = _budgeted_loop(scores, cost, mask, group, budget, key)
        got = np.asarray(fn(scores, cost, mask, group, budget, key))
        np.testing.assert_array_equal(got, want, err_msg=str(trial))
        if num_groups == 1:
            alone = ops.budgeted_top_k(scores, cost, mask, budget[0], key)
            np.testing.assert_array_equal(np.asarray(alone), want, err_msg=str(trial))


def test_budgeted_top_k_stops_at_the_first_client_over_budget():
    # Best first: client 1 (cost 2), then client 0 (cost 3, over a budget of 4): the
    # cheaper client 2 after it is not taken.
    scores = jnp.array([2.0, 3.0, 1.0])
    cost = jnp.array([3.0, 2.0, 1.0])
    sel = ops.budgeted_top_k(scores, cost, jnp.ones(3, bool), 4.0, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(sel, [False, True, False])


def test_budgeted_top_k_breaks_ties_uniformly():
    # Six tied clients of cost 1 and a budget of 2: each of the 15 pairs equally often,
    # in a batch of budgets per trial.
    draws = 4500
    keys = jax.random.split(jax.random.PRNGKey(11), draws)
    fn = jax.vmap(
        lambda r, b: ops.budgeted_top_k(jnp.ones(6), jnp.ones(6), jnp.ones(6, bool), b, r)
    )
    sel = np.asarray(jax.jit(fn)(keys, jnp.full(draws, 2.0)))
    assert _uniform_enough(_subset_counts(sel, 6, 2))


def test_where_needed_chooses_per_member_and_skips_the_full_branch_when_unneeded():
    # `full` and `short` agree where `need` is False: vmapped, the choice is per member.
    x = jnp.asarray([[-1.0, 2.0], [3.0, -4.0], [-5.0, -6.0]])
    full = lambda v: jnp.where(v > 0, 3 * v, v)
    short = lambda v: v
    need = jnp.any(x > 0, axis=1)
    got = jax.vmap(lambda n, v: ops.where_needed(n, full, short, v))(need, x)
    np.testing.assert_array_equal(got, jnp.where(x > 0, 3 * x, x))
    # With no member in need, `short` alone gives the result, even for a `full` that
    # would disagree; with one in need, the batch takes `full`.
    disagree = lambda v: v + 100.0
    run = jax.vmap(lambda n, v: ops.where_needed(n, disagree, short, v))
    np.testing.assert_array_equal(run(jnp.zeros(3, bool), x), x)
    np.testing.assert_array_equal(run(jnp.asarray([True, False, False]), x), x + 100.0)
    assert float(ops.where_needed(jnp.bool_(False), disagree, short, jnp.float32(1.0))) == 1.0
    # Operands may be pytrees whose leaves are batched or not.
    pair = lambda v, c: {"v": v, "c": c}
    full_tree = lambda t: jnp.where(t["v"] > 0, t["c"] * t["v"], t["v"])
    short_tree = lambda t: t["v"]
    tree_run = jax.vmap(lambda n, v: ops.where_needed(n, full_tree, short_tree, pair(v, 3.0)))
    np.testing.assert_array_equal(tree_run(need, x), jnp.where(x > 0, 3 * x, x))


def test_kth_largest_key_backends_are_equal():
    # The CPU search (a bracket, three thresholds a pass, an early stop at a count of k)
    # against the 32-pass definition, for a traced k per trial and a static one, from 0
    # to beyond the positive keys, on tied and continuous scores, batched and alone.
    rng = np.random.default_rng(12)
    batch, n = 64, 300
    scores = np.concatenate([_tied_scores(rng, batch // 2, n), rng.normal(size=(batch // 2, n))])
    mask = rng.random((batch, n)) < rng.random((batch, 1))
    keys = jax.vmap(order.order_key)(jnp.asarray(scores, jnp.float32), jnp.asarray(mask))
    k = jnp.asarray(np.concatenate([[0, n], rng.integers(0, n + 1, batch - 2)]), jnp.int32)
    want = jax.jit(jax.vmap(order.kth_largest_key))(keys, k)
    got = jax.jit(jax.vmap(_xla_cpu.kth_largest_key))(keys, k)
    np.testing.assert_array_equal(got, want)
    assert np.sum(np.asarray(want) == 0) > 1  # fewer than k positive keys, k = n included
    np.testing.assert_array_equal(jax.jit(_xla_cpu.kth_largest_key)(keys[2], k[2]), want[2])
    for static in (0, 1, 7, n):
        got = jax.jit(jax.vmap(lambda x, s=static: ops.kth_largest_key(x, s)))(keys)
        want = jax.vmap(lambda x, s=static: order.kth_largest_key(x, s))(keys)
        np.testing.assert_array_equal(got, want, err_msg=str(static))


def test_top_k_mask_with_a_traced_k_equals_the_definition():
    # On CPU a traced k runs the sort-free search too: the definition's clients, bit for
    # bit, ties to the lower index, for every k from 0 to N in one batch.
    rng = np.random.default_rng(13)
    batch, n = 100, 40
    scores = _tied_scores(rng, batch, n)
    mask = rng.random((batch, n)) < rng.random((batch, 1))
    k = jnp.asarray(np.arange(batch) % (n + 1), jnp.int32)
    want = _batched(selection.portable_top_k_mask, scores, mask, k)
    np.testing.assert_array_equal(_batched(_xla_cpu.top_k_mask, scores, mask, k), want)
    np.testing.assert_array_equal(_batched(ops.top_k_mask, scores, mask, k), want)


def test_kth_largest_key_is_the_sorted_keys_order_statistic():
    # Every k from 0 to N against NumPy's sort, on keys with repeats, zeros and extremes.
    rng = np.random.default_rng(7)
    scores = np.concatenate(
        [rng.choice([-np.inf, -1.0, -0.0, 0.0, 0.5, 2.0, np.inf], 20), rng.normal(size=20)]
    ).astype(np.float32)
    mask = rng.random(40) < 0.8
    keys = order.order_key(jnp.asarray(scores), jnp.asarray(mask))
    descending = np.sort(np.asarray(keys))[::-1]
    kth = jax.jit(jax.vmap(order.kth_largest_key, in_axes=(None, 0)))(keys, jnp.arange(41))
    np.testing.assert_array_equal(np.asarray(kth)[1:], descending)
    assert int(kth[0]) == np.iinfo(np.uint32).max


def test_order_value_inverts_order_key():
    values = np.array([-np.inf, -3.5, -0.0, 0.0, 1e-38, 7.25, np.inf], np.float32)
    back = order.order_value(order.order_key(jnp.asarray(values), jnp.ones(7, bool)))
    np.testing.assert_array_equal(np.asarray(back).view(np.uint32), values.view(np.uint32))


@pytest.mark.parametrize("k", [0, 41])
def test_a_static_k_outside_1_to_n_is_refused_naming_it(k):
    # It failed inside the kernels with a ZeroDivisionError or an IndexError.
    scores, mask, key = jnp.arange(40.0), jnp.ones(40, bool), jax.random.PRNGKey(0)
    for call in (
        lambda: ops.masked_top_k(scores, mask, k, key),
        lambda: ops.uniform_subset(mask, k, key),
        lambda: ops.top_k_mask(scores, mask, k),
    ):
        with pytest.raises(ValueError, match=rf"k must be an integer in \[1, 40\], got {k}"):
            call()
    with pytest.raises(ValueError, match=r"k must be an integer in \[0, 40\]"):
        ops.kth_largest_key(ops.order_key(scores, mask), 41)
