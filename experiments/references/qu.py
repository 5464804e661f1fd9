"""NumPy reference of COCS on the hierarchical network of Qu et al., and the exact assignment.

`numpy_cocs_trial` is what `launch.qu_speed` and `launch.bench --policies=cocs` time the jitted
`bandits.cocs` on `fedjax_sel.envs.hierarchical` against (Fig. 3's bandit-only setting: N = 50
clients, M = 3 edge servers, MNIST constants): one trial at a time, a Python loop over rounds,
each round's draws vectorised over the client-server pairs. `tests/test_qu_speed.py` checks
that it agrees with the jitted run in distribution. `assignment_milp`, the exact optimum of
Qu et al.'s assignment problem, validates the assignment kernels of `fedjax_sel.ops`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import bandits
from experiments.references import jitted
from fedjax_sel import envs
from fedjax_sel.envs.hierarchical import PRESETS as HIERARCHICAL_PRESETS
from fedjax_sel.envs.hierarchical import rate_bounds

NUM_CLIENTS_COCS = 50  # N of Fig. 3 (M = 3 servers)


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


def numpy_trial_cocs(rng: np.random.Generator, num_rounds: int) -> dict[str, float]:
    """One trial of `numpy_cocs_trial` on Fig. 3's network: its utility and pseudo-regret."""
    utility, regret = numpy_cocs_trial(rng, num_rounds, NUM_CLIENTS_COCS)
    return {"cumulative_reward": utility, "cumulative_regret": regret}


def jax_run_cocs(num_trials: int, num_rounds: int, seed: int) -> Callable[[], dict[str, float]]:
    """The jitted `bandits.cocs` on `envs.hierarchical` (Fig. 3), built once: a call runs
    `num_trials` trials and returns the mean of `numpy_trial_cocs`'s metrics."""
    n = NUM_CLIENTS_COCS
    return jitted.run_means(
        bandits.cocs(n),
        envs.hierarchical(n),
        num_trials,
        num_rounds,
        seed,
        ("cumulative_reward", "cumulative_regret"),
    )
