r"""Assignment of clients to edge servers under a knapsack budget per server.

The combinatorial step of hierarchical client selection (Qu et al., "Context-aware
Online Client Selection for Hierarchical Federated Learning", IEEE TPDS 2022, P2 eq. 10):

.. math:: \max_{x \in \{0,1\}^{N \times M}} \sum_{n,m} v_{n,m} x_{n,m} \quad
          \text{s.t.}\ \sum_n c_n x_{n,m} \le B_m\ (10b),\quad
          x_{n,m} \le e_{n,m}\ (10c),\quad \sum_m x_{n,m} \le 1\ (10d),

a generalized assignment problem with the same weight :math:`c_n` at every server.
Each kernel acts on one trial's arrays (`f32[N, M]` values, `f32[N]` costs, `bool[N, M]`
eligibility, `f32[M]` budgets) and returns `bool[N, M]` with at most one `True` per row;
`jax.vmap` adds the trial axis. All are sequential scans over clients (or pairs) of
vectorized steps, so that one program serves every trial.

- `max_cardinality`: the most pairs (every value 1), cheapest client first (eqs. 14, 15).
- `greedy`: pairs by value per cost with the best-single-item fix.
- `knapsack`: a 0/1 knapsack dynamic programme per server on a cost grid, the servers
  in a random order, each taking from the clients the earlier ones left.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# Costs within this many grid steps below a grid point count as on it (f32 division).
_GRID_SLACK = 1e-4


def max_cardinality(
    cost: jax.Array, eligible: jax.Array, budget: jax.Array, key: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The most client-server pairs within the budgets, cheapest client first.

    Clients are visited in ascending cost (equal costs in a uniformly random order);
    each goes to the eligible server with the largest remaining budget among those it
    fits, or is skipped. Optimal with one server (cheapest-first maximises the count of
    one knapsack); with several servers sharing clients the problem is NP-hard and this
    is the spec's heuristic (Qu et al. eqs. 14, 15; spec §3.5.1).

    Args:
      cost: f32[N], each client's cost :math:`c_n \\ge 0`.
      eligible: bool[N, M], pairs that may be selected.
      budget: f32[M], each server's budget :math:`B_m`.
      key: PRNG key for the order of equal costs.

    Returns:
      (selected bool[N, M], remaining budgets f32[M]).
    """
    n, m = eligible.shape
    order = ascending_order(cost, key)

    def visit(remaining, client):
        reachable, price = client
        fits = reachable & (remaining >= price)
        server = jnp.argmax(jnp.where(fits, remaining, -jnp.inf))
        row = jnp.any(fits) & (jnp.arange(m) == server)
        return remaining - jnp.where(row, price, 0.0), row

    # The clients in visiting order as scanned inputs: no gather inside the loop.
    remaining, rows = lax.scan(visit, budget.astype(jnp.float32), (eligible[order], cost[order]))
    return jnp.zeros((n, m), bool).at[order].set(rows), remaining


def greedy(
    value: jax.Array, cost: jax.Array, eligible: jax.Array, budget: jax.Array, key: jax.Array
) -> jax.Array:
    """Pairs by value per cost, then per server the best single item if it is worth more.

    Eligible pairs of positive value are visited in descending :math:`v_{n,m}/c_n`
    (ties in a uniformly random order; a free pair ranks first); a pair is taken if its
    client is still unassigned and it fits its server's remaining budget. Then, server
    by server, the greedy set is replaced by the single most valuable affordable pair of
    a client no other server holds if that pair is worth more (the classic fix: with one
    server the result is at least half the optimum).

    Args:
      value: f32[N, M], :math:`v_{n,m}`; pairs of value <= 0 are never taken.
      cost: f32[N], :math:`c_n \\ge 0`.
      eligible: bool[N, M].
      budget: f32[M].
      key: PRNG key for ties.

    Returns:
      bool[N, M], feasible for (10b)-(10d).
    """
    n, m = eligible.shape
    usable = eligible & (value > 0)
    density = jnp.where(usable, value / jnp.maximum(cost, 1e-30)[:, None], -jnp.inf)
    flat = density.reshape(-1)
    tie = jax.random.permutation(key, n * m)
    *_, order = lax.sort((-flat, tie, jnp.arange(n * m)), num_keys=2)

    def visit(carry, pair):
        remaining, assigned = carry
        client, server = pair // m, pair % m
        take = usable[client, server] & ~assigned[client] & (remaining[server] >= cost[client])
        remaining = remaining.at[server].add(jnp.where(take, -cost[client], 0.0))
        return (remaining, assigned.at[client].set(assigned[client] | take)), take

    _, taken = lax.scan(visit, (budget.astype(jnp.float32), jnp.zeros(n, bool)), order)
    selected = jnp.zeros(n * m, bool).at[order].set(taken).reshape(n, m)

    def single_item_fix(selected, server):
        held_elsewhere = jnp.any(selected, axis=1) & ~selected[:, server]
        candidate = usable[:, server] & ~held_elsewhere & (cost <= budget[server])
        single = jnp.where(candidate, value[:, server], -jnp.inf)
        best = jnp.argmax(single)
        greedy_value = jnp.sum(jnp.where(selected[:, server], value[:, server], 0.0))
        swap = single[best] > greedy_value
        column = jnp.where(swap, jnp.arange(n) == best, selected[:, server])
        return selected.at[:, server].set(column), None

    selected, _ = lax.scan(single_item_fix, selected, jnp.arange(m))
    return selected


# Up to this many clients `ascending_order` counts (N^2 comparisons) instead of sorting.
_COUNTING_MAX = 128


def _position(keys: tuple[jax.Array, ...]) -> jax.Array:
    """int32[N]: each item's position in the lexicographic order of `keys` (each [N]),
    then by index: the number of items before it, by N^2 comparisons."""
    n = keys[0].shape[0]
    index = jnp.arange(n)
    before = index[None, :] < index[:, None]
    for k in reversed(keys):
        before = (k[None, :] < k[:, None]) | ((k[None, :] == k[:, None]) & before)
    return jnp.sum(before, axis=1, dtype=jnp.int32)


def _inverse(position: jax.Array) -> jax.Array:
    """int32[N], the items in order, from their positions (a permutation of 0..N-1)."""
    n = position.shape[0]
    return jnp.zeros(n, jnp.int32).at[position].set(jnp.arange(n, dtype=jnp.int32))


def ascending_order(cost: jax.Array, key: jax.Array, counting: bool | None = None) -> jax.Array:
    """int32[N]: the clients by ascending cost, equal costs in a uniformly random order.

    The lexicographic sort of (cost, uniform random bits, index): equal bits, with
    probability below N^2 / 2^33, leave equal costs in index order. Up to
    `_COUNTING_MAX` clients the same order is found by counting each client's position
    (N^2 comparisons; on CPU a sort of a few dozen items costs more); tested equal.

    Args:
      cost: f32[N].
      key: PRNG key of the bits that order equal costs.
      counting: count (True) or sort (False); None chooses by N.
    """
    n = cost.shape[0]
    tie = jax.random.bits(key, (n,), jnp.uint32)
    if counting is None:
        counting = n <= _COUNTING_MAX
    if not counting:
        *_, order = lax.sort((cost, tie, jnp.arange(n, dtype=jnp.int32)), num_keys=2)
        return order
    return _inverse(_position((cost, tie)))


def random_order(key: jax.Array, m: int) -> jax.Array:
    """int32[m], a uniformly random order of `0..m-1` for a few items (the servers).

    Item i goes to position #{j : (u_j, j) < (u_i, i)} of uniform random bits u: m^2
    comparisons and no sort (`jax.random.permutation` sorts, which on CPU costs more
    than the comparisons for a handful of servers).
    """
    return _inverse(_position((jax.random.bits(key, (m,), jnp.uint32),)))


def grid_units(cost: jax.Array, cost_step: float) -> jax.Array:
    """int32 units of `cost` on a grid of step `cost_step`, rounded up (never under-counts):
    the least u with u `cost_step` >= `cost` in f32. The division's rounding is allowed
    for by a slack, and a unit added back where the slack took one off (a cost up to
    1e-4 of a step above a grid point)."""
    units = jnp.ceil(cost / cost_step - _GRID_SLACK).astype(jnp.int32)
    return jnp.where(units * jnp.float32(cost_step) < cost, units + 1, units)


def grid_capacity(budget: float, cost_step: float) -> int:
    """The static capacity of a budget on the grid: floor(budget / cost_step) units."""
    return int(budget / cost_step + _GRID_SLACK)


def knapsack(
    value: jax.Array,
    cost: jax.Array,
    eligible: jax.Array,
    budget: jax.Array,
    key: jax.Array,
    cost_step: float,
    capacity_units: int,
) -> jax.Array:
    """A 0/1 knapsack per server on a cost grid, servers in a random order (spec §3.5.2 b).

    Costs are rounded up to multiples of `cost_step` and budgets down, so the result
    always respects the real budgets; with costs on the grid it is optimal for each
    server given the clients the earlier servers took, hence exact when no client is
    eligible at two servers. Each server's programme is a scan over the clients of a
    value vector over capacities `0..capacity_units` and a table of decisions, read back
    by a reverse scan.

    Args:
      value: f32[N, M]; pairs of value <= 0 are never taken.
      cost: f32[N], costs >= 0.
      eligible: bool[N, M].
      budget: f32[M], budgets >= 0.
      key: PRNG key for the order of the servers.
      cost_step: static grid step > 0.
      capacity_units: static, at least `floor(max budget / cost_step)`; larger budgets are
        cut to it.

    Returns:
      bool[N, M], feasible for (10b)-(10d).
    """
    n, m = eligible.shape
    units = grid_units(cost, cost_step)
    capacity = jnp.clip(
        jnp.floor(budget / cost_step + _GRID_SLACK).astype(jnp.int32), 0, capacity_units
    )

    def one_server(assigned, server):
        usable = eligible[:, server] & ~assigned & (value[:, server] > 0)

        def add_item(best, item):
            v, w, ok = item
            # shifted[l] = best[l - w] + v, -inf below w (no room): a slice of the values
            # after capacity_units + 1 levels of -inf.
            padded = jnp.concatenate([jnp.full(capacity_units + 1, -jnp.inf), best])
            start = capacity_units + 1 - jnp.minimum(w, capacity_units + 1)
            shifted = lax.dynamic_slice(padded, (start,), (capacity_units + 1,)) + v
            keep = ok & (shifted > best)
            return jnp.where(keep, shifted, best), keep

        start = jnp.zeros(capacity_units + 1, jnp.float32)
        _, keep = lax.scan(add_item, start, (value[:, server], units, usable))

        def read_back(level, item):
            keep_row, w = item
            take = keep_row[level]
            return level - jnp.where(take, w, 0), take

        _, taken = lax.scan(read_back, capacity[server], (keep, units), reverse=True)
        return assigned | taken, taken

    order = random_order(key, m)
    _, columns = lax.scan(one_server, jnp.zeros(n, bool), order)
    return jnp.zeros((m, n), bool).at[order].set(columns).T


SOLVERS = ("knapsack", "greedy")


def solve(
    solver: str,
    value: jax.Array,
    cost: jax.Array,
    eligible: jax.Array,
    budget: jax.Array,
    key: jax.Array,
    cost_step: float,
    capacity_units: int,
) -> jax.Array:
    """The P2 solver named `solver` ("knapsack" or "greedy"; static), bool[N, M]."""
    if solver == "knapsack":
        return knapsack(value, cost, eligible, budget, key, cost_step, capacity_units)
    return greedy(value, cost, eligible, budget, key)


def assignment_of(selected: jax.Array) -> jax.Array:
    """int32[N]: the server of each row of `selected` (bool[N, M], <= 1 True a row), -1 for none."""
    return jnp.where(jnp.any(selected, axis=1), jnp.argmax(selected, axis=1), -1).astype(jnp.int32)


def pairs_of(assignment: jax.Array, num_servers: int) -> jax.Array:
    """bool[N, M] one-hot rows of `assignment` (int32[N], -1 for none)."""
    return assignment[:, None] == jnp.arange(num_servers)
