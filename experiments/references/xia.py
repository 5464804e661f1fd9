r"""NumPy references of CS-UCB and CS-UCB-Q on the latency model of Xia et al. (2020).

What `launch.xia_speed` and `launch.bench --policies=cs_ucb,cs_ucb_q` time the jitted
`bandits.cs_ucb` and `bandits.cs_ucb_q` on `fedjax_sel.envs.wireless_latency` against: each is
what a careful researcher writes without JAX, one trial at a time, a Python loop over rounds,
each round vectorised over the clients (`np.argpartition` for the top N). The model is the
environment's (its docstring has the equations): Rayleigh fading of both links, compute speed
uniform in [(0.5k + 0.5) 20, (0.5k + 1.5) 20] samples/s, the latency capped at the deadline
(eq. 4), the reward :math:`1 - \tau_k / \tau_{\max}`, a round's value its bottleneck (eq. 9).
Only the scheduled clients' latencies are drawn (the others are never observed).

- CS-UCB (Algorithm 1), Fig. 1's ideal setting: K = 20 clients, N = 5 channels, every client
  available, a fresh geometry per trial (uniform in a 500 m disc), the literal deadline.
- CS-UCB-Q (Algorithm 2), Fig. 7's non-ideal setting at N = 5 and rho = 1: K = 20, one fixed
  geometry (seed 0), availability alpha_k = 0.9, targets c_k = s_k / sum s with shares s drawn
  from Dirichlet(1, ..., 1) (seed 0), beta = 0.01, the literal deadline.

They match the jitted code in distribution, not bit for bit (the random streams differ):
`tests/test_xia_speed.py` checks CS-UCB's mean cumulative latency, and CS-UCB-Q's mean
cumulative latency, reward and failed clients.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import bandits
from experiments.references import jitted
from experiments.references.stationary import top_k_random_ties
from fedjax_sel.envs.wireless_latency import PRESETS, compute_bounds, snr_db, wireless_latency

XIA_CLIENTS, XIA_SELECTED = 20, 5  # K and N of Figure 1 of Xia et al.
NUM_CLIENTS_CS_UCB = NUM_CLIENTS_CS_UCB_Q = XIA_CLIENTS
PRESET = "literal"  # tau_max = 5 s, as printed in §V.A
METRICS = ("cumulative_latency", "cumulative_reward", "cumulative_failed")
# Fig. 7 at N = 5, rho = 1 (`experiments.reproductions.xia.run_fig7`).
AVAILABILITY, BETA, GEOMETRY_SEED = 0.9, 0.01, 0
FAIRNESS = np.random.default_rng(0).dirichlet(np.ones(XIA_CLIENTS))  # c_k = s_k / sum s


def _latency(rng, snr, low, high, deadline):
    """Raw latencies f64[n] (eq. 4 before the cap) of clients of mean SNR f64[n] whose compute
    speed is uniform in [low, high]: download and upload of 5 kbit over 15 kHz, 2 samples."""
    n = snr.shape[0]
    return (
        5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=n)))
        + 5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=n)))
        + 2.0 / rng.uniform(low, high)
    )


def numpy_cs_ucb_trial(
    rng: np.random.Generator, num_rounds: int, deadline: float
) -> dict[str, float]:
    """One trial of CS-UCB (Algorithm 1) on Xia et al.'s latency model, in plain NumPy.

    The model of `fedjax_sel.envs.wireless_latency` (geometry per trial, full availability)
    and the policy of `bandits.cs_ucb`, K = 20 clients and N = 5 channels: the random
    initialization schedule for kappa = ceil(K/N) rounds, then the top N of
    y_k + sqrt((N + 1) ln t / z_k) (eq. 18).

    Returns:
      The trial's cumulative latency (s, the slowest scheduled client each round),
      bottleneck reward and number of failed clients.
    """
    K, N = XIA_CLIENTS, XIA_SELECTED
    low, high = compute_bounds(K)
    snr = 10 ** (snr_db(np.maximum(0.5 * np.sqrt(rng.uniform(size=K)), 0.001)) / 10)
    kappa = -(-K // N)
    perm = rng.permutation(K)
    extra = rng.permutation(perm[: (kappa - 1) * N])[: kappa * N - K]
    schedule = np.concatenate([perm, extra]).reshape(kappa, N)
    sums, counts = np.zeros(K), np.zeros(K)
    latency_s, reward, failed = 0.0, 0.0, 0
    for t in range(1, num_rounds + 1):
        if t <= kappa:
            chosen = schedule[t - 1]
        else:
            index = sums / counts + np.sqrt((N + 1) * np.log(t) / counts)
            chosen = np.argpartition(-index, N - 1)[:N]
        raw = _latency(rng, snr[chosen], low[chosen], high[chosen], deadline)
        latency = np.minimum(raw, deadline)
        r = 1.0 - latency / deadline
        sums[chosen] += r
        counts[chosen] += 1.0
        latency_s += latency.max()
        reward += r.min()
        failed += np.count_nonzero(raw >= deadline)
    return {
        "cumulative_latency": float(latency_s),
        "cumulative_reward": float(reward),
        "cumulative_failed": float(failed),
    }


def numpy_cs_ucb_q_trial(
    rng: np.random.Generator,
    num_rounds: int,
    deadline: float,
    snr: np.ndarray,
    fairness: np.ndarray,
    beta: float,
    availability: float,
) -> dict[str, float]:
    r"""One trial of CS-UCB-Q (Algorithm 2) on Xia et al.'s latency model, in plain NumPy.

    The model of `fedjax_sel.envs.wireless_latency` with the fixed mean SNRs `snr` (f64[K])
    and every client available with probability `availability` each round, and the policy of
    `bandits.cs_ucb_q` at its defaults: the truncated index
    :math:`\hat y_k = \min\{y_k + \sqrt{2 \ln t / z_k}, 1\}` (eq. 26, 1 for a client never
    observed), the queues :math:`D_k(t) = \max\{D_k(t-1) + c_k - b_k(t-1), 0\}` from round 2
    (eq. 27, D(1) = 0 as the text states), and the min{N, |A(t)|} available clients of largest
    :math:`(1 - \beta)(\hat y_k - 1) + \beta D_k` (eq. 28), ties broken uniformly at random.
    K = 20, N = 5.

    Returns:
      The trial's cumulative latency (s; 0 in a round nobody is available), bottleneck reward
      (1 in such a round) and number of failed clients.
    """
    K, N = XIA_CLIENTS, XIA_SELECTED
    low, high = compute_bounds(K)
    sums, counts = np.zeros(K), np.zeros(K)
    queue, previous = np.zeros(K), np.zeros(K)
    latency_s, reward, failed = 0.0, 0.0, 0
    for t in range(1, num_rounds + 1):
        available = rng.random(K) < availability
        seen = np.maximum(counts, 1.0)
        y_hat = np.where(counts > 0, np.minimum(sums / seen + np.sqrt(2 * np.log(t) / seen), 1), 1)
        if t >= 2:
            queue = np.maximum(queue + fairness - previous, 0.0)
        score = np.where(available, (1.0 - beta) * (y_hat - 1.0) + beta * queue, -np.inf)
        size = min(N, np.count_nonzero(available))
        chosen = top_k_random_ties(score, size, rng) if size else np.zeros(0, np.int64)
        raw = _latency(rng, snr[chosen], low[chosen], high[chosen], deadline)
        latency = np.minimum(raw, deadline)
        r = 1.0 - latency / deadline
        sums[chosen] += r
        counts[chosen] += 1.0
        previous = np.zeros(K)
        previous[chosen] = 1.0
        latency_s += latency.max(initial=0.0)
        reward += r.min(initial=1.0)
        failed += np.count_nonzero(raw >= deadline)
    return {
        "cumulative_latency": float(latency_s),
        "cumulative_reward": float(reward),
        "cumulative_failed": float(failed),
    }


def numpy_trial_cs_ucb(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of `numpy_cs_ucb_trial` on Fig. 1's setting (literal deadline)."""
    return numpy_cs_ucb_trial(rng, num_rounds, PRESETS[PRESET])


def jax_run_cs_ucb(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """The jitted `bandits.cs_ucb` on Fig. 1's `wireless_latency`, built once; a call returns
    the mean over trials of `numpy_trial_cs_ucb`'s metrics."""
    k, n = XIA_CLIENTS, XIA_SELECTED
    env = wireless_latency(k, n, preset=PRESET)
    return jitted.run_means(bandits.cs_ucb(k, n), env, num_trials, num_rounds, seed, METRICS)


def _fig7_snr() -> np.ndarray:
    """f64[K]: the mean SNRs of Fig. 7's fixed geometry, as `wireless_latency` draws it from
    `geometry_seed` (uniform in the 500 m disc, at least 1 m from the access point)."""
    u = np.random.default_rng(GEOMETRY_SEED).uniform(size=XIA_CLIENTS)
    return 10 ** (snr_db(np.maximum(0.5 * np.sqrt(u), 0.001)) / 10)


def numpy_trial_cs_ucb_q(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of `numpy_cs_ucb_q_trial` on Fig. 7's setting at N = 5, rho = 1."""
    return numpy_cs_ucb_q_trial(
        rng, num_rounds, PRESETS[PRESET], _fig7_snr(), FAIRNESS, BETA, AVAILABILITY
    )


def jax_run_cs_ucb_q(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """The jitted `bandits.cs_ucb_q` on Fig. 7's `wireless_latency` (N = 5, rho = 1), built
    once; a call returns the mean over trials of `numpy_trial_cs_ucb_q`'s metrics."""
    k, n = XIA_CLIENTS, XIA_SELECTED
    env = wireless_latency(
        k, n, preset=PRESET, geometry_seed=GEOMETRY_SEED, availability=AVAILABILITY
    )
    policy = bandits.cs_ucb_q(k, n, FAIRNESS, beta=BETA, availability=AVAILABILITY)
    return jitted.run_means(policy, env, num_trials, num_rounds, seed, METRICS)
