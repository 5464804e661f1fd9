"""What every hierarchical policy reads: pair contexts, coverage and costs, shape-checked.

The policies of Qu et al.'s network (`envs.hierarchical`) choose client-ES pairs under a
budget per ES. They read `RoundInput.pair_context` (f32[N, M, D]), `connectivity`
(f32[N, M], > 0 where the pair can communicate) and `info["cost"]` (f32[N]).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sel import validation
from fedjax_sel.ops import assignment
from fedjax_sel.types import Decision, RoundInput


class EdgeRound(NamedTuple):
    """One round's inputs of a hierarchical policy.

    Attributes:
      context: f32[N, M, D], the pair contexts.
      reachable: bool[N, M], pairs that can communicate this round.
      cost: f32[N], each client's price this round.
    """

    context: jax.Array
    reachable: jax.Array
    cost: jax.Array


def read(inp: RoundInput, num_clients: int, num_servers: int, context_dim: int | None,
         policy: str) -> EdgeRound:  # fmt: skip
    """The round's `EdgeRound`, checked against the sizes the policy was built for.

    Runs while the policy is traced, so that a mismatch fails before anything compiles.

    Args:
      inp: the round's input.
      num_clients: N the policy was built for.
      num_servers: M the policy was built for.
      context_dim: D the policy was built for, or None where it reads no context.
      policy: the policy's name, for messages.

    Raises:
      ValueError: a field is missing, or N, M or D differ from the environment's; or,
        called eagerly, a context is outside [0, 1] (traced, a `checkify` check).
    """
    context = validation.require(inp.pair_context, "pair_context", policy=policy)
    reach = validation.require(inp.connectivity, "connectivity", policy=policy)
    cost = validation.require_info(inp.info, "cost", policy=policy)
    n, m, d = context.shape
    if (n, m) != (num_clients, num_servers):
        raise ValueError(
            f"policy {policy!r} was built for num_clients={num_clients}, "
            f"num_servers={num_servers}; the environment has {n} clients and {m} servers."
        )
    if context_dim is not None and d != context_dim:
        raise ValueError(
            f"policy {policy!r} was built for context_dim={context_dim}; the environment's "
            f"pair contexts have dimension {d}."
        )
    if context_dim is not None:
        # The hypercubes and the linear models are of contexts in [0, 1]^D (Qu et al. Sec. IV).
        validation.check_values(
            policy, "RoundInput.pair_context", context, True, 0.0, 1.0,
            "Scale the contexts into [0, 1] (the environment's own are min-max scaled).",
            "(client, server, dimension) index",
        )  # fmt: skip
    return EdgeRound(context, (reach > 0) & inp.available[:, None], cost)


def decision(selected_pairs: jax.Array) -> Decision:
    """The `Decision` of bool[N, M] pairs (at most one per client)."""
    return Decision(jnp.any(selected_pairs, 1), assignment.assignment_of(selected_pairs))


def chosen_pairs(dec: Decision, observed: jax.Array, num_servers: int) -> jax.Array:
    """bool[N, M], the decision's pairs whose outcome was observed."""
    return assignment.pairs_of(dec.assignment, num_servers) & (dec.selected & observed)[:, None]
