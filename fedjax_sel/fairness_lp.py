r"""The fairness-constrained benchmark r* of Xia et al. (2020), LP 23.

An A-only policy chooses the cohort S from the available set A(t) alone, with
probabilities q_S(e) for A(t) = e. The best such policy under the fairness targets c
solves (eq. 23, cohorts restricted to |S| = min{N, |e|} as in eq. 10)

.. math::
   r^* = \max_q \sum_e P_A(e) \sum_{S} q_S(e) \mu(S) \quad \text{s.t.} \quad
   \sum_e P_A(e) \sum_{S \ni k} q_S(e) \ge c_k \;\forall k, \quad \sum_S q_S(e) = 1,

with :math:`\mu(S) = \min_{k \in S} \mu_k` and :math:`\mu(\emptyset) = 1` (an empty round
has the value 1 for every policy, as in `fedjax_sel.envs.wireless_latency`). The
non-ideal regret (eq. 25) is :math:`T r^* - E[\sum_t r(S(t))]`.

`heuristic_targets` sets the targets c from the clients' dataset sizes (§II.C).

Two solvers: `optimal_fair_value` enumerates all 2^K availability patterns and cohorts
and solves the LP exactly (small K); `optimal_fair_value_dual` minimizes the Lagrangian
dual over a sample of patterns (sample-average approximation, K = 20).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from fedjax_sel import validation

# Largest K solved by enumeration: 2^K patterns times C(K, N) cohorts.
MAX_EXACT_CLIENTS = 10


def heuristic_targets(sizes, num_selected: int, c_min: float) -> np.ndarray:
    r"""Fairness targets from the clients' dataset sizes, Xia et al. §II.C.

    The client of the smallest dataset, :math:`\hat k = \arg\min_k s_k`, gets
    :math:`c_{\hat k} = c_{\min}`, chosen in

    .. math:: \varphi \frac{N s_{\hat k}}{\sum_k s_k} \le c_{\min} \le
       \frac{N s_{\hat k}}{\sum_k s_k}, \quad 0 \le \varphi < 1,

    and every other client :math:`c_k = (s_k / s_{\hat k})\, c_{\min}` (the paper prints
    "s_k / s_k", read as s_k / s_{k_hat}, spec §2.7). Equivalently
    :math:`c_k = \lambda N s_k / \sum s` with :math:`\lambda = c_{\min} \sum s / (N
    s_{\hat k}) \in [\varphi, 1]`, so the targets sum to :math:`\lambda N`. At the upper
    end they sum to N, the boundary of feasibility (spec A25): a policy's validation
    (`validation.check_fairness`) refuses targets that availability makes infeasible.

    Args:
      sizes: f64[K], the dataset sizes s_k (> 0).
      num_selected: N, clients scheduled per round.
      c_min: the smallest client's target, in [0, N min_k s_k / sum_k s_k].

    Returns:
      f64[K], the targets c_k.

    Raises:
      ValueError: for non-positive sizes or a c_min outside its range.
    """
    s = np.asarray(sizes, np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError(f"sizes must be a non-empty vector of positive sizes s_k, got {sizes}.")
    n_sel = validation.num_selected(num_selected, s.size)
    upper = n_sel * s.min() / s.sum()
    c_min = validation.float_in_range("c_min", c_min, 0.0, upper)
    return s / s.min() * c_min


def _check(means, fairness, num_selected, availability):
    mu = validation.array_in_range("means", means, np.shape(means), 0.0, 1.0).astype(np.float64)
    if mu.ndim != 1:
        raise ValueError(f"means must be a vector f32[K], got shape {mu.shape}.")
    k_all = mu.size
    n_sel = validation.num_selected(num_selected, k_all)
    alpha = validation.probabilities("availability", availability, k_all).astype(np.float64)
    c = np.asarray(fairness, np.float64)
    c = np.full((k_all,), float(c)) if c.ndim == 0 else c
    return mu, n_sel, alpha, validation.check_fairness(c, n_sel, alpha)


def optimal_fair_value(means, fairness, num_selected: int, availability) -> float:
    """r* of LP 23 by enumeration, solved with HiGHS in float64.

    Args:
      means: f64[K], mu_k, K <= MAX_EXACT_CLIENTS.
      fairness: f64[K] (or a scalar), c_k.
      num_selected: N.
      availability: f64[K] (or a scalar), independent Bernoulli availability alpha_k.

    Returns:
      r*, the best expected value per round of an A-only policy meeting the targets.
    """
    mu, n_sel, alpha, c = _check(means, fairness, num_selected, availability)
    k_all = mu.size
    if k_all > MAX_EXACT_CLIENTS:
        raise ValueError(
            f"means has K = {k_all} clients; enumeration supports K <= {MAX_EXACT_CLIENTS}, "
            "use optimal_fair_value_dual."
        )
    values, members, pattern_of = [], [], []
    patterns = list(itertools.product([False, True], repeat=k_all))
    probs = []
    for e, pattern in enumerate(patterns):
        avail = np.asarray(pattern)
        probs.append(float(np.prod(np.where(avail, alpha, 1.0 - alpha))))
        size = min(n_sel, int(avail.sum()))
        for cohort in itertools.combinations(np.flatnonzero(avail), size):
            cohort = list(cohort)
            values.append(float(mu[cohort].min()) if cohort else 1.0)
            members.append(cohort)
            pattern_of.append(e)
    probs = np.asarray(probs)
    weight = probs[pattern_of]
    # Fairness rows: -sum_e P(e) sum_{S containing k} q_S(e) <= -c_k.
    a_ub = np.zeros((k_all, len(values)))
    for j, cohort in enumerate(members):
        a_ub[cohort, j] = -weight[j]
    a_eq = np.zeros((len(patterns), len(values)))
    a_eq[pattern_of, np.arange(len(values))] = 1.0
    result = optimize.linprog(
        -weight * np.asarray(values),
        A_ub=a_ub,
        b_ub=-c,
        A_eq=a_eq,
        b_eq=np.ones(len(patterns)),
        bounds=(0.0, 1.0),
        method="highs",
    )
    if result.status != 0:
        raise ValueError(f"fairness targets {c.tolist()} are infeasible for LP 23.")
    return float(-result.fun)


class DualEstimate(NamedTuple):
    """r* from the Lagrangian dual.

    Attributes:
      value: the dual function at the optimized multipliers, averaged over an
        independent sample of patterns: an unbiased estimate of an upper bound on r*
        (weak duality), tight when the multipliers are optimal.
      stderr: its standard error over that sample.
      multipliers: f64[K], the multipliers lambda_k >= 0 of the fairness constraints.
      gap: the multipliers' certified optimality gap on the fitting sample: the best
        dual value found minus the cutting-plane model's minimum (a lower bound).
      num_cuts: the dual evaluations the cutting-plane method took.
    """

    value: float
    stderr: float
    multipliers: np.ndarray
    gap: float
    num_cuts: int


def _best_cohort_value(mu_sorted, lam, lam_rank, avail, n_sel):
    """max over |S| = min(N, |A|), S in A of mu(S) + sum_{k in S} lambda_k (sorted by mu).

    The best cohort whose bottleneck (least mu) is client p adds to p the n - 1 available
    clients ranked above p with the largest multipliers; the maximum is over p.
    `lam_rank` is i32[K], each client's position in decreasing order of lambda.
    """
    k_all = mu_sorted.shape[0]
    n = jnp.minimum(n_sel, jnp.sum(avail))
    above = jnp.arange(k_all)[None, :] < jnp.arange(k_all)[:, None]  # [p, i]: i ranks above p
    eligible = above & avail[None, :]
    # Eligible clients with more multiplier than i (ties by index), per bottleneck p.
    ahead = lam_rank[:, None] < lam_rank[None, :]  # [j, i]: j before i in lambda order
    rank_among = eligible.astype(jnp.float32) @ ahead.astype(jnp.float32)  # [p, i]
    taken = eligible & (rank_among < n - 1)
    best_others = jnp.sum(jnp.where(taken, lam[None, :], 0.0), axis=1)
    valid = avail & (jnp.sum(eligible, axis=1) >= n - 1)
    candidate = jnp.where(valid, mu_sorted + lam + best_others, -jnp.inf)
    return jnp.where(n > 0, jnp.max(candidate), 1.0)


def optimal_fair_value_dual(
    means,
    fairness,
    num_selected: int,
    availability,
    num_patterns: int = 8192,
    tolerance: float = 1e-5,
    max_cuts: int = 2000,
    seed: int = 0,
) -> DualEstimate:
    r"""r* of LP 23 by its Lagrangian dual over sampled availability patterns.

    By strong duality of the finite LP,

    .. math:: r^* = \min_{\lambda \ge 0} E_A\big[\max_{S} \mu(S) + \textstyle\sum_{k \in S}
       \lambda_k\big] - \lambda^\top c,

    where the inner maximum is over |S| = min{N, |A|} and costs O(K^2) (given the
    bottleneck client, the rest are the available clients of higher mean with the
    largest multipliers). The expectation is replaced by the mean over `num_patterns`
    sampled patterns, a convex piecewise-linear function of lambda, minimized by
    Kelley's cutting-plane method: each evaluation adds the cut f(l_i) + g_i (lambda -
    l_i) <= f(lambda), and the next point minimizes the cuts' maximum (a small LP,
    HiGHS), whose minimum bounds f's from below. It stops when the best value found is
    within `tolerance` of that bound (the reported `gap`). The dual function at the best
    multipliers is then evaluated on a fresh sample of the same size.

    Args:
      means: f64[K], mu_k.
      fairness: f64[K] (or a scalar), c_k.
      num_selected: N.
      availability: f64[K] (or a scalar), alpha_k.
      num_patterns: sampled patterns per estimate, >= 1.
      tolerance: the optimality gap to stop at, > 0.
      max_cuts: dual evaluations at most, >= 1; the gap reached is reported.
      seed: seed of the pattern samples.

    Returns:
      A `DualEstimate`.
    """
    mu, n_sel, alpha, c = _check(means, fairness, num_selected, availability)
    num_patterns = validation.positive_int("num_patterns", num_patterns)
    tolerance = validation.positive_float("tolerance", tolerance)
    max_cuts = validation.positive_int("max_cuts", max_cuts)
    k_all = mu.size
    order = np.argsort(-mu, kind="stable")
    mu_sorted = jnp.asarray(mu[order], jnp.float32)
    c_sorted = jnp.asarray(c[order], jnp.float32)
    alpha_sorted = jnp.asarray(alpha[order], jnp.float32)
    fit_key, eval_key = jax.random.split(jax.random.PRNGKey(seed))

    def sample(key):
        return jax.random.uniform(key, (num_patterns, k_all)) < alpha_sorted

    def per_pattern(lam, patterns):
        lam_rank = jnp.argsort(jnp.argsort(-lam))
        inner = jax.vmap(_best_cohort_value, in_axes=(None, None, None, 0, None))
        return inner(mu_sorted, lam, lam_rank, patterns, n_sel) - lam @ c_sorted

    patterns = sample(fit_key)
    dual = jax.jit(jax.value_and_grad(lambda lam: jnp.mean(per_pattern(lam, patterns))))
    # A box for the first LPs; a multiplier at its edge doubles it (the cuts stay valid).
    bound = 4.0
    lam = np.zeros(k_all)
    cuts, rhs = [], []
    best, best_lam, lower = np.inf, lam, -np.inf
    for _ in range(max_cuts):
        value, grad = (np.asarray(x, np.float64) for x in dual(jnp.asarray(lam, jnp.float32)))
        value = float(value)
        if value < best:
            best, best_lam = value, lam
        # t >= value + grad (lambda - lam)  <=>  grad lambda - t <= grad lam - value.
        cuts.append(np.append(grad, -1.0))
        rhs.append(float(grad @ lam - value))
        result = optimize.linprog(
            np.append(np.zeros(k_all), 1.0),
            A_ub=np.asarray(cuts),
            b_ub=np.asarray(rhs),
            bounds=[(0.0, bound)] * k_all + [(None, None)],
            method="highs",
        )
        lam, lower = result.x[:k_all], float(result.fun)
        if np.any(lam >= bound * (1 - 1e-9)):
            bound *= 2.0
            continue
        if best - lower <= tolerance:
            break
    values = np.asarray(
        jax.jit(per_pattern)(jnp.asarray(best_lam, jnp.float32), sample(eval_key)), np.float64
    )
    multipliers = np.zeros(k_all)
    multipliers[order] = best_lam
    return DualEstimate(
        value=float(values.mean()),
        stderr=float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else 0.0,
        multipliers=multipliers,
        gap=float(best - lower),
        num_cuts=len(cuts),
    )
