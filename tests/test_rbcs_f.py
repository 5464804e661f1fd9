"""RBCS-F (Huang et al., IEEE TPDS 2021): kernels, estimator, queues and policy claims."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, ops
from fedjax_sel.ops import latency

N, M, BETA = 40, 8, 0.15


# ---------------------------------------------------------------------------------------
# The prefix form of Algorithm 1 against brute force and against the paper's loop.


def _all_subsets(n):
    return np.array(list(itertools.product([False, True], repeat=n)), bool)  # [2^n, n]


def _brute_force(cost, value, mask, k, weight):
    """f64[B]: min over feasible cohorts of weight * max cost - sum value, per instance."""
    subsets = _all_subsets(cost.shape[1])[None]  # [1, 2^n, n]
    size = np.minimum(k, mask.sum(1))[:, None]
    ok = (subsets.sum(2) == size) & ~np.any(subsets & ~mask[:, None], axis=2)
    worst = np.max(np.where(subsets, cost[:, None], 0.0), axis=2)
    total = np.sum(np.where(subsets, value[:, None], 0.0), axis=2)
    return np.min(np.where(ok, weight[:, None] * worst - total, np.inf), axis=1)


def _objectives(selected, cost, value, weight):
    """f64[B]: the P4 objective of each instance's selection (0 max when empty)."""
    worst = np.max(np.where(selected, cost, 0.0), axis=1)
    return weight * worst - np.sum(np.where(selected, value, 0.0), axis=1)


def _objective(selected, cost, value, weight):
    worst = np.max(np.where(selected, cost, 0.0)) if selected.any() else 0.0
    return weight * worst - np.sum(np.where(selected, value, 0.0))


def _algorithm_1(cost, value, mask, k, weight):
    """Algorithm 1 of the paper, line by line (descending-Z order, index tie-break)."""
    available = np.flatnonzero(mask)
    size = min(k, available.size)
    if size == 0:
        return 0.0
    by_value = available[np.argsort(-value[available], kind="stable")]
    best = np.inf
    for n_max in available:
        cohort = []
        for n in by_value:
            if cost[n] <= cost[n_max]:
                cohort.append(n)
            if len(cohort) == size:
                objective = weight * cost[cohort].max() - value[cohort].sum()
                best = min(best, objective)
                break
    return best


def _instances(rng, count, n, grid):
    """Random P4 instances; `grid` puts every number on a coarse dyadic grid (ties,
    exact float32 arithmetic), otherwise continuous."""
    if grid:
        cost = rng.integers(0, 5, (count, n)) / 4.0
        value = rng.integers(0, 4, (count, n)) / 2.0
        weight = rng.choice([0.0, 0.5, 1.0, 2.0, 8.0], count)
    else:
        cost = rng.exponential(1.0, (count, n))
        value = rng.exponential(1.0, (count, n))
        weight = rng.exponential(1.0, count)
    p = rng.uniform(0.0, 1.0, (count, 1))
    mask = rng.uniform(size=(count, n)) < p  # from nearly none to all available
    return cost.astype(np.float32), value.astype(np.float32), mask, weight.astype(np.float32)


_solve = jax.jit(
    jax.vmap(ops.prefix_max_cost_top_k, in_axes=(0, 0, 0, None, 0, 0)), static_argnums=3
)


@pytest.mark.parametrize("n,k", [(6, 1), (7, 4), (8, 3), (8, 6)])
def test_prefix_form_equals_brute_force(n, k):
    rng = np.random.default_rng(10 * n + k)
    count = 800
    tied = _instances(rng, count // 2, n, grid=True)
    smooth = _instances(rng, count // 2, n, grid=False)
    cost, value, mask, weight = (np.concatenate(x) for x in zip(tied, smooth, strict=True))
    selected = np.asarray(
        _solve(cost, value, mask, k, weight, jax.random.split(jax.random.key(n), count))
    )
    # Feasibility (3)-(4): inside the available set, exactly min(k, available) clients.
    assert not np.any(selected & ~mask)
    np.testing.assert_array_equal(selected.sum(1), np.minimum(k, mask.sum(1)))
    assert np.any(mask.sum(1) == 0) and (k == 1 or np.any((mask.sum(1) < k) & (mask.sum(1) > 0)))
    c64, v64, w64 = (x.astype(np.float64) for x in (cost, value, weight))
    ours = _objectives(selected, c64, v64, w64)
    best = _brute_force(c64, v64, mask, k, w64)
    # On the dyadic grid float32 arithmetic is exact, so the optimum must be hit exactly.
    half = count // 2
    np.testing.assert_array_equal(ours[:half], best[:half])
    np.testing.assert_allclose(ours[half:], best[half:], rtol=0, atol=1e-5)


def test_prefix_counts_by_product_equal_the_cumulative_sum(monkeypatch):
    # Up to `_PREFIX_PRODUCT_MAX_CLIENTS` the prefix counts are an int8 product; beyond,
    # the cumulative sum that defines them: the same cohorts, ties and all.
    rng = np.random.default_rng(5)
    n, k, count = 12, 5, 400
    cost, value, mask, weight = _instances(rng, count, n, grid=True)
    keys = jax.random.split(jax.random.key(4), count)
    solve = lambda: np.asarray(  # noqa: E731
        jax.jit(
            jax.vmap(ops.prefix_max_cost_top_k, in_axes=(0, 0, 0, None, 0, 0)), static_argnums=3
        )(cost, value, mask, k, weight, keys)
    )
    product = solve()
    monkeypatch.setattr(latency, "_PREFIX_PRODUCT_MAX_CLIENTS", 0)
    np.testing.assert_array_equal(solve(), product)


def test_prefix_form_equals_algorithm_1():
    rng = np.random.default_rng(7)
    n, k, count = 12, 5, 300
    cost, value, mask, weight = _instances(rng, count, n, grid=True)
    selected = np.asarray(
        _solve(cost, value, mask, k, weight, jax.random.split(jax.random.key(3), count))
    )
    c64, v64, w64 = (x.astype(np.float64) for x in (cost, value, weight))
    ours = _objectives(selected, c64, v64, w64)
    paper = [_algorithm_1(c64[i], v64[i], mask[i], k, w64[i]) for i in range(count)]
    np.testing.assert_array_equal(ours, paper)


@pytest.mark.parametrize(
    "weight,expected",
    [
        # {1, 2}: 1 * 2 - 6 = -4 beats {0, 1}: 3 - 5 = -2 and {0, 2}: 3 - 1 = 2.
        (1.0, [False, True, True, False]),
        # Weight 0: only the values count; client 3 (value 9) is unavailable.
        (0.0, [False, True, True, False]),
        # Weight 0.1 and a big value on the slow client 0: {0, 1}: 0.3 - 25 wins.
        (0.1, [True, True, False, False]),
    ],
)
def test_prefix_form_hand_worked(weight, expected):
    cost = np.array([[3.0, 1.0, 2.0, 0.5]], np.float32)
    value = np.array([[0.0, 5.0, 1.0, 9.0]], np.float32)
    if weight == 0.1:
        value[0, 0] = 20.0
    mask = np.array([[True, True, True, False]])
    sel = _solve(cost, value, mask, 2, np.float32([weight]), jax.random.split(jax.random.key(0), 1))
    np.testing.assert_array_equal(sel[0], expected)


def test_prefix_form_breaks_value_ties_uniformly():
    # All values and costs equal (round 1 of RBCS-F): every 3-subset of the 5 available
    # clients is optimal; each available client must be chosen with probability 3/5.
    n, k, draws = 8, 3, 4000
    mask = jnp.array([True, True, False, True, True, False, True, False])
    keys = jax.random.split(jax.random.PRNGKey(11), draws)
    zeros = jnp.zeros((n,))
    sel = jax.jit(jax.vmap(lambda key: ops.prefix_max_cost_top_k(zeros, zeros, mask, k, 1.0, key)))(
        keys
    )
    freq = np.asarray(sel).mean(0)
    np.testing.assert_array_equal(freq[~np.asarray(mask)], 0.0)
    sd = np.sqrt(0.6 * 0.4 / draws)
    np.testing.assert_allclose(freq[np.asarray(mask)], 0.6, atol=4.5 * sd)


# ---------------------------------------------------------------------------------------
# Sherman-Morrison and the ridge estimator.


def test_sherman_morrison_equals_direct_inverse():
    rng = np.random.default_rng(0)
    n, d, steps = 6, 3, 150
    gram = np.broadcast_to(np.eye(d), (n, d, d)).copy()
    inverse = jnp.asarray(gram, jnp.float32)
    update = jax.jit(ops.sherman_morrison_update)
    for _ in range(steps):
        c = rng.uniform([0.5, 0.0, 5.0], [2.0, 1.0, 10.0], (n, d))
        c[:, 1] = rng.integers(0, 2, n)
        mask = rng.uniform(size=n) < 0.6
        gram[mask] += c[mask, :, None] * c[mask, None, :]
        inverse = update(inverse, jnp.asarray(c, jnp.float32), jnp.asarray(mask))
    direct = np.linalg.inv(gram)
    # float32 rank-one updates: relative error a few ulps times the condition number.
    scale = np.abs(direct).max(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(np.asarray(inverse) / scale, direct / scale, atol=2e-4)
    np.testing.assert_array_equal(np.asarray(inverse), np.swapaxes(np.asarray(inverse), 1, 2))


def _rollout(selector, env, num_rounds, seed=0):
    """Plays `num_rounds` rounds of one trial; returns per-round arrays and final states."""

    def body(carry, t):
        env_state, state = carry
        k_obs, k_step, k_pol = jax.random.split(jax.random.fold_in(jax.random.key(seed), t), 3)
        inp = env.observe(env_state, t, k_obs)
        decision, state = selector.select(state, inp, k_pol)
        feedback, env_state, _ = env.step(env_state, inp, decision, k_step)
        state = selector.update(state, decision, feedback)
        out = (
            decision.selected,
            inp.available,
            inp.context,
            feedback.latency,
            state.queue,
            env_state.queue,
        )
        return (env_state, state), out

    @jax.jit
    def run():
        init = (env.reset(jax.random.key(seed)), selector.init(jax.random.key(seed + 1)))
        return jax.lax.scan(body, init, jnp.arange(1, num_rounds + 1))

    (env_state, state), out = run()
    return env_state, state, [np.asarray(x) for x in out]


def test_ridge_estimate_equals_direct_solve():
    env = envs.exchange_time()
    lam = 2.0
    _, state, (x, _, c, tau, _, _) = _rollout(bandits.rbcs_f(N, M, ridge=lam), env, 250)
    theta_hat = np.einsum("nij,nj->ni", state.inverse, state.moment)
    for n in range(N):
        d_n = c[x[:, n], n].astype(np.float64)  # eq. (16): one row per past pull
        y_n = tau[x[:, n], n].astype(np.float64)
        direct = np.linalg.solve(d_n.T @ d_n + lam * np.eye(3), d_n.T @ y_n)  # eq. (17)
        err = np.abs(theta_hat[n] - direct)
        assert np.all(err <= 2e-3 * (1.0 + np.abs(direct))), (n, theta_hat[n], direct)
    # Eq. (19) by hand, on contexts of the last round, with and without the clip.
    gram_inv = [
        np.linalg.inv(c[x[:, n], n].astype(np.float64).T @ c[x[:, n], n] + lam * np.eye(3))
        for n in range(N)
    ]
    last = c[-1].astype(np.float64)
    for clip in (True, False):
        ours = np.asarray(bandits.lower_confidence_bound(state, jnp.asarray(c[-1]), 30.0, clip))
        width = np.sqrt([last[n] @ gram_inv[n] @ last[n] for n in range(N)])
        hand = np.einsum("nd,nd->n", last, theta_hat.astype(np.float64)) - 30.0 * width
        hand = np.maximum(hand, 0.0) if clip else hand
        np.testing.assert_allclose(ours, hand, rtol=0, atol=2e-3 * (1.0 + np.abs(hand)).max())
    assert not np.all(hand >= 0.0)  # the clip mattered


def test_theory_exploration_matches_lemma_1():
    # log2, delta = 0.05, R = K = 19, S = sqrt(18), L = sqrt(105): alpha_1 ~ 95 (spec).
    alpha = bandits.theory_exploration(1, 3, 1.0, 0.05, 19.0, np.sqrt(18.0), np.sqrt(105.0))
    hand = 19.0 * np.sqrt(3.0 * np.log(106.0 / 0.05)) + np.sqrt(18.0)
    np.testing.assert_allclose(alpha, hand, rtol=1e-6)
    assert 95.0 < hand < 96.0


def test_ridge_estimates_converge_to_true_coefficients():
    # Round robin feeds the learner every other round. The noise is large (uniform on
    # +-tau*), so each coefficient must lie within 4 sandwich standard errors of the truth,
    # and the expected time it predicts at the mean context within 5% of the true one.
    env = envs.exchange_time(num_clients=8, num_selected=4, availability=1.0, fairness_rate=0.0)
    truth = envs.true_coefficients(8).astype(np.float64)
    schedule = bandits.round_robin(8, 4)
    learner = bandits.rbcs_f(8, 4, fairness_rate=0.0)

    def select(state, inp, key):
        _, state = learner.select(state, inp, key)
        return schedule.select((), inp, key)[0], state

    observer = fedjax_sel.Selector(learner.init, select, learner.update)
    _, state, (x, _, c, _, _, _) = _rollout(observer, env, 1600)
    theta_hat = np.einsum("nij,nj->ni", state.inverse, state.moment)
    for n in range(8):
        d_n = c[x[:, n], n].astype(np.float64)
        var = (d_n @ truth[n]) ** 2 / 3.0  # Var of 2u tau* with u ~ U(0, 1)
        bread = np.linalg.inv(d_n.T @ d_n + np.eye(3))
        cov = bread @ (d_n.T * var) @ d_n @ bread
        assert np.all(np.abs(theta_hat[n] - truth[n]) < 4.0 * np.sqrt(np.diag(cov))), n
        mean_context = d_n.mean(0)
        predicted, expected = mean_context @ theta_hat[n], mean_context @ truth[n]
        assert abs(predicted - expected) < 0.05 * expected, (n, predicted, expected)


# ---------------------------------------------------------------------------------------
# Queues (eq. 6) and the fairness identity.


def test_queues_follow_eq_6_exactly():
    env = envs.exchange_time()
    T = 300
    _, state, (x, avail, _, _, policy_queue, env_queue) = _rollout(
        bandits.rbcs_f(N, M, penalty_weight=20.0), env, T
    )
    z = np.zeros(N, np.float32)
    for t in range(T):
        z = np.maximum(z + np.float32(BETA) - x[t].astype(np.float32), np.float32(0.0))
        np.testing.assert_array_equal(policy_queue[t], z)
    np.testing.assert_array_equal(env_queue, policy_queue)
    # Hard constraints (3)-(4): only available clients, exactly min(m, available) of them.
    assert not np.any(x & ~avail)
    np.testing.assert_array_equal(x.sum(1), np.minimum(M, avail.sum(1)))
    # Pathwise identity (F1): Z_{T+1} >= beta T - sum_t x_t, with equality iff never clipped.
    gap = state.queue - (BETA * T - x.sum(0))
    assert np.all(gap >= -1e-3)


@pytest.fixture(scope="module")
def comparison():
    env = envs.exchange_time()
    truth = envs.true_coefficients()
    policies = {
        "random": bandits.random(N, M),
        "fedcs": bandits.fedcs(N, M, truth),
        "rbcs_f_1": bandits.rbcs_f(N, M, penalty_weight=1.0),
        "rbcs_f_50": bandits.rbcs_f(N, M, penalty_weight=50.0),
    }
    return fedjax_sel.simulate(policies, env, num_rounds=400, num_trials=4, seed=0, progress=None)


def test_moderate_v_reaches_fairness_rate(comparison):
    # Every client's fraction is at least beta - Z_{T+1}/T (F1); at V = 1 the queues stay
    # at a few units (max ~3 in the spec's reference runs), so the gap is below 0.02.
    fractions = comparison.totals["rbcs_f_1"]["min_selection_fraction"]
    assert np.all(fractions >= BETA - 0.02), fractions
    assert comparison.curves["rbcs_f_1"]["extra/max_queue"]["mean"][-1] < 0.02 * 400


def test_larger_v_is_faster_and_slower_to_fairness(comparison):
    low, high = comparison.curves["rbcs_f_1"], comparison.curves["rbcs_f_50"]
    assert high["cumulative_latency"]["mean"][-1] < 0.8 * low["cumulative_latency"]["mean"][-1]
    # Mean queue length at every tenth round: larger with larger V (slower convergence).
    assert np.all(
        high["extra/mean_queue"]["mean"][39::40] > low["extra/mean_queue"]["mean"][39::40]
    )
    assert (
        comparison.totals["rbcs_f_50"]["min_selection_fraction"].mean()
        < comparison.totals["rbcs_f_1"]["min_selection_fraction"].mean()
    )


def test_fedcs_fastest_early_and_least_fair(comparison):
    early = {p: comparison.curves[p]["cumulative_latency"]["mean"][49] for p in comparison.policies}
    assert min(early, key=early.get) == "fedcs", early
    jain = {p: comparison.totals[p]["jain_index"].mean() for p in comparison.policies}
    assert min(jain, key=jain.get) == "fedcs", jain
    np.testing.assert_array_equal(comparison.totals["fedcs"]["min_selection_fraction"], 0.0)


def test_known_coefficients_without_fairness_is_the_fastest_m():
    # With the true coefficients and the queues off, P4 is min max expected time: the
    # min(m, available) clients of smallest c^T theta*, the environment's oracle.
    env = envs.exchange_time()
    fastest = bandits.rbcs_f(N, M, fairness=False, known_coefficients=envs.true_coefficients())

    def select(state, inp, key):
        decision, state = fastest.select(state, inp, key)
        same = jnp.all(decision.selected == env.oracle(env.reset(key), inp).selected)
        return decision, state._replace(queue=state.queue.at[0].set(same))

    probe = fedjax_sel.Selector(fastest.init, select, lambda state, decision, feedback: state)
    _, _, (x, avail, _, _, agree, _) = _rollout(probe, env, 60)
    np.testing.assert_array_equal(agree[:, 0], 1.0)
    np.testing.assert_array_equal(x.sum(1), np.minimum(M, avail.sum(1)))


# ---------------------------------------------------------------------------------------
# Bad input.


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(fairness_rate=0.25), "fairness_rate \\* num_clients"),
        (dict(penalty_weight=-1.0), "penalty_weight"),
        (dict(exploration=-0.1), "exploration"),
        (dict(ridge=0.0), "ridge"),
        (dict(exploration_schedule="log"), "exploration_schedule"),
        (dict(confidence=1.0), "confidence"),
        (dict(known_coefficients=np.ones((N, 2))), "known_coefficients"),
    ],
)
def test_rbcs_f_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bandits.rbcs_f(N, M, **kwargs)


def test_context_dimension_mismatch_is_an_error():
    env = envs.exchange_time()
    with pytest.raises(ValueError, match="context_dim"):
        fedjax_sel.simulate(
            bandits.rbcs_f(N, M, context_dim=4), env, num_rounds=2, num_trials=1, progress=None
        )
    with pytest.raises(ValueError, match="RoundInput.context"):
        fedjax_sel.simulate(
            bandits.rbcs_f(N, M), envs.bernoulli(N, M), num_rounds=2, num_trials=1, progress=None
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(fairness_rate=0.3), "fairness_rate \\* num_clients"),
        (dict(availability=1.2), "availability"),
        (dict(availability=[-0.1] + [0.8] * (N - 1)), "availability"),
        (dict(cold_start="warm"), "cold_start"),
        (dict(log_base="10"), "log_base"),
        (dict(bandwidth_mhz=(4.0, 2.0)), "bandwidth_mhz"),
        (dict(coefficients=np.ones((N, 2))), "coefficients"),
    ],
)
def test_environment_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        envs.exchange_time(**kwargs)


def test_a_fairness_rate_of_exactly_m_over_n_is_accepted():
    # 0.14 * 50 = 7.000000000000001 in floats: beta N = m is feasible (round robin meets
    # it) and is not refused; the next float above m / N of any consequence is.
    assert bandits.rbcs_f(50, 7, fairness_rate=0.14) is not None
    assert envs.exchange_time(50, 7, fairness_rate=0.14).num_clients == 50
    for make in (bandits.rbcs_f, envs.exchange_time):
        with pytest.raises(ValueError, match="fairness_rate \\* num_clients"):
            make(50, 7, fairness_rate=0.1401)


def test_fedcs_rejects_bad_arguments():
    truth = envs.true_coefficients()
    with pytest.raises(ValueError, match="deadline_s"):
        bandits.fedcs(N, M, truth, deadline_s=0.0)
    with pytest.raises(ValueError, match="known_coefficients"):
        bandits.fedcs(N, M, truth[:10])
