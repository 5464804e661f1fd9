"""Argument checks run in Python, before anything is traced.

Every factory and the runner call these so that bad input fails at once with one clear
message naming the argument and the allowed range.
"""

from __future__ import annotations

import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    """Returns `value` as an int, or raises if it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    return int(value)


def int_in_range(name: str, value, low: int, high: int) -> int:
    """Returns `value` as an int, or raises if it is not an integer in [low, high]."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not (low <= value <= high)
    ):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}.")
    return int(value)


def num_selected(value, num_clients: int, name: str = "num_selected") -> int:
    """Checks a cohort size against the number of clients: 1 <= k <= N."""
    return int_in_range(name, value, 1, num_clients)


def float_in_range(name: str, value, low: float, high: float, *, low_open: bool = False) -> float:
    """Returns `value` as a finite float, or raises if it lies outside [low, high] (or (low, high]).

    Infinity and NaN are refused even where `high` or `low` is infinite (an unbounded range).
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}.") from None
    bad = (v <= low if low_open else v < low) or v > high or not np.isfinite(v)
    if bad:
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{name} must lie in {bracket}{low}, {high}] and be finite, got {value!r}."
        )
    return v


def positive_float(name: str, value) -> float:
    """Returns `value` as a float, or raises if it is not > 0 and finite."""
    return float_in_range(name, value, 0.0, float("inf"), low_open=True)


def probability(name: str, value) -> float:
    """A single probability in [0, 1]."""
    return float_in_range(name, value, 0.0, 1.0)


def array_in_range(
    name: str, value, shape: tuple[int, ...], low: float = -np.inf, high: float = np.inf
) -> np.ndarray:
    """Returns `value` as a float32 array of `shape` with finite entries in [low, high]."""
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of numbers, got {value!r}.") from None
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr < low) or np.any(arr > high):
        raise ValueError(
            f"{name} must have every entry in [{low}, {high}] and finite, got min {arr.min()}, "
            f"max {arr.max()}."
        )
    return arr


def probabilities(name: str, value, num_clients: int) -> np.ndarray:
    """A scalar probability broadcast to f32[N], or an f32[N] of probabilities."""
    arr = np.asarray(value, dtype=np.float32)
    if arr.ndim == 0:
        arr = np.full((num_clients,), arr, np.float32)
    return array_in_range(name, arr, (num_clients,), 0.0, 1.0)


def group_size(num_clients: int, num_groups, name: str = "num_servers") -> int:
    """Checks that `num_groups` equal contiguous groups (cells) split N; returns N / groups."""
    g = int_in_range(name, num_groups, 1, num_clients)
    if num_clients % g:
        raise ValueError(
            f"{name} must divide num_clients={num_clients} (equal cells of clients), got {g}."
        )
    return num_clients // g


def choice(name: str, value, allowed: tuple[str, ...]) -> str:
    """Returns `value`, or raises if it is not one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}.")
    return value


def expected_schedulable(num_selected: int, availability) -> float:
    """E[min{N, |A(t)|}] for independent Bernoulli(alpha_k) availability (exact, f64).

    Args:
      num_selected: N.
      availability: f64[K], alpha_k.
    """
    alpha = np.asarray(availability, np.float64)
    # Distribution of |A(t)|, a Poisson binomial, by convolution over the clients.
    dist = np.ones(1)
    for a in alpha:
        dist = np.convolve(dist, [1.0 - a, a])
    return float(np.minimum(np.arange(dist.size), num_selected) @ dist)


def check_fairness(fairness, num_selected: int, availability) -> np.ndarray:
    """Validates fairness targets c (eq. 6) against what any policy can schedule.

    Necessary conditions for feasibility: 0 <= c_k < 1, c_k <= alpha_k (a client is
    selected only when available) and sum_k c_k <= E[min{N, |A(t)|}] (the expected
    number of clients a round can schedule, eq. 10).

    Args:
      fairness: f32[K], c_k.
      num_selected: N.
      availability: f32[K], alpha_k.

    Returns:
      f64[K], the targets.
    """
    alpha = np.asarray(availability, np.float64)
    c = array_in_range("fairness", fairness, alpha.shape, 0.0, 1.0).astype(np.float64)
    if np.any(c >= 1.0):
        raise ValueError(f"fairness targets c_k must lie in [0, 1), got {c.tolist()}.")
    above = np.nonzero(c > alpha + 1e-6)[0]
    if above.size:
        k = int(above[0])
        raise ValueError(
            f"fairness target c_{k} = {c[k]:g} exceeds the availability alpha_{k} = "
            f"{alpha[k]:g} of client {k}: infeasible (c_k <= alpha_k is required)."
        )
    capacity = expected_schedulable(num_selected, alpha)
    if c.sum() > capacity + 1e-6:
        raise ValueError(
            f"fairness targets sum to {c.sum():g}, above the expected number of schedulable "
            f"clients E[min(N, |A|)] = {capacity:g}: infeasible."
        )
    return c


def require(value, field: str, *, policy: str):
    """Returns `value`, a `RoundInput` (or `Feedback`) field a policy reads, or raises if
    the environment leaves it None.

    Policies call it while they are traced (in `select` or `update`), so that a policy
    run on an environment that lacks what it needs fails before anything runs:

        context = validation.require(inp.context, "context", policy="rbcs_f")

    Raises:
      ValueError: naming the field and the policy.
    """
    if value is None:
        raise ValueError(
            f"policy {policy!r} reads RoundInput.{field}, which this environment does not "
            f"provide (it is None); use an environment that fills it."
        )
    return value
