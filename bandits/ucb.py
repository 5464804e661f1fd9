"""Combinatorial UCB1 (CUCB): the top k of per-client upper confidence bounds."""

from __future__ import annotations

import jax.numpy as jnp

from bandits import arm_stats
from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


def ucb(num_clients: int, num_selected: int, exploration: float = 1.5) -> Selector:
    r"""CUCB (Chen, Wang and Yuan, ICML 2013) for the top-k semi-bandit.

    Round t selects the k available clients of largest index

    .. math:: \bar\mu_i + \sqrt{\alpha \ln t / T_i},

    where :math:`T_i` counts client i's observations and :math:`\alpha` is
    `exploration` (3/2 in CUCB, 2 in UCB1). A client never observed has an infinite
    index; ties are broken uniformly at random. The radius is CUCB's for rewards in [0, 1];
    `update` accepts any finite reward and refuses NaN or infinity of an observed client,
    at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      exploration: alpha >= 0.

    Returns:
      A `Selector` whose state is an `arm_stats.ArmStats`.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    alpha = validation.float_in_range("exploration", exploration, 0.0, float("inf"))

    def init(key):
        del key
        return arm_stats.init(n)

    def select(state, inp, key):
        t = jnp.maximum(inp.t, 1).astype(jnp.float32)
        bonus = jnp.sqrt(alpha * jnp.log(t) / jnp.maximum(state.counts, 1.0))
        index = jnp.where(state.counts > 0, arm_stats.means(state) + bonus, jnp.inf)
        return Decision(ops.masked_top_k(index, inp.available, k, key)), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("ucb", feedback)
        return arm_stats.update(state, feedback)

    return Selector(init=init, select=select, update=update)
