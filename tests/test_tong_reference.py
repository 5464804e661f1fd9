"""The NumPy references of Tong et al.'s policies against the jitted ones: the same graph,
constants and beliefs, the same hand-worked first slots, and every metric in distribution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
from bandits import belief_propagation as bp
from experiments.references import tong as ref
from fedjax_sel.types import Feedback, RoundInput

N, K = 20, 5
T, M = 24, 64  # agreement: slots and trials of each side


def test_graph_and_couplings_are_the_policys():
    _, adjacency, distance = bandits.client_graph(N, ref.GRAPH_SEED)
    ours, our_distance = ref.client_graph(N)
    np.testing.assert_array_equal(ours, adjacency)
    np.testing.assert_allclose(our_distance, distance)
    np.testing.assert_allclose(ref.paper_coupling(), bp.couplings(adjacency, distance))


def test_constants_are_the_surrogates():
    params = ref.surrogate(N).params
    assert (float(params.acc_low), float(params.acc_high)) == pytest.approx(ref.ACCURACY_RANGE)
    assert float(params.quality_low) == pytest.approx(ref.QUALITY_RANGE[0])
    assert float(params.quality_high) == pytest.approx(ref.QUALITY_RANGE[1])
    assert float(params.noise) == pytest.approx(ref.NOISE)
    assert float(params.opinion_noise) == pytest.approx(ref.OPINION_NOISE)
    assert float(params.rate) == pytest.approx(0.13)
    np.testing.assert_array_equal(params.success, 1.0)


def test_beliefs_are_the_jitted_fixed_point():
    rng = np.random.default_rng(0)
    opinions = rng.uniform(0.5, 0.95, N)
    adjacency, _ = ref.client_graph(N)
    coupling = ref.paper_coupling()
    want, _ = bp.ising_beliefs(
        jnp.asarray(opinions, jnp.float32),
        jnp.zeros((N, N)),
        jnp.asarray(adjacency),
        jnp.asarray(coupling, jnp.float32),
        30,
    )
    belief, messages = ref.ising_beliefs(opinions, np.zeros((N, N)), coupling)
    np.testing.assert_allclose(belief, want, atol=1e-5)
    np.testing.assert_array_equal(messages[~adjacency], 0.0)
    # With the paper's constants the coupling is negligible: b ~= r^2 (spec §3.4).
    np.testing.assert_allclose(belief, opinions**2, atol=1e-2)


def _jitted_slots(selector, opinions_per_slot):
    """The clients the jitted `selector` picks in each slot, fed the given opinions, and
    its cold-start groups."""
    select, update = jax.jit(selector.select), jax.jit(selector.update)
    state = selector.init(jax.random.PRNGKey(3))
    chosen = []
    for t, opinions in enumerate(opinions_per_slot, start=1):
        inp = RoundInput(t=jnp.int32(t), available=jnp.ones(N, bool))
        decision, state = select(state, inp, jax.random.PRNGKey(10 + t))
        r = jnp.asarray(opinions, jnp.float32)
        state = update(
            state,
            decision,
            Feedback(decision.selected, r, jnp.zeros(N), decision.selected, info={"opinions": r}),
        )
        chosen.append(np.flatnonzero(decision.selected))
    return chosen, np.asarray(state.groups)


def _reference_slots(policy, opinions_per_slot):
    rng = np.random.default_rng(0)
    chosen = []
    for t, opinions in enumerate(opinions_per_slot, start=1):
        selected = np.sort(policy.select(t, rng))
        policy.update(selected, np.asarray(opinions, np.float64))
        chosen.append(selected)
    return chosen


def test_quick_init_first_slots_by_hand():
    # Cold-start rewards 0.70, 0.80, 0.75, 0.65: slot 5 replays group 2, the only arm
    # of value 0.80 (count 1); in slot 6 its count is 2 and its bonus sqrt(ln 6 / 2)
    # 0.39 below a fresh arm's, so a fresh arm of the best value, 4 clients of group 2
    # and 1 of group 3 ((4 * 0.80 + 0.75) / 5 = 0.79), is played: one of 5 * 5 tied.
    rewards = [0.70, 0.80, 0.75, 0.65, 0.80, 0.79]
    slots = [np.full(N, r) for r in rewards]
    jitted, groups = _jitted_slots(bandits.quick_init_ucb(N, K), slots)
    ours = _reference_slots(ref.quick_init_ucb(groups), slots)
    for chosen in (jitted, ours):
        for t in range(4):
            np.testing.assert_array_equal(chosen[t], np.sort(groups[t]))
        np.testing.assert_array_equal(chosen[4], np.sort(groups[1]))
        assert np.isin(chosen[5], groups[1]).sum() == 4
        assert np.isin(chosen[5], groups[2]).sum() == 1


def test_bp_ucb_first_slot_by_hand():
    # The same opinions every slot: after the cold start each client's mean is its
    # opinion and its belief ~ its opinion squared, so slot 5's index (17) orders the
    # clients as their opinions: the five largest.
    opinions = np.random.default_rng(1).permutation(np.linspace(0.5, 0.9, N))
    slots = [opinions] * 5
    jitted, groups = _jitted_slots(bandits.bp_ucb(N, K), slots)
    ours = _reference_slots(ref.bp_ucb(groups, ref.paper_coupling()), slots)
    best = np.sort(np.argsort(opinions)[-K:])
    for chosen in (jitted, ours):
        for t in range(4):
            np.testing.assert_array_equal(chosen[t], np.sort(groups[t]))
        np.testing.assert_array_equal(chosen[4], best)


@pytest.mark.parametrize("policy", ["quick_init_ucb", "quick_init_ucb_compressed", "bp_ucb"])
def test_every_metric_agrees_in_distribution(policy, nothing_traced):
    # The compressed form against the dense reference: the same policy in distribution.
    numpy_trial = getattr(ref, f"numpy_trial_{policy.removesuffix('_compressed')}")
    jax_run = getattr(ref, f"jax_run_{policy}")
    ours = [numpy_trial(np.random.default_rng([7, m]), T) for m in range(M)]
    # One jitted trial per seed: M samples of one program (the builders are cached),
    # compiled by the first call only.
    runs = [jax_run(1, T, seed) for seed in range(M)]
    theirs = [runs[0]()]
    with nothing_traced():
        theirs += [run() for run in runs[1:]]
        assert runs[0]() == theirs[0]
    assert set(ours[0]) == set(theirs[0])
    for metric in ours[0]:
        a = np.array([o[metric] for o in ours])
        b = np.array([o[metric] for o in theirs])
        # Two independent means of M trials: |z| < 4 fails a correct pair w.p. ~6e-5.
        stderr = np.sqrt(a.var(ddof=1) / M + b.var(ddof=1) / M)
        assert abs(a.mean() - b.mean()) <= 4 * stderr + 1e-6, (metric, a.mean(), b.mean())
