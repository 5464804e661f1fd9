r"""NumPy reference of CC-MAB scheduling (Chen et al., Entropy 2025) on its Sec. 7.1 delays.

What a careful researcher writes without JAX: one trial at a time, a Python loop over
rounds, each round vectorised over the clients and the servers. It runs the environment
of `fedjax_sel.envs.dfl_delay` and the policy of `bandits.dfl_ccmab` in the setting of
Fig. 4 (`experiments.reproductions.chen`, "calibrated"): S = 3 edge servers of 6 clients
each (K = 18), N = 2 scheduled per server, every client available, alpha = 1, D = 2,
G = G_T and the exploration scale c_E = 0.01.

The instance (Sec. 7.1, spec A7): client k in cell k // 6, uniform in the cell's strip
of the 500 m square with the server at its centre, distance clipped at 10 m, path loss
PL[dB] = 128.1 + 37.6 log10(d / km); CPU cycles per sample :math:`s_k \sim U[10, 30]
\times 10^6`. Round t:

- context (Sec. 5.1): activity :math:`I_k(t) \sim U\{0..10\}`, data
  :math:`D_k(t) \sim U\{1..3333\}`, :math:`x = (I/10, D/3333)`, grid cell
  :math:`g_i = \min(\lfloor x_i G \rfloor, G - 1)` (in integers), flat :math:`g_1 G + g_2`;
- each server explores when a client of its cell has fewer than
  :math:`E(t) = \max(1, c_E t^{2/5} \ln t)` observations in its grid cell (eq. 16): N of
  the under-explored at random, or all of them and the rest by smallest sample mean (eq.
  15); else its N smallest sample means (eq. 17); ties uniformly at random;
- delays (eqs. 6-11): :math:`\tau_k = \min\{m/(B R^D_k) + m/(B R^U_k) + s_k D_k(t)
  (1 + I_k(t))/\varphi, \tau_{max}\}`, :math:`R = \log_2(1 + p |\xi|^2 / (PL\,
  \sigma^2))`, :math:`|\xi|^2 \sim` Exp(1) per client, round and link, m = 5e3 bits,
  B = 1 MHz, :math:`p^U` = 10 mW, :math:`p^D` = 1 W, :math:`\sigma^2` = -173 dBm/Hz
  times B, :math:`\varphi = 2 \times 10^{11}`, :math:`\tau_{max}` = 5 s;
- the round delay is the slowest scheduled client (eq. 12); the scheduled clients'
  delays update their grid cell's counter and sum.

The metrics are the environment's: the cumulative delay, the regret against the
"Optimal client selection" of Sec. 7.1 (each server's N fastest realised delays; with
this oracle the pseudo-regret and the realised regret coincide), the deadline misses,
Jain's index and the least selection fraction. The random streams differ from the
jitted run's, so the two agree in distribution (`tests/test_huang_chen_reference.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from experiments.references.fairness import selection_totals
from experiments.reproductions import chen

NUM_SERVERS = chen.NUM_SERVERS
PER_SERVER = chen.PER_SERVER
CELL_SIZE = 6  # K_s of Fig. 4
NUM_CLIENTS_DFL_CCMAB = NUM_SERVERS * CELL_SIZE
EXPLORATION_SCALE = chen.SCALES["calibrated"]
TAU_MAX, MODEL_BITS, BANDWIDTH_HZ = 5.0, 5e3, 1e6
UPLINK_W, DOWNLINK_W, COMPUTE_HZ = 0.01, 1.0, 2e11
NOISE_W = 10 ** ((-173.0 + 10 * np.log10(BANDWIDTH_HZ) - 30) / 10)
CYCLES_PER_SAMPLE = (10e6, 30e6)
MAX_ACTIVITY, SHARD_SIZE = 10, 3333
AREA_M, MIN_DISTANCE_M = 500.0, 10.0
METRICS = (
    "cumulative_latency",
    "cumulative_regret",
    "cumulative_failed",
    "jain_index",
    "min_selection_fraction",
)


def grid_size(horizon: int) -> int:
    """G_T = ceil(T^{1/(3 alpha + D)}) with alpha = 1, D = 2 (Sec. 6.2): the least G >= 1
    with G^5 >= T, in integers."""
    g = 1
    while g**5 < horizon:
        g += 1
    return g


def grid_cell(activity: np.ndarray, samples: np.ndarray, grid: int) -> np.ndarray:
    """int64[K]: the flat grid cell g_1 G + g_2 of the contexts (I/10, D/3333) (Sec. 5.1),
    g_i = min(floor(x_i G), G - 1), in integers.

    Equal to `bandits.dfl_ccmab.grid_index` of the environment's f32 contexts at G = 2
    and 5 (the test's horizon and Fig. 4's); at G = 3, 6 and 9 the f32 quotient puts
    D = 1111 and 2222 one part lower there (and some multiples of 303 at G = 11).

    Args:
      activity: int[K], I_k(t) in 0..10.
      samples: int[K], D_k(t) in 1..3333.
      grid: G >= 1.
    """
    first = np.minimum(activity * grid // MAX_ACTIVITY, grid - 1)
    return first * grid + np.minimum(samples * grid // SHARD_SIZE, grid - 1)


def numpy_trial_dfl_ccmab(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of CC-MAB scheduling on Chen et al.'s Fig. 4 setting (module docstring).

    The grid is G_T of the horizon `num_rounds`, as the reproduction sets it.

    Args:
      rng: the trial's generator.
      num_rounds: T >= 1.

    Returns:
      The trial's `METRICS`, named like the jitted run's totals.
    """
    s, n, size, k = NUM_SERVERS, PER_SERVER, CELL_SIZE, NUM_CLIENTS_DFL_CCMAB
    g = grid_size(num_rounds)
    u = rng.random((k, 2))
    strip = AREA_M / s
    distance = np.maximum(
        np.hypot((u[:, 0] - 0.5) * strip, (u[:, 1] - 0.5) * AREA_M), MIN_DISTANCE_M
    )
    path_gain = 10.0 ** (-(128.1 + 37.6 * np.log10(distance / 1000.0)) / 10.0)
    cycles = rng.uniform(*CYCLES_PER_SAMPLE, k)
    counts = np.zeros((k, g * g))
    sums = np.zeros((k, g * g))
    clients = np.arange(k)
    first = np.arange(0, k, size)[:, None]
    in_cell = np.tile(np.arange(size), (s, 1))
    pulls = np.zeros(k)
    latency = regret = failed = 0.0
    per_hz = MODEL_BITS / BANDWIDTH_HZ
    for t in range(1, num_rounds + 1):
        activity = rng.integers(0, MAX_ACTIVITY + 1, k)
        samples = rng.integers(1, SHARD_SIZE + 1, k)
        cell = grid_cell(activity, samples, g)
        count = counts[clients, cell]
        estimate = sums[clients, cell] / np.maximum(count, 1.0)  # eq. (15)
        under = count < max(1.0, EXPLORATION_SCALE * t**0.4 * np.log(t))  # eq. (16)
        # Under-explored first, then smallest means (eq. 17); a random order within each
        # cell makes the ties at the N-th place uniform.
        priority = np.where(under, -np.inf, estimate).reshape(s, size)
        order = rng.permuted(in_cell, axis=1)
        top = np.argpartition(np.take_along_axis(priority, order, 1), n - 1, axis=1)[:, :n]
        chosen = (np.take_along_axis(order, top, 1) + first).ravel()
        # Eqs. (6)-(11) with Rayleigh block fading; the oracle needs every client's delay.
        fading = rng.exponential(size=(2, k))
        with np.errstate(divide="ignore"):
            raw = (
                per_hz / np.log2(1.0 + DOWNLINK_W * path_gain * fading[0] / NOISE_W)
                + per_hz / np.log2(1.0 + UPLINK_W * path_gain * fading[1] / NOISE_W)
                + cycles * samples * (1.0 + activity) / COMPUTE_HZ
            )
        tau = np.minimum(raw, TAU_MAX)
        best = np.partition(tau.reshape(s, size), n - 1, axis=1)[:, n - 1].max()
        latency += tau[chosen].max()  # eq. (12)
        regret += tau[chosen].max() - best
        failed += np.count_nonzero(raw[chosen] > TAU_MAX)
        counts[chosen, cell[chosen]] += 1.0
        sums[chosen, cell[chosen]] += tau[chosen]
        pulls[chosen] += 1.0
    return {
        "cumulative_latency": latency,
        "cumulative_regret": regret,
        "cumulative_failed": failed,
        **selection_totals(pulls, num_rounds),
    }


@functools.cache
def jitted_setting(num_rounds: int):
    """(`Env`, `Selector`): `envs.dfl_delay` and `bandits.dfl_ccmab` (horizon
    `num_rounds`) in the setting of `numpy_trial_dfl_ccmab`, the same objects every call
    with the same `num_rounds` (so `simulate` compiles them once)."""
    import bandits
    from fedjax_sel import envs

    env = envs.dfl_delay(NUM_CLIENTS_DFL_CCMAB, PER_SERVER, num_servers=NUM_SERVERS)
    policy = bandits.dfl_ccmab(
        NUM_CLIENTS_DFL_CCMAB,
        PER_SERVER,
        num_servers=NUM_SERVERS,
        horizon=num_rounds,
        exploration_scale=EXPLORATION_SCALE,
    )
    return env, policy


def jax_run_dfl_ccmab(
    num_trials: int, num_rounds: int, seed: int
) -> Callable[[], dict[str, float]]:
    """The jitted CC-MAB scheduling in the setting of `numpy_trial_dfl_ccmab`.

    Builds the environment and the policy once (`jitted_setting`); the call runs
    `fedjax_sel.simulate` (compiled on the first call only) and returns the mean over
    trials of `METRICS`.
    """
    import fedjax_sel

    env, policy = jitted_setting(num_rounds)

    def run() -> dict[str, float]:
        res = fedjax_sel.simulate(policy, env, num_rounds, num_trials, seed=seed, progress=None)
        return {name: res.final("policy", name)[0] for name in METRICS}

    return run
