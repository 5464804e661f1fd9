"""COCS (`bandits.cocs`) and its environment (`envs.hierarchical`): Qu et al., TPDS 2022."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from bandits.cocs import control_function, cube_index, exploration_exponent
from fedjax_sel import envs
from fedjax_sel.types import Decision, Feedback, RoundInput


def test_cube_index_at_the_boundaries():
    phi = jnp.array([[0.0, 0.0], [1.0, 1.0], [0.2, 0.0], [0.999, 0.0], [1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(cube_index(phi, 5), [0, 24, 1, 4, 4, 20])
    np.testing.assert_array_equal(cube_index(phi, 1), [0] * 6)


def test_control_function_and_exponents():
    # K(t) = t^0.4 ln t (spec §3.1: K(10) = 5.8, K(100) = 29.1, K(1000) = 109.5).
    k = [float(control_function(t, 0.4, 1.0)) for t in (1, 10, 100, 1000)]
    np.testing.assert_allclose(k, [0.0, 5.7838, 29.0567, 109.4805], rtol=1e-4)
    assert exploration_exponent("strongly_convex", 1.0, 2) == pytest.approx(0.4)
    assert exploration_exponent("nonconvex", 1.0, 2) == pytest.approx(0.4)
    assert exploration_exponent("nonconvex_printed", 1.0, 2) == pytest.approx(0.8)


def _input(t, context, reach, cost):
    n = cost.shape[0]
    return RoundInput(
        t=jnp.int32(t),
        available=jnp.ones(n, bool),
        connectivity=reach.astype(jnp.float32),
        pair_context=context,
        info={"cost": cost},
    )


def test_counters_move_only_for_selected_pairs_at_this_rounds_cube():
    n, m, h = 4, 2, 2
    policy = bandits.cocs(n, num_servers=m, budget=2.5, cubes_per_dim=h, cost_step=0.5)
    state = policy.init(jax.random.PRNGKey(0))
    context = jnp.array(
        [[[0.1, 0.1], [0.9, 0.1]], [[0.1, 0.9], [0.9, 0.9]], [[0.5, 0.5], [0.0, 1.0]],
         [[1.0, 1.0], [0.2, 0.7]]]
    )  # fmt: skip
    reach = jnp.ones((n, m), bool)
    cost = jnp.array([1.0, 1.0, 1.0, 1.0])
    decision, state = policy.select(state, _input(1, context, reach, cost), jax.random.PRNGKey(1))
    # Round 1: everything is under-explored; two clients per server fit the budget 2.5.
    assert int(decision.selected.sum()) == 4
    success = jnp.array([True, False, True, False])
    feedback = Feedback(
        observed=decision.selected,
        reward=success.astype(jnp.float32),
        latency=jnp.zeros(n),
        success=success,
    )
    new = policy.update(state, decision, feedback)
    cube = np.asarray(cube_index(context, h))
    want_counts = np.zeros((n, m, h * h), np.int32)
    want_successes = np.zeros_like(want_counts)
    for client, server in enumerate(np.asarray(decision.assignment)):
        if server >= 0:
            want_counts[client, server, cube[client, server]] = 1
            want_successes[client, server, cube[client, server]] = bool(success[client])
    np.testing.assert_array_equal(new.counts, want_counts)
    np.testing.assert_array_equal(new.successes, want_successes)


def _one_slot_run(rounds, means, scale=1.0, seed=0):
    """P pairs on one server that take one client per round: (exploring flags, counts)."""
    p = len(means)
    policy = bandits.cocs(
        p, num_servers=1, budget=1.5, context_dim=1, cubes_per_dim=1,
        exploration_scale=scale, cost_step=0.5,
    )  # fmt: skip
    means = jnp.asarray(means)

    def round_fn(carry, t):
        state, key = carry
        key, select_key, outcome_key = jax.random.split(key, 3)
        inp = _input(t, jnp.zeros((p, 1, 1)), jnp.ones((p, 1), bool), jnp.ones(p))
        decision, state = policy.select(state, inp, select_key)
        success = jax.random.uniform(outcome_key, (p,)) < means
        feedback = Feedback(decision.selected, success.astype(jnp.float32), jnp.zeros(p), success)
        state = policy.update(state, decision, feedback)
        return (state, key), (state.exploring, decision.selected.sum())

    init = (policy.init(jax.random.PRNGKey(seed)), jax.random.PRNGKey(seed))
    (state, _), (exploring, selected) = jax.jit(
        lambda c: jax.lax.scan(round_fn, c, jnp.arange(1, rounds + 1))
    )(init)
    return np.asarray(exploring), np.asarray(selected), np.asarray(state.counts)


def test_exploration_rounds_fall_as_the_control_function_predicts():
    rounds, means = 2000, [0.9, 0.5, 0.2]
    p = len(means)
    exploring, selected, counts = _one_slot_run(rounds, means)
    assert np.all(selected == 1)
    t = np.arange(1, rounds + 1)
    z = exploration_exponent("strongly_convex", 1.0, 1)  # 2 alpha / (3 alpha + D) = 0.5
    k = np.floor(t**z * np.log(t))
    # Every pair must be selected floor(K(t)) + 1 times before round t can exploit.
    np.testing.assert_array_equal(exploring[t - 1 < p * (k + 1)], True)
    # Each exploration round raises an under-explored count, at most floor(K(T)) + 1 each.
    assert exploring.sum() <= p * (k[-1] + 1)
    # So the fraction of exploring rounds falls like K(t) / t.
    first, last = exploring[: rounds // 2].mean(), exploring[rounds // 2 :].mean()
    assert last < first
    assert exploring.sum() >= np.sum(t - 1 < p * (k + 1))
    # The worse pairs are played only to explore: floor(K) + 1 times at most.
    totals = counts.sum(axis=(1, 2))
    assert totals[0] > totals[1:].max() and np.all(totals[1:] <= k[-1] + 1), totals


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"cubes_per_dim": 0}, "cubes_per_dim"),
        ({"budget": -1.0}, "budget"),
        ({"cubes_per_dim": None}, "horizon"),
        ({"counter_scope": "cell"}, "counter_scope"),
        ({"theory": "convex"}, "theory"),
        ({"solver": "cplex"}, "solver"),
    ],
)
def test_bad_policy_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        bandits.cocs(10, **kwargs)


@pytest.mark.parametrize(
    "policy, message",
    [
        (bandits.cocs(9, num_servers=3), "num_clients=9"),
        (bandits.cocs(10, num_servers=2), "num_servers=2"),
        (bandits.cocs(10, num_servers=3, context_dim=4), "context_dim=4"),
        (bandits.edge_linucb(10, num_servers=3, context_dim=3), "context_dim=3"),
        (bandits.cucb_base(11), "num_clients=11"),
    ],
)
def test_a_policy_built_for_another_environment_fails_while_traced(policy, message):
    env = envs.hierarchical(10, num_servers=3, generator="synthetic")
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(
            policy.select, policy.init(jax.random.PRNGKey(0)), inp, jax.random.PRNGKey(2)
        )


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"budget": 0.9}, "budget"),  # the cheapest client costs 0.5 x 2 MHz = 1
        ({"availability": 0.0}, "availability"),
        ({"context_dim": 3}, "context_dim"),
        ({"dataset": "emnist"}, "dataset"),
        ({"noise_figure_db": -1.0}, "noise_figure_db"),
    ],
)
def test_bad_environment_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        envs.hierarchical(10, **kwargs)


def _rounds(env, rounds, seed=0):
    """Per round: (input, oracle decision, stats) of one trial, each client at a covering ES."""

    def one(t):
        state = env.reset(jax.random.PRNGKey(seed))
        inp = env.observe(state, t, jax.random.PRNGKey(0))
        best = env.oracle(state, inp)
        server = jnp.argmax(inp.connectivity, axis=1).astype(jnp.int32)
        everyone = Decision(inp.available, jnp.where(inp.available, server, -1))
        _, _, stats = env.step(state, inp, everyone, jax.random.PRNGKey(0))
        return inp, best, stats

    return jax.jit(jax.vmap(one))(jnp.arange(1, rounds + 1))


@pytest.mark.parametrize("generator", ["physical", "synthetic"])
def test_success_frequency_matches_the_exact_probability(generator):
    env = envs.hierarchical(50, generator=generator, deadline_s=2.0)
    inp, _, stats = _rounds(env, 400)
    successes = np.asarray(stats.extras["successes"], np.float64)
    expected = np.asarray(stats.expected_reward, np.float64)
    # Var(sum X) <= E[sum X] per round (Bernoulli variances), independent rounds.
    sd = np.sqrt(expected.sum())
    assert abs(successes.sum() - expected.sum()) < 4 * sd, (successes.sum(), expected.sum())
    context = np.asarray(inp.pair_context)
    assert context.shape == (400, 50, 3, 2) and context.min() >= 0 and context.max() <= 1


def test_oracle_is_feasible_and_sqrt_utility_has_the_same_argmax():
    linear = envs.hierarchical(12, num_servers=2, budget=3.0, utility="linear")
    root = envs.hierarchical(12, num_servers=2, budget=3.0, utility="sqrt")
    inp, best, stats = _rounds(linear, 20)
    _, best_root, stats_root = _rounds(root, 20)
    # sqrt is increasing in the linear count: one argmax, and the utility's square root.
    np.testing.assert_array_equal(best.assignment, best_root.assignment)
    np.testing.assert_allclose(
        stats_root.oracle_reward, np.sqrt(np.asarray(stats.oracle_reward) / 2), rtol=1e-6
    )
    cost = np.asarray(inp.info["cost"])
    pairs = np.asarray(best.assignment)[..., None] == np.arange(2)
    assert not np.any(pairs & (np.asarray(inp.connectivity) == 0))
    assert np.all(np.einsum("tnm,tn->tm", pairs, cost) <= 3.0 + 1e-5)


def test_regret_grows_sublinearly_on_the_synthetic_generator():
    # A small instance where the theorem's K(t) lets exploitation start within T: the
    # log-log slope of the mean cumulative regret over the second half is below 1.
    env = envs.hierarchical(3, num_servers=1, generator="synthetic", budget=3.5)
    policy = bandits.cocs(3, num_servers=1, cubes_per_dim=2)
    res = fedjax_sel.simulate({"cocs": policy}, env, 3000, 8, seed=0, progress=None)
    regret, _ = res.curve("cocs", "cumulative_regret")
    t = np.arange(1, regret.size + 1)
    half = slice(regret.size // 2, None)
    slope = np.polyfit(np.log(t[half]), np.log(regret[half]), 1)[0]
    assert 0 < slope < 1, slope


def test_cocs_beats_the_baselines_on_a_small_bandit_setting():
    # N = 10 clients, M = 2 ESs, synthetic pair-specific p(phi): COCS with h_T = 2 and a
    # smaller K(t) (the theorem's keeps it exploring past T, spec A4) against LinUCB
    # (one shared model), per-pair CUCB and random, on the same draws: the per-trial
    # differences of cumulative utility, with 95% intervals (t quantile, 23 d.o.f.).
    n, m, trials = 10, 2, 24
    env = envs.hierarchical(n, num_servers=m, generator="synthetic")
    policies = {
        "oracle": bandits.oracle(),
        "cocs": bandits.cocs(n, num_servers=m, cubes_per_dim=2, exploration_scale=0.02),
        "linucb": bandits.edge_linucb(n, num_servers=m),
        "cucb": bandits.cucb_base(n, num_servers=m),
        "random": bandits.edge_random(n, num_servers=m),
    }
    res = fedjax_sel.simulate(policies, env, 1500, trials, seed=0, progress=None)
    utility = {p: np.asarray(res.totals[p]["cumulative_reward"]) for p in policies}
    t95 = 2.07

    def interval(diff):
        half = t95 * diff.std(ddof=1) / np.sqrt(diff.size)
        return diff.mean() - half, diff.mean() + half

    assert interval(utility["oracle"] - utility["cocs"])[0] > 0
    for other in ("linucb", "cucb", "random"):
        low, high = interval(utility["cocs"] - utility[other])
        assert low > 0, (other, low, high)
