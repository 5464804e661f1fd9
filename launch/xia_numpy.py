"""A plain NumPy CS-UCB on the latency model of Xia et al. (2020), one trial at a time.

The reference that `launch.xia_speed` times against the jitted simulator: a Python loop
over rounds, vectorized over the clients of a round, with the same model and policy as
`fedjax_sel.envs.wireless_latency` (literal constants, geometry per trial) and
`bandits.cs_ucb`.
"""

from __future__ import annotations

import numpy as np

from fedjax_sel.envs.wireless_latency import compute_bounds, snr_db

K, N = 20, 5  # the Figure 1 setting


def numpy_cs_ucb_trial(rng: np.random.Generator, num_rounds: int, deadline: float) -> float:
    """One trial of CS-UCB (Algorithm 1) on the latency model; returns cumulative latency."""
    low, high = compute_bounds(K)
    snr = 10 ** (snr_db(np.maximum(0.5 * np.sqrt(rng.uniform(size=K)), 0.001)) / 10)
    kappa = -(-K // N)
    perm = rng.permutation(K)
    extra = rng.permutation(perm[: (kappa - 1) * N])[: kappa * N - K]
    schedule = np.concatenate([perm, extra]).reshape(kappa, N)
    sums, counts, total = np.zeros(K), np.zeros(K), 0.0
    for t in range(1, num_rounds + 1):
        if t <= kappa:
            chosen = schedule[t - 1]
        else:
            index = sums / counts + np.sqrt((N + 1) * np.log(t) / counts)
            chosen = np.argpartition(-index, N - 1)[:N]
        raw = (
            5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=K)))
            + 5e3 / (15e3 * np.log2(1 + snr * rng.exponential(size=K)))
            + 2.0 / rng.uniform(low, high)
        )
        latency = np.minimum(raw, deadline)
        sums[chosen] += 1.0 - latency[chosen] / deadline
        counts[chosen] += 1.0
        total += latency[chosen].max()
    return total
