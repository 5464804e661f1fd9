"""Per-edge-server baselines: every server schedules N clients of its own cell.

The random and epsilon-greedy baselines of Chen, Zhang, Wang and Wang (Entropy 2025,
Sec. 7.1). Clients are laid out in contiguous cells as in `fedjax_sel.envs.dfl_delay`:
equal, client k belonging to server `k // (K / S)`, or of the sizes `cell_sizes`;
decisions carry each scheduled client's server in `assignment`. The paper's "Optimal
client selection" is the environment's oracle, played by `bandits.oracle`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bandits import arm_stats
from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


def per_server_random(
    num_clients: int,
    num_selected: int,
    num_servers: int = 3,
    cell_sizes: tuple[int, ...] | None = None,
) -> Selector:
    """Each server schedules N available clients of its cell uniformly at random.

    Args:
      num_clients: K, a multiple of `num_servers` unless `cell_sizes` is given.
      num_selected: N, clients scheduled per server, 1 <= N <= K / S (or the largest
        cell).
      num_servers: S >= 1.
      cell_sizes: K_s of each cell, S integers >= 1 summing to K; None for equal cells.
    """
    s, n, sizes, server = validation.cells(num_clients, num_servers, num_selected, cell_sizes)

    def init(key):
        del key
        return ()

    def select(state, inp, key):
        selected = ops.grouped_uniform_subset(inp.available, n, key, s, sizes)
        return Decision(selected=selected, assignment=jnp.where(selected, server, -1)), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)


def per_server_epsilon_greedy(
    num_clients: int,
    num_selected: int,
    num_servers: int = 3,
    epsilon: float = 0.3,
    cell_sizes: tuple[int, ...] | None = None,
) -> Selector:
    """Epsilon-greedy per server over context-free empirical means (Chen et al., Sec. 7.1).

    Each server tosses its own coin every round: with probability epsilon it schedules
    N random clients of its cell, otherwise the N of best empirical mean reward (the
    smallest mean delay when the reward is the negative delay). The mean is over all of
    a client's observations, ignoring contexts; clients never observed rank first, so
    each is tried once; ties are broken at random. The paper fixes epsilon = 0.3 and
    leaves the coin and initialisation open; these are the spec's readings. `update`
    refuses a NaN or infinite reward of an observed client, at once when run eagerly,
    under `jax.jit` when wrapped in `jax.experimental.checkify.checkify`
    (`validation.check_feedback`).

    Args:
      num_clients: K, a multiple of `num_servers` unless `cell_sizes` is given.
      num_selected: N, clients scheduled per server, 1 <= N <= K / S (or the largest
        cell).
      num_servers: S >= 1.
      epsilon: exploration probability in [0, 1].
      cell_sizes: K_s of each cell, S integers >= 1 summing to K; None for equal cells.

    Returns:
      A `Selector` whose state is an `arm_stats.ArmStats`.
    """
    s, n, sizes, server = validation.cells(num_clients, num_servers, num_selected, cell_sizes)
    eps = validation.probability("epsilon", epsilon)
    k_total = server.size

    def init(key):
        del key
        return arm_stats.init(k_total)

    def select(state, inp, key):
        coin_key, explore_key, exploit_key = jax.random.split(key, 3)
        score = jnp.where(state.counts > 0, arm_stats.means(state), jnp.inf)
        exploit = ops.grouped_masked_top_k(score, inp.available, n, exploit_key, s, sizes)
        explore = ops.grouped_uniform_subset(inp.available, n, explore_key, s, sizes)
        explores = (jax.random.uniform(coin_key, (s,)) < eps)[server]
        selected = jnp.where(explores, explore, exploit)
        return Decision(selected=selected, assignment=jnp.where(selected, server, -1)), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("per_server_epsilon_greedy", feedback)
        return arm_stats.update(state, feedback)

    return Selector(init=init, select=select, update=update)
