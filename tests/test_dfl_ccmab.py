"""CC-MAB scheduling per edge server (Chen et al., 2025): formulas, grid, selection, update."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
from bandits.dfl_ccmab import dfl_ccmab, exploration_threshold, grid_index, grid_size
from fedjax_sel.types import Feedback, RoundInput


@pytest.mark.parametrize(
    "horizon, alpha, dim, expected",
    [
        (2000, 1.0, 2, 5),  # ceil(4.57), spec Sec. 3.1
        (2000, 0.5, 2, 9),  # ceil(8.77)
        (2000, 2.0, 2, 3),  # ceil(2.59)
        (32, 1.0, 2, 2),  # 32^(1/5) = 2 exactly
        (33, 1.0, 2, 3),
        (1, 1.0, 2, 1),
        (243, 1.0, 2, 3),  # 3^5
        (244, 1.0, 2, 4),
        (1000, 1.0, 1, 6),  # ceil(1000^(1/4) = 5.62)
    ],
)
def test_grid_size_hand_worked(horizon, alpha, dim, expected):
    assert grid_size(horizon, alpha, dim) == expected


def test_exploration_threshold_hand_worked():
    t = jnp.array([1, 2, 10, 100, 2000])
    got = np.asarray(exploration_threshold(t, 1.0, 2, 1.0))
    # t^0.4 ln t floored at 1: E(1) = 0 -> 1, E(2) = 0.9146 -> 1, E(10) = 2.5119 * 2.3026,
    # E(100) = 6.3096 * 4.6052, E(2000) = 20.913 * 7.6009.
    np.testing.assert_allclose(got, [1.0, 1.0, 5.7838, 29.057, 158.96], rtol=2e-4)
    exact = [max(1.0, x**0.4 * math.log(x)) for x in (1, 2, 10, 100, 2000)]
    np.testing.assert_allclose(got, exact, rtol=1e-5)
    # alpha = 0.5: z = 1/3.5; E(2000) = 2000^0.2857 * 7.601 = 66.7.
    np.testing.assert_allclose(exploration_threshold(2000, 0.5, 2, 1.0), 66.7, rtol=2e-3)
    # The scale multiplies before the floor: 0.01 * 159.0 = 1.59, 0.01 * 5.78 -> 1.
    np.testing.assert_allclose(
        exploration_threshold(jnp.array([10, 2000]), 1.0, 2, 0.01), [1.0, 1.590], rtol=2e-3
    )


def test_grid_index_hand_worked():
    ctx = jnp.array([[0.0, 0.0], [1.0, 1.0], [0.3, 0.5], [0.2, 0.999], [0.19, 0.61]])
    # G = 5: (0,0) -> 0; (4,4) -> 24; (1,2) -> 7; (1,4) -> 9; (0,3) -> 3.
    np.testing.assert_array_equal(grid_index(ctx, 5), [0, 24, 7, 9, 3])
    np.testing.assert_array_equal(grid_index(ctx, 1), [0, 0, 0, 0, 0])
    # D = 3, G = 2: (1,1,1) -> 4 + 2 + 1.
    np.testing.assert_array_equal(grid_index(jnp.array([[0.5, 0.7, 0.9]]), 2), [7])


@pytest.mark.parametrize("grid", [1, 2, 3, 4, 5, 7, 9])
def test_grid_index_matches_integer_arithmetic(grid):
    # The environment's contexts I / 10 and D / 3333 fall in the cell that integer
    # arithmetic gives, min(I G // 10, G - 1), with no float edge effects.
    activity, samples = np.meshgrid(np.arange(11), np.arange(1, 3334, 7), indexing="ij")
    activity, samples = activity.ravel(), samples.ravel()
    ctx = np.stack([activity / np.float32(10), samples / np.float32(3333)], -1)
    expected = np.minimum(activity * grid // 10, grid - 1) * grid + np.minimum(
        samples * grid // 3333, grid - 1
    )
    np.testing.assert_array_equal(grid_index(jnp.asarray(ctx, jnp.float32), grid), expected)


def _state_with(counts_here, means_here, cells, num_cells):
    """A CCMABState whose (client, current cell) counts and means are given."""
    k = counts_here.shape[0]
    counts = np.zeros((k, num_cells), np.float32)
    sums = np.zeros((k, num_cells), np.float32)
    counts[np.arange(k), cells] = counts_here
    sums[np.arange(k), cells] = counts_here * means_here
    sel = dfl_ccmab(k, 2, num_servers=3, grid=2, exploration_scale=1.0)
    state = sel.init(jax.random.PRNGKey(0))
    return sel, state._replace(counts=jnp.asarray(counts), sums=jnp.asarray(sums))


def _contexts_for(cells, grid):
    """Contexts at the centre of the given flat grid cells (D = 2)."""
    return jnp.asarray(np.stack([cells // grid, cells % grid], -1) / grid + 0.5 / grid, jnp.float32)


def test_select_matches_the_three_cases_per_server():
    # 3 servers x 6 clients, N = 2, t = 10: E(10) = 5.78, so counts < 5.78 are under-explored.
    # Server 0 exploits; server 1 has one under-explored client; server 2 has four.
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 4, 18)
    counts = np.array([9] * 6 + [9, 9, 3, 9, 9, 9] + [0, 2, 9, 5, 1, 9], np.float32)
    means = rng.permutation(18).astype(np.float32) / 10 + 0.1
    sel, state = _state_with(counts, means, cells, 4)
    inp = RoundInput(t=jnp.int32(10), available=jnp.ones(18, bool), context=_contexts_for(cells, 2))
    picks = []
    select = jax.jit(sel.select)
    for seed in range(400):
        decision, new_state = select(state, inp, jax.random.PRNGKey(seed))
        chosen = np.flatnonzero(decision.selected)
        picks.append(chosen)
        # Server 0: its 2 smallest estimates, eq. (17).
        np.testing.assert_array_equal(chosen[:2], np.sort(np.argsort(means[:6])[:2]))
        # Server 1: the under-explored client 8, then the smallest estimate of the rest.
        rest = [6, 7, 9, 10, 11]
        best = rest[int(np.argmin(means[rest]))]
        np.testing.assert_array_equal(chosen[2:4], sorted([8, best]))
        # Server 2: two of its four under-explored clients {12, 13, 15, 16}.
        assert set(chosen[4:]) <= {12, 13, 15, 16} and len(chosen) == 6
        np.testing.assert_array_equal(
            decision.assignment, np.where(decision.selected, np.arange(18) // 6, -1)
        )
        np.testing.assert_array_equal(new_state.exploration_rounds, [0.0, 1.0, 1.0])
        np.testing.assert_array_equal(new_state.grid_cell, cells)
    # Case 2 draws uniformly: each under-explored client of server 2 is picked w.p. 1/2.
    freq = np.mean([[c in p for c in (12, 13, 15, 16)] for p in picks], axis=0)
    np.testing.assert_allclose(freq, 0.5, atol=4 * math.sqrt(0.25 / 400))


def test_first_round_explores_everywhere():
    sel = bandits.dfl_ccmab(18, 2, horizon=100)
    state = sel.init(jax.random.PRNGKey(0))
    inp = RoundInput(t=jnp.int32(1), available=jnp.ones(18, bool), context=jnp.zeros((18, 2)))
    _, state = sel.select(state, inp, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(state.exploration_rounds, [1.0, 1.0, 1.0])


def test_update_counts_and_sample_means():
    sel = bandits.dfl_ccmab(6, 1, num_servers=2, grid=2)
    state = sel.init(jax.random.PRNGKey(0))
    cells = np.array([0, 3, 1, 2, 2, 0])
    inp = RoundInput(t=jnp.int32(5), available=jnp.ones(6, bool), context=_contexts_for(cells, 2))
    observed = jnp.array([True, False, True, True, False, False])
    delays = jnp.array([1.5, jnp.nan, 0.5, 2.0, jnp.inf, 7.0])
    for delay_scale in (1.0, 3.0):
        decision, state = sel.select(state, inp, jax.random.PRNGKey(0))
        fb = Feedback(observed, -delays * delay_scale, delays * delay_scale, observed)
        state = sel.update(state, decision, fb)
    counts = np.zeros((6, 4))
    counts[[0, 2, 3], cells[[0, 2, 3]]] = 2
    np.testing.assert_array_equal(state.counts, counts)
    sums = np.zeros((6, 4))
    sums[[0, 2, 3], cells[[0, 2, 3]]] = [4 * 1.5, 4 * 0.5, 4 * 2.0]  # 1x then 3x the delay
    np.testing.assert_allclose(state.sums, sums)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_clients=18, num_selected=7), "num_selected"),
        (dict(num_clients=18, num_selected=0), "num_selected"),
        (dict(num_clients=18, num_selected=2, num_servers=4), "num_servers"),
        (dict(num_clients=18, num_selected=2, grid=0), "grid"),
        (dict(num_clients=18, num_selected=2, horizon=0), "horizon"),
        (dict(num_clients=18, num_selected=2, alpha=0.0), "alpha"),
        (dict(num_clients=18, num_selected=2, exploration_scale=-1.0), "exploration_scale"),
    ],
)
def test_policy_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bandits.dfl_ccmab(**kwargs)


@pytest.mark.parametrize("factory", [bandits.per_server_random, bandits.per_server_epsilon_greedy])
def test_baselines_bad_input(factory):
    with pytest.raises(ValueError, match="num_selected"):
        factory(18, 7)
    with pytest.raises(ValueError, match="num_servers"):
        factory(18, 2, num_servers=5)
