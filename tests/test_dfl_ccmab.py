"""CC-MAB scheduling per edge server (Chen et al., 2025): formulas, grid, selection, update."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
from bandits.dfl_ccmab import dfl_ccmab, exploration_threshold, grid_index, grid_size
from fedjax_sel import envs
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


@pytest.mark.parametrize("grid", [1, 2, 3, 4, 5, 7, 9, 11, 33])
def test_grid_index_matches_integer_arithmetic(grid):
    # The environment's contexts I / 10 and D / 3333, divided as `dfl_delay` divides
    # them (under jit, where XLA multiplies by the reciprocal), fall in the cell that
    # integer arithmetic gives, min(I G // 10, G - 1), for every I and D: D = 1111 and
    # 2222 lie on edges at G = 3, 9, 33.
    activity, samples = np.meshgrid(np.arange(11), np.arange(1, 3334), indexing="ij")
    activity, samples = activity.ravel(), samples.ravel()
    context = jax.jit(lambda a, d: jnp.stack([a / 10, d / 3333], -1).astype(jnp.float32))
    ctx = context(jnp.asarray(activity, jnp.int32), jnp.asarray(samples, jnp.int32))
    expected = np.minimum(activity * grid // 10, grid - 1) * grid + np.minimum(
        samples * grid // 3333, grid - 1
    )
    np.testing.assert_array_equal(jax.jit(grid_index, static_argnums=1)(ctx, grid), expected)


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


def _plain_select(counts, means, threshold, sizes, n):
    """Per cell, in a loop (Sec. 5.2): the chosen set when it is determined, else the
    under-explored clients N of which are drawn at random."""
    out, start = [], 0
    for size in sizes:
        cell = list(range(start, start + size))
        under = [k for k in cell if counts[k] < threshold]
        rest = sorted((k for k in cell if k not in under), key=lambda k: means[k])
        if len(under) > n:
            out.append(("random", set(under)))
        else:
            out.append(("fixed", set(under) | set(rest[: min(n, size) - len(under)])))
        start += size
    return out


def test_unequal_cells_match_a_plain_loop_over_cells():
    # Cells of 3, 5, 1 and 3 clients, N = 2, t = 10 (E = 5.78): cell 0 exploits, cell 1
    # has three under-explored clients, cell 2 is smaller than N, cell 3 has one.
    sizes, n = (3, 5, 1, 3), 2
    counts = np.array([9, 9, 9, 0, 9, 2, 9, 4, 9, 9, 1, 9], np.float32)
    means = np.array([0.5, 0.2, 0.9, 0.1, 0.3, 0.7, 0.4, 0.6, 0.8, 0.15, 0.25, 0.05], np.float32)
    cells = np.arange(12) % 4
    sel = dfl_ccmab(12, n, num_servers=4, grid=2, exploration_scale=1.0, cell_sizes=sizes)
    state = sel.init(jax.random.PRNGKey(0))
    table = np.zeros((12, 4), np.float32)
    table[np.arange(12), cells] = 1.0
    state = state._replace(
        counts=jnp.asarray(table * counts[:, None]),
        sums=jnp.asarray(table * (counts * means)[:, None]),
    )
    inp = RoundInput(t=jnp.int32(10), available=jnp.ones(12, bool), context=_contexts_for(cells, 2))
    expected = _plain_select(counts, means, float(exploration_threshold(10)), sizes, n)
    server = np.repeat(np.arange(4), sizes)
    select = jax.jit(sel.select)
    for seed in range(50):
        decision, new_state = select(state, inp, jax.random.PRNGKey(seed))
        chosen = set(np.flatnonzero(decision.selected))
        start = 0
        for (kind, clients), size in zip(expected, sizes, strict=True):
            mine = {k for k in chosen if start <= k < start + size}
            if kind == "fixed":
                assert mine == clients
            else:
                assert len(mine) == n and mine <= clients
            start += size
        np.testing.assert_array_equal(decision.assignment, np.where(decision.selected, server, -1))
        np.testing.assert_array_equal(new_state.exploration_rounds, [0.0, 1.0, 0.0, 1.0])


@pytest.mark.parametrize("factory", [bandits.per_server_random, bandits.per_server_epsilon_greedy])
def test_baselines_schedule_min_of_n_and_the_cell_size(factory):
    sizes = (1, 4, 2)
    sel = factory(7, 2, num_servers=3, cell_sizes=sizes)
    inp = RoundInput(t=jnp.int32(1), available=jnp.ones(7, bool))
    server = np.repeat(np.arange(3), sizes)
    select = jax.jit(jax.vmap(lambda key: sel.select(sel.init(key), inp, key)[0]))
    decisions = select(jax.random.split(jax.random.PRNGKey(0), 20))
    for selected, assignment in zip(decisions.selected, decisions.assignment, strict=True):
        np.testing.assert_array_equal(np.bincount(server[selected], minlength=3), [1, 2, 2])
        np.testing.assert_array_equal(assignment, np.where(selected, server, -1))


@pytest.mark.parametrize(
    "cell_sizes",
    [(6, 6), (6, 6, 5), (6, 6, 7), (0, 9, 9), (6, -6, 18), (6.0, 6, 6), 18, (1, 1, 16)],
)
def test_cell_sizes_bad_input(cell_sizes):
    # Three servers over 18 clients: sizes must be 3 integers >= 1 summing to 18; N = 2
    # must fit the largest cell ((1, 1, 16) is fine for N = 2, not for N = 17).
    n = 17 if cell_sizes == (1, 1, 16) else 2
    match = "num_selected" if n == 17 else "cell_sizes"
    for factory in (
        bandits.dfl_ccmab,
        bandits.per_server_random,
        bandits.per_server_epsilon_greedy,
        envs.dfl_delay,
    ):
        with pytest.raises(ValueError, match=match):
            factory(18, n, num_servers=3, cell_sizes=cell_sizes)
