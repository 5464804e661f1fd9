"""NumPy references of the simulator, for speed comparisons: what JAX is measured against.

Three references live here: the registered stationary-bandit policies (`REGISTRY`,
`simulate`; timed by `experiments.bench`), CS-UCB on the latency model of Xia et al.
(`numpy_cs_ucb_trial`; timed by `launch.xia_speed`) and COCS on the hierarchical network
of Qu et al. (`numpy_cocs_trial`; timed by `launch.qu_speed`). `assignment_milp`, the
exact optimum of Qu et al.'s assignment problem, validates the assignment kernels.

Stationary policies.

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
from fedjax_sel.envs.hierarchical import PRESETS as HIERARCHICAL_PRESETS
from fedjax_sel.envs.hierarchical import rate_bounds
from fedjax_sel.envs.wireless_latency import compute_bounds, snr_db


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


XIA_CLIENTS, XIA_SELECTED = 20, 5  # K and N of Figure 1 of Xia et al.


def numpy_cs_ucb_trial(rng: np.random.Generator, num_rounds: int, deadline: float) -> float:
    """One trial of CS-UCB (Algorithm 1) on Xia et al.'s latency model, in plain NumPy.

    A Python loop over rounds, vectorized over the clients of a round, with the same model
    and policy as `fedjax_sel.envs.wireless_latency` (literal constants, geometry per
    trial) and `bandits.cs_ucb`, K = 20 clients and N = 5 channels. Returns the trial's
    cumulative latency (s).
    """
    K, N = XIA_CLIENTS, XIA_SELECTED
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


def assignment_milp(
    value: np.ndarray, cost: np.ndarray, eligible: np.ndarray, budget: np.ndarray
) -> np.ndarray:
    """The exact optimum of P2 (Qu et al. eq. 10) as an integer programme (HiGHS via scipy).

    For validation of the `fedjax_sel.ops.assignment` kernels on small instances only:
    maximise sum v[n, m] x[n, m] over binary x, each server's selected cost within its
    budget (10b), eligible pairs only (10c), at most one server per client (10d).

    Args:
      value: f[N, M].
      cost: f[N].
      eligible: bool[N, M].
      budget: f[M].

    Returns:
      bool[N, M], an optimal selection.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    n, m = eligible.shape
    c = -np.asarray(value, np.float64).reshape(-1)
    one_server = np.kron(np.eye(n), np.ones((1, m)))
    budgets = np.kron(np.asarray(cost, np.float64)[None, :], np.eye(m))
    constraints = [
        LinearConstraint(one_server, -np.inf, 1.0),
        LinearConstraint(budgets, -np.inf, np.asarray(budget, np.float64)),
    ]
    upper = np.asarray(eligible, np.float64).reshape(-1)
    result = milp(c, constraints=constraints, integrality=np.ones(n * m), bounds=Bounds(0.0, upper))
    if not result.success:
        raise RuntimeError(f"the assignment ILP failed: {result.message}")
    return (result.x.reshape(n, m) > 0.5) & np.asarray(eligible, bool)


def _numpy_max_cardinality(cost, eligible, budget, rng):
    """`ops.assignment.max_cardinality` in NumPy: cheapest client first, to the fullest fit."""
    n, m = eligible.shape
    remaining = budget.astype(np.float64).copy()
    selected = np.zeros((n, m), bool)
    for client in np.lexsort((rng.permutation(n), cost)):
        fits = eligible[client] & (remaining >= cost[client])
        if fits.any():
            server = int(np.argmax(np.where(fits, remaining, -np.inf)))
            selected[client, server] = True
            remaining[server] -= cost[client]
    return selected, remaining


def _numpy_knapsack(value, cost, eligible, budget, rng, cost_step, capacity_units, order=None):
    """`ops.assignment.knapsack` in NumPy: a 0/1 knapsack per server, the servers in
    `order` (None: a random order from `rng`)."""
    n, m = eligible.shape
    units = np.ceil(cost / cost_step - 1e-4).astype(int)
    assigned = np.zeros(n, bool)
    selected = np.zeros((n, m), bool)
    for server in rng.permutation(m) if order is None else order:
        capacity = min(int(budget[server] / cost_step + 1e-4), capacity_units)
        best = np.zeros(capacity_units + 1)
        keep = np.zeros((n, capacity_units + 1), bool)
        for item in range(n):
            v, w = value[item, server], units[item]
            if not eligible[item, server] or assigned[item] or v <= 0 or w > capacity_units:
                continue
            shifted = np.full(capacity_units + 1, -np.inf)
            shifted[w:] = best[: capacity_units + 1 - w] + v
            keep[item] = shifted > best
            best = np.where(keep[item], shifted, best)
        level = capacity
        for item in range(n - 1, -1, -1):
            if keep[item, level]:
                selected[item, server] = True
                assigned[item] = True
                level -= units[item]
    return selected


def numpy_cocs_trial(
    rng: np.random.Generator, num_rounds: int, num_clients: int = 50, num_servers: int = 3
) -> tuple[float, float]:
    """One trial of COCS (Qu et al., Algorithm 1) on their MNIST network, in plain NumPy.

    A Python loop over rounds, each round's draws vectorized over the client-server
    pairs, with the model of `fedjax_sel.envs.hierarchical` (physical generator, D = 2,
    budget 3.5, deadline 3 s, coverage 0.6) and the defaults of `bandits.cocs` (h_T = 5,
    K(t) = t^0.4 log t, per-pair counters, fill-in, knapsack on a 0.05 grid). The two
    assignment steps loop over clients, as they must (each choice changes what fits),
    and skip the clients they cannot take. Figure 3's two curves, as the environment
    computes them: the successes, and the pseudo-regret against the oracle on the exact
    success probabilities p (the knapsack on p, the servers in a fixed order; each
    round's reference the better of its value and the decision's).

    Returns:
      The trial's (number of successful participants, cumulative pseudo-regret).
    """
    n, m, h, budget, step = num_clients, num_servers, 5, 3.5, 0.05
    size, workload, deadline = 0.18, 2.41, 3.0
    rate_high, _ = rate_bounds(HIERARCHICAL_PRESETS["mnist"], 0.0)
    units = int(budget / step + 1e-4)
    price = rng.uniform(0.5, 2.0, n)
    counts = np.zeros((n, m, h * h), np.int64)
    successes = np.zeros((n, m, h * h), np.int64)
    budgets = np.full(m, budget)
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    total, regret = 0, 0.0
    for t in range(1, num_rounds + 1):
        cover = rng.uniform(size=(n, m)) < 0.6
        y = rng.uniform(2.0, 4.0, n)
        cost = price * y
        bw = rng.uniform(0.3, 1.0, n)[:, None]
        distance = rng.uniform(0.01, 2.0, (n, m))
        shadow_db = 8.0 * rng.standard_normal((n, m))
        noise_dbm = -174.0 + 10.0 * np.log10(bw * 1e6)
        snr = 10 ** ((23.0 - 128.1 - 37.6 * np.log10(distance) - shadow_db - noise_dbm) / 10)
        se_down = np.log2(1 + snr * rng.exponential(size=(n, m)))
        se_up = np.log2(1 + snr * rng.exponential(size=(n, m)))
        rate = bw * se_down
        latency = size / rate + (workload / y)[:, None] + size / (bw * se_up)
        success = latency <= deadline
        # P[upload in time | everything but its fading] (the environment's p).
        slack = deadline - size / rate - (workload / y)[:, None]
        with np.errstate(over="ignore", divide="ignore"):
            threshold = np.exp2(size / (bw * np.maximum(slack, 1e-30))) - 1.0
        p = np.where(slack > 0, np.exp(-threshold / snr), 0.0)
        compute = np.broadcast_to(((y - 2.0) / 2.0)[:, None], (n, m))
        context = np.stack([np.clip(rate / rate_high, 0, 1), compute], -1)
        cube = (np.minimum(np.floor(context * h), h - 1).astype(int) * [1, h]).sum(-1)
        count = counts[rows, cols, cube]
        under = cover & (count <= t**0.4 * np.log(t))
        first, remaining = _numpy_max_cardinality(cost, under, budgets, rng)
        estimate = successes[rows, cols, cube] / np.maximum(count, 1)
        estimate = estimate + 1e-6 * rng.uniform(size=(n, m))
        eligible = cover & ~under & ~first.any(1, keepdims=True)
        chosen = first | _numpy_knapsack(estimate, cost, eligible, remaining, rng, step, units)
        counts[rows, cols, cube] += chosen
        successes[rows, cols, cube] += chosen & success
        total += int((chosen & success).sum())
        best = _numpy_knapsack(p, cost, cover, budgets, rng, step, units, order=range(m))
        expected = float(p[chosen].sum())
        regret += max(float(p[best].sum()), expected) - expected
    return float(total), regret
