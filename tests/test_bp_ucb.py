"""BP-UCB (Tong et al. Alg. 2) and its belief propagation: spec §8.5 items 5-7."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bandits import belief_propagation as bp
from fedjax_sel.types import Feedback, RoundInput

TREE = [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (5, 6)]


def _tree(n=7, seed=0):
    rng = np.random.default_rng(seed)
    adjacency = np.zeros((n, n), bool)
    coupling = np.zeros((n, n))
    for i, j in TREE:
        adjacency[i, j] = adjacency[j, i] = True
        coupling[i, j] = coupling[j, i] = rng.uniform(-0.9, 0.9)
    return adjacency, coupling, rng.uniform(0.2, 0.95, n)


def _evidence(r, eps=1e-6):
    p = np.clip(r**2, eps, 1 - eps)
    return np.stack([1 - p, p], axis=1)  # phi_n(x_n), x in {0, 1}


def _brute_force(adjacency, coupling, r):
    """P(x_n = 1) by summing the MRF over all 2^N states."""
    n = r.size
    phi = _evidence(r)
    marginal, total = np.zeros(n), 0.0
    for x in itertools.product((0, 1), repeat=n):
        s = 2 * np.asarray(x) - 1
        w = np.prod(phi[np.arange(n), x])
        w *= np.exp(
            sum(
                coupling[i, j] * s[i] * s[j]
                for i, j in zip(*np.nonzero(np.triu(adjacency)), strict=True)
            )
        )
        marginal += w * np.asarray(x)
        total += w
    return marginal / total


def _probability_bp(adjacency, coupling, r, iterations=50):
    """Sum-product in the probability domain, messages normalised, a plain loop."""
    n = r.size
    phi = _evidence(r)
    spins = np.array([-1.0, 1.0])
    m = {(i, j): np.full(2, 0.5) for i in range(n) for j in range(n) if adjacency[i, j]}
    for _ in range(iterations):
        new = {}
        for i, j in m:
            psi = np.exp(coupling[i, j] * np.outer(spins, spins))  # [x_i, x_j]
            inner = phi[i].copy()
            for k in range(n):
                if adjacency[k, i] and k != j:
                    inner = inner * m[k, i]
            msg = inner @ psi
            new[i, j] = msg / msg.sum()
        m = new
    belief = np.zeros(n)
    for j in range(n):
        b = phi[j].copy()
        for i in range(n):
            if adjacency[i, j]:
                b = b * m[i, j]
        belief[j] = b[1] / b.sum()
    return belief


def _ising(adjacency, coupling, r, iterations=50, messages=None, damping=0.0):
    n = r.size
    messages = jnp.zeros((n, n)) if messages is None else messages
    return bp.ising_beliefs(
        jnp.asarray(r, jnp.float32),
        jnp.asarray(messages, jnp.float32),
        jnp.asarray(adjacency),
        jnp.asarray(coupling, jnp.float32),
        iterations,
        damping,
    )


def test_ising_bp_equals_probability_domain_bp_and_brute_force_on_a_tree():
    adjacency, coupling, r = _tree()
    belief, _ = _ising(adjacency, coupling, r)
    np.testing.assert_allclose(belief, _probability_bp(adjacency, coupling, r), atol=2e-5)
    np.testing.assert_allclose(belief, _brute_force(adjacency, coupling, r), atol=2e-5)
    # Damping changes the path, not the fixed point.
    damped, _ = _ising(adjacency, coupling, r, iterations=200, damping=0.5)
    np.testing.assert_allclose(damped, belief, atol=2e-5)


def test_paper_constants_contract_and_give_beliefs_near_r_squared():
    for n in (20, 100):
        _, adjacency, distance = bp.client_graph(n, seed=1)
        assert bp.is_connected(adjacency)
        coupling = bp.couplings(adjacency, distance)
        kappa = bp.kappa_bp(adjacency, coupling)
        assert 0.0 < kappa < 1.0, kappa  # Thm. 2 with C restored (spec §3.4)
        # Below Thm. 2's sufficient form, (N - 1) tanh(C d_max^beta) with d_max the
        # square's diagonal, which is itself below 1 with C (spec §3.4: 0.068 for N = 20,
        # 0.357 for N = 100) and far above it without C, as printed.
        bound = (n - 1) * np.tanh(bp.PAPER_COUPLING * np.sqrt(2.0) ** bp.PAPER_EXPONENT)
        assert kappa <= bound < 1.0
        assert (n - 1) * np.tanh(np.sqrt(2.0) ** bp.PAPER_EXPONENT) > 1.0
    r = np.random.default_rng(2).uniform(0.5, 0.95, 100)
    belief, messages = _ising(adjacency, coupling, r, iterations=30)
    np.testing.assert_allclose(belief, r**2, atol=1e-2)
    # A unique fixed point: random initial messages reach the same one.
    start = np.where(adjacency, np.random.default_rng(3).normal(0, 2, (100, 100)), 0.0)
    again, _ = _ising(adjacency, coupling, r, iterations=30, messages=start)
    np.testing.assert_allclose(again, belief, atol=1e-6)


def test_sweeps_stop_after_the_first_that_moves_no_message_beyond_the_tolerance():
    # Against a host loop of single sweeps: stop after the first sweep whose largest
    # move is at most the tolerance, or after `iterations`. Batched, each member stops
    # on its own (cold and warm starts, strong and weak couplings need different
    # numbers of sweeps) as alone: one sweep fewer would move a message by more than the
    # tolerance (XLA may round the batched sweep's sums differently in the last bit).
    adjacency, coupling, _ = _tree()
    rng = np.random.default_rng(4)
    r = rng.uniform(0.2, 0.95, (6, 7)).astype(np.float32)
    start = np.where(adjacency, rng.normal(0, 1, (6, 7, 7)), 0.0).astype(np.float32)
    start[:3] = 0.0
    scale = np.array([1.0, 0.1, 0.01, 1.0, 0.1, 0.01], np.float32)[:, None, None]
    args = lambda i: (  # noqa: E731
        jnp.asarray(r[i]),
        jnp.asarray(start[i]),
        jnp.asarray(adjacency),
        jnp.asarray(coupling * scale[i], jnp.float32),
    )
    stop = lambda *a: bp.ising_beliefs(*a, 40, tolerance=1e-5)  # noqa: E731
    one_sweep = jax.jit(lambda *a: bp.ising_beliefs(*a, 1))
    batch = (r, start, jnp.asarray(adjacency), jnp.asarray(coupling * scale, jnp.float32))
    batched = jax.jit(jax.vmap(stop, (0, 0, None, 0)))(*batch)
    sweeps = []
    for i in range(6):
        opinions, messages, link, j = args(i)
        for count in range(1, 41):  # noqa: B007
            belief, fresh = one_sweep(opinions, messages, link, j)
            moved = float(jnp.max(jnp.abs(fresh - messages)))
            messages = fresh
            if moved <= 1e-5:
                break
        sweeps.append(count)
        alone = jax.jit(stop)(*args(i))
        for got, want in zip(alone, (belief, messages), strict=True):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(batched, alone, strict=True):
            np.testing.assert_allclose(got[i], want, rtol=0, atol=1e-7)
    assert len(set(sweeps)) > 2 and max(sweeps) < 40, sweeps


def test_stopping_at_the_tolerance_selects_as_all_sweeps_on_the_paper_graph():
    # On the default graph (kappa_BP = 2.3e-4) the sweeps stopped at 1e-6 leave beliefs
    # equal to those of 30 sweeps: the same selections slot after slot.
    n, k, slots = 20, 5, 25
    rng = np.random.default_rng(5)
    opinions = jnp.asarray(np.clip(rng.normal(0.75, 0.1, (slots, 8, n)), 0, 1), jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(6), (slots, 8))

    def run(selector):
        def slot(state, x):
            t, opinion, key = x
            inp = RoundInput(t=t, available=jnp.ones(n, bool))
            decision, state = selector.select(state, inp, key)
            state = selector.update(state, decision, _feedback(opinion))
            return state, (decision.selected, state.belief)

        def trial(key, opinion, slot_keys):
            ts = jnp.arange(1, slots + 1, dtype=jnp.int32)
            return jax.lax.scan(slot, selector.init(key), (ts, opinion, slot_keys))[1]

        init_keys = jax.random.split(jax.random.PRNGKey(7), 8)
        return jax.jit(jax.vmap(trial, (0, 1, 1)))(init_keys, opinions, keys)

    every, stopped = run(bp.bp_ucb(n, k)), run(bp.bp_ucb(n, k, bp_tolerance=1e-6))
    for got, want in zip(stopped, every, strict=True):
        np.testing.assert_array_equal(got, want)


def _feedback(opinions):
    n = opinions.shape[0]
    ones = jnp.ones((n,), bool)
    return Feedback(ones, opinions, jnp.zeros((n,)), ones, info={"opinions": opinions})


@pytest.mark.parametrize("mode", ["ising", "literal"])
def test_bp_ucb_selects_k_clients_and_moves_only_their_statistics(mode):
    n, k = 20, 5
    selector = bp.bp_ucb(n, k, belief_mode=mode)
    select, update = jax.jit(selector.select), jax.jit(selector.update)
    state = selector.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    cold = []
    for t in range(1, 15):
        inp = RoundInput(t=jnp.int32(t), available=jnp.ones(n, bool))
        decision, state = select(state, inp, jax.random.PRNGKey(t))
        chosen = np.asarray(decision.selected)
        assert chosen.sum() == k
        if t <= n // k:
            cold.extend(np.flatnonzero(chosen))
        opinions = jnp.asarray(rng.uniform(0.6, 0.9, n), jnp.float32)
        before = state
        state = update(state, decision, _feedback(opinions))
        moved = np.asarray(state.count != before.count) | np.asarray(state.mean != before.mean)
        np.testing.assert_array_equal(moved, chosen)
        np.testing.assert_allclose(
            np.asarray(state.mean)[chosen],
            np.asarray(before.mean)[chosen]
            + (np.asarray(opinions)[chosen] - np.asarray(before.mean)[chosen])
            / np.asarray(state.count)[chosen],
            rtol=1e-6,
        )
        if mode == "literal":
            np.testing.assert_array_equal(state.belief, 0.5)  # spec A1
        else:
            np.testing.assert_allclose(state.belief, np.asarray(opinions) ** 2, atol=1e-2)
    assert sorted(cold) == list(range(n))  # the cold start: every client once


def test_a_client_the_cold_start_missed_ranks_first_until_observed():
    # Client 3 is unavailable in its cold-start slot; the others' opinions are 0.8,
    # which an index of one reward of 0 could never beat (mu = 0.01). It is selected in
    # the first slot after the cold start; observed (its opinion 0), it leaves the front.
    n, k = 20, 5
    selector = bp.bp_ucb(n, k)
    select, update = jax.jit(selector.select), jax.jit(selector.update)
    state = selector.init(jax.random.PRNGKey(0))
    available = np.ones(n, bool)
    available[3] = False
    for t in range(1, n // k + 3):
        inp = RoundInput(t=jnp.int32(t), available=jnp.asarray(available | (t > n // k)))
        decision, state = select(state, inp, jax.random.PRNGKey(t))
        chosen = np.asarray(decision.selected)
        if t == n // k + 1:
            assert chosen[3] and state.count[3] == 0
        elif t > n // k + 1:
            assert not chosen[3]
        state = update(state, decision, _feedback(jnp.full((n,), 0.8).at[3].set(0.0)))
    assert state.count[3] == 1


def test_bad_input_is_refused():
    adjacency = np.zeros((6, 6), bool)
    adjacency[0, 1] = adjacency[1, 0] = adjacency[2, 3] = adjacency[3, 2] = True
    with pytest.raises(ValueError, match="disconnected"):
        bp.bp_ucb(6, 2, adjacency=adjacency, distance_km=np.ones((6, 6)))
    with pytest.raises(ValueError, match="exploration"):
        bp.bp_ucb(6, 2, exploration=-1.0)
    with pytest.raises(ValueError, match="uneven='fill'"):
        bp.bp_ucb(7, 2)
    with pytest.raises(ValueError, match="damping"):
        bp.bp_ucb(6, 2, damping=1.0)
    with pytest.raises(ValueError, match="bp_tolerance"):
        bp.bp_ucb(6, 2, bp_tolerance=-1e-6)
    with pytest.raises(ValueError, match="distance_km is used with an adjacency only"):
        bp.bp_ucb(6, 2, distance_km=np.ones((6, 6)))
