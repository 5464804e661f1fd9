"""The assignment kernels (`fedjax_sel.ops.assignment`) against exact optima.

Thousands of random small instances, solved at once under `jax.vmap`, are compared with
an exhaustive search over every assignment (numpy), itself checked against the integer
programme of `experiments.references.qu.assignment_milp`. Every batch has the same shapes
(COUNT instances of N clients and M servers; one-server instances leave the others
ineligible), so that each kernel compiles once.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.references.qu import assignment_milp
from fedjax_sel.ops import assignment

STEP = 0.25
UNITS = 16  # capacity 4.0 on the grid
COUNT, N, M = 1000, 6, 3


def _instances(seed, count=COUNT, n=N, m=M, *, disjoint=False, ties=False, servers=M):
    """Random instances: values, grid costs in [0.25, 2.5], eligibility, budgets <= 4;
    only the first `servers` servers eligible."""
    rng = np.random.default_rng(seed)
    if ties:
        value = rng.integers(0, 3, (count, n, m)) / 2.0
        cost = np.full((count, n), 1.0)
    else:
        value = rng.uniform(0.0, 1.0, (count, n, m))
        cost = rng.integers(1, 11, (count, n)) * STEP
    eligible = (rng.uniform(size=(count, n, m)) < 0.7) & (np.arange(m) < servers)
    if disjoint:
        only = rng.integers(0, m, (count, n))
        eligible &= only[..., None] == np.arange(m)
    budget = rng.integers(2, UNITS + 1, (count, m)) * STEP
    f32 = np.float32
    return value.astype(f32), cost.astype(f32), eligible, budget.astype(f32)


def _exhaustive(value, cost, eligible, budget):
    """The best total value of every instance (f64[count]), over all (M + 1)^N assignments."""
    count, n, m = value.shape
    plans = np.array(list(itertools.product(range(-1, m), repeat=n)))  # [P, N]
    onehot = plans[..., None] == np.arange(m)  # [P, N, M]
    ok = np.all(~onehot[None] | eligible[:, None], axis=(2, 3))  # [count, P]
    spent = np.einsum("pnm,cn->cpm", onehot, cost.astype(np.float64))
    ok &= np.all(spent <= budget[:, None].astype(np.float64) + 1e-6, axis=2)
    total = np.einsum("pnm,cnm->cp", onehot, value.astype(np.float64))
    return np.max(np.where(ok, total, -np.inf), axis=1)


def _check_feasible(selected, cost, eligible, budget):
    selected = np.asarray(selected)
    assert np.all(selected.sum(-1) <= 1), "a client at two servers"
    assert not np.any(selected & ~eligible), "an ineligible pair"
    spent = np.einsum("cnm,cn->cm", selected, cost)
    assert np.all(spent <= budget + 1e-5), "a budget exceeded"


def _total(selected, value):
    return np.sum(np.where(np.asarray(selected), value, 0.0), axis=(1, 2))


@functools.cache
def _batched(kernel):
    return jax.jit(jax.vmap(kernel))


def _run(kernel, *arrays, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), arrays[0].shape[0])
    return _batched(kernel)(*arrays, keys)


knapsack = functools.partial(assignment.knapsack, cost_step=STEP, capacity_units=UNITS)


def test_exhaustive_search_equals_the_integer_programme():
    value, cost, eligible, budget = _instances(1, 60, 5)
    best = _exhaustive(value, cost, eligible, budget)
    for i in range(60):
        x = assignment_milp(value[i], cost[i], eligible[i], budget[i])
        _check_feasible(x[None], cost[i : i + 1], eligible[i : i + 1], budget[i : i + 1])
        np.testing.assert_allclose(_total(x[None], value[i : i + 1]), best[i], rtol=1e-6)


def test_knapsack_is_exact_when_no_client_is_shared():
    value, cost, eligible, budget = _instances(2, disjoint=True)
    selected = _run(knapsack, value, cost, eligible, budget)
    _check_feasible(selected, cost, eligible, budget)
    np.testing.assert_allclose(
        _total(selected, value), _exhaustive(value, cost, eligible, budget), rtol=1e-5
    )


def test_knapsack_with_shared_clients_is_feasible_and_at_most_optimal():
    value, cost, eligible, budget = _instances(3)
    selected = _run(knapsack, value, cost, eligible, budget)
    _check_feasible(selected, cost, eligible, budget)
    got, best = _total(selected, value), _exhaustive(value, cost, eligible, budget)
    assert np.all(got <= best + 1e-5)
    # The first server of the random order reaches its own optimum over all clients, at
    # least its share of the joint optimum: on average over orders, 1/M of the optimum.
    assert got.mean() >= best.mean() / 3, (got.mean(), best.mean())


def test_greedy_on_one_server_is_within_half_the_optimum():
    value, cost, eligible, budget = _instances(4, servers=1)
    selected = _run(assignment.greedy, value, cost, eligible, budget)
    _check_feasible(selected, cost, eligible, budget)
    got, best = _total(selected, value), _exhaustive(value, cost, eligible, budget)
    assert np.all(got >= 0.5 * best - 1e-5)
    assert np.all(got <= best + 1e-5)


def test_greedy_single_item_fix_takes_the_valuable_item():
    # Density favours the cheap item (1.0/0.5 > 1.5/2.0), which blocks the valuable one.
    value = jnp.array([[1.0], [1.5]])
    cost = jnp.array([0.5, 2.0])
    selected = assignment.greedy(
        value, cost, jnp.ones((2, 1), bool), jnp.array([2.0]), jax.random.PRNGKey(0)
    )
    np.testing.assert_array_equal(selected, [[False], [True]])


def test_max_cardinality_on_one_server_is_optimal():
    value, cost, eligible, budget = _instances(5, servers=1)
    selected, remaining = _run(assignment.max_cardinality, cost, eligible, budget)
    _check_feasible(selected, cost, eligible, budget)
    ones = np.ones_like(value)
    np.testing.assert_allclose(
        _total(selected, ones), _exhaustive(ones, cost, eligible, budget), rtol=0
    )
    spent = np.einsum("cnm,cn->cm", np.asarray(selected), cost)
    np.testing.assert_allclose(remaining, budget - spent, atol=1e-5)


def test_max_cardinality_hand_worked():
    # Cheapest first: client 0 (1.0) to the larger budget (server 0, 1.2 left), client 2
    # (1.1) to server 0, its only one (0.1 left), client 1 (1.2) to server 1 (0.3 left).
    cost = jnp.array([1.0, 1.2, 1.1])
    eligible = jnp.array([[True, True], [True, True], [True, False]])
    selected, remaining = assignment.max_cardinality(
        cost, eligible, jnp.array([2.2, 1.5]), jax.random.PRNGKey(0)
    )
    np.testing.assert_array_equal(selected, [[True, False], [False, True], [True, False]])
    np.testing.assert_allclose(remaining, [0.1, 0.3], atol=1e-6)


def _max_cardinality_pairs(value, cost, eligible, budget, key):
    del value
    return assignment.max_cardinality(cost, eligible, budget, key)[0]


@pytest.mark.parametrize("solver", ["knapsack", "greedy", "max_cardinality"])
def test_every_solver_is_feasible_with_ties_and_shared_clients(solver):
    value, cost, eligible, budget = _instances(6, ties=True)
    kernel = {
        "knapsack": knapsack,
        "greedy": assignment.greedy,
        "max_cardinality": _max_cardinality_pairs,
    }[solver]
    selected = _run(kernel, value, cost, eligible, budget)
    _check_feasible(selected, cost, eligible, budget)
    # Ties are broken by the key: another key gives another, equally feasible, choice.
    other = _run(kernel, value, cost, eligible, budget, seed=1)
    _check_feasible(other, cost, eligible, budget)


def test_grid_units_round_up_and_keep_grid_points():
    units = assignment.grid_units(jnp.array([0.25, 0.5, 0.26, 1.05, 0.0, 0.15]), 0.05)
    np.testing.assert_array_equal(units, [5, 10, 6, 21, 0, 3])
    # Just above a grid point, within the slack for the division's rounding: one more
    # unit (it was rounded down, and the knapsack could spend beyond the real budget).
    above = jnp.array([1.00005, 0.05000005, 3.4999, 70.0001])
    units = np.asarray(assignment.grid_units(above, 0.05))
    np.testing.assert_array_equal(units, [21, 2, 70, 1401])
    assert np.all(units * np.float32(0.05) >= np.asarray(above))
    # Two clients of cost 1.00005 and one server of budget 2: one fits, not both.
    taken = assignment.knapsack(
        jnp.ones((2, 1)),
        jnp.array([1.00005, 1.00005]),
        jnp.ones((2, 1), bool),
        jnp.array([2.0]),
        jax.random.PRNGKey(0),
        cost_step=1.0,
        capacity_units=2,
    )
    assert int(np.sum(taken)) == 1


def test_assignment_round_trip():
    pairs = jnp.array([[False, True], [False, False], [True, False]])
    a = assignment.assignment_of(pairs)
    np.testing.assert_array_equal(a, [1, -1, 0])
    np.testing.assert_array_equal(assignment.pairs_of(a, 2), pairs)


def test_ascending_order_counts_and_sorts_alike_and_orders_equal_costs_at_random():
    keys = jax.random.split(jax.random.PRNGKey(7), 2000)
    # Costs from a few values: many ties, which the random bits order.
    cost = jax.random.randint(jax.random.PRNGKey(8), (2000, 20), 0, 4).astype(jnp.float32)
    counted = jax.vmap(lambda c, k: assignment.ascending_order(c, k, counting=True))(cost, keys)
    sorted_ = jax.vmap(lambda c, k: assignment.ascending_order(c, k, counting=False))(cost, keys)
    np.testing.assert_array_equal(counted, sorted_)
    counted = np.asarray(counted)
    assert np.all(np.sort(counted, axis=1) == np.arange(20))  # permutations
    assert np.all(np.diff(np.take_along_axis(np.asarray(cost), counted, 1), axis=1) >= 0)
    # Four equal costs: each client first with probability 1/4 (2,000 draws, sd 19.4).
    first = jax.vmap(lambda k: assignment.ascending_order(jnp.ones(4), k)[0])(keys)
    counts = np.bincount(np.asarray(first), minlength=4)
    assert np.all(np.abs(counts - 500) < 5 * 19.4), counts


def test_random_order_is_a_uniform_permutation_of_the_servers():
    keys = jax.random.split(jax.random.PRNGKey(9), 6000)
    orders = np.asarray(jax.vmap(lambda k: assignment.random_order(k, 3))(keys))
    assert np.all(np.sort(orders, axis=1) == np.arange(3))
    _, counts = np.unique(orders, axis=0, return_counts=True)
    # 3! orders, 1,000 expected each, sd sqrt(6000 (1/6)(5/6)) = 28.9.
    assert counts.size == 6 and np.all(np.abs(counts - 1000) < 5 * 28.9), counts
