"""NumPy references of the stationary-bandit policies: what `launch.bench` measures JAX against.

Each reference is what a careful researcher would write without JAX: one trial at a
time, a Python loop over rounds, every round vectorised over clients with
`np.argpartition` (no sort, no Python loop over clients). The environment is the
stationary Bernoulli one of `fedjax_sel.envs.bernoulli` with full availability: each
trial draws its means uniformly in [0, 1), and a round draws the rewards of the
selected clients only (the others are never observed, so their draws would change
nothing). Pseudo-regret is computed once at the end from how often each client was
selected, which equals the sum of the per-round regrets.

The policies match their `bandits` counterparts in distribution, not bit for bit (the
random streams differ); `tests/test_numpy_reference.py` checks the agreement of the
mean regret.

Ties at the k-th place (`ucb`, `epsilon_greedy`: every client seen once with one
success shares its index) are broken uniformly at random, as the jitted policies do
(`tie_break="uniform"`). `tie_break="position"` keeps the order `np.argpartition`
leaves them in: the leanest reference, a different rule (one that favours no client
on average only because each trial draws its means independently of the indices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from fedjax_sel import validation


class Policy(NamedTuple):
    """A reference policy for one trial, with its state held in mutable NumPy arrays.

    Attributes:
      select: `(t, rng) -> int64[k]`, the distinct clients of round t (1-based).
      update: `(selected int64[k], reward f64[k]) -> None`, records the observations.
    """

    select: Callable[[int, np.random.Generator], np.ndarray]
    update: Callable[[np.ndarray, np.ndarray], None]


def top_k_random_ties(score: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """The k largest entries of `score` (f64[N]), ties at the k-th broken uniformly.

    `np.argpartition` alone resolves ties by position; when the k-th largest value is
    shared across the boundary, the slots left after the strictly larger entries are
    filled by a uniformly random subset of the tied ones.
    """
    n = score.shape[0]
    top = np.argpartition(score, n - k)[n - k :]
    kth = score[top].min()
    if np.count_nonzero(score >= kth) == k:
        return top
    above = np.flatnonzero(score > kth)
    chosen = rng.choice(np.flatnonzero(score == kth), k - above.size, replace=False)
    return np.concatenate([above, chosen])


TIE_BREAKS = ("uniform", "position")
# The references whose selection can tie at the k-th place.
TIE_BREAKING = ("epsilon_greedy", "ucb")


def top_k(score: np.ndarray, k: int, rng: np.random.Generator, tie_break: str) -> np.ndarray:
    """The k largest entries of `score`, ties broken by `tie_break` (`TIE_BREAKS`)."""
    if tie_break == "position":
        return np.argpartition(score, score.shape[0] - k)[score.shape[0] - k :]
    return top_k_random_ties(score, k, rng)


def _counts_and_sums(n: int) -> tuple[np.ndarray, np.ndarray, Callable]:
    counts = np.zeros(n)
    sums = np.zeros(n)

    def update(selected, reward):
        counts[selected] += 1.0
        sums[selected] += reward

    return counts, sums, update


def _stateless(select) -> Policy:
    return Policy(select=select, update=lambda selected, reward: None)


def random(n: int, k: int) -> Policy:
    """k clients uniformly at random (the k largest of N uniforms)."""
    return _stateless(lambda t, rng: np.argpartition(rng.random(n), n - k)[n - k :])


def round_robin(n: int, k: int) -> Policy:
    """Clients (t-1)k, ..., (t-1)k + k - 1 (mod N)."""
    block = np.arange(k)
    return _stateless(lambda t, rng: ((t - 1) * k + block) % n)


def oracle(n: int, k: int, means: np.ndarray) -> Policy:
    """The k clients of largest mean, every round."""
    best = np.argpartition(means, n - k)[n - k :]
    return _stateless(lambda t, rng: best)


def epsilon_greedy(n: int, k: int, epsilon: float = 0.1, tie_break: str = "uniform") -> Policy:
    """With probability epsilon a uniform cohort, else the k best means (unseen first)."""
    counts, sums, update = _counts_and_sums(n)

    def select(t, rng):
        if rng.random() < epsilon:
            return np.argpartition(rng.random(n), n - k)[n - k :]
        score = np.where(counts > 0, sums / counts, np.inf)
        return top_k(score, k, rng, tie_break)

    return Policy(select, update)


def ucb(n: int, k: int, exploration: float = 1.5, tie_break: str = "uniform") -> Policy:
    """CUCB: the top k of mean + sqrt(alpha ln t / T_i), unseen clients first."""
    counts, sums, update = _counts_and_sums(n)

    def select(t, rng):
        index = np.where(
            counts > 0, sums / counts + np.sqrt(exploration * np.log(t) / counts), np.inf
        )
        return top_k(index, k, rng, tie_break)

    return Policy(select, update)


def thompson(n: int, k: int, prior: str = "beta", prior_scale: float = 1.0) -> Policy:
    """Thompson sampling with a Beta(1 + S, 1 + T - S) or Gaussian posterior per client."""
    counts, sums, update = _counts_and_sums(n)

    def select(t, rng):
        if prior == "beta":
            theta = rng.beta(1.0 + sums, 1.0 + counts - sums)
        else:
            theta = sums / (counts + 1.0) + prior_scale / np.sqrt(counts + 1.0) * (
                rng.standard_normal(n)
            )
        return np.argpartition(theta, n - k)[n - k :]

    return Policy(select, update)


REGISTRY = {
    "epsilon_greedy": epsilon_greedy,
    "oracle": oracle,
    "random": random,
    "round_robin": round_robin,
    "thompson": thompson,
    "thompson_gaussian": lambda n, k, **kw: thompson(n, k, prior="gaussian", **kw),
    "ucb": ucb,
}


def run_trial(
    policy: str,
    num_clients: int,
    num_selected: int,
    num_rounds: int,
    rng: np.random.Generator,
    **hyperparameters,
) -> float:
    """One trial on a fresh stationary Bernoulli instance; returns its cumulative regret."""
    n, k = num_clients, num_selected
    means = rng.random(n)
    factory = REGISTRY[policy]
    if policy == "oracle":
        hyperparameters["means"] = means
    select, update = factory(n, k, **hyperparameters)
    plays = np.zeros(n)
    # Division by zero counts is masked by np.where; silence it once, not every round.
    with np.errstate(divide="ignore", invalid="ignore"):
        for t in range(1, num_rounds + 1):
            selected = select(t, rng)
            reward = rng.random(k) < means[selected]
            update(selected, reward)
            plays[selected] += 1.0
    best = np.partition(means, n - k)[n - k :].sum()
    return float(num_rounds * best - plays @ means)


def simulate(
    policy: str,
    num_clients: int,
    num_selected: int,
    num_rounds: int,
    num_trials: int,
    seed: int = 0,
    tie_break: str = "uniform",
    **hyperparameters,
) -> np.ndarray:
    """f64[num_trials], each trial's cumulative pseudo-regret, trials one after another.

    Args:
      policy: a name in `REGISTRY` (the same names as `bandits.REGISTRY`).
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      num_rounds: T >= 1.
      num_trials: M >= 1.
      seed: trial m uses `np.random.default_rng([seed, m])`.
      tie_break: how `TIE_BREAKING` policies break ties at the k-th place, one of
        `TIE_BREAKS` (the others cannot tie, or draw their cohort at random).
      **hyperparameters: the policy's own (epsilon, exploration, prior_scale).
    """
    if policy not in REGISTRY:
        raise ValueError(f"policy must be one of {', '.join(sorted(REGISTRY))}, got {policy!r}.")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}.")
    if policy in TIE_BREAKING:
        hyperparameters["tie_break"] = tie_break
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    num_rounds = validation.positive_int("num_rounds", num_rounds)
    num_trials = validation.positive_int("num_trials", num_trials)
    return np.array(
        [
            run_trial(policy, n, k, num_rounds, np.random.default_rng([seed, m]), **hyperparameters)
            for m in range(num_trials)
        ]
    )
