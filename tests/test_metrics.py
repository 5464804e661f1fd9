"""The runner's per-round accounting (`fedjax_sel.metrics`): a decision counted at the
places it carries (`Decision.indices`, O(k)) is counted as its mask is, bit for bit, and
both agree with brute force; and the count of a cohort's empty slots (`envs.cohort`)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, metrics
from fedjax_sel.ops import places as places_lib
from fedjax_sel.types import Decision

N, K, ROUNDS, TRIALS = 11, 4, 40, 6


def _decisions(seed, num_places=K, size_high=K):
    """Random cohorts of 0 to `size_high` clients of N, f32 masks bool[T, N] and their
    places in random order, padded with N, int32[T, num_places]."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((ROUNDS, N), bool)
    places = np.full((ROUNDS, num_places), N, np.int32)
    for mask, row in zip(masks, places, strict=True):
        chosen = rng.choice(N, rng.integers(0, size_high + 1), replace=False)
        mask[chosen] = True
        row[rng.permutation(num_places)[: chosen.size]] = chosen
    return masks, places


@functools.partial(jax.jit, static_argnums=2)
def _count(masks, places, given_t=True):
    """The `Selections` after each round, counted from the masks and from the places,
    with the rounds given (`count_selections`'s `t`) or not."""

    def rounds(use_places):
        def body(selections, x):
            mask, at, t = x
            decision = Decision(mask, indices=at if use_places else None)
            selections = metrics.count_selections(selections, decision, t if given_t else None)
            return selections, selections

        start = metrics.init_running(metrics.Layout(()), N).selections
        t = jnp.arange(1, masks.shape[0] + 1, dtype=jnp.int32)
        return jax.lax.scan(body, start, (masks, places, t))[1]

    return rounds(False), rounds(True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selections_counted_at_places_equal_those_of_masks_and_brute_force(seed):
    masks, places = _decisions(seed)
    of_masks, at_places = _count(masks, places)
    for a, b in zip(of_masks, at_places, strict=True):
        np.testing.assert_array_equal(a, b)
    # The sums by fields alone (no round given) are the same bits.
    for a, b in zip((of_masks, at_places), _count(masks, places, False), strict=True):
        jax.tree.map(np.testing.assert_array_equal, a, b)
    counts = np.cumsum(masks, 0).astype(np.float64)
    np.testing.assert_array_equal(of_masks.counts, counts)
    np.testing.assert_array_equal(of_masks.cohort, masks.sum(1))
    # The running sums are exact: hi + lo is the integer, hi its f32 rounding.
    np.testing.assert_array_equal(np.asarray(of_masks.total, np.float64).sum(-1), counts.sum(1))
    np.testing.assert_array_equal(
        np.asarray(of_masks.squares, np.float64).sum(-1), (counts**2).sum(1)
    )
    total, squares = counts.sum(1), (counts**2).sum(1)
    safe = np.where(squares > 0, squares, 1.0)
    jain = np.where(squares > 0, total**2 / (N * safe), 1.0)
    np.testing.assert_allclose(of_masks.jain_index, jain, rtol=1e-6)
    np.testing.assert_allclose(
        metrics.jain_index(jnp.asarray(counts, jnp.float32)), jain, rtol=1e-6
    )


def test_running_sums_stay_exact_beyond_f32_integers():
    # Client 0 selected in 5,000 rounds: the sum of squares passes 2^24, beyond which
    # f32 integers are spaced by 2 and more; the double-f32 running sums stay exact.
    rounds = 5000
    masks = np.zeros((rounds, N), bool)
    masks[:, 0] = True
    places = np.full((rounds, K), N, np.int32)
    places[:, 1] = 0
    of_masks, at_places = _count(masks, places)
    for a, b in zip(of_masks, at_places, strict=True):
        np.testing.assert_array_equal(a, b)
    t = np.arange(1, rounds + 1, dtype=np.float64)
    np.testing.assert_array_equal(np.asarray(of_masks.squares, np.float64).sum(-1), t**2)
    np.testing.assert_array_equal(np.asarray(of_masks.total, np.float64).sum(-1), t)
    assert (t**2 > 2**24).any()


@pytest.mark.parametrize("t", [None, 60_001])
@pytest.mark.parametrize("use_places", [False, True])
def test_squares_stay_exact_where_a_rounds_increment_passes_2_pow_31(use_places, t):
    # 20,000 clients, each selected 60,000 times before, all of them again: the round
    # adds 20,000 x 120,001 = 2,400,020,000 > 2^31 to the sum of squares (an int32 sum
    # wrapped, and Jain's index of equal counts came out far above 1).
    n, c = 20_000, 60_000.0
    start = metrics.Selections(
        jnp.float32(n),
        jnp.full((n,), c, jnp.float32),
        jnp.asarray([n * c, 0.0], jnp.float32),
        jnp.asarray(np.float32([n * c * c, n * c * c - np.float64(np.float32(n * c * c))])),
    )
    everyone = jnp.ones((n,), bool)
    decision = Decision(everyone, indices=jnp.arange(n) if use_places else None)
    after = jax.jit(metrics.count_selections)(start, decision, t)
    want = double_value(start.squares) + n * (2 * c + 1)
    assert double_value(after.squares) == want == n * (c + 1) ** 2
    assert double_value(after.total) == n * (c + 1)
    assert after.jain_index == pytest.approx(1.0, rel=1e-6)


def test_one_int32_sum_and_the_fields_agree_where_the_round_allows_it():
    # 20,000 clients (m >= 16: not summed alike statically), counts below t = 9: the
    # round's bound 20,000 x 17 fits, and one int32 sum gives the fields' bits.
    counts = jnp.asarray(np.random.default_rng(0).integers(0, 8, 20_000), jnp.float32)
    start = metrics.Selections(jnp.float32(0), counts, jnp.zeros(2), jnp.zeros(2))
    decision = Decision(jnp.asarray(np.random.default_rng(1).random(20_000) < 0.3))
    count = jax.jit(metrics.count_selections)
    one_sum, fields = count(start, decision, jnp.int32(9)), count(start, decision, None)
    jax.tree.map(np.testing.assert_array_equal, one_sum, fields)
    after = np.asarray(counts) + np.asarray(decision.selected)
    increments = (after**2 - np.asarray(counts) ** 2).sum()
    assert double_value(one_sum.squares) == increments


def double_value(x):
    return float(np.asarray(x, np.float64).sum())


@pytest.mark.parametrize("num_selected", [None, 2, K])
def test_violations_checked_at_places_equal_those_of_masks(num_selected):
    masks, places = _decisions(3, num_places=K + 2, size_high=K + 2)
    rng = np.random.default_rng(4)
    available = rng.random((ROUNDS, N)) < 0.8

    def check(mask, at, avail):
        of_mask = metrics.decision_violations(Decision(mask), avail, num_selected)
        at_places = metrics.decision_violations(Decision(mask, indices=at), avail, num_selected)
        return of_mask, at_places

    of_masks, at_places = jax.jit(jax.vmap(check))(masks, places, available)
    want = (masks & ~available).any(1)
    if num_selected is not None:
        want |= masks.sum(1) > num_selected
    np.testing.assert_array_equal(of_masks, want)
    np.testing.assert_array_equal(at_places, want)
    assert want.any() and not want.all()


def test_places_ops_against_numpy():
    rng = np.random.default_rng(5)
    values = rng.normal(size=N).astype(np.float32)
    at = np.array([7, N, 0, 3, N], np.int32)
    update = np.arange(5, dtype=np.float32) + 1.0
    real = at < N
    taken = np.where(real, values[np.minimum(at, N - 1)], -1.0)
    np.testing.assert_array_equal(places_lib.take(values, at, -1.0), taken)
    added, put = values.copy(), values.copy()
    added[at[real]] += update[real]
    put[at[real]] = update[real]
    np.testing.assert_array_equal(places_lib.add(values, at, update), added)
    np.testing.assert_array_equal(places_lib.put(values, at, update), put)


def _without_places(selector):
    """`selector` whose decisions carry their masks only."""

    def select(state, round_input, key):
        decision, state = selector.select(state, round_input, key)
        return decision._replace(indices=None), state

    return selector._replace(select=select)


@pytest.mark.parametrize("availability", [1.0, 0.7])
def test_runs_with_and_without_places_agree(availability):
    # The same cohorts counted at their places or from their masks: the same selection
    # counts, cohorts, Jain's index and 0/1 rewards bit for bit; the values of the
    # means (summed at the places, or over the masks) up to the order of f32 additions,
    # and the oracle's own regret exactly 0 either way.
    env = envs.bernoulli(40, 5, availability=availability)
    policies = {
        "round_robin": bandits.round_robin(40, 5),
        "oracle": bandits.oracle(),
    }
    policies |= {f"{name}/mask": _without_places(p) for name, p in list(policies.items())}
    res = fedjax_sel.simulate(policies, env, 30, 8, seed=2, progress=None)
    for name in ("round_robin", "oracle"):
        at, mask = name, f"{name}/mask"
        np.testing.assert_array_equal(res.selection_fraction[at], res.selection_fraction[mask])
        for curve in ("num_selected", "jain_index", "reward", "cumulative_reward"):
            np.testing.assert_array_equal(
                res.curves[at][curve]["mean"], res.curves[mask][curve]["mean"]
            )
        for total in ("jain_index", "min_selection_fraction", "cumulative_reward"):
            np.testing.assert_array_equal(res.totals[at][total], res.totals[mask][total])
        np.testing.assert_allclose(
            res.totals[at]["cumulative_regret"],
            res.totals[mask]["cumulative_regret"],
            rtol=1e-5,
            atol=1e-5,
        )
    for name in ("oracle", "oracle/mask"):
        np.testing.assert_array_equal(res.totals[name]["cumulative_regret"], 0.0)


def test_missing_slots_take_the_number_chosen():
    # min(k, |A|) - chosen, never negative; a mask in place of the number is refused.
    from fedjax_sel.envs import cohort

    available = jnp.array([True, True, False, True, True])
    for chosen, k, want in ((0, 3, 3), (2, 3, 1), (3, 3, 0), (1, 9, 3), (4, 9, 0)):
        assert int(cohort.missing(jnp.int32(chosen), available, k)) == want
    with pytest.raises(ValueError, match="chosen must be the number"):
        cohort.missing(available, available, 3)
