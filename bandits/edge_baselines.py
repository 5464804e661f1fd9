r"""The baselines of Qu et al. (Sec. VI-B) on the hierarchical network, on COCS's solver.

Z. Qu et al., "Context-aware Online Client Selection for Hierarchical Federated Learning",
IEEE TPDS 2022. Each policy picks client-ES pairs under a budget B per ES, one ES per
client (`envs.hierarchical`); the learning ones score every reachable pair and hand the
scores to the same P2 solver as COCS and the oracle (spec §4):

- `edge_random`: clients in a random order, each to a uniformly random reachable ES,
  kept if it fits that ES's remaining budget (spec §4.4).
- `cucb_base`: combinatorial UCB (Chen, Wang, Yuan 2013) on context-free per-pair means,
  index :math:`\bar X_{n,m} + \sqrt{1.5 \ln t / T_{n,m}}` clipped to [0, 1], a pair never
  tried at 1 (spec §4.2).
- `cucb_super`: the paper's CUCB, UCB1 over a fixed catalogue of whole decisions drawn
  without context (spec §4.2 `cucb_super`): played decisions are repaired to the round's
  coverage and budgets, rewarded by their successes over the most a round can have.
- `edge_linucb`: LinUCB (Li et al. 2010) on pair features :math:`x = [\phi_{n,m}, 1]`,
  index :math:`\theta^\top x + \alpha \sqrt{x^\top A^{-1} x}` clipped to [0, 1]; one model
  shared by all pairs (default, spec §4.3) or one per pair (`model="disjoint"`).

The oracles are the environment's (`bandits.oracle` on `envs.hierarchical(oracle="p")`
or `oracle="X"`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from bandits import edge_inputs
from fedjax_sel import ops, validation
from fedjax_sel.ops import assignment
from fedjax_sel.types import Selector

LINUCB_MODELS = ("shared", "disjoint")


def _common(num_clients, num_selected, num_servers, budget, solver, cost_step):
    """Validated (N, M, budgets f32[M], grid capacity, cost step)."""
    n = validation.positive_int("num_clients", num_clients)
    if num_selected is not None:
        validation.num_selected(num_selected, n)
    m = validation.positive_int("num_servers", num_servers)
    b = validation.positive_float("budget", budget)
    validation.choice("solver", solver, assignment.SOLVERS)
    step = validation.positive_float("cost_step", cost_step)
    return n, m, jnp.full((m,), b, jnp.float32), assignment.grid_capacity(b, step), step


def edge_random(
    num_clients: int, num_selected: int | None = None, num_servers: int = 3, budget: float = 3.5
) -> Selector:
    """Random assignment under the budgets (Qu et al. Sec. VI-B "Random"; spec §4.4).

    Args:
      num_clients: N >= 1.
      num_selected: validated only, 1 <= k <= N or None (the budgets bound the cohort).
      num_servers: M >= 1.
      budget: B > 0 per ES.
    """
    n, m, budgets, _, _ = _common(num_clients, num_selected, num_servers, budget, "greedy", 1.0)

    def init(key):
        del key
        return ()

    def select(state, inp, key):
        r = edge_inputs.read(inp, n, m, None, "edge_random")
        order_key, server_key = jax.random.split(key)
        order = jax.random.permutation(order_key, n)
        noise = jax.random.uniform(server_key, (n, m))

        def visit(remaining, client):
            server = jnp.argmax(jnp.where(r.reachable[client], noise[client], -1.0))
            take = r.reachable[client, server] & (remaining[server] >= r.cost[client])
            row = take & (jnp.arange(m) == server)
            return remaining - jnp.where(row, r.cost[client], 0.0), row

        _, rows = lax.scan(visit, budgets, order)
        return edge_inputs.decision(jnp.zeros((n, m), bool).at[order].set(rows)), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)


class CUCBState(NamedTuple):
    """Per-pair play counts int32[N, M] and success sums f32[N, M]."""

    counts: jax.Array
    sums: jax.Array


def cucb_base(
    num_clients: int,
    num_selected: int | None = None,
    num_servers: int = 3,
    budget: float = 3.5,
    exploration: float = 1.5,
    solver: str = "knapsack",
    cost_step: float = 0.05,
) -> Selector:
    """CUCB on per-pair success means, fed to the P2 solver (spec §4.2 `cucb_base`).

    Args:
      num_clients: N >= 1.
      num_selected: validated only, 1 <= k <= N or None.
      num_servers: M >= 1.
      budget: B > 0 per ES.
      exploration: the factor c >= 0 of the bonus sqrt(c ln t / T) (1.5 in CUCB).
      solver: "knapsack" or "greedy".
      cost_step: > 0, the knapsack's cost grid.
    """
    n, m, budgets, units, step = _common(
        num_clients, num_selected, num_servers, budget, solver, cost_step
    )
    c = validation.float_in_range("exploration", exploration, 0.0, float("inf"))

    def init(key):
        del key
        return CUCBState(jnp.zeros((n, m), jnp.int32), jnp.zeros((n, m), jnp.float32))

    def select(state, inp, key):
        r = edge_inputs.read(inp, n, m, None, "cucb_base")
        tie_key, solve_key = jax.random.split(key)
        played = jnp.maximum(state.counts, 1).astype(jnp.float32)
        t = jnp.asarray(inp.t, jnp.float32)
        index = state.sums / played + jnp.sqrt(c * jnp.log(t) / played)
        index = jnp.clip(jnp.where(state.counts > 0, index, 1.0), 0.0, 1.0)
        index = index + 1e-6 * jax.random.uniform(tie_key, index.shape)
        chosen = assignment.solve(
            solver, index, r.cost, r.reachable, budgets, solve_key, step, units
        )
        return edge_inputs.decision(chosen), state

    def update(state, decision, feedback):
        pairs = edge_inputs.chosen_pairs(decision, feedback.observed, m)
        won = pairs & feedback.success[:, None]
        return CUCBState(state.counts + pairs, state.sums + won)

    return Selector(init=init, select=select, update=update)


class CUCBSuperState(NamedTuple):
    """CUCB over a catalogue of decisions.

    Attributes:
      catalogue: int32[K, N], the ES of each client in each decision (-1 for none).
      plays: int32[K], times each decision was played.
      sums: f32[K], their normalised rewards.
      played: int32[], the decision played this round (read by `update`).
    """

    catalogue: jax.Array
    plays: jax.Array
    sums: jax.Array
    played: jax.Array


def cucb_super(
    num_clients: int,
    num_selected: int | None = None,
    num_servers: int = 3,
    budget: float = 3.5,
    catalogue_size: int = 2000,
    nominal_cost: float = 1.0,
) -> Selector:
    r"""UCB1 over a catalogue of whole decisions (Qu et al. Sec. VI-B "CUCB"; spec §4.2).

    The paper's CUCB treats each decision as an arm and, unable to follow a time-varying
    arm set, plans with static resources. The catalogue holds `catalogue_size` random
    decisions, drawn per trial: each client to a uniformly random ES, each ES keeping
    :math:`K_{max} = \lfloor B / c_{nominal} \rfloor` of its clients at random
    (`nominal_cost`: 1, the cheapest MNIST client, as spec §4.2's
    :math:`K_{max} = \lfloor B / c_{min} \rfloor`). Each round the decision of largest
    index :math:`\bar r_k + \sqrt{2 \ln t / n_k}` (unplayed first,
    ties at random) is repaired: unreachable pairs dropped, then each ES's most expensive
    clients until its real budget holds. Its reward is its successes over
    :math:`M K_{max}`. With a catalogue larger than the horizon it explores throughout,
    the paper's "CUCB is close to Random".

    Args:
      num_clients: N >= 1.
      num_selected: validated only, 1 <= k <= N or None.
      num_servers: M >= 1.
      budget: B > 0 per ES.
      catalogue_size: K >= 1 decisions (2000).
      nominal_cost: > 0, the static cost per client that sizes the decisions.
    """
    n, m, budgets, _, _ = _common(num_clients, num_selected, num_servers, budget, "greedy", 1.0)
    size = validation.positive_int("catalogue_size", catalogue_size)
    nominal = validation.positive_float("nominal_cost", nominal_cost)
    slots = max(1, min(n, int(float(budget) / nominal)))
    scale = float(m * slots)

    def init(key):
        server_key, priority_key = jax.random.split(key)
        server = jax.random.randint(server_key, (size, n), 0, m)
        priority = jax.random.uniform(priority_key, (size, n))
        # A client's rank among its server's clients: its rank by (server, priority)
        # less the clients of the servers before its own.
        rank = jnp.argsort(jnp.argsort(server + priority, axis=1), axis=1)
        per_server = jnp.sum(server[..., None] == jnp.arange(m), axis=1)
        before = jnp.cumsum(per_server, axis=1) - per_server
        ahead = rank - jnp.take_along_axis(before, server, axis=1)
        catalogue = jnp.where(ahead < slots, server, -1).astype(jnp.int32)
        return CUCBSuperState(
            catalogue, jnp.zeros(size, jnp.int32), jnp.zeros(size, jnp.float32), jnp.int32(0)
        )

    def select(state, inp, key):
        r = edge_inputs.read(inp, n, m, None, "cucb_super")
        tie_key, repair_key = jax.random.split(key)
        plays = jnp.maximum(state.plays, 1).astype(jnp.float32)
        t = jnp.asarray(inp.t, jnp.float32)
        index = state.sums / plays + jnp.sqrt(2.0 * jnp.log(t) / plays)
        index = jnp.where(state.plays > 0, index, jnp.inf)
        played = ops.masked_top_k(index, jnp.ones(size, bool), 1, tie_key)
        arm = jnp.argmax(played).astype(jnp.int32)
        server = state.catalogue[arm]
        reachable = (server >= 0) & r.reachable[jnp.arange(n), jnp.maximum(server, 0)]
        keep = ops.grouped_budgeted_top_k(
            -r.cost, r.cost, reachable, jnp.maximum(server, 0), budgets, repair_key
        )
        pairs = assignment.pairs_of(jnp.where(keep, server, -1), m)
        return edge_inputs.decision(pairs), state._replace(played=arm)

    def update(state, decision, feedback):
        won = jnp.sum(decision.selected & feedback.observed & feedback.success) / scale
        return state._replace(
            plays=state.plays.at[state.played].add(1),
            sums=state.sums.at[state.played].add(won),
        )

    return Selector(init=init, select=select, update=update)


class LinUCBState(NamedTuple):
    """LinUCB's ridge statistics and this round's features.

    Attributes:
      gram: f32[F, F] (shared) or f32[N, M, F, F] (disjoint), A = I + sum x x^T.
      target: f32[F] or f32[N, M, F], b = sum X x.
      features: f32[N, M, F], this round's x of every pair (read by `update`).
    """

    gram: jax.Array
    target: jax.Array
    features: jax.Array


def edge_linucb(
    num_clients: int,
    num_selected: int | None = None,
    num_servers: int = 3,
    budget: float = 3.5,
    context_dim: int = 2,
    exploration: float = 1.0,
    model: str = "shared",
    solver: str = "knapsack",
    cost_step: float = 0.05,
) -> Selector:
    r"""LinUCB on pair contexts, fed to the P2 solver (spec §4.3).

    Args:
      num_clients: N >= 1.
      num_selected: validated only, 1 <= k <= N or None.
      num_servers: M >= 1.
      budget: B > 0 per ES.
      context_dim: D >= 1 of the pair contexts; features are :math:`[\phi, 1]`.
      exploration: :math:`\alpha \ge 0` of the confidence width (1.0).
      model: "shared" (one linear model of all pairs) or "disjoint" (one per pair).
      solver: "knapsack" or "greedy".
      cost_step: > 0, the knapsack's cost grid.
    """
    n, m, budgets, units, step = _common(
        num_clients, num_selected, num_servers, budget, solver, cost_step
    )
    d = validation.positive_int("context_dim", context_dim)
    width = validation.float_in_range("exploration", exploration, 0.0, float("inf"))
    shared = validation.choice("model", model, LINUCB_MODELS) == "shared"
    f = d + 1
    lead = () if shared else (n, m)

    def init(key):
        del key
        gram = jnp.broadcast_to(jnp.eye(f, dtype=jnp.float32), (*lead, f, f))
        return LinUCBState(gram, jnp.zeros((*lead, f)), jnp.zeros((n, m, f)))

    def select(state, inp, key):
        r = edge_inputs.read(inp, n, m, d, "edge_linucb")
        tie_key, solve_key = jax.random.split(key)
        x = jnp.concatenate([r.context, jnp.ones((n, m, 1))], axis=-1)
        inverse = jnp.broadcast_to(jnp.linalg.inv(state.gram), (n, m, f, f))
        theta = jnp.einsum("nmij,nmj->nmi", inverse, jnp.broadcast_to(state.target, (n, m, f)))
        spread = jnp.einsum("nmi,nmij,nmj->nm", x, inverse, x)
        index = jnp.sum(x * theta, -1) + width * jnp.sqrt(jnp.maximum(spread, 0.0))
        index = jnp.clip(index, 0.0, 1.0) + 1e-6 * jax.random.uniform(tie_key, (n, m))
        chosen = assignment.solve(
            solver, index, r.cost, r.reachable, budgets, solve_key, step, units
        )
        return edge_inputs.decision(chosen), state._replace(features=x)

    def update(state, decision, feedback):
        pairs = edge_inputs.chosen_pairs(decision, feedback.observed, m).astype(jnp.float32)
        won = pairs * feedback.success[:, None]
        x = state.features
        outer = pairs[..., None, None] * x[..., :, None] * x[..., None, :]
        gain = won[..., None] * x
        if shared:
            outer, gain = outer.sum((0, 1)), gain.sum((0, 1))
        return state._replace(gram=state.gram + outer, target=state.target + gain)

    return Selector(init=init, select=select, update=update)
