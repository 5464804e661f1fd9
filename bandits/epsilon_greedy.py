"""Epsilon-greedy over empirical means."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bandits import arm_stats
from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


def epsilon_greedy(num_clients: int, num_selected: int, epsilon: float = 0.1) -> Selector:
    """With probability epsilon a uniformly random cohort, else the k best empirical means.

    The coin is tossed once per round (the cohort explores or exploits as a whole, as
    in the baseline of Chen et al., epsilon = 0.3). Clients never observed rank first
    when exploiting. `update` refuses a NaN or infinite reward of an observed client,
    at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      epsilon: exploration probability in [0, 1].

    Returns:
      A `Selector` whose state is an `arm_stats.ArmStats`.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    eps = validation.probability("epsilon", epsilon)

    def init(key):
        del key
        return arm_stats.init(n)

    def select(state, inp, key):
        coin_key, tie_key = jax.random.split(key)
        score = jnp.where(state.counts > 0, arm_stats.means(state), jnp.inf)
        # Exploring, every client ties: the top k of equal scores, ties broken uniformly
        # at random, is a uniformly random cohort (`ops.uniform_subset`'s definition).
        # One selection a round, whichever the coin says (under `vmap` both would run).
        explore = jax.random.uniform(coin_key) < eps
        selected = ops.masked_top_k(jnp.where(explore, 0.0, score), inp.available, k, tie_key)
        return Decision(selected), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("epsilon_greedy", feedback)
        return arm_stats.update(state, feedback)

    return Selector(init=init, select=select, update=update)
