"""Power-of-Choice: the candidate law against exact enumeration, the top-m by loss on
hand-built rounds, rpow-d's bookkeeping against a plain loop, the probes exactly, and bad
input; the probes charged by the devices environment. Every registered variant under jit
and vmap: test_policy_conformance.py."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import bandits
from bandits.power_of_choice import PowerOfChoiceState, power_of_choice
from fedjax_sel import envs
from fedjax_sel.types import Decision, Feedback, RoundInput

CHI2_LEVEL = 1e-6  # fixed keys make each test deterministic; this is its false-alarm rate


def _round_input(fraction, loss, *, minibatch=None, data_size=None, available=None):
    """A RoundInput with the devices environment's info keys."""
    fraction = jnp.asarray(fraction, jnp.float32)
    n = fraction.shape[0]
    loss = jnp.asarray(loss, jnp.float32)
    return RoundInput(
        t=jnp.int32(1),
        available=jnp.ones(n, bool) if available is None else jnp.asarray(available),
        info={
            "data_fraction": fraction,
            "loss": loss,
            "loss_minibatch": loss if minibatch is None else jnp.asarray(minibatch, jnp.float32),
            "data_size": (
                jnp.full(n, 10.0) if data_size is None else jnp.asarray(data_size, jnp.float32)
            ),
        },
    )


@functools.cache
def _batched_select(selector):
    return jax.jit(jax.vmap(selector.select, in_axes=(None, None, 0)))


def _decide(selector, inp, keys, state=None):
    """Decisions of `selector` on `inp` for each key (leading axis: keys), one program
    per selector (compiling dominates these tests: keep the selectors few)."""
    state = selector.init(jax.random.PRNGKey(0)) if state is None else state
    decisions, _ = _batched_select(selector)(state, inp, keys)
    return jax.tree.map(np.asarray, decisions)


def _keys(num, seed=0):
    return jax.random.split(jax.random.PRNGKey(seed), num)


# The candidate set's law.


def _successive_sampling(weights, d):
    """{frozenset: probability} of d draws without replacement, each with probability
    proportional to the weights of those not yet drawn (exact, by enumerating orders)."""
    law = {}
    items = [i for i, w in enumerate(weights) if w > 0]
    for order in itertools.permutations(items, min(d, len(items))):
        p, left = 1.0, float(sum(weights[i] for i in items))
        for i in order:
            p *= weights[i] / left
            left -= weights[i]
        key = frozenset(order)
        law[key] = law.get(key, 0.0) + p
    return law


def _chi2(counts, law):
    """Pearson's statistic of the observed sets `counts` against `law`, and the threshold
    at CHI2_LEVEL for its degrees of freedom."""
    assert set(counts) <= set(law), set(counts) - set(law)
    draws = sum(counts.values())
    statistic = sum((counts.get(s, 0) - draws * p) ** 2 / (draws * p) for s, p in law.items())
    return statistic, stats.chi2.ppf(1 - CHI2_LEVEL, len(law) - 1)


@pytest.mark.parametrize("variant, d", [("pow-d", 2), ("pow-d", 3), ("rpow-d", 2)])
def test_candidates_follow_successive_sampling_by_data_fraction(variant, d):
    # Client 2 is unavailable and client 5 holds no data: the law is successive sampling
    # by p among clients 0, 1, 3, 4. With m = d the cohort is the candidate set itself
    # (rpow-d has no probes to read it from).
    fraction = np.array([0.05, 0.1, 0.15, 0.2, 0.5, 0.0])
    available = np.array([True, True, False, True, True, True])
    inp = _round_input(fraction, np.arange(6.0), available=available)
    draws = 20000
    selected = _decide(power_of_choice(6, d, d, variant), inp, _keys(draws)).selected
    counts = {}
    for row in selected:
        s = frozenset(np.flatnonzero(row).tolist())
        counts[s] = counts.get(s, 0) + 1
    law = _successive_sampling(np.where(available, fraction, 0.0), d)
    statistic, threshold = _chi2(counts, law)
    assert statistic < threshold, (statistic, threshold)
    # The test has power: the sets drawn are far from uniform over the same support.
    uniform = {s: 1.0 / len(law) for s in law}
    assert _chi2(counts, uniform)[0] > 10 * threshold


def test_candidates_are_the_probed_clients_and_follow_the_law_with_m_below_d():
    # pow-d with m = 1 < d = 3: the probes mark the candidates.
    fraction = np.array([0.4, 0.3, 0.2, 0.1])
    inp = _round_input(fraction, [4.0, 3.0, 2.0, 1.0])
    decisions = _decide(power_of_choice(4, 1, 3), inp, _keys(10000, seed=1))
    candidates = decisions.probe > 0
    assert np.all(candidates.sum(1) == 3)
    counts = {}
    for row in candidates:
        s = frozenset(np.flatnonzero(row).tolist())
        counts[s] = counts.get(s, 0) + 1
    statistic, threshold = _chi2(counts, _successive_sampling(fraction, 3))
    assert statistic < threshold, (statistic, threshold)
    # The highest loss among the candidates: client 0 whenever it is one, else client 1.
    want = np.where(candidates[:, 0], 0, 1)
    np.testing.assert_array_equal(np.argmax(decisions.selected, 1), want)


# The top m by loss.


def test_selects_the_top_m_of_the_candidates_exactly():
    # Each variant ranks by its own key ("loss" for pow-d, "loss_minibatch" for cpow-d);
    # the other key holds the reversed order, so that reading the wrong one fails.
    n, m, d = 8, 2, 5
    rng = np.random.default_rng(3)
    for variant in ("pow-d", "cpow-d"):
        select = jax.jit(power_of_choice(n, m, d, variant).select)

        def decide(fraction, loss, available, key, variant=variant, select=select):
            own, other = (loss, -loss) if variant == "pow-d" else (-loss, loss)
            inp = _round_input(fraction, own, minibatch=other, available=available)
            decision, _ = select((), inp, key)
            return np.asarray(decision.selected), np.asarray(decision.probe) > 0

        # By hand: exactly d = 5 clients available, so all are candidates; the two of
        # highest loss are 7 (3.0) and 2 (2.0), not the unavailable ones (9.0).
        loss = np.array([0.3, 9.0, 2.0, 1.0, 9.0, 0.5, 9.0, 3.0])
        available = np.isin(np.arange(n), [0, 2, 3, 5, 7])
        for key in _keys(5):
            selected, candidates = decide(np.full(n, 1 / n), loss, available, key)
            np.testing.assert_array_equal(candidates, available)
            np.testing.assert_array_equal(np.flatnonzero(selected), [2, 7])
        # Fewer eligible clients than m: client 4 alone (client 6 holds no data).
        fraction = np.array([0.2, 0.2, 0.2, 0.2, 0.2, 0.0, 0.0, 0.0])
        selected, candidates = decide(fraction, loss, np.isin(np.arange(n), [4, 6]), _keys(1)[0])
        np.testing.assert_array_equal(np.flatnonzero(selected), [4])
        np.testing.assert_array_equal(np.flatnonzero(candidates), [4])
        # Random rounds: the m candidates of highest loss, whichever the candidates.
        fraction = rng.dirichlet(np.ones(n))
        for r, key in enumerate(_keys(100, seed=4)):
            loss = rng.permutation(n).astype(np.float32)
            available = rng.random(n) < 0.9
            selected, candidates = decide(fraction, loss, available, key)
            assert candidates.sum() == min(d, available.sum())
            assert not np.any(candidates & ~available)
            idx = np.flatnonzero(candidates)
            best = idx[np.argsort(-loss[idx])[:m]]
            np.testing.assert_array_equal(
                np.flatnonzero(selected), np.sort(best), err_msg=f"{variant} {r}"
            )


def test_ties_at_the_mth_place_are_broken_uniformly():
    # Client 5 has the highest loss; clients 0, 1, 2 tie for the one remaining slot.
    inp = _round_input(np.full(6, 1 / 6), [1.0, 1.0, 1.0, 0.0, 0.0, 5.0])
    draws = 3000
    selected = _decide(power_of_choice(6, 2, 6), inp, _keys(draws, seed=5)).selected
    assert np.all(selected[:, 5]) and not np.any(selected[:, 3:5])
    counts = selected[:, :3].sum(0)
    assert counts.sum() == draws
    statistic = np.sum((counts - draws / 3) ** 2 / (draws / 3))
    assert statistic < stats.chi2.ppf(1 - CHI2_LEVEL, 2), counts


# Probes.


def test_probes_are_the_candidates_examples_exactly():
    # pow-d probes each candidate's data size; cpow-d min(probe_batch_size, data size).
    # Default d = 2m = 4 candidates.
    n = 6
    sizes = np.array([120.0, 30.0, 7.0, 250.0, 64.0, 29.0])
    inp = _round_input(sizes / sizes.sum(), np.arange(n, dtype=float), data_size=sizes)
    cases = {
        "pow_d": (bandits.make("pow_d", n, 2), sizes),
        "cpow_d": (bandits.make("cpow_d", n, 2, probe_batch_size=16), np.minimum(sizes, 16)),
    }
    for name, (selector, examples) in cases.items():
        select = jax.jit(selector.select)
        for key in _keys(8):
            decision, _ = select((), inp, key)
            probe = np.asarray(decision.probe)
            candidates = probe > 0
            assert probe.dtype == np.float32 and candidates.sum() == 4, name
            assert np.all(np.asarray(decision.selected) <= candidates), name
            np.testing.assert_array_equal(probe, np.where(candidates, examples, 0.0), name)
    rpow = bandits.make("rpow_d", n, 2)
    decision, _ = jax.eval_shape(rpow.select, rpow.init(jax.random.PRNGKey(0)), inp, _keys(1)[0])
    assert decision.probe is None


def test_default_candidate_set_is_twice_the_cohort_at_most_n():
    power_of_choice(5, 3)  # d = min(6, 5)
    with pytest.raises(ValueError, match=r"num_candidates must be an integer in \[3, 5\]"):
        power_of_choice(5, 3, 6)


# rpow-d's stale losses.


def _scripted_rounds(n, rounds, seed):
    """A scripted feedback sequence: who reported (observed and successful) and losses,
    with NaN garbage for the others (which must be ignored)."""
    rng = np.random.default_rng(seed)
    script = []
    for _ in range(rounds):
        observed = rng.random(n) < 0.5
        success = rng.random(n) < 0.7  # undefined outside observed: only both count
        loss = rng.random(n).astype(np.float32) * 3
        loss[~(observed & success)] = np.nan
        script.append((observed, success, loss))
    return script


@pytest.mark.parametrize("initial_loss", [math.inf, 1.5])
def test_rpow_d_keeps_the_last_reported_loss_like_a_plain_loop(initial_loss):
    n, m, rounds = 7, 2, 8
    selector = power_of_choice(n, m, n, "rpow-d", initial_loss=initial_loss)
    select, update = jax.jit(selector.select), jax.jit(selector.update)
    state = selector.init(jax.random.PRNGKey(0))
    inp = _round_input(np.full(n, 1 / n), np.zeros(n))
    stale: dict[int, float] = {}  # the plain loop's memory
    overwritten = ignored = exact = 0  # what the script exercised
    for r, (observed, success, loss) in enumerate(_scripted_rounds(n, rounds, seed=6)):
        decision, state = select(state, inp, jax.random.PRNGKey(r))
        # Every client is a candidate (d = N): the cohort is a top m of the stale scores.
        score = np.array([stale.get(i, initial_loss) for i in range(n)])
        chosen = np.asarray(decision.selected)
        assert chosen.sum() == m and score[~chosen].max() <= score[chosen].min(), r
        if np.sum(score >= np.sort(score)[-m]) == m:  # no tie at the m-th place: exact
            np.testing.assert_array_equal(chosen, score >= np.sort(score)[-m])
            exact += 1
        feedback = Feedback(
            observed=jnp.asarray(observed),
            reward=jnp.zeros(n),
            latency=jnp.zeros(n),
            success=jnp.asarray(success),
            info={"loss": jnp.asarray(loss)},
        )
        state = update(state, decision, feedback)
        for i in range(n):
            if observed[i] and success[i]:
                overwritten += i in stale
                stale[i] = float(loss[i])
            ignored += bool(observed[i] and not success[i])
        np.testing.assert_array_equal(np.asarray(state.seen), [i in stale for i in range(n)])
        np.testing.assert_array_equal(
            np.asarray(state.stale_loss),
            np.array([stale.get(i, 0.0) for i in range(n)], np.float32),
        )
    assert overwritten > 0 and ignored > 0 and exact > 0, (overwritten, ignored, exact)


def test_rpow_d_ranks_candidates_by_stale_loss_not_current_loss():
    n = 5
    selector = power_of_choice(n, 1, n, "rpow-d")
    state = PowerOfChoiceState(
        stale_loss=jnp.array([0.1, 4.0, 0.2, 0.3, 0.0]),
        seen=jnp.array([True, True, True, True, False]),
    )
    # The current losses say client 0; the stale ones client 1; client 4 was never seen
    # and, with initial_loss = inf, goes first.
    inp = _round_input(np.full(n, 1 / n), [9.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(
        np.argmax(_decide(selector, inp, _keys(10), state).selected, 1), 4
    )
    state = state._replace(seen=jnp.ones(n, bool))
    np.testing.assert_array_equal(
        np.argmax(_decide(selector, inp, _keys(10), state).selected, 1), 1
    )


# On the devices environment (the runner's loop: jit, vmap over trials, scan over rounds).


@pytest.mark.parametrize("name", ["pow_d", "rpow_d"])
def test_devices_environment_charges_the_probes(name):
    # Every client available, no dropouts: pow-d probes exactly d = 2m candidates a
    # round, and the probe phase takes time; rpow-d probes nobody.
    n, m, trials, rounds = 12, 3, 2, 4
    env = envs.make("devices", n, m, availability=1.0, mean_session_s=None)
    selector = bandits.make(name, n, m)

    def one(key):
        env_key, init_key, run_key = jax.random.split(key, 3)

        def body(carry, t):
            env_state, state, key = carry
            key, obs_key, policy_key, step_key = jax.random.split(key, 4)
            inp = env.observe(env_state, t, obs_key)
            decision, state = selector.select(state, inp, policy_key)
            feedback, env_state, stats_ = env.step(env_state, inp, decision, step_key)
            before = state
            state = selector.update(state, decision, feedback)
            return (env_state, state, key), (before, feedback, stats_.extras)

        start = (env.reset(env_key), selector.init(init_key), run_key)
        _, out = jax.lax.scan(body, start, jnp.arange(1, rounds + 1))
        return out

    before, feedback, extras = jax.jit(jax.vmap(one))(_keys(trials))
    probed, probe_s = np.asarray(extras["probed_clients"]), np.asarray(extras["probe_time_s"])
    if name == "pow_d":
        assert np.all(probed == 2 * m) and np.all(probe_s > 0), (probed, probe_s)
        return
    assert np.all(probed == 0) and np.all(probe_s == 0)
    # rpow-d's memory after each round: the loss of every kept client, else unchanged.
    reported = np.asarray(feedback.observed & feedback.success)
    loss = np.asarray(feedback.info["loss"])
    seen, stale = np.asarray(before.seen), np.asarray(before.stale_loss)
    assert reported.sum(-1).min() >= 1 and not seen[:, 0].any()
    for r in range(rounds - 1):
        want_seen = seen[:, r] | reported[:, r]
        np.testing.assert_array_equal(seen[:, r + 1], want_seen)
        np.testing.assert_array_equal(
            stale[:, r + 1], np.where(reported[:, r], loss[:, r], stale[:, r])
        )


def test_registered_variants():
    assert bandits.make("pow_d", 9, 2).init(jax.random.PRNGKey(0)) == ()
    assert bandits.make("cpow_d", 9, 2).init(jax.random.PRNGKey(0)) == ()
    assert isinstance(bandits.make("rpow_d", 9, 2).init(jax.random.PRNGKey(0)), PowerOfChoiceState)
    # Each registration reads its own key: tracing without it fails, with it succeeds.
    inp = _round_input(np.full(9, 1 / 9), np.ones(9))
    for name, key in (("pow_d", "loss"), ("cpow_d", "loss_minibatch")):
        selector = bandits.make(name, 9, 2)
        jax.eval_shape(selector.select, (), inp, _keys(1)[0])
        without = inp._replace(info={k: v for k, v in inp.info.items() if k != key})
        with pytest.raises(ValueError, match=rf"reads RoundInput.info\['{key}'\]"):
            jax.eval_shape(selector.select, (), without, _keys(1)[0])


# Bad input.


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_candidates": 1}, r"num_candidates must be an integer in \[2, 9\]"),
        ({"num_candidates": 10}, r"num_candidates must be an integer in \[2, 9\]"),
        ({"num_candidates": 3.0}, "num_candidates"),
        ({"num_candidates": True}, "num_candidates"),
        ({"variant": "powd"}, "variant must be one of 'pow-d', 'cpow-d', 'rpow-d'"),
        ({"probe_batch_size": 0}, "probe_batch_size must be an integer >= 1"),
        ({"probe_batch_size": 8.5}, "probe_batch_size"),
        ({"initial_loss": -1.0}, r"initial_loss must lie in \[0, inf\]"),
        ({"initial_loss": math.nan}, "initial_loss"),
        ({"initial_loss": "inf"}, "initial_loss must be a real number"),
    ],
)
def test_bad_arguments_raise_before_tracing(kwargs, match):
    with pytest.raises(ValueError, match=match):
        power_of_choice(9, 2, **kwargs)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="num_clients"):
        power_of_choice(0, 1)
    with pytest.raises(ValueError, match="num_selected"):
        power_of_choice(5, 6)
    with pytest.raises(ValueError, match=r"num_candidates must be an integer in \[3, 3\]"):
        power_of_choice(3, 3, 2)


@pytest.mark.parametrize(
    "variant, missing",
    [
        ("pow-d", "loss"),
        ("cpow-d", "loss_minibatch"),
        ("pow-d", "data_fraction"),
        ("pow-d", "data_size"),
        ("rpow-d", "data_fraction"),
    ],
)
def test_missing_info_keys_raise_while_traced(variant, missing):
    inp = _round_input(np.full(4, 0.25), np.ones(4))
    inp = inp._replace(info={k: v for k, v in inp.info.items() if k != missing})
    selector = power_of_choice(4, 1, 2, variant)
    state = selector.init(jax.random.PRNGKey(0))
    with pytest.raises(
        ValueError, match=rf"policy '{variant}' reads RoundInput.info\['{missing}'\]"
    ):
        jax.jit(selector.select)(state, inp, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"RoundInput.info\['data_fraction'\]"):
        jax.eval_shape(selector.select, state, inp._replace(info=None), jax.random.PRNGKey(0))


def test_wrong_sized_info_and_missing_feedback_loss_raise():
    selector = power_of_choice(4, 1, 2, "rpow-d")
    state = selector.init(jax.random.PRNGKey(0))
    inp = _round_input(np.full(5, 0.2), np.ones(5))
    with pytest.raises(
        ValueError, match=r"built for num_clients=4; RoundInput.info\['data_fraction'\]"
    ):
        selector.select(state, inp, jax.random.PRNGKey(0))
    decision = Decision(jnp.array([True, False, False, False]))
    feedback = Feedback(decision.selected, jnp.zeros(4), jnp.zeros(4), decision.selected)
    with pytest.raises(ValueError, match=r"reads Feedback.info\['loss'\]"):
        selector.update(state, decision, feedback)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -0.5])
def test_rpow_d_refuses_a_bad_reported_loss(bad):
    selector = power_of_choice(4, 1, 2, "rpow-d")
    state = selector.init(jax.random.PRNGKey(0))
    chosen = jnp.array([False, True, False, False])
    feedback = Feedback(
        chosen, jnp.zeros(4), jnp.zeros(4), chosen, info={"loss": jnp.array([0.0, bad, 0.0, 0.0])}
    )
    with pytest.raises(ValueError, match=r"policy 'rpow-d' assumes Feedback.info\['loss'\]"):
        selector.update(state, Decision(chosen), feedback)
    # A bad value of a client that did not report is ignored.
    quiet = feedback._replace(info={"loss": jnp.array([bad, 1.0, 0.0, 0.0])})
    assert float(selector.update(state, Decision(chosen), quiet).stale_loss[1]) == 1.0
