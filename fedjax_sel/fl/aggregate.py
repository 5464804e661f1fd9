"""Server-side aggregation of client updates: FedAvg/FedSGD, hierarchical, decentralized.

An `Aggregator` is optax-like: a NamedTuple of pure functions over an explicit state.
The server state may hold one model (FedAvg), one per edge server (hierarchical) or one
per server (decentralized); `client_params` gives each cohort slot the model its client
downloads, `update` folds the slots' updates in, and `global_params` is the model that
is evaluated.

Every aggregator reads the cohort as fixed-size slots (`Cohort`); an empty slot
(`valid` false) has weight zero, so it never moves any model. Clients that miss the
round's deadline (`arrived` false) are handled as each paper specifies (see each
factory). A server that receives nothing keeps its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation

Params = Any
AggregatorState = Any


class Cohort(NamedTuple):
    """The cohort of one round as k fixed slots.

    Attributes:
      valid: bool[k], the slot holds a selected client.
      arrived: bool[k], the client's update reached its server within the deadline.
      num_examples: f32[k], the client's number of training examples (its weight).
      group: int32[k], edge server (hierarchical) or server (decentralized) of the slot.
      latency: f32[k], the time in seconds the client's update takes to reach its
        server, not capped at the deadline: the fastest-Z fallback takes the least
        (equal times in slot order).
    """

    valid: chex.Array
    arrived: chex.Array
    num_examples: chex.Array
    group: chex.Array
    latency: chex.Array


class Aggregator(NamedTuple):
    """Server-side state and rules.

    Attributes:
      init: `params -> state`, every server starts from the same model.
      client_params: `(state, group int32[k]) -> params with a leading k axis`, the model
        each slot downloads.
      update: `(state, deltas with a leading k axis, cohort) -> state`.
      global_params: `state -> params`, the model that is evaluated.
    """

    init: Callable[[Params], AggregatorState]
    client_params: Callable[[AggregatorState, chex.Array], Params]
    update: Callable[[AggregatorState, Params, Cohort], AggregatorState]
    global_params: Callable[[AggregatorState], Params]


def weighted_mean_update(
    params: Params, deltas: Params, weights: chex.Array, group: chex.Array | None = None
) -> Params:
    """Adds the weighted mean of the slots' deltas to `params`, per group if given.

    Args:
      params: pytree; with `group`, every leaf has a leading axis G (one model per group).
      deltas: pytree like one model, every leaf with a leading slot axis k.
      weights: f32[k] >= 0; a group whose weights sum to 0 keeps its model.
      group: int32[k] or None, the group of each slot.

    Returns:
      `params + sum_i w_i delta_i / sum_i w_i` (per group).
    """
    if group is None:
        scale = weights / jnp.maximum(jnp.sum(weights), 1e-30)
        return jax.tree.map(lambda p, d: p + jnp.tensordot(scale, d, axes=1), params, deltas)
    num_groups = jax.tree.leaves(params)[0].shape[0]
    w = jnp.where(group[None, :] == jnp.arange(num_groups)[:, None], weights[None, :], 0.0)
    scale = w / jnp.maximum(jnp.sum(w, axis=1, keepdims=True), 1e-30)
    return jax.tree.map(lambda p, d: p + jnp.tensordot(scale, d, axes=1), params, deltas)


def _broadcast(params: Params, k: int) -> Params:
    return jax.tree.map(lambda p: jnp.broadcast_to(p, (k,) + p.shape), params)


def fedavg(weighting: str = "examples", drop_late: bool = True) -> Aggregator:
    r"""FedAvg (McMahan et al., 2017): the global model moves by the weighted mean update.

    .. math:: w \leftarrow w + \sum_{i \in S} n_i \Delta_i / \sum_{i \in S} n_i

    With one local step of plain SGD this is FedSGD, Xia et al. eq. (3):
    :math:`x(t+1) = x(t) - \gamma \sum_{k \in S} \varpi_k \nabla G_k / \sum_{k \in S}
    \varpi_k` with :math:`\varpi_k = s_k / \sum s` (non-ideal case) or uniform (ideal
    case, `weighting="uniform"`).

    Args:
      weighting: "examples" (weights n_i, FedAvg and Xia's non-ideal case; Huang's
        proposal) or "uniform" (Xia's ideal case, varpi_k = 1/K).
      drop_late: drop clients that missed the deadline (Xia et al. spec A20: their
        update never reaches the AP; if all fail the model is unchanged); False keeps
        every selected client's update (the deadline only caps time accounting).

    Returns:
      An `Aggregator` whose state is the global model.
    """
    if weighting not in ("examples", "uniform"):
        raise ValueError(f"weighting must be 'examples' or 'uniform', got {weighting!r}.")
    drop_late = validation.boolean("drop_late", drop_late)

    def client_params(state, group):
        return _broadcast(state, group.shape[0])

    def update(state, deltas, cohort):
        included = cohort.valid & cohort.arrived if drop_late else cohort.valid
        base = cohort.num_examples if weighting == "examples" else jnp.ones_like(cohort.latency)
        return weighted_mean_update(state, deltas, jnp.where(included, base, 0.0))

    return Aggregator(
        init=lambda p: p, client_params=client_params, update=update, global_params=lambda s: s
    )


class HierarchicalState(NamedTuple):
    """Edge models and the round counter.

    Attributes:
      edge_params: pytree, every leaf with a leading axis M (one model per edge server).
      round: int32[], edge rounds done.
    """

    edge_params: Params
    round: chex.Array


def hierarchical(num_edges: int, period: int = 5, min_updates: int = 1) -> Aggregator:
    r"""Hierarchical FL of Qu et al.: edge aggregation every round, cloud every `period`.

    Edge server m averages the updates of its selected clients that met the deadline,
    unweighted (eq. 6): :math:`w_m \leftarrow \frac{1}{\sum_n X_n}\sum_{n\in s_m} X_n w_n`.
    If fewer than Z = `min_updates` arrived it waits for the Z fastest selected clients
    and averages those (eq. 6, second case; spec A19). An edge server with no selected
    client keeps its model. After every `period` (T_ES) edge rounds the cloud sets every
    edge model to their unweighted mean :math:`\frac{1}{M}\sum_m w_m` (step iv). The
    evaluated model is that mean.

    Args:
      num_edges: M >= 1 edge servers; `Cohort.group` is each slot's edge server.
      period: T_ES >= 1, edge rounds between cloud aggregations (Table I: 5).
      min_updates: Z >= 1 (spec A19 proposes 1).

    Returns:
      An `Aggregator` whose state is a `HierarchicalState`.
    """
    m = validation.positive_int("num_edges", num_edges)
    period = validation.positive_int("period", period)
    z = validation.positive_int("min_updates", min_updates)

    def init(params):
        return HierarchicalState(_broadcast(params, m), jnp.int32(0))

    def client_params(state, group):
        return jax.tree.map(lambda e: e[jnp.clip(group, 0, m - 1)], state.edge_params)

    def update(state, deltas, cohort):
        same_edge = cohort.group[:, None] == cohort.group[None, :]
        selected = cohort.valid
        arrived = selected & cohort.arrived
        num_arrived = jnp.sum(same_edge & arrived[None, :], axis=1)
        # Rank of each selected slot by latency within its edge (ties by slot index).
        slot = jnp.arange(selected.shape[0])
        faster = (cohort.latency[None, :] < cohort.latency[:, None]) | (
            (cohort.latency[None, :] == cohort.latency[:, None]) & (slot[None, :] < slot[:, None])
        )
        rank = jnp.sum(same_edge & selected[None, :] & faster, axis=1)
        included = jnp.where(num_arrived >= z, arrived, selected & (rank < z))
        edges = weighted_mean_update(
            state.edge_params, deltas, included.astype(jnp.float32), cohort.group
        )
        t = state.round + 1
        cloud = jax.tree.map(lambda e: jnp.broadcast_to(jnp.mean(e, axis=0), e.shape), edges)
        edges = jax.tree.map(lambda c, e: jnp.where(t % period == 0, c, e), cloud, edges)
        return HierarchicalState(edges, t)

    def global_params(state):
        return jax.tree.map(lambda e: jnp.mean(e, axis=0), state.edge_params)

    return Aggregator(
        init=init, client_params=client_params, update=update, global_params=global_params
    )


def decentralized(
    num_servers: int, mixing: chex.Array | None = None, drop_late: bool = False
) -> Aggregator:
    r"""Decentralized FL of Chen et al.: per-server aggregation, then exchange by mixing.

    Server s first averages its own scheduled clients by data size (eq. 4):
    :math:`g_s = \sum_{k \in A_s} D_k g_k / \sum_{k \in A_s} D_k`, then the servers
    exchange models, :math:`\hat G^+ = W \hat G`. The paper's servers are fully
    connected and compute one exact data-weighted average (eq. 5), i.e. the rank-one
    :math:`W = \mathbf{1} (n / \mathbf{1}^\top n)^\top` with :math:`n_s = \sum_{k\in
    A_s} D_k`, which equals FedAvg over all scheduled clients; that is the default
    (`mixing=None`). A fixed row-stochastic `mixing` matrix (a ring, Metropolis weights)
    is an extension the paper does not use; then the evaluated model is the servers'
    mean, and each client downloads its own server's model.

    Args:
      num_servers: S >= 1; `Cohort.group` is each slot's server.
      mixing: f32[S, S] row-stochastic (non-negative, rows sum to 1), or None for the
        paper's exact data-weighted exchange.
      drop_late: drop clients that missed the deadline; the paper's deadline only caps
        the time accounted (spec A9), so False by default.

    Returns:
      An `Aggregator` whose state holds the S server models (leading axis S).
    """
    s = validation.positive_int("num_servers", num_servers)
    if mixing is not None:
        w = validation.array_in_range("mixing", mixing, (s, s), 0.0, 1.0)
        if not np.allclose(w.sum(axis=1), 1.0, atol=1e-5):
            raise ValueError(f"mixing must have rows that sum to 1, got row sums {w.sum(axis=1)}.")
        w = jnp.asarray(w)
    drop_late = validation.boolean("drop_late", drop_late)

    def client_params(state, group):
        return jax.tree.map(lambda g: g[jnp.clip(group, 0, s - 1)], state)

    def update(state, deltas, cohort):
        included = cohort.valid & cohort.arrived if drop_late else cohort.valid
        weights = jnp.where(included, cohort.num_examples, 0.0)
        servers = weighted_mean_update(state, deltas, weights, cohort.group)
        if mixing is None:
            n = jnp.sum(jnp.where(cohort.group[None, :] == jnp.arange(s)[:, None], weights, 0.0), 1)
            share = n / jnp.maximum(jnp.sum(n), 1e-30)
            exchanged = jax.tree.map(
                lambda g: jnp.broadcast_to(jnp.tensordot(share, g, axes=1), g.shape), servers
            )
            return jax.tree.map(lambda e, g: jnp.where(jnp.sum(n) > 0, e, g), exchanged, servers)
        return jax.tree.map(lambda g: jnp.tensordot(w, g, axes=1), servers)

    def global_params(state):
        if mixing is None:
            # Exact exchange leaves every server with the same model.
            return jax.tree.map(lambda g: g[0], state)
        return jax.tree.map(lambda g: jnp.mean(g, axis=0), state)

    return Aggregator(
        init=lambda p: _broadcast(p, s),
        client_params=client_params,
        update=update,
        global_params=global_params,
    )
