"""The NumPy references agree in distribution with the jitted policies."""

import numpy as np
import pytest

import bandits
import fedjax_sel
from experiments.references import stationary as reference
from fedjax_sel import envs

N, K, T, M = 12, 3, 40, 256


@pytest.fixture(scope="module")
def jax_regret():
    env = envs.bernoulli(N, K)
    policies = {name: bandits.make(name, N, K) for name in reference.REGISTRY}
    results = fedjax_sel.simulate(policies, env, T, M, seed=3, progress=None)
    return {name: results.totals[name]["cumulative_regret"] for name in policies}


@pytest.mark.parametrize("policy", sorted(reference.REGISTRY))
def test_mean_regret_agrees_with_jitted_policy(policy, jax_regret):
    ref = reference.simulate(policy, N, K, T, M, seed=5)
    ours = np.asarray(jax_regret[policy], np.float64)
    # Two independent means of M trials: a 4-sigma band of their difference fails a
    # correct implementation with probability ~6e-5.
    stderr = np.sqrt(ref.var(ddof=1) / M + ours.var(ddof=1) / M)
    assert abs(ref.mean() - ours.mean()) <= 4 * stderr + 1e-3
    if policy == "oracle":
        np.testing.assert_allclose(ref, 0.0, atol=1e-9)


def test_references_learn():
    # Index policies beat random by a wide margin on the same instances.
    random = reference.simulate("random", N, K, 200, 20, seed=1).mean()
    for policy in ("ucb", "thompson", "epsilon_greedy"):
        assert reference.simulate(policy, N, K, 200, 20, seed=1).mean() < 0.6 * random


def test_top_k_random_ties_without_ties_is_the_top_k():
    rng = np.random.default_rng(0)
    score = rng.permutation(20).astype(np.float64)
    chosen = reference.top_k_random_ties(score, 5, rng)
    assert sorted(chosen) == sorted(np.argsort(score)[-5:])


def test_top_k_random_ties_is_uniform_among_ties():
    # Scores [3, 1, 1, 1, 1, 0], k = 3: client 0 always, then 2 of the 4 tied clients,
    # each with probability 1/2.
    score = np.array([3.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    rng = np.random.default_rng(1)
    draws = 4000
    hits = np.zeros(6)
    for _ in range(draws):
        chosen = reference.top_k_random_ties(score, 3, rng)
        assert len(set(chosen.tolist())) == 3
        hits[chosen] += 1
    assert hits[0] == draws and hits[5] == 0
    tolerance = 4 * np.sqrt(0.25 / draws)
    np.testing.assert_array_less(np.abs(hits[1:5] / draws - 0.5), tolerance)


def test_position_tie_break_is_argpartition_order():
    # Scores [3, 1, 1, 1, 1, 0], k = 3: the same cohort every time, the one
    # np.argpartition returns, whatever the generator.
    score = np.array([3.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    expected = np.argpartition(score, 3)[3:]
    for seed in range(20):
        chosen = reference.top_k(score, 3, np.random.default_rng(seed), "position")
        np.testing.assert_array_equal(chosen, expected)


@pytest.mark.parametrize("policy", reference.TIE_BREAKING)
def test_position_tie_break_has_the_mean_regret_of_the_jitted_policy(policy, jax_regret):
    # Each trial draws its means independently of the client indices, so breaking ties
    # by position favours no client on average: same mean regret (4-sigma band).
    ref = reference.simulate(policy, N, K, T, M, seed=5, tie_break="position")
    uniform = reference.simulate(policy, N, K, T, M, seed=5)
    assert not np.array_equal(ref, uniform)  # the rule is in use
    ours = np.asarray(jax_regret[policy], np.float64)
    stderr = np.sqrt(ref.var(ddof=1) / M + ours.var(ddof=1) / M)
    assert abs(ref.mean() - ours.mean()) <= 4 * stderr + 1e-3


def test_round_robin_and_random_select_k_distinct_clients():
    rng = np.random.default_rng(2)
    for name in ("random", "round_robin"):
        policy = reference.REGISTRY[name](7, 3)
        for t in range(1, 10):
            chosen = policy.select(t, rng)
            assert len(set(chosen.tolist())) == 3 and chosen.min() >= 0 and chosen.max() < 7
    assert reference.round_robin(7, 3).select(3, rng).tolist() == [6, 0, 1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        reference.simulate("nope", 10, 2, 5, 1)
    with pytest.raises(ValueError, match="num_selected"):
        reference.simulate("ucb", 10, 11, 5, 1)
    with pytest.raises(ValueError, match="num_rounds"):
        reference.simulate("ucb", 10, 2, 0, 1)
    with pytest.raises(ValueError, match="tie_break must be one of"):
        reference.simulate("ucb", 10, 2, 5, 1, tie_break="lowest")
