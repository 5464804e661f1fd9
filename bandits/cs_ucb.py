r"""CS-UCB, CS-UCB-Q and modified CS-UCB (Xia et al., 2020), client scheduling as a bandit.

Xia, Quek, Guo, Wen, Yang and Zhu, "Multi-Armed Bandit Based Client Scheduling for
Federated Learning", IEEE TWC 2020. Every client is an arm, the cohort a super arm; all
three policies rank clients by a per-client score and take the top
:math:`\min\{N, |A(t)|\}` available ones (eqs. 18 and 28), ties broken uniformly at
random. Empirical means and counts follow eqs. 16-17, with the reward observed in round
t (the text's `r_k(t-1)` is read as `r_k(t)`).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from bandits import arm_stats
from bandits.ucb import ucb
from fedjax_sel import ops, validation
from fedjax_sel.types import Decision, Selector


class CSUCBState(NamedTuple):
    """State of CS-UCB.

    Attributes:
      stats: empirical means and counts `y_k`, `z_k` (eqs. 16-17), f32[K] each.
      schedule: i32[kappa, N], the clients of the kappa initialization rounds.
    """

    stats: arm_stats.ArmStats
    schedule: chex.Array


class CSUCBQState(NamedTuple):
    """State of CS-UCB-Q.

    Attributes:
      stats: empirical means and counts `y_k`, `z_k` (eqs. 16-17), f32[K] each.
      queue: f32[K], virtual queues `D_k(t)` of the round last selected (eq. 27).
      previous: bool[K], `b_k(t-1)`, the clients selected in the previous round.
    """

    stats: arm_stats.ArmStats
    queue: chex.Array
    previous: chex.Array


def init_schedule(key: chex.PRNGKey, num_clients: int, num_selected: int) -> chex.Array:
    """The random initialization of Algorithm 1 as a fixed-shape schedule, i32[kappa, N].

    Algorithm 1 draws, for kappa = ceil(K/N) rounds, N unplayed clients uniformly at
    random; in the last round, when fewer than N are left, it first returns
    kappa N - K uniformly chosen played clients to the pool. Equivalently: a uniform
    permutation pi of the clients, cut into rounds, with the kappa N - K extra clients of
    the last round drawn uniformly from the first (kappa - 1) N entries of pi.
    """
    kappa = -(-num_clients // num_selected)
    extra = kappa * num_selected - num_clients
    perm_key, extra_key = jax.random.split(key)
    perm = jax.random.permutation(perm_key, num_clients)
    played = perm[: (kappa - 1) * num_selected]
    extras = jax.random.permutation(extra_key, played)[:extra]
    return jnp.concatenate([perm, extras]).reshape(kappa, num_selected).astype(jnp.int32)


def _index(stats: arm_stats.ArmStats, t: chex.Array, num_selected: int) -> chex.Array:
    """f32[K]: y_k + sqrt((N + 1) ln t / z_k) (eq. 18); +inf for a client never observed."""
    t = jnp.maximum(t, 1).astype(jnp.float32)
    bonus = jnp.sqrt((num_selected + 1) * jnp.log(t) / jnp.maximum(stats.counts, 1.0))
    return jnp.where(stats.counts > 0, arm_stats.means(stats) + bonus, jnp.inf)


def cs_ucb(num_clients: int, num_selected: int) -> Selector:
    r"""CS-UCB, Algorithm 1 of Xia et al. (2020), for the ideal scenario.

    Rounds t = 1..kappa, kappa = ceil(K/N), play the random initialization schedule
    (`init_schedule`), so that every client is observed at least once. From round
    kappa + 1 on, S(t) is the N clients of largest index (eq. 18)

    .. math:: y_k(t-1) + \sqrt{(N + 1) \ln t / z_k(t-1)},

    the top-N of a sum surrogate of the bottleneck reward (the learning rule of Gai et
    al., LLR). Unavailable clients are never scheduled (the paper's ideal scenario has
    all clients available; a client missed during initialization keeps an infinite index
    and is tried first). Eq. 18's radius assumes rewards in [0, 1]: `update` refuses an
    observed reward outside it (or NaN), at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: K >= 1.
      num_selected: N channels, 1 <= N <= K.

    Returns:
      A `Selector` whose state is a `CSUCBState`.
    """
    k_all = validation.positive_int("num_clients", num_clients)
    n_sel = validation.num_selected(num_selected, k_all)
    kappa = -(-k_all // n_sel)

    def init(key):
        return CSUCBState(arm_stats.init(k_all), init_schedule(key, k_all, n_sel))

    def select(state, inp, key):
        row = state.schedule[jnp.clip(inp.t - 1, 0, kappa - 1)]
        initial = jnp.zeros((k_all,), bool).at[row].set(True)
        learned = ops.masked_top_k(_index(state.stats, inp.t, n_sel), inp.available, n_sel, key)
        chosen = jnp.where(inp.t <= kappa, initial & inp.available, learned)
        return Decision(chosen), state

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("cs_ucb", feedback, 0.0, 1.0)
        return state._replace(stats=arm_stats.update(state.stats, feedback))

    return Selector(init=init, select=select, update=update)


def modified_cs_ucb(num_clients: int, num_selected: int) -> Selector:
    """Modified CS-UCB, the fairness-unaware baseline of §V.C of Xia et al. (2020).

    CS-UCB's index (eq. 18) restricted to the available clients: the top min{N, |A(t)|}
    available clients by y_k + sqrt((N + 1) ln t / z_k). The random initialization of
    Algorithm 1 is not defined under availability, so a client never observed has an
    infinite index instead (tried as soon as it is available). This is CUCB
    (`bandits.ucb`) with exploration constant N + 1.

    Args:
      num_clients: K >= 1.
      num_selected: N channels, 1 <= N <= K.
    """
    k_all = validation.positive_int("num_clients", num_clients)
    n_sel = validation.num_selected(num_selected, k_all)
    return ucb(k_all, n_sel, exploration=float(n_sel + 1))


def cs_ucb_q(
    num_clients: int,
    num_selected: int,
    fairness=0.0,
    beta: float = 0.01,
    availability=1.0,
    queue_from_first_round: bool = False,
) -> Selector:
    r"""CS-UCB-Q, Algorithm 2 of Xia et al. (2020), for the non-ideal scenario.

    Round t computes the truncated index (eq. 26)

    .. math:: \hat y_k(t) = \min\{y_k(t-1) + \sqrt{2 \ln t / z_k(t-1)}, 1\}

    (1 for a client never observed), updates the virtual queues (eq. 27)

    .. math:: D_k(t) = \max\{D_k(t-1) + c_k - b_k(t-1), 0\},

    and schedules the min{N, |A(t)|} available clients of largest
    :math:`(1 - \beta) \hat y_k(t) + \beta D_k(t)` (eq. 28). The constant
    :math:`(1 - \beta)` is subtracted from every score (it does not change the choice,
    every feasible set having the same size) to keep float32 resolution when beta is tiny.
    The truncation at 1 (eq. 26) assumes rewards in [0, 1]: `update` refuses an observed
    reward outside it (or NaN), at once when run eagerly, under `jax.jit` when wrapped in
    `jax.experimental.checkify.checkify` (`validation.check_feedback`).

    Args:
      num_clients: K >= 1.
      num_selected: N channels, 1 <= N <= K.
      fairness: c, f32[K] (or a scalar for all) of minimum selection rates (eq. 6).
        The default 0 (no target) is the one setting of eq. 6's c_k in [0, 1) that is
        feasible for every K, N and availability (the paper's targets depend on the
        data sizes s_k and on N, §II.C); with it the queues stay at 0 and the policy is
        the truncated UCB of eq. 26 over the available clients. Pass the paper's c for
        its fairness guarantee (Theorem 3).
      beta: weight of the queues, in [0, 1] (beta > 0 for the fairness guarantee of
        Theorem 3).
      availability: alpha_k, a scalar or f32[K]; used only to reject infeasible targets.
      queue_from_first_round: the text states D(1) = 0 while Algorithm 2 applies eq. 27
        in round 1 too (giving D(1) = c). False (default) follows the text, True the
        pseudo-code.

    Returns:
      A `Selector` whose state is a `CSUCBQState`.
    """
    k_all = validation.positive_int("num_clients", num_clients)
    n_sel = validation.num_selected(num_selected, k_all)
    weight = validation.float_in_range("beta", beta, 0.0, 1.0)
    first_update = 1 if validation.boolean("queue_from_first_round", queue_from_first_round) else 2
    alpha = validation.probabilities("availability", availability, k_all)
    if np.ndim(fairness) == 0:
        fairness = np.full((k_all,), validation.real("fairness", fairness))
    c = jnp.asarray(validation.check_fairness(fairness, n_sel, alpha), jnp.float32)

    def init(key):
        del key
        zeros = jnp.zeros((k_all,), jnp.float32)
        return CSUCBQState(arm_stats.init(k_all), zeros, jnp.zeros((k_all,), bool))

    def select(state, inp, key):
        t = jnp.maximum(inp.t, 1).astype(jnp.float32)
        counts = state.stats.counts
        bonus = jnp.sqrt(2.0 * jnp.log(t) / jnp.maximum(counts, 1.0))
        optimistic = jnp.minimum(arm_stats.means(state.stats) + bonus, 1.0)
        y_hat = jnp.where(counts > 0, optimistic, 1.0)
        grown = jnp.maximum(state.queue + c - state.previous.astype(jnp.float32), 0.0)
        queue = jnp.where(inp.t >= first_update, grown, state.queue)
        score = (1.0 - weight) * (y_hat - 1.0) + weight * queue
        chosen = ops.masked_top_k(score, inp.available, n_sel, key)
        return Decision(chosen), CSUCBQState(state.stats, queue, chosen)

    def update(state, decision, feedback):
        del decision
        validation.check_feedback("cs_ucb_q", feedback, 0.0, 1.0)
        return state._replace(stats=arm_stats.update(state.stats, feedback))

    return Selector(init=init, select=select, update=update)
