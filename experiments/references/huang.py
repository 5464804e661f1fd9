r"""NumPy reference of RBCS-F (Huang et al., IEEE TPDS 2021) on its Sec. 6.1 simulation.

What a careful researcher writes without JAX: one trial at a time, a Python loop over
rounds, each round vectorised over the clients. It runs the environment of
`fedjax_sel.envs.exchange_time` and the policy of `bandits.rbcs_f` in the setting of the
paper's main figures (`experiments.reproductions.huang`, "calibrated"): N = 40 clients in
Table I's four speed classes, m = 8, :math:`\beta = 0.15`, availability 0.8, V = 20
(`bandits.rbcs_f`'s default), :math:`\alpha = 0.1` and :math:`\lambda = 1` (Table II),
the cold-start flag :math:`s_{t,n} = 1 - x_{t-1,n}`, :math:`\eta` in log base 2 and the
bound clipped at 0 (eq. 19).

Round t (the paper's equations):

- context :math:`c_{t,n} = [1/\mu_{t,n}, s_{t,n}, M/B_{t,n}]`, :math:`\mu \sim U[0.5, 2]`,
  :math:`B \sim U[2, 4]` MHz, M = 20 Mb; availability :math:`I_{t,n} \sim`
  Bernoulli(0.8);
- the lower bounds :math:`\bar\tau_{t,n} = \max\{c^\top H^{-1} b - \alpha
  \|c\|_{H^{-1}}, 0\}` (eqs. 18-19);
- P4 (eq. 21) solved exactly in the prefix form of Algorithm 1 that the jitted policy
  uses (`ops.prefix_max_cost_top_k`): the available clients sorted by bound, the top k
  by queue of every prefix, the prefix of least :math:`V \bar\tau_{(j)} - \text{TopK}(j)`;
  ties in bound and in queue broken by one uniform key per client, ties of the objective
  to the cheapest prefix;
- the selected clients' times :math:`\tau = 2u\,c^\top\theta^*` (eq. 14 with Sec. 6.1's
  uniform noise), the round time their maximum (eq. 1);
- :math:`H^{-1}` by Sherman-Morrison, :math:`b \mathrel{+}= \tau c` (Alg. 2 lines 15-16),
  :math:`Z_{t+1} = \max(Z_t + \beta - x_t, 0)` (eq. 6).

The metrics are the environment's: the cumulative round time, the pseudo-regret against
the m fastest available clients in expectation (the largest expected time of the cohort
minus the oracle's), its realised form (the round time minus the oracle's largest
expected time), Jain's index and the least selection fraction of the pull counts, and
the mean fairness queue after the last round. The random streams differ from the jitted
run's, so the two agree in distribution (`tests/test_huang_chen_reference.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from experiments.references.fairness import selection_totals
from experiments.reproductions import huang
from fedjax_sel.envs.exchange_time import true_coefficients

NUM_CLIENTS_RBCS_F = huang.NUM_CLIENTS
NUM_SELECTED = huang.NUM_SELECTED
FAIRNESS_RATE = huang.FAIRNESS_RATE
PENALTY_WEIGHT = 20.0  # V, `bandits.rbcs_f`'s default and the oracle pi'(20)'s
EXPLORATION, RIDGE = 0.1, 1.0  # alpha and lambda of Table II
AVAILABILITY = 0.8
MODEL_SIZE_MB = 20.0
BANDWIDTH_MHZ = (2.0, 4.0)
CPU_RATIO = (0.5, 2.0)
METRICS = (
    "cumulative_latency",
    "cumulative_regret",
    "cumulative_realized_regret",
    "jain_index",
    "min_selection_fraction",
    "mean_queue",
)


def solve_p4(
    cost: np.ndarray,
    value: np.ndarray,
    available: np.ndarray,
    num_selected: int,
    weight: float,
    rng: np.random.Generator,
) -> np.ndarray:
    r"""int64[min(m, |available|)]: the clients of an exact minimiser of P4 (eq. 21),

    .. math:: \min_{S \subseteq A,\ |S| = \min(m, |A|)} w \max_{n \in S} \text{cost}_n
              - \sum_{n \in S} \text{value}_n,

    in the prefix form of Algorithm 1: with the available clients sorted by cost and
    TopK(j) the k largest values among the j cheapest, the cohort is the top k of the
    prefix minimising :math:`w\,\text{cost}_{(j)} - \text{TopK}(j)` over j >= k. One
    uniform key per client breaks ties in cost and in value; equal objectives go to the
    cheapest prefix (as `ops.prefix_max_cost_top_k`).

    Args:
      cost: f64[N], the bounds :math:`\bar\tau_{t,n}`.
      value: f64[N], the queues :math:`Z_{t,n}`.
      available: bool[N].
      num_selected: m >= 1.
      weight: V >= 0.
      rng: the tie-breaking keys' generator.
    """
    clients = np.flatnonzero(available)
    k = min(num_selected, clients.size)
    if k == 0:
        return clients
    tie = rng.random(clients.size)
    order = np.lexsort((tie, cost[clients]))
    value, tie = value[clients][order], tie[order]
    rank = np.empty(clients.size, np.int64)
    rank[np.lexsort((-tie, -value))] = np.arange(clients.size)
    # better[j, i]: clients among the j + 1 cheapest that rank above client i by value.
    better = np.cumsum(rank[:, None] < rank[None, :], axis=0)
    pos = np.arange(clients.size)
    in_top = (pos[None, :] <= pos[:, None]) & (better < k)
    objective = weight * cost[clients][order] - in_top @ value
    objective[: k - 1] = np.inf
    return clients[order[in_top[np.argmin(objective)]]]


def numpy_trial_rbcs_f(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of RBCS-F(20) on Huang et al.'s Sec. 6.1 simulation (module docstring).

    Args:
      rng: the trial's generator.
      num_rounds: T >= 1.

    Returns:
      The trial's `METRICS`, named like the jitted run's totals ("mean_queue": the
      mean queue after round T, the last value of the curve "extra/mean_queue").
    """
    n, m, beta, v = NUM_CLIENTS_RBCS_F, NUM_SELECTED, FAIRNESS_RATE, PENALTY_WEIGHT
    theta = true_coefficients(n, "2").astype(np.float64)
    inverse = np.tile(np.eye(3) / RIDGE, (n, 1, 1))
    moment = np.zeros((n, 3))
    queue = np.zeros(n)
    previous = np.zeros(n, bool)
    pulls = np.zeros(n)
    latency = regret = realized = 0.0
    for _ in range(num_rounds):
        mu = rng.uniform(*CPU_RATIO, n)
        bandwidth = rng.uniform(*BANDWIDTH_MHZ, n)
        context = np.stack([1.0 / mu, (~previous).astype(np.float64), MODEL_SIZE_MB / bandwidth], 1)
        available = rng.random(n) < AVAILABILITY
        # Eqs. (18)-(19): the ridge estimate less alpha times the confidence width, >= 0.
        pc = np.einsum("nij,nj->ni", inverse, context)
        width = np.sqrt(np.maximum(np.einsum("ni,ni->n", context, pc), 0.0))
        estimate = np.einsum("ni,ni->n", pc, moment)
        bound = np.maximum(estimate - EXPLORATION * width, 0.0)
        chosen = solve_p4(bound, queue, available, m, v, rng)
        expected = np.einsum("ni,ni->n", context, theta)
        tau = 2.0 * rng.random(chosen.size) * expected[chosen]  # eq. (14), Sec. 6.1 noise
        if chosen.size:
            k = chosen.size
            fastest = np.partition(expected[available], k - 1)[k - 1]
            latency += tau.max()  # eq. (1)
            regret += expected[chosen].max() - fastest
            realized += tau.max() - fastest
        # Alg. 2 lines 13-17: Sherman-Morrison on H^{-1}, b += tau c, eq. (6).
        c, p = context[chosen], pc[chosen]
        inverse[chosen] -= p[:, :, None] * p[:, None, :] / (1.0 + np.sum(c * p, 1))[:, None, None]
        moment[chosen] += tau[:, None] * c
        selected = np.zeros(n, bool)
        selected[chosen] = True
        queue = np.maximum(queue + beta - selected, 0.0)
        previous = selected
        pulls += selected
    return {
        "cumulative_latency": latency,
        "cumulative_regret": regret,
        "cumulative_realized_regret": realized,
        **selection_totals(pulls, num_rounds),
        "mean_queue": float(queue.mean()),
    }


@functools.cache
def jitted_setting():
    """(`Env`, `Selector`): `envs.exchange_time` and `bandits.rbcs_f` in the setting of
    `numpy_trial_rbcs_f`, the same objects every call (so `simulate` compiles them once)."""
    import bandits
    from fedjax_sel import envs

    env = envs.exchange_time(
        NUM_CLIENTS_RBCS_F,
        NUM_SELECTED,
        availability=AVAILABILITY,
        fairness_rate=FAIRNESS_RATE,
        model_size_mb=MODEL_SIZE_MB,
        bandwidth_mhz=BANDWIDTH_MHZ,
        cpu_ratio=CPU_RATIO,
        cold_start="cold_start",
        log_base="2",
    )
    policy = bandits.rbcs_f(
        NUM_CLIENTS_RBCS_F,
        NUM_SELECTED,
        penalty_weight=PENALTY_WEIGHT,
        fairness_rate=FAIRNESS_RATE,
        exploration=EXPLORATION,
        ridge=RIDGE,
        clip_at_zero=True,
    )
    return env, policy


def jax_run_rbcs_f(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """The jitted RBCS-F(20) in the setting of `numpy_trial_rbcs_f`.

    Builds the environment and the policy once (`jitted_setting`); the call runs
    `fedjax_sel.simulate` (compiled on the first call only) and returns the mean over
    trials of `METRICS`.
    """
    import fedjax_sel

    env, policy = jitted_setting()

    def run() -> dict[str, float]:
        res = fedjax_sel.simulate(policy, env, num_rounds, num_trials, seed=seed, progress=None)
        means = {name: res.final("policy", name)[0] for name in METRICS[:-1]}
        means["mean_queue"] = float(res.curve("policy", "extra/mean_queue")[0][-1])
        return means

    return run
