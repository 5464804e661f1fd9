r"""NumPy references of Oort and Power-of-Choice on the heterogeneous-device environment.

What `launch.beyond_speed` and `launch.bench --policies=oort` time the jitted `bandits.oort`
and `bandits.power_of_choice` (`pow-d`) on `fedjax_sel.envs.devices` against: each is what a
careful researcher writes without JAX, one trial at a time, a Python loop over rounds, each
round vectorised over the clients (`np.partition` / `np.argpartition` for order statistics,
never a full sort over N), the samples without replacement drawn with
`Generator.choice(replace=False, p=...)` (successive sampling, the law of the jitted
selectors' Gumbel-top-k).

The environment is `envs.devices` at its defaults, bandit-only (its module docstring has the
equations): lognormal compute speeds c_i (median 50 ms per sample, log-scale 0.8), bandwidths
w_i (5,000 kbit/s, 1.0) and data sizes n_i (200 examples, 1.0; rounded, at least 1) drawn per
trial; nominal duration :math:`d_i = 3 B L c_i / 1000 + 2 M / w_i` (B = 30, L = 20,
M = 20,000 kbit), deterministic; a Markov on/off availability per client (P(off -> on) 0.2,
P(on -> off) 0.05, started stationary); exponential online sessions of mean 3,600 s, so that a
started client completes with probability :math:`e^{-(P_t + d_i) / 3600}`; probes
:math:`\pi_i = M / w_i + e_i c_i / 1000` charged before the round (:math:`P_t` the slowest);
over-commitment keeping the K fastest completed clients (ties to the lower index); a round of
:math:`P_t + d_{(K)}`, or :math:`P_t` + 60 s when nobody is kept. The loss surrogate:
:math:`\ell_{t,i} = 0.1 + s_t + u_{t,i}` with lognormal initial gaps :math:`u_{1,i}` (median
0.5, log-scale 1.0), :math:`s_1 = 1.5`; a kept client's gap shrinks by 0.3, the shared part by
:math:`0.02 |S_t| / K`; the global loss :math:`L_{t+1} = 0.1 + s_{t+1} + \sum_i p_i u_{t+1,i}`.
A kept client reports "loss_rms_last_batch" :math:`\varepsilon' \sqrt 2\, b` (b its loss after
the round, :math:`\varepsilon'` the lognormal noise of a mean of :math:`\min(B, |B_i|)`
per-example losses of coefficient of variation 1), what Oort reads.

The policies:

- `oort`: FedScale's `getTopK`, `pacer` and feedback as `bandits.oort` documents them, at its
  defaults (`exhausted="stale"`, the last batch's loss): the first round uniformly random, the
  pacer over the exploited clients' mean utility, the preferred duration at the pacer's
  percentile, `get_norm`'s clip (0.9-quantile), minimum and range, the staleness bonus and the
  duration penalty, epsilon 0.9 -> 0.3 by x0.98, the cut-off pool (0.05, at least 10 e + 1),
  exploitation and exploration (the 5x window by initial utility) sampled in proportion, the
  straggler's utility the kept clients' mean, stamped one round later.
- `pow_d`: d = min(2m, N) candidates among the available clients by data fraction, the m of
  highest loss among them (the full-data loss of `info["loss"]`), every candidate's data size
  probed and charged.

They match the jitted code in distribution, not bit for bit (the random streams differ, and
the references break ties by `argpartition`'s order where the jitted code takes the lower
index): `tests/test_beyond_speed.py` checks the mean global loss and the mean cumulative round
duration against `fedjax_sel.simulate`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

import bandits
from experiments.references import jitted
from fedjax_sel import envs

POLICIES = ("oort", "pow_d")
# `launch.beyond_speed`'s default setting at N = 1,000 clients, K = 10 kept of m = int(1.3 K).
NUM_CLIENTS_OORT, OORT_KEPT = 1000, 10

# `envs.devices`' defaults (its signature).
COMPUTE_MS = (50.0, 0.8)  # median, log-scale
BANDWIDTH_KBPS = (5000.0, 1.0)
DATA_SIZE = (200.0, 1.0)
GAP = (0.5, 1.0)
MODEL_KBIT, BATCH, LOCAL_STEPS, AUGMENTATION = 20000.0, 30, 20, 3.0
TURN_ON, TURN_OFF = 0.2, 0.05
MEAN_SESSION_S, IDLE_S = 3600.0, 60.0
LOSS_FLOOR, SHARED_LOSS, OWN_RATE, SHARED_RATE = 0.1, 1.5, 0.3, 0.02
KAPPA = 1.0  # the coefficient of variation of per-example losses


class Devices:
    """One trial of `envs.devices` at its defaults: devices, availability, losses, clock."""

    def __init__(self, rng: np.random.Generator, num_clients: int, num_kept: int):
        n = num_clients
        self.n, self.k = n, num_kept
        self.compute_ms = COMPUTE_MS[0] * np.exp(COMPUTE_MS[1] * rng.standard_normal(n))
        self.bandwidth = BANDWIDTH_KBPS[0] * np.exp(BANDWIDTH_KBPS[1] * rng.standard_normal(n))
        raw = DATA_SIZE[0] * np.exp(DATA_SIZE[1] * rng.standard_normal(n))
        self.data_size = np.maximum(np.round(raw), 1.0)
        self.gap = GAP[0] * np.exp(GAP[1] * rng.standard_normal(n))
        self.num_samples = np.minimum(self.data_size, BATCH * LOCAL_STEPS)
        self.data_fraction = self.data_size / self.data_size.sum()
        self.duration = (
            AUGMENTATION * BATCH * LOCAL_STEPS * self.compute_ms / 1000.0
            + 2.0 * MODEL_KBIT / self.bandwidth
        )
        self.online = rng.random(n) < TURN_ON / (TURN_ON + TURN_OFF)
        self.shared = SHARED_LOSS

    def observe(self, rng: np.random.Generator) -> np.ndarray:
        """bool[N], this round's availability (one Markov step from the last round's)."""
        u = rng.random(self.n)
        self.online = np.where(self.online, u >= TURN_OFF, u < TURN_ON)
        return self.online

    def loss(self) -> np.ndarray:
        """f32[N], every client's loss of the global model (`info["loss"]`)."""
        return LOSS_FLOOR + self.shared + self.gap

    def step(self, rng, selected: np.ndarray, probed: np.ndarray | None):
        """One round. `selected`: int[<= m] distinct available clients; `probed`: int[d]
        available clients asked for their full-data loss first, or None.

        Returns:
          (round duration s, global loss after the round, clients int[c] that completed,
          their durations f64[c], whether each was kept bool[c], the kept clients'
          "loss_rms_last_batch" f64[c] (0 for stragglers)).
        """
        probe_s = 0.0
        if probed is not None and probed.size:
            cost = (
                MODEL_KBIT / self.bandwidth[probed]
                + self.data_size[probed] * self.compute_ms[probed] / 1000.0
            )
            probe_s = float(cost.max())
        index = np.sort(selected)
        duration = self.duration[index]
        alive = rng.random(index.size) < np.exp(-(probe_s + duration) / MEAN_SESSION_S)
        index, duration = index[alive], duration[alive]
        # The K fastest completed, ties to the lower index (a stable sort of <= m values).
        kept = np.zeros(index.size, bool)
        kept[np.argsort(duration, kind="stable")[: self.k]] = True
        num_kept = int(kept.sum())
        round_s = probe_s + (duration[kept].max() if num_kept else IDLE_S)
        gap = self.gap[index]
        after = LOSS_FLOOR + self.shared + (1.0 - OWN_RATE) * gap
        last = np.minimum(BATCH, self.num_samples[index])
        sigma = np.sqrt(np.log1p(KAPPA * KAPPA / last))
        noise = np.exp(sigma * rng.standard_normal(index.size) - 0.5 * sigma * sigma)
        rms_last = np.where(kept, noise * math.sqrt(1.0 + KAPPA * KAPPA) * after, 0.0)
        self.gap[index[kept]] *= 1.0 - OWN_RATE
        self.shared *= 1.0 - SHARED_RATE * num_kept / self.k
        loss = LOSS_FLOOR + self.shared + float(self.data_fraction @ self.gap)
        return round_s, loss, index, duration, kept, rms_last


def _top(values: np.ndarray, size: int) -> np.ndarray:
    """int[size]: positions of the `size` largest of `values` (any order)."""
    if size >= values.size:
        return np.arange(values.size)
    return np.argpartition(-values, size - 1)[:size]


def _kth_largest(values: np.ndarray, k: int) -> float:
    return float(np.partition(values, values.size - k)[values.size - k])


def _choice(rng, clients: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """`size` of `clients` without replacement, P proportional to `weights` (successive
    sampling), never a zero-weight client (fewer if too few weigh anything)."""
    clients, weights = clients[weights > 0], weights[weights > 0]
    size = min(size, clients.size)
    if size == 0:
        return clients[:0]
    return rng.choice(clients, size, replace=False, p=weights / weights.sum())


class Oort:
    """FedScale's Oort training selector at its defaults (`bandits.oort`), m a round."""

    def __init__(self, num_clients: int, num_selected: int):
        n = num_clients
        self.n, self.m = n, num_selected
        self.reward = np.zeros(n)
        self.duration = np.zeros(n)
        self.time_stamp = np.zeros(n)
        self.count = np.zeros(n, np.int64)
        self.successful = np.zeros(n, bool)
        self.explored = np.zeros(n, bool)
        self.exploited = np.zeros(n, bool)
        self.threshold, self.history, self.calls, self.selections = 30.0, [], 0, 0
        self.epsilon, self.round = 0.9, 0

    def select(self, rng, t: int, available: np.ndarray, env: Devices) -> np.ndarray:
        """int[<= m], the clients of round t (1-based)."""
        self.round, self.selections = t, self.selections + 1
        candidates = np.flatnonzero(available)
        if candidates.size <= self.m:
            return candidates
        if self.selections == 1:
            return rng.choice(candidates, self.m, replace=False)
        return self._call(rng, available, env)

    def _call(self, rng, available, env):
        """FedScale's `getTopK`: pacer, scores, exploitation and exploration."""
        self.calls += 1
        c, m = self.calls, self.m
        reported = self.count > 0
        reward = np.where(reported, self.reward, env.num_samples)
        duration = np.where(reported, self.duration, env.duration)
        # Pacer: every pacer_step-th call from 2 pacer_step on, the threshold moves.
        hit = self.exploited & self.successful
        self.history.append(reward[hit].sum() / (1e-4 + hit.sum()))
        if c >= 40 and c % 20 == 0:
            last, current = sum(self.history[-40:-20]), sum(self.history[-20:])
            if abs(current - last) <= last * 0.1:
                self.threshold = min(100.0, self.threshold + 5.0)
            elif abs(current - last) >= last * 5.0:
                self.threshold = max(5.0, self.threshold - 5.0)
        self.history = self.history[-40:]
        prefer = math.inf
        if self.threshold < 100.0:
            at = min(int(self.n * self.threshold / 100.0), self.n - 1)
            prefer = float(np.partition(duration, at)[at])
        # get_norm over the available clients of positive utility.
        moving = reward[available & (reward > 0)]
        if moving.size:
            at = min(int(moving.size * 0.9), moving.size - 1)
            clip = float(np.partition(moving, at)[at])
            low, high = moving.min() * 0.999, moving.max()
        else:
            clip = low = high = 0.0
        spread = max(high - low, 1e-4)
        penalty = np.where(duration > prefer, (prefer / np.maximum(1e-4, duration)) ** 2.0, 1.0)
        explored = np.flatnonzero(available & reported)
        score = (np.minimum(reward[explored], clip) - low) / spread + np.sqrt(
            0.1 * math.log(c) / self.time_stamp[explored]
        )
        score = np.abs(score * penalty[explored])
        self.epsilon = max(self.epsilon * 0.98, 0.3)
        exploit_len = min(m - int(m * self.epsilon), explored.size)
        cut_off = 0.0
        if exploit_len < explored.size:
            cut_off = _kth_largest(score, exploit_len + 1) * 0.05
        pool = max(int((score >= cut_off).sum()), min(explored.size, 10 * exploit_len + 1))
        top = _top(score, pool)
        exploit = _choice(rng, explored[top], score[top], exploit_len)
        # Exploration among the available unexplored, by initial utility in a 5x window.
        unexplored = np.flatnonzero(available & ~reported)
        if unexplored.size:
            take = min(unexplored.size, m - exploit.size)
            initial = reward[unexplored] * penalty[unexplored]
            window = _top(initial, min(int(take * 5.0), unexplored.size))
            explore = _choice(rng, unexplored[window], initial[window], take)
            self.explored = np.zeros(self.n, bool)
            self.explored[explore] = True
        self.exploited = np.zeros(self.n, bool)
        self.exploited[exploit] = True
        self.successful = np.zeros(self.n, bool)
        if unexplored.size:
            return np.flatnonzero(self.explored | self.exploited)
        # The last list rejoins within the m - e free slots, drawn uniformly.
        left = np.flatnonzero(self.explored & available & ~self.exploited)
        room = m - exploit.size
        rejoin = rng.choice(left, min(room, left.size), replace=False)
        return np.union1d(rejoin, exploit)

    def update(self, clients, duration, kept, rms_last, env: Devices) -> None:
        """FedScale's feedback: utility |B_i| x the last batch's RMS loss of the kept, their
        mean for the stragglers (stamped a round later), every completed client's duration."""
        utility = env.num_samples[clients] * rms_last
        mean = utility[kept].sum() / max(int(kept.sum()), 1)
        self.reward[clients] = np.where(kept, utility, mean)
        self.duration[clients] = duration
        self.time_stamp[clients] = np.where(kept, self.round, self.round + 1.0)
        self.count[clients] += 1
        self.successful[clients] = True


class PowD:
    """Power-of-Choice `pow-d` (`bandits.power_of_choice`), d = min(2m, N) candidates."""

    def __init__(self, num_clients: int, num_selected: int):
        self.m, self.d = num_selected, min(2 * num_selected, num_clients)
        self.probed = None

    def select(self, rng, t, available, env: Devices) -> np.ndarray:
        del t
        eligible = np.flatnonzero(available)
        candidates = _choice(rng, eligible, env.data_fraction[eligible], self.d)
        self.probed = candidates
        return candidates[_top(env.loss()[candidates], self.m)]

    def update(self, clients, duration, kept, rms_last, env) -> None:
        del clients, duration, kept, rms_last, env


def trial(
    rng: np.random.Generator,
    policy: str,
    num_clients: int,
    num_selected: int,
    num_kept: int,
    num_rounds: int,
) -> tuple[np.ndarray, float]:
    """One trial: (global loss after each round f64[T], cumulative round duration s)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}.")
    env = Devices(rng, num_clients, num_kept)
    selector = (Oort if policy == "oort" else PowD)(num_clients, num_selected)
    losses, clock = np.empty(num_rounds), 0.0
    for t in range(1, num_rounds + 1):
        available = env.observe(rng)
        selected = selector.select(rng, t, available, env)
        probed = getattr(selector, "probed", None)
        round_s, losses[t - 1], clients, duration, kept, rms_last = env.step(rng, selected, probed)
        selector.update(clients, duration, kept, rms_last, env)
        clock += round_s
    return losses, clock


def numpy_trial_oort(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One `trial` of Oort at N = 1,000, K = 10 kept of m = 13: the global loss after the last
    round and the cumulative round duration (s)."""
    m = int(1.3 * OORT_KEPT)
    losses, clock = trial(rng, "oort", NUM_CLIENTS_OORT, m, OORT_KEPT, num_rounds)
    return {"loss": float(losses[-1]), "cumulative_latency": float(clock)}


def jax_run_oort(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """The jitted `bandits.oort` on `envs.devices` at N = 1,000, K = 10 kept of m = 13, built
    once; a call returns the mean over trials of `numpy_trial_oort`'s metrics."""
    n, k = NUM_CLIENTS_OORT, OORT_KEPT
    m = int(1.3 * k)
    env = envs.make("devices", n, m, num_kept=k)
    return jitted.run_means(
        bandits.make("oort", n, m), env, num_trials, num_rounds, seed,
        ("cumulative_latency",), last_round=("loss",),
    )  # fmt: skip
