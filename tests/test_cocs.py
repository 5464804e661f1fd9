"""COCS (`bandits.cocs`) and its environment (`envs.hierarchical`): Qu et al., TPDS 2022."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
from bandits.cocs import control_function, cube_index, exploration_exponent
from experiments.references.qu import assignment_milp
from fedjax_sel import envs
from fedjax_sel.envs.hierarchical import max_cohort
from fedjax_sel.ops import assignment as assign_ops
from fedjax_sel.results import Results
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


def test_vmapped_select_equals_each_trials_own_when_only_some_explore_or_exploit():
    # Exploration and exploitation run only in rounds where some trial of the batch needs
    # them (ops.where_needed): a batch mixing trials that explore only, exploit only, do
    # both, and have nothing in reach decides as each trial would alone.
    n, m, h = 6, 2, 2
    policy = bandits.cocs(n, num_servers=m, budget=2.5, cubes_per_dim=h, cost_step=0.5)
    keys = jax.random.split(jax.random.PRNGKey(4), 4)
    context = jax.random.uniform(keys[0], (4, n, m, 2))
    reach = jax.random.uniform(keys[1], (4, n, m)) < 0.7
    reach = reach.at[3].set(False)
    cost = 0.5 + jax.random.uniform(keys[2], (4, n))
    cube = cube_index(context, h)
    # Every pair explored (10 > K(t)) in trials 1 and 3, none in trial 0, half in trial 2.
    explored = jnp.array([0, 1, 1, 1])[:, None, None] * 10
    explored = explored * jnp.ones((4, n, m), jnp.int32)
    explored = explored.at[2, : n // 2].set(0)
    onehot = jax.nn.one_hot(cube, h * h, dtype=jnp.int32)
    counts = explored[..., None] * onehot
    successes = (jax.random.uniform(keys[3], (4, n, m, 1)) * counts).astype(jnp.int32)
    state = jax.vmap(policy.init)(keys)._replace(counts=counts, successes=successes)
    inputs = jax.vmap(lambda c, r, w: _input(5, c, r, w))(context, reach, cost)
    select_keys = jax.random.split(jax.random.PRNGKey(5), 4)
    batched, _ = jax.jit(jax.vmap(policy.select))(state, inputs, select_keys)
    for trial in range(4):
        one = jax.tree.map(lambda a, i=trial: a[i], (state, inputs, select_keys))
        alone, _ = jax.jit(policy.select)(*one)
        np.testing.assert_array_equal(batched.assignment[trial], alone.assignment)
    picked = np.asarray(batched.selected).sum(axis=1)
    assert picked[3] == 0 and np.all(picked[:3] > 0)


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


@pytest.mark.parametrize("horizon, cubes", [(3124, 5), (3125, 5), (3126, 6), (10**5, 10)])
def test_theory_cubes_are_exact_at_powers(horizon, cubes):
    # h_T = ceil(T^(1/5)) (alpha = 1, D = 2): a float root made it 6 at T = 3,125 and 11
    # at T = 10^5. The policy's tables hold h_T^D cells.
    policy = bandits.cocs(4, num_servers=1, cubes_per_dim=None, horizon=horizon)
    assert policy.init(jax.random.PRNGKey(0)).counts.shape == (4, 1, cubes**2)


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
    "policy", [bandits.cocs(4, num_servers=2), bandits.edge_linucb(4, num_servers=2)]
)
def test_contexts_outside_the_unit_cube_are_refused(policy, nothing_traced):
    state = policy.init(jax.random.PRNGKey(0))
    context = np.full((4, 2, 2), 0.5, np.float32)
    context[2, 1, 0] = 1.5
    inp = _input(1, context, np.ones((4, 2), bool), np.ones(4, np.float32))
    with (
        nothing_traced(),
        pytest.raises(ValueError, match=r"pair_context finite and in \[0.0, 1.0\]"),
    ):
        policy.select(state, inp, jax.random.PRNGKey(1))


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
    key = jax.random.PRNGKey(0)
    inp = jax.eval_shape(env.observe, jax.eval_shape(env.reset, key), 1, key)
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(policy.select, jax.eval_shape(policy.init, key), inp, key)


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"budget": 0.9}, "budget"),  # the cheapest client costs 0.5 x 2 MHz = 1
        ({"availability": 0.0}, "availability"),
        ({"context_dim": 3}, "context_dim"),
        ({"dataset": "emnist"}, "dataset"),
        ({"noise_figure_db": -1.0}, "noise_figure_db"),
        ({"pricing": "trial"}, "pricing"),
    ],
)
def test_bad_environment_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        envs.hierarchical(10, **kwargs)


def test_round_pricing_redraws_prices_and_keeps_every_other_draw():
    client = envs.hierarchical(20, pricing="client")
    per_round = envs.hierarchical(20, pricing="round")

    def rounds(env):
        state = env.reset(jax.random.PRNGKey(3))
        return jax.vmap(lambda t: env.observe(state, t, jax.random.PRNGKey(0)))(jnp.arange(1, 41))

    a, b = rounds(client), rounds(per_round)
    np.testing.assert_array_equal(a.connectivity, b.connectivity)
    np.testing.assert_array_equal(a.pair_context, b.pair_context)
    # cost = price x compute, and the compute (context 1) is the same in both.
    compute = 2.0 + 2.0 * np.asarray(a.pair_context[..., 0, 1])
    price_a = np.asarray(a.info["cost"]) / compute
    price_b = np.asarray(b.info["cost"]) / compute
    np.testing.assert_allclose(price_a, price_a[:1].repeat(40, 0), rtol=1e-5)
    assert np.all(np.ptp(price_b, axis=0) > 0.1)  # 40 draws of U[0.5, 2] per client
    assert price_b.min() >= 0.5 - 1e-5 and price_b.max() <= 2.0 + 1e-5


@pytest.mark.parametrize(
    "dataset, budget, servers, expected",
    [
        ("mnist", None, 3, 9),
        ("mnist", 5.0, 3, 15),
        ("mnist", 10.0, 2, 20),
        ("cifar10", None, 3, 30),
    ],
)
def test_max_cohort_bounds_every_feasible_decision(dataset, budget, servers, expected):
    assert max_cohort(dataset, budget, servers) == expected
    # Every client at the cheapest cost, in coverage of every ES: the bound is reached.
    cheapest = 0.5 * (2.0 if dataset == "mnist" else 8.0)
    b = budget or (3.5 if dataset == "mnist" else 40.0)
    taken, _ = assign_ops.max_cardinality(
        jnp.full((60,), cheapest), jnp.ones((60, servers), bool), jnp.full((servers,), b),
        jax.random.PRNGKey(1),
    )  # fmt: skip
    assert int(taken.sum()) == expected


NETWORK_ROUNDS = 200


def _network_rounds(linear, root):
    """Rounds t = 1..NETWORK_ROUNDS of one trial of two networks that differ only in the
    utility (vmapped over t, one program): the input, the state, the oracle's decision
    of each, whether `Env.feasible` accepts it and its stats, and the stats of every
    client at a covering ES (budgets ignored: the most pairs)."""

    def one(t):
        state = linear.reset(jax.random.PRNGKey(0))
        inp = linear.observe(state, t, jax.random.PRNGKey(0))
        server = jnp.argmax(inp.connectivity, axis=1).astype(jnp.int32)
        everyone = Decision(inp.available, jnp.where(inp.available, server, -1))
        key = jax.random.PRNGKey(0)
        out = {"input": inp, "state": state, "everyone": linear.step(state, inp, everyone, key)[2]}
        for name, env in (("linear", linear), ("root", root)):
            best = env.oracle(state, inp)
            out[name] = (best, env.feasible(state, inp, best), env.step(state, inp, best, key)[2])
        return out

    return jax.jit(jax.vmap(one))(jnp.arange(1, NETWORK_ROUNDS + 1))


@pytest.fixture(scope="module", params=["physical", "synthetic"])
def network(request):
    """(linear env, sqrt env, `_network_rounds`) of Qu et al.'s network, N = 50, M = 3."""
    kwargs = dict(generator=request.param, deadline_s=2.0)
    linear = envs.hierarchical(50, utility="linear", **kwargs)
    root = envs.hierarchical(50, utility="sqrt", **kwargs)
    return linear, root, _network_rounds(linear, root)


def test_success_frequency_matches_the_exact_probability(network):
    _, _, rounds = network
    stats = rounds["everyone"]
    successes = np.asarray(stats.extras["successes"], np.float64)
    expected = np.asarray(stats.expected_reward, np.float64)
    # Var(sum X) <= E[sum X] per round (Bernoulli variances), independent rounds.
    sd = np.sqrt(expected.sum())
    assert abs(successes.sum() - expected.sum()) < 4 * sd, (successes.sum(), expected.sum())
    context = np.asarray(rounds["input"].pair_context)
    assert context.shape == (NETWORK_ROUNDS, 50, 3, 2)
    assert context.min() >= 0 and context.max() <= 1


def test_oracle_is_feasible_and_sqrt_utility_has_the_same_argmax(network):
    _, _, rounds = network
    (best, accepted, stats), (best_root, accepted_root, stats_root) = (
        rounds["linear"],
        rounds["root"],
    )
    assert np.all(accepted) and np.all(accepted_root)
    # sqrt is increasing in the linear count: one argmax, and the utility's square root.
    np.testing.assert_array_equal(best.assignment, best_root.assignment)
    np.testing.assert_allclose(
        stats_root.oracle_reward, np.sqrt(np.asarray(stats.oracle_reward) / 3), rtol=1e-6
    )
    inp = rounds["input"]
    pairs = np.asarray(best.assignment)[..., None] == np.arange(3)
    assert not np.any(pairs & (np.asarray(inp.connectivity) == 0))
    spent = np.einsum("tnm,tn->tm", pairs, np.asarray(inp.info["cost"]))
    assert np.all(spent <= 3.5 * (1 + 1e-6))
    assert np.all(np.asarray(best.selected).sum(axis=1) <= max_cohort("mnist", 3.5, 3))


@pytest.mark.parametrize("network", ["synthetic"], indirect=True)
def test_regret_reference_is_the_better_of_the_solver_and_the_decision(network):
    """Pseudo-regret against max(solver, decision): the exact optimum of P2 (the integer
    programme) has none, although it beats the solver in some rounds; an empty decision
    is charged the solver's value; dropping one client costs that pair's p."""
    linear, _, rounds = network
    count = 40  # rounds, each with its integer programme
    inp, state, (best, _, best_stats) = jax.tree.map(
        lambda x: x[:count], (rounds["input"], rounds["state"], rounds["linear"])
    )
    context = np.asarray(inp.pair_context)
    p = np.clip(state.intercept + np.sum(state.slope * context, -1), 0.0, 1.0)
    cost, reach = np.asarray(inp.info["cost"]), np.asarray(inp.connectivity) > 0
    optimum = np.stack(
        [assignment_milp(p[t], cost[t], reach[t], np.full(3, 3.5)) for t in range(count)]
    )
    solver_value = np.asarray(best_stats.oracle_reward)
    optimum_value = np.sum(np.where(optimum, p, 0.0), axis=(1, 2))
    first = np.argmax(np.asarray(best.selected), axis=1)
    dropped = np.asarray(best.selected) & (np.arange(50) != first[:, None])
    decisions = [
        Decision(
            np.any(optimum, 2),
            np.where(np.any(optimum, 2), np.argmax(optimum, 2), -1).astype(np.int32),
        ),
        Decision(np.zeros((count, 50), bool), np.full((count, 50), -1, np.int32)),
        Decision(dropped, np.asarray(best.assignment)),
    ]
    batch = jax.tree.map(lambda *x: np.concatenate(x), *decisions)
    tiled = jax.tree.map(lambda x: np.concatenate([x] * 3), (state, inp))
    step = jax.jit(jax.vmap(linear.step, in_axes=(0, 0, 0, None)))
    _, _, stats = step(*tiled, batch, jax.random.PRNGKey(0))
    expected = np.asarray(stats.expected_reward).reshape(3, count)
    reference = np.asarray(stats.oracle_reward).reshape(3, count)
    accepted = jax.vmap(linear.feasible)(*tiled, batch)
    assert np.all(np.asarray(accepted))

    np.testing.assert_allclose(expected[0], optimum_value, rtol=1e-5)
    np.testing.assert_array_equal(reference[0], expected[0])  # no regret
    assert np.all(solver_value <= optimum_value + 1e-5)
    assert np.any(solver_value < optimum_value - 1e-3), (solver_value, optimum_value)
    np.testing.assert_array_equal(expected[1], 0.0)
    np.testing.assert_allclose(reference[1], solver_value, rtol=1e-6)
    np.testing.assert_allclose(reference[2], solver_value, rtol=1e-6)
    lost = p[np.arange(count), first, np.asarray(best.assignment)[np.arange(count), first]]
    np.testing.assert_allclose(reference[2] - expected[2], lost, rtol=1e-4, atol=1e-6)


def test_feasible_checks_budgets_coverage_and_one_server_per_client():
    env = envs.hierarchical(4, num_servers=2, budget=3.0, generator="synthetic")
    reach = jnp.array([[True, True], [True, False], [False, True], [True, True]])
    inp = _input(1, jnp.zeros((4, 2, 2)), reach, jnp.array([1.0, 2.0, 1.5, 1.5]))

    def accepted(selected, assignment):
        decision = Decision(jnp.array(selected), jnp.array(assignment, jnp.int32))
        return bool(env.feasible(None, inp, decision))

    assert accepted([True, True, True, False], [0, 0, 1, -1])  # 3.0 and 1.5 of 3.0
    assert accepted([False] * 4, [-1] * 4)
    assert accepted([True, False, False, False], [0, 1, 1, 5])  # unselected: ignored
    assert not accepted([True, True, False, True], [0, 0, -1, 0])  # 4.5 > 3.0 (10b)
    assert not accepted([False, True, False, False], [-1, 1, -1, -1])  # not covered (10c)
    assert not accepted([True, False, False, False], [-1, -1, -1, -1])  # no server (10d)
    assert not accepted([True, False, False, False], [2, -1, -1, -1])  # no such server
    with pytest.raises(ValueError, match="assignment"):
        env.feasible(None, inp, Decision(jnp.ones(4, bool)))


def _play(policies: dict, env, rounds: int, trials: int):
    """Every policy against the same draws of `env`, one program (vmapped over trials,
    scanned over rounds): per policy, the per-trial cumulative expected utility
    (f64[trials], the sum of the decisions' success probabilities: no Bernoulli noise)
    and the mean cumulative pseudo-regret over trials (f64[rounds])."""
    names = list(policies)

    def trial(key):
        reset_key, init_key, run_key = jax.random.split(key, 3)
        env_state = env.reset(reset_key)
        states = {p: policies[p].init(jax.random.fold_in(init_key, i)) for i, p in enumerate(names)}

        def round_fn(states, t):
            obs_key, step_key, policy_key = jax.random.split(jax.random.fold_in(run_key, t), 3)
            inp = env.observe(env_state, t, obs_key)
            new, out = {}, {}
            for i, p in enumerate(names):
                selector = policies[p]
                seen = (
                    inp._replace(oracle=env.oracle(env_state, inp)) if selector.privileged else inp
                )
                decision, state = selector.select(
                    states[p], seen, jax.random.fold_in(policy_key, i)
                )
                feedback, _, stats = env.step(env_state, inp, decision, step_key)
                new[p] = selector.update(state, decision, feedback)
                out[p] = (stats.expected_reward, stats.oracle_reward - stats.expected_reward)
            return new, out

        _, out = jax.lax.scan(round_fn, states, jnp.arange(1, rounds + 1))
        return {p: (jnp.sum(u), jnp.cumsum(r)) for p, (u, r) in out.items()}

    keys = jax.random.split(jax.random.PRNGKey(0), trials)
    out = jax.jit(jax.vmap(trial))(keys)
    return {
        p: (np.asarray(u, np.float64), np.asarray(r, np.float64).mean(0))
        for p, (u, r) in out.items()
    }


def test_regret_grows_more_slowly_than_random_on_the_synthetic_generator():
    # A small instance where the theorem's K(t) lets exploitation start within T: the
    # growth exponent of COCS's mean cumulative regret (`Results.growth_exponent`: the
    # last half's rate against the quarter before's, 1 for a linear regret whatever its
    # offset) is below 1 and below random's by 0.1 (0.92 against 1.09 at 8 trials). A
    # log-log slope, 0.71 here, is below 1 for a linear regret with an offset too.
    env = envs.hierarchical(3, num_servers=1, generator="synthetic", budget=3.5)
    policies = {
        "cocs": bandits.cocs(3, num_servers=1, cubes_per_dim=2),
        "random": bandits.edge_random(3, num_servers=1),
    }
    played = _play(policies, env, 3000, 8)
    curves = {p: {"cumulative_regret": {"mean": r, "std": 0 * r}} for p, (_, r) in played.items()}
    res = Results(config={}, curves=curves, totals={}, selection_fraction={})
    growth = {p: res.growth_exponent(p) for p in policies}
    assert growth["cocs"] < 1.0 and growth["cocs"] < growth["random"] - 0.1, growth


def test_cocs_beats_the_baselines_on_a_small_bandit_setting():
    # N = 10 clients, M = 2 ESs, synthetic pair-specific p(phi): COCS with h_T = 2 and a
    # smaller K(t) (the theorem's keeps it exploring past T, spec A4) against LinUCB
    # (one shared model), per-pair CUCB and random, on the same draws: the per-trial
    # differences of cumulative expected utility, with 95% intervals (t quantile, 15
    # d.o.f.). The closest, COCS - CUCB, was 5.5 standard errors above 0 at 24 trials.
    n, m, trials = 10, 2, 16
    env = envs.hierarchical(n, num_servers=m, generator="synthetic")
    policies = {
        "oracle": bandits.oracle(),
        "cocs": bandits.cocs(n, num_servers=m, cubes_per_dim=2, exploration_scale=0.02),
        "linucb": bandits.edge_linucb(n, num_servers=m),
        "cucb": bandits.cucb_base(n, num_servers=m),
        "random": bandits.edge_random(n, num_servers=m),
    }
    played = _play(policies, env, 1500, trials)
    utility = {p: u for p, (u, _) in played.items()}
    t95 = 2.131

    def interval(diff):
        half = t95 * diff.std(ddof=1) / np.sqrt(diff.size)
        return diff.mean() - half, diff.mean() + half

    assert interval(utility["oracle"] - utility["cocs"])[0] > 0
    for other in ("linucb", "cucb", "random"):
        low, high = interval(utility["cocs"] - utility[other])
        assert low > 0, (other, low, high)
