"""Exact schedules, hand-worked indices and statistical claims on Bernoulli arms.

Every registered policy under jit and vmap: test_policy_conformance.py.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs
from fedjax_sel.types import Decision, Feedback, RoundInput

N, K = 8, 3


def test_fixed_runs_under_jit_and_vmap():
    # The registered policies are checked in test_policy_conformance.py; `fixed` takes a
    # list of clients instead of a cohort size, so it is not registered.
    sel = bandits.fixed(N, [0, 2, 5])
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    state = jax.vmap(sel.init)(keys)
    available = jax.random.uniform(jax.random.PRNGKey(1), (4, N)) < 0.8
    inp = RoundInput(t=jnp.ones((4,), jnp.int32), available=available)
    dec, state = jax.jit(jax.vmap(sel.select))(state, inp, keys)
    np.testing.assert_array_equal(dec.selected, available & np.isin(np.arange(N), [0, 2, 5]))
    fb = Feedback(dec.selected, jnp.zeros((4, N)), jnp.zeros((4, N)), dec.selected)
    chex.assert_trees_all_equal_shapes_and_dtypes(
        state, jax.jit(jax.vmap(sel.update))(state, dec, fb)
    )


def test_round_robin_schedule_is_exact():
    sel = bandits.round_robin(5, 2)
    got = []
    for t in range(1, 6):
        inp = RoundInput(t=jnp.int32(t), available=jnp.ones(5, bool))
        dec, _ = sel.select((), inp, jax.random.PRNGKey(0))
        got.append(np.flatnonzero(dec.selected).tolist())
    assert got == [[0, 1], [2, 3], [0, 4], [1, 2], [3, 4]]


@pytest.mark.parametrize("n, k", [(10, 3), (1000, 1000), (999_983, 65_537), (1, 1)])
def test_round_robin_block_starts_at_t_minus_1_times_k_mod_n_at_any_horizon(n, k):
    # Python's integers against the jitted block's first place, across the rounds where
    # (t - 1) k passes 2^31 (where int32 arithmetic wrapped and the cycle jumped).
    sel = bandits.round_robin(n, k)
    start = jax.jit(
        jax.vmap(lambda t: sel.select((), RoundInput(t=t, available=jnp.ones(n, bool)), None)[0])
    )
    edge = 2**31 // k
    rounds = np.unique(np.r_[1:50, edge - 3 : edge + 4, 2**31 - 5 : 2**31 - 1, 123_456_789])
    rounds = rounds[(rounds >= 1) & (rounds < 2**31)]
    got = np.asarray(start(jnp.asarray(rounds, jnp.int32)).indices[:, 0])
    want = [((int(t) - 1) * k) % n for t in rounds]
    np.testing.assert_array_equal(got, want)


def test_round_robin_leaves_unavailable_slots_empty():
    sel = bandits.round_robin(5, 2)
    inp = RoundInput(t=jnp.int32(1), available=jnp.array([False, True, True, True, True]))
    dec, _ = sel.select((), inp, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(np.flatnonzero(dec.selected), [1])
    np.testing.assert_array_equal(dec.indices, [5, 1])  # its places, the empty slot N


def test_round_robin_carries_the_places_of_its_cohort():
    # Every round and availability: `Decision.indices` holds the selected clients, each
    # once, and N for the slots left empty.
    n, k = 7, 3
    sel = bandits.round_robin(n, k)
    available = np.random.default_rng(0).random((20, n)) < 0.7
    select = jax.jit(lambda t, a: sel.select((), RoundInput(t=t, available=a), None)[0])
    for t, row in enumerate(available, start=1):
        dec = select(jnp.int32(t), jnp.asarray(row))
        places = np.asarray(dec.indices)
        np.testing.assert_array_equal(np.sort(places[places < n]), np.flatnonzero(dec.selected))
        assert np.sum(places < n) + np.sum(places == n) == k


def test_ucb_index_matches_hand_computation():
    sel = bandits.ucb(3, 1, exploration=2.0)
    state = sel.init(jax.random.PRNGKey(0))
    # Client 0: 4 observations, mean 0.5; client 1: 1 observation, mean 0; client 2: 9, 0.6.
    state = state._replace(counts=jnp.array([4.0, 1.0, 9.0]), sums=jnp.array([2.0, 0.0, 5.4]))
    t = 10
    index = np.array([0.5, 0.0, 0.6]) + np.sqrt(2 * np.log(t) / np.array([4.0, 1.0, 9.0]))
    inp = RoundInput(t=jnp.int32(t), available=jnp.ones(3, bool))
    dec, _ = sel.select(state, inp, jax.random.PRNGKey(0))
    assert np.flatnonzero(dec.selected).tolist() == [int(np.argmax(index))]


def test_ucb_plays_unobserved_clients_first():
    sel = bandits.ucb(4, 2)
    state = sel.init(jax.random.PRNGKey(0))
    state = state._replace(counts=jnp.array([3.0, 0.0, 5.0, 0.0]), sums=jnp.array([3.0, 0, 5, 0]))
    inp = RoundInput(t=jnp.int32(9), available=jnp.ones(4, bool))
    dec, _ = sel.select(state, inp, jax.random.PRNGKey(0))
    assert np.flatnonzero(dec.selected).tolist() == [1, 3]


def test_fixed_and_oracle_validation():
    with pytest.raises(ValueError, match="clients must be distinct indices in \\[0, 3\\]"):
        bandits.fixed(4, [0, 4])
    with pytest.raises(ValueError, match="clients must be distinct"):
        bandits.fixed(4, [1, 1])
    with pytest.raises(ValueError, match="bandits.oracle needs RoundInput.oracle"):
        bandits.oracle().select((), RoundInput(jnp.int32(1), jnp.ones(4, bool)), None)
    # num_selected is validated with or without num_clients.
    for k in (0, -3, 2.5, "abc"):
        with pytest.raises(ValueError, match="num_selected must be an integer >= 1"):
            bandits.oracle(None, k)


@pytest.mark.parametrize(
    "factory, message",
    [
        (lambda: bandits.ucb(5, 6), r"num_selected must be an integer in \[1, 5\], got 6"),
        (lambda: bandits.random(0, 1), r"num_clients must be an integer >= 1, got 0"),
        (lambda: bandits.epsilon_greedy(5, 2, 1.5), r"epsilon must lie in \[0.0, 1.0\]"),
        (lambda: bandits.ucb(5, 2, exploration=-1), r"exploration must lie in \[0.0, inf\]"),
        (lambda: bandits.thompson(5, 2, prior="x"), r"prior must be one of"),
        (lambda: bandits.make("nope", 5, 2), r"unknown policy 'nope'; choose from"),
    ],
)
def test_bad_arguments_raise_before_tracing(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_random_selects_each_client_with_frequency_k_over_n():
    n, k, rounds, trials = 10, 3, 200, 32
    env = envs.bernoulli(n, k, means=np.linspace(0.1, 0.9, n))
    res = fedjax_sel.simulate(bandits.random(n, k), env, rounds, trials, seed=5, progress=None)
    frac = res.selection_fraction["policy"]
    p = k / n
    # Rounds are independent draws, so each client's count over trials*rounds is
    # Binomial(trials*rounds, k/n).
    tol = 4.0 * np.sqrt(p * (1 - p) / (rounds * trials))
    assert np.all(np.abs(frac - p) < tol), (frac, tol)


MEANS = np.array([0.9, 0.8, 0.4, 0.3, 0.2, 0.1], np.float32)


@pytest.fixture(scope="module")
def bernoulli_runs():
    env = envs.bernoulli(6, 2, means=MEANS)
    policies = {
        "ucb": bandits.ucb(6, 2),
        "thompson": bandits.thompson(6, 2),
        "random": bandits.random(6, 2),
        "oracle": bandits.oracle(),
    }
    return fedjax_sel.simulate(policies, env, num_rounds=4000, num_trials=48, seed=1, progress=None)


def test_learning_policies_beat_random_by_a_wide_margin(bernoulli_runs):
    res = bernoulli_runs
    random_mean, _ = res.final("random")
    # random's expected regret per round: 1.7 - E[sum of 2 random means] = 1.7 - 2 * 0.45.
    assert abs(random_mean - 4000 * 0.8) < 60
    for name in ("ucb", "thompson"):
        mean, half = res.final(name)
        assert mean + half < 0.1 * random_mean, (name, mean)


def test_oracle_pseudo_regret_is_exactly_zero(bernoulli_runs):
    res = bernoulli_runs
    assert np.all(res.totals["oracle"]["cumulative_regret"] == 0.0)
    assert np.all(res.curves["oracle"]["cumulative_regret"]["mean"] == 0.0)


@pytest.mark.parametrize("name", ["ucb", "thompson"])
def test_regret_grows_logarithmically(bernoulli_runs, name):
    # R(T) = c ln T + o(ln T): the growth from T=1000 to 4000 (a factor e^1.39) is about
    # the growth from 250 to 1000, not four times it as it would be for linear regret.
    mean, _ = bernoulli_runs.curve(name, "cumulative_regret")
    early = mean[999] - mean[249]
    late = mean[3999] - mean[999]
    assert late < 1.5 * early, (early, late)
    # And regret(T)/ln(T) stops growing.
    ratio = [mean[t - 1] / np.log(t) for t in (1000, 2000, 4000)]
    assert ratio[2] < 1.25 * ratio[0], ratio


def test_oracle_selector_reads_the_oracle_field():
    sel = bandits.oracle()
    best = Decision(jnp.array([False, True, True]))
    inp = RoundInput(jnp.int32(1), jnp.ones(3, bool), oracle=best)
    dec, _ = sel.select((), inp, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(dec.selected, best.selected)
