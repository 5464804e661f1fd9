"""Tests of the Xia et al. (2020) environment, policies and the r* benchmark."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from bandits.cs_ucb import init_schedule
from fedjax_sel import fairness_lp
from fedjax_sel.envs import wireless_latency
from fedjax_sel.envs.wireless_latency import WirelessParams, compute_bounds, mean_reward
from fedjax_sel.types import Decision, Feedback, RoundInput

DISTANCES = np.array([0.45, 0.35, 0.25])


def numpy_latency(rng, distance_km, client, num, deadline):
    """Independent sampler of eq. 4 with the §V.A constants (client is 1-based)."""
    snr = 10 ** ((23.0 + 107.0 - 128.1 - 37.6 * np.log10(distance_km)) / 10)
    down = 5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=num)))
    up = 5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=num)))
    phi = rng.uniform((0.5 * client + 0.5) * 20, (0.5 * client + 1.5) * 20, size=num)
    return np.minimum(down + up + 2.0 / phi, deadline)


def env_samples(env, num):
    """f32[num, K] latencies of every client from `env.step` under independent keys."""
    state = env.reset(jax.random.PRNGKey(0))
    everyone = Decision(jnp.ones((env.num_clients,), bool))
    inp = RoundInput(t=jnp.int32(1), available=everyone.selected)

    def one(key):
        return env.step(state, inp, everyone, key)[0].latency

    return np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(1), num)))


@pytest.mark.parametrize("preset,deadline", [("literal", 5.0), ("calibrated", 0.5)])
def test_latency_distribution_matches_independent_monte_carlo(preset, deadline):
    env = wireless_latency(3, 2, preset=preset, distances_km=DISTANCES)
    num = 40000
    ours = env_samples(env, num)
    rng = np.random.default_rng(0)
    for k in range(3):
        ref = numpy_latency(rng, DISTANCES[k], k + 1, num, deadline)
        se = math.sqrt(ours[:, k].var() / num + ref.var() / num)
        assert abs(ours[:, k].mean() - ref.mean()) < 5 * se
        for q in (0.1, 0.5, 0.9):
            # A quantile's CDF level has standard error sqrt(q(1-q)/n) per sample.
            level = np.mean(ours[:, k] <= np.quantile(ref, q))
            assert abs(level - q) < 5 * math.sqrt(2 * q * (1 - q) / num)


@pytest.mark.parametrize("preset,deadline", [("literal", 5.0), ("calibrated", 0.5)])
def test_mean_reward_matches_brute_force_sampling(preset, deadline):
    env = wireless_latency(3, 2, preset=preset, distances_km=DISTANCES)
    means = np.asarray(env.reset(jax.random.PRNGKey(0)).means)
    rng = np.random.default_rng(1)
    num = 2_000_000
    for k in range(3):
        reward = 1 - numpy_latency(rng, DISTANCES[k], k + 1, num, deadline) / deadline
        se = reward.std() / math.sqrt(num)
        assert abs(means[k] - reward.mean()) < 5 * se + 2e-6


def test_per_trial_geometry_interpolates_the_exact_means():
    env = wireless_latency(20, 5, preset="calibrated")
    params = WirelessParams(0.5, 15e3, 5e3, 5e3, 2.0, 23.0, -107.0)
    low, high = compute_bounds(20)
    for seed in range(3):
        state = env.reset(jax.random.PRNGKey(seed))
        exact = np.diagonal(mean_reward(np.asarray(state.snr, np.float64), low, high, params))
        np.testing.assert_allclose(np.asarray(state.means), exact, atol=2e-4)
    distances = [np.asarray(env.reset(jax.random.PRNGKey(s)).snr) for s in range(2)]
    assert not np.allclose(distances[0], distances[1])


def algorithm1_distribution(num_clients, num_selected):
    """Exact distribution of Algorithm 1's initialization rounds, by enumeration."""
    kappa = -(-num_clients // num_selected)
    dist = Counter()

    def recurse(pool, played, rounds, prob):
        if len(rounds) == kappa:
            dist[tuple(rounds)] += prob
            return
        options = [(pool, 1.0)]
        if len(pool) < num_selected:
            size = kappa * num_selected - num_clients
            extras = list(itertools.combinations(sorted(played), size))
            options = [(pool | set(e), 1.0 / len(extras)) for e in extras]
        for current, p_extra in options:
            subsets = list(itertools.combinations(sorted(current), num_selected))
            for s in subsets:
                recurse(
                    current - set(s),
                    played | set(s),
                    rounds + [frozenset(s)],
                    prob * p_extra / len(subsets),
                )

    recurse(set(range(num_clients)), set(), [], 1.0)
    return dist


def test_init_schedule_plays_everyone_with_algorithm1_distribution():
    k_all, n_sel, num = 5, 2, 24000
    keys = jax.random.split(jax.random.PRNGKey(0), num)
    schedules = np.asarray(jax.vmap(lambda k: init_schedule(k, k_all, n_sel))(keys))
    assert schedules.shape == (num, 3, 2)
    for sched in schedules[:200]:
        assert set(sched.ravel()) == set(range(k_all))
    exact = algorithm1_distribution(k_all, n_sel)
    assert len(exact) == 120 and math.isclose(sum(exact.values()), 1.0)
    observed = Counter(tuple(frozenset(r) for r in s.tolist()) for s in schedules)
    assert set(observed) <= set(exact)
    chi2 = sum((observed[o] - num * p) ** 2 / (num * p) for o, p in exact.items())
    # 119 degrees of freedom: mean 119, sd 15.4; 200 is beyond 5 sd.
    assert chi2 < 200


def test_cs_ucb_plays_schedule_then_top_index():
    sel = bandits.cs_ucb(4, 2)
    state = sel.init(jax.random.PRNGKey(3))
    everyone = jnp.ones((4,), bool)
    seen = np.zeros(4, bool)
    for t in (1, 2):
        dec, state = sel.select(state, RoundInput(jnp.int32(t), everyone), jax.random.PRNGKey(t))
        np.testing.assert_array_equal(
            np.flatnonzero(dec.selected), np.sort(np.asarray(state.schedule[t - 1]))
        )
        seen |= np.asarray(dec.selected)
        reward = jnp.array([0.9, 0.1, 0.8, 0.2])
        state = sel.update(state, dec, Feedback(dec.selected, reward, reward, dec.selected))
    assert seen.all()
    dec, _ = sel.select(state, RoundInput(jnp.int32(3), everyone), jax.random.PRNGKey(9))
    np.testing.assert_array_equal(np.asarray(dec.selected), [True, False, True, False])


def run_queue(sel, availability):
    state = sel.init(jax.random.PRNGKey(0))
    queues, chosen = [], []
    for t, avail in enumerate(availability, start=1):
        inp = RoundInput(jnp.int32(t), jnp.asarray(avail))
        dec, state = sel.select(state, inp, jax.random.PRNGKey(t))
        r = jnp.full((3,), 0.5)
        state = sel.update(state, dec, Feedback(dec.selected, r, r, dec.selected))
        queues.append(np.asarray(state.queue))
        chosen.append(int(np.flatnonzero(dec.selected)[0]))
    return np.asarray(queues), chosen


def test_queues_follow_eq27_on_hand_worked_sequence():
    sel = bandits.cs_ucb_q(3, 1, [0.5, 0.3, 0.2], beta=1.0)
    avail = [[1, 0, 0], [0, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    queues, chosen = run_queue(sel, np.asarray(avail, bool))
    # D(1) = 0; D(t) = max(D(t-1) + c - b(t-1), 0); beta = 1 picks the largest queue.
    expected = [
        [0.0, 0.0, 0.0],  # t=1, only client 0 available
        [0.0, 0.3, 0.2],  # t=2, only client 1
        [0.5, 0.0, 0.4],  # t=3, picks 0
        [0.0, 0.3, 0.6],  # t=4, picks 2
        [0.5, 0.6, 0.0],  # t=5, picks 1
    ]
    np.testing.assert_allclose(queues, expected, atol=1e-6)
    assert chosen == [0, 1, 0, 2, 1]
    literal = bandits.cs_ucb_q(3, 1, [0.5, 0.3, 0.2], beta=1.0, queue_from_first_round=True)
    queues, _ = run_queue(literal, np.asarray(avail, bool))
    np.testing.assert_allclose(queues[:2], [[0.5, 0.3, 0.2], [0.0, 0.6, 0.4]], atol=1e-6)


def test_group_round_robin_cycles_fixed_groups():
    sel = bandits.group_round_robin(20, 3)
    state = sel.init(jax.random.PRNGKey(0))
    everyone = jnp.ones((20,), bool)
    groups = []
    for t in range(1, 10):
        dec, state = sel.select(state, RoundInput(jnp.int32(t), everyone), None)
        groups.append(np.flatnonzero(dec.selected).tolist())
    assert groups[0] == [0, 1, 2] and groups[5] == [15, 16, 17]
    assert groups[6] == [0, 18, 19] and groups[7] == [0, 1, 2] and groups[8] == [3, 4, 5]


def test_lp_r_star_matches_closed_form_k3():
    # §6.3 of the spec: r* = 0.6 mu_1 + 0.39 mu_2 + 0.009 mu_3 + 0.001 r(empty).
    for mu in ([0.93928, 0.95822, 0.97067], [0.48066, 0.61459, 0.71592]):
        closed = 0.6 * mu[0] + 0.39 * mu[1] + 0.009 * mu[2] + 0.001
        value = fairness_lp.optimal_fair_value(mu, [0.6, 0.5, 0.4], 2, 0.9)
        assert value == pytest.approx(closed, abs=1e-7)  # means pass through float32


def test_heuristic_targets_by_hand():
    # §II.C with Fig. 4's sizes s = (1500, 1000, 500), N = 2: c_min may be up to
    # N s_min / sum s = 1/3; c_min = 0.2 gives c_k = (s_k / 500) 0.2.
    np.testing.assert_allclose(
        fairness_lp.heuristic_targets([1500, 1000, 500], 2, 0.2), [0.6, 0.4, 0.2]
    )
    # The smallest client takes c_min wherever it sits.
    np.testing.assert_allclose(
        fairness_lp.heuristic_targets([1000, 500, 1500], 2, 0.2), [0.4, 0.2, 0.6]
    )
    # The upper end sums to N: c = (1, 2/3, 1/3), on the boundary of feasibility.
    np.testing.assert_allclose(
        fairness_lp.heuristic_targets([1500, 1000, 500], 2, 1 / 3), [1.0, 2 / 3, 1 / 3]
    )
    with pytest.raises(ValueError, match=r"c_min must lie in \[0.0, 0.333"):
        fairness_lp.heuristic_targets([1500, 1000, 500], 2, 0.34)
    with pytest.raises(ValueError, match="sizes must be"):
        fairness_lp.heuristic_targets([1500, 0, 500], 2, 0.1)


def test_heuristic_targets_are_feasible_inside_the_range():
    rng = np.random.default_rng(0)
    sizes = rng.uniform(500, 1000, 6)
    top = 3 * sizes.min() / sizes.sum()
    mu = rng.uniform(0.3, 0.9, 6)
    for varphi in (0.25, 0.5, 0.75):
        c = fairness_lp.heuristic_targets(sizes, 3, varphi * top)
        # c_k = varphi N s_k / sum s: proportional to the sizes, summing to varphi N.
        np.testing.assert_allclose(c, varphi * 3 * sizes / sizes.sum(), rtol=1e-12)
        # LP 23 has a solution meeting them (it raises when infeasible), worth less than
        # the fairness-free optimum.
        r_star = fairness_lp.optimal_fair_value(mu, c, 3, 0.9)
        assert r_star <= fairness_lp.optimal_fair_value(mu, 0.0, 3, 0.9) + 1e-9
    # At the upper end (sum c = N) only always-available clients can meet the targets.
    c = fairness_lp.heuristic_targets(sizes, 3, top)
    assert fairness_lp.optimal_fair_value(mu, c, 3, 1.0) > 0.0
    with pytest.raises(ValueError, match="infeasible"):
        fairness_lp.optimal_fair_value(mu, c, 3, 0.9)


@pytest.mark.parametrize(
    "num_clients, num_selected, fairness",
    [(6, 3, 0.3), (8, 2, "shares"), (9, 2, "shares")],
)
def test_dual_r_star_matches_lp_on_small_instances(num_clients, num_selected, fairness):
    rng = np.random.default_rng(num_clients)
    mu = rng.uniform(0.3, 0.9, num_clients)
    if fairness == "shares":  # Fig. 7's targets: rho s_k / sum s, rho = 0.6
        fairness = 0.6 * rng.dirichlet(np.ones(num_clients))
    exact = fairness_lp.optimal_fair_value(mu, fairness, num_selected, 0.9)
    est = fairness_lp.optimal_fair_value_dual(mu, fairness, num_selected, 0.9, num_patterns=4096)
    # The cutting planes converge on the sampled dual: a certified gap of 1e-5.
    assert 0.0 <= est.gap <= 1e-5 and est.num_cuts < 2000
    # An upper bound in expectation (weak duality): at most 4 standard errors below; above,
    # 4 standard errors and the excess of the sampled minimiser (1e-3).
    assert exact - 4 * est.stderr < est.value < exact + 4 * est.stderr + 1e-3


def test_cs_ucb_regret_grows_logarithmically_on_stationary_arms():
    env = fedjax_sel.envs.bernoulli(6, 2, means=[0.9, 0.8, 0.3, 0.25, 0.2, 0.1])
    res = fedjax_sel.simulate(
        {"cs_ucb": bandits.cs_ucb(6, 2), "random": bandits.random(6, 2)},
        env,
        num_rounds=4000,
        num_trials=64,
        progress=None,
    )
    reg, _ = res.curve("cs_ucb", "cumulative_regret")
    rnd, _ = res.curve("random", "cumulative_regret")
    # Doubling T adds a constant to a logarithmic regret, doubles a linear one.
    assert (reg[3999] - reg[1999]) / (reg[1999] - reg[999]) < 1.3
    assert (rnd[3999] - rnd[1999]) / (rnd[1999] - rnd[999]) == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: bandits.cs_ucb_q(3, 2, [0.9, 0.9, 0.9]), "sum to 2.7"),
        (lambda: bandits.cs_ucb_q(3, 2, [0.6, 0.5, 0.4], availability=0.5), "exceeds the avail"),
        (lambda: bandits.cs_ucb_q(3, 1, [0.3, 0.3, 0.3], availability=0.5), "sum to 0.9"),
        (lambda: bandits.cs_ucb_q(3, 2, [0.2, 0.2, 0.2], beta=1.5), "beta"),
        (lambda: bandits.cs_ucb_q(3, 2, [0.2, 0.2, 0.2], beta=-0.1), "beta"),
        (lambda: wireless_latency(3, 2, deadline_s=0.0), "deadline_s"),
        (lambda: wireless_latency(3, 2, bandwidth_hz=-1.0), "bandwidth_hz"),
        (lambda: wireless_latency(3, 2, preset="paper"), "preset"),
        (lambda: wireless_latency(3, 4), "num_selected"),
        (lambda: fairness_lp.optimal_fair_value([0.5] * 3, [0.6, 0.6, 0.6], 1, 1.0), "sum to"),
    ],
)
def test_bad_input_raises_before_tracing(build, match):
    with pytest.raises(ValueError, match=match):
        build()
