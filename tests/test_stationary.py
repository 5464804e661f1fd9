"""Stationary environments: reward laws, availability, oracle, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs, ops
from fedjax_sel.types import Decision

MEANS = np.array([0.2, 0.7, 0.5, 0.9], np.float32)


@pytest.mark.parametrize(
    "make, var",
    [
        (lambda: envs.bernoulli(4, 2, means=MEANS), MEANS * (1 - MEANS)),
        (lambda: envs.gaussian(4, 2, means=MEANS, stddev=0.5), np.full(4, 0.25)),
        (lambda: envs.beta(4, 2, means=MEANS, concentration=4.0), MEANS * (1 - MEANS) / 5.0),
    ],
)
def test_rewards_have_the_stated_mean_and_variance(make, var):
    env = make()
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    dec = Decision(jnp.ones(4, bool))
    draws = 20000
    keys = jax.random.split(jax.random.PRNGKey(2), draws)
    reward = np.asarray(jax.vmap(lambda k: env.step(state, inp, dec, k)[0].reward)(keys))
    assert np.all(np.abs(reward.mean(0) - MEANS) < 4.5 * np.sqrt(var / draws))
    # Sample variance of n draws has standard error about var * sqrt(2 / n) (light tails).
    assert np.all(np.abs(reward.var(0) - var) < 6 * var * np.sqrt(2 / draws) + 1e-3)


def test_availability_rate_and_oracle_among_available():
    env = envs.bernoulli(4, 2, means=MEANS, availability=[1.0, 0.5, 0.0, 0.25])
    state = env.reset(jax.random.PRNGKey(0))
    draws = 8000
    keys = jax.random.split(jax.random.PRNGKey(3), draws)
    avail = np.asarray(jax.vmap(lambda k: env.observe(state, 1, k).available)(keys))
    p = np.array([1.0, 0.5, 0.0, 0.25])
    assert np.all(np.abs(avail.mean(0) - p) <= 4.5 * np.sqrt(p * (1 - p) / draws) + 1e-9)
    inp = env.observe(state, 1, keys[0])
    decide = jax.jit(jax.vmap(lambda a: env.oracle(state, inp._replace(available=a))))
    oracle = lambda a: decide(a).selected  # noqa: E731
    decisions = decide(avail[:200])
    for row, best, places in zip(
        avail[:200], *map(np.asarray, (decisions.selected, decisions.indices)), strict=True
    ):
        eligible = np.flatnonzero(row)
        expected = eligible[np.argsort(-MEANS[eligible], kind="stable")][:2]
        assert sorted(np.flatnonzero(best)) == sorted(expected)
        # The decision carries its clients' places (`Decision.indices`), the rest N.
        np.testing.assert_array_equal(
            places, np.pad(sorted(expected), (0, 2 - len(expected)), constant_values=4)
        )
    # With every client available the decision computed at reset serves, alone and in
    # a batch that needs no search; with one unavailable, the search.
    everyone = jnp.ones((3, 4), bool)
    np.testing.assert_array_equal(oracle(everyone), np.tile([False, True, False, True], (3, 1)))
    np.testing.assert_array_equal(decide(everyone).indices, np.tile([1, 3], (3, 1)))
    np.testing.assert_array_equal(oracle(everyone[:1])[0], oracle(everyone.at[0, 3].set(False))[1])
    alone = env.oracle(state, inp._replace(available=jnp.array([True, True, True, False])))
    np.testing.assert_array_equal(alone.selected, [False, True, True, False])
    np.testing.assert_array_equal(alone.indices, [1, 2])


def test_stats_are_the_sums_of_means():
    env = envs.bernoulli(4, 2, means=MEANS)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    dec = Decision(jnp.array([True, False, True, False]))
    fb, _, stats = env.step(state, inp, dec, jax.random.PRNGKey(2))
    assert float(stats.expected_reward) == pytest.approx(0.7)
    assert float(stats.oracle_reward) == pytest.approx(1.6)
    assert float(stats.reward) == float(np.sum(np.asarray(fb.reward)[[0, 2]]))


@pytest.mark.parametrize("k", [1, 3, 4, 6, 9])
def test_full_oracle_equals_the_rounds_search_under_ties(k):
    # Ties at and across the k-th place go to the lower index (brute force), and reset's
    # cohort is the one `ops.top_k_mask` gives the rounds' oracle.
    means = np.array([0.5, 0.9, 0.5, 0.1, 0.9, 0.5, 0.0, 0.5, 0.9], np.float32)
    env = envs.bernoulli(9, k, means=means)
    state = jax.jit(env.reset)(jax.random.PRNGKey(0))
    top = jax.jit(ops.top_k_mask, static_argnums=2)(jnp.asarray(means), jnp.ones(9, bool), k)
    want = np.zeros(9, bool)
    want[np.lexsort((np.arange(9), -means))[:k]] = True
    np.testing.assert_array_equal(state.full_oracle, want)
    np.testing.assert_array_equal(state.full_oracle, top)
    np.testing.assert_array_equal(state.full_oracle_indices, np.flatnonzero(want))
    assert float(state.full_oracle_reward) == float(np.sum(means[want]))


def test_means_drawn_per_trial_lie_in_range():
    env = envs.bernoulli(50, 5, means_range=(0.2, 0.4))
    means = np.asarray(jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 8)).means)
    assert means.min() >= 0.2 and means.max() <= 0.4 and np.unique(means).size == means.size


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: envs.bernoulli(4, 5), r"num_selected must be an integer in \[1, 4\], got 5"),
        (lambda: envs.bernoulli(4, 2, means=[0.1, 0.2]), r"means must have shape \(4,\)"),
        (lambda: envs.bernoulli(4, 2, means=[0.1, 0.2, 1.3, 0.4]), r"means must have every"),
        (lambda: envs.bernoulli(4, 2, availability=-0.1), r"availability must have every"),
        (lambda: envs.bernoulli(4, 2, availability=[1, 1]), r"availability must have shape"),
        (lambda: envs.gaussian(4, 2, stddev=0), r"stddev must lie in \(0.0, inf\]"),
        (lambda: envs.beta(4, 2, concentration=-1), r"concentration must lie in"),
        (lambda: envs.bernoulli(4, 2, means_range=(0.5, 1.2)), r"means_range\[1\] must lie"),
        (lambda: envs.make("nope", 4, 2), r"unknown environment 'nope'"),
    ],
)
def test_bad_environment_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("family", ["bernoulli", "gaussian"])
def test_drawing_the_observed_rewards_alone_changes_nothing(monkeypatch, xla_defaults, family):
    # k <= N / 32: the selected clients' rewards are drawn alone; the draw over all N
    # (forced), and the draw at the places a decision carries (`Decision.indices`, in any
    # order, whatever k / N), give the same observed rewards bit for bit, for cohorts of
    # k, fewer than k (padded places) and none, compiled as users' programs are (with the
    # suite's faster options, 4 of the 8,192 normal draws differed in their last bit).
    # The round statistics of the two draws of a mask are the same bits; those of a
    # decision with places are sums at its places, the same numbers up to the order of
    # the f32 additions.
    from fedjax_sel.envs import stationary

    n, k = 128, 4
    rng = np.random.default_rng(4)
    selected = np.zeros((64, n), bool)
    for row, size in zip(selected, rng.integers(0, k + 1, 64), strict=True):
        row[rng.choice(n, size, replace=False)] = True
    places = np.full((64, k), n, np.int32)
    for row, flags in zip(places, selected, strict=True):
        where = rng.permutation(np.flatnonzero(flags))
        row[: where.size] = where
    keys = jax.random.split(jax.random.PRNGKey(5), 64)

    def step(ratio, indices=None):
        monkeypatch.setattr(stationary, "OBSERVED_ONLY_RATIO", ratio)
        env = getattr(envs, family)(n, k)
        state = env.reset(jax.random.PRNGKey(6))
        inp = env.observe(state, 1, jax.random.PRNGKey(7))
        run = lambda s, i, key: env.step(state, inp, Decision(s, indices=i), key)
        feedback, _, stats = jax.jit(
            jax.vmap(run, in_axes=(0, None if indices is None else 0, 0)),
            compiler_options=xla_defaults,
        )(jnp.asarray(selected), indices, keys)
        return np.where(selected, feedback.reward, 0.0), stats

    whole, whole_stats = step(10**9)
    alone, alone_stats = step(32)
    at, at_stats = step(10**9, jnp.asarray(places))
    np.testing.assert_array_equal(alone, whole)
    np.testing.assert_array_equal(at, whole)
    for got, want in zip(alone_stats, whole_stats, strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(at_stats, whole_stats, strict=True):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
