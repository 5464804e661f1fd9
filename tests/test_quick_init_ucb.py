"""Quick-Init UCB and super-arm UCB (Tong et al. Alg. 1): the behaviours of spec §8.5
(items 1-4), the compressed form against the dense one, and bad input."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from bandits import super_arms as qi
from experiments.tong_trials import run_trials
from fedjax_sel import envs
from fedjax_sel.types import Feedback, RoundInput


def _feedback(opinions):
    n = opinions.shape[0]
    zeros = jnp.zeros((n,), bool)
    return Feedback(zeros, opinions, jnp.zeros((n,)), zeros, info={"opinions": opinions})


@pytest.mark.parametrize("form", ["dense", "compressed"])
def test_cold_start_is_a_partition_then_every_arm_has_count_one(form):
    n, k = 10, 2
    selector = qi.quick_init_ucb(n, k, form=form, horizon=20)
    select, update = jax.jit(selector.select), jax.jit(selector.update)
    state = selector.init(jax.random.PRNGKey(0))
    seen, rewards = [], []
    for t in range(1, n // k + 1):
        inp = RoundInput(t=jnp.int32(t), available=jnp.ones(n, bool))
        decision, state = select(state, inp, jax.random.PRNGKey(t))
        chosen = np.flatnonzero(decision.selected)
        assert chosen.size == k
        opinions = jnp.full((n,), 0.5 + 0.05 * t)
        state = update(state, decision, _feedback(opinions))
        seen.append(chosen.tolist())
        rewards.append(0.5 + 0.05 * t)
    # Item 1: N/K slots, every client exactly once.
    assert sorted(itertools.chain(*seen)) == list(range(n))
    groups = np.asarray(state.groups)
    np.testing.assert_array_equal(np.sort(groups, axis=1), np.sort(seen, axis=1))
    value = np.zeros(n)
    for group, r in zip(seen, rewards, strict=True):
        value[group] = r
    if form == "dense":
        # The pseudo-initialisation happens as slot N/K + 1 is chosen.
        inp = RoundInput(t=jnp.int32(n // k + 1), available=jnp.ones(n, bool))
        _, state = select(state, inp, jax.random.PRNGKey(0))
        # Item 2: every count 1; a group's arm holds its observed reward, any arm the
        # mean of its members' values (spec A8).
        arms = list(itertools.combinations(range(n), k))
        np.testing.assert_array_equal(state.counts, 1.0)
        for group, r in zip(seen, rewards, strict=True):
            np.testing.assert_allclose(state.sums[arms.index(tuple(sorted(group)))], r, rtol=1e-6)
        want = [value[list(a)].mean() for a in arms]
        np.testing.assert_allclose(state.sums, want, rtol=1e-6)
    else:
        comps = qi.compositions(n // k, k)
        group_value = np.asarray(rewards)
        np.testing.assert_allclose(state.comp_value, comps @ group_value / k, rtol=1e-6)
        assert int(state.played) == 0
        sizes = [math.prod(math.comb(k, c) for c in row) for row in comps]
        np.testing.assert_array_equal(state.remaining, sizes)
        assert sum(sizes) == math.comb(n, k)


@pytest.mark.parametrize("n, k", [(20, 5), (7, 3)])
def test_members_mean_adds_the_members_values_in_order_bit_for_bit(n, k, xla_defaults):
    # As the runner calls it: jitted, under vmap over trials; values with repeats, zeros
    # and a spread of magnitudes, whose sums round.
    members = np.asarray(list(itertools.combinations(range(n), k)), np.int32)
    values = jax.random.uniform(jax.random.PRNGKey(n), (16, n)) ** 3
    values = values.at[:, 0].set(0.0).at[:, 1].set(values[:, 2])
    got = jax.jit(jax.vmap(lambda v: qi._members_mean(v, jnp.asarray(members))))(values)
    gathered = np.asarray(values)[:, members]  # f32[16, A, K]
    total = gathered[..., 0]
    for j in range(1, k):
        total = total + gathered[..., j]
    np.testing.assert_array_equal(got, total * np.float32(1 / k))
    # The order matters: the sums differ from exact ones in the last bits.
    assert np.any(np.asarray(got, np.float64) != gathered.astype(np.float64).mean(-1))
    # Its definition, the mean of the gathered values, as XLA compiles both for users.
    compiled = lambda fn: jax.jit(jax.vmap(fn), compiler_options=xla_defaults)(values)
    np.testing.assert_array_equal(
        compiled(lambda v: qi._members_mean(v, jnp.asarray(members))),
        compiled(lambda v: jnp.mean(v[jnp.asarray(members)], axis=1)),
    )


def test_no_arm_is_played_twice_at_mu_one_within_500_slots():
    # Item 3 (spec §3.1 note): rewards in [0.6, 0.9] differ by less than the bonus drop
    # of a second pull, so while fresh arms remain none is played twice after the cold
    # start (every count stays 2: the pseudo-sample and one pull). Checked on the
    # compressed form, whose table lists the arms played; the dense form has the same
    # distribution of selections (tested below).
    n, k, t = 20, 5, 500
    env = envs.opinion_surrogate(n, k)
    run = run_trials(qi.quick_init_ucb(n, k, form="compressed", horizon=t), env, t, 2, seed=1)
    state = run.final_state
    assert np.all(np.asarray(state.played) == t - n // k)
    np.testing.assert_array_equal(state.played_count, 2.0)
    members = np.sort(np.asarray(state.played_members), axis=-1)
    for trial in range(2):
        assert len({tuple(m) for m in members[trial]}) == t - n // k
        groups = {tuple(sorted(g)) for g in np.asarray(state.groups[trial]).tolist()}
        # The best cold-start group has the largest initial value (its reward, count
        # 1): the UCB phase opens with it.
        assert tuple(members[trial][0].tolist()) in groups


@pytest.mark.parametrize("make", [qi.quick_init_ucb, bandits.super_arm_ucb])
def test_dense_means_are_the_sums_over_the_counts_bit_for_bit(make):
    # The dense form divides again for the arm played alone (`SuperArmState.means`): an
    # arm's mean is its sum over its count, as dividing every arm in every slot gives.
    n, k, t = 8, 2, 80
    run = run_trials(make(n, k, exploration=0.05), envs.opinion_surrogate(n, k), t, 3, seed=2)
    state = run.final_state
    counts = np.asarray(state.counts)
    assert counts.max() >= 5  # arms played again and again
    np.testing.assert_array_equal(state.means, np.asarray(state.sums) / np.maximum(counts, 1.0))


def test_conventional_ucb_plays_distinct_arms_while_unplayed_ones_remain():
    # Item 4: T < C(N, K) slots play T distinct arms (a uniformly random order).
    n, k, t = 10, 2, 40
    run = run_trials(bandits.super_arm_ucb(n, k), envs.opinion_surrogate(n, k), t, 3)
    counts = np.asarray(run.final_state.counts)
    assert counts.max() == 1.0 and np.all(counts.sum(1) == t)


@pytest.mark.parametrize("n, k", [(10, 2), (20, 5)])
def test_compressed_and_dense_forms_agree_in_distribution(n, k):
    t, m = 30, 150
    env = envs.opinion_surrogate(n, k)
    runs = [
        run_trials(qi.quick_init_ucb(n, k, form=form, horizon=t), env, t, m, seed=seed)
        for form, seed in (("dense", 3), ("compressed", 4))
    ]
    # Per-client selection frequencies: two independent samples of M trials each,
    # within 4.5 standard errors of their difference.
    a, b = (r.counts for r in runs)
    se = np.sqrt(a.var(0, ddof=1) / m + b.var(0, ddof=1) / m)
    assert np.all(np.abs(a.mean(0) - b.mean(0)) <= 4.5 * se + 1e-9), (a.mean(0), b.mean(0))
    # The mean reward over the UCB phase, per trial through the counts' spread: the
    # per-slot means' difference over slots, against its standard error.
    diff = runs[0].expected[n // k :] - runs[1].expected[n // k :]
    assert abs(diff.mean()) <= 4.5 * diff.std(ddof=1) / np.sqrt(diff.size)


def test_bad_input_is_refused_before_tracing():
    with pytest.raises(ValueError, match="uneven='fill'"):
        qi.quick_init_ucb(9, 2)
    with pytest.raises(ValueError, match="form='compressed'"):
        qi.quick_init_ucb(60, 5)
    with pytest.raises(ValueError, match="num_selected=2 to divide"):
        qi.quick_init_ucb(9, 2, form="compressed", uneven="fill")
    with pytest.raises(ValueError, match="exploration"):
        qi.quick_init_ucb(10, 2, exploration=-0.1)
    with pytest.raises(ValueError, match="horizon"):
        qi.quick_init_ucb(10, 2, form="compressed", horizon=5)
    with pytest.raises(ValueError, match="num_selected must be below"):
        qi.super_arm_ucb(5, 5)
    # C(72, 8) = 11,969,016,345 arms: their count would wrap in int32.
    with pytest.raises(ValueError, match="fewer than 2"):
        qi.quick_init_ucb(72, 8, form="compressed")
    qi.quick_init_ucb(100, 5, form="compressed")  # 75,287,520 arms


def test_the_compressed_form_is_refused_beyond_its_horizon():
    # Its table of played arms holds horizon - N/K of them: a longer run could not
    # record the arms of its later slots and would replay them as fresh.
    selector = qi.quick_init_ucb(6, 2, form="compressed", horizon=10)
    env = envs.opinion_surrogate(6, 2)
    for run in (
        lambda rounds: run_trials(selector, env, rounds, 2),
        lambda rounds: fedjax_sel.simulate(selector, env, rounds, 2, progress=None),
    ):
        with pytest.raises(ValueError, match=r"num_rounds=11 .*'policy'.*max_rounds=10"):
            run(11)
    assert run_trials(selector, env, 10, 2).counts.shape == (2, 6)


def test_uneven_groups_fill_the_last_group_from_earlier_ones():
    groups = np.asarray(qi.cold_start_groups(jax.random.PRNGKey(2), 9, 2))
    assert groups.shape == (5, 2)
    assert set(groups.ravel()) == set(range(9))
    assert len(set(groups[-1])) == 2


def test_tied_argmax_is_uniform_over_the_entries_within_the_tolerance():
    index = jnp.array([0.5, 0.9, 0.2, 0.9, 0.9 - 1e-7, 0.1, 0.0])
    keys = jax.random.split(jax.random.PRNGKey(0), 30000)
    picks = np.asarray(jax.vmap(lambda key: qi.tied_argmax(index, 1e-6, key))(keys))
    freq = np.bincount(picks, minlength=7) / picks.size
    # Three tied entries: 1/3 each, within 4 standard errors (0.0027 each).
    np.testing.assert_allclose(freq[[1, 3, 4]], 1 / 3, atol=4 * np.sqrt(2 / 9 / picks.size))
    assert freq[[0, 2, 5, 6]].sum() == 0.0
